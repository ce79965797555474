//! `sim tune`: recommends a routing configuration for a scenario's fleet and traffic, with
//! the evidence.
//!
//! * [`space`]: the candidates (a space file or the default space, plus the scenario's own);
//! * [`objective`]: the weighted objective, constraints and the Pareto front;
//! * [`halving`]: successive halving over seeds with paired comparisons (pure bookkeeping);
//! * [`report`]: the ranked table, why the winner wins, the TOML snippet, the files;
//! * [`flags`]: the winner as production-stack router flags;
//! * [`upstream`]: which configurations upstream routers ship, with their flags;
//! * [`capacity`]: with `--sizes` / `--profiles`, the cheapest fleet and router meeting the
//!   scenario's `[slo]`.
//!
//! Each round of the search is a sweep (one `candidate` axis, the round's new seeds) run by
//! the sweep machinery, so it is parallel, byte-identical for any `--jobs`, and shardable:
//! a round's shards write `rounds/round-R/shards/`, and once all are there any invocation
//! merges them into `rounds/round-R.json` and goes on. Completed rounds are reused, so an
//! interrupted or sharded tune resumes where it stopped: a round file is reused only when
//! `rounds/digests.json` lists it with its SHA-256 and it holds every run of its round.
//!
//! Owns: the search space, successive halving and the recommendation. May not see:
//! simulation internals (candidates run through the sweep machinery). Invariant: every
//! candidate of a round runs on the same seeds (common random numbers).

pub mod capacity;
pub mod cli;
pub mod flags;
pub mod gpu;
pub mod halving;
pub mod objective;
pub mod pareto;
pub mod report;
pub mod space;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::scenario::Source;
use crate::sweep::exec::{ExecOptions, Points, RunFailure, execute, shard_path};
use crate::sweep::spec::{Axis, Level, Plan, PlotFile};
use crate::sweep::table::{self, SweepFile};
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

/// `dir/rounds/digests.json`: the SHA-256 of every round file this tune completed, written
/// after the round file. A round file is reused only if it is listed with its digest (an
/// edited one is an error naming it, not a surprise in a later round); one that is not
/// listed (a tune killed between the two writes) is run again.
pub const DIGESTS: &str = "digests.json";

fn digests_path(dir: &Path) -> PathBuf {
    dir.join("rounds").join(DIGESTS)
}

fn read_digests(dir: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let p = digests_path(dir);
    if !p.exists() {
        return Ok(Default::default());
    }
    let text = crate::atomic::read_text(&p, 16 << 20, "the round digests")
        .map_err(|(_, m)| anyhow::anyhow!("{}: {m}; remove {} to run the tune again", p.display(), dir.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: not a digest list ({e}); remove {} to run the tune again",
            p.display(),
            dir.display()
        )
    })
}

/// Writes round file `r` and then records its digest.
fn write_round(dir: &Path, r: usize, f: &SweepFile) -> Result<()> {
    let p = round_path(dir, r);
    let bytes = f.to_bytes()?;
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| anyhow::anyhow!("creating {}: {e}", d.display()))?;
    }
    crate::atomic::write_file(&p, &bytes)?;
    let mut digests = read_digests(dir)?;
    digests.insert(format!("round-{r}.json"), crate::sweep::sha256_hex(&bytes));
    let mut out = serde_json::to_vec_pretty(&digests)?;
    out.push(b'\n');
    crate::atomic::write_file(&digests_path(dir), &out)
}

/// Round file `r` if this tune completed it: listed in [`DIGESTS`] with its digest, whole
/// (every run of the round present) and written for the same runs (`meta`). `None`: absent
/// or not listed, so the round runs again.
fn read_round(dir: &Path, r: usize, meta: &crate::sweep::table::Meta) -> Result<Option<SweepFile>> {
    let p = round_path(dir, r);
    let digests = read_digests(dir)?;
    let Some(want) = digests.get(&format!("round-{r}.json")) else {
        return Ok(None);
    };
    if !p.exists() {
        return Ok(None);
    }
    let bytes = std::fs::read(&p).map_err(|e| anyhow::anyhow!("reading {}: {e}", p.display()))?;
    if crate::sweep::sha256_hex(&bytes) != *want {
        bail!(
            "{}: changed since this tune wrote it (its SHA-256 is not the one {} records); remove it and the rounds after it to run them again",
            p.display(),
            digests_path(dir).display()
        );
    }
    let f = SweepFile::from_slice(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not a fleetsim sweep file: {e:#}", p.display()))?;
    f.validate()
        .map_err(|e| anyhow::anyhow!("{}: inconsistent sweep file: {e:#}", p.display()))?;
    if !f.meta.same_runs(meta) {
        bail!(
            "{}: written by a different tune (scenario, version, overrides, space, objective, budget or seed differ); remove {} or choose another --out",
            p.display(),
            dir.display()
        );
    }
    whole(&p, &f, meta.runs)?;
    Ok(Some(f))
}

/// A round or shard file must hold every run it claims: complete, and exactly the runs of
/// its shard (all of them for a round file), so `complete: true` over 2 of 12 rows is an
/// error naming the file.
fn whole(p: &Path, f: &SweepFile, runs: u64) -> Result<()> {
    let want = match f.shard {
        Some([k, n]) => (runs + n - 1 - k) / n,
        None => runs,
    };
    if !f.complete || f.rows.len() as u64 != want {
        bail!(
            "{}: holds {} of the {want} runs it should{}; remove it to run them again",
            p.display(),
            f.rows.len(),
            if f.complete {
                " (marked complete)"
            } else {
                " (incomplete)"
            }
        );
    }
    Ok(())
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
    fingerprints: &mut crate::sweep::Fingerprints,
) -> Result<Outcome> {
    let metrics: Vec<String> = search.objective.terms.iter().map(|t| t.metric.clone()).collect();
    let mut spent = Spent::default();
    // Rounds replaying the same files share a fingerprint and the parsed traces.
    let traces = fingerprints.traces.clone();
    while let Some((which, seeds)) = search.next() {
        let r = search.rounds.len();
        let plan = round_plan(cands, &which, &seeds, &metrics);
        let inputs = fingerprints.of(src, Some(&plan));
        let meta = crate::sweep::meta(scenario_name, sets, plan, inputs);
        let rows = match read_round(&opts.dir, r, &meta)? {
            Some(f) => f.rows,
            None => match run_round(src, &meta, r, opts, &traces, &mut spent)? {
                Round::Done(rows) => rows,
                Round::Waiting(missing) => return Ok(Outcome::Waiting { round: r, missing }),
            },
        };
        let mut grid = vec![Vec::with_capacity(seeds.len()); which.len()];
        for row in rows {
            // validate() has checked every row against the round's grid.
            if let Some(g) = grid.get_mut(row.point as usize) {
                g.push(row.metrics);
            }
        }
        search.absorb(&which, &seeds, grid);
    }
    Ok(Outcome::Done {
        executed: spent.executed,
        wall: spent.wall,
    })
}

/// What this invocation ran: runs and their wall time.
#[derive(Default)]
struct Spent {
    executed: u64,
    wall: Duration,
}

/// A round not on disk yet.
enum Round {
    /// Every run of it, in run order (now written as its round file).
    Done(Vec<table::RunRow>),
    /// This shard's part is done; these shard files are missing.
    Waiting(Vec<PathBuf>),
}

/// Round `r`: the rows of its shard files already written (a sharded or interrupted tune),
/// this invocation's own part run, and the round written once every part is there.
fn run_round(
    src: &Source,
    meta: &table::Meta,
    r: usize,
    opts: &Options,
    traces: &std::sync::Arc<crate::trace::TraceCache>,
    spent: &mut Spent,
) -> Result<Round> {
    let shard_dir = opts.dir.join("rounds").join(format!("round-{r}"));
    let (mut done, mut missing) = shard_files(&shard_dir, meta, opts)?;
    let own_missing = opts
        .shard
        .is_some_and(|(k, n)| missing.contains(&shard_path(&shard_dir, k, n)));
    if opts.shard.is_none() || own_missing {
        let start = Instant::now();
        let (f, _) = execute(
            src,
            meta,
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
        spent.wall += start.elapsed();
        spent.executed += f.rows.len() as u64;
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
        return Ok(Round::Waiting(missing));
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
    write_round(&opts.dir, r, &f)?;
    Ok(Round::Done(f.rows))
}

/// The rows of the round's shard files in `shard_dir` written for these runs, and the shard
/// files missing.
fn shard_files(shard_dir: &Path, meta: &table::Meta, opts: &Options) -> Result<(Vec<table::RunRow>, Vec<PathBuf>)> {
    let mut done = Vec::new();
    let mut missing = Vec::new();
    let n = opts.shard.map_or(0, |s| s.1);
    for k in 0..n {
        let p = shard_path(shard_dir, k, n);
        match p.exists().then(|| table::read(&p)).transpose()? {
            Some(f) if f.meta.same_runs(meta) => {
                whole(&p, &f, meta.runs)?;
                done.extend(f.rows)
            }
            Some(_) => bail!(
                "{}: written by a different tune; remove {} or choose another --out",
                p.display(),
                opts.dir.display()
            ),
            None => missing.push(p),
        }
    }
    Ok((done, missing))
}

/// Writes tune.md, tune.json, tune.csv, winner.toml and (when `png_dpi` is given) the
/// Pareto plot into `dir`.
pub fn write(dir: &Path, r: &report::Report, png_dpi: Option<u32>) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
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
