//! Trace-driven replay: read real request traces (native CSV, Mooncake JSONL, Azure LLM
//! 2023 CSV, BurstGPT CSV), reconstruct sessions, replay them open- or closed-loop as
//! workload groups (`[[workload.traces]]`), and inspect or convert them (`sim trace`).
//!
//! * [`model`]: the parsed trace, its rows and recorded call timing, the one error type and
//!   the builder every reader pushes rows through;
//! * [`reader`]: opening a file (gzip or not), detecting its format, dispatching to its reader;
//! * readers, each importing only the model and the line helpers ([`lines`], [`jsonl`]):
//!   [`requests`] (native, Mooncake, Azure, BurstGPT), [`dynamo`], [`otel`], [`session_log`];
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
pub mod convert;
pub mod dynamo;
pub mod from_run;
pub mod inspect;
pub mod jsonl;
pub mod lines;
pub mod model;
pub mod otel;
pub mod pacing;
pub mod quantiles;
pub mod reader;
pub mod replay;
pub mod requests;
pub mod session_log;
pub mod sessions;

pub use cache::TraceCache;
pub use model::{Format, Trace, TraceError};
pub use reader::{ReadOptions, read};
pub use replay::{Mode, Scale, SessionMode, TraceGroupConfig};
