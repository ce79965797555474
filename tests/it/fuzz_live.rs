//! A bounded, seeded fuzz of the live wing's inputs, on loopback only: `sim serve`'s HTTP
//! surface (methods, paths, headers, framing, sizes, and completion bodies whose fields take
//! the values clients get wrong), `sim load` against a misbehaving endpoint (garbage events,
//! cut streams, stalls, huge events, other content types, error statuses), and
//! `sim observe --file` on generated exposition text.
//!
//! Each case ends in one class: a panic, an abort, a hang (no answer or exit within its
//! bound), silently wrong (accepted, and the output contradicts what the case was built to
//! give), vague (refused without naming what), refused with a line (vLLM's error naming the
//! field; exit 2 with one line naming the file, line, flag or series), or accepted
//! correctly. The test fails on any of the first four, and on a vague case where the
//! contract names one (a completion's fields, a file's lines).
//!
//! `FLEETSIM_FUZZ_SIM=PATH` runs the same corpus against another build of `sim` and only
//! prints the counts (`cargo test --release --test it fuzz_live:: -- --nocapture`), to
//! compare builds.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;
use serde_json::{Value, json};

use crate::load::{Endpoint, ONE_TURN, Reply, good_stream, head, token_event};

/// The corpus's seed: the same cases on every run.
const SEED: u64 = 44;
/// `max_model_len` of the served fleet ([`FLEET`]: 256 KV blocks of 16 tokens), so that the
/// longest legal request takes well under a second at the fuzz's speed.
const MAX_MODEL_LEN: u64 = 256 * 16;

/// The served fleet: one vLLM backend (burst8's step-time profile by default) with a small
/// KV cache.
const FLEET: &str = r#"name = "fuzz-fleet"
seed = 1
[backends]
count = 1
kv_blocks = 256
[router.policy]
kind = "roundrobin"
[[workload.groups]]
name = "g"
sessions = 1
arrival = { kind = "burst", at_s = 0, spread_s = 0 }
input_tokens = 40
output_tokens = 5
"#;

/// The classes a case can end in.
const CLASSES: [&str; 7] = [
    "panic",
    "abort",
    "hang",
    "silently wrong",
    "vague",
    "refused with a line",
    "accepted correctly",
];

/// The `sim` under test: this build, or `FLEETSIM_FUZZ_SIM`.
fn sim_bin() -> (PathBuf, bool) {
    match std::env::var_os("FLEETSIM_FUZZ_SIM") {
        Some(p) => (PathBuf::from(p), false),
        None => (PathBuf::from(env!("CARGO_BIN_EXE_sim")), true),
    }
}

/// Counts per class, and the cases of the failing classes.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<&'static str, usize>,
    bad: Vec<String>,
    /// Vague cases the contract allows (a status-only answer of the HTTP layer), by kind.
    allowed_vague: BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, class: &'static str, what: impl FnOnce() -> String) {
        *self.counts.entry(class).or_default() += 1;
        if CLASSES[..5].contains(&class) {
            self.bad.push(format!("{class}: {}", what()));
        }
    }

    /// Prints the counts; panics on a failing class when this build is under test.
    fn report(&self, surface: &str, strict: bool) {
        let line: Vec<String> = CLASSES
            .iter()
            .map(|c| format!("{c} {}", self.counts.get(c).copied().unwrap_or(0)))
            .collect();
        println!("fuzz_live {surface}: {}", line.join(", "));
        for b in self.bad.iter().take(20) {
            println!("  {b}");
        }
        for (kind, n) in &self.allowed_vague {
            println!("  vague, status only from the HTTP layer: {n} x {kind}");
        }
        if strict {
            assert!(
                self.bad.is_empty(),
                "{surface}: {} failing cases:\n{}",
                self.bad.len(),
                self.bad.join("\n")
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// sim serve's HTTP surface
// ---------------------------------------------------------------------------------------

/// Numbers (as JSON text) that clients get wrong.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2.5",
    "7",
    "1e9",
    "4294967296",
    "2147483648",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "1e308",
    "-0.0",
    "\"7\"",
    "\"x\"",
    "null",
    "true",
    "[]",
    "{}",
    "4096",
    "4093",
    "4000",
];

/// Fields a completion request may carry.
const FIELDS: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "n",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logprobs",
    "ignore_eos",
    "stream",
];

/// What a case's answer must be.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    /// A completion of `prompt` tokens asking for `max` under `ignore_eos` (if so): refused
    /// naming one of `refuse` (docs/serve.md's table of fields), else accepted within the
    /// context, exactly `max` tokens long under `ignore_eos`.
    Completion {
        prompt: u64,
        max: Option<i128>,
        ignore_eos: bool,
        refuse: Vec<&'static str>,
    },
    /// Any answer (or a close) within the bound, the server still up.
    Any,
}

/// An integer as pydantic reads one in lax mode (docs/serve.md).
fn int_like(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && f.fract() == 0.0)
                    .map(|f| f.clamp(-1e38, 1e38) as i128)
            }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A number as pydantic reads one in lax mode, finite.
fn num_like(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|x: &f64| x.is_finite())
}

/// The fields of `body` docs/serve.md's table refuses (empty: accepted), for a prompt of
/// `prompt` tokens: an independent statement of vLLM's rules, the fuzz's oracle.
fn refused_fields(body: &serde_json::Map<String, Value>, chat: bool, prompt: u64) -> Vec<&'static str> {
    let mut bad = Vec::new();
    let get = |k: &str| body.get(k).filter(|v| !v.is_null());
    let int = |k: &'static str, bad: &mut Vec<&'static str>| -> Option<i128> {
        let v = get(k)?;
        let x = int_like(v);
        if x.is_none() {
            bad.push(k);
        }
        x
    };
    let mut range = |k: &'static str, ok: fn(f64) -> bool| {
        if let Some(v) = get(k)
            && !num_like(v).is_some_and(ok)
        {
            bad.push(k);
        }
    };
    range("temperature", |x| x >= 0.0);
    range("top_p", |x| x > 0.0 && x <= 1.0);
    range("min_p", |x| (0.0..=1.0).contains(&x));
    range("presence_penalty", |x| (-2.0..=2.0).contains(&x));
    range("frequency_penalty", |x| (-2.0..=2.0).contains(&x));
    range("repetition_penalty", |x| x > 0.0);
    for k in ["ignore_eos", "stream"] {
        if get(k).is_some_and(|v| !v.is_boolean()) {
            bad.push(k);
        }
    }
    if int("n", &mut bad).is_some_and(|n| n != 1) {
        bad.push("n");
    }
    if int("top_k", &mut bad).is_some_and(|k| k < -1) {
        bad.push("top_k");
    }
    if int("seed", &mut bad).is_some_and(|s| i64::try_from(s).is_err()) {
        bad.push("seed");
    }
    if chat {
        if get("logprobs").is_some_and(|v| !v.is_boolean()) {
            bad.push("logprobs");
        }
    } else if int("logprobs", &mut bad).is_some_and(|l| !(0..=20).contains(&l)) {
        bad.push("logprobs");
    }
    let min = int("min_tokens", &mut bad);
    let key = if get("max_completion_tokens").is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max = int(key, &mut bad);
    if key == "max_completion_tokens" {
        int("max_tokens", &mut bad);
    }
    let field = if chat { "messages" } else { "prompt" };
    if prompt == 0 {
        bad.push(field);
    }
    let (p, len) = (i128::from(prompt), i128::from(MAX_MODEL_LEN));
    if max.is_some_and(|m| m < 1) || max.is_some_and(|m| p + m > len) || (max.is_none() && !chat && p + 16 > len) {
        bad.push(key);
    }
    if max.is_none() && chat && p >= len {
        bad.push(field);
    }
    let max_eff = max.unwrap_or(if chat { len - p } else { 16 });
    if min.is_some_and(|m| m < 0 || m > max_eff) {
        bad.push("min_tokens");
    }
    bad
}

/// One generated request: raw bytes on a fresh connection.
struct HttpCase {
    bytes: Vec<u8>,
    expect: Expect,
    label: String,
}

fn pick<T: Copy>(rng: &mut Pcg64, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

fn request(method: &str, path: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut b = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{headers}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    b.extend_from_slice(body);
    b
}

/// A completion body with a few fields set to [`NUMBERS`].
fn completion_case(rng: &mut Pcg64) -> HttpCase {
    let chat = rng.random_bool(0.3);
    let prompt: String = "abcd ".repeat(rng.random_range(0..60));
    let mut body = serde_json::Map::new();
    if chat {
        body.insert("messages".into(), json!([{"role": "user", "content": prompt}]));
    } else {
        body.insert("prompt".into(), json!(prompt));
    }
    for _ in 0..rng.random_range(1..4) {
        let v: Value = serde_json::from_str(pick(rng, NUMBERS)).unwrap();
        body.insert(pick(rng, FIELDS).to_string(), v);
    }
    let chars = if chat {
        // "user\n" + content + "\n" + "assistant\n"
        prompt.chars().count() + 16
    } else {
        prompt.chars().count()
    };
    let prompt = chars.div_ceil(4) as u64;
    let max = body
        .get("max_completion_tokens")
        .or(body.get("max_tokens"))
        .and_then(int_like);
    let ignore_eos = body.get("ignore_eos") == Some(&json!(true));
    let refuse = refused_fields(&body, chat, prompt);
    let text = serde_json::to_vec(&Value::Object(body)).unwrap();
    let path = if chat {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    };
    HttpCase {
        label: format!("POST {path} {}", String::from_utf8_lossy(&text)),
        bytes: request("POST", path, "content-type: application/json\r\n", &text),
        expect: Expect::Completion {
            prompt,
            max,
            ignore_eos,
            refuse,
        },
    }
}

/// Framing, methods, paths, headers and bodies that are not a completion.
fn other_case(rng: &mut Pcg64) -> HttpCase {
    let kind = rng.random_range(0..8);
    let (bytes, label) = match kind {
        0 => {
            let depth = rng.random_range(1..200_000);
            let b = [vec![b'['; depth], vec![b']'; depth]].concat();
            (
                request("POST", "/v1/completions", "", &b),
                format!("nested JSON, depth {depth}"),
            )
        }
        1 => {
            let n = rng.random_range(0..4096);
            let b: Vec<u8> = (0..n).map(|_| rng.random::<u8>()).collect();
            let path = pick(
                rng,
                &[
                    "/v1/completions",
                    "/v1/chat/completions",
                    "/tokenize",
                    "/v1/completions/render",
                ],
            );
            (request("POST", path, "", &b), format!("{n} random bytes to {path}"))
        }
        2 => {
            let size = pick(rng, &["zz", "-1", "ffffffffffffffffff", "5;x=y", "", "0x10", "5"]);
            let b = format!(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{size}\r\n{{\"a\":\r\n0\r\n\r\n"
            );
            (b.into_bytes(), format!("chunk size {size:?}"))
        }
        3 => {
            let claim = pick(rng, &["2147483648", "18446744073709551616", "-5", "abc", "100"]);
            let b = format!(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {claim}\r\nconnection: close\r\n\r\n{{\"prompt\""
            );
            (b.into_bytes(), format!("content-length {claim} with 9 bytes"))
        }
        4 => {
            let m = pick(
                rng,
                &["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW", "G\u{e9}T"],
            );
            let p = pick(
                rng,
                &[
                    "/health",
                    "/v1/models",
                    "/metrics",
                    "/v1/completions",
                    "/nope",
                    "/%00",
                    "//",
                    "/v1/../metrics",
                ],
            );
            (request(m, p, "", b""), format!("{m} {p}"))
        }
        5 => {
            let long = "a".repeat(rng.random_range(1..300_000));
            (
                request("GET", &format!("/{long}"), "", b""),
                format!("path of {} bytes", long.len() + 1),
            )
        }
        6 => {
            let n = rng.random_range(1..400);
            let hs: String = (0..n).map(|i| format!("x-h{i}: {}\r\n", "v".repeat(i % 50))).collect();
            let key = format!("x-session-id: {}\r\n", "s".repeat(rng.random_range(1..2000)));
            let body = br#"{"prompt":"Hello there","max_tokens":2}"#;
            (
                request("POST", "/v1/completions", &(hs + &key), body),
                format!("{n} headers and a session key"),
            )
        }
        _ => {
            let cut = rng.random_range(1..40);
            let full = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 40\r\n\r\n";
            (
                full[..cut.min(full.len())].to_vec(),
                format!("request cut after {cut} bytes"),
            )
        }
    };
    HttpCase {
        bytes,
        expect: Expect::Any,
        label,
    }
}

/// The answer to `bytes` on a fresh connection to `addr`: `Some(text)` once the server
/// closed it (empty if it closed without answering), `None` if it held it past `bound`.
fn exchange(addr: &str, bytes: &[u8], bound: Duration) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let _ = s.write_all(bytes);
    let start = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(n) => out.extend_from_slice(&buf[..n.min(1 << 20)]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(String::from_utf8_lossy(&out).into_owned());
            }
            Err(_) => {}
        }
        if start.elapsed() > bound {
            return None;
        }
    }
}

/// `/health` answered 200 within a second.
fn healthy(addr: &str) -> bool {
    exchange(
        addr,
        b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        Duration::from_secs(1),
    )
    .is_some_and(|a| a.starts_with("HTTP/1.1 200"))
}

/// The class of an answer to a case.
fn classify(case: &HttpCase, answer: &str) -> &'static str {
    let status: u16 = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: Option<Value> = serde_json::from_str(body).ok();
    let message = v
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().or(v["detail"].as_str()));
    match &case.expect {
        Expect::Completion { refuse, .. } if !refuse.is_empty() => {
            let param = v.as_ref().and_then(|v| v["error"]["param"].as_str());
            if (200..300).contains(&status) {
                "silently wrong"
            } else if status == 400 && message.is_some() && param.is_some_and(|p| refuse.contains(&p)) {
                "refused with a line"
            } else {
                "vague"
            }
        }
        Expect::Completion {
            prompt,
            max,
            ignore_eos,
            ..
        } if (200..300).contains(&status) => {
            let Some(v) = v else {
                // A stream: its tokens are checked by the server's own tests.
                return "accepted correctly";
            };
            let (p, c) = (
                v["usage"]["prompt_tokens"].as_u64(),
                v["usage"]["completion_tokens"].as_u64(),
            );
            let within = p.zip(c).is_some_and(|(p, c)| p + c <= MAX_MODEL_LEN && p == *prompt);
            let exact = !ignore_eos || max.is_none_or(|m| c.is_some_and(|c| i128::from(c) == m));
            if within && exact {
                "accepted correctly"
            } else {
                "silently wrong"
            }
        }
        // A valid request refused.
        Expect::Completion { .. } => "silently wrong",
        Expect::Any if (200..300).contains(&status) => "accepted correctly",
        Expect::Any if status != 0 && message.is_some() => "refused with a line",
        // Refused by the HTTP layer (status only), or closed without an answer.
        Expect::Any => "vague",
    }
}

/// A `sim serve` of burst8 on loopback; killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(bin: &Path, dir: &Path, new_flags: bool) -> Server {
        let urls = dir.join("urls.txt");
        let _ = std::fs::remove_file(&urls);
        let scenario = dir.join("fleet.toml");
        std::fs::write(&scenario, FLEET).unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg(&scenario)
            .args(["--speed", "100", "--quiet", "--urls-file"])
            .arg(&urls)
            .arg("--out")
            .arg(dir.join("out"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if new_flags {
            cmd.args(["--header-timeout", "1", "--body-timeout", "1"]);
        }
        let mut server = Server {
            child: cmd.spawn().unwrap(),
            addr: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(t) = std::fs::read_to_string(&urls)
                && t.ends_with('\n')
            {
                server.addr = t.lines().next().unwrap().trim_start_matches("http://").to_string();
                return server;
            }
            if let Some(st) = server.child.try_wait().unwrap() {
                panic!("sim serve exited at start: {st}");
            }
            assert!(Instant::now() < deadline, "sim serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; whether it exited within 10 s.
    fn stop(mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The class of one case against `server`, restarting it when the case stopped it.
fn serve_case(case: &HttpCase, server: &mut Server, bin: &Path, dir: &Path, strict: bool) -> &'static str {
    let answer = exchange(&server.addr, &case.bytes, Duration::from_secs(5));
    let alive = server.child.try_wait().unwrap().is_none();
    let class = if !alive {
        let died = server.child.try_wait().unwrap().and_then(|s| s.code());
        if died.is_none() { "abort" } else { "panic" }
    } else if answer.is_none() || !healthy(&server.addr) {
        "hang"
    } else {
        classify(case, answer.as_deref().unwrap_or(""))
    };
    if !alive || class == "hang" {
        *server = Server::start(bin, dir, strict);
    }
    class
}

#[test]
fn serve_http_surface() {
    let (bin, strict) = sim_bin();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&bin, dir.path(), strict);
    let mut rng = Pcg64::seed_from_u64(SEED);
    let mut tally = Tally::default();
    let mut cases: Vec<HttpCase> = (0..240)
        .map(|_| {
            if rng.random_bool(0.6) {
                completion_case(&mut rng)
            } else {
                other_case(&mut rng)
            }
        })
        .collect();
    // The request that once stopped the server, first.
    let first = br#"{"prompt": "Hello there", "max_tokens": 18446744073709551615, "ignore_eos": true}"#;
    cases.insert(
        0,
        HttpCase {
            bytes: request("POST", "/v1/completions", "content-type: application/json\r\n", first),
            expect: Expect::Completion {
                prompt: 3,
                max: Some(18_446_744_073_709_551_615),
                ignore_eos: true,
                refuse: vec!["max_tokens"],
            },
            label: "max_tokens 2^64-1 with ignore_eos".into(),
        },
    );
    for case in &cases {
        let class = serve_case(case, &mut server, &bin, dir.path(), strict);
        let vague_ok = case.expect == Expect::Any;
        let class = if class == "vague" && vague_ok {
            "vague (HTTP layer)"
        } else {
            class
        };
        match class {
            "vague (HTTP layer)" => {
                *tally.counts.entry("vague").or_default() += 1;
                // The label with its numbers as N: one line per kind of case.
                let mut kind = String::new();
                for c in case.label.chars().map(|c| if c.is_ascii_digit() { 'N' } else { c }) {
                    if !(c == 'N' && kind.ends_with('N')) {
                        kind.push(c);
                    }
                }
                *tally.allowed_vague.entry(kind).or_default() += 1;
            }
            c => tally.add(c, || case.label.chars().take(200).collect()),
        }
    }
    let stopped = server.stop();
    if !stopped {
        tally.add("hang", || "SIGTERM did not stop the server within 10 s".into());
    }
    tally.report("serve", strict);
}

// ---------------------------------------------------------------------------------------
// sim load against a misbehaving endpoint
// ---------------------------------------------------------------------------------------

/// What a scripted endpoint's answer must make of the request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LoadExpect {
    Finished,
    Failed,
    Cut,
    HttpError,
    TimedOut,
}

/// One scripted answer and the outcome it must be recorded as.
fn load_case(rng: &mut Pcg64) -> (Reply, LoadExpect, String) {
    let tokens = rng.random_range(0..6);
    let mut body = Vec::new();
    for _ in 0..tokens {
        body.extend(token_event("abc "));
    }
    match rng.random_range(0..9) {
        0 => (
            Reply::Bytes(good_stream(rng.random_range(1..8))),
            LoadExpect::Finished,
            "a good stream".into(),
        ),
        1 => {
            let garbage: Vec<u8> = (0..rng.random_range(1..2000)).map(|_| rng.random::<u8>()).collect();
            let b = [head(200, "text/event-stream"), garbage].concat();
            (Reply::Bytes(b), LoadExpect::Cut, "garbage bytes, no [DONE]".into())
        }
        2 => {
            let cut = rng.random_range(1..40);
            let last = token_event("xyz ");
            let b = [
                head(200, "text/event-stream"),
                body,
                last[..cut.min(last.len())].to_vec(),
            ]
            .concat();
            (
                Reply::Bytes(b),
                LoadExpect::Cut,
                format!("{tokens} tokens then an event cut at {cut}"),
            )
        }
        3 => {
            let n = pick(rng, &[5 << 20, 9 << 20]);
            let ev = format!("data: {}\n\n", "y".repeat(n));
            let b = [
                head(200, "text/event-stream"),
                ev.into_bytes(),
                b"data: [DONE]\n\n".to_vec(),
            ]
            .concat();
            (Reply::Bytes(b), LoadExpect::Failed, format!("an event of {n} bytes"))
        }
        4 => {
            let t = pick(rng, &["application/json", "text/plain", "", "text/event-streamx"]).to_string();
            let b = [
                head(200, &t),
                good_stream(2)[head(200, "text/event-stream").len()..].to_vec(),
            ]
            .concat();
            let e = if t.starts_with("text/event-stream") {
                LoadExpect::Finished
            } else {
                LoadExpect::Failed
            };
            (Reply::Bytes(b), e, format!("content type {t:?}"))
        }
        5 => {
            let st = pick(rng, &[400u16, 404, 429, 500, 503]);
            let b = [head(st, "application/json"), vec![b'z'; rng.random_range(0..200_000)]].concat();
            (Reply::Bytes(b), LoadExpect::HttpError, format!("HTTP {st}"))
        }
        6 => {
            let b = [head(200, "text/event-stream"), body].concat();
            (
                Reply::Stall(b),
                LoadExpect::TimedOut,
                format!("{tokens} tokens then a stall"),
            )
        }
        7 => {
            let mut b = head(200, "text/event-stream");
            b.extend_from_slice(b": comment\n\nevent: x\ndata: not json\n\n");
            b.extend(token_event("abc "));
            b.extend_from_slice(b"data: [DONE]\r\n\r\n");
            (
                Reply::Bytes(b),
                LoadExpect::Finished,
                "comments, bad JSON, CRLF, then a token and [DONE]".into(),
            )
        }
        _ => {
            let b = [head(200, "text/event-stream"), b"data: [DONE]\n\n".to_vec()].concat();
            (Reply::Bytes(b), LoadExpect::Failed, "[DONE] without a token".into())
        }
    }
}

/// Runs `sim load` of one turn against `ep`; the class of what it did.
fn run_load(bin: &Path, ep: &Endpoint, expect: LoadExpect, dir: &Path) -> &'static str {
    let scenario = dir.join("one-turn.toml");
    std::fs::write(&scenario, ONE_TURN).unwrap();
    let out = dir.join("out");
    let child = Command::new(bin)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("load")
        .arg(&scenario)
        .args([
            "--target",
            &ep.url,
            "--quiet",
            "--request-timeout",
            "2",
            "--duration",
            "20",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let Some((code, stderr)) = wait_output(child, Duration::from_secs(40)) else {
        return "hang";
    };
    if stderr.contains("panicked") || code == Some(101) {
        return "panic";
    }
    let Some(code) = code else { return "abort" };
    if code == 2 {
        return if stderr.lines().count() == 1 {
            "refused with a line"
        } else {
            "vague"
        };
    }
    let Ok(t) = std::fs::read_to_string(out.join("requests.csv")) else {
        return "silently wrong";
    };
    let outcome = t.lines().nth(1).and_then(|l| l.split(',').nth(4)).unwrap_or("");
    let want = match expect {
        LoadExpect::Finished => "finished",
        LoadExpect::Failed => "failed",
        LoadExpect::Cut => "cut",
        LoadExpect::HttpError => "http_error",
        LoadExpect::TimedOut => "timed_out",
    };
    let exit_ok = (code == 0) == (outcome == "finished");
    if outcome == want && exit_ok {
        "accepted correctly"
    } else {
        "silently wrong"
    }
}

/// Waits at most `bound`: (exit code, stderr), or `None` (killed) past it.
fn wait_output(mut child: Child, bound: Duration) -> Option<(Option<i32>, String)> {
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some((st.code(), reader.join().unwrap_or_default()));
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn load_against_a_misbehaving_endpoint() {
    let (bin, strict) = sim_bin();
    let mut rng = Pcg64::seed_from_u64(SEED + 1);
    let mut tally = Tally::default();
    for _ in 0..36 {
        let (reply, expect, label) = load_case(&mut rng);
        let ep = Endpoint::start(reply);
        let dir = tempfile::tempdir().unwrap();
        let class = run_load(&bin, &ep, expect, dir.path());
        tally.add(class, || format!("{label} (expected {expect:?})"));
    }
    tally.report("load", strict);
}

// ---------------------------------------------------------------------------------------
// sim observe --file on generated exposition text
// ---------------------------------------------------------------------------------------

/// The defects a generated file may carry (at most one).
const DEFECTS: &[&str] = &[
    "none",
    "negative gauge",
    "huge gauge",
    "nanosecond timestamps",
    "duplicate timestamp",
    "missing timestamp",
    "unclosed label",
    "no instance",
    "no waiting series",
    "garbage value",
];

/// One generated series: its name, its labels (`None`: written broken), its points (a
/// timestamp in the file's unit, if written, and the value's text).
type GenSeries = (&'static str, Option<String>, Vec<(Option<f64>, String)>);

/// The series of a file with `defect`, timestamps in `unit` seconds: the series and the
/// distinct sample times when valid.
fn gen_series(rng: &mut Pcg64, defect: &str, unit: f64) -> (Vec<GenSeries>, usize) {
    let base = if rng.random_bool(0.5) { 1_767_607_200.0 } else { 0.0 };
    let n = rng.random_range(2..30);
    let mut out = Vec::new();
    for inst in 0..rng.random_range(1..4) {
        for (fam, name) in ["vllm:num_requests_running", "vllm:num_requests_waiting"]
            .into_iter()
            .enumerate()
        {
            if defect == "no waiting series" && fam == 1 && inst == 0 {
                continue;
            }
            let hit = inst == 0 && fam == 0;
            let labels = match defect {
                "unclosed label" if hit => None,
                "no instance" if hit => Some("engine=\"0\"".to_string()),
                _ => Some(format!("instance=\"b{inst}:8000\",engine=\"0\"")),
            };
            let points = (0..n)
                .map(|k| {
                    let mid = hit && k == n / 2;
                    let mut t = (base + k as f64 * 5.0) / unit;
                    let mut v = rng.random_range(0..8).to_string();
                    match defect {
                        "negative gauge" if mid => v = "-1e300".into(),
                        "huge gauge" if mid => v = "1e300".into(),
                        "garbage value" if mid => v = "lots".into(),
                        "duplicate timestamp" if mid => t = (base + (k as f64 - 1.0) * 5.0) / unit,
                        "nanosecond timestamps" => t = (1_767_607_200.0 + k as f64 * 5.0) * 1e9,
                        _ => {}
                    }
                    let written = !(defect == "missing timestamp" && k == 0);
                    (written.then_some(t), v)
                })
                .collect();
            out.push((name, labels, points));
        }
    }
    (out, n)
}

/// The series as exposition text: OpenMetrics (seconds, `# EOF`) or the Prometheus
/// format (milliseconds).
fn exposition_text(series: &[GenSeries], om: bool) -> String {
    let mut out = String::new();
    for (name, labels, points) in series {
        out.push_str(&format!("# TYPE {name} gauge\n"));
        let labels = labels.clone().unwrap_or_else(|| "instance=\"b0:8000".into());
        for (t, v) in points {
            let ts = t.map_or(String::new(), |t| format!(" {t}"));
            out.push_str(&format!("{name}{{{labels}}} {v}{ts}\n"));
        }
    }
    if om {
        out.push_str("# EOF\n");
    }
    out
}

/// The series as a query_range answer (seconds).
fn query_range_text(series: &[GenSeries]) -> String {
    let result: Vec<Value> = series
        .iter()
        .map(|(name, labels, points)| {
            let metric = match labels {
                None => json!("b0:8000"),
                Some(l) => {
                    let mut m = serde_json::Map::new();
                    m.insert("__name__".into(), json!(name));
                    for pair in l.split(',') {
                        let (k, v) = pair.split_once('=').unwrap();
                        m.insert(k.into(), json!(v.trim_matches('"')));
                    }
                    Value::Object(m)
                }
            };
            let values: Vec<Value> = points
                .iter()
                .map(|(t, v)| match t {
                    Some(t) => json!([t, v]),
                    None => json!([v]),
                })
                .collect();
            json!({"metric": metric, "values": values})
        })
        .collect();
    json!({"status": "success", "data": {"resultType": "matrix", "result": result}}).to_string()
}

#[test]
fn observe_file_on_generated_series() {
    let (bin, strict) = sim_bin();
    let mut rng = Pcg64::seed_from_u64(SEED + 2);
    let dir = tempfile::tempdir().unwrap();
    let mut tally = Tally::default();
    let mut valid_refused = Vec::new();
    for i in 0..160 {
        let defect = pick(&mut rng, DEFECTS);
        let format = rng.random_range(0..3);
        // OpenMetrics counts seconds, the Prometheus format milliseconds, a query_range
        // answer seconds.
        let unit = if format == 1 { 1e-3 } else { 1.0 };
        let (series, samples) = gen_series(&mut rng, defect, unit);
        let text = match format {
            0 => exposition_text(&series, true),
            1 => exposition_text(&series, false),
            _ => query_range_text(&series),
        };
        let file = dir.path().join(format!("case{i}.om"));
        std::fs::write(&file, &text).unwrap();
        let child = Command::new(&bin)
            .args(["observe", "--json", "--slots", "4", "--file"])
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let class = match out.status.code() {
            _ if err.contains("panicked") => "panic",
            None => "abort",
            Some(0) if defect != "none" => "silently wrong",
            Some(0) => {
                let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                if r["samples"] == samples {
                    "accepted correctly"
                } else {
                    "silently wrong"
                }
            }
            Some(2) if err.lines().count() == 1 && err.contains(&format!("case{i}.om")) => "refused with a line",
            _ => "vague",
        };
        if defect == "none" && class != "accepted correctly" {
            valid_refused.push(err.trim().to_string());
        }
        tally.add(class, || format!("{defect}: {}", err.trim()));
    }
    tally.report("observe --file", strict);
    println!("  valid files not accepted: {}", valid_refused.len());
    if strict {
        assert!(valid_refused.is_empty(), "valid files refused: {valid_refused:?}");
    }
}
