//! # fleetsim-io
//!
//! What crosses the boundary between fleetsim's simulation core and the outside world's
//! files: scenarios in (TOML, validated once, errors naming file, line and key), real traces
//! in (every reader, bounded line by line), latency profiles, the memory pre-flight, and
//! whole-or-absent outputs with their manifests. It builds the configs the core defines
//! (`fleetsim_core::sim::SimConfig`, `fleetsim_core::router::RouterConfig`, ...) and never
//! runs a simulation or renders a result; it depends on the core, never the reverse, and on
//! no CLI or plotting crate.
//!
//! * [`scenario`]: TOML in, validated config out;
//! * [`trace`]: trace readers, session inference, replay into workload groups, inspection;
//! * [`profiles`]: the shipped step-time and KV profiles;
//! * [`preflight`]: the memory estimate before anything large is allocated;
//! * [`atomic`]: whole-or-absent files and run folders, manifests and their checks;
//! * [`output`]: terminal tables and the print helpers that survive a closed pipe;
//! * [`quote`]: user text in messages, control characters escaped (every message one line).
//! * [`measure`]: measurements of a real vLLM engine (harness folders, `vllm bench serve`
//!   JSON, Prometheus series, session traces' recorded latencies);
//! * [`vllm_metrics`]: vLLM's Prometheus metric names, types, labels and buckets, for
//!   everything that writes or reads engine series.

pub mod atomic;
pub mod measure;
pub mod output;
pub mod preflight;
pub mod profiles;
pub mod quote;
pub mod scenario;
pub mod trace;
pub mod vllm_metrics;
