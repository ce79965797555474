//! `sim explain` (and `sim run --explain`): explain a run's stranded capacity and re-run
//! the counterfactuals.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::out::{out, outln};
use super::shared::file_names;
use crate::explain::ExplainOptions;
use crate::scenario::{Scenario, Source};
use crate::sim::{EngineMode, RunOptions};
use crate::time::SimDuration;
use crate::workload::Workload;

#[derive(Args, Debug, Clone)]
pub(super) struct ExplainFlags {
    /// Counterfactual policy, a TOML table as in [router.policy] (repeatable; default:
    /// { kind = "least_request" }). A fresh-signals re-run of the scenario's own policy is
    /// always included.
    #[arg(long = "policy", value_name = "TOML")]
    pub(super) policies: Vec<String>,
    /// Skip the counterfactual re-runs.
    #[arg(long)]
    pub(super) no_counterfactual: bool,
    /// Explain at most this many episodes (the worst ones).
    #[arg(long, default_value_t = 3)]
    pub(super) episodes: usize,
    /// Merge episodes closer than this many seconds.
    #[arg(long, default_value_t = 2.0)]
    pub(super) merge_gap_s: f64,
    /// Count a view as stale beyond this age in seconds (default: the scrape interval).
    #[arg(long)]
    pub(super) stale_after_s: Option<f64>,
}

#[derive(Args, Debug)]
pub(super) struct ExplainArgs {
    /// A results folder written by `sim run` (holds scenario.toml and summary.json).
    pub(super) dir: PathBuf,
    #[command(flatten)]
    pub(super) opts: ExplainFlags,
    /// Print the explanation as JSON instead of text.
    #[arg(long)]
    pub(super) json: bool,
    /// Tell one session's story instead, turn by turn: backend, branch, the router's view and
    /// its age, the queue each turn met, and the pick a fresh load-aware router would have
    /// made (a trace's own session id for a replay). Prints; writes nothing in RESULTS_DIR.
    #[arg(long, value_name = "ID")]
    pub(super) session: Option<String>,
    /// With --session: also write the run's timeline (as `sim run --timeline`) with that
    /// session's turns highlighted and drawn on their own track, to this file.
    #[arg(long, value_name = "OUT.json", requires = "session")]
    pub(super) timeline: Option<PathBuf>,
}

impl ExplainFlags {
    /// The explanation these flags ask for, of a run scraped every `interval`.
    pub(super) fn explain(&self, interval: SimDuration) -> Result<crate::run::Explain> {
        anyhow::ensure!(
            self.merge_gap_s.is_finite() && self.merge_gap_s >= 0.0,
            "--merge-gap-s must be a finite number of seconds >= 0"
        );
        let stale_after = match self.stale_after_s {
            None => interval,
            Some(v) => {
                anyhow::ensure!(
                    v.is_finite() && (0.0..=1e9).contains(&v),
                    "--stale-after-s must be a finite number of seconds in [0, 1e9]"
                );
                SimDuration::from_secs_f64(v)
            }
        };
        Ok(crate::run::Explain {
            options: ExplainOptions {
                merge_gap_s: self.merge_gap_s,
                max_episodes: self.episodes,
                stale_after,
                ..ExplainOptions::for_interval(interval)
            },
            policies: self.policies(),
        })
    }

    /// The counterfactual policies (`{ kind = "least_request" }` unless `--policy` names
    /// some); `None` with `--no-counterfactual`.
    fn policies(&self) -> Option<Vec<String>> {
        if self.no_counterfactual {
            None
        } else if self.policies.is_empty() {
            Some(vec!["{ kind = \"least_request\" }".to_string()])
        } else {
            Some(self.policies.clone())
        }
    }
}

/// A `sim run` folder's run reproduced from its `scenario.toml` (byte-identical by
/// construction; a warning when it does not match `summary.json`), with what the
/// counterfactuals need. `command` names the caller in messages.
pub(super) struct Reproduced {
    /// The re-run.
    pub(super) res: crate::sim::RunResult,
    /// The folder's scenario, built.
    pub(super) scenario: Scenario,
    /// Its workload.
    pub(super) workload: Workload,
    /// Its source, for counterfactual overrides.
    pub(super) src: Source,
}

/// Reads, checks and re-runs the `sim run` folder `dir` (see [`Reproduced`]).
pub(super) fn reproduce(dir: &Path, command: &str) -> Result<Reproduced> {
    let summary_path = dir.join("summary.json");
    let stored = std::fs::read_to_string(&summary_path)
        .with_context(|| format!("{}: not a results folder written by `sim run`", summary_path.display()))?;
    crate::atomic::verify(dir)?;
    let name = serde_json::from_str::<serde_json::Value>(&stored)
        .ok()
        .and_then(|v| v.get("scenario").and_then(|n| n.as_str()).map(str::to_string))
        .with_context(|| format!("{}: no `scenario` name in it", summary_path.display()))?;
    let scen_path = dir.join("scenario.toml");
    let text = std::fs::read_to_string(&scen_path).with_context(|| format!("reading {}", scen_path.display()))?;
    let src = Source::parse(&text, &scen_path.display().to_string(), &name)?;
    let (scenario, workload, _) = src.build()?;
    super::shared::check_held_audit(&scenario, &workload, &scen_path.display().to_string(), command)?;
    let (res, _) = crate::run::simulate(scenario.sim.clone(), &workload, RunOptions::default(), EngineMode::Fast)
        .with_context(|| format!("re-running {}", scen_path.display()))?;
    let mut again = Vec::new();
    serde_json::to_writer_pretty(&mut again, &res.summary)?;
    again.push(b'\n');
    if again != stored.as_bytes() {
        eprintln!(
            "warning: {} does not match the re-run of {} (another fleetsim version, or an edited file); using the re-run",
            summary_path.display(),
            scen_path.display()
        );
    }
    Ok(Reproduced {
        res,
        scenario,
        workload,
        src,
    })
}

pub(super) fn cmd_explain(a: ExplainArgs) -> Result<ExitCode> {
    if a.dir.join("summary.json").exists()
        && !a.dir.join("decisions.csv").exists()
        && !a.dir.join("decisions.parquet").exists()
    {
        eprintln!(
            "note: {} has no decision files (written with `sim run --no-decisions`); explain re-simulates the scenario from its scenario.toml, so every finding below is complete",
            a.dir.display()
        );
    }
    let Reproduced {
        res,
        scenario,
        workload,
        src,
    } = reproduce(&a.dir, "sim explain")?;
    let session = match &a.session {
        Some(key) => Some(session_index(&workload, key, &a.dir)?),
        None => None,
    };
    if let Some(s) = session {
        return journey_cmd(&a, &res, &scenario, &workload, &src, s);
    }
    let how = a.opts.explain(scenario.sim.router.engine_stats_interval)?;
    let x = crate::run::explained(&res, &scenario, &workload, &src, &how)?;
    let written = crate::run::write_explanation(&a.dir, &x)?;
    crate::atomic::add_to_manifest(&a.dir, &["explain.md", "explain.json"])?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&x)?)?;
    } else {
        out!("{}", crate::explain::render(&x))?;
        for l in res.summary.replay.iter().flat_map(crate::metrics::fidelity::render) {
            outln!("{l}")?;
        }
        outln!("\nwrote {}/{{{}}}", a.dir.display(), file_names(&written))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The index of the session keyed `key`, or one line naming the flag with the closest id.
/// A trace replayed by several groups has its ids in every copy, named `ID#K` (the K-th in
/// session order) in the workload and so in every output; the plain id of such a session
/// is refused with the names to use.
fn session_index(workload: &Workload, key: &str, dir: &Path) -> Result<usize> {
    if let Some(i) = workload.sessions.iter().position(|s| s.key == key) {
        return Ok(i);
    }
    // The copies of `base`: keys `base#K`.
    let copies = |base: &str| -> usize {
        workload
            .sessions
            .iter()
            .filter(|s| {
                s.key
                    .strip_prefix(base)
                    .and_then(|r| r.strip_prefix('#'))
                    .is_some_and(|k| k.parse::<usize>().is_ok())
            })
            .count()
    };
    let n = copies(key);
    if n > 1 {
        anyhow::bail!(
            "--session {}: {n} sessions in {} have this id (the same trace replayed {n} times); name one as {} to {}, in scenario order",
            crate::quote::quote(key),
            crate::quote::path(dir),
            crate::quote::quote(&format!("{key}#1")),
            crate::quote::quote(&format!("{key}#{n}")),
        );
    }
    if let Some((base, k)) = key.rsplit_once('#')
        && k.parse::<usize>().is_ok()
    {
        let n = copies(base);
        if n > 1 {
            anyhow::bail!(
                "--session {}: {n} sessions have the id {}; K runs from 1 to {n}",
                crate::quote::quote(key),
                crate::quote::quote(base),
            );
        }
    }
    let keys: Vec<&str> = workload.sessions.iter().map(|s| s.key.as_str()).collect();
    let mut shown: Vec<String> = keys.iter().take(4).map(|k| crate::quote::quote(k)).collect();
    if keys.len() > 4 {
        shown.push(format!("... {} more", keys.len() - 4));
    }
    anyhow::bail!(
        "--session {}: no such session in {} ({} sessions: {}){}",
        crate::quote::quote(key),
        crate::quote::path(dir),
        keys.len(),
        shown.join(", "),
        crate::scenario::suggest::hint(key, &keys)
    )
}

/// `sim explain DIR --session ID`: the session's journey, with the session re-run under
/// fresh signals and each counterfactual policy.
fn journey_cmd(
    a: &ExplainArgs,
    res: &crate::sim::RunResult,
    scenario: &Scenario,
    workload: &Workload,
    src: &Source,
    session: usize,
) -> Result<ExitCode> {
    use crate::explain::{journey, render_journey, session_outcome};
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let mut j = journey(res, &names, session);
    if let Some(policies) = a.opts.policies() {
        crate::run::counterfactuals(scenario, workload, src, &policies, |label, r| {
            j.counterfactuals.extend(session_outcome(label, r, session));
        })?;
    }
    j.conclude();
    if let Some(out) = &a.timeline {
        crate::atomic::write_atomic(out, |buf| {
            crate::export::timeline::write_highlighted(buf, res, Some(session))
        })
        .with_context(|| format!("writing {}", out.display()))?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&j)?)?;
    } else {
        out!("{}", render_journey(&j))?;
        if let Some(out) = &a.timeline {
            outln!("\nwrote {}", out.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
