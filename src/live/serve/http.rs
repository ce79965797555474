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
use super::text::natural_length;
use crate::backend::Gauges;
use crate::faults::FaultKind;
use crate::fleet::Membership;
use crate::ids::RequestId;
use crate::live::wire::{self, BACKEND_HEADER};
use crate::time::SimTime;
use crate::vllm_metrics as vm;

/// The prefix under which a `zero_stats` backend exports its metrics (another engine's, as
/// an SGLang backend behind production-stack: the router parses nothing and reads zeros).
pub const WRONG_PREFIX: &str = "sglang:";

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

/// An OpenAI-style error, as vLLM's `ErrorResponse` serialises it.
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status.as_u16(),
            }
        });
        (self.status, axum::Json(body)).into_response()
    }
}

fn error(status: StatusCode, kind: &'static str, message: impl Into<String>, param: Option<&str>) -> ApiError {
    ApiError {
        status,
        kind,
        message: message.into(),
        param: param.map(str::to_string),
    }
}

fn bad_request(message: impl Into<String>, param: Option<&str>) -> ApiError {
    error(StatusCode::BAD_REQUEST, "BadRequestError", message, param)
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

/// Reads the body up to the size limit and parses it as a JSON object.
async fn json_body(a: &App, body: Body) -> Result<serde_json::Map<String, Value>, ApiError> {
    let limit = a.shared.max_body_bytes;
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "BadRequestError",
                format!("request body larger than {limit} bytes (sim serve --max-body-bytes)"),
                None,
            ));
        }
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(bad_request("the request body must be a JSON object", None)),
        Err(e) => Err(bad_request(format!("JSON decode error: {e}"), None)),
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
async fn prompt_text(a: &App, body: Body) -> Result<String, Response> {
    let req = json_body(a, body).await.map_err(|e| e.into_response())?;
    match (req.get("prompt"), req.get("messages")) {
        (Some(Value::String(p)), _) => Ok(p.clone()),
        (_, Some(Value::Array(ms))) => render_chat(ms).map_err(|e| e.into_response()),
        _ => Err(bad_request("`prompt` (a string) or `messages` is required", Some("prompt")).into_response()),
    }
}

/// vLLM's render endpoints (vllm-router's `cache_aware` calls them on every worker): the
/// prompt's token ids, as the request would be tokenised.
async fn render_prompt(State(a): State<App>, body: Body) -> Response {
    let text = match prompt_text(&a, body).await {
        Ok(t) => t,
        Err(e) => return e,
    };
    axum::Json(json!({ "token_ids": a.shared.tokenizer.token_ids(&text) })).into_response()
}

async fn tokenize(State(a): State<App>, body: Body) -> Response {
    let text = match prompt_text(&a, body).await {
        Ok(t) => t,
        Err(e) => return e,
    };
    let tokens = a.shared.tokenizer.token_ids(&text);
    axum::Json(json!({
        "count": tokens.len(),
        "max_model_len": a.shared.backends[a.b].max_model_len,
        "tokens": tokens,
    }))
    .into_response()
}

/// A chat request's prompt text: `role\ncontent\n` per message, then `assistant\n`, so
/// that one turn's prompt and reply are a prefix of the next turn's prompt.
fn render_chat(messages: &[Value]) -> Result<String, ApiError> {
    let mut s = String::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
            bad_request(
                format!("messages[{i}]: `role` (a string) is required"),
                Some("messages"),
            )
        })?;
        s.push_str(role);
        s.push('\n');
        match m.get("content") {
            Some(Value::String(c)) => s.push_str(c),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        s.push_str(t);
                    }
                }
            }
            None | Some(Value::Null) => {}
            Some(_) => {
                return Err(bad_request(
                    format!("messages[{i}].content: expected a string or a list of parts"),
                    Some("messages"),
                ));
            }
        }
        s.push('\n');
    }
    s.push_str("assistant\n");
    Ok(s)
}

fn uint(req: &serde_json::Map<String, Value>, key: &str) -> Result<Option<u64>, ApiError> {
    match req.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad_request(format!("`{key}` must be a non-negative integer"), Some(key))),
    }
}

fn flag(req: &serde_json::Map<String, Value>, key: &str) -> Result<bool, ApiError> {
    match req.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad_request(format!("`{key}` must be a boolean"), Some(key))),
    }
}

/// What a completion request asks for, validated.
struct Ask {
    chat: bool,
    prompt: String,
    prompt_tokens: u32,
    output_tokens: u32,
    reason: Reason,
    stream: bool,
    include_usage: bool,
    session: Option<String>,
}

fn parse(a: &App, chat: bool, req: &serde_json::Map<String, Value>, headers: &HeaderMap) -> Result<Ask, ApiError> {
    check_model(&a.shared.model, req)?;
    let prompt = if chat {
        chat_prompt(req)?
    } else {
        completion_prompt(req)?
    };
    if let Some(n) = uint(req, "n")?
        && n != 1
    {
        return Err(bad_request(
            "sim serve generates one choice per request (n = 1)",
            Some("n"),
        ));
    }
    let prompt_tokens = a.shared.tokenizer.count(&prompt);
    if prompt_tokens == 0 {
        return Err(bad_request("the prompt is empty", Some("prompt")));
    }
    let max_len = a.shared.backends[a.b].max_model_len;
    let max_tokens = max_tokens(req, chat, prompt_tokens, max_len)?;
    let (output_tokens, reason) = output_length(req, &prompt, max_tokens)?;
    let stream = flag(req, "stream")?;
    let include_usage = stream
        && req
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let session = wire::SESSION_HEADERS
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(str::to_string);
    Ok(Ask {
        chat,
        prompt,
        prompt_tokens,
        output_tokens,
        reason,
        stream,
        include_usage,
        session,
    })
}

/// `model`, if given, must be the served one.
fn check_model(model: &str, req: &serde_json::Map<String, Value>) -> Result<(), ApiError> {
    match req.get("model") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(m)) if m == model => Ok(()),
        Some(Value::String(m)) => Err(error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!("The model `{m}` does not exist."),
            Some("model"),
        )),
        Some(_) => Err(bad_request("`model` must be a string", Some("model"))),
    }
}

/// A chat request's prompt text ([`render_chat`] of its `messages`).
fn chat_prompt(req: &serde_json::Map<String, Value>) -> Result<String, ApiError> {
    match req.get("messages") {
        Some(Value::Array(ms)) if !ms.is_empty() => render_chat(ms),
        _ => Err(bad_request(
            "`messages` (a non-empty list) is required",
            Some("messages"),
        )),
    }
}

/// A completions request's one prompt.
fn completion_prompt(req: &serde_json::Map<String, Value>) -> Result<String, ApiError> {
    match req.get("prompt") {
        Some(Value::String(p)) => Ok(p.clone()),
        Some(Value::Array(ps)) if ps.len() == 1 && ps[0].is_string() => {
            Ok(ps[0].as_str().unwrap_or_default().to_string())
        }
        Some(_) => Err(bad_request(
            "sim serve takes one text prompt per request (a string, or a list of one string)",
            Some("prompt"),
        )),
        None => Err(bad_request("`prompt` is required", Some("prompt"))),
    }
}

/// The most tokens the request may generate: `max_completion_tokens`, else `max_tokens`,
/// else vLLM's default (16 for completions, OpenAI's; what the context leaves for chat),
/// refused past the context as vLLM refuses it.
fn max_tokens(
    req: &serde_json::Map<String, Value>,
    chat: bool,
    prompt_tokens: u32,
    max_len: u32,
) -> Result<u32, ApiError> {
    let asked = match (uint(req, "max_completion_tokens")?, uint(req, "max_tokens")?) {
        (Some(x), _) | (None, Some(x)) => Some(x),
        (None, None) => None,
    };
    let max_tokens = match asked {
        Some(x) => x,
        None if chat => u64::from(max_len.saturating_sub(prompt_tokens)),
        None => 16,
    };
    if max_tokens == 0 {
        return Err(bad_request("max_tokens must be at least 1, got 0.", Some("max_tokens")));
    }
    if u64::from(prompt_tokens) + max_tokens > u64::from(max_len) {
        return Err(bad_request(
            format!(
                "This model's maximum context length is {max_len} tokens. However, you requested {} tokens \
                 ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length of the \
                 messages or completion.",
                u64::from(prompt_tokens) + max_tokens
            ),
            Some("max_tokens"),
        ));
    }
    Ok(max_tokens as u32)
}

/// How many tokens the request generates, and why it stops: `max_tokens` under
/// `ignore_eos`, else the prompt's natural length within `[max(min_tokens, 1), max_tokens]`.
fn output_length(
    req: &serde_json::Map<String, Value>,
    prompt: &str,
    max_tokens: u32,
) -> Result<(u32, Reason), ApiError> {
    let min_tokens = uint(req, "min_tokens")?.unwrap_or(0);
    if min_tokens > u64::from(max_tokens) {
        return Err(bad_request(
            format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."),
            Some("min_tokens"),
        ));
    }
    let output_tokens = if flag(req, "ignore_eos")? {
        max_tokens
    } else {
        natural_length(prompt).clamp((min_tokens as u32).max(1), max_tokens)
    };
    let reason = if output_tokens == max_tokens {
        Reason::Length
    } else {
        Reason::Stop
    };
    Ok((output_tokens, reason))
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

async fn complete(a: App, chat: bool, headers: HeaderMap, body: Body) -> Response {
    let arrival = a.shared.clock.sim_now();
    let req = match json_body(&a, body).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let ask = match parse(&a, chat, &req, &headers) {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    if *a.shared.backends[a.b].membership.borrow() != Membership::Active {
        return unavailable("the backend is draining or restarting");
    }
    let id = a.shared.request_id();
    let content = a.shared.tokenizer.content(&ask.prompt, ask.output_tokens, id);
    let (tx, rx) = unbounded_channel();
    let submit = Submit {
        backend: a.b,
        id,
        content,
        arrival,
        session: ask.session.clone(),
        reason: ask.reason,
        tx,
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
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": null,
        })
    }
}

async fn whole_response(a: App, meta: Meta, mut rx: UnboundedReceiver<Ev>, mut guard: Guard) -> Response {
    let tok = a.shared.tokenizer;
    let mut text = String::with_capacity(meta.output_tokens as usize * tok.codec.chars_per_token() as usize);
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
