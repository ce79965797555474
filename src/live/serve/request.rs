//! A completion request's fields, checked as vLLM's OpenAI-compatible server checks them,
//! before anything is allocated in proportion to what they ask for.
//!
//! The rules follow vllm-project/vllm at tag v0.12.0: the field types of
//! `vllm/entrypoints/openai/protocol.py` (`CompletionRequest`, `ChatCompletionRequest`;
//! pydantic reads them in lax mode, so an integer may also come as a float without a
//! fraction or as a string of digits, a number as a string of one), its validators (the
//! `seed` range, `check_logprobs`, `validate_stream_options`), the bounds of
//! `SamplingParams._verify_args` in `vllm/sampling_params.py`, and the context check of
//! `OpenAIServing._validate_input` in `vllm/entrypoints/openai/serving_engine.py`: the
//! prompt plus `max_tokens` may not exceed `max_model_len`. A refusal is vLLM's message,
//! answered 400 with the field named in `param`. Token arithmetic is done in `i128`, so no
//! value a client can write wraps.
//!
//! Sampling fields sim serve does not model (temperature, top_p, ...) are checked and then
//! ignored: a request vLLM refuses is refused here too.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::fleet::Reason;
use super::text::natural_length;
use crate::live::wire;

/// The longest session key header accepted, bytes (a session id is a short token; a longer
/// value would be kept for the whole run).
pub const MAX_SESSION_KEY_BYTES: usize = 256;

/// vLLM's default `--max-logprobs`: the most log-probabilities a request may ask for.
const MAX_LOGPROBS: i128 = 20;

/// A request's JSON body.
pub type Body = Map<String, Value>;

/// What a valid completion request asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    /// A chat completion (else a text completion).
    pub chat: bool,
    /// The prompt text (a chat's messages rendered, [`render_chat`]).
    pub prompt: String,
    /// Its tokens.
    pub prompt_tokens: u32,
    /// Tokens the request generates.
    pub output_tokens: u32,
    /// Why it stops.
    pub reason: Reason,
    /// Streamed.
    pub stream: bool,
    /// A final usage chunk when streamed.
    pub include_usage: bool,
    /// The session key header, if any.
    pub session: Option<String>,
}

/// Checks `req` against the served `model` and a context of `max_len` tokens; `count`
/// tokenises a prompt.
pub fn parse(
    req: &Body,
    chat: bool,
    model: &str,
    max_len: u32,
    count: impl Fn(&str) -> u32,
    headers: &HeaderMap,
) -> Result<Ask, ApiError> {
    check_model(model, req)?;
    let prompt = if chat {
        chat_prompt(req)?
    } else {
        completion_prompt(req)?
    };
    check_choices(req)?;
    check_sampling(req, chat)?;
    let stream = flag(req, "stream")?.unwrap_or(false);
    let include_usage = stream_options(req, stream)?;
    let prompt_tokens = count(&prompt);
    if prompt_tokens == 0 {
        return Err(bad_request("the prompt is empty", Some(prompt_field(chat))));
    }
    let max_tokens = max_tokens(req, chat, prompt_tokens, max_len)?;
    let (output_tokens, reason) = output_length(req, &prompt, max_tokens)?;
    Ok(Ask {
        chat,
        prompt,
        prompt_tokens,
        output_tokens,
        reason,
        stream,
        include_usage,
        session: session(headers)?,
    })
}

fn prompt_field(chat: bool) -> &'static str {
    if chat { "messages" } else { "prompt" }
}

/// A JSON value for a message: at most 40 characters of it.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// An integer field as pydantic reads one in lax mode (a JSON integer, a float without a
/// fraction, or a string of digits); `None` when absent or null. Integers beyond `i128`
/// (only floats reach there) are clamped to ±1e38, far past every bound below.
pub fn int(req: &Body, key: &str) -> Result<Option<i128>, ApiError> {
    let Some(v) = req.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let x = match v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && f.fract() == 0.0)
                    .map(|f| f.clamp(-1e38, 1e38) as i128)
            }),
        Value::String(s) => s.trim().parse::<i128>().ok(),
        _ => None,
    };
    x.map(Some)
        .ok_or_else(|| bad_request(format!("{key} must be an integer, got {}.", shown(v)), Some(key)))
}

/// A number field as pydantic reads one in lax mode (a JSON number or a string of one),
/// finite; `None` when absent or null.
pub fn num(req: &Body, key: &str) -> Result<Option<f64>, ApiError> {
    let Some(v) = req.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let x = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match x {
        Some(x) if x.is_finite() => Ok(Some(x)),
        _ => Err(bad_request(
            format!("{key} must be a finite number, got {}.", shown(v)),
            Some(key),
        )),
    }
}

/// A boolean field; `None` when absent or null.
pub fn flag(req: &Body, key: &str) -> Result<Option<bool>, ApiError> {
    match req.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(bad_request(
            format!("{key} must be a boolean, got {}.", shown(v)),
            Some(key),
        )),
    }
}

/// `model`, if given, must be the served one.
fn check_model(model: &str, req: &Body) -> Result<(), ApiError> {
    match req.get("model") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(m)) if m == model => Ok(()),
        Some(Value::String(m)) => Err(ApiError::not_found(format!(
            "The model `{}` does not exist.",
            crate::quote::one_line(m)
        ))),
        Some(v) => Err(bad_request(
            format!("model must be a string, got {}.", shown(v)),
            Some("model"),
        )),
    }
}

/// `n` (vLLM: at least 1); sim serve generates one choice.
fn check_choices(req: &Body) -> Result<(), ApiError> {
    match int(req, "n")? {
        Some(n) if n < 1 => Err(bad_request(format!("n must be at least 1, got {n}."), Some("n"))),
        Some(n) if n != 1 => Err(bad_request(
            format!("sim serve generates one choice per request (n = 1), got {n}."),
            Some("n"),
        )),
        _ => Ok(()),
    }
}

/// A number field within `ok`, else vLLM's message `"{key} must be {range}, got {x}."`.
fn bounded(req: &Body, key: &str, ok: impl Fn(f64) -> bool, range: &str) -> Result<(), ApiError> {
    match num(req, key)? {
        Some(x) if !ok(x) => Err(bad_request(format!("{key} must be {range}, got {x}."), Some(key))),
        _ => Ok(()),
    }
}

/// The sampling fields vLLM bounds (`SamplingParams._verify_args`, protocol.py's `seed`
/// and `check_logprobs`), checked though sim serve does not sample.
fn check_sampling(req: &Body, chat: bool) -> Result<(), ApiError> {
    bounded(req, "presence_penalty", |x| (-2.0..=2.0).contains(&x), "in [-2, 2]")?;
    bounded(req, "frequency_penalty", |x| (-2.0..=2.0).contains(&x), "in [-2, 2]")?;
    bounded(req, "repetition_penalty", |x| x > 0.0, "greater than zero")?;
    bounded(req, "temperature", |x| x >= 0.0, "non-negative")?;
    bounded(req, "top_p", |x| x > 0.0 && x <= 1.0, "in (0, 1]")?;
    bounded(req, "min_p", |x| (0.0..=1.0).contains(&x), "in [0, 1]")?;
    if let Some(k) = int(req, "top_k")?
        && k < -1
    {
        return Err(bad_request(
            format!("top_k must be 0 (disable), or at least 1, got {k}."),
            Some("top_k"),
        ));
    }
    if let Some(s) = int(req, "seed")?
        && i64::try_from(s).is_err()
    {
        return Err(bad_request(
            format!("seed must be in [{}, {}], got {s}.", i64::MIN, i64::MAX),
            Some("seed"),
        ));
    }
    check_logprobs(req, chat)
}

/// protocol.py's `check_logprobs`: counts of log-probabilities are non-negative, prompt
/// log-probabilities are not streamed, and a chat's `top_logprobs` needs `logprobs`; and
/// the engine's `_validate_logprobs` (`vllm/v1/engine/processor.py`): at most
/// `max_logprobs`, 20 by default.
fn check_logprobs(req: &Body, chat: bool) -> Result<(), ApiError> {
    let counted = |key: &str, what: &str| -> Result<Option<i128>, ApiError> {
        match int(req, key)? {
            Some(x) if x < 0 => Err(bad_request(format!("`{key}` must be a positive value."), Some(key))),
            Some(x) if x > MAX_LOGPROBS => Err(bad_request(
                format!("Requested {what} logprobs of {x}, which is greater than max allowed: {MAX_LOGPROBS}"),
                Some(key),
            )),
            x => Ok(x),
        }
    };
    if counted("prompt_logprobs", "prompt")?.is_some_and(|x| x > 0) && flag(req, "stream")? == Some(true) {
        return Err(bad_request(
            "`prompt_logprobs` are not available when `stream=True`.",
            Some("prompt_logprobs"),
        ));
    }
    if chat {
        let logprobs = flag(req, "logprobs")?.unwrap_or(false);
        if counted("top_logprobs", "sample")?.is_some_and(|x| x > 0) && !logprobs {
            return Err(bad_request(
                "when using `top_logprobs`, `logprobs` must be set to true.",
                Some("top_logprobs"),
            ));
        }
    } else {
        counted("logprobs", "sample")?;
    }
    Ok(())
}

/// protocol.py's `validate_stream_options`: options only with `stream`; whether a final
/// usage chunk is asked for.
fn stream_options(req: &Body, stream: bool) -> Result<bool, ApiError> {
    match req.get("stream_options") {
        None | Some(Value::Null) => Ok(false),
        Some(_) if !stream => Err(bad_request(
            "Stream options can only be defined when `stream=True`.",
            Some("stream_options"),
        )),
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => Ok(true),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(bad_request(
                format!("stream_options.include_usage must be a boolean, got {}.", shown(v)),
                Some("stream_options"),
            )),
        },
        Some(v) => Err(bad_request(
            format!("stream_options must be an object, got {}.", shown(v)),
            Some("stream_options"),
        )),
    }
}

/// A chat request's prompt text ([`render_chat`] of its `messages`).
fn chat_prompt(req: &Body) -> Result<String, ApiError> {
    match req.get("messages") {
        Some(Value::Array(ms)) if !ms.is_empty() => render_chat(ms),
        _ => Err(bad_request(
            "`messages` (a non-empty list) is required",
            Some("messages"),
        )),
    }
}

/// A completions request's one prompt.
fn completion_prompt(req: &Body) -> Result<String, ApiError> {
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

/// A chat request's prompt text: `role\ncontent\n` per message, then `assistant\n`, so
/// that one turn's prompt and reply are a prefix of the next turn's prompt.
pub fn render_chat(messages: &[Value]) -> Result<String, ApiError> {
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

/// The most tokens the request may generate: `max_completion_tokens`, else `max_tokens`,
/// else vLLM's default (16 for completions, OpenAI's; what the context leaves for chat),
/// refused as vLLM refuses it: below 1, or past `max_len` with the prompt.
fn max_tokens(req: &Body, chat: bool, prompt_tokens: u32, max_len: u32) -> Result<u32, ApiError> {
    let (key, asked) = match (int(req, "max_completion_tokens")?, int(req, "max_tokens")?) {
        (Some(x), _) => ("max_completion_tokens", Some(x)),
        (None, x) => ("max_tokens", x),
    };
    if let Some(x) = asked
        && x < 1
    {
        return Err(bad_request(
            format!("max_tokens must be at least 1, got {x}."),
            Some(key),
        ));
    }
    let (prompt, max) = (i128::from(prompt_tokens), i128::from(max_len));
    if asked.is_none() && prompt >= max {
        return Err(bad_request(
            format!(
                "This model's maximum context length is {max_len} tokens. However, you requested \
                 {prompt_tokens} tokens in the messages, Please reduce the length of the messages."
            ),
            Some(prompt_field(chat)),
        ));
    }
    let want = asked.unwrap_or(if chat { max - prompt } else { 16 });
    if prompt + want > max {
        return Err(bad_request(
            format!(
                "This model's maximum context length is {max_len} tokens. However, you requested {} tokens \
                 ({prompt_tokens} in the messages, {want} in the completion). Please reduce the length of the \
                 messages or completion.",
                prompt + want
            ),
            Some(key),
        ));
    }
    // Within the context, so below u32::MAX.
    Ok(u32::try_from(want).unwrap_or(u32::MAX))
}

/// How many tokens the request generates, and why it stops: `max_tokens` under
/// `ignore_eos`, else the prompt's natural length within `[max(min_tokens, 1), max_tokens]`.
fn output_length(req: &Body, prompt: &str, max_tokens: u32) -> Result<(u32, Reason), ApiError> {
    let min_tokens = int(req, "min_tokens")?.unwrap_or(0);
    if min_tokens < 0 {
        return Err(bad_request(
            format!("min_tokens must be greater than or equal to 0, got {min_tokens}."),
            Some("min_tokens"),
        ));
    }
    if min_tokens > i128::from(max_tokens) {
        return Err(bad_request(
            format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."),
            Some("min_tokens"),
        ));
    }
    // At most max_tokens, so it fits.
    let min_tokens = u32::try_from(min_tokens).unwrap_or(max_tokens);
    let output_tokens = if flag(req, "ignore_eos")?.unwrap_or(false) {
        max_tokens
    } else {
        natural_length(prompt).clamp(min_tokens.max(1), max_tokens)
    };
    let reason = if output_tokens == max_tokens {
        Reason::Length
    } else {
        Reason::Stop
    };
    Ok((output_tokens, reason))
}

/// The session key: the first of [`wire::SESSION_HEADERS`] present, at most
/// [`MAX_SESSION_KEY_BYTES`].
fn session(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    for h in wire::SESSION_HEADERS {
        let Some(v) = headers.get(h).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        if v.len() > MAX_SESSION_KEY_BYTES {
            return Err(bad_request(
                format!("{h}: {} bytes, longer than {MAX_SESSION_KEY_BYTES}", v.len()),
                Some(h),
            ));
        }
        return Ok(Some(v.to_string()));
    }
    Ok(None)
}

/// An OpenAI-style error, as vLLM's `ErrorResponse` serialises it.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    /// What is wrong.
    pub message: String,
    /// The request field (or header) it is about.
    pub param: Option<String>,
}

impl ApiError {
    /// 404, as vLLM answers a model it does not serve.
    pub fn not_found(message: String) -> ApiError {
        error(StatusCode::NOT_FOUND, "NotFoundError", message, Some("model"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A body left unread (too large, too slow, malformed): the connection closes.
        let close = matches!(self.status, StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT)
            || self.message.starts_with(BODY_UNREADABLE);
        let body = json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status.as_u16(),
            }
        });
        let mut r = (self.status, axum::Json(body)).into_response();
        if close {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        r
    }
}

/// How the message of a body that could not be read begins.
pub(super) const BODY_UNREADABLE: &str = "the request body could not be read";

/// An error answer of `status`, vLLM's `type` `kind`, about field `param`.
pub(super) fn error(
    status: StatusCode,
    kind: &'static str,
    message: impl Into<String>,
    param: Option<&str>,
) -> ApiError {
    ApiError {
        status,
        kind,
        message: message.into(),
        param: param.map(str::to_string),
    }
}

/// 400, a request vLLM refuses, `param` naming the field.
pub fn bad_request(message: impl Into<String>, param: Option<&str>) -> ApiError {
    error(StatusCode::BAD_REQUEST, "BadRequestError", message, param)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MAX_LEN: u32 = 1000;

    fn ask(chat: bool, v: Value) -> Result<Ask, (String, Option<String>)> {
        let Value::Object(m) = v else { panic!("an object") };
        parse(
            &m,
            chat,
            "m",
            MAX_LEN,
            |p| p.chars().count().div_ceil(4) as u32,
            &HeaderMap::new(),
        )
        .map_err(|e| (e.message, e.param))
    }

    fn refused(chat: bool, v: Value) -> (String, String) {
        let (m, p) = ask(chat, v).expect_err("refused");
        (m, p.unwrap_or_default())
    }

    #[test]
    fn huge_lengths_are_refused_without_wrapping() {
        for (max_tokens, ignore_eos) in [
            (json!(18_446_744_073_709_551_615u64), true),
            (json!(18_446_744_073_709_551_615u64), false),
            (json!(1e20), true),
            (json!("99999999999999999999999999"), false),
            (json!(4_294_967_295u64), true),
            (json!(998), true),
        ] {
            let (m, p) = refused(
                false,
                json!({"prompt": "Hello there", "max_tokens": max_tokens, "ignore_eos": ignore_eos}),
            );
            assert!(
                m.starts_with("This model's maximum context length is 1000 tokens"),
                "{m}"
            );
            assert_eq!(p, "max_tokens");
        }
        let (m, p) = refused(
            true,
            json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5000}),
        );
        assert!(m.contains("maximum context length"), "{m}");
        assert_eq!(p, "max_completion_tokens");
        // At the context exactly: accepted, and exactly that long under ignore_eos.
        let a = ask(
            false,
            json!({"prompt": "Hello there", "max_tokens": 997, "ignore_eos": true}),
        )
        .unwrap();
        assert_eq!((a.prompt_tokens, a.output_tokens, a.reason), (3, 997, Reason::Length));
        // A prompt filling the context alone, with no max_tokens (chat's default).
        let (m, p) = refused(
            true,
            json!({"messages": [{"role": "user", "content": "x".repeat(4000)}]}),
        );
        assert!(m.contains("in the messages, Please reduce"), "{m}");
        assert_eq!(p, "messages");
    }

    #[test]
    fn numbers_are_read_as_pydantic_reads_them() {
        let a = ask(
            false,
            json!({"prompt": "Hello there", "max_tokens": "7", "ignore_eos": true}),
        )
        .unwrap();
        assert_eq!(a.output_tokens, 7);
        let a = ask(
            false,
            json!({"prompt": "Hello there", "max_tokens": 7.0, "ignore_eos": true}),
        )
        .unwrap();
        assert_eq!(a.output_tokens, 7);
        for (field, v, says) in [
            ("max_tokens", json!(-1), "max_tokens must be at least 1, got -1."),
            ("max_tokens", json!(0), "max_tokens must be at least 1, got 0."),
            ("max_tokens", json!(7.5), "max_tokens must be an integer, got 7.5."),
            (
                "max_tokens",
                json!("seven"),
                "max_tokens must be an integer, got \"seven\".",
            ),
            ("max_tokens", json!([7]), "max_tokens must be an integer"),
            (
                "min_tokens",
                json!(-3),
                "min_tokens must be greater than or equal to 0, got -3.",
            ),
            (
                "min_tokens",
                json!(17),
                "min_tokens must be less than or equal to max_tokens=16, got 17.",
            ),
            (
                "n",
                json!(1_000_000_000),
                "sim serve generates one choice per request (n = 1), got 1000000000.",
            ),
            ("n", json!(0), "n must be at least 1, got 0."),
            ("n", json!(1e9), "got 1000000000"),
            (
                "temperature",
                json!(-0.5),
                "temperature must be non-negative, got -0.5.",
            ),
            ("temperature", json!("nan"), "temperature must be a finite number"),
            ("top_p", json!(0), "top_p must be in (0, 1], got 0."),
            ("top_p", json!(1.5), "top_p must be in (0, 1], got 1.5."),
            ("top_k", json!(-2), "top_k must be 0 (disable), or at least 1, got -2."),
            ("min_p", json!(2), "min_p must be in [0, 1], got 2."),
            (
                "presence_penalty",
                json!(3),
                "presence_penalty must be in [-2, 2], got 3.",
            ),
            (
                "frequency_penalty",
                json!(-2.5),
                "frequency_penalty must be in [-2, 2], got -2.5.",
            ),
            (
                "repetition_penalty",
                json!(0),
                "repetition_penalty must be greater than zero, got 0.",
            ),
            ("seed", json!(9_223_372_036_854_775_808u64), "seed must be in"),
            ("logprobs", json!(-1), "`logprobs` must be a positive value."),
            (
                "logprobs",
                json!(21),
                "Requested sample logprobs of 21, which is greater than max allowed: 20",
            ),
            ("prompt_logprobs", json!(1e9), "Requested prompt logprobs of 1000000000"),
            ("stream", json!("yes"), "stream must be a boolean"),
            ("ignore_eos", json!(1), "ignore_eos must be a boolean"),
            (
                "stream_options",
                json!({"include_usage": true}),
                "only be defined when `stream=True`",
            ),
            ("model", json!(5), "model must be a string"),
        ] {
            let mut body = json!({"prompt": "Hello there"});
            body[field] = v;
            let (m, p) = refused(false, body);
            assert!(m.contains(says), "{field}: {m}");
            assert_eq!(p, field, "{m}");
        }
        // Within the bounds: accepted (and ignored).
        let a = ask(
            false,
            json!({"prompt": "Hello there", "temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0.5,
                   "seed": -9_223_372_036_854_775_808i64, "presence_penalty": -2, "n": "1", "logprobs": 0}),
        );
        assert!(a.is_ok(), "{a:?}");
    }

    #[test]
    fn chat_log_probabilities_and_sessions_are_checked() {
        let (m, p) = refused(
            true,
            json!({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}),
        );
        assert!(m.contains("`logprobs` must be set to true"), "{m}");
        assert_eq!(p, "top_logprobs");
        let (_, p) = refused(
            true,
            json!({"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 1, "stream": true}),
        );
        assert_eq!(p, "prompt_logprobs");
        let Value::Object(m) = json!({"prompt": "hi"}) else {
            unreachable!()
        };
        let mut h = HeaderMap::new();
        h.insert("x-session-id", "s".repeat(MAX_SESSION_KEY_BYTES + 1).parse().unwrap());
        let e = parse(&m, false, "m", MAX_LEN, |_| 1, &h).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("x-session-id"));
        h.insert("x-session-id", "s".repeat(MAX_SESSION_KEY_BYTES).parse().unwrap());
        assert!(parse(&m, false, "m", MAX_LEN, |_| 1, &h).unwrap().session.is_some());
    }
}
