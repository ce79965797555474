//! `sim serve`: the scenario's fleet as vLLM servers over HTTP (logic in
//! `crate::live::serve`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;

use super::out::{out, outln};
use crate::live::serve::{Options, Served, Server};
use crate::live::{Speed, wire};
use crate::metrics::Summary;
use crate::sim::SimConfig;
use crate::time::SimDuration;

/// `sim serve` arguments.
#[derive(Args, Debug)]
pub(super) struct ServeArgs {
    /// Scenario file (TOML): its fleet, engine settings, faults and fleet events.
    pub(super) scenario: PathBuf,
    /// Override any scenario key: --set backends.count=8 (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = crate::scenario::parse_set)]
    pub(super) sets: Vec<(String, String)>,
    /// Address to listen on. Loopback by default: anything else exposes an unauthenticated
    /// server.
    #[arg(long, default_value = "127.0.0.1")]
    pub(super) host: IpAddr,
    /// First port: backend i listens on P + i (0: ports chosen by the system).
    #[arg(long, default_value_t = 0)]
    pub(super) port_base: u16,
    /// Simulated seconds per wall second (10 runs ten times faster than real time).
    #[arg(long, default_value_t = Speed::REAL_TIME)]
    pub(super) speed: Speed,
    /// Stop after this many simulated seconds (default: on SIGINT or SIGTERM only).
    #[arg(long)]
    pub(super) duration: Option<f64>,
    /// Write what `sim run` writes, seen from the backends, into DIR when the server stops.
    #[arg(long, value_name = "DIR")]
    pub(super) out: Option<PathBuf>,
    /// Where to write the backends' URLs, one per line (default: `out/<scenario>.urls`).
    #[arg(long, value_name = "FILE")]
    pub(super) urls_file: Option<PathBuf>,
    /// Served model name (default: the profile's model, else Llama-3.1-8B-Instruct).
    #[arg(long)]
    pub(super) model: Option<String>,
    /// Largest request body accepted, bytes (a larger one gets HTTP 413).
    #[arg(long, default_value_t = 32 << 20)]
    pub(super) max_body_bytes: usize,
    /// Seconds a client has to send a request's headers (and to start the next request on
    /// an idle keep-alive connection); then the connection is closed.
    #[arg(long, default_value_t = Options::HEADER_TIMEOUT.as_secs_f64())]
    pub(super) header_timeout: f64,
    /// Seconds a client has to send a request's body once its headers are in (HTTP 408).
    #[arg(long, default_value_t = Options::BODY_TIMEOUT.as_secs_f64())]
    pub(super) body_timeout: f64,
    /// Most connections one backend holds open; past it a connection is answered 503.
    #[arg(long, default_value_t = Options::MAX_CONNECTIONS)]
    pub(super) max_connections: usize,
    /// Publish each backend's KV-cache events (BlockStored, BlockRemoved,
    /// AllBlocksCleared) as vLLM's --kv-events-config does: msgpack batches on a ZMQ PUB
    /// socket at tcp://HOST:PORT, backend i on PORT + i (0: chosen by the system; `*`
    /// binds every interface, loopback is the default to give).
    #[arg(long, value_name = "ENDPOINT", value_parser = parse_endpoint)]
    pub(super) kv_events: Option<crate::live::serve::kv_events::Endpoint>,
    /// With --kv-events: vLLM's replay ROUTER socket (a subscriber asks for the batches it
    /// missed), backend i on PORT + i.
    #[arg(long, value_name = "ENDPOINT", value_parser = parse_endpoint, requires = "kv_events")]
    pub(super) kv_events_replay: Option<crate::live::serve::kv_events::Endpoint>,
    /// With --kv-events: the topic frame of every message (vLLM's default: empty).
    #[arg(long, default_value = "", requires = "kv_events")]
    pub(super) kv_events_topic: String,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub(super) quiet: bool,
}

impl ServeArgs {
    /// The checked options, and `--duration` in simulated time.
    fn options(&self) -> Result<(Options, Option<SimDuration>)> {
        let duration = match self.duration {
            None => None,
            Some(d) => Some(
                SimDuration::checked_from_secs_f64(d)
                    .filter(|s| s.0 > 0)
                    .ok_or_else(|| {
                        anyhow::anyhow!("--duration {d}: expected simulated seconds above 0, at most 1e9")
                    })?,
            ),
        };
        if self.max_body_bytes < 1024 {
            bail!("--max-body-bytes {}: expected at least 1024", self.max_body_bytes);
        }
        if !(1..=1_000_000).contains(&self.max_connections) {
            bail!("--max-connections {}: expected 1 to 1000000", self.max_connections);
        }
        let o = Options {
            host: self.host,
            port_base: self.port_base,
            speed: self.speed,
            urls_file: self.urls_file.clone(),
            model: self.model.clone(),
            max_body_bytes: self.max_body_bytes,
            header_timeout: wall_seconds("--header-timeout", self.header_timeout)?,
            body_timeout: wall_seconds("--body-timeout", self.body_timeout)?,
            max_connections: self.max_connections,
            kv_events: self.kv_events.map(|endpoint| crate::live::serve::kv_events::Options {
                endpoint,
                replay: self.kv_events_replay,
                topic: self.kv_events_topic.clone(),
            }),
        };
        Ok((o, duration))
    }
}

fn parse_endpoint(s: &str) -> Result<crate::live::serve::kv_events::Endpoint, String> {
    crate::live::serve::kv_events::Endpoint::parse(s)
}

/// A time-out flag: wall seconds from 0.1 to an hour.
fn wall_seconds(flag: &str, s: f64) -> Result<std::time::Duration> {
    if !(s.is_finite() && (0.1..=3600.0).contains(&s)) {
        bail!("{flag} {s}: expected wall seconds from 0.1 to 3600");
    }
    Ok(std::time::Duration::from_secs_f64(s))
}

/// `sim serve`: start, wait for a signal or the duration, stop, report, write.
pub(super) fn cmd_serve(a: ServeArgs) -> Result<ExitCode> {
    let (o, duration) = a.options()?;
    let (scenario, _workload, effective) = crate::scenario::load(&a.scenario, &a.sets)?;
    let cfg = &scenario.sim;
    let server = Server::start(cfg, &a.scenario.display().to_string(), &o)?;
    if !a.quiet {
        print_banner(cfg, &server, o.speed)?;
    }
    let reason = server.wait(duration)?;
    let served = server.stop()?;
    let summary = served.summary(cfg);
    if !a.quiet {
        print_report(&served, &summary, reason)?;
    }
    if let Some(dir) = &a.out {
        served.write(dir, summary, &effective, reason)?;
        if !a.quiet {
            outln!("wrote {}", dir.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The URLs, and the router's intervals and command line at this speed.
fn print_banner(cfg: &SimConfig, s: &Server, speed: Speed) -> Result<()> {
    let urls = &s.urls;
    outln!(
        "sim serve: {} ({} backends), model {}, speed {speed} (1 wall s = {speed} simulated s)",
        cfg.name,
        urls.len(),
        s.model,
    )?;
    for ((name, _), u) in cfg.backends.iter().zip(urls) {
        outln!("{name} {u}")?;
    }
    outln!("urls: {}", s.urls_file.display())?;
    for (i, ep) in s.kv_endpoints.iter().enumerate() {
        let replay = s
            .kv_replay_endpoints
            .get(i)
            .map(|r| format!(", replay {r}"))
            .unwrap_or_default();
        outln!("kv events {}: {ep}{replay}", cfg.backends[i].0)?;
    }
    if !s.kv_endpoints.is_empty() {
        let sources: Vec<String> = s
            .urls
            .iter()
            .zip(&s.kv_endpoints)
            .map(|(u, e)| format!("--kv-event-source {u}={e}"))
            .collect();
        outln!(
            "vllm-router kv_aware: vllm-router --policy kv_aware --kv-event-block-size {} --kv-event-model {} {} --worker-urls {}",
            cfg.models
                .iter()
                .find_map(|m| match m {
                    crate::sim::BackendModel::Vllm(v) => Some(v.block_size_tokens),
                    _ => None,
                })
                .unwrap_or(16),
            shlex::try_quote(&s.model).map_or_else(|_| s.model.clone(), |q| q.into_owned()),
            sources.join(" "),
            s.urls.join(" ")
        )?;
    }
    let esi = cfg.router.engine_stats_interval;
    let rsw = cfg.router.request_stats_window;
    let (esi_wall, rsw_wall) = (
        speed.span_to_wall(esi).as_secs_f64(),
        speed.span_to_wall(rsw).as_secs_f64(),
    );
    outln!(
        "router intervals at speed {speed}: engine_stats_interval {} s -> {esi_wall} s wall, request_stats_window {} s -> {rsw_wall} s wall",
        esi.as_secs_f64(),
        rsw.as_secs_f64(),
    )?;
    match router_command(cfg, s, speed) {
        Some((line, notes)) => {
            let policy = cfg.router.policy.describe();
            outln!("production-stack's router for {policy} at speed {speed}:\n  {line}")?;
            for n in notes {
                outln!("  note: {n}")?;
            }
        }
        None => outln!(
            "router: policy {} is not one of production-stack's routers; docs/real-routers.md names the router that runs it and its flags",
            cfg.router.policy.kind()
        )?,
    }
    outln!("backend header: {}; stop with Ctrl-C", wire::BACKEND_HEADER)?;
    Ok(())
}

/// production-stack's complete command for the scenario's policy against these URLs: static
/// discovery of the URLs and the served model, the routing logic and its flags
/// ([`crate::tune::flags::production_stack`]), and both intervals scaled to the speed in
/// whole seconds (the router's flags are integers); with the notes on what no flag sets.
/// `None` when the policy is not one of production-stack's routers.
fn router_command(cfg: &SimConfig, s: &Server, speed: Speed) -> Option<(String, Vec<String>)> {
    let wall = |d: SimDuration| speed.span_to_wall(d).as_secs_f64();
    let (esi, rsw) = (
        wall(cfg.router.engine_stats_interval),
        wall(cfg.router.request_stats_window),
    );
    let flags = crate::tune::flags::production_stack(&cfg.router)?;
    let mut args: Vec<String> = [
        "vllm-router",
        "--service-discovery",
        "static",
        "--static-backends",
        &s.urls.join(","),
        "--static-models",
        &vec![s.model.as_str(); s.urls.len()].join(","),
    ]
    .map(String::from)
    .to_vec();
    // The policy's own flags, without the intervals it wrote at simulated scale.
    let mut own = flags.args.iter();
    while let Some(a) = own.next() {
        if a == "--engine-stats-interval" || a == "--request-stats-window" {
            own.next();
        } else {
            args.push(a.clone());
        }
    }
    let mut notes: Vec<String> = flags
        .notes
        .into_iter()
        .filter(|n| !n.contains("whole seconds"))
        .collect();
    for (flag, v) in [("--engine-stats-interval", esi), ("--request-stats-window", rsw)] {
        let whole = v.round().max(1.0);
        if (whole - v).abs() > 1e-9 {
            notes.push(format!(
                "{flag} takes whole seconds: {} s wall at speed {speed} is written as {whole}; a speed that divides it keeps the router's timing",
                fmt_secs(v)
            ));
        }
        args.extend([flag.to_string(), format!("{whole}")]);
    }
    let line = args
        .iter()
        .map(|a| shlex::try_quote(a).map_or_else(|_| a.clone(), |q| q.into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    Some((line, notes))
}

/// Seconds to the millisecond, a whole number without a fraction.
fn fmt_secs(x: f64) -> String {
    let r = (x * 1000.0).round() / 1000.0;
    if r.fract() == 0.0 {
        format!("{}", r as i64)
    } else {
        format!("{r}")
    }
}

/// Why and when it stopped, `sim run`'s report of the backends, and the streamed tokens'
/// lateness.
fn print_report(served: &Served, summary: &Summary, reason: &str) -> Result<()> {
    outln!(
        "\nstopped ({reason}) after {:.1} s wall, {:.1} s simulated",
        served.wall.as_secs_f64(),
        served.records.end.as_secs_f64()
    )?;
    out!("{}", crate::report::render(summary, None))?;
    let late = &served.token_lateness_ms;
    outln!(
        "streamed token lateness (wall written - engine schedule) ms: p50 {:.3} p99 {:.3} max {:.3} over {} tokens",
        late.p50,
        late.p99,
        late.max,
        late.count
    )?;
    Ok(())
}
