//! `sim check`: run scenarios against their `[expect]` bounds, optionally twice for
//! determinism; a table on stdout and JUnit XML.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::out::{out, outln};
use crate::check::{CheckOptions, check_file, expand};
use crate::scenario::parse_set;

#[derive(Args, Debug)]
pub(super) struct CheckArgs {
    /// Scenario files or folders of them (default: scenarios/).
    pub(super) paths: Vec<PathBuf>,
    /// Override a key in every scenario (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = parse_set)]
    pub(super) sets: Vec<(String, String)>,
    /// Also run each scenario twice and compare event logs; report where they diverge.
    #[arg(long)]
    pub(super) determinism: bool,
    /// Also check the conservation invariants after every event (slow).
    #[arg(long)]
    pub(super) invariants: bool,
    /// JUnit XML report.
    #[arg(long, value_name = "FILE", default_value = "out/check/junit.xml")]
    pub(super) junit: PathBuf,
    /// Worker threads for the seeds of a scenario (default: all cores).
    #[arg(long, short)]
    pub(super) jobs: Option<usize>,
    /// Print only failures and the totals.
    #[arg(long, short)]
    pub(super) quiet: bool,
}

pub(super) fn cmd_check(a: CheckArgs) -> Result<ExitCode> {
    let paths = if a.paths.is_empty() {
        vec![PathBuf::from("scenarios")]
    } else {
        a.paths.clone()
    };
    let files = expand(&paths)?;
    let opts = CheckOptions {
        determinism: a.determinism,
        invariants: a.invariants,
        jobs: crate::run::jobs_flag(a.jobs)?,
    };
    let mut reports = Vec::new();
    for f in &files {
        reports.push(check_file(f, &a.sets, opts)?);
    }
    let table = crate::check::render(&reports);
    let failed = reports.iter().flat_map(|r| &r.outcomes).any(|o| !o.pass);
    if a.quiet {
        for line in table.lines().filter(|l| l.contains("FAIL")) {
            outln!("{line}")?;
        }
        outln!("{}", table.lines().last().unwrap_or_default())?;
    } else {
        out!("{table}")?;
    }
    if let Some(d) = a.junit.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let xml = crate::check::junit::to_xml(&reports)?;
    crate::atomic::write_file(&a.junit, &xml)?;
    if !a.quiet {
        outln!("junit: {}", a.junit.display())?;
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
