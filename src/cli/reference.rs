//! `sim reference` and `sim schema`: the generated reference pages, the generated blocks of
//! README.md and the guide, and the scenario JSON Schema (see [`crate::reference`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use clap::{Args, CommandFactory};

use super::out::out;
use crate::reference::{DIR, REGENERATE, blocks, files, schema_text};

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("where").required(true).multiple(true).args(["out", "root"]))]
pub(super) struct ReferenceArgs {
    /// Folder for scenario-keys.md, policies.md and scenario.schema.json alone (the
    /// committed copy is docs/reference).
    #[arg(long, value_name = "DIR")]
    pub(super) out: Option<PathBuf>,
    /// A fleetsim checkout: its docs/reference pages, and the generated blocks (counts,
    /// policy and command tables) of its README.md and docs/**/*.md, rewritten in place.
    #[arg(long, value_name = "DIR")]
    pub(super) root: Option<PathBuf>,
    /// Write nothing: compare with what this build generates; exit 1 naming each file (and
    /// block) that differs.
    #[arg(long)]
    pub(super) check: bool,
}

/// A file as the code wants it, and why it may differ (the stale blocks of a page).
struct Wanted {
    path: PathBuf,
    text: String,
    stale_blocks: Vec<String>,
}

/// Writes (or checks) the reference files and the generated blocks.
pub(super) fn cmd_reference(a: ReferenceArgs) -> Result<ExitCode> {
    let mut wanted = Vec::new();
    let dirs = a.out.iter().cloned().chain(a.root.iter().map(|r| r.join(DIR)));
    for dir in dirs {
        wanted.extend(files().into_iter().map(|(name, text)| Wanted {
            path: dir.join(name),
            text,
            stale_blocks: Vec::new(),
        }));
    }
    if let Some(root) = &a.root {
        wanted.extend(pages(root)?);
    }
    let mut stale = Vec::new();
    for w in &wanted {
        if std::fs::read(&w.path).ok().as_deref() == Some(w.text.as_bytes()) {
            continue;
        }
        if a.check {
            let blocks = if w.stale_blocks.is_empty() {
                String::new()
            } else {
                format!(" (generated {})", w.stale_blocks.join(", "))
            };
            stale.push(format!("{}{blocks}", w.path.display()));
        } else {
            if let Some(dir) = w.path.parent() {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            crate::atomic::write_file(&w.path, w.text.as_bytes())?;
        }
    }
    if !stale.is_empty() {
        eprintln!(
            "error: out of date: {} (regenerate with `{REGENERATE}`)",
            stale.join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The pages of the checkout at `root` that hold generated blocks, rewritten.
fn pages(root: &Path) -> Result<Vec<Wanted>> {
    if !root.join("README.md").is_file() {
        return Err(anyhow!(
            "--root {}: no README.md there; give the root of a fleetsim checkout",
            crate::quote::path(root)
        ));
    }
    let mut cli = super::Cli::command();
    cli.build();
    let mut out = Vec::new();
    for rel in blocks::pages(root) {
        let path = root.join(&rel);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let (new, stale) = blocks::rewrite(&text, &rel, &cli).map_err(|e| anyhow!("{}: {e}", rel.display()))?;
        if new != text {
            out.push(Wanted {
                path,
                text: new,
                stale_blocks: stale
                    .iter()
                    .map(|b| format!("`{}` at line {}", b.name, b.line))
                    .collect(),
            });
        }
    }
    Ok(out)
}

/// Prints the scenario JSON Schema.
pub(super) fn cmd_schema() -> Result<ExitCode> {
    out!("{}", schema_text())?;
    Ok(ExitCode::SUCCESS)
}
