//! How to start each real router against `sim serve`'s URLs: one launch template per
//! router (its version and its flags, every wall-clock interval the model reads scaled to
//! the speed), and the router as a child process on loopback that is stopped whatever
//! happens.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::live::Speed;
use crate::policy::counterparts::Counterpart;

/// What a template fills in.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    /// The backends' URLs, in backend order.
    pub urls: &'a [String],
    /// The served model name.
    pub model: &'a str,
    /// The router's port (loopback).
    pub port: u16,
    /// A second free port, for the router's own Prometheus listener.
    pub metrics_port: u16,
    /// Simulated seconds per wall second.
    pub speed: Speed,
    /// Each backend's KV-event endpoint (`sim serve --kv-events`), in backend order; empty
    /// when the policy reads none.
    pub kv_endpoints: &'a [String],
    /// The engines' KV block size, tokens.
    pub block_tokens: u32,
}

/// One router's launch template.
pub struct Template {
    /// The name `--router NAME=PATH` takes (the PyPI distribution).
    pub router: &'static str,
    /// The version the counterparts were read at.
    pub version: &'static str,
    /// The flag that carries the worker-poll interval, if the router has one.
    pub poll_flag: Option<&'static str>,
    /// The command line after the executable, for `policy` (its `flag` in the counterpart
    /// table) and the interval the poll flag gets.
    args: fn(&Launch, &Counterpart, Option<u64>) -> Vec<String>,
}

/// Every router `sim conform` knows how to start.
pub static TEMPLATES: &[Template] = &[
    Template {
        router: "vllm-router",
        version: "0.1.17",
        poll_flag: Some("--worker-startup-check-interval"),
        args: vllm_router_args,
    },
    Template {
        router: "sglang-router",
        version: "0.3.2",
        poll_flag: Some("--worker-startup-check-interval"),
        args: sglang_router_args,
    },
    Template {
        router: "smg",
        version: "1.13.0",
        poll_flag: Some("--load-monitor-interval"),
        args: smg_args,
    },
    Template {
        router: "production-stack",
        version: "a6c01db",
        poll_flag: Some("--engine-stats-interval"),
        args: production_stack_args,
    },
];

/// The template of `router`.
pub fn template(router: &str) -> Option<&'static Template> {
    TEMPLATES.iter().find(|t| t.router == router)
}

/// A wall interval of `default_s` divided by the speed, in the whole seconds the routers'
/// flags take (at least 1).
pub fn scaled_interval_s(default_s: f64, speed: Speed) -> u64 {
    ((default_s / speed.get()).round() as u64).max(1)
}

impl Template {
    /// The command line for `c`, and the wall poll interval it passes (if any).
    pub fn command(&self, l: &Launch, c: &Counterpart) -> (Vec<String>, Option<u64>) {
        let poll = c.poll_interval_s.map(|d| scaled_interval_s(d, l.speed));
        ((self.args)(l, c, poll), poll)
    }
}

fn common(l: &Launch, c: &Counterpart) -> Vec<String> {
    let mut a: Vec<String> = ["--host", "127.0.0.1", "--port"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.push(l.port.to_string());
    a.extend([
        "--prometheus-host".into(),
        "127.0.0.1".into(),
        "--prometheus-port".into(),
    ]);
    a.push(l.metrics_port.to_string());
    a.extend(c.flag.split_whitespace().map(str::to_string));
    a.push("--worker-urls".into());
    a.extend(l.urls.iter().cloned());
    a
}

fn with_poll(mut a: Vec<String>, flag: &str, poll: Option<u64>) -> Vec<String> {
    if let Some(p) = poll {
        a.extend([flag.to_string(), p.to_string()]);
    }
    a
}

fn vllm_router_args(l: &Launch, c: &Counterpart, poll: Option<u64>) -> Vec<String> {
    let mut a = common(l, c);
    if c.kv_events {
        // One static source per worker (`--kv-event-source WORKER_URL=ENDPOINT`, repeated),
        // their block size and model (without a model the index is unverified and credits
        // nothing): py_src/vllm_router/router_args.py, src/kv_index/discovery.rs.
        for (u, e) in l.urls.iter().zip(l.kv_endpoints) {
            a.extend(["--kv-event-source".to_string(), format!("{u}={e}")]);
        }
        a.extend([
            "--kv-event-block-size".to_string(),
            l.block_tokens.to_string(),
            "--kv-event-model".to_string(),
            l.model.to_string(),
        ]);
    }
    with_poll(a, "--worker-startup-check-interval", poll)
}

fn sglang_router_args(l: &Launch, c: &Counterpart, poll: Option<u64>) -> Vec<String> {
    let mut a = vec!["launch".to_string()];
    a.extend(common(l, c));
    with_poll(a, "--worker-startup-check-interval", poll)
}

fn smg_args(l: &Launch, c: &Counterpart, poll: Option<u64>) -> Vec<String> {
    let mut a = vec!["launch".to_string()];
    a.extend(common(l, c));
    with_poll(a, "--load-monitor-interval", poll)
}

fn production_stack_args(l: &Launch, c: &Counterpart, poll: Option<u64>) -> Vec<String> {
    let mut a: Vec<String> = vec!["--host".into(), "127.0.0.1".into(), "--port".into(), l.port.to_string()];
    a.extend([
        "--service-discovery".into(),
        "static".into(),
        "--static-backends".into(),
    ]);
    a.push(l.urls.join(","));
    a.push("--static-models".into());
    a.push(vec![l.model; l.urls.len()].join(","));
    a.extend(c.flag.split_whitespace().map(str::to_string));
    a.extend([
        "--request-stats-window".into(),
        scaled_interval_s(PRODUCTION_STACK_REQUEST_STATS_WINDOW_S, l.speed).to_string(),
    ]);
    with_poll(a, "--engine-stats-interval", poll)
}

/// production-stack's `--request-stats-window` default, seconds.
pub const PRODUCTION_STACK_REQUEST_STATS_WINDOW_S: f64 = 60.0;

/// A router process, killed when dropped.
pub struct RouterProcess {
    child: Child,
    /// Its base URL.
    pub url: String,
}

impl RouterProcess {
    /// Starts `exe args` with its output in `log`, then waits (at most `limit`) until it
    /// lists the model on `GET /v1/models`, i.e. it has a worker to route to.
    pub fn start(exe: &Path, args: &[String], log: &Path, port: u16, limit: Duration) -> Result<RouterProcess> {
        let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("duplicating the router log")?;
        let child = Command::new(exe)
            .args(args)
            // No tokenizer download: sglang-router fetches one for a worker's model_path.
            .env("HF_HUB_OFFLINE", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("--router {}: cannot start it", exe.display()))?;
        let mut p = RouterProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        p.wait_ready(limit, log)?;
        Ok(p)
    }

    fn wait_ready(&mut self, limit: Duration, log: &Path) -> Result<()> {
        let t0 = Instant::now();
        let port = self.url.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0);
        while t0.elapsed() < limit {
            if let Ok(Some(st)) = self.child.try_wait() {
                bail!("the router exited ({st}) before it was ready; see {}", log.display());
            }
            if lists_a_model(port) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!(
            "the router did not list a model on GET /v1/models within {} s; see {}",
            limit.as_secs(),
            log.display()
        )
    }

    /// Stops it (SIGKILL: a router holds nothing worth flushing) and reaps it.
    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `--router NAME=PATH`, checked: a known router and an existing file.
pub fn parse_router(s: &str) -> Result<(&'static Template, PathBuf), String> {
    let (name, path) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PATH, e.g. vllm-router=/opt/venv/bin/vllm-router (got {s:?})"))?;
    let t = template(name).ok_or_else(|| {
        let names: Vec<&str> = TEMPLATES.iter().map(|t| t.router).collect();
        format!("{name:?}: not a router sim conform can start ({})", names.join(", "))
    })?;
    let p = PathBuf::from(path);
    if !p.is_file() {
        return Err(format!("{path:?}: no such file"));
    }
    Ok((t, p))
}

/// True if `GET /v1/models` on the loopback port answers 200 with at least one model id
/// (a plain HTTP/1.0 exchange, bounded by short time-outs).
fn lists_a_model(port: u16) -> bool {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = Vec::new();
    let _ = s.take(1 << 20).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let ok = text
        .lines()
        .next()
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("200"));
    ok && text.contains("\"id\"")
}
