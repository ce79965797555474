//! `sim conform`: real routers against the catalogue models that claim their policies
//! (logic in `crate::live::conform`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::out::outln;
use super::shared::default_out;
use crate::live::Speed;
use crate::live::conform::report::{Conform, write};
use crate::live::conform::{Options, launch, pairs, run_pair};

/// `sim conform` arguments.
#[derive(Args, Debug)]
pub(super) struct ConformArgs {
    /// Scenario file (TOML): the fleet `sim serve` emulates and the traffic `sim load` sends.
    pub(super) scenario: PathBuf,
    /// A router to run, by its PyPI name and executable: vllm-router=PATH,
    /// sglang-router=PATH, smg=PATH or production-stack=PATH (repeatable).
    #[arg(long = "router", value_name = "NAME=PATH", required = true, value_parser = parse_router)]
    pub(super) routers: Vec<(&'static str, PathBuf)>,
    /// Only this router policy, by the router's own name (repeatable; default: all).
    #[arg(long = "policy", value_name = "P")]
    pub(super) policies: Vec<String>,
    /// Model seeds: the scenario's seed and the ones after it.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(super) seeds: u64,
    /// Simulated seconds per wall second of the served runs (the routers' poll intervals are
    /// divided by it, in whole seconds).
    #[arg(long, default_value_t = Speed::REAL_TIME)]
    pub(super) speed: Speed,
    /// Override any scenario key, served and simulated alike (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = crate::scenario::parse_set)]
    pub(super) sets: Vec<(String, String)>,
    /// Results folder (default: out/<scenario name>-conform).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Wall seconds one served run may take; requests still in flight are cut.
    #[arg(long, default_value_t = 600)]
    pub(super) timeout: u64,
    /// Wall seconds a router may take to list a model on GET /v1/models.
    #[arg(long, default_value_t = 60)]
    pub(super) start_timeout: u64,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub(super) quiet: bool,
}

fn parse_router(s: &str) -> Result<(&'static str, PathBuf), String> {
    launch::parse_router(s).map(|(t, p)| (t.router, p))
}

/// `sim conform`: every pair, then the files; exit 1 when a pair disagrees or failed.
pub(super) fn cmd_conform(a: ConformArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        (1..=86_400).contains(&a.timeout) && (1..=3_600).contains(&a.start_timeout),
        "--timeout {} / --start-timeout {}: expected 1 to 86400 and 1 to 3600 wall seconds",
        a.timeout,
        a.start_timeout
    );
    let (scenario, _, _) = crate::scenario::load(&a.scenario, &a.sets)?;
    let o = Options {
        scenario: a.scenario.clone(),
        sets: a.sets.clone(),
        routers: a.routers.clone(),
        policies: a.policies.clone(),
        seeds: a.seeds,
        speed: a.speed,
        timeout: Duration::from_secs(a.timeout),
        start_timeout: Duration::from_secs(a.start_timeout),
    };
    let todo = pairs(&o);
    anyhow::ensure!(
        !todo.is_empty(),
        "--policy {}: none of the given routers has it (sim policies --json lists each model's counterparts)",
        a.policies.join(", ")
    );
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| default_out(&format!("{}-conform", scenario.sim.name)));
    let stage = crate::atomic::Staging::new(&dir)?;
    let logs = stage.path().join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut done = Vec::new();
    for (t, exe, c) in &todo {
        let p = run_pair(&o, t, exe, c, &logs);
        if !a.quiet {
            outln!(
                "{} {} {}: {}",
                p.router,
                p.version,
                p.policy,
                p.error.as_deref().unwrap_or(p.status)
            )?;
        }
        done.push(p);
    }
    let c = Conform {
        kind: "conform",
        scenario: scenario.sim.name.clone(),
        file: a.scenario.display().to_string(),
        speed: a.speed.get(),
        seeds: a.seeds,
        rule: crate::live::conform::verdict::RULE,
        pairs: &done,
    };
    write(stage.path(), &c)?;
    stage.commit()?;
    if !a.quiet {
        outln!(
            "\n{}wrote {}",
            crate::live::conform::report::table(&done),
            dir.display()
        )?;
    }
    let bad = done.iter().any(|p| matches!(p.status, "disagrees" | "failed"));
    Ok(if bad { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
