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
    /// Only these built-in candidates, by label, comma-separated (default: all of them, or
    /// none beside --candidate/--candidates; see --list).
    #[arg(long, value_delimiter = ',', value_name = "LABEL,...")]
    pub(super) only: Vec<String>,
    /// Centre the family on this scenario: member 0 is it as written, the others vary its
    /// fleet size, traffic and scrape; its own policy joins the candidates as `as written`.
    #[arg(long, visible_alias = "centre", value_name = "SCENARIO")]
    pub(super) center: Option<PathBuf>,
    /// Override a key of the --center scenario: --set router.engine_stats_interval_s=5
    /// (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = crate::scenario::parse_set, requires = "center")]
    pub(super) sets: Vec<(String, String)>,
    /// A candidate rule of yours: 'LABEL={ kind = "...", ... }' (repeatable); with it, or
    /// with --candidates, the built-in candidates run only if --only names them.
    #[arg(long = "candidate", value_name = "LABEL=TABLE")]
    pub(super) candidate: Vec<String>,
    /// A TOML file of candidate rules: [[candidate]] tables with label, policy (an inline
    /// table) and an optional upstream note.
    #[arg(long, value_name = "FILE")]
    pub(super) candidates: Option<PathBuf>,
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

/// The built-in candidates `--only` keeps (all of them without it, unless the user brings
/// candidates of their own).
fn built_in(a: &FamilyArgs, user: bool) -> Result<Vec<crate::family::Candidate>> {
    let all = crate::family::candidates();
    for l in &a.only {
        if !all.iter().any(|c| &c.label == l) {
            let labels: Vec<&str> = all.iter().map(|c| c.label.as_str()).collect();
            anyhow::bail!(
                "--only: unknown candidate `{}`; expected one of: {}",
                crate::quote::one_line(l),
                labels.join(", ")
            );
        }
    }
    Ok(all
        .into_iter()
        .filter(|c| {
            if a.only.is_empty() {
                !user
            } else {
                a.only.contains(&c.label)
            }
        })
        .collect())
}

/// The candidates: the centre's own policy first (with --center), the user's, then the
/// built-in ones kept.
fn candidates(a: &FamilyArgs, centre: Option<&crate::scenario::Source>) -> Result<Vec<crate::family::Candidate>> {
    use crate::family::centre;
    let mut user = Vec::new();
    if let Some(f) = &a.candidates {
        user.extend(centre::read_candidates(f)?);
    }
    for spec in &a.candidate {
        user.push(centre::parse_candidate(spec)?);
    }
    let mut cands: Vec<_> = centre.map(centre::as_written).into_iter().collect();
    cands.extend(built_in(a, !user.is_empty())?);
    cands.splice(cands.len().min(1)..cands.len().min(1), user);
    centre::check_unique(&cands)?;
    Ok(cands)
}

pub(super) fn cmd_family(a: FamilyArgs) -> Result<ExitCode> {
    let centre = a
        .center
        .as_deref()
        .map(|p| crate::family::centre::read_centre(p, &a.sets))
        .transpose()?;
    let cands = candidates(&a, centre.as_ref())?;
    let setups: Vec<crate::family::Member> = match &centre {
        Some(c) => crate::family::centre::around(c, a.seed, a.n)?,
        None => crate::family::draw(a.seed, a.n).iter().map(Into::into).collect(),
    };
    if a.list {
        for s in &setups {
            outln!("member {:3}  {}", s.index, s.description)?;
        }
        let t = setups
            .first()
            .map_or(crate::family::setup::THRESHOLD_CHARS, |m| m.threshold_chars);
        for c in &cands {
            outln!("candidate  {:30} {}  [{}]", c.label, c.table(t), c.upstream)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let jobs = crate::run::jobs_flag(a.jobs)?;
    // More threads than runs would only idle.
    let runs = setups.len() * cands.len() * a.seeds as usize;
    let jobs = jobs.min(runs.max(1));
    let start = std::time::Instant::now();
    let centre_file = centre.as_ref().map(|c| c.file.clone());
    let f = crate::family::execute(a.seed, centre_file, setups, cands, a.seeds, jobs)?;
    let default = match (&centre, f.setups.first()) {
        (Some(_), Some(m)) => format!("family-{}-{}", m.name.trim_end_matches("-000"), a.seed),
        _ => format!("family-{}", a.seed),
    };
    let dir = a.out.clone().unwrap_or_else(|| super::default_out(&default));
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
