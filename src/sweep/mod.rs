//! `sim sweep`: a grid of scenario variants x seeds, run in parallel, collected in grid
//! order, exported as tables and plots; shardable over a batch cluster and merged back.
//!
//! * [`spec`]: axes, seeds and the grid order (what runs);
//! * [`exec`]: the rayon pool, progress and partial files (how it runs);
//! * [`table`]: rows, aggregates and files (what comes out), a pure function of the rows;
//! * [`counts`]: the per-branch decision counts table (`counts.md`);
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
use spec::Plan;
use table::{Meta, SweepFile, aggregate};

pub use crate::atomic::sha256_hex;

/// Hex SHA-256 of the scenario text, followed (when it replays traces) by each trace
/// file's path and bytes, including files that only a sweep level names
/// (`-L workload.traces[0].file a.csv,b.csv`): a changed trace is a different sweep.
pub fn inputs_sha256(src: &Source, plan: Option<&Plan>) -> String {
    let mut files = src.trace_files();
    for axis in plan.map_or(&[][..], |p| &p.axes[..]) {
        if !axis.paths.iter().any(|p| p.contains("traces")) {
            continue;
        }
        for level in &axis.levels {
            let mut alt = src.clone();
            // A level that does not apply fails its runs with a clear message.
            if alt.apply(&level.sets, "sweep").is_ok() {
                for f in alt.trace_files() {
                    if !files.contains(&f) {
                        files.push(f);
                    }
                }
            }
        }
    }
    if files.is_empty() {
        return sha256_hex(src.text.as_bytes());
    }
    let mut h = Sha256::new();
    h.update(src.text.as_bytes());
    for f in files {
        h.update(f.display().to_string().as_bytes());
        h.update([0]);
        // An unreadable trace fails the run itself with a clear message.
        h.update(std::fs::read(&f).unwrap_or_default());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The identity of a sweep of `src` (with `--set` overrides `sets`) over `plan`.
pub fn meta(src: &Source, scenario_name: &str, sets: &[(String, String)], plan: Plan) -> Meta {
    Meta {
        fleetsim_version: env!("CARGO_PKG_VERSION").to_string(),
        scenario: scenario_name.to_string(),
        scenario_sha256: inputs_sha256(src, Some(&plan)),
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
