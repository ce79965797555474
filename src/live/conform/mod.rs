//! `sim conform`: each real router policy against the catalogue model that claims it. Per
//! pair (a row of [`crate::policy::counterparts::COUNTERPARTS`] for a router given by path),
//! the scenario's fleet is served ([`crate::live::serve`], in process), the router runs as a
//! child process on loopback ([`launch`]), the scenario's workload is sent through it
//! ([`crate::live::load`], in process), and the model is simulated over N seeds; the
//! served figures are judged against the model's ([`verdict`]) and written to
//! `conform.json` and `conform.md` ([`report`]).

pub mod launch;
pub mod report;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use super::Speed;
use super::load::{LoadConfig, Outcome};
use super::serve::{Options as ServeOptions, Server};
use super::wire::Codec;
use crate::policy::counterparts::{COUNTERPARTS, Counterpart};
use crate::sim::RunOptions;
use launch::{Launch, RouterProcess, Template};
use verdict::{Figures, ModelFigures, Verdict, judge};

/// What to conform, checked.
#[derive(Clone, Debug)]
pub struct Options {
    /// The scenario file.
    pub scenario: PathBuf,
    /// `--set` overrides applied to the served run and every model run.
    pub sets: Vec<(String, String)>,
    /// Routers to run, each with its executable.
    pub routers: Vec<(&'static str, PathBuf)>,
    /// Only these router policies (empty: all).
    pub policies: Vec<String>,
    /// Model seeds: the scenario's seed and the ones after it.
    pub seeds: u64,
    /// Simulated seconds per wall second.
    pub speed: Speed,
    /// Wall-clock bound on one served run.
    pub timeout: Duration,
    /// Wall-clock bound on a router's start.
    pub start_timeout: Duration,
}

/// One pair's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Pair {
    /// The router (PyPI name).
    pub router: &'static str,
    /// Its version.
    pub version: &'static str,
    /// The router's policy name.
    pub policy: &'static str,
    /// The flags that select it.
    pub flag: &'static str,
    /// The router's command line (after the executable; URLs and ports as run).
    pub command: Vec<String>,
    /// The model's kind, if there is one.
    pub model_kind: Option<&'static str>,
    /// The model as `--set` gives it: `router.policy` and any interval or URLs it needs.
    pub model_sets: Vec<(String, String)>,
    /// Why this model.
    pub why: &'static str,
    /// What the fleet saw through the real router (the scenario's seed).
    pub served: Option<Figures>,
    /// Requests the client did not see finish (HTTP errors, failures, time-outs, cuts).
    pub client_unfinished: u64,
    /// The model over its seeds.
    pub model: Option<ModelFigures>,
    /// The verdict, when both ran.
    pub verdict: Option<Verdict>,
    /// `agrees`, `disagrees`, `not modelled` or `failed`.
    pub status: &'static str,
    /// What went wrong, one line.
    pub error: Option<String>,
}

/// Every pair `o` asks for, in table order.
pub fn pairs(o: &Options) -> Vec<(&'static Template, PathBuf, Counterpart)> {
    let mut out = Vec::new();
    for (name, exe) in &o.routers {
        let Some(t) = launch::template(name) else { continue };
        for c in COUNTERPARTS.iter().filter(|c| c.router == t.router) {
            if o.policies.is_empty() || o.policies.iter().any(|p| p == c.policy) {
                out.push((t, exe.clone(), *c));
            }
        }
    }
    out
}

/// Runs one pair: served through the router, then the model; never fails as a whole (a
/// failure is the pair's status).
pub fn run_pair(o: &Options, t: &Template, exe: &Path, c: &Counterpart, logs: &Path) -> Pair {
    let mut pair = Pair {
        router: t.router,
        version: t.version,
        policy: c.policy,
        flag: c.flag,
        command: Vec::new(),
        model_kind: c.kind,
        model_sets: Vec::new(),
        why: c.why,
        served: None,
        client_unfinished: 0,
        model: None,
        verdict: None,
        status: "failed",
        error: None,
    };
    let slug = format!("{}-{}", t.router, c.policy);
    let live = serve_through(
        o,
        t,
        exe,
        c,
        &logs.join(format!("{slug}.log")),
        &logs.join(format!("{slug}.urls")),
    );
    let (served, urls, poll) = match live {
        Ok(l) => {
            pair.command = l.command;
            pair.client_unfinished = l.unfinished;
            (l.figures, l.urls, l.poll_s)
        }
        Err(e) => {
            pair.error = Some(crate::quote::one_line(&format!("{e:#}")).into_owned());
            return pair;
        }
    };
    pair.served = Some(served.clone());
    let Some(sets) = model_sets(o, c, &urls, poll) else {
        pair.status = "not modelled";
        return pair;
    };
    pair.model_sets = sets.clone();
    match run_model(o, &sets) {
        Ok(m) => {
            let v = judge(&served, &m);
            pair.status = if v.agrees { "agrees" } else { "disagrees" };
            pair.verdict = Some(v);
            pair.model = Some(m);
        }
        Err(e) => pair.error = Some(crate::quote::one_line(&format!("{e:#}")).into_owned()),
    }
    pair
}

/// What a served run through a router measured.
struct Live {
    figures: Figures,
    urls: Vec<String>,
    poll_s: Option<u64>,
    command: Vec<String>,
    unfinished: u64,
}

/// `sim serve` in process, the router as a child, `sim load` in process; everything is
/// stopped before it returns.
fn serve_through(o: &Options, t: &Template, exe: &Path, c: &Counterpart, log: &Path, urls_file: &Path) -> Result<Live> {
    let (scenario, workload, _) = crate::scenario::load(&o.scenario, &o.sets)?;
    let cfg = &scenario.sim;
    let so = ServeOptions {
        host: std::net::IpAddr::from([127, 0, 0, 1]),
        port_base: 0,
        speed: o.speed,
        urls_file: Some(urls_file.to_path_buf()),
        model: None,
        max_body_bytes: 32 << 20,
        header_timeout: ServeOptions::HEADER_TIMEOUT,
        body_timeout: ServeOptions::BODY_TIMEOUT,
        max_connections: ServeOptions::MAX_CONNECTIONS,
        kv_events: c.kv_events.then(|| super::serve::kv_events::Options {
            endpoint: super::serve::kv_events::Endpoint {
                host: std::net::IpAddr::from([127, 0, 0, 1]),
                port: 0,
            },
            replay: None,
            topic: String::new(),
        }),
    };
    let server = Server::start(cfg, &o.scenario.display().to_string(), &so)?;
    let (urls, model) = (server.urls.clone(), server.model.clone());
    let kv_endpoints = server.kv_endpoints.clone();
    let block_tokens = server.block_tokens;
    let through = (|| -> Result<(Vec<String>, Option<u64>, u64)> {
        let (port, metrics_port) = (free_port()?, free_port()?);
        let l = Launch {
            urls: &urls,
            model: &model,
            port,
            metrics_port,
            speed: o.speed,
            kv_endpoints: &kv_endpoints,
            block_tokens,
        };
        let (args, poll) = t.command(&l, c);
        let router = RouterProcess::start(exe, &args, log, port, o.start_timeout)?;
        let lc = LoadConfig {
            target: router.url.clone(),
            model: model.clone(),
            speed: o.speed,
            max_requests: 100_000,
            duration: o.timeout,
            request_timeout: Duration::from_secs(300),
            codec: Codec::new(cfg.router.chars_per_token),
            max_in_flight: 1024,
        };
        let res = super::load::run(workload, lc, Some(model.clone()));
        router.stop();
        let res = res?;
        let unfinished = res.records.iter().filter(|r| r.outcome != Outcome::Finished).count() + res.not_sent;
        Ok((args, poll, unfinished as u64))
    })();
    let served = server.stop()?;
    let (command, poll_s, unfinished) = through?;
    Ok(Live {
        figures: Figures::of(&served.summary(cfg)),
        urls,
        poll_s,
        command,
        unfinished,
    })
}

/// A free loopback port.
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// The `--set` pairs that make the scenario run `c`'s model as the router was run: the
/// policy, the poll interval it was given (times the speed), the request-stats window,
/// and the live URLs where the model hashes them. `None`: no model.
pub fn model_sets(
    o: &Options,
    c: &Counterpart,
    urls: &[String],
    poll_wall_s: Option<u64>,
) -> Option<Vec<(String, String)>> {
    let policy = c.model_toml()?;
    let mut sets = vec![("router.policy".to_string(), policy)];
    let sim_s = |wall: u64| format!("{}", wall as f64 * o.speed.get());
    if let Some(p) = poll_wall_s {
        sets.push(("router.engine_stats_interval_s".into(), sim_s(p)));
    }
    if c.router == "production-stack" {
        let w = launch::scaled_interval_s(launch::PRODUCTION_STACK_REQUEST_STATS_WINDOW_S, o.speed);
        sets.push(("router.request_stats_window_s".into(), sim_s(w)));
    }
    if c.hashes_urls {
        let list: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
        sets.push(("backends.urls".into(), format!("[{}]", list.join(", "))));
    }
    Some(sets)
}

/// The model over `o.seeds` seeds from the scenario's.
fn run_model(o: &Options, model: &[(String, String)]) -> Result<ModelFigures> {
    let (base, _, _) = crate::scenario::load(&o.scenario, &o.sets)?;
    let first = base.sim.seed;
    let mut seeds = Vec::new();
    let mut runs = Vec::new();
    for k in 0..o.seeds {
        let seed = first.wrapping_add(k);
        let mut sets = o.sets.clone();
        sets.extend(model.iter().cloned());
        sets.push(("seed".into(), seed.to_string()));
        let (scenario, workload, _) = crate::scenario::load(&o.scenario, &sets)?;
        let opts = RunOptions {
            record_series: false,
            record_decisions: false,
            ..RunOptions::default()
        };
        let (res, _) = crate::sim::run(scenario.sim, &workload, opts).map_err(|e| anyhow::anyhow!("{e}"))?;
        seeds.push(seed);
        runs.push(Figures::of(&res.summary));
    }
    Ok(ModelFigures::of(seeds, runs))
}
