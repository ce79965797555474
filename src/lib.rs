//! # fleetsim
//!
//! A deterministic, trace-driven discrete-event simulator of N vLLM backends behind a router
//! whose view of the fleet is stale, built to reproduce and explain routing failures that
//! look like capacity problems (for example production-stack's `PrefixAwareRouter`
//! latching new sessions onto a busy backend through its QPS fallback).
//!
//! ## Architecture: three crates, one direction
//!
//! The workspace is three crates, and Cargo enforces the walls between them: a crate can
//! only name what it depends on.
//!
//! 1. **Core** (`fleetsim-core`, re-exported here as [`sim`], [`engine`], [`backend`],
//!    [`router`], [`policy`], [`metrics`], [`workload`], [`view`], [`decision`],
//!    [`content`], [`dist`], [`faults`], [`fleet`], [`autoscale`], [`ids`], [`rng`], [`time`]): the
//!    simulation. It depends on no CLI, plotting, YAML, JUnit or schema crate; its own
//!    top-level doc gives its inner layers.
//! 2. **Io** (`fleetsim-io`, re-exported as [`scenario`], [`trace`], [`profiles`],
//!    [`measure`], [`vllm_metrics`], [`preflight`], [`atomic`], [`output`], [`quote`]):
//!    scenarios, traces and a real engine's measurements in, validated configs out, vLLM's
//!    metric names in one place, whole-or-absent files, user text in messages escaped. It
//!    depends on the core only.
//! 3. **Application** (this crate): [`cli`] (parse and dispatch only, one file per
//!    subcommand), [`run`] (a run from a validated scenario to its outputs: the one way
//!    every command reaches the core's event loop), [`sweep`], [`tune`], [`family`]
//!    (candidate rules over a random family of fleets), [`check`], [`import`],
//!    [`calibrate`] (a profile fitted to a real engine's series, and its validation),
//!    [`explain`], [`export`], [`report`], [`html`] (`sim report`'s self-contained page),
//!    [`plot`], [`hints`],
//!    [`reference`](mod@reference) (the generated reference pages and blocks of the guide),
//!    [`alerts`] (Prometheus rules and their proof on runs), [`observe`] (the same figures
//!    on a real fleet's series) and [`live`], the live wing: `sim serve` (the fleet as vLLM
//!    servers over HTTP), `sim load` (a scenario's sessions sent in real time to a router)
//!    and observe's fetching, on one wire contract; the only code that speaks HTTP, and the
//!    only place wall time drives what happens. It builds scenarios through io, calls
//!    [`sim::run`] through [`run`], and renders finished results; it never reaches into a
//!    running simulation. Plotting, YAML, JUnit, HTTP and the CLI parser live here only.
//!
//! Inside the application, [`cli`] sits on top; [`sweep`], [`tune`], [`family`] and
//! [`check`] drive runs, each through [`run`]; [`calibrate`] replays one engine and
//! [`import`] builds scenarios; [`explain`], [`export`], [`report`], [`plot`] and
//! [`hints`] see a finished [`sim::RunResult`] (or sweep tables), never simulation
//! internals; [`live`] is the only code that keeps real time.
//!
//! ## Determinism contract
//!
//! Same scenario and seed give byte-identical output files (except `perf.json`, which holds
//! wall-clock figures): time is integer nanoseconds, events at one instant run in the order
//! they were scheduled, every random draw comes from a named stream derived from the master
//! seed, and no hash map is ever iterated into anything observable.

pub use fleetsim_core::{
    autoscale, backend, content, decision, dist, engine, faults, fleet, ids, metrics, policy, rng, router, sim, time,
    view, workload,
};
pub use fleetsim_io::{atomic, measure, output, preflight, profiles, quote, scenario, trace, vllm_metrics};

pub mod alerts;
pub mod calibrate;
pub mod check;
pub mod cli;
pub mod explain;
pub mod export;
pub mod family;
pub mod hints;
pub mod html;
pub mod import;
pub mod live;
pub mod observe;
pub mod plot;
pub mod reference;
pub mod report;
pub mod run;
pub mod sweep;
pub mod tune;
