//! `sim bench`: simulator speed on one scenario.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::out::outln;
use super::shared::{ScenarioArgs, load_scenario};
use crate::export::write_json;
use crate::sim::RunOptions;

#[derive(Args, Debug)]
pub(super) struct BenchArgs {
    #[command(flatten)]
    pub(super) scenario: ScenarioArgs,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub(super) runs: u32,
    /// Also write the measurements as JSON to this file.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Event-loop implementation to time (docs/engine.md).
    #[arg(long, value_enum, default_value_t = super::shared::EngineArg::Fast)]
    pub(super) engine: super::shared::EngineArg,
}

#[derive(serde::Serialize)]
pub(super) struct BenchReport {
    scenario: String,
    runs: u32,
    events: u64,
    requests: u64,
    backends: u64,
    sessions: u64,
    median_wall_s: f64,
    events_per_s: f64,
    requests_per_s: f64,
    /// Engine iterations (steps, all backends).
    iterations: u64,
    /// Engine iterations simulated per wall second: the engine-independent speed figure
    /// (logical iterations: a coalesced stretch counts every step in it).
    iterations_per_s: f64,
    /// Of `iterations`, those taken in coalesced pure-decode stretches (fast engine).
    coalesced_iterations: u64,
    /// Of those, iterations taken without a queue event (collapsed stretches).
    collapsed_iterations: u64,
    /// Median wall nanoseconds of the event loop per request simulated: the per-request
    /// cost, comparable with an estimate of the work the model must do per request.
    ns_per_request: f64,
    /// Median wall nanoseconds per event popped (engine-dependent: a stretch is one event).
    ns_per_event: f64,
    /// Median wall nanoseconds per logical engine iteration (engine-independent).
    ns_per_iteration: f64,
    engine: &'static str,
    wall_s: Vec<f64>,
}

pub(super) fn cmd_bench(a: BenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.runs >= 1, "--runs must be at least 1");
    let (scenario, workload, _) = load_scenario(&a.scenario)?;
    let opts = RunOptions::summary_only();
    let mut walls = Vec::new();
    let mut last = None;
    for _ in 0..a.runs {
        let (res, wall) = crate::run::simulate(scenario.sim.clone(), &workload, opts, a.engine.into())
            .with_context(|| format!("{}", a.scenario.scenario.display()))?;
        walls.push(wall.as_secs_f64());
        last = Some((res.summary, res.coalesced_steps, res.collapsed_steps));
    }
    let (s, coalesced, collapsed) = last.expect("at least one run");
    let mut sorted = walls.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let iterations: u64 = s.backends.iter().map(|b| b.steps).sum();
    let ns_per = |n: u64| median * 1e9 / n.max(1) as f64;
    let rep = BenchReport {
        scenario: s.scenario.clone(),
        runs: a.runs,
        events: s.events,
        requests: s.requests.arrived,
        backends: s.backend_count,
        sessions: s.sessions,
        median_wall_s: median,
        events_per_s: s.events as f64 / median,
        requests_per_s: s.requests.arrived as f64 / median,
        iterations,
        coalesced_iterations: coalesced,
        collapsed_iterations: collapsed,
        iterations_per_s: iterations as f64 / median,
        ns_per_request: ns_per(s.requests.arrived),
        ns_per_event: ns_per(s.events),
        ns_per_iteration: ns_per(iterations),
        engine: match a.engine {
            super::shared::EngineArg::Fast => "fast",
            super::shared::EngineArg::Reference => "reference",
        },
        wall_s: walls,
    };
    outln!(
        "{}: {} backends, {} sessions, {} requests, {} engine iterations ({:.1}% coalesced, {:.1}% without a queue event); median of {} runs {:.3} s wall -> {:.0} requests/s, {:.2} M iterations/s ({} engine, {:.2} M events/s)\n  per request {:.0} ns, per event {:.1} ns, per engine iteration {:.1} ns (wall, median run)",
        rep.scenario,
        rep.backends,
        rep.sessions,
        rep.requests,
        rep.iterations,
        100.0 * rep.coalesced_iterations as f64 / (rep.iterations.max(1) as f64),
        100.0 * rep.collapsed_iterations as f64 / (rep.iterations.max(1) as f64),
        rep.runs,
        rep.median_wall_s,
        rep.requests_per_s,
        rep.iterations_per_s / 1e6,
        rep.engine,
        rep.events_per_s / 1e6,
        rep.ns_per_request,
        rep.ns_per_event,
        rep.ns_per_iteration,
    )?;
    if let Some(p) = &a.json {
        write_json(p, &rep).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
