//! `sim sweep`: a grid of scenario variants x seeds, run in parallel, collected in grid
//! order, exported as tables and plots; shardable over a batch cluster and merged back.
//!
//! * [`spec`]: axes, seeds and the grid order (what runs);
//! * [`exec`]: the rayon pool, progress and partial files (how it runs);
//! * [`table`]: rows, aggregates and files (what comes out), a pure function of the rows;
//! * [`counts`]: how many seeds of each point gave each value of a discrete metric
//!   (`counts.md`);
//! * [`plot`]: the sweep's line plots, drawn from the aggregates;
//! * [`build`] and [`progress`]: the build id that shards must share, and the progress bar;
//! * [`shard`]: `--shard K/N | auto`, from the flags or a Slurm array's or Kubernetes
//!   Indexed Job's task index.
//!
//! Owns: grids, sharding, resume and the sweep tables. May not see: simulation internals
//! (each point is a `sim::run` of a validated scenario). Invariant: the output is
//! byte-identical for any `--jobs` and for `--shard` + `sim merge`.

pub mod build;
pub mod counts;
pub mod exec;
pub mod plot;
pub mod progress;
pub mod shard;
pub mod spec;
pub mod table;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::scenario::Source;
use crate::trace::{ReadOptions, TraceCache, TraceGroupConfig};
use spec::Plan;
use table::{Meta, SweepFile, aggregate};

pub use crate::atomic::sha256_hex;

/// Hex SHA-256 of the scenario text, followed (when it replays traces) by each trace
/// file's path and bytes (as stored: a gzip file's compressed bytes), including files that
/// only a sweep level names (`-L workload.traces[0].file a.csv,b.csv`): a changed trace is
/// a different sweep. Each file is parsed into `traces` as its bytes are hashed, with the
/// reader options of the first scenario (base, then each level) that replays it, so the
/// runs find the parse there and no file is read twice.
pub fn inputs_sha256(src: &Source, plan: Option<&Plan>, traces: &TraceCache) -> String {
    let files = inputs(src, plan);
    if files.is_empty() {
        return sha256_hex(src.text.as_bytes());
    }
    let mut h = Sha256::new();
    h.update(src.text.as_bytes());
    for (f, group) in files {
        h.update(f.display().to_string().as_bytes());
        h.update([0]);
        // An unreadable or malformed trace fails the runs themselves with a clear message
        // (the parse error waits in `traces`); an unreadable one adds no bytes here.
        let (opts, agent) = match &group {
            Some(g) => (
                ReadOptions {
                    format: g.format,
                    skip_bad_rows: g.skip_bad_rows,
                },
                g.agent.read.clone(),
            ),
            None => Default::default(),
        };
        let _ = traces.read_with_sink(&f, opts, &agent, &mut |b| h.update(b));
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The fingerprints of one command's inputs (a tune computes one per round), each file
/// read once: by the first fingerprint that names it, which parses it into `traces` for the
/// runs; a later one over the same files is remembered, not recomputed.
pub struct Fingerprints {
    /// The parsed traces the runs share.
    pub traces: std::sync::Arc<TraceCache>,
    memo: Vec<(Vec<PathBuf>, String)>,
}

impl Fingerprints {
    /// Nothing hashed, nothing parsed yet.
    pub fn new() -> Self {
        Fingerprints {
            traces: Default::default(),
            memo: Vec::new(),
        }
    }

    /// [`inputs_sha256`] of `src` over `plan` (always the same `src`).
    pub fn of(&mut self, src: &Source, plan: Option<&Plan>) -> String {
        let files = input_files(src, plan);
        if let Some((_, sha)) = self.memo.iter().find(|(f, _)| *f == files) {
            return sha.clone();
        }
        let sha = inputs_sha256(src, plan, &self.traces);
        self.memo.push((files, sha.clone()));
        sha
    }
}

impl Default for Fingerprints {
    fn default() -> Self {
        Fingerprints::new()
    }
}

/// The trace files [`inputs_sha256`] hashes, in order.
pub fn input_files(src: &Source, plan: Option<&Plan>) -> Vec<PathBuf> {
    inputs(src, plan).into_iter().map(|(f, _)| f).collect()
}

/// The trace files of `src` and of the levels of `plan` that set trace keys, each with the
/// trace group of the first scenario that replays it (`None` where that scenario is
/// invalid: its runs fail on their own).
fn inputs(src: &Source, plan: Option<&Plan>) -> Vec<(PathBuf, Option<TraceGroupConfig>)> {
    let mut files: Vec<(PathBuf, Option<TraceGroupConfig>)> = Vec::new();
    let mut add = |s: &Source| {
        let groups = s.scenario().map(|sc| sc.traces).unwrap_or_default();
        for f in s.trace_files() {
            if !files.iter().any(|(have, _)| *have == f) {
                let g = groups.iter().find(|g| g.file == f).cloned();
                files.push((f, g));
            }
        }
    };
    add(src);
    for axis in plan.map_or(&[][..], |p| &p.axes[..]) {
        if !axis.paths.iter().any(|p| p.contains("traces")) {
            continue;
        }
        for level in &axis.levels {
            let mut alt = src.clone();
            // A level that does not apply fails its runs with a clear message.
            if alt.apply(&level.sets, "sweep").is_ok() {
                add(&alt);
            }
        }
    }
    files
}

/// The identity of a sweep of `src` (with `--set` overrides `sets`) over `plan`, whose
/// inputs hash to `inputs_sha256` (from [`inputs_sha256`]).
pub fn meta(scenario_name: &str, sets: &[(String, String)], plan: Plan, inputs_sha256: String) -> Meta {
    Meta {
        fleetsim_version: env!("CARGO_PKG_VERSION").to_string(),
        scenario: scenario_name.to_string(),
        scenario_sha256: inputs_sha256,
        sets: sets.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        points: plan.points(),
        runs: plan.runs(),
        plan,
    }
}

/// Writes the tables and (when `png_dpi` is given) the plots of a sweep.
pub fn write_outputs(dir: &Path, file: &SweepFile, png_dpi: Option<u32>) -> Result<Vec<PathBuf>> {
    let mut written = write_tables(dir, file)?;
    if let Some(dpi) = png_dpi {
        let agg = aggregate(&file.rows);
        written.extend(plot::write_sweep_plots(dir, &file.meta, &agg, dpi)?);
    }
    Ok(written)
}

/// Writes the tables of a (possibly partial) sweep; returns the paths written.
pub fn write_tables(dir: &Path, file: &SweepFile) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let agg = aggregate(&file.rows);
    let mut written = Vec::new();
    let mut put = |name: &str, f: &dyn Fn(&mut Vec<u8>) -> Result<()>| -> Result<()> {
        let p = dir.join(name);
        crate::atomic::write_atomic(&p, f)?;
        written.push(p);
        Ok(())
    };
    put("sweep.json", &|o| {
        o.extend(file.to_bytes()?);
        Ok(())
    })?;
    put("sweep.csv", &|o| table::write_runs_csv(o, &file.meta, &file.rows))?;
    put("sweep.jsonl", &|o| table::write_records(o, &file.meta, &file.rows))?;
    put("aggregate.csv", &|o| table::write_aggregate_csv(o, &file.meta, &agg))?;
    put("aggregate.md", &|o| table::write_aggregate_md(o, &file.meta, &agg))?;
    if !file.meta.plan.counts.is_empty() {
        put("counts.md", &|o| counts::write_counts_md(o, &file.meta, &file.rows))?;
    }
    Ok(written)
}
