//! `sim serve`: the scenario's fleet as vLLM servers over HTTP. One server per backend on
//! its own loopback port speaks vLLM's OpenAI-compatible API and `/metrics`; behind each,
//! the engine model of `sim run` ([`crate::backend::live::LiveEngine`]) steps on a
//! simulated clock that runs `--speed` times faster than the wall clock. A real router
//! pointed at the URLs routes real requests into the model, and `--out` writes what
//! `sim run` writes, seen from the backends (docs/serve.md).
//!
//! The async runtime lives here only: the engines run on one plain thread
//! ([`fleet::Fleet`]); the HTTP servers (tokio, axum, hyper) talk to it through a channel.

pub mod fleet;
pub mod http;
pub mod text;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::backend::vllm::VllmConfig;
use crate::fleet::Membership;
use crate::metrics::{EngineCounters, SummaryInputs, percentiles, summarize};
use crate::sim::BackendModel;
use fleet::{BackendShared, Clock, Cmd, Fleet, MetricsState, Shared};
use fleetsim_io::{out, outln};

/// `sim serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Scenario file (TOML): its fleet, engine settings, faults and fleet events.
    pub scenario: PathBuf,
    /// Override any scenario key: --set backends.count=8 (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", value_parser = crate::scenario::parse_set)]
    pub sets: Vec<(String, String)>,
    /// Address to listen on. Loopback by default: anything else exposes an unauthenticated
    /// server.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// First port: backend i listens on P + i (0: ports chosen by the system).
    #[arg(long, default_value_t = 0)]
    pub port_base: u16,
    /// Simulated seconds per wall second (10 runs ten times faster than real time).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Stop after this many simulated seconds (default: on SIGINT or SIGTERM only).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Write what `sim run` writes, seen from the backends, into DIR when the server stops.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where to write the backends' URLs, one per line (default: `out/<scenario>.urls`).
    #[arg(long, value_name = "FILE")]
    pub urls_file: Option<PathBuf>,
    /// Served model name (default: the profile's model, else Llama-3.1-8B-Instruct).
    #[arg(long)]
    pub model: Option<String>,
    /// Largest request body accepted, bytes (a larger one gets HTTP 413).
    #[arg(long, default_value_t = 32 << 20)]
    pub max_body_bytes: usize,
    /// Print nothing but errors.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The model name vLLM would serve: the first backend's profile model, else the default
/// profile's.
fn model_name(labels: &[crate::backend::Label]) -> String {
    labels
        .iter()
        .find_map(|l| l.profile.split('/').next().filter(|m| !m.is_empty()))
        .map_or_else(|| "meta-llama/Llama-3.1-8B-Instruct".to_string(), str::to_string)
}

/// `sim serve`.
pub fn cmd_serve(a: ServeArgs) -> Result<ExitCode> {
    if !(a.speed.is_finite() && a.speed > 0.0 && a.speed <= 1e6) {
        bail!(
            "--speed {}: expected a positive number of simulated seconds per wall second, at most 1e6",
            a.speed
        );
    }
    if let Some(d) = a.duration
        && !(d.is_finite() && d > 0.0 && d <= 1e9)
    {
        bail!("--duration {d}: expected positive simulated seconds");
    }
    if a.max_body_bytes < 1024 {
        bail!("--max-body-bytes {}: expected at least 1024", a.max_body_bytes);
    }
    let (scenario, _workload, effective) = crate::scenario::load(&a.scenario, &a.sets)?;
    let cfg = &scenario.sim;
    let file = a.scenario.display().to_string();
    let mut cfgs: Vec<VllmConfig> = Vec::new();
    for m in &cfg.models {
        match m {
            BackendModel::Vllm(v) => cfgs.push(v.clone()),
            BackendModel::Queueing { .. } => bail!(
                "{}: backends.model: sim serve runs vLLM engines; the queueing model has no tokens to stream",
                crate::quote::escape(&file)
            ),
        }
    }
    let n = cfgs.len();
    if u32::try_from(n).is_err() || usize::from(a.port_base) + n > 65_536 && a.port_base != 0 {
        bail!(
            "--port-base {}: {} backends do not fit below port 65536",
            a.port_base,
            n
        );
    }
    let initial = crate::fleet::initial_membership(&cfg.fleet_events, n)
        .map_err(|(i, m)| anyhow::anyhow!("{}: fleet_events[{i}]: {m}", crate::quote::escape(&file)))?;
    let model = a.model.clone().unwrap_or_else(|| model_name(&cfg.labels));
    let cpt = cfg.router.chars_per_token.max(1);
    let (cmd_tx, cmd_rx) = std::sync::mpsc::channel();
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let block = cfgs.first().map_or(16, |c| c.block_size_tokens);
    let shared = Arc::new(Shared {
        clock: Clock {
            start: Instant::now(),
            speed: a.speed,
        },
        backends: cfgs
            .iter()
            .zip(&initial)
            .enumerate()
            .map(|(i, (c, m))| BackendShared {
                name: cfg.backends[i].0.clone(),
                metrics: Mutex::new(MetricsState::new()),
                membership: watch::channel(*m).0,
                max_model_len: c.kv_blocks.saturating_mul(c.block_size_tokens),
                cfg: c.clone(),
            })
            .collect(),
        faults: cfg.faults.clone(),
        next_id: AtomicU32::new(0),
        cmd: cmd_tx,
        model: model.clone(),
        tokenizer: text::Tokenizer {
            chars_per_token: cpt,
            block_tokens: block,
        },
        max_body_bytes: a.max_body_bytes,
        lateness_us: Mutex::new(Vec::new()),
    });
    if cfgs.iter().any(|c| c.block_size_tokens != block) {
        bail!(
            "{}: sim serve needs one KV block size across the fleet (the block keys are cut once per request)",
            crate::quote::escape(&file)
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Bind every backend that is in service at time zero before anything runs, so a bad
    // port is one error and nothing half-started.
    let mut listeners = Vec::with_capacity(n);
    for (i, m) in initial.iter().enumerate() {
        let port = if a.port_base == 0 { 0 } else { a.port_base + i as u16 };
        let addr = SocketAddr::new(a.host, port);
        let l = rt.block_on(TcpListener::bind(addr)).with_context(|| {
            format!(
                "--port-base {}: binding {addr} for {}",
                a.port_base, shared.backends[i].name
            )
        })?;
        let _ = m;
        listeners.push(l);
    }
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<std::io::Result<_>>()
        .context("reading the bound addresses")?;
    let urls: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    let urls_file = a
        .urls_file
        .clone()
        .unwrap_or_else(|| crate::output::default_out(&format!("{}.urls", cfg.name)));
    if let Some(p) = urls_file.parent()
        && !p.as_os_str().is_empty()
    {
        std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
    }
    crate::atomic::write_file(&urls_file, format!("{}\n", urls.join("\n")).as_bytes())
        .with_context(|| format!("writing {}", urls_file.display()))?;

    // Everything is bound: start the clock, the engines and the servers.
    let fleet = Fleet::new(shared.clone(), cfgs.clone(), &initial, cfg.fleet_events.clone());
    let engine_thread = std::thread::Builder::new()
        .name("sim-serve-engines".into())
        .spawn(move || fleet.run(cmd_rx))
        .context("starting the engine thread")?;
    let started = Instant::now();
    let mut servers = JoinSet::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let app = http::router(shared.clone(), i, shutdown_rx.clone());
        let membership = shared.backends[i].membership.subscribe();
        let sd = shutdown_rx.clone();
        let addr = addrs[i];
        let bound = (initial[i] == Membership::Active).then_some(l);
        servers.spawn_on(serve_backend(app, addr, bound, membership, sd), rt.handle());
    }
    if !a.quiet {
        print_banner(&a, cfg, &model, &urls, &urls_file)?;
    }
    // Run until a signal or the duration.
    let reason = rt.block_on(async {
        let dur = a
            .duration
            .map(|d| Duration::from_secs_f64(d / a.speed))
            .unwrap_or(Duration::from_secs(u64::MAX / 4));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => "SIGTERM",
            _ = tokio::time::sleep(dur) => "--duration",
        }
    });
    // Stop: close every connection and listener, then the engines.
    let _ = shutdown_tx.send(true);
    rt.block_on(async { while servers.join_next().await.is_some() {} });
    let wall = started.elapsed();
    let (tx, rx) = std::sync::mpsc::channel();
    shared
        .cmd
        .send(Cmd::Stop(tx))
        .map_err(|_| anyhow::anyhow!("the engine thread stopped early"))?;
    let records = rx.recv().context("the engine thread stopped without its records")?;
    let _ = engine_thread.join();
    drop(rt);
    let lateness = std::mem::take(&mut *shared.lateness_us.lock().unwrap_or_else(|e| e.into_inner()));
    let late = percentiles(lateness.iter().map(|&u| f64::from(u) / 1000.0).collect());
    let summary = summarize(
        SummaryInputs {
            scenario: &cfg.name,
            seed: cfg.seed,
            policy: "served (the router is outside)".into(),
            end: records.end,
            events: 0,
            names: cfg
                .backends
                .iter()
                .zip(&urls)
                .map(|((n, _), u)| (n.clone(), u.clone()))
                .collect(),
            labels: cfg.labels.clone(),
            engines: records
                .counters
                .iter()
                .map(|c| EngineCounters {
                    steps: c.steps,
                    preemptions: c.preemptions,
                    query_tokens: c.cache.query_tokens,
                    hit_tokens: c.cache.hit_tokens,
                })
                .collect(),
            planned: records.requests.len() as u64,
            sessions: records.session_keys.len() as u64,
            sessions_hit_context_limit: 0,
            latched_sessions: records.latched_sessions,
            first_turns: per_backend_sessions(&records, n, true),
            last_turns: per_backend_sessions(&records, n, false),
            regrets: &[],
            view_ages_ns: &[],
            itl_ns: &records.itl_ns,
            rejected: 0,
            abandoned: 0,
        },
        &records.tracker,
        &records.requests,
        &[],
    );
    if !a.quiet {
        outln!(
            "\nstopped ({reason}) after {:.1} s wall, {:.1} s simulated",
            wall.as_secs_f64(),
            records.end.as_secs_f64()
        )?;
        out!("{}", crate::report::render(&summary, None))?;
        outln!(
            "streamed token lateness (wall written - engine schedule) ms: p50 {:.3} p99 {:.3} max {:.3} over {} tokens",
            late.p50,
            late.p99,
            late.max,
            late.count
        )?;
    }
    if let Some(dir) = &a.out {
        let mut tracker = records.tracker;
        let episodes = tracker.take_episodes();
        let res = crate::sim::RunResult {
            summary,
            requests: records.requests,
            series: records.series,
            decisions: {
                let mut d = crate::metrics::DecisionLog::default();
                d.n_backends = n;
                d
            },
            session_keys: records.session_keys,
            episodes,
            event_log: Vec::new(),
            coalesced_steps: 0,
            collapsed_steps: 0,
        };
        let stage = crate::atomic::Staging::new(dir)?;
        let perf = crate::export::Perf {
            wall_s: wall.as_secs_f64(),
            events: 0,
            events_per_s: 0.0,
            requests_per_s: res.requests.len() as f64 / wall.as_secs_f64().max(1e-9),
        };
        let out = crate::export::Output {
            res: &res,
            scenario_toml: &effective,
            perf: &perf,
            hints: &[],
            tables: crate::export::Tables::Csv,
        };
        crate::run::write_files(stage.path(), &out, true, 96)?;
        crate::export::write_json(
            &stage.path().join("serve.json"),
            &serde_json::json!({
                "speed": a.speed,
                "wall_s": wall.as_secs_f64(),
                "stopped_by": reason,
                "urls": urls,
                "model": model,
                "in_flight_at_stop": records.in_flight,
                "token_lateness_ms": late,
            }),
        )?;
        stage.commit()?;
        if !a.quiet {
            outln!("wrote {}", dir.display())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Sessions whose first (or latest) turn went to each backend.
fn per_backend_sessions(r: &fleet::Records, n: usize, first: bool) -> Vec<u64> {
    let mut at = vec![None; r.session_keys.len()];
    for q in &r.requests {
        let s = &mut at[q.session.index()];
        if !first || s.is_none() {
            *s = Some(q.backend.index());
        }
    }
    let mut out = vec![0u64; n];
    for b in at.into_iter().flatten() {
        out[b] += 1;
    }
    out
}

fn print_banner(
    a: &ServeArgs,
    cfg: &crate::sim::SimConfig,
    model: &str,
    urls: &[String],
    urls_file: &std::path::Path,
) -> Result<()> {
    outln!(
        "sim serve: {} ({} backends), model {model}, speed {} (1 wall s = {} simulated s)",
        cfg.name,
        urls.len(),
        a.speed,
        a.speed
    )?;
    for ((name, _), u) in cfg.backends.iter().zip(urls) {
        outln!("{name} {u}")?;
    }
    outln!("urls: {}", urls_file.display())?;
    let s = a.speed;
    let esi = cfg.router.engine_stats_interval.as_secs_f64();
    let rsw = cfg.router.request_stats_window.as_secs_f64();
    outln!(
        "router intervals at speed {s}: engine_stats_interval {esi} s -> {} s wall, request_stats_window {rsw} s -> {} s wall",
        esi / s,
        rsw / s
    )?;
    outln!(
        "production-stack: vllm-router --service-discovery static --static-backends {} --static-models {} \
         --engine-stats-interval {} --request-stats-window {}",
        urls.join(","),
        vec![model; urls.len()].join(","),
        fmt_secs(esi / s),
        fmt_secs(rsw / s)
    )?;
    outln!("backend header: {}; stop with Ctrl-C", http::BACKEND_HEADER)?;
    Ok(())
}

fn fmt_secs(x: f64) -> String {
    let r = (x * 1000.0).round() / 1000.0;
    if r.fract() == 0.0 {
        format!("{}", r as i64)
    } else {
        format!("{r}")
    }
}

/// Serves one backend: accepts connections while it is in service, stops accepting while
/// it drains, and closes every connection when it is killed (a restart binds the same
/// address again when it comes back) or when the server stops.
async fn serve_backend(
    app: axum::Router,
    addr: SocketAddr,
    mut listener: Option<TcpListener>,
    mut membership: watch::Receiver<Membership>,
    mut shutdown: watch::Receiver<bool>,
) {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    let mut conns: JoinSet<()> = JoinSet::new();
    loop {
        let state = *membership.borrow_and_update();
        match state {
            Membership::Active if listener.is_none() => {
                // Back from a restart (or joining): bind the same address again.
                let mut tries = 0;
                while listener.is_none() {
                    match TcpListener::bind(addr).await {
                        Ok(l) => listener = Some(l),
                        Err(e) if tries > 50 => {
                            eprintln!("error: rebinding {addr}: {e}");
                            return;
                        }
                        Err(_) => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }
            Membership::Draining => listener = None,
            Membership::Absent => {
                listener = None;
                conns.abort_all();
            }
            Membership::Active => {}
        }
        tokio::select! {
            biased;
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
                drop(listener);
                conns.abort_all();
                while conns.join_next().await.is_some() {}
                return;
            }
            r = membership.changed() => {
                if r.is_err() {
                    return;
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            acc = async { listener.as_ref().expect("guarded").accept().await }, if listener.is_some() => {
                if let Ok((stream, _)) = acc {
                    let _ = stream.set_nodelay(true);
                    let svc = TowerToHyperService::new(app.clone());
                    conns.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            }
        }
    }
}
