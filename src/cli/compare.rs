//! `sim compare`: two results metric by metric within a tolerance.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::out::out;
use crate::check::golden::{Tolerance, compare, load_metrics};

#[derive(Args, Debug)]
pub(super) struct CompareArgs {
    /// Baseline: golden file, summary.json, or results folder.
    pub(super) a: PathBuf,
    /// New results, same kinds.
    pub(super) b: PathBuf,
    /// Relative tolerance (of the baseline value) [default: 0; 0.1 side by side].
    #[arg(long)]
    pub(super) rel_tol: Option<f64>,
    /// Absolute tolerance [default: 1e-9].
    #[arg(long)]
    pub(super) abs_tol: Option<f64>,
    /// Compare only these metrics (repeatable).
    #[arg(long = "metric", value_name = "METRIC")]
    pub(super) metrics: Vec<String>,
    /// Also list metrics that changed within tolerance.
    #[arg(long)]
    pub(super) all: bool,
    /// Show two run folders side by side (share per backend, prefix hit rate,
    /// idle-while-queued, latency percentiles), then the tolerance verdict on those figures,
    /// instead of metric by metric; the default when either is a served or loaded run.
    #[arg(long)]
    pub(super) side_by_side: bool,
}

pub(super) fn cmd_compare(a: CompareArgs) -> Result<ExitCode> {
    use crate::live::load::side_by_side;
    // A missing path is named before anything is read, whichever side it is.
    for p in [&a.a, &a.b] {
        anyhow::ensure!(p.exists(), "{}: no such file or folder", p.display());
    }
    let side = a.side_by_side
        || (a.a.is_dir() && a.b.is_dir() && (side_by_side::is_live(&a.a) || side_by_side::is_live(&a.b)));
    let default_rel = if side { side_by_side::DEFAULT_REL_TOL } else { 0.0 };
    let tol = Tolerance {
        abs: a.abs_tol.unwrap_or(1e-9),
        rel: a.rel_tol.unwrap_or(default_rel),
    };
    for (flag, x) in [("--rel-tol", tol.rel), ("--abs-tol", tol.abs)] {
        anyhow::ensure!(x.is_finite() && x >= 0.0, "{flag} {x}: expected a finite number >= 0");
    }
    if side {
        let (sa, sb) = (side_by_side::read(&a.a)?, side_by_side::read(&a.b)?);
        let (verdict, ok) = side_by_side::verdict(&sa, &sb, tol);
        out!(
            "{}\n{verdict}",
            side_by_side::render(&sa, &a.a.display().to_string(), &sb, &a.b.display().to_string())
        )?;
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    let (la, ma) = load_metrics(&a.a)?;
    let (lb, mb) = load_metrics(&a.b)?;
    // Two results that share no metric are different kinds (a run beside a sweep): every
    // metric would read as a difference.
    if !ma.is_empty() && !mb.is_empty() && !ma.keys().any(|k| mb.contains_key(k)) {
        anyhow::bail!(
            "{} [{la}] and {} [{lb}] share no metric: compare a run with a run, a sweep with a sweep",
            a.a.display(),
            a.b.display()
        );
    }
    let metrics: Vec<String> = a
        .metrics
        .iter()
        .map(|m| crate::metrics::canonical_metric(m).into_owned())
        .collect();
    if let Some(bad) = metrics.iter().find(|m| !ma.contains_key(*m) && !mb.contains_key(*m)) {
        anyhow::bail!("--metric {bad}: neither side reports it");
    }
    let deltas = compare(&ma, &mb, tol, &metrics);
    out!(
        "{}",
        crate::check::golden::render(
            &deltas,
            &format!("{} [{}]", a.a.display(), la),
            &format!("{} [{}]", a.b.display(), lb),
            a.all
        )
    )?;
    Ok(if deltas.iter().all(|d| d.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
