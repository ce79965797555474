//! A run, from a validated scenario to its outputs: the one way every command reaches the
//! core's event loop.
//!
//! * `sim run` hands [`Run`] a validated scenario, its workload and [`Options`]; the run
//!   stages its results folder, simulates (the decision audit, request records and time
//!   series streamed to a writer thread as the run goes, or kept whole where a later step
//!   reads them whole), finds the health hints, and then writes the tables, summary, plot,
//!   timeline, OpenMetrics and explanation files and commits the folder ([`Simulated`]).
//! * `sim sweep`, `sim tune`, `sim check` and `sim family` run a validated scenario at a
//!   seed with [`at_seed`] (its workload drawn, trace files read once per sweep), on
//!   [`workers`] threads ([`parallel`] where the results are simply collected in order).
//! * `sim explain` re-runs a results folder's scenario with [`simulate`] and its
//!   counterfactuals with [`counterfactuals`]; `sim alerts` and `sim bench` run through
//!   [`simulate`] too.
//! * `sim run` sets its seed beside the next few with [`seed_check`] (terminal only).
//! * `sim serve --out` writes its run's folder with [`write_files`], as `sim run` does.
//!
//! Owns: the order of a run's steps, its sinks and writer thread, its staging folder. May
//! not see: simulation internals (it calls the core's `sim::run_mode` and
//! `sim::run_streamed`). Invariant: a results folder is whole or absent (staged, committed
//! once every file is written) and byte-identical for the same scenario and seed whatever
//! the threads (`perf.json`, wall-clock figures, aside).

mod counterfactual;
mod files;
mod pipeline;
pub mod seed_check;
mod stream;

use std::time::Duration;

use anyhow::{Result, anyhow};
use rayon::prelude::*;

use crate::scenario::{FieldError, Scenario};
use crate::sim::{EngineMode, RunOptions, RunResult, SimConfig, SimError};
use crate::trace::TraceCache;
use crate::workload::Workload;

pub use counterfactual::{Explain, counterfactuals, explained};
pub use files::Sampling;
pub use files::{write_explanation, write_files};
pub use pipeline::{Options, Progress, Run, RunError, Simulated};

/// Simulates `sim` on `workload` (the core's event loop, nothing written); returns the
/// result and the loop's wall time.
pub fn simulate(
    sim: SimConfig,
    workload: &Workload,
    opts: RunOptions,
    engine: EngineMode,
) -> Result<(RunResult, Duration), SimError> {
    crate::sim::run_mode(sim, workload, opts, engine)
}

/// Why a run at a seed did not finish.
#[derive(Debug)]
pub enum Failure {
    /// The seed drew a workload the scenario cannot hold (a key of the scenario, not yet
    /// located in its file).
    Workload(FieldError),
    /// The simulation stopped.
    Sim(SimError),
}

/// Runs `scenario` at `seed`: draws the seed's workload (trace files read through
/// `traces`, so the runs of a sweep parse each file once) and simulates it with the fast
/// engine.
pub fn at_seed(scenario: &Scenario, seed: u64, traces: &TraceCache, opts: RunOptions) -> Result<RunResult, Failure> {
    let mut sc = scenario.clone();
    sc.sim.seed = seed;
    let workload = sc.workload_with(traces).map_err(Failure::Workload)?;
    let (res, _) = simulate(sc.sim, &workload, opts, EngineMode::Fast).map_err(Failure::Sim)?;
    Ok(res)
}

/// The most worker threads `--jobs` may ask for: more than any machine's cores, and each
/// thread holds a simulation, so a larger count only exhausts memory and thread limits.
pub const MAX_JOBS: usize = 1024;

/// The worker threads a `--jobs` flag asks for (the machine's cores when absent), checked
/// against 1..=[`MAX_JOBS`] with the flag named.
pub fn jobs_flag(jobs: Option<usize>) -> Result<usize> {
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    anyhow::ensure!(
        (1..=MAX_JOBS).contains(&jobs),
        "--jobs {jobs}: expected 1 to {MAX_JOBS} worker threads"
    );
    Ok(jobs)
}

/// A pool of `jobs` worker threads (at least one) for a command's runs.
pub fn workers(jobs: usize) -> Result<rayon::ThreadPool, String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()
        .map_err(|e| format!("cannot start {jobs} worker threads: {e}"))
}

/// `f` of every item on `jobs` worker threads, the results in item order (so nothing
/// depends on the number of threads or on which run finishes first).
pub fn parallel<T: Sync, R: Send>(jobs: usize, items: &[T], f: impl Fn(&T) -> R + Sync + Send) -> Result<Vec<R>> {
    let pool = workers(jobs).map_err(|m| anyhow!(m))?;
    Ok(pool.install(|| items.par_iter().map(f).collect()))
}
