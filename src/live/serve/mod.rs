//! `sim serve`: the scenario's fleet as vLLM servers over HTTP. One server per backend on
//! its own loopback port speaks vLLM's OpenAI-compatible API and `/metrics`; behind each,
//! the engine model of `sim run` ([`crate::backend::live::LiveEngine`]) steps on a
//! simulated clock ([`Clock`]) that runs `--speed` times faster than the wall clock. A real
//! router pointed at the URLs routes real requests into the model, and `--out` writes what
//! `sim run` writes, seen from the backends (docs/serve.md).
//!
//! The engines run on one plain thread ([`fleet::Fleet`]); the HTTP servers (axum and
//! hyper on the wing's [`runtime`]) talk to it through a channel. A [`Server`] is started
//! whole (every port bound, the URLs written) or not at all, runs until told to stop, and
//! stops into what it [`Served`].

pub mod fleet;
pub mod http;
pub mod kv_events;
pub mod request;
pub mod text;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{Clock, Speed, runtime, wire};
use crate::backend::vllm::VllmConfig;
use crate::fleet::Membership;
use crate::metrics::{EngineCounters, Percentiles, Summary, SummaryInputs, percentiles, summarize};
use crate::sim::{BackendModel, SimConfig};
use crate::time::SimDuration;
use fleet::{BackendShared, BodyLimits, Cmd, Fleet, MetricsState, Records, Shared};

/// How to serve a scenario's fleet (the command line's choices, checked).
#[derive(Clone, Debug)]
pub struct Options {
    /// Address to listen on.
    pub host: IpAddr,
    /// First port: backend i listens on `port_base + i` (0: ports chosen by the system).
    pub port_base: u16,
    /// Simulated seconds per wall second.
    pub speed: Speed,
    /// Where to write the URLs (default: `out/<scenario>.urls`).
    pub urls_file: Option<PathBuf>,
    /// Served model name (default: the first backend profile's model, else
    /// `meta-llama/Llama-3.1-8B-Instruct`).
    pub model: Option<String>,
    /// Largest request body accepted, bytes.
    pub max_body_bytes: usize,
    /// Longest wait for a request's headers (and for the next request on an idle
    /// keep-alive connection).
    pub header_timeout: Duration,
    /// Longest wait for a request's body once its headers are in.
    pub body_timeout: Duration,
    /// Most connections one backend holds open; past it a connection is answered 503 and
    /// closed.
    pub max_connections: usize,
    /// Publish each backend's KV-cache events over ZMQ, as vLLM's `--kv-events-config`.
    pub kv_events: Option<kv_events::Options>,
}

impl Options {
    /// Defaults of the bounds on connections: uvicorn's keep-alive in vLLM is 5 s; a
    /// header 10 s, a body 30 s, and 1024 connections per backend leave any honest client
    /// room.
    pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// See [`Options::HEADER_TIMEOUT`].
    pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
    /// See [`Options::HEADER_TIMEOUT`].
    pub const MAX_CONNECTIONS: usize = 1024;
}

/// The model name vLLM would serve: the first backend's profile model, else the default
/// profile's.
fn model_name(labels: &[crate::backend::Label]) -> String {
    labels
        .iter()
        .find_map(|l| l.profile.split('/').next().filter(|m| !m.is_empty()))
        .map_or_else(|| "meta-llama/Llama-3.1-8B-Instruct".to_string(), str::to_string)
}

/// The fleet a scenario asks `sim serve` for, checked: one vLLM engine per backend, every
/// port below 65536, one KV block size, the membership at time zero.
struct Plan {
    cfgs: Vec<VllmConfig>,
    initial: Vec<Membership>,
    block_tokens: u32,
}

impl Plan {
    fn new(cfg: &SimConfig, file: &str, o: &Options) -> Result<Plan> {
        let file = crate::quote::escape(file);
        let mut cfgs: Vec<VllmConfig> = Vec::new();
        for m in &cfg.models {
            match m {
                BackendModel::Vllm(v) => cfgs.push(v.clone()),
                BackendModel::Queueing { .. } => bail!(
                    "{file}: backends.model: sim serve runs vLLM engines; the queueing model has no tokens to stream"
                ),
            }
        }
        let n = cfgs.len();
        if u32::try_from(n).is_err() || usize::from(o.port_base) + n > 65_536 && o.port_base != 0 {
            bail!(
                "--port-base {}: {} backends do not fit below port 65536",
                o.port_base,
                n
            );
        }
        let initial = crate::fleet::initial_membership(&cfg.fleet_events, n)
            .map_err(|(i, m)| anyhow::anyhow!("{file}: fleet_events[{i}]: {m}"))?;
        let block_tokens = cfgs.first().map_or(16, |c| c.block_size_tokens);
        if cfgs.iter().any(|c| c.block_size_tokens != block_tokens) {
            bail!(
                "{file}: sim serve needs one KV block size across the fleet (the block keys are cut once per request)"
            );
        }
        Ok(Plan {
            cfgs,
            initial,
            block_tokens,
        })
    }

    /// What the handlers share; the clock starts now.
    fn shared(&self, cfg: &SimConfig, o: &Options, model: String, cmd: std::sync::mpsc::Sender<Cmd>) -> Shared {
        Shared {
            clock: Clock::start(o.speed),
            backends: self
                .cfgs
                .iter()
                .zip(&self.initial)
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
            cmd,
            model,
            tokenizer: text::Tokenizer {
                codec: wire::Codec::new(cfg.router.chars_per_token),
                block_tokens: self.block_tokens,
            },
            limits: BodyLimits {
                max_body_bytes: o.max_body_bytes,
                body_timeout: o.body_timeout,
            },
            lateness_us: Mutex::new(Vec::new()),
            kv_events: o.kv_events.is_some(),
        }
    }
}

/// A running `sim serve`: every backend bound, the engine thread and the servers started.
pub struct Server {
    rt: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    servers: JoinSet<()>,
    engines: std::thread::JoinHandle<()>,
    shutdown: watch::Sender<bool>,
    started: Instant,
    /// The backends' URLs, in backend order.
    pub urls: Vec<String>,
    /// The file they were written to.
    pub urls_file: PathBuf,
    /// The served model name.
    pub model: String,
    /// Each backend's KV-event PUB endpoint, in backend order (empty without `--kv-events`).
    pub kv_endpoints: Vec<String>,
    /// Each backend's replay endpoint (empty without `--kv-events-replay`).
    pub kv_replay_endpoints: Vec<String>,
    /// The engines' KV block size, tokens.
    pub block_tokens: u32,
}

impl Server {
    /// Serves `cfg`'s fleet (`file` names the scenario in messages). Binds every backend
    /// before anything runs, so a bad port is one error and nothing half-started; writes
    /// the URLs once all are bound.
    pub fn start(cfg: &SimConfig, file: &str, o: &Options) -> Result<Server> {
        let plan = Plan::new(cfg, file, o)?;
        let model = o.model.clone().unwrap_or_else(|| model_name(&cfg.labels));
        let (cmd_tx, cmd_rx) = std::sync::mpsc::channel();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(plan.shared(cfg, o, model.clone(), cmd_tx));
        open_files(plan.cfgs.len(), o.max_connections)?;
        let rt = runtime(None)?;
        let listeners = bind(&rt, o, &shared)?;
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<std::io::Result<_>>()
            .context("reading the bound addresses")?;
        let urls: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
        let urls_file = o
            .urls_file
            .clone()
            .unwrap_or_else(|| crate::output::default_out(&format!("{}.urls", cfg.name)));
        let publishers = match &o.kv_events {
            Some(k) => {
                let caps: Vec<u32> = plan.cfgs.iter().map(|c| c.kv_blocks).collect();
                Some(kv_events::Publishers::bind(&rt, k, &caps, plan.block_tokens)?)
            }
            None => None,
        };
        let (kv_endpoints, kv_replay_endpoints) = publishers
            .as_ref()
            .map(|p| (p.endpoints.clone(), p.replay_endpoints.clone()))
            .unwrap_or_default();
        write_urls(&urls_file, &urls)?;
        let books = match (publishers, &o.kv_events) {
            (Some(p), Some(k)) => p.start(&rt, &k.topic, shutdown_rx.clone()),
            _ => Vec::new(),
        };

        // Everything is bound: start the engines and the servers.
        let fleet = Fleet::new(
            shared.clone(),
            plan.cfgs,
            &plan.initial,
            cfg.fleet_events.clone(),
            books,
        );
        let engines = std::thread::Builder::new()
            .name("sim-serve-engines".into())
            .spawn(move || fleet.run(cmd_rx))
            .context("starting the engine thread")?;
        let started = Instant::now();
        let mut servers = JoinSet::new();
        for (i, l) in listeners.into_iter().enumerate() {
            let app = http::router(shared.clone(), i, shutdown_rx.clone());
            let membership = shared.backends[i].membership.subscribe();
            let bound = (plan.initial[i] == Membership::Active).then_some(l);
            let conn = Connections::new(o, &shared.backends[i].name);
            let serve = serve_backend(app, addrs[i], bound, membership, shutdown_rx.clone(), conn);
            servers.spawn_on(serve, rt.handle());
        }
        Ok(Server {
            rt,
            shared,
            servers,
            engines,
            shutdown,
            started,
            urls,
            urls_file,
            model,
            kv_endpoints,
            kv_replay_endpoints,
            block_tokens: plan.block_tokens,
        })
    }

    /// Waits for SIGINT, SIGTERM or `duration` of simulated time; returns which. The
    /// signals are watched on a runtime of their own on this thread, so they are seen
    /// whatever the servers' workers are doing.
    pub fn wait(&self, duration: Option<SimDuration>) -> Result<&'static str> {
        let speed = self.shared.clock.speed();
        let wall = duration.map_or(Duration::from_secs(u64::MAX / 4), |d| speed.span_to_wall(d));
        let signals = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the signal watcher")?;
        Ok(signals.block_on(async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => "SIGINT",
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => "SIGTERM",
                _ = tokio::time::sleep(wall) => "--duration",
            }
        }))
    }

    /// Stops: closes every connection and listener (waiting at most 10 s for
    /// them), then the engines; hands back what they recorded.
    pub fn stop(mut self) -> Result<Served> {
        let _ = self.shutdown.send(true);
        let servers = &mut self.servers;
        let closed = self.rt.block_on(async {
            tokio::time::timeout(STOP_WAIT, async { while servers.join_next().await.is_some() {} }).await
        });
        if closed.is_err() {
            eprintln!(
                "note: the servers did not close within {} s; stopping the engines anyway",
                STOP_WAIT.as_secs()
            );
            servers.abort_all();
        }
        let wall = self.started.elapsed();
        let (tx, rx) = std::sync::mpsc::channel();
        self.shared
            .cmd
            .send(Cmd::Stop(tx))
            .map_err(|_| anyhow::anyhow!("the engine thread stopped early"))?;
        let records = rx
            .recv_timeout(STOP_WAIT)
            .context("the engine thread did not hand back its records")?;
        let _ = self.engines.join();
        self.rt.shutdown_timeout(Duration::from_secs(1));
        let lateness = std::mem::take(&mut *self.shared.lateness_us.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(Served {
            records,
            wall,
            token_lateness_ms: percentiles(lateness.iter().map(|&u| f64::from(u) / 1000.0).collect()),
            speed: self.shared.clock.speed(),
            urls: self.urls,
            model: self.model,
        })
    }
}

/// The longest wait at a stop for the servers to close and for the engine thread's records.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Raises the open-file limit to what `backends` servers of `max_connections` each need
/// (up to the hard limit), or says which flag to lower.
fn open_files(backends: usize, max_connections: usize) -> Result<()> {
    let need = (backends as u64)
        .saturating_mul(max_connections as u64 + Connections::REFUSING as u64)
        .saturating_add(256);
    let have = rlimit::increase_nofile_limit(need).unwrap_or(need);
    if have < need {
        let fits = (have.saturating_sub(256) / backends.max(1) as u64).saturating_sub(Connections::REFUSING as u64);
        bail!(
            "--max-connections {max_connections}: {backends} backends need {need} open files, the limit is {have} \
             (ulimit -n); give --max-connections {fits} or raise the limit"
        );
    }
    Ok(())
}

/// Binds every backend's address (the listeners of backends out of service at time zero
/// are dropped when their servers start).
fn bind(rt: &tokio::runtime::Runtime, o: &Options, shared: &Shared) -> Result<Vec<TcpListener>> {
    let mut listeners = Vec::with_capacity(shared.backends.len());
    for (i, be) in shared.backends.iter().enumerate() {
        let port = if o.port_base == 0 { 0 } else { o.port_base + i as u16 };
        let addr = SocketAddr::new(o.host, port);
        let l = rt
            .block_on(TcpListener::bind(addr))
            .with_context(|| format!("--port-base {}: binding {addr} for {}", o.port_base, be.name))?;
        listeners.push(l);
    }
    Ok(listeners)
}

/// The URLs, one per line, written whole: the file's existence means "ready".
fn write_urls(path: &Path, urls: &[String]) -> Result<()> {
    if let Some(p) = path.parent()
        && !p.as_os_str().is_empty()
    {
        std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
    }
    crate::atomic::write_file(path, format!("{}\n", urls.join("\n")).as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// What a stopped server saw.
pub struct Served {
    /// What the engine thread recorded.
    pub records: Records,
    /// Wall time from the start of the servers to their stop.
    pub wall: Duration,
    /// Lateness of streamed tokens (wall time written minus the engine's schedule), ms.
    pub token_lateness_ms: Percentiles,
    /// Simulated seconds per wall second.
    pub speed: Speed,
    /// The backends' URLs.
    pub urls: Vec<String>,
    /// The served model name.
    pub model: String,
}

impl Served {
    /// `sim run`'s summary of what the backends saw (the router is outside: no decisions,
    /// regrets or view ages).
    pub fn summary(&self, cfg: &SimConfig) -> Summary {
        let r = &self.records;
        let n = r.counters.len();
        summarize(
            SummaryInputs {
                scenario: &cfg.name,
                seed: cfg.seed,
                policy: "served (the router is outside)".into(),
                end: r.end,
                events: 0,
                names: cfg
                    .backends
                    .iter()
                    .zip(&self.urls)
                    .map(|((n, _), u)| (n.clone(), u.clone()))
                    .collect(),
                labels: cfg.labels.clone(),
                engines: r
                    .counters
                    .iter()
                    .map(|c| EngineCounters {
                        steps: c.steps,
                        preemptions: c.preemptions,
                        query_tokens: c.cache.query_tokens,
                        hit_tokens: c.cache.hit_tokens,
                    })
                    .collect(),
                planned: r.requests.len() as u64,
                sessions: r.session_keys.len() as u64,
                sessions_hit_context_limit: 0,
                latched_sessions: r.latched_sessions,
                first_turns: per_backend_sessions(r, n, true),
                last_turns: per_backend_sessions(r, n, false),
                regrets: &[],
                view_ages_ns: &[],
                itl_ns: &r.itl_ns,
                rejected: 0,
                abandoned: 0,
                unserved_models: Default::default(),
            },
            &r.tracker,
            &r.requests,
            &[],
        )
    }

    /// Writes into `dir` what `sim run` writes (from `summary`, `effective` the scenario
    /// as run), and `serve.json`: the speed, wall time, why it stopped, the URLs and model,
    /// the requests in flight at the stop and the streamed tokens' lateness.
    pub fn write(self, dir: &Path, summary: Summary, effective: &str, stopped_by: &str) -> Result<()> {
        let wall_s = self.wall.as_secs_f64();
        let n = self.records.counters.len();
        let mut tracker = self.records.tracker;
        let episodes = tracker.take_episodes();
        let res = crate::sim::RunResult {
            summary,
            requests: self.records.requests,
            series: self.records.series,
            decisions: {
                let mut d = crate::metrics::DecisionLog::default();
                d.n_backends = n;
                d
            },
            session_keys: self.records.session_keys,
            episodes,
            event_log: Vec::new(),
            coalesced_steps: 0,
            collapsed_steps: 0,
        };
        let stage = crate::atomic::Staging::new(dir)?;
        let perf = crate::export::Perf {
            wall_s,
            events: 0,
            events_per_s: 0.0,
            requests_per_s: res.requests.len() as f64 / wall_s.max(1e-9),
        };
        let out = crate::export::Output {
            res: &res,
            scenario_toml: effective,
            perf: &perf,
            hints: &[],
            tables: crate::export::Tables::Csv,
        };
        crate::run::write_files(stage.path(), &out, true, crate::plot::DEFAULT_DPI)?;
        crate::export::write_json(
            &stage.path().join("serve.json"),
            &serde_json::json!({
                "speed": self.speed.get(),
                "wall_s": wall_s,
                "stopped_by": stopped_by,
                "urls": self.urls,
                "model": self.model,
                "in_flight_at_stop": self.records.in_flight,
                "token_lateness_ms": self.token_lateness_ms,
            }),
        )?;
        stage.commit()?;
        Ok(())
    }
}

/// Sessions whose first (or latest) turn went to each backend.
fn per_backend_sessions(r: &Records, n: usize, first: bool) -> Vec<u64> {
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
/// One backend's bounds on connections: a permit per open connection (at most
/// `--max-connections`), a few more for the connections refused past it, and the header
/// time-out.
#[derive(Clone)]
struct Connections {
    open: Arc<tokio::sync::Semaphore>,
    refusing: Arc<tokio::sync::Semaphore>,
    max: usize,
    header_timeout: Duration,
    backend: String,
}

impl Connections {
    /// Connections being refused at once, at most; past it a connection is closed unread.
    const REFUSING: usize = 64;

    fn new(o: &Options, backend: &str) -> Connections {
        Connections {
            open: Arc::new(tokio::sync::Semaphore::new(o.max_connections)),
            refusing: Arc::new(tokio::sync::Semaphore::new(Self::REFUSING)),
            max: o.max_connections,
            header_timeout: o.header_timeout,
            backend: backend.to_string(),
        }
    }

    /// Serves `stream` if a permit is free, else answers 503 and closes it.
    fn serve(&self, conns: &mut JoinSet<()>, app: &axum::Router, stream: tokio::net::TcpStream) {
        use hyper_util::rt::{TokioIo, TokioTimer};
        use hyper_util::service::TowerToHyperService;
        let _ = stream.set_nodelay(true);
        if let Ok(permit) = self.open.clone().try_acquire_owned() {
            let svc = TowerToHyperService::new(app.clone());
            let header_timeout = self.header_timeout;
            conns.spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
                drop(permit);
            });
        } else if let Ok(permit) = self.refusing.clone().try_acquire_owned() {
            let (max, backend) = (self.max, self.backend.clone());
            conns.spawn(async move {
                refuse(stream, max, &backend).await;
                drop(permit);
            });
        }
    }
}

/// Answers a connection past `--max-connections` with vLLM's error shape, 503, and closes it
/// (what uvicorn's `limit_concurrency` answers): the request's first bytes are read first
/// (briefly), so that the close does not reset the answer away.
async fn refuse(mut stream: tokio::net::TcpStream, max: usize, backend: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await;
    let body = serde_json::json!({"error": {
        "message": format!("too many connections: this backend holds {max} (sim serve --max-connections)"),
        "type": "ServiceUnavailableError", "param": null, "code": 503}})
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n{}: {backend}\r\n\r\n",
        body.len(),
        wire::BACKEND_HEADER
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
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
    limits: Connections,
) {
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
                match acc {
                    Ok((stream, _)) => limits.serve(&mut conns, &app, stream),
                    // Out of file descriptors or a connection reset before it was
                    // accepted: wait a moment rather than spin on the error.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
    }
}
