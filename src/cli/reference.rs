//! `sim reference` and `sim schema`: the generated reference pages and the scenario JSON
//! Schema (see [`crate::reference`]).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::out::out;
use crate::reference::{REGENERATE, files, schema_text};

#[derive(Args, Debug)]
pub(super) struct ReferenceArgs {
    /// Folder for scenario-keys.md, policies.md and scenario.schema.json (the committed copy
    /// is docs/reference).
    #[arg(long, value_name = "DIR")]
    pub(super) out: PathBuf,
    /// Write nothing: compare the files in --out with what this build generates; exit 1
    /// naming each that differs.
    #[arg(long)]
    pub(super) check: bool,
}

/// Writes (or checks) the reference files.
pub(super) fn cmd_reference(a: ReferenceArgs) -> Result<ExitCode> {
    let mut stale = Vec::new();
    for (name, text) in files() {
        let p = a.out.join(name);
        if a.check {
            if std::fs::read(&p).ok().as_deref() != Some(text.as_bytes()) {
                stale.push(p.display().to_string());
            }
        } else {
            std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
            crate::atomic::write_file(&p, text.as_bytes())?;
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

/// Prints the scenario JSON Schema.
pub(super) fn cmd_schema() -> Result<ExitCode> {
    out!("{}", schema_text())?;
    Ok(ExitCode::SUCCESS)
}
