//! What several subcommands share: the scenario arguments and loading, the default results
//! folder, and the wall-clock figures.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::scenario::{Scenario, Source, parse_set};
use crate::workload::Workload;

#[derive(Args, Debug)]
pub(super) struct ScenarioArgs {
    /// Scenario file (TOML).
    pub(super) scenario: PathBuf,
    /// Override the scenario's master seed (0 to 2^63 - 1, the range of a TOML integer).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    pub(super) seed: Option<u64>,
    /// Override any scenario key: --set router.engine_stats_interval_s=10 (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = parse_set)]
    pub(super) sets: Vec<(String, String)>,
}

/// Loads and validates the scenario (its `[sweep]` and `[expect]` tables in the same pass,
/// so every error of the file shows at once) and generates its workload.
pub(super) fn load_scenario(a: &ScenarioArgs) -> Result<(Scenario, Workload, String)> {
    let mut src = Source::read(&a.scenario)?;
    src.apply(&a.sets, "--set")?;
    // The tool tables count seeds from the file's own seed: `--seed` picks this run.
    let tools = crate::check::tool_errors(&src);
    if let Some(seed) = a.seed {
        src.apply(&[("seed".into(), seed.to_string())], "--set")?;
    }
    let scenario = src.scenario_with(tools)?;
    let workload = scenario.workload().map_err(|e| src.error(e))?;
    Ok((scenario, workload, src.effective()))
}

/// `sim run` refuses a scenario whose `[sweep]` or `[expect]` `sim sweep`/`sim check` would
/// (with the file's own seed: `--seed` picks this run, not the check's seeds).
pub(super) fn check_tool_tables(a: &ScenarioArgs) -> Result<()> {
    let mut src = Source::read(&a.scenario)?;
    src.apply(&a.sets, "--set")?;
    crate::check::validate_tools(&src)
}

pub use fleetsim_io::output::default_out;

pub(super) fn file_names(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(",")
}

/// `--engine`: which event loop runs the scenario; both write the same bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum EngineArg {
    /// Engine steps in per-backend lanes beside the event heap, pure-decode stretches
    /// collapsed, each engine's KV cache kept per run of blocks.
    #[default]
    Fast,
    /// Every event through one binary heap, one event per engine iteration, the KV cache
    /// kept per block: the plain loop the fast one is checked against.
    Reference,
}

impl From<EngineArg> for crate::sim::EngineMode {
    fn from(a: EngineArg) -> Self {
        match a {
            EngineArg::Fast => Self::Fast,
            EngineArg::Reference => Self::Reference,
        }
    }
}

/// Refuses, before running, a run that keeps the whole decision audit (`what`: the command
/// that does) when the audit on top of the scenario's estimate passes
/// `limits.max_memory_gib` (the scenario's own estimate counts a streamed audit).
pub(super) fn check_held_audit(scenario: &Scenario, workload: &Workload, file: &str, what: &str) -> Result<()> {
    let (requests, backends) = (workload.total_requests() as u64, scenario.sim.backends.len() as u64);
    let need = crate::preflight::held_audit_need(scenario.estimate_bytes, requests, backends);
    scenario
        .budget
        .check(
            need,
            &format!("{what}, which keeps the decision audit of {requests} requests over {backends} backends whole,"),
        )
        .map_err(|m| anyhow::anyhow!("{file}: {m}"))
}
