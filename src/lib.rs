//! # fleetsim
//!
//! A deterministic, trace-driven discrete-event simulator of N vLLM backends behind a router
//! whose view of the fleet is stale, built to reproduce and explain routing failures that
//! look like capacity problems (for example production-stack's `PrefixAwareRouter`
//! latching new sessions onto a busy backend through its QPS fallback).
//!
//! ## Layout
//!
//! * [`engine`]: the `(time, seq)` event queue; [`time`], [`ids`], [`rng`]: integer time,
//!   typed indices, named random streams.
//! * [`backend`]: vLLM v1 engine model (scheduler, KV cache, prefix caching, gauges) and a
//!   plain queueing model for validation. A backend never sees the router.
//! * [`router`]: the scraper, router-local request stats and the views policies receive.
//! * [`policy`]: routing policies; each sees only a [`policy::RouterView`].
//! * [`workload`]: multi-turn sessions; [`content`]: what tokens are, for caches;
//!   [`trace`]: real request traces replayed as workload groups.
//! * [`sim`]: the one place that mutates several components per event.
//! * [`metrics`], [`export`], [`report`]: ground truth, files, terminal table.
//! * [`scenario`]: TOML in, validated config out, errors with key paths and lines.
//!
//! ## Determinism contract
//!
//! Same scenario and seed give byte-identical output files (except `perf.json`, which holds
//! wall-clock figures): time is integer nanoseconds, events at one instant run in the order
//! they were scheduled, every random draw comes from a named stream derived from the master
//! seed, and no hash map is ever iterated into anything observable.

pub mod atomic;
pub mod backend;
pub mod check;
pub mod cli;
pub mod content;
pub mod dist;
pub mod engine;
pub mod explain;
pub mod export;
pub mod faults;
pub mod fleet;
pub mod hints;
pub mod ids;
pub mod import;
pub mod metrics;
pub mod plot;
pub mod policy;
pub mod preflight;
pub mod profiles;
pub mod report;
pub mod rng;
pub mod router;
pub mod scenario;
pub mod sim;
pub mod sweep;
pub mod term_table;
pub mod time;
pub mod trace;
pub mod tune;
pub mod workload;
