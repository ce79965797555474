//! `sim family`: candidate rules judged over a random family of fleets and traffic
//! (logic in `crate::family`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::out::{out, outln};

#[derive(Args, Debug)]
pub(super) struct FamilyArgs {
    /// Members to draw (fleets and traffic, each a scenario written to <out>/members/).
    #[arg(long, short = 'n', default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(super) n: u64,
    /// The family's seed: the same seed draws the same members.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Run seeds per member (1..=N, the same for every candidate: common random numbers).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(super) seeds: u64,
    /// Only these candidates, by label, comma-separated (default: all; see --list).
    #[arg(long, value_delimiter = ',', value_name = "LABEL,...")]
    pub(super) only: Vec<String>,
    /// Print the members and candidates and exit without running.
    #[arg(long)]
    pub(super) list: bool,
    /// Worker threads (default: all cores; at most 1024, and no more than the runs).
    #[arg(long, short)]
    pub(super) jobs: Option<usize>,
    /// Results folder (default: out/family-<seed>, an ignored folder).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Do not draw the regret plot.
    #[arg(long)]
    pub(super) no_plots: bool,
    #[command(flatten)]
    pub(super) plot: crate::plot::PlotArgs,
}

pub(super) fn cmd_family(a: FamilyArgs) -> Result<ExitCode> {
    let all = crate::family::candidates();
    for l in &a.only {
        if !all.iter().any(|c| c.label == l) {
            let labels: Vec<&str> = all.iter().map(|c| c.label).collect();
            anyhow::bail!(
                "--only: unknown candidate `{}`; expected one of: {}",
                crate::quote::one_line(l),
                labels.join(", ")
            );
        }
    }
    let cands: Vec<_> = all
        .into_iter()
        .filter(|c| a.only.is_empty() || a.only.iter().any(|l| l == c.label))
        .collect();
    let setups = crate::family::draw(a.seed, a.n);
    if a.list {
        for s in &setups {
            outln!("member {:3}  {}", s.index, s.describe())?;
        }
        for c in &cands {
            outln!(
                "candidate  {:30} {}  [{}]",
                c.label,
                c.table(crate::family::setup::THRESHOLD_CHARS),
                c.upstream
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let jobs = crate::run::jobs_flag(a.jobs)?;
    // More threads than runs would only idle.
    let runs = setups.len() * cands.len() * a.seeds as usize;
    let jobs = jobs.min(runs.max(1));
    let start = std::time::Instant::now();
    let f = crate::family::execute(a.seed, setups, cands, a.seeds, jobs)?;
    let dir = a
        .out
        .unwrap_or_else(|| super::default_out(&format!("family-{}", a.seed)));
    let written = crate::family::write_outputs(&dir, &f, a.plot.dpi(a.no_plots))?;
    let md = std::fs::read_to_string(dir.join("regret.md"))?;
    out!("{md}")?;
    outln!(
        "{} runs in {:.1} s wall on {jobs} threads ({:.1} s summed over the runs); wrote {} files to {}",
        f.runs,
        start.elapsed().as_secs_f64(),
        f.run_s,
        written.len(),
        dir.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
