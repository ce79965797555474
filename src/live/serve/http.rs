//! One backend's HTTP server: vLLM's OpenAI-compatible API (completions and chat
//! completions, streamed or not), `/v1/models`, `/health`, `/version`, `/metrics` in
//! vLLM's exposition, and the extra endpoints routers call at start-up. Every response
//! names the backend in the [`wire::BACKEND_HEADER`] header (and every completion body in
//! `system_fingerprint`, which routers pass through).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::fleet::{Cmd, Ev, MetricsState, Reason, Shared, Submit};
use super::request::{self, ApiError, Ask, BODY_UNREADABLE, bad_request, error};
use crate::backend::Gauges;
use crate::content::Content;
use crate::faults::FaultKind;
use crate::fleet::Membership;
use crate::ids::RequestId;
use crate::live::client::root_cause;
use crate::live::wire::{self, BACKEND_HEADER};
use crate::time::SimTime;
use crate::vllm_metrics as vm;

/// The prefix under which a `zero_stats` backend exports its metrics (another engine's, as
/// an SGLang backend behind production-stack: the router parses nothing and reads zeros).
pub const WRONG_PREFIX: &str = "sglang:";

/// A body longer than this is parsed, and a prompt this long tokenised, on a blocking
/// thread rather than on an async worker.
const OFF_THREAD_BYTES: usize = 256 << 10;
/// A request of more tokens than this (prompt and output) is cut into blocks on a blocking
/// thread.
const OFF_THREAD_TOKENS: u64 = 32 << 10;

#[derive(Clone)]
struct App {
    shared: Arc<Shared>,
    b: usize,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

/// The backend's axum router.
pub fn router(shared: Arc<Shared>, b: usize, shutdown: tokio::sync::watch::Receiver<bool>) -> Router {
    let name = HeaderValue::from_str(&shared.backends[b].name).expect("backend names are ASCII");
    let app = App { shared, b, shutdown };
    Router::new()
        .route(wire::COMPLETIONS_PATH, post(completions))
        .route(wire::CHAT_COMPLETIONS_PATH, post(chat_completions))
        .route(wire::MODELS_PATH, get(models))
        .route("/health", get(health))
        .route("/ping", get(health).post(health))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .route("/tokenize", post(tokenize))
        .route("/v1/completions/render", post(render_prompt))
        .route("/v1/chat/completions/render", post(render_prompt))
        .route("/get_model_info", get(get_model_info))
        .route("/model_info", get(get_model_info))
        .route("/get_server_info", get(get_server_info))
        .route("/server_info", get(get_server_info))
        .route("/get_load", get(get_load))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::map_response(move |mut r: Response| {
            let name = name.clone();
            async move {
                r.headers_mut().insert(BACKEND_HEADER, name);
                r
            }
        }))
        .with_state(app)
}

/// 503, the backend out of service (draining, restarting, or the server stopping).
fn unavailable(message: &str) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailableError",
        message,
        None,
    )
    .into_response()
}

/// 500, the backend failing (a restart, a scenario fault).
fn internal(message: &str) -> Response {
    error(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", message, None).into_response()
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, axum::Json(json!({"detail": "Not Found"}))).into_response()
}

/// A known path with another method: 405, as FastAPI answers it.
async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(json!({"detail": "Method Not Allowed"})),
    )
        .into_response()
}

async fn health(State(a): State<App>) -> Response {
    match *a.shared.backends[a.b].membership.borrow() {
        Membership::Active => StatusCode::OK.into_response(),
        _ => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn version() -> Response {
    axum::Json(json!({ "version": format!("fleetsim-{}", env!("CARGO_PKG_VERSION")) })).into_response()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn models(State(a): State<App>) -> Response {
    let m = &a.shared.model;
    let max = a.shared.backends[a.b].max_model_len;
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": m,
            "object": "model",
            "created": unix_now(),
            "owned_by": "vllm",
            "root": m,
            "parent": null,
            "max_model_len": max,
            "permission": [],
        }]
    }))
    .into_response()
}

async fn get_model_info(State(a): State<App>) -> Response {
    let m = &a.shared.model;
    axum::Json(json!({ "model_path": m, "tokenizer_path": m, "is_generation": true })).into_response()
}

async fn get_server_info(State(a): State<App>) -> Response {
    let be = &a.shared.backends[a.b];
    axum::Json(json!({
        "model_path": a.shared.model,
        "served_model_name": a.shared.model,
        "max_num_seqs": be.cfg.max_num_seqs,
        "max_num_batched_tokens": be.cfg.max_num_batched_tokens,
        "max_model_len": be.max_model_len,
        "block_size": be.cfg.block_size_tokens,
        "num_gpu_blocks": be.cfg.kv_blocks,
        "enable_prefix_caching": be.cfg.prefix_caching,
        "backend": be.name,
    }))
    .into_response()
}

/// The request body, read within `--body-timeout` and up to `--max-body-bytes`: 413 past
/// the limit (at once when `Content-Length` says so), 408 past the time-out, 400 when the
/// body is malformed (a bad chunk size), naming the problem; each closing the connection,
/// whose body was not read to its end.
async fn read_body(a: &App, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let limit = a.shared.limits.max_body_bytes;
    let too_large = |n: Option<u64>| {
        let got = n.map_or(String::new(), |n| format!(" ({n} bytes)"));
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BadRequestError",
            format!("request body larger than {limit} bytes{got} (sim serve --max-body-bytes)"),
            None,
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(declared));
    }
    let timeout = a.shared.limits.body_timeout;
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => {
            let e = e.into_inner();
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                Err(too_large(None))
            } else {
                Err(bad_request(format!("{BODY_UNREADABLE}: {}", root_cause(&*e)), None))
            }
        }
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            "BadRequestError",
            format!(
                "the request body did not arrive within {} s (sim serve --body-timeout)",
                timeout.as_secs_f64()
            ),
            None,
        )),
    }
}

/// A body as a JSON object (serde_json refuses nesting deeper than 128).
fn json_object(bytes: &[u8]) -> Result<request::Body, ApiError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(bad_request("the request body must be a JSON object", None)),
        Err(e) => Err(bad_request(format!("JSON decode error: {e}"), None)),
    }
}

/// Reads the body and parses it as a JSON object.
async fn json_body(a: &App, headers: &HeaderMap, body: Body) -> Result<request::Body, ApiError> {
    let bytes = read_body(a, headers, body).await?;
    if bytes.len() > OFF_THREAD_BYTES {
        tokio::task::spawn_blocking(move || json_object(&bytes))
            .await
            .unwrap_or_else(|_| Err(bad_request("the request could not be parsed", None)))
    } else {
        json_object(&bytes)
    }
}

/// SGLang's `/get_load` (vllm-router's `power_of_two` polls it): `load` is the requests
/// the engine holds, running and waiting, as of the latest step.
async fn get_load(State(a): State<App>) -> Response {
    let be = &a.shared.backends[a.b];
    let g = be.metrics.lock().unwrap_or_else(|e| e.into_inner()).gauges;
    axum::Json(json!({
        "load": g.running + g.waiting,
        "num_reqs": g.running + g.waiting,
        "num_waiting_reqs": g.waiting,
        "num_tokens": u64::from(g.kv_used_blocks) * u64::from(be.cfg.block_size_tokens),
    }))
    .into_response()
}

/// The prompt text of a render or tokenize request (`prompt`, or `messages` rendered as a
/// chat), or the error response.
async fn prompt_text(a: &App, headers: &HeaderMap, body: Body) -> Result<String, Response> {
    let req = json_body(a, headers, body).await.map_err(|e| e.into_response())?;
    match (req.get("prompt"), req.get("messages")) {
        (Some(Value::String(p)), _) => Ok(p.clone()),
        (_, Some(Value::Array(ms))) => request::render_chat(ms).map_err(|e| e.into_response()),
        _ => Err(bad_request("`prompt` (a string) or `messages` is required", Some("prompt")).into_response()),
    }
}

/// The token ids of a render or tokenize request's prompt (off the async workers when the
/// prompt is long), or the error response.
async fn prompt_ids(a: &App, headers: &HeaderMap, body: Body) -> Result<Vec<u32>, Response> {
    let text = prompt_text(a, headers, body).await?;
    let tok = a.shared.tokenizer;
    if text.len() > OFF_THREAD_BYTES {
        tokio::task::spawn_blocking(move || tok.token_ids(&text))
            .await
            .map_err(|_| internal("tokenising failed"))
    } else {
        Ok(tok.token_ids(&text))
    }
}

/// vLLM's render endpoints (vllm-router's `cache_aware` calls them on every worker): the
/// prompt's token ids, as the request would be tokenised.
async fn render_prompt(State(a): State<App>, headers: HeaderMap, body: Body) -> Response {
    match prompt_ids(&a, &headers, body).await {
        Ok(ids) => axum::Json(json!({ "token_ids": ids })).into_response(),
        Err(e) => e,
    }
}

async fn tokenize(State(a): State<App>, headers: HeaderMap, body: Body) -> Response {
    let tokens = match prompt_ids(&a, &headers, body).await {
        Ok(t) => t,
        Err(e) => return e,
    };
    axum::Json(json!({
        "count": tokens.len(),
        "max_model_len": a.shared.backends[a.b].max_model_len,
        "tokens": tokens,
    }))
    .into_response()
}

async fn completions(State(a): State<App>, headers: HeaderMap, body: Body) -> Response {
    complete(a, false, headers, body).await
}

async fn chat_completions(State(a): State<App>, headers: HeaderMap, body: Body) -> Response {
    complete(a, true, headers, body).await
}

/// Aborts the request in the engine if the handler or its stream is dropped before the
/// last token (a client that went away).
struct Guard {
    shared: Arc<Shared>,
    b: usize,
    id: RequestId,
    done: bool,
    lateness_us: Vec<u32>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.shared.cmd.send(Cmd::Abort {
                backend: self.b,
                id: self.id,
            });
        }
        if !self.lateness_us.is_empty() {
            let mut l = self.shared.lateness_us.lock().unwrap_or_else(|e| e.into_inner());
            // Bounded: a long-running server keeps the first few million.
            if l.len() < 4_000_000 {
                l.extend_from_slice(&self.lateness_us);
            }
        }
    }
}

impl Guard {
    fn note(&mut self, at: SimTime) {
        let late = Instant::now().saturating_duration_since(self.shared.clock.wall_of(at));
        self.lateness_us.push(late.as_micros().min(u128::from(u32::MAX)) as u32);
    }
}

/// A request checked and ready for the engine: what it asks, its id, its tokens and
/// blocks.
struct Prepared {
    ask: Ask,
    id: RequestId,
    content: Content,
    kv_tokens: Vec<u32>,
}

/// Parses and checks a completion request (work in proportion to the body, at most
/// `--max-body-bytes`) and gives it an id.
fn check(
    shared: &Shared,
    b: usize,
    chat: bool,
    bytes: &[u8],
    headers: &HeaderMap,
) -> Result<(Ask, RequestId), ApiError> {
    let req = json_object(bytes)?;
    let tok = shared.tokenizer;
    let max_len = shared.backends[b].max_model_len;
    let ask = request::parse(&req, chat, &shared.model, max_len, |p| tok.count(p), headers)?;
    let id = shared.request_id().ok_or_else(|| {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            format!(
                "request ids exhausted ({} requests served): restart sim serve",
                u32::MAX
            ),
            None,
        )
    })?;
    Ok((ask, id))
}

/// Runs `f` on a blocking thread when `big`, so that no request holds an async worker (and
/// with it `/health`) for long.
async fn maybe_off_thread<T: Send + 'static>(big: bool, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    if big {
        tokio::task::spawn_blocking(f).await.ok()
    } else {
        Some(f())
    }
}

/// [`check`], then the request's tokens cut into blocks (work in proportion to the tokens
/// asked for, at most `max_model_len`), each off the async workers when large.
async fn prepare(a: &App, chat: bool, bytes: Bytes, headers: HeaderMap) -> Result<Prepared, ApiError> {
    let (shared, b) = (a.shared.clone(), a.b);
    let failed = || bad_request("the request could not be prepared", None);
    let (mut ask, id) = maybe_off_thread(bytes.len() > OFF_THREAD_BYTES, move || {
        check(&shared, b, chat, &bytes, &headers)
    })
    .await
    .ok_or_else(failed)??;
    let prompt = std::mem::take(&mut ask.prompt);
    let (tok, output_tokens) = (a.shared.tokenizer, ask.output_tokens);
    let tokens = u64::from(ask.prompt_tokens) + u64::from(output_tokens);
    let kv = a.shared.kv_events;
    let (content, kv_tokens) = maybe_off_thread(tokens > OFF_THREAD_TOKENS, move || {
        let ids = if kv {
            tok.block_token_ids(&prompt, output_tokens)
        } else {
            Vec::new()
        };
        (tok.content(&prompt, output_tokens, id), ids)
    })
    .await
    .ok_or_else(failed)?;
    Ok(Prepared {
        ask,
        id,
        content,
        kv_tokens,
    })
}

async fn complete(a: App, chat: bool, headers: HeaderMap, body: Body) -> Response {
    let arrival = a.shared.clock.sim_now();
    let bytes = match read_body(&a, &headers, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let Prepared {
        ask,
        id,
        content,
        kv_tokens,
    } = match prepare(&a, chat, bytes, headers).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if *a.shared.backends[a.b].membership.borrow() != Membership::Active {
        return unavailable("the backend is draining or restarting");
    }
    let (tx, rx) = unbounded_channel();
    let submit = Submit {
        backend: a.b,
        id,
        content,
        arrival,
        session: ask.session.clone(),
        reason: ask.reason,
        tx,
        kv_tokens,
    };
    if a.shared.cmd.send(Cmd::Submit(Box::new(submit))).is_err() {
        return unavailable("the server is shutting down");
    }
    let guard = Guard {
        shared: a.shared.clone(),
        b: a.b,
        id,
        done: false,
        lateness_us: Vec::new(),
    };
    let meta = Meta {
        id: format!("{}-{:016x}", if chat { "chatcmpl" } else { "cmpl" }, id.0),
        created: unix_now(),
        model: a.shared.model.clone(),
        fingerprint: wire::fingerprint(&a.shared.backends[a.b].name),
        chat: ask.chat,
        prompt_tokens: ask.prompt_tokens,
        output_tokens: ask.output_tokens,
        reason: ask.reason,
        include_usage: ask.include_usage,
    };
    if ask.stream {
        stream_response(a, meta, rx, guard)
    } else {
        whole_response(a, meta, rx, guard).await
    }
}

/// What every response body of one request repeats.
struct Meta {
    id: String,
    created: u64,
    model: String,
    fingerprint: String,
    chat: bool,
    prompt_tokens: u32,
    output_tokens: u32,
    reason: Reason,
    include_usage: bool,
}

impl Meta {
    fn usage(&self, completion: u32) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": u64::from(self.prompt_tokens) + u64::from(completion),
            "completion_tokens": completion,
            "prompt_tokens_details": null,
        })
    }
}

async fn whole_response(a: App, meta: Meta, mut rx: UnboundedReceiver<Ev>, mut guard: Guard) -> Response {
    let tok = a.shared.tokenizer;
    // Grown as tokens come (a reply is at most max_model_len tokens), not reserved up front.
    let want = u64::from(meta.output_tokens) * u64::from(tok.codec.chars_per_token());
    let mut text = String::with_capacity(want.min(1 << 20) as usize);
    let mut k = 0u32;
    loop {
        match rx.recv().await {
            Some(Ev::Token { .. }) => {
                tok.filler(k, &mut text);
                k += 1;
            }
            Some(Ev::Done { .. }) => break,
            Some(Ev::Failed) | None => {
                guard.done = true;
                return internal("the backend restarted while it held the request");
            }
        }
    }
    guard.done = true;
    let body = if meta.chat {
        json!({
            "id": meta.id,
            "object": "chat.completion",
            "created": meta.created,
            "model": meta.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": null,
                "finish_reason": meta.reason.as_str(),
                "stop_reason": null,
            }],
            "usage": meta.usage(k),
            "prompt_logprobs": null,
            "system_fingerprint": meta.fingerprint,
        })
    } else {
        json!({
            "id": meta.id,
            "object": "text_completion",
            "created": meta.created,
            "model": meta.model,
            "choices": [{
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": meta.reason.as_str(),
                "stop_reason": null,
                "prompt_logprobs": null,
            }],
            "usage": meta.usage(k),
            "system_fingerprint": meta.fingerprint,
        })
    };
    axum::Json(body).into_response()
}

/// One SSE event: `data: <json>\n\n`.
fn sse(v: &Value) -> Bytes {
    let mut out = b"data: ".to_vec();
    serde_json::to_writer(&mut out, v).expect("a JSON value serialises");
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

struct StreamState {
    a: App,
    meta: Meta,
    rx: UnboundedReceiver<Ev>,
    guard: Guard,
    k: u32,
    started: bool,
    finished: bool,
    word: String,
    /// A middle token's event around its text: the bytes before and after it, rendered
    /// once per request (`chunk` for the token `"@"`, split at it), so a token costs a
    /// copy instead of building and serialising a JSON value.
    template: (Vec<u8>, Vec<u8>),
}

/// [`StreamState::template`]: filler text needs no JSON escaping (letters and spaces).
fn template(m: &Meta) -> (Vec<u8>, Vec<u8>) {
    const MARK: &str = "\u{E000}fleetsim-token\u{E000}";
    let whole = sse(&chunk(m, Some(MARK), false, None));
    let at = whole
        .windows(MARK.len())
        .rposition(|w| w == MARK.as_bytes())
        .expect("the marker is written unescaped");
    (whole[..at].to_vec(), whole[at + MARK.len()..].to_vec())
}

fn chunk(m: &Meta, content: Option<&str>, role: bool, finish: Option<&str>) -> Value {
    if m.chat {
        let mut delta = serde_json::Map::new();
        if role {
            delta.insert("role".into(), json!("assistant"));
        }
        if let Some(c) = content {
            delta.insert("content".into(), json!(c));
        }
        json!({
            "id": m.id,
            "object": "chat.completion.chunk",
            "created": m.created,
            "model": m.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish, "stop_reason": null}],
            "system_fingerprint": m.fingerprint,
        })
    } else {
        json!({
            "id": m.id,
            "object": "text_completion",
            "created": m.created,
            "model": m.model,
            "choices": [{"index": 0, "text": content.unwrap_or(""), "logprobs": null, "finish_reason": finish, "stop_reason": null}],
            "system_fingerprint": m.fingerprint,
        })
    }
}

fn stream_response(a: App, meta: Meta, rx: UnboundedReceiver<Ev>, guard: Guard) -> Response {
    let st = StreamState {
        a,
        template: template(&meta),
        meta,
        rx,
        guard,
        k: 0,
        started: false,
        finished: false,
        word: String::new(),
    };
    let s = futures_util::stream::unfold(st, |mut st| async move {
        if st.finished {
            return None;
        }
        if st.meta.chat && !st.started {
            st.started = true;
            let c = sse(&chunk(&st.meta, Some(""), true, None));
            return Some((Ok::<Bytes, std::io::Error>(c), st));
        }
        st.started = true;
        match st.rx.recv().await {
            Some(Ev::Token { at }) => {
                st.guard.note(at);
                st.word.clear();
                st.a.shared.tokenizer.filler(st.k, &mut st.word);
                st.k += 1;
                let last = st.k == st.meta.output_tokens;
                let finish = last.then(|| st.meta.reason.as_str());
                let mut out = if last {
                    sse(&chunk(&st.meta, Some(&st.word), false, finish)).to_vec()
                } else {
                    let (head, tail) = &st.template;
                    let mut o = Vec::with_capacity(head.len() + st.word.len() + tail.len());
                    o.extend_from_slice(head);
                    o.extend_from_slice(st.word.as_bytes());
                    o.extend_from_slice(tail);
                    o
                };
                if last {
                    // The engine's finish follows in the same step: close the stream now.
                    if st.meta.include_usage {
                        let mut u = chunk(&st.meta, None, false, None);
                        u["choices"] = json!([]);
                        u["usage"] = st.meta.usage(st.k);
                        out.extend_from_slice(&sse(&u));
                    }
                    out.extend_from_slice(b"data: [DONE]\n\n");
                    st.guard.done = true;
                    st.finished = true;
                }
                Some((Ok(Bytes::from(out)), st))
            }
            Some(Ev::Done { .. }) => {
                // The stream closes at the last token; a finish seen here ends it too.
                st.guard.done = true;
                drop(st);
                None
            }
            Some(Ev::Failed) | None => {
                // Killed: the connection breaks mid-stream, as with a dead process.
                st.guard.done = true;
                st.finished = true;
                Some((Err(std::io::Error::other("backend killed")), st))
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(s))
        .expect("a valid response")
}

/// `/metrics` under the scenario's signal faults at this instant (first active one in
/// file order, as `sim run` applies them).
async fn metrics(State(a): State<App>) -> Response {
    let sh = &a.shared;
    let now = sh.clock.sim_now();
    let mine: Vec<(usize, &crate::faults::Fault)> = sh
        .faults
        .iter()
        .enumerate()
        .filter(|(_, f)| f.covers(crate::ids::BackendId::from_index(a.b), now))
        .collect();
    let lag = mine
        .iter()
        .find_map(|(_, f)| match f.kind {
            FaultKind::ExtraLag(l) => Some(l),
            _ => None,
        })
        .unwrap_or_default();
    let mut prefix = "vllm:";
    let mut frozen_at = None;
    for &(i, f) in &mine {
        match f.kind {
            FaultKind::ScrapeFail => {
                return internal("metrics unavailable (scenario fault scrape_fail)");
            }
            FaultKind::ScrapeHang => {
                // Accept and never answer within the window; answer once it has passed
                // (or the server stops).
                let until = sh.clock.wall_of(f.until);
                let wait = until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_secs(3600));
                let mut sd = a.shutdown.clone();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = async { let _ = sd.wait_for(|s| *s).await; } => {}
                }
                return internal("metrics unavailable (scenario fault scrape_hang)");
            }
            FaultKind::ZeroStats => {
                prefix = WRONG_PREFIX;
                break;
            }
            FaultKind::FrozenStats => {
                frozen_at = Some(i);
                break;
            }
            FaultKind::ExtraLag(_) | FaultKind::Slowdown(_) => {}
        }
    }
    let be = &sh.backends[a.b];
    let text = {
        let mut m = be.metrics.lock().unwrap_or_else(|e| e.into_inner());
        let live = if lag.0 > 0 {
            m.gauges_at(SimTime(now.0.saturating_sub(lag.0)))
        } else {
            m.gauges
        };
        let g = match frozen_at {
            Some(i) => *m.frozen.entry(i).or_insert(live),
            None => live,
        };
        render(&m, g, &sh.model, &be.cfg, prefix)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")
        .body(Body::from(text))
        .expect("a valid response")
}

/// The exposition text: vLLM's families in the order `PrometheusStatLogger` registers
/// them, with `model_name` and `engine` labels, written as `prometheus_client` writes them
/// (`_created` samples left out).
pub fn render(
    m: &MetricsState,
    g: Gauges,
    model: &str,
    cfg: &crate::backend::vllm::VllmConfig,
    prefix: &str,
) -> String {
    let mut out = String::with_capacity(8192);
    let labels: [(&str, &str); 2] = [(vm::LABEL_MODEL_NAME, model), (vm::LABEL_ENGINE, "0")];
    // The family name under `prefix`, its header written; returns the name.
    let family = |out: &mut String, metric: &vm::Metric| -> String {
        let name = format!("{prefix}{}", metric.name.trim_start_matches("vllm:"));
        vm::write_header(out, &name, metric);
        name
    };
    let scalar = |out: &mut String, metric: &vm::Metric, v: f64| {
        let name = family(out, metric);
        let sample = match metric.kind {
            vm::Kind::Counter => format!("{name}_total"),
            _ => name,
        };
        vm::write_sample(out, &sample, &labels, v);
    };
    let usage = g.kv_usage();
    let c = m.counters;
    scalar(&mut out, &vm::NUM_REQUESTS_RUNNING, f64::from(g.running));
    scalar(&mut out, &vm::NUM_REQUESTS_WAITING, f64::from(g.waiting));
    scalar(&mut out, &vm::GPU_CACHE_USAGE_PERC, usage);
    scalar(&mut out, &vm::GPU_PREFIX_CACHE_QUERIES, c.cache.query_tokens as f64);
    scalar(&mut out, &vm::GPU_PREFIX_CACHE_HITS, c.cache.hit_tokens as f64);
    scalar(&mut out, &vm::KV_CACHE_USAGE_PERC, usage);
    scalar(&mut out, &vm::PREFIX_CACHE_QUERIES, c.cache.query_tokens as f64);
    scalar(&mut out, &vm::PREFIX_CACHE_HITS, c.cache.hit_tokens as f64);
    scalar(&mut out, &vm::NUM_PREEMPTIONS, c.preemptions as f64);
    scalar(&mut out, &vm::PROMPT_TOKENS, m.prompt_tokens as f64);
    scalar(&mut out, &vm::GENERATION_TOKENS, m.generation_tokens as f64);
    let name = family(&mut out, &vm::REQUEST_SUCCESS);
    let sample = format!("{name}_total");
    for (i, reason) in vm::FINISH_REASONS.iter().enumerate() {
        let l = [labels[0], labels[1], (vm::LABEL_FINISHED_REASON, *reason)];
        vm::write_sample(&mut out, &sample, &l, m.success[i] as f64);
    }
    for (metric, h) in [
        (&vm::TIME_TO_FIRST_TOKEN, &m.ttft),
        (&vm::TIME_PER_OUTPUT_TOKEN, &m.tpot),
        (&vm::E2E_REQUEST_LATENCY, &m.e2e),
        (&vm::REQUEST_QUEUE_TIME, &m.queue),
    ] {
        let name = family(&mut out, metric);
        let bucket = format!("{name}_bucket");
        let mut cum = 0u64;
        for (i, &le) in h.bounds.iter().chain([f64::INFINITY].iter()).enumerate() {
            cum += h.counts[i];
            let le = vm::go_float(le);
            vm::write_sample(&mut out, &bucket, &[labels[0], labels[1], ("le", &le)], cum as f64);
        }
        vm::write_sample(&mut out, &format!("{name}_count"), &labels, cum as f64);
        vm::write_sample(&mut out, &format!("{name}_sum"), &labels, h.sum);
    }
    let name = family(&mut out, &vm::CACHE_CONFIG_INFO);
    let (bs, pc, nb) = (
        cfg.block_size_tokens.to_string(),
        if cfg.prefix_caching { "True" } else { "False" },
        cfg.kv_blocks.to_string(),
    );
    vm::write_sample(
        &mut out,
        &name,
        &[
            ("block_size", &bs),
            ("enable_prefix_caching", pc),
            ("num_gpu_blocks", &nb),
            (vm::LABEL_ENGINE, "0"),
        ],
        1.0,
    );
    out
}
