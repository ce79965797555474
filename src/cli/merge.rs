//! `sim merge`: combine the shards of a `sim sweep --shard K/N` into one sweep's files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::out::{out, outln};
use super::shared::file_names;
use super::sweep::md_table;
use crate::sweep::table;

#[derive(Args, Debug)]
pub(super) struct MergeArgs {
    /// Shard files written by `sim sweep --shard K/N`.
    #[arg(required = true)]
    pub(super) files: Vec<PathBuf>,
    /// Results folder (default: the folder that holds `shards/`).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Do not draw plots.
    #[arg(long)]
    pub(super) no_plots: bool,
    #[command(flatten)]
    pub(super) plot: crate::plot::PlotArgs,
    /// No table on stdout.
    #[arg(long, short)]
    pub(super) quiet: bool,
}

pub(super) fn cmd_merge(a: MergeArgs) -> Result<ExitCode> {
    let mut files = Vec::new();
    for p in &a.files {
        files.push((p.clone(), table::read(p)?));
    }
    let merged = table::merge(&files)?;
    let dir = match &a.out {
        Some(d) => d.clone(),
        None => {
            let parent = a.files[0]
                .parent()
                .filter(|d| d.file_name().is_some_and(|n| n == "shards"));
            parent
                .and_then(Path::parent)
                .map(Path::to_path_buf)
                .with_context(|| format!("{}: not inside a shards/ folder; give --out", a.files[0].display()))?
        }
    };
    let written = crate::sweep::write_outputs(&dir, &merged, a.plot.dpi(a.no_plots))?;
    if !a.quiet {
        out!("{}", String::from_utf8_lossy(&md_table(&merged)?))?;
        outln!("wrote {}/{{{}}}", dir.display(), file_names(&written))?;
    }
    Ok(ExitCode::SUCCESS)
}
