//! # fleetsim
//!
//! A deterministic, trace-driven discrete-event simulator of N vLLM backends behind a router
//! whose view of the fleet is stale, built to reproduce and explain routing failures that
//! look like capacity problems (for example production-stack's `PrefixAwareRouter`
//! latching new sessions onto a busy backend through its QPS fallback).
//!
//! ## Architecture: layers and allowed imports
//!
//! Data flows down this list; a module may import from its own layer and the layers below
//! it, never from a layer above:
//!
//! 1. **Front end**: [`cli`] (parse and dispatch only, one file per subcommand), [`check`],
//!    [`sweep`], [`tune`], [`import`], [`reference`](mod@reference). They build scenarios and call
//!    [`sim::run`]; they never reach into a running simulation.
//! 2. **Input**: [`scenario`] (TOML in, validated config out, errors with key paths and
//!    lines), [`workload`], [`trace`], [`profiles`], [`dist`], [`faults`], [`fleet`].
//!    They produce the config types defined beside the code that consumes them
//!    (`sim::SimConfig`, `router::RouterConfig`, `policy::PolicyConfig`): the one upward
//!    import allowed.
//! 3. **Simulation**: [`sim`], the one `match` over events that mutates several components
//!    per event, on the [`engine`] `(time, seq)` queue.
//! 4. **Components**, which never import each other sideways except as named here:
//!    [`backend`] (vLLM v1 engine model; never sees the router), [`router`] (discovery,
//!    scraper, request stats; holds the policy and hands it a view), [`policy`] (sees only
//!    a [`policy::RouterView`], built from the router's stats types), [`metrics`] (ground
//!    truth; never sees router or policy).
//! 5. **Shared vocabulary** (imports nothing above [`time`]): [`decision`] (the branch a
//!    policy took) and [`view`] (what the router knew of a backend, with its read time),
//!    so router, policies and metrics share them without importing each other;
//!    [`content`], [`ids`], [`rng`], [`time`], and [`quote`] (user text in messages, control
//!    characters escaped, so every message stays one line).
//! 6. **Output**: [`export`], [`report`], [`plot`], [`explain`], [`hints`], [`atomic`]:
//!    they see a finished [`sim::RunResult`] (or sweep tables), never simulation internals.
//!
//! [`preflight`] sits beside input (memory estimate before allocation).

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
pub mod decision;
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
pub mod quote;
pub mod reference;
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
pub mod view;
pub mod workload;
