//! `sim tune` on the command line: arguments, the run, what is printed and written.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, anyhow};
use clap::Args;

use super::halving::{Search, Settings};
use super::objective::{DEFAULT_OBJECTIVE, DEFAULT_PARETO, Objective, constraints, pareto_metrics};
use super::{InvariantBroken, Options, Outcome, drive, report, space};
use crate::scenario::{Source, parse_set};

/// Default budget: this many runs per candidate.
pub const DEFAULT_RUNS_PER_CANDIDATE: u64 = 8;

/// `sim tune` arguments.
// The field docs are `--help` text (plain, with <placeholders>), not Markdown.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// Scenario file (TOML): the fleet and the workload or trace to tune for.
    scenario: PathBuf,
    /// The first seed (default: the scenario's); seeds are SEED, SEED+1, ... for every candidate.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=i64::MAX as u64))]
    seed: Option<u64>,
    /// Override any scenario key before tuning (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = parse_set)]
    sets: Vec<(String, String)>,
    /// Space file: [[policy]] entries whose lists expand to candidates (default: every
    /// catalogue policy with its upstream defaults and the parameters that matter; see
    /// scenarios/tune/default-space.toml).
    #[arg(long, value_name = "SPACE.toml")]
    space: Option<PathBuf>,
    /// Weighted objective, lower is better: METRIC[=WEIGHT],... Each metric counts in units
    /// of the scenario's own mean; hit rates, throughputs and Jain's index are maximized.
    #[arg(long, default_value = DEFAULT_OBJECTIVE)]
    objective: String,
    /// Also weigh GPU-seconds (the autoscaler's pod-seconds times GPUs per replica): adds
    /// the term gpu_seconds=WEIGHT to the objective. Needs an [autoscaler].
    #[arg(long, value_name = "WEIGHT")]
    gpu_weight: Option<f64>,
    /// A bound every recommendation must meet, in the [expect] syntax:
    /// 'mean(ttft_p99_s) <= 2' (a bare metric must hold on every seed). Repeatable.
    #[arg(long = "constraint", value_name = "BOUND")]
    constraints: Vec<String>,
    /// Two or three metrics for the Pareto front and plot.
    #[arg(long, default_value = DEFAULT_PARETO, value_name = "M1,M2[,M3]")]
    pareto: String,
    /// Total runs (default: 8 per candidate).
    #[arg(long, value_name = "RUNS")]
    budget: Option<u64>,
    /// Keep the best 1/ETA of the candidates each round.
    #[arg(long, default_value_t = 3)]
    eta: u64,
    /// Stop early when the leader beats the runner-up at this one-sided confidence
    /// (paired t-test on common seeds, checked from the second round on).
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Seeds per candidate in the screening round (at least 2).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..))]
    screen_seeds: u64,
    /// Only configurations upstream routers ship today (production-stack main, SGLang,
    /// llm-d, AIBrix, Dynamo, with their flags): candidates that need a patch or an open PR
    /// are left out (the scenario's own configuration stays, as the baseline).
    #[arg(long)]
    upstream_only: bool,
    /// How the winner is chosen among the candidates the seeds cannot separate from the
    /// leader.
    #[arg(long, value_enum, default_value_t = report::TieBreak::Upstream)]
    tie_break: report::TieBreak,
    /// Run every candidate on BUDGET / candidates seeds instead of halving (the exhaustive
    /// sweep to check successive halving against).
    #[arg(long)]
    exhaustive: bool,
    /// Worker threads (default: all cores). The result does not depend on it.
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Sharding of each round (`--shard K/N` or `--shard auto`, as `sim sweep`); run every
    /// shard again after each round until one prints the recommendation.
    #[command(flatten)]
    sharding: crate::sweep::shard::ShardArgs,
    /// Output folder (default: out/tune/<scenario name>); completed rounds there are reused.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the candidates and exit without running.
    #[arg(long)]
    list: bool,
    /// Rows of the ranked table printed (all are written to tune.md and tune.csv).
    #[arg(long, default_value_t = 12)]
    top: usize,
    /// Do not draw the Pareto plot.
    #[arg(long)]
    no_plots: bool,
    #[command(flatten)]
    plot: crate::plot::PlotArgs,
    /// The fleet axes of a capacity search.
    #[command(flatten)]
    capacity: super::capacity::CapacityArgs,
    /// No progress bars, no report on stdout (files are still written).
    #[arg(long, short)]
    quiet: bool,
}

/// Runs `sim tune`.
pub fn cmd_tune(a: TuneArgs) -> Result<ExitCode> {
    match tune(a) {
        Err(e) if e.downcast_ref::<InvariantBroken>().is_some() => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(1))
        }
        other => other,
    }
}

fn tune(a: TuneArgs) -> Result<ExitCode> {
    let shard = a.sharding.resolve()?;
    let mut sets = a.sets.clone();
    if let Some(seed) = a.seed {
        sets.push(("seed".into(), seed.to_string()));
    }
    let mut src = Source::read(&a.scenario)?;
    src.apply(&sets, "--set")?;
    // The base scenario's traces are parsed as they are hashed, and kept for the rounds.
    let mut fingerprints = crate::sweep::Fingerprints::new();
    fingerprints.of(&src, None);
    let (base, _, _) = src.build_with(&fingerprints.traces)?;
    let objective = super::gpu::objective(&a.objective, a.gpu_weight).map_err(|m| anyhow!(m))?;
    super::gpu::check(&objective, base.sim.autoscaler.is_some()).map_err(|m| anyhow!(m))?;
    let (cands, dropped) = candidates(&a, &src)?;
    if a.list {
        list(&cands, &dropped)?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.capacity.active() {
        let dir = a
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("out").join("tune").join(&base.sim.name));
        let jobs = crate::run::jobs_flag(a.jobs)?;
        super::capacity::run(&a.capacity, &src, &base, &sets, &cands, jobs, &dir, a.quiet)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (mut search, pareto) = new_search(&a, &objective, cands.len(), src.first_seed())?;
    let jobs = crate::run::jobs_flag(a.jobs)?;
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join("tune").join(&base.sim.name));
    let start = Instant::now();
    let opts = Options {
        jobs,
        shard,
        dir: dir.clone(),
        progress: !a.quiet,
    };
    let outcome = drive(
        &src,
        &base.sim.name,
        &sets,
        &cands,
        &mut search,
        &opts,
        &mut fingerprints,
    )?;
    let (executed, wall) = match outcome {
        Outcome::Waiting { round, missing } => {
            if !a.quiet {
                fleetsim_io::outln!(
                    "round {} shard done; waiting for {} more shard file(s) (e.g. {}); run every shard again when they are there",
                    round + 1,
                    missing.len(),
                    missing[0].display()
                )?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        Outcome::Done { executed, wall } => (executed, wall),
    };
    let rep = report::build(&src, &base.sim.name, &cands, &dropped, &search, &pareto, a.tie_break);
    let written = super::write(&dir, &rep, a.plot.dpi(a.no_plots))?;
    if !a.quiet {
        fleetsim_io::out!("{}", report::render(&rep, a.top))?;
        let names: Vec<String> = written
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        fleetsim_io::outln!("\nwrote {}/{{{}}}", dir.display(), names.join(","))?;
        eprintln!(
            "{executed} runs executed ({} reused from {}) in {:.2} s on {jobs} threads ({:.2} s total)",
            search.used - executed,
            dir.join("rounds").display(),
            wall.as_secs_f64(),
            start.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--list`: the candidates, numbered, then those left out with why.
fn list(cands: &[space::Candidate], dropped: &[space::Dropped]) -> Result<()> {
    for (i, c) in cands.iter().enumerate() {
        fleetsim_io::outln!("{i}\t{}", c.label)?;
    }
    for d in dropped {
        fleetsim_io::outln!("-\t{}\t(left out: {})", d.label, d.reason)?;
    }
    eprintln!("{} candidates ({} left out)", cands.len(), dropped.len());
    Ok(())
}

/// The search over `candidates` as the flags set it (objective, constraints, budget, by
/// default [`DEFAULT_RUNS_PER_CANDIDATE`] each, halving and confidence, seeds from
/// `base_seed`) and the Pareto front's metrics.
fn new_search(a: &TuneArgs, objective: &str, candidates: usize, base_seed: u64) -> Result<(Search, Vec<String>)> {
    let objective = Objective::parse(objective).map_err(|m| anyhow!(m))?;
    let bounds = constraints(&a.constraints).map_err(|m| anyhow!(m))?;
    let pareto = pareto_metrics(&a.pareto).map_err(|m| anyhow!(m))?;
    let settings = Settings {
        budget: a
            .budget
            .unwrap_or(DEFAULT_RUNS_PER_CANDIDATE.saturating_mul(candidates as u64)),
        eta: a.eta,
        confidence: a.confidence,
        min_seeds: a.screen_seeds,
        exhaustive: a.exhaustive,
    };
    let search = Search::new(candidates, settings, objective, bounds, base_seed).map_err(|m| anyhow!(m))?;
    Ok((search, pareto))
}

/// The space's candidates resolved against `src` (the scenario's own first), and those left
/// out with why; `--upstream-only` leaves out every one no released router ships.
fn candidates(a: &TuneArgs, src: &Source) -> Result<(Vec<space::Candidate>, Vec<space::Dropped>)> {
    let (space, strict) = match &a.space {
        Some(p) => {
            let text = crate::atomic::read_text(p, crate::scenario::MAX_SCENARIO_BYTES, "the space file").map_err(
                |(at, m)| match at {
                    Some((l, c)) => anyhow!("{}:{l}:{c}: {m}", p.display()),
                    None => anyhow!("{}: {m}", p.display()),
                },
            )?;
            (
                space::parse(&text, &p.display().to_string()).map_err(|m| anyhow!(m))?,
                true,
            )
        }
        None => (space::default_space(), false),
    };
    let (mut cands, mut dropped) = space::resolve(src, space, strict).map_err(|m| anyhow!(m))?;
    if a.upstream_only {
        let all = std::mem::take(&mut cands);
        for (i, c) in all.into_iter().enumerate() {
            if i == 0 || super::upstream::of_candidate(src, &c).is_some() {
                cands.push(c);
            } else {
                dropped.push(space::Dropped {
                    label: c.label,
                    reason: "--upstream-only: no released router ships it (needs a patch or an open PR)".into(),
                });
            }
        }
        anyhow::ensure!(
            cands.len() > 1,
            "--upstream-only: no candidate of the space is shipped upstream"
        );
    }
    Ok((cands, dropped))
}
