//! Trace-driven replay: read real request traces (native CSV, Mooncake JSONL, Azure LLM
//! 2023 CSV, BurstGPT CSV), reconstruct sessions, replay them open- or closed-loop as
//! workload groups (`[[workload.traces]]`), and inspect or convert them (`sim trace`).
//!
//! * [`parse`]: streaming readers, format detection, errors with file, line and column;
//! * [`sessions`]: session ids, inference from prefix blocks, synthesis;
//! * [`cache`]: parsed traces shared by the runs of a sweep or tune;
//! * [`replay`]: window, scale, repeat and limits into [`fleetsim_core::workload::SessionPlan`]s;
//! * [`inspect`]: statistics (`sim trace inspect`);
//! * [`convert`]: any format to the native CSV (`sim trace convert`).
//!
//! Owns: trace readers, session inference and replay configs. May not see: the simulation
//! or results (except `from_run`, which reads a finished run's files). Invariant: a bad row
//! is one error naming the file and line (or counted under `--skip-bad-rows`), never a
//! silently shifted value.

pub mod agent_cfg;
pub mod agent_inspect;
pub mod cache;
pub mod calls;
pub mod convert;
pub mod dynamo;
pub mod from_run;
pub mod inspect;
pub mod lines;
pub mod otel;
pub mod pacing;
pub mod parse;
pub mod quantiles;
pub mod replay;
pub mod session_log;
pub mod sessions;

pub use cache::TraceCache;
pub use parse::{Format, ReadOptions, Trace, TraceError, read};
pub use replay::{Mode, Scale, SessionMode, TraceGroupConfig};
