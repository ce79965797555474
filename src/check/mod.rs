//! `sim check`: run scenarios, evaluate their `[expect]` bounds, optionally prove
//! determinism (two runs, identical event logs) and invariants, and report pass/fail as a
//! table and as JUnit XML for CI systems.
//!
//! ```toml
//! [expect]
//! seeds = 10                     # or [1, 5, 9]; default: the scenario's seed
//! checks = [
//!   "min(peak_backend_sessions) == 8",
//!   "mean(idle_while_queued_s) >= 150",
//!   "backends[0].peak_waiting == 0",   # no aggregate: must hold on every seed
//! ]
//! ```
//!
//! Owns: `[expect]` evaluation, goldens and JUnit. May not see: simulation internals (it
//! runs scenarios through `sim::run` and reads their summaries). Invariant: a failed bound is
//! exit 1, bad input exit 2.

pub mod expr;
pub mod golden;
pub mod junit;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::metrics::flatten;
use crate::run::Failure;
use crate::scenario::{FieldError, Scenario, ScenarioError, Source};
use crate::sim::{EventRecord, RunOptions, SimError};
use crate::sweep::spec::PlanError;
use crate::sweep::spec::{SeedsFile, check_seeds, count_seeds};
use crate::trace::TraceCache;
use expr::Check;

/// Most seeds one scenario's checks may run.
pub const MAX_CHECK_SEEDS: u64 = 10_000;

/// `[expect]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectFile {
    /// Seeds to check over.
    pub seeds: Option<SeedsFile>,
    /// Bound expressions.
    pub checks: Vec<String>,
}

/// A scenario's validated expectations.
#[derive(Clone, Debug)]
pub struct Expectations {
    /// Seeds.
    pub seeds: Vec<u64>,
    /// Each bound with its text as written.
    pub checks: Vec<(String, Check)>,
}

/// Validates a scenario's tool tables (`[expect]`, and `[sweep]` without running its points)
/// as `sim check` and `sim sweep` would, so `sim run` refuses a file they would refuse.
pub fn validate_tools(src: &Source) -> Result<()> {
    let found = tool_errors(src);
    if found.is_empty() {
        return Ok(());
    }
    Err(src.errors(found).into())
}

/// Every error of the tool tables (`[expect]`, and `[sweep]` without running its points),
/// each naming its key path, found in one pass as the scenario's own errors are (see
/// [`Source::tool_errors`]); the seeds count from the file's `seed`.
pub fn tool_errors(src: &Source) -> Vec<FieldError> {
    src.tool_errors(|s| {
        let seed = s.first_seed();
        let mut found = expectations_checked(s, seed).err().unwrap_or_default();
        if s.tools.contains_key("sweep") {
            let cli = crate::sweep::spec::CliAxes::default();
            match crate::sweep::spec::plan_checked(s, &cli, crate::sweep::table::MAX_FILE_RUNS) {
                Ok(_) => {}
                Err(PlanError::At(e)) => found.push(e),
                Err(PlanError::Text(m)) => found.push(FieldError::new("sweep", m)),
            }
        }
        found
    })
}

/// The validated scenario of `src`, its tool tables validated in the same pass: every
/// error of the file at once, in file order.
pub fn scenario_and_tools(src: &Source) -> Result<Scenario, ScenarioError> {
    src.scenario_with(tool_errors(src))
}

/// Reads and validates `[expect]`; errors name the file, line and `expect.checks[i]`, all
/// of them at once.
pub fn expectations(src: &Source, base_seed: u64) -> Result<Option<Expectations>> {
    expectations_checked(src, base_seed).map_err(|found| src.errors(found).into())
}

/// [`expectations`] with its errors not yet located: the first of the table's shape, or
/// else the seeds' and each bad check's.
fn expectations_checked(src: &Source, base_seed: u64) -> Result<Option<Expectations>, Vec<FieldError>> {
    let Some(f) = src.tool_field::<ExpectFile>("expect").map_err(|e| vec![e])? else {
        return Ok(None);
    };
    let mut found = Vec::new();
    let seeds = match &f.seeds {
        None => Ok(vec![base_seed]),
        Some(SeedsFile::Count(n)) => count_seeds(base_seed as i64, *n, MAX_CHECK_SEEDS)
            // `sim check` has no --max-runs: name its own cap instead.
            .map_err(|m| {
                m.replace(
                    "(raise it with --max-runs)",
                    &format!("(`sim check` runs at most {MAX_CHECK_SEEDS} seeds per scenario)"),
                )
            }),
        Some(SeedsFile::List(l)) => Ok(l.clone()),
    }
    .and_then(|seeds| check_seeds(&seeds).map(|_| seeds))
    .map_err(|m| found.push(FieldError::new("expect.seeds", m)))
    .unwrap_or_default();
    if f.checks.is_empty() {
        found.push(FieldError::new("expect.checks", "lists no checks"));
    }
    let mut checks = Vec::new();
    for (i, text) in f.checks.iter().enumerate() {
        match expr::parse(text) {
            Ok(c) => checks.push((text.trim().to_string(), c)),
            Err(m) => found.push(FieldError::new(format!("expect.checks[{i}]"), m)),
        }
    }
    if !found.is_empty() {
        return Err(found);
    }
    Ok(Some(Expectations { seeds, checks }))
}

/// Options of `sim check`.
#[derive(Clone, Copy, Debug)]
pub struct CheckOptions {
    /// Run each scenario twice and compare event logs.
    pub determinism: bool,
    /// Check invariants at every event.
    pub invariants: bool,
    /// Worker threads.
    pub jobs: usize,
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// What was checked (the bound as written, `determinism`, `invariants`).
    pub name: String,
    /// The measured value, when the check has one.
    pub value: Option<f64>,
    /// Pass or fail.
    pub pass: bool,
    /// Extra explanation (failure details, seeds).
    pub detail: String,
}

/// The report of one scenario.
#[derive(Clone, Debug)]
pub struct ScenarioReport {
    /// Scenario file.
    pub file: String,
    /// Scenario name.
    pub name: String,
    /// Outcomes; empty when the scenario has nothing to check.
    pub outcomes: Vec<Outcome>,
    /// Wall seconds spent.
    pub wall_s: f64,
}

/// A folder holding this file is not descended into by [`expand`] (benchmarks).
pub const SKIP_MARKER: &str = ".sim-check-skip";

/// Expands directories into their `*.toml` files, recursively (files of a folder sorted,
/// then its subfolders in sorted order), skipping subfolders that hold [`SKIP_MARKER`].
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let before = out.len();
            expand_dir(p, &mut out)?;
            anyhow::ensure!(out.len() > before, "{}: no .toml scenarios in this folder", p.display());
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn expand_dir(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    out.extend(
        entries
            .iter()
            .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "toml"))
            .cloned(),
    );
    for sub in entries.iter().filter(|d| d.is_dir()) {
        if !sub.join(SKIP_MARKER).exists() {
            expand_dir(sub, out)?;
        }
    }
    Ok(())
}

/// Where two event logs first differ: `(index, a's record, b's record)`.
pub fn first_divergence(
    a: &[EventRecord],
    b: &[EventRecord],
) -> Option<(usize, Option<EventRecord>, Option<EventRecord>)> {
    let n = a.len().max(b.len());
    (0..n)
        .find(|&i| a.get(i) != b.get(i))
        .map(|i| (i, a.get(i).copied(), b.get(i).copied()))
}

/// SHA-256 of an event log.
pub fn event_log_hash(log: &[EventRecord]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for e in log {
        h.update(e.t.0.to_le_bytes());
        h.update([e.kind.code()]);
        h.update(e.a.to_le_bytes());
        h.update(e.b.to_le_bytes());
    }
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn describe_event(e: Option<EventRecord>) -> String {
    match e {
        None => "(log ended)".into(),
        Some(e) => format!("{} {} {}", e.kind_name(), e.a, e.b),
    }
}

/// Checks the determinism of `scenario` at `seed`: two runs, compared event by event.
pub fn determinism(scenario: &Scenario, seed: u64) -> Result<Outcome> {
    let once = || -> Result<(Vec<EventRecord>, serde_json::Map<String, serde_json::Value>)> {
        let opts = RunOptions {
            record_event_log: true,
            ..RunOptions::summary_only()
        };
        let res = crate::run::at_seed(scenario, seed, &TraceCache::new(), opts).map_err(|f| match f {
            Failure::Workload(e) => anyhow::anyhow!("{}: {}", e.path, e.message),
            Failure::Sim(e) => e.into(),
        })?;
        Ok((res.event_log, flatten(&res.summary)))
    };
    let (a, sa) = once()?;
    let (b, sb) = once()?;
    Ok(match first_divergence(&a, &b) {
        None if sa == sb => Outcome {
            name: "determinism".into(),
            value: None,
            pass: true,
            detail: format!(
                "seed {seed}: 2 runs, {} events, event-log sha256 {}",
                a.len(),
                event_log_hash(&a)
            ),
        },
        None => Outcome {
            name: "determinism".into(),
            value: None,
            pass: false,
            detail: format!("seed {seed}: identical event logs but different summaries"),
        },
        Some((i, x, y)) => {
            let t = x.or(y).map_or(0.0, |e| e.t.as_secs_f64());
            Outcome {
                name: "determinism".into(),
                value: None,
                pass: false,
                detail: format!(
                    "seed {seed}: runs diverge at event #{i}, t = {t:.9} s: run 1 {} vs run 2 {}",
                    describe_event(x),
                    describe_event(y)
                ),
            }
        }
    })
}

/// Runs one scenario's checks.
pub fn check_file(path: &Path, sets: &[(String, String)], opts: CheckOptions) -> Result<ScenarioReport> {
    let start = std::time::Instant::now();
    let mut src = Source::read(path)?;
    src.apply(sets, "--set")?;
    // The seeds replay the same traces: each file is read once.
    let traces = TraceCache::new();
    let scenario = scenario_and_tools(&src)?;
    scenario.workload_with(&traces).map_err(|e| src.error(e))?;
    let exp = expectations(&src, scenario.sim.seed)?;
    let file = path.display().to_string();
    let mut outcomes = match &exp {
        Some(exp) => {
            let runs = seed_runs(&src, &scenario, &traces, &exp.seeds, opts)?;
            bounds(exp, runs, opts.invariants, &file)?
        }
        None if opts.invariants => vec![invariants(&scenario, &traces, &file)?],
        None => Vec::new(),
    };
    if opts.determinism {
        outcomes.push(determinism(&scenario, scenario.sim.seed).with_context(|| file.clone())?);
    }
    Ok(ScenarioReport {
        file,
        name: scenario.sim.name.clone(),
        outcomes,
        wall_s: start.elapsed().as_secs_f64(),
    })
}

/// One seed's run: its flattened metrics, or the seed, the error and whether it is an
/// invariant violation.
type SeedRun = Result<serde_json::Map<String, serde_json::Value>, (u64, String, bool)>;

/// Runs `scenario` (from `src`) on each of `seeds`, on `opts.jobs` threads.
fn seed_runs(
    src: &Source,
    scenario: &Scenario,
    traces: &TraceCache,
    seeds: &[u64],
    opts: CheckOptions,
) -> Result<Vec<SeedRun>> {
    let ropts = RunOptions {
        check_invariants: opts.invariants,
        ..RunOptions::summary_only()
    };
    crate::run::parallel(opts.jobs, seeds, |&seed| {
        crate::run::at_seed(scenario, seed, traces, ropts)
            .map(|r| flatten(&r.summary))
            .map_err(|f| match f {
                Failure::Workload(e) => (seed, src.error(e).to_string(), false),
                Failure::Sim(e @ SimError::Invariant(..)) => (seed, e.to_string(), true),
                Failure::Sim(e) => (seed, e.to_string(), false),
            })
    })
}

/// The outcomes of `[expect]` over the seeds' runs: a failed one per seed that broke an
/// invariant (with `invariants`, a passed one when none did), then each bound, evaluated
/// only when every seed ran through.
fn bounds(exp: &Expectations, runs: Vec<SeedRun>, invariants: bool, file: &str) -> Result<Vec<Outcome>> {
    let mut outcomes = Vec::new();
    let mut metrics = Vec::new();
    for r in runs {
        match r {
            Ok(m) => metrics.push(m),
            Err((seed, e, true)) => outcomes.push(Outcome {
                name: "invariants".into(),
                value: None,
                pass: false,
                detail: format!("seed {seed}: {e}"),
            }),
            Err((seed, e, false)) => anyhow::bail!("{file}: seed {seed}: {e}"),
        }
    }
    if invariants && outcomes.is_empty() {
        outcomes.push(Outcome {
            name: "invariants".into(),
            value: None,
            pass: true,
            detail: format!("checked after every event on {} seeds", exp.seeds.len()),
        });
    }
    if metrics.len() < exp.seeds.len() {
        // A seed broke an invariant: no bound can be trusted, so every one fails.
        outcomes.extend(exp.checks.iter().map(|(text, _)| Outcome {
            name: text.clone(),
            value: None,
            pass: false,
            detail: "not evaluated: an invariant was violated (see above)".into(),
        }));
        return Ok(outcomes);
    }
    for (text, c) in &exp.checks {
        outcomes.push(bound(text, c, &metrics, &exp.seeds, file)?);
    }
    Ok(outcomes)
}

/// The outcome of the bound `c` (written `text`) over the seeds' metrics.
fn bound(
    text: &str,
    c: &Check,
    metrics: &[serde_json::Map<String, serde_json::Value>],
    seeds: &[u64],
    file: &str,
) -> Result<Outcome> {
    let mut values = Vec::new();
    for (m, seed) in metrics.iter().zip(seeds) {
        let v = m.get(&c.metric).and_then(serde_json::Value::as_f64).with_context(|| {
            format!(
                "{file}: `{}` in `{text}`: this scenario does not report it (seed {seed})",
                c.metric
            )
        })?;
        values.push(v);
    }
    let (value, pass) = expr::evaluate(c, &values);
    let mut detail = if seeds.len() == 1 {
        format!("seed {}", seeds[0])
    } else {
        format!("{} seeds", seeds.len())
    };
    if !pass && c.agg == expr::Agg::All && seeds.len() > 1 {
        detail.push_str(&failing_seeds(c, &values, seeds));
    }
    Ok(Outcome {
        name: text.to_string(),
        value: Some(value),
        pass,
        detail,
    })
}

/// The invariants checked after every event of one run at the scenario's own seed.
fn invariants(scenario: &Scenario, traces: &TraceCache, file: &str) -> Result<Outcome> {
    let ropts = RunOptions {
        check_invariants: true,
        ..RunOptions::summary_only()
    };
    let (pass, detail) = match crate::run::at_seed(scenario, scenario.sim.seed, traces, ropts) {
        Ok(_) => (true, format!("checked after every event, seed {}", scenario.sim.seed)),
        Err(Failure::Sim(e @ SimError::Invariant(..))) => (false, e.to_string()),
        Err(Failure::Sim(e)) => anyhow::bail!("{file}: {e}"),
        Err(Failure::Workload(e)) => anyhow::bail!("{file}: {}", e.message),
    };
    Ok(Outcome {
        name: "invariants".into(),
        value: None,
        pass,
        detail,
    })
}

/// `; fails on seed 3 (12.5)`, or on seeds `3 (12.5), 7 (9.1)`, up to 5 named: the seeds
/// that break a per-seed bound, with their values, so the failure can be re-run alone.
fn failing_seeds(c: &expr::Check, values: &[f64], seeds: &[u64]) -> String {
    let bad: Vec<String> = values
        .iter()
        .zip(seeds)
        .filter(|(x, _)| !c.holds_for(**x))
        .map(|(x, s)| format!("{s} ({})", crate::sweep::table::fmt_stat(*x)))
        .collect();
    let more = if bad.len() > 5 {
        format!(" and {} more", bad.len() - 5)
    } else {
        String::new()
    };
    let word = if bad.len() == 1 { "seed" } else { "seeds" };
    format!("; fails on {word} {}{more}", bad[..bad.len().min(5)].join(", "))
}

/// The pass/fail table.
pub fn render(reports: &[ScenarioReport]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for r in reports {
        if r.outcomes.is_empty() {
            rows.push(vec![
                r.name.clone(),
                "(no [expect] table)".into(),
                String::new(),
                "skip".into(),
                String::new(),
            ]);
        }
        for o in &r.outcomes {
            rows.push(vec![
                r.name.clone(),
                o.name.clone(),
                o.value.map(crate::sweep::table::fmt_stat).unwrap_or_default(),
                if o.pass { "pass".into() } else { "FAIL".into() },
                o.detail.clone(),
            ]);
        }
    }
    let mut out = crate::output::render(&["scenario", "check", "value", "result", ""], rows, &[]);
    let all: Vec<&Outcome> = reports.iter().flat_map(|r| &r.outcomes).collect();
    let failed = all.iter().filter(|o| !o.pass).count();
    out.push_str(&format!(
        "{} scenarios, {} checks: {} passed, {failed} failed\n",
        reports.len(),
        all.len(),
        all.len() - failed
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::EventKind;
    use crate::time::SimTime;

    fn rec(t: u64, kind: EventKind) -> EventRecord {
        EventRecord {
            t: SimTime(t),
            kind,
            a: 1,
            b: 0,
        }
    }

    #[test]
    fn divergence_is_the_first_differing_event() {
        use EventKind::{Complete, ServiceDone, StepDone, TurnArrival};
        let a = vec![rec(1, TurnArrival), rec(2, StepDone), rec(3, Complete)];
        let mut b = a.clone();
        assert_eq!(first_divergence(&a, &b), None);
        b[1] = rec(2, ServiceDone);
        let (i, x, y) = first_divergence(&a, &b).unwrap();
        assert_eq!(
            (i, x.unwrap().kind_name(), y.unwrap().kind_name()),
            (1, "StepDone", "ServiceDone")
        );
        assert_eq!(
            first_divergence(&a, &a[..2]).map(|d| d.0),
            Some(2),
            "a shorter log diverges where it ends"
        );
        assert_ne!(event_log_hash(&a), event_log_hash(&b));
    }
}
