//! `sim tune`: recommends a routing configuration for a scenario's fleet and traffic, with
//! the evidence.
//!
//! * [`space`]: the candidates (a space file or the default space, plus the scenario's own);
//! * [`objective`]: the weighted objective, constraints and the Pareto front;
//! * [`halving`]: successive halving over seeds with paired comparisons (pure bookkeeping);
//! * [`report`]: the ranked table, why the winner wins, the TOML snippet, the files;
//! * [`flags`]: the winner as production-stack router flags.
//!
//! Each round of the search is a sweep (one `candidate` axis, the round's new seeds) run by
//! the sweep machinery, so it is parallel, byte-identical for any `--jobs`, and shardable:
//! a round's shards write `rounds/round-R/shards/`, and once all are there any invocation
//! merges them into `rounds/round-R.json` and goes on. Completed rounds are reused, so an
//! interrupted or sharded tune resumes where it stopped.
//!
//! Owns: the search space, successive halving and the recommendation. May not see:
//! simulation internals (candidates run through the sweep machinery). Invariant: every
//! candidate of a round runs on the same seeds (common random numbers).

pub mod cli;
pub mod flags;
pub mod halving;
pub mod objective;
pub mod pareto;
pub mod report;
pub mod space;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::scenario::Source;
use crate::sweep::exec::{ExecOptions, Points, RunFailure, execute, shard_path};
use crate::sweep::spec::{Axis, Level, Plan, PlotFile};
use crate::sweep::table::{self, SweepFile};
use crate::trace::TraceCache;
use halving::Search;
use space::Candidate;

/// How to execute.
pub struct Options {
    /// Worker threads.
    pub jobs: usize,
    /// `(K, N)`: run only shard K of N of each round.
    pub shard: Option<(u64, u64)>,
    /// Where rounds and reports go.
    pub dir: PathBuf,
    /// Draw progress bars.
    pub progress: bool,
}

/// A run that broke an invariant (a simulator bug): exit code 1.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvariantBroken(pub String);

/// How far a tune got.
pub enum Outcome {
    /// The search ended.
    Done {
        /// Runs executed by this invocation (the rest came from earlier rounds on disk).
        executed: u64,
        /// Wall time of this invocation's runs.
        wall: Duration,
    },
    /// This shard did its part of a round; other shards' files are still missing.
    Waiting {
        /// The round (0-based).
        round: usize,
        /// Shard files not there yet.
        missing: Vec<PathBuf>,
    },
}

/// The sweep plan of one round: a `candidate` axis over `which`, on `seeds`.
pub fn round_plan(cands: &[Candidate], which: &[usize], seeds: &[u64], metrics: &[String]) -> Plan {
    let mut paths: Vec<String> = which
        .iter()
        .flat_map(|&c| cands[c].sets.iter().map(|(k, _)| k.clone()))
        .collect();
    paths.sort();
    paths.dedup();
    Plan {
        axes: vec![Axis {
            name: "candidate".into(),
            paths,
            levels: which
                .iter()
                .map(|&c| Level {
                    label: cands[c].label.clone(),
                    sets: cands[c].sets.clone(),
                })
                .collect(),
        }],
        seeds: seeds.to_vec(),
        metrics: metrics.to_vec(),
        counts: Vec::new(),
        plot: PlotFile::default(),
    }
}

/// `dir/rounds/round-R.json`.
pub fn round_path(dir: &Path, r: usize) -> PathBuf {
    dir.join("rounds").join(format!("round-{r}.json"))
}

fn failure(f: RunFailure, file: &str) -> anyhow::Error {
    let m = format!("{file}: {}", f.message);
    if f.invariant {
        InvariantBroken(m).into()
    } else {
        anyhow::anyhow!(m)
    }
}

/// Runs (or reads back) rounds until the search stops or this shard has to wait.
pub fn drive(
    src: &Source,
    scenario_name: &str,
    sets: &[(String, String)],
    cands: &[Candidate],
    search: &mut Search,
    opts: &Options,
) -> Result<Outcome> {
    let metrics: Vec<String> = search.objective.terms.iter().map(|t| t.metric.clone()).collect();
    let (mut executed, mut wall) = (0u64, Duration::ZERO);
    // Every round replays the same traces: read them once.
    let traces = std::sync::Arc::new(TraceCache::new());
    while let Some((which, seeds)) = search.next() {
        let r = search.rounds.len();
        let plan = round_plan(cands, &which, &seeds, &metrics);
        let meta = crate::sweep::meta(src, scenario_name, sets, plan);
        let merged = round_path(&opts.dir, r);
        let shard_dir = opts.dir.join("rounds").join(format!("round-{r}"));
        let rows = if merged.exists() {
            let f = table::read(&merged)?;
            if !f.meta.same_runs(&meta) {
                bail!(
                    "{}: written by a different tune (scenario, version, overrides, space, objective, budget or seed differ); remove {} or choose another --out",
                    merged.display(),
                    opts.dir.display()
                );
            }
            f.rows
        } else {
            // Rows already in this round's shard files (a sharded or interrupted tune).
            let mut done = Vec::new();
            let mut missing = Vec::new();
            let n = opts.shard.map_or(0, |s| s.1);
            for k in 0..n {
                let p = shard_path(&shard_dir, k, n);
                match p.exists().then(|| table::read(&p)).transpose()? {
                    Some(f) if f.meta.same_runs(&meta) && f.complete => done.extend(f.rows),
                    Some(_) => bail!(
                        "{}: written by a different tune; remove {} or choose another --out",
                        p.display(),
                        opts.dir.display()
                    ),
                    None => missing.push(p),
                }
            }
            let own_missing = opts
                .shard
                .is_some_and(|(k, n)| missing.contains(&shard_path(&shard_dir, k, n)));
            if opts.shard.is_none() || own_missing {
                let start = Instant::now();
                let (f, _) = execute(
                    src,
                    &meta,
                    &Points::new(&meta.plan, traces.clone()),
                    ExecOptions {
                        jobs: opts.jobs,
                        shard: opts.shard,
                        progress: opts.progress,
                        progress_every: std::time::Duration::from_secs(5),
                        done: Vec::new(),
                        on_partial: None,
                    },
                )
                .map_err(|e| failure(e, &src.file))?;
                wall += start.elapsed();
                executed += f.rows.len() as u64;
                if let Some((k, n)) = opts.shard {
                    let p = shard_path(&shard_dir, k, n);
                    table::write_file(
                        &p,
                        &SweepFile {
                            meta: meta.clone(),
                            shard: Some([k, n]),
                            complete: true,
                            build: Some(crate::sweep::build::identity().to_string()),
                            rows: f.rows.clone(),
                        },
                    )?;
                    missing.retain(|m| *m != p);
                }
                done.extend(f.rows);
            }
            if !missing.is_empty() {
                return Ok(Outcome::Waiting { round: r, missing });
            }
            let mut rows = done;
            rows.sort_by_key(|row| row.run);
            let f = SweepFile {
                meta: meta.clone(),
                shard: None,
                complete: true,
                build: None,
                rows,
            };
            f.validate()?;
            anyhow::ensure!(
                f.rows.len() as u64 == meta.runs,
                "round {r}: {} of {} runs present",
                f.rows.len(),
                meta.runs
            );
            table::write_file(&merged, &f)?;
            f.rows
        };
        let per = seeds.len();
        let mut grid = vec![Vec::with_capacity(per); which.len()];
        for row in rows {
            grid[row.point as usize].push(row.metrics);
        }
        search.absorb(&which, &seeds, grid);
    }
    Ok(Outcome::Done { executed, wall })
}

/// Writes tune.md, tune.json, tune.csv, winner.toml and (when `png_dpi` is given) the
/// Pareto plot into `dir`.
pub fn write(dir: &Path, r: &report::Report, png_dpi: Option<u32>) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut put = |name: &str, bytes: Vec<u8>| -> Result<()> {
        let p = dir.join(name);
        crate::atomic::write_atomic(&p, |b| {
            b.extend(bytes);
            Ok(())
        })?;
        written.push(p);
        Ok(())
    };
    put("tune.md", report::render(r, usize::MAX).into_bytes())?;
    let mut js = serde_json::to_vec_pretty(r)?;
    js.push(b'\n');
    put("tune.json", js)?;
    put("tune.csv", report::csv(r)?)?;
    put("winner.toml", r.snippet.clone().into_bytes())?;
    if let Some(dpi) = png_dpi {
        let fig = pareto::ParetoPlot::new(r);
        written.extend(crate::plot::save(&fig, &dir.join("pareto"), dpi)?);
    }
    Ok(written)
}
