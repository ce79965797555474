//! A run explained: its stranded capacity, and the counterfactual re-runs (the same
//! scenario, seed and workload under fresh signals or another policy) that say what the
//! routing cost.

use anyhow::{Context, Result};

use crate::explain::{Counterfactual, ExplainOptions, Explanation};
use crate::scenario::{Scenario, Source};
use crate::sim::{EngineMode, RunOptions, RunResult};
use crate::workload::Workload;

/// How a run is explained.
#[derive(Clone, Debug)]
pub struct Explain {
    /// The explanation's knobs.
    pub options: ExplainOptions,
    /// The counterfactual policies (TOML tables as in `[router.policy]`, `--policy`);
    /// `None`: no re-runs at all, not even the fresh-signals one.
    pub policies: Option<Vec<String>>,
}

/// The counterfactual re-runs of `scenario` on `workload`, each handed to `each` with its
/// label as it finishes (one held at a time): fresh signals for the scenario's own policy,
/// then each of `policies` in turn (set on `src`, the scenario's source, so an error names
/// `--policy`). The request records are kept (a session's turns are read from them);
/// nothing else is.
pub fn counterfactuals(
    scenario: &Scenario,
    workload: &Workload,
    src: &Source,
    policies: &[String],
    mut each: impl FnMut(&'static str, &RunResult),
) -> Result<()> {
    let quiet = RunOptions::summary_only();
    let rerun = |sim| super::simulate(sim, workload, quiet, EngineMode::Fast).map(|(r, _)| r);
    let fresh = rerun(scenario.sim.with_fresh_signals()).context("the fresh-signals re-run")?;
    each("fresh signals", &fresh);
    drop(fresh);
    for p in policies {
        let mut alt = src.clone();
        alt.apply(&[("router.policy".to_string(), p.clone())], "--policy")?;
        let s = alt.scenario()?;
        let r = rerun(s.sim).with_context(|| format!("the re-run with --policy {p}"))?;
        each("other policy", &r);
    }
    Ok(())
}

/// Explains `res`, a run of `scenario` on `workload` (from `src`), with its counterfactual
/// re-runs as `how` says.
pub fn explained(
    res: &RunResult,
    scenario: &Scenario,
    workload: &Workload,
    src: &Source,
    how: &Explain,
) -> Result<Explanation> {
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let mut x = crate::explain::explain(res, &scenario.sim, &names, &how.options);
    if let Some(policies) = &how.policies {
        counterfactuals(scenario, workload, src, policies, |label, r| {
            x.counterfactuals.push(Counterfactual::of(label, &r.summary));
        })?;
    }
    Ok(x)
}
