//! `sim load`: a scenario's workload replayed in real time against any OpenAI-compatible
//! endpoint (a real router in front of `sim serve`, or anything else), streaming, with each
//! request's send, first-token and last-token times and the backend that served it.
//!
//! The sessions are the ones `sim run` simulates (the same generated [`Workload`]: groups,
//! bursts, closed-loop think times, replayed traces with happens-before pacing), paced on
//! the wing's [`Clock`] at `speed` simulated seconds per wall second, and sent as the
//! content model says ([`text`]). Times in the outputs are simulated seconds from the start
//! (on the same clock), so they line up with a `sim run` of the same scenario.

pub mod side_by_side;
pub mod sse;
pub mod text;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use super::client::{client, get_text, root_cause};
use super::wire::{self, Codec};
use super::{Clock, Speed, runtime};
use crate::ids::SessionId;
use crate::metrics::{Percentiles, percentiles, round6};
use crate::time::SimDuration;
use crate::workload::{RequestApi, Workload};

/// How to drive the target.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Base URL (`http://127.0.0.1:8000`), no trailing slash.
    pub target: String,
    /// Model name sent in every request.
    pub model: String,
    /// Simulated seconds per wall second.
    pub speed: Speed,
    /// Most requests sent.
    pub max_requests: usize,
    /// Wall-clock bound on the whole run.
    pub duration: Duration,
    /// Wall-clock bound on one request.
    pub request_timeout: Duration,
    /// The text codec (at the scenario's `router.chars_per_token`).
    pub codec: Codec,
    /// Most requests in flight at once (a bound on sockets).
    pub max_in_flight: usize,
}

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Streamed to its end (`data: [DONE]`) with a 2xx status.
    Finished,
    /// A non-2xx status.
    HttpError,
    /// The connection failed, the answer was not a stream (another content type, an event
    /// past its bound), or the stream ended without a token.
    Failed,
    /// `--request-timeout` elapsed.
    TimedOut,
    /// The stream was cut before `data: [DONE]`: by the server (the body ended or broke,
    /// mid-event or between two), or by the run stopping while it was in flight
    /// (`--duration`, SIGINT or SIGTERM); the error says which.
    Cut,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Finished => "finished",
            Outcome::HttpError => "http_error",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cut => "cut",
        }
    }
}

/// One request as the client saw it; times are simulated seconds from the start.
#[derive(Clone, Debug)]
pub struct Record {
    /// Session key.
    pub session: String,
    /// Turn index in the session.
    pub turn: u32,
    /// Planned prompt tokens.
    pub prompt_tokens: u32,
    /// Planned output tokens.
    pub output_tokens: u32,
    /// Backend that served it (header or fingerprint), empty if unknown.
    pub backend: String,
    /// HTTP status (0: none).
    pub status: u16,
    /// Sent.
    pub t_send_s: f64,
    /// First token.
    pub t_first_token_s: Option<f64>,
    /// Last token.
    pub t_last_token_s: Option<f64>,
    /// End of the response.
    pub t_done_s: Option<f64>,
    /// Prompt tokens the server reported (`usage`).
    pub usage_prompt_tokens: Option<u64>,
    /// Output tokens the server reported (`usage`).
    pub usage_completion_tokens: Option<u64>,
    /// Prompt tokens served from the prefix cache (`usage.prompt_tokens_details`).
    pub cached_tokens: Option<u64>,
    /// Text chunks received.
    pub chunks: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// What went wrong, one line.
    pub error: String,
}

/// What a load run measured.
#[derive(Debug)]
pub struct LoadRun {
    /// Every request sent, in order of sending.
    pub records: Vec<Record>,
    /// Requests the workload plans.
    pub planned: usize,
    /// Requests never sent (`--max-requests`, `--duration`, or an earlier turn failed).
    pub not_sent: usize,
    /// Wall time of the run.
    pub wall: Duration,
    /// The model sent.
    pub model: String,
    /// Why the run stopped: `end` (every session ended), `--duration`, `SIGINT` or
    /// `SIGTERM`.
    pub stopped_by: &'static str,
    /// Requests in flight when the run stopped (recorded as cut).
    pub cut_at_stop: usize,
}

/// The largest `/v1/models` answer read.
const MAX_MODELS_BYTES: u64 = 1 << 20;
/// The most of an error answer's body read (its first 200 characters are kept).
const MAX_ERROR_BYTES: usize = 64 << 10;

/// Checks that `target` answers HTTP at all and finds the model: `GET /v1/models`' first id
/// unless `model` is given. An unreachable target is one error naming it.
pub async fn probe(client: &reqwest::Client, target: &str, model: Option<&str>) -> Result<String> {
    let url = format!("{target}{}", wire::MODELS_PATH);
    let answer = get_text(client, &url, &[], Duration::from_secs(10), MAX_MODELS_BYTES).await;
    // Reached when it answered, whatever it answered (an error past the head is in reading).
    if let Err(e) = &answer
        && !e.to_string().starts_with("reading")
    {
        anyhow::bail!("--target {target}: cannot reach it ({})", root_line(e));
    }
    if let Some(m) = model {
        return Ok(m.to_string());
    }
    let (status, body) = answer.map_err(|e| {
        anyhow::anyhow!(
            "--target {target}: GET /v1/models failed ({}); name the model with --model",
            root_line(&e)
        )
    })?;
    anyhow::ensure!(
        (200..300).contains(&status),
        "--target {target}: GET /v1/models answered HTTP {status}; name the model with --model"
    );
    let v: serde_json::Value = serde_json::from_str(&body)
        .map_err(|_| anyhow::anyhow!("--target {target}: GET /v1/models is not JSON; name the model with --model"))?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("--target {target}: GET /v1/models lists no model; name it with --model"))
}

/// The innermost message of an error chain, on one line.
fn root_line(e: &anyhow::Error) -> String {
    crate::quote::one_line(&e.root_cause().to_string()).into_owned()
}

struct Ctx {
    workload: Arc<Workload>,
    cfg: LoadConfig,
    client: reqwest::Client,
    clock: Clock,
    deadline: Instant,
    sent: AtomicUsize,
    book: std::sync::Mutex<Book>,
    in_flight: tokio::sync::Semaphore,
    /// Received outputs per session and turn (for the next turns' assistant messages).
    replies: Vec<std::sync::Mutex<Vec<Option<String>>>>,
}

/// The requests sent, closed when the run stops: a request that ends after that changes
/// nothing (it is recorded as cut), and none is sent.
#[derive(Default)]
struct Book {
    rows: Vec<Record>,
    closed: bool,
}

impl Ctx {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Simulated seconds at wall instant `t`, as the outputs give them.
    fn sim_s(&self, t: Instant) -> f64 {
        round6(self.clock.sim_at(t).as_secs_f64())
    }

    /// The wall time a simulated span takes.
    fn wall(&self, d: SimDuration) -> Duration {
        self.clock.speed().span_to_wall(d)
    }
}

/// Replays `workload` against `cfg.target` on the wing's runtime; returns when every
/// session ended, `cfg.duration` elapsed, or SIGINT or SIGTERM came (then the requests in
/// flight are recorded as cut).
pub fn run(workload: Workload, cfg: LoadConfig, model_given: Option<String>) -> Result<LoadRun> {
    let rt = runtime(Some(2))?;
    let res = rt.block_on(run_async(workload, cfg, model_given));
    // Tasks still running were cancelled; do not wait on one mid-poll.
    rt.shutdown_timeout(Duration::from_secs(1));
    res
}

/// SIGINT or SIGTERM, whichever comes first (never, if neither can be watched).
async fn signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    tokio::select! {
        r = tokio::signal::ctrl_c() => if r.is_ok() { "SIGINT" } else { std::future::pending().await },
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => "SIGTERM",
    }
}

async fn run_async(workload: Workload, mut cfg: LoadConfig, model_given: Option<String>) -> Result<LoadRun> {
    let client = client(Some(cfg.max_in_flight))?;
    let stop = signal();
    tokio::pin!(stop);
    cfg.model = tokio::select! {
        m = probe(&client, &cfg.target, model_given.as_deref()) => m?,
        s = &mut stop => anyhow::bail!("{s} before the first request"),
    };
    let planned = workload.total_requests();
    let n_sessions = workload.sessions.len();
    let clock = Clock::start(cfg.speed);
    let ctx = Arc::new(Ctx {
        deadline: clock.wall_zero() + cfg.duration,
        in_flight: tokio::sync::Semaphore::new(cfg.max_in_flight),
        workload: Arc::new(workload),
        cfg,
        client,
        clock,
        sent: AtomicUsize::new(0),
        book: std::sync::Mutex::new(Book {
            rows: Vec::with_capacity(planned.min(1 << 20)),
            closed: false,
        }),
        replies: (0..n_sessions).map(|_| std::sync::Mutex::new(Vec::new())).collect(),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for &s in &ctx.workload.open_order {
        tasks.spawn(drive_session(ctx.clone(), s));
    }
    let deadline = tokio::time::Instant::from_std(ctx.deadline);
    let all = async { while tasks.join_next().await.is_some() {} };
    let stopped_by = tokio::select! {
        _ = all => "end",
        _ = tokio::time::sleep_until(deadline) => "--duration",
        s = &mut stop => s,
    };
    // Close the book before anything else: a request ending from here on is cut.
    let wall = ctx.clock.elapsed();
    let mut records = {
        let mut book = ctx.book();
        book.closed = true;
        std::mem::take(&mut book.rows)
    };
    tasks.abort_all();
    let why = match stopped_by {
        "--duration" => format!(
            "in flight when --duration ({} s) elapsed",
            ctx.cfg.duration.as_secs_f64()
        ),
        s => format!("in flight when {s} came"),
    };
    // Rows not ended yet are the requests in flight (a stream the server cut has its error).
    let mut cut_at_stop = 0;
    for r in records
        .iter_mut()
        .filter(|r| r.outcome == Outcome::Cut && r.error.is_empty())
    {
        r.error.clone_from(&why);
        cut_at_stop += 1;
    }
    records.sort_by(|a, b| {
        a.t_send_s
            .total_cmp(&b.t_send_s)
            .then(a.session.cmp(&b.session))
            .then(a.turn.cmp(&b.turn))
    });
    Ok(LoadRun {
        not_sent: planned.saturating_sub(records.len()),
        planned,
        records,
        wall,
        model: ctx.cfg.model.clone(),
        stopped_by,
        cut_at_stop,
    })
}

/// Sends session `s`'s turns as the simulation paces them (see `sim::requests`).
async fn drive_session(ctx: Arc<Ctx>, s: SessionId) {
    let plan = &ctx.workload.sessions[s.index()];
    tokio::time::sleep_until(ctx.clock.wall_of(plan.open_at).into()).await;
    if let Some(rp) = plan.replay.as_deref().filter(|r| r.paced()) {
        // Happens-before: call 0 now, the other roots at their offsets, each further call
        // the recorded gap after the call it waits for completes.
        let mut set = tokio::task::JoinSet::new();
        for &t in rp.roots_after_first() {
            let d = ctx.wall(plan.turns[t as usize].think_before);
            set.spawn(paced_call(ctx.clone(), s, t, d));
        }
        set.spawn(paced_call(ctx.clone(), s, 0, Duration::ZERO));
        while set.join_next().await.is_some() {}
        return;
    }
    if plan.open_loop {
        // Open loop: each turn follows the previous one's sending.
        let mut set = tokio::task::JoinSet::new();
        let mut at = Instant::now();
        for (t, turn) in plan.turns.iter().enumerate() {
            if t > 0 {
                at += ctx.wall(turn.think_before);
                tokio::time::sleep_until(at.into()).await;
            }
            let c = ctx.clone();
            set.spawn(async move {
                send(&c, s, t as u32).await;
            });
        }
        while set.join_next().await.is_some() {}
        return;
    }
    for (t, turn) in plan.turns.iter().enumerate() {
        if t > 0 {
            tokio::time::sleep(ctx.wall(turn.think_before)).await;
        }
        if !send(&ctx, s, t as u32).await {
            // A closed-loop session whose turn failed ends there, as in the simulation
            // once its retries are spent.
            return;
        }
    }
}

/// Call `t` of a paced session after `delay`, then the calls waiting for it.
fn paced_call(ctx: Arc<Ctx>, s: SessionId, t: u32, delay: Duration) -> futures_util::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        tokio::time::sleep(delay).await;
        if !send(&ctx, s, t).await {
            return;
        }
        let plan = &ctx.workload.sessions[s.index()];
        let rp = plan.replay.as_deref().expect("paced");
        let mut set = tokio::task::JoinSet::new();
        for &w in rp.waiting_for(t) {
            let d = ctx.wall(plan.turns[w as usize].think_before);
            set.spawn(paced_call(ctx.clone(), s, w, d));
        }
        while set.join_next().await.is_some() {}
    })
}

/// Sends turn `t` of session `s`, streams the answer and records it; true if it finished.
async fn send(ctx: &Ctx, s: SessionId, t: u32) -> bool {
    if Instant::now() >= ctx.deadline || ctx.sent.fetch_add(1, Ordering::Relaxed) >= ctx.cfg.max_requests {
        return false;
    }
    let Ok(_permit) = ctx.in_flight.acquire().await else {
        return false;
    };
    let plan = &ctx.workload.sessions[s.index()];
    let content = ctx.workload.content(s, t as usize);
    let req = request(ctx, s, t, content.output_tokens);
    let idx = {
        let mut book = ctx.book();
        if book.closed {
            return false;
        }
        book.rows.push(Record::sent(
            plan.key.clone(),
            t,
            (content.prompt_tokens, content.output_tokens),
            ctx.sim_s(Instant::now()),
        ));
        book.rows.len() - 1
    };
    let mut rec = Streamed::default();
    let outcome = stream_response(req, ctx, &mut rec, plan.api).await;
    let ok = outcome.is_ok();
    {
        let mut book = ctx.book();
        if book.closed {
            // The run stopped while this one streamed: it stays cut.
            return false;
        }
        book.rows[idx].received(ctx, &mut rec, outcome);
    }
    if ok {
        let mut replies = ctx.replies[s.index()].lock().unwrap_or_else(|e| e.into_inner());
        if replies.len() <= t as usize {
            replies.resize(t as usize + 1, None);
        }
        replies[t as usize] = Some(rec.text);
    }
    ok
}

/// The request for turn `t` of session `s`: its messages rendered as the codec says, with
/// the replies received so far, and the session key headers if the group sends its key.
fn request(ctx: &Ctx, s: SessionId, t: u32, output_tokens: u32) -> reqwest::RequestBuilder {
    let w = &ctx.workload;
    let plan = &w.sessions[s.index()];
    let msgs = text::turn_messages(w, s, t as usize);
    let rendered = {
        let replies = ctx.replies[s.index()].lock().unwrap_or_else(|e| e.into_inner());
        text::render(&msgs, &replies, ctx.cfg.codec)
    };
    let body = text::request_body(plan.api, &ctx.cfg.model, &rendered, output_tokens);
    let mut req = ctx
        .client
        .post(format!("{}{}", ctx.cfg.target, wire::completion_path(plan.api)))
        .timeout(ctx.cfg.request_timeout)
        .json(&body);
    if plan.sends_key {
        for h in wire::SESSION_HEADERS {
            req = req.header(h, plan.key.as_str());
        }
    }
    req
}

impl Record {
    /// A request just sent at simulated `t_send_s`, cut until it ends.
    fn sent(session: String, turn: u32, (prompt_tokens, output_tokens): (u32, u32), t_send_s: f64) -> Record {
        Record {
            session,
            turn,
            prompt_tokens,
            output_tokens,
            backend: String::new(),
            status: 0,
            t_send_s,
            t_first_token_s: None,
            t_last_token_s: None,
            t_done_s: None,
            usage_prompt_tokens: None,
            usage_completion_tokens: None,
            cached_tokens: None,
            chunks: 0,
            outcome: Outcome::Cut,
            error: String::new(),
        }
    }

    /// What the response brought, and how it ended.
    fn received(&mut self, ctx: &Ctx, rec: &mut Streamed, outcome: std::result::Result<(), (Outcome, String)>) {
        self.backend = std::mem::take(&mut rec.backend);
        self.status = rec.status;
        self.t_first_token_s = rec.first.map(|i| ctx.sim_s(i));
        self.t_last_token_s = rec.last.map(|i| ctx.sim_s(i));
        self.usage_prompt_tokens = rec.usage_prompt;
        self.usage_completion_tokens = rec.usage_completion;
        self.cached_tokens = rec.cached;
        self.chunks = rec.chunks;
        match outcome {
            Ok(()) => {
                self.t_done_s = Some(ctx.sim_s(Instant::now()));
                self.outcome = Outcome::Finished;
            }
            Err((o, e)) => {
                self.outcome = o;
                self.error = crate::quote::one_line(&e).into_owned();
            }
        }
    }
}

/// What a streamed response brought so far.
#[derive(Default)]
struct Streamed {
    backend: String,
    status: u16,
    first: Option<Instant>,
    last: Option<Instant>,
    usage_prompt: Option<u64>,
    usage_completion: Option<u64>,
    cached: Option<u64>,
    chunks: u64,
    text: String,
}

impl Streamed {
    /// One streamed chunk: the backend its fingerprint names (if no header did), its text
    /// at `now`, its usage.
    fn chunk(&mut self, v: &serde_json::Value, api: RequestApi, now: Instant) {
        if self.backend.is_empty()
            && let Some(b) = v["system_fingerprint"].as_str().and_then(wire::backend_of_fingerprint)
        {
            self.backend = b.to_string();
        }
        let piece = match api {
            RequestApi::Chat => v["choices"][0]["delta"]["content"].as_str(),
            RequestApi::Completions => v["choices"][0]["text"].as_str(),
        };
        if let Some(p) = piece.filter(|p| !p.is_empty()) {
            self.first.get_or_insert(now);
            self.last = Some(now);
            self.chunks += 1;
            self.text.push_str(p);
        }
        let u = &v["usage"];
        if u.is_object() {
            self.usage_prompt = u["prompt_tokens"].as_u64();
            self.usage_completion = u["completion_tokens"].as_u64();
            self.cached = u["prompt_tokens_details"]["cached_tokens"].as_u64();
        }
    }
}

/// Sends `req` and streams its answer into `rec`; how it failed, if it did. A stream
/// counts as finished only when it ends with `data: [DONE]` (vLLM's and OpenAI's last
/// event); one whose body ends or breaks before it was cut, mid-event or not.
async fn stream_response(
    req: reqwest::RequestBuilder,
    ctx: &Ctx,
    rec: &mut Streamed,
    api: RequestApi,
) -> std::result::Result<(), (Outcome, String)> {
    let failed = |e: reqwest::Error| {
        if e.is_timeout() {
            (
                Outcome::TimedOut,
                format!(
                    "no answer within --request-timeout ({} s)",
                    ctx.cfg.request_timeout.as_secs_f64()
                ),
            )
        } else {
            (Outcome::Failed, root_cause(&e))
        }
    };
    let mut resp = req.send().await.map_err(failed)?;
    rec.status = resp.status().as_u16();
    if let Some(b) = resp.headers().get(wire::BACKEND_HEADER).and_then(|v| v.to_str().ok()) {
        rec.backend = b.to_string();
    }
    if !resp.status().is_success() {
        return Err(http_error(resp).await);
    }
    let kind = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !kind.trim_start().to_ascii_lowercase().starts_with("text/event-stream") {
        return Err((
            Outcome::Failed,
            format!(
                "expected a text/event-stream answer, got Content-Type {:?}",
                crate::quote::one_line(kind)
            ),
        ));
    }
    let mut reader = sse::SseReader::default();
    let mut done = false;
    let cut = |reader: &sse::SseReader, how: String| {
        let at = if reader.mid_event() { " mid-event" } else { "" };
        let how = format!(
            "the stream was cut{at} after {} bytes, before data: [DONE]{how}",
            reader.bytes()
        );
        (Outcome::Cut, how)
    };
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) if e.is_timeout() => return Err(failed(e)),
            Err(e) => return Err(cut(&reader, format!(" ({})", root_cause(&e)))),
        };
        let stop = reader
            .feed(&chunk, |data| {
                if data.trim() == "[DONE]" {
                    return true;
                }
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(data) {
                    rec.chunk(&v, api, Instant::now());
                }
                false
            })
            .map_err(|e| (Outcome::Failed, e.to_string()))?;
        if stop {
            done = true;
            break;
        }
    }
    if !done {
        return Err(cut(&reader, String::new()));
    }
    if rec.first.is_none() {
        return Err((Outcome::Failed, "the stream ended without a token".into()));
    }
    Ok(())
}

/// A non-2xx answer: its status and the first 200 characters of its error message (or
/// body), of at most [`MAX_ERROR_BYTES`] read.
async fn http_error(mut resp: reqwest::Response) -> (Outcome, String) {
    let status = resp.status();
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BYTES {
        match resp.chunk().await {
            Ok(Some(c)) => body.extend_from_slice(&c[..c.len().min(MAX_ERROR_BYTES - body.len())]),
            _ => break,
        }
    }
    let body = String::from_utf8_lossy(&body).into_owned();
    let msg = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v["error"]["message"]
                .as_str()
                .or(v["message"].as_str())
                .map(str::to_string)
        })
        .unwrap_or(body);
    let msg: String = msg.chars().take(200).collect();
    (Outcome::HttpError, format!("HTTP {status}: {msg}"))
}

/// Requests per backend, in order of name.
#[derive(Clone, Debug, Serialize)]
pub struct BackendShare {
    /// Backend name (`""`: not named by the response).
    pub name: String,
    /// Finished requests it served.
    pub requests: u64,
    /// Its share of the finished requests.
    pub share: f64,
}

/// Counts of a load run's requests.
#[derive(Clone, Debug, Serialize)]
pub struct Counts {
    /// Planned by the workload.
    pub planned: u64,
    /// Sent.
    pub sent: u64,
    /// Streamed to the end.
    pub finished: u64,
    /// Answered with a non-2xx status.
    pub http_error: u64,
    /// Broken connection or stream.
    pub failed: u64,
    /// Past `--request-timeout`.
    pub timed_out: u64,
    /// In flight at `--duration`.
    pub cut: u64,
    /// Never sent.
    pub not_sent: u64,
}

/// `summary.json` of a load run.
#[derive(Clone, Debug, Serialize)]
pub struct LoadSummary {
    /// Always `"load"`: `sim compare` tells a load run from a simulated one by it.
    pub kind: &'static str,
    /// Scenario name.
    pub scenario: String,
    /// Master seed of the workload.
    pub seed: u64,
    /// The endpoint driven.
    pub target: String,
    /// Model sent.
    pub model: String,
    /// Simulated seconds per wall second.
    pub speed: f64,
    /// Why the run stopped: `end`, `--duration`, `SIGINT` or `SIGTERM`.
    pub stopped_by: &'static str,
    /// Wall seconds of the run.
    pub wall_s: f64,
    /// Simulated seconds (wall x speed).
    pub sim_time_s: f64,
    /// Request counts.
    pub requests: Counts,
    /// Finished requests per wall second.
    pub throughput_rps_wall: f64,
    /// Time to first token, simulated seconds, finished requests.
    pub ttft_s: Percentiles,
    /// Send to last byte, simulated seconds, finished requests.
    pub e2e_s: Percentiles,
    /// Cached prompt tokens over prompt tokens, where the server reported cached tokens.
    pub prefix_cache_hit_rate: Option<f64>,
    /// Output tokens the server reported, over the planned output tokens (finished requests).
    pub output_tokens_ratio: Option<f64>,
    /// Finished requests per backend.
    pub backends: Vec<BackendShare>,
}

/// Summarises a run.
pub fn summarize(run: &LoadRun, scenario: &str, seed: u64, cfg: &LoadConfig) -> LoadSummary {
    let fin: Vec<&Record> = run.records.iter().filter(|r| r.outcome == Outcome::Finished).collect();
    let count = |o: Outcome| run.records.iter().filter(|r| r.outcome == o).count() as u64;
    let mut by: std::collections::BTreeMap<&str, u64> = Default::default();
    for r in &fin {
        *by.entry(r.backend.as_str()).or_default() += 1;
    }
    let n = fin.len().max(1) as f64;
    let (mut cached, mut prompt, mut reported) = (0u64, 0u64, false);
    let (mut out_rep, mut out_plan, mut out_known) = (0u64, 0u64, false);
    for r in &fin {
        if let Some(c) = r.cached_tokens {
            reported = true;
            cached += c;
            prompt += r.usage_prompt_tokens.unwrap_or(u64::from(r.prompt_tokens));
        }
        if let Some(c) = r.usage_completion_tokens {
            out_known = true;
            out_rep += c;
            out_plan += u64::from(r.output_tokens);
        }
    }
    let wall_s = run.wall.as_secs_f64();
    LoadSummary {
        kind: "load",
        scenario: scenario.to_string(),
        seed,
        target: cfg.target.clone(),
        model: cfg.model.clone(),
        speed: cfg.speed.get(),
        stopped_by: run.stopped_by,
        wall_s: round6(wall_s),
        sim_time_s: round6(cfg.speed.wall_to_sim(run.wall).as_secs_f64()),
        requests: Counts {
            planned: run.planned as u64,
            sent: run.records.len() as u64,
            finished: fin.len() as u64,
            http_error: count(Outcome::HttpError),
            failed: count(Outcome::Failed),
            timed_out: count(Outcome::TimedOut),
            cut: count(Outcome::Cut),
            not_sent: run.not_sent as u64,
        },
        throughput_rps_wall: round6(fin.len() as f64 / wall_s.max(1e-9)),
        ttft_s: percentiles(
            fin.iter()
                .filter_map(|r| Some(r.t_first_token_s? - r.t_send_s))
                .collect(),
        ),
        e2e_s: percentiles(fin.iter().filter_map(|r| Some(r.t_done_s? - r.t_send_s)).collect()),
        prefix_cache_hit_rate: (reported && prompt > 0).then(|| round6(cached as f64 / prompt as f64)),
        output_tokens_ratio: (out_known && out_plan > 0).then(|| round6(out_rep as f64 / out_plan as f64)),
        backends: by
            .into_iter()
            .map(|(name, requests)| BackendShare {
                name: name.to_string(),
                requests,
                share: round6(requests as f64 / n),
            })
            .collect(),
    }
}

/// The columns of a load run's `requests.csv`.
pub const CSV_HEADER: [&str; 18] = [
    "request_id",
    "session",
    "turn",
    "backend",
    "outcome",
    "status",
    "prompt_tokens",
    "output_tokens",
    "usage_prompt_tokens",
    "usage_completion_tokens",
    "cached_tokens",
    "t_send_s",
    "t_first_token_s",
    "t_last_token_s",
    "t_done_s",
    "ttft_s",
    "e2e_s",
    "error",
];

/// Writes `requests.csv` (one row per request sent, in order of sending).
pub fn write_requests_csv(path: &std::path::Path, run: &LoadRun) -> Result<()> {
    let opt = |x: Option<f64>| x.map(|v| round6(v).to_string()).unwrap_or_default();
    let optu = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_default();
    crate::atomic::write_atomic(path, |buf| {
        let mut w = csv::Writer::from_writer(buf);
        w.write_record(CSV_HEADER)?;
        for (i, r) in run.records.iter().enumerate() {
            let ttft = r
                .t_first_token_s
                .filter(|_| r.outcome == Outcome::Finished)
                .map(|f| f - r.t_send_s);
            let e2e = r.t_done_s.map(|d| d - r.t_send_s);
            w.write_record([
                i.to_string(),
                r.session.clone(),
                r.turn.to_string(),
                r.backend.clone(),
                r.outcome.as_str().to_string(),
                r.status.to_string(),
                r.prompt_tokens.to_string(),
                r.output_tokens.to_string(),
                optu(r.usage_prompt_tokens),
                optu(r.usage_completion_tokens),
                optu(r.cached_tokens),
                round6(r.t_send_s).to_string(),
                opt(r.t_first_token_s),
                opt(r.t_last_token_s),
                opt(r.t_done_s),
                opt(ttft),
                opt(e2e),
                r.error.clone(),
            ])?;
        }
        w.flush()?;
        Ok(())
    })
}
