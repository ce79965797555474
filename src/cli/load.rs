//! `sim load`: a scenario's workload sent in real time to an OpenAI-compatible endpoint.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::out::outln;
use super::shared::{ScenarioArgs, default_out, load_scenario};
use crate::export::write_json;
use crate::live::Speed;
use crate::live::load::{LoadConfig, LoadSummary, run, summarize, write_requests_csv};
use crate::live::wire::Codec;

#[derive(Args, Debug)]
pub(super) struct LoadArgs {
    #[command(flatten)]
    pub(super) scenario: ScenarioArgs,
    /// Base URL of the endpoint: a router, or one backend of `sim serve` (http://HOST:PORT).
    #[arg(long)]
    pub(super) target: String,
    /// Simulated seconds per wall second (think times and arrivals run this much faster;
    /// give `sim serve` the same).
    #[arg(long, default_value_t = Speed::REAL_TIME)]
    pub(super) speed: Speed,
    /// Results folder (default: out/<scenario name>-load).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Model name to send (default: the first of the target's GET /v1/models).
    #[arg(long)]
    pub(super) model: Option<String>,
    /// Send at most this many requests.
    #[arg(long, default_value_t = 100_000)]
    pub(super) max_requests: usize,
    /// Stop after this many wall seconds; requests still in flight are recorded as cut (as
    /// on SIGINT or SIGTERM).
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

/// `--target` without its trailing slashes, if an http(s) URL with a host.
fn target(given: &str) -> Result<String> {
    let target = given.trim_end_matches('/').to_string();
    let url = reqwest::Url::parse(&target)
        .map_err(|e| anyhow::anyhow!("--target {}: not a URL ({e})", crate::quote::one_line(&target)))?;
    anyhow::ensure!(
        matches!(url.scheme(), "http" | "https") && url.host().is_some(),
        "--target {}: expected http://HOST:PORT",
        crate::quote::one_line(&target)
    );
    Ok(target)
}

impl LoadArgs {
    /// The checked flags as a load configuration (the codec is the scenario's, the model
    /// the target's: set once known).
    fn config(&self) -> Result<LoadConfig> {
        let duration = seconds("--duration", self.duration, 86_400.0)?;
        let request_timeout = seconds("--request-timeout", self.request_timeout, 86_400.0)?;
        anyhow::ensure!(self.max_requests >= 1, "--max-requests 0: send at least one request");
        anyhow::ensure!(
            (1..=100_000).contains(&self.max_in_flight),
            "--max-in-flight {}: expected 1 to 100000",
            self.max_in_flight
        );
        Ok(LoadConfig {
            target: target(&self.target)?,
            model: String::new(),
            speed: self.speed,
            max_requests: self.max_requests,
            duration,
            request_timeout,
            codec: Codec::new(1),
            max_in_flight: self.max_in_flight,
        })
    }
}

/// `sim load`: check, send, summarise, write, report; exit 1 unless every planned request
/// finished.
pub(super) fn cmd_load(a: LoadArgs) -> Result<ExitCode> {
    let mut cfg = a.config()?;
    let (scenario, workload, effective) = load_scenario(&a.scenario)?;
    let (name, seed) = (scenario.sim.name.clone(), scenario.sim.seed);
    cfg.codec = Codec::new(scenario.sim.router.chars_per_token);
    if !a.quiet {
        outln!(
            "{name}: {} requests in {} sessions to {} at speed {}",
            workload.total_requests(),
            workload.sessions.len(),
            cfg.target,
            cfg.speed
        )?;
    }
    let res = run(workload, cfg.clone(), a.model.clone())?;
    cfg.model = res.model.clone();
    let summary = summarize(&res, &name, seed, &cfg);
    let dir = a.out.clone().unwrap_or_else(|| default_out(&format!("{name}-load")));
    let stage = crate::atomic::Staging::new(&dir)?;
    write_requests_csv(&stage.path().join("requests.csv"), &res)?;
    write_json(&stage.path().join("summary.json"), &summary)?;
    crate::atomic::write_file(&stage.path().join("scenario.toml"), effective.as_bytes())?;
    stage.commit()?;
    if res.stopped_by != "end" {
        eprintln!(
            "sim load: stopped by {} after {:.1} s: {} requests recorded ({} in flight, recorded as cut), {} not sent; wrote {}",
            res.stopped_by,
            res.wall.as_secs_f64(),
            res.records.len(),
            res.cut_at_stop,
            res.not_sent,
            dir.display()
        );
    }
    if !a.quiet {
        print_report(&summary, &dir)?;
    }
    let c = &summary.requests;
    Ok(if c.finished == c.planned {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The counts, the share per backend, latencies and the prefix hit rate.
fn print_report(summary: &LoadSummary, dir: &std::path::Path) -> Result<()> {
    let c = &summary.requests;
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
    Ok(())
}
