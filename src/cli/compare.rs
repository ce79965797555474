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
    /// Relative tolerance (of the baseline value).
    #[arg(long, default_value_t = 0.0)]
    pub(super) rel_tol: f64,
    /// Absolute tolerance.
    #[arg(long, default_value_t = 1e-9)]
    pub(super) abs_tol: f64,
    /// Compare only these metrics (repeatable).
    #[arg(long = "metric", value_name = "METRIC")]
    pub(super) metrics: Vec<String>,
    /// Also list metrics that changed within tolerance.
    #[arg(long)]
    pub(super) all: bool,
    /// Show two run folders side by side (share per backend, prefix hit rate,
    /// idle-while-queued, latency percentiles) instead of metric by metric; the default
    /// when either is a served or loaded run.
    #[arg(long)]
    pub(super) side_by_side: bool,
}

pub(super) fn cmd_compare(a: CompareArgs) -> Result<ExitCode> {
    use crate::live::load::side_by_side;
    if a.side_by_side || (a.a.is_dir() && a.b.is_dir() && (side_by_side::is_live(&a.a) || side_by_side::is_live(&a.b)))
    {
        let (sa, sb) = (side_by_side::read(&a.a)?, side_by_side::read(&a.b)?);
        out!(
            "{}",
            side_by_side::render(&sa, &a.a.display().to_string(), &sb, &a.b.display().to_string())
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::ensure!(
        a.rel_tol >= 0.0 && a.abs_tol >= 0.0 && a.rel_tol.is_finite() && a.abs_tol.is_finite(),
        "tolerances must be finite and >= 0"
    );
    let (la, ma) = load_metrics(&a.a)?;
    let (lb, mb) = load_metrics(&a.b)?;
    let metrics: Vec<String> = a
        .metrics
        .iter()
        .map(|m| crate::metrics::canonical_metric(m).into_owned())
        .collect();
    if let Some(bad) = metrics.iter().find(|m| !ma.contains_key(*m) && !mb.contains_key(*m)) {
        anyhow::bail!("--metric {bad}: neither side reports it");
    }
    let deltas = compare(
        &ma,
        &mb,
        Tolerance {
            abs: a.abs_tol,
            rel: a.rel_tol,
        },
        &metrics,
    );
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
