//! `sim load`: a scenario's workload sent in real time to an OpenAI-compatible endpoint.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::out::outln;
use super::shared::{ScenarioArgs, default_out, load_scenario};
use crate::export::write_json;
use crate::load::{LoadConfig, run, summarize, write_requests_csv};

#[derive(Args, Debug)]
pub(super) struct LoadArgs {
    #[command(flatten)]
    pub(super) scenario: ScenarioArgs,
    /// Base URL of the endpoint: a router, or one backend of `sim serve` (http://HOST:PORT).
    #[arg(long)]
    pub(super) target: String,
    /// Simulated seconds per wall second (think times and arrivals run this much faster;
    /// give `sim serve` the same).
    #[arg(long, default_value_t = 1.0)]
    pub(super) speed: f64,
    /// Results folder (default: out/<scenario name>-load).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Model name to send (default: the first of the target's GET /v1/models).
    #[arg(long)]
    pub(super) model: Option<String>,
    /// Send at most this many requests.
    #[arg(long, default_value_t = 100_000)]
    pub(super) max_requests: usize,
    /// Stop after this many wall seconds; requests still in flight are recorded as cut.
    #[arg(long, default_value_t = 600.0)]
    pub(super) duration: f64,
    /// Give up one request after this many wall seconds.
    #[arg(long, default_value_t = 300.0)]
    pub(super) request_timeout: f64,
    /// Most requests in flight at once.
    #[arg(long, default_value_t = 1024)]
    pub(super) max_in_flight: usize,
    /// Print nothing on success (files are still written).
    #[arg(long, short)]
    pub(super) quiet: bool,
}

fn seconds(flag: &str, v: f64, max: f64) -> Result<Duration> {
    anyhow::ensure!(
        v.is_finite() && v > 0.0 && v <= max,
        "{flag} {v}: expected seconds above 0 and at most {max}"
    );
    Ok(Duration::from_secs_f64(v))
}

pub(super) fn cmd_load(a: LoadArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        a.speed.is_finite() && (0.001..=1000.0).contains(&a.speed),
        "--speed {}: expected a factor between 0.001 and 1000",
        a.speed
    );
    let duration = seconds("--duration", a.duration, 86_400.0)?;
    let request_timeout = seconds("--request-timeout", a.request_timeout, 86_400.0)?;
    anyhow::ensure!(a.max_requests >= 1, "--max-requests 0: send at least one request");
    anyhow::ensure!(
        (1..=100_000).contains(&a.max_in_flight),
        "--max-in-flight {}: expected 1 to 100000",
        a.max_in_flight
    );
    let target = a.target.trim_end_matches('/').to_string();
    let url = reqwest::Url::parse(&target)
        .map_err(|e| anyhow::anyhow!("--target {}: not a URL ({e})", crate::quote::one_line(&target)))?;
    anyhow::ensure!(
        matches!(url.scheme(), "http" | "https") && url.host().is_some(),
        "--target {}: expected http://HOST:PORT",
        crate::quote::one_line(&target)
    );
    let (scenario, workload, effective) = load_scenario(&a.scenario)?;
    let name = scenario.sim.name.clone();
    let seed = scenario.sim.seed;
    let cfg = LoadConfig {
        target,
        model: String::new(),
        speed: a.speed,
        max_requests: a.max_requests,
        duration,
        request_timeout,
        chars_per_token: scenario.sim.router.chars_per_token,
        max_in_flight: a.max_in_flight,
    };
    if !a.quiet {
        outln!(
            "{name}: {} requests in {} sessions to {} at speed {}",
            workload.total_requests(),
            workload.sessions.len(),
            cfg.target,
            cfg.speed
        )?;
    }
    let mut cfg_used = cfg.clone();
    let res = run(workload, cfg, a.model.clone())?;
    cfg_used.model = res.model.clone();
    let summary = summarize(&res, &name, seed, &cfg_used);
    let dir = a.out.clone().unwrap_or_else(|| default_out(&format!("{name}-load")));
    let stage = crate::atomic::Staging::new(&dir)?;
    write_requests_csv(&stage.path().join("requests.csv"), &res)?;
    write_json(&stage.path().join("summary.json"), &summary)?;
    crate::atomic::write_file(&stage.path().join("scenario.toml"), effective.as_bytes())?;
    stage.commit()?;
    let c = &summary.requests;
    if !a.quiet {
        outln!(
            "{} of {} requests finished in {:.1} s wall ({:.1} simulated s, {:.1} requests/s); {} failed, {} HTTP errors, {} timed out, {} cut, {} not sent",
            c.finished,
            c.planned,
            summary.wall_s,
            summary.sim_time_s,
            summary.throughput_rps_wall,
            c.failed,
            c.http_error,
            c.timed_out,
            c.cut,
            c.not_sent
        )?;
        outln!("\nbackend          requests   share")?;
        for b in &summary.backends {
            let n = if b.name.is_empty() {
                "(unnamed)"
            } else {
                b.name.as_str()
            };
            outln!("{:<16} {:>8}  {:>5.1}%", n, b.requests, 100.0 * b.share)?;
        }
        outln!(
            "\nttft_s p50 {:.3} p99 {:.3}   e2e_s p50 {:.3} p99 {:.3}   prefix_cache_hit_rate {}",
            summary.ttft_s.p50,
            summary.ttft_s.p99,
            summary.e2e_s.p50,
            summary.e2e_s.p99,
            summary.prefix_cache_hit_rate.map_or("-".into(), |r| format!("{r:.3}"))
        )?;
        outln!("results: {}", dir.display())?;
    }
    Ok(if c.finished == c.planned {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
