//! `sim serve` end to end: the real binary on loopback ports, driven by an HTTP client
//! (hyper), stopped by SIGTERM. Every wait is bounded; nothing asserts a duration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::common::{sim, write};

/// A running `sim serve`, killed if a test fails before stopping it.
struct Served {
    child: Option<Child>,
    urls: Vec<String>,
    out: PathBuf,
}

impl Served {
    fn start(dir: &Path, scenario: &str, extra: &[&str]) -> Served {
        let urls_file = dir.join("urls.txt");
        let out = dir.join("out");
        let mut cmd = std::process::Command::new(sim().get_program());
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .arg("serve")
            .arg(scenario)
            .arg("--urls-file")
            .arg(&urls_file)
            .arg("--out")
            .arg(&out)
            .arg("--quiet")
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = cmd.spawn().expect("starting sim serve");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut s = Served {
            child: Some(child),
            urls: Vec::new(),
            out,
        };
        loop {
            if let Ok(t) = std::fs::read_to_string(&urls_file)
                && t.ends_with('\n')
            {
                s.urls = t.lines().map(str::to_string).collect();
                return s;
            }
            if let Some(st) = s.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("sim serve exited early: {st}");
            }
            assert!(
                Instant::now() < deadline,
                "sim serve did not write its URLs within 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns summary.json.
    fn stop(mut self) -> Value {
        let mut child = self.child.take().unwrap();
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("sim serve did not stop within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "sim serve exited with {status}");
        let text = std::fs::read_to_string(self.out.join("summary.json")).expect("summary.json written");
        serde_json::from_str(&text).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

type Http = Client<HttpConnector, Full<Bytes>>;

/// A fresh connection per request: the server closes a connection after refusing a body
/// it did not read (413), and a pooled client racing that close reports an incomplete
/// message instead of the answer the test checks.
fn client() -> Http {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http()
}

fn rt() -> tokio::runtime::Runtime {
    fleetsim::live::runtime(Some(2)).unwrap()
}

/// One request: status, the backend header, the whole body.
async fn call(c: &Http, method: &str, url: &str, body: Option<Vec<u8>>) -> (u16, String, String) {
    let req = hyper::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(60), c.request(req))
        .await
        .expect("answered within 60 s")
        .expect("a response");
    let status = resp.status().as_u16();
    let backend = resp
        .headers()
        .get("x-fleetsim-backend")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = tokio::time::timeout(Duration::from_secs(60), resp.into_body().collect())
        .await
        .expect("body within 60 s")
        .expect("a body")
        .to_bytes();
    (status, backend, String::from_utf8(body.to_vec()).unwrap())
}

fn post(v: &Value) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(v).unwrap())
}

fn error_of(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let e = v["error"].clone();
    for k in ["message", "type", "param", "code"] {
        assert!(e.get(k).is_some(), "no error.{k} in {body}");
    }
    e
}

/// `--speed` is checked as the flags are parsed, with `sim load`'s bounds: one line naming
/// the flag, exit 2, nothing started.
#[test]
fn a_bad_speed_is_one_line_naming_the_flag() {
    for bad in ["0", "0.0001", "2e6", "inf", "fast"] {
        let out = sim()
            .args(["serve", "scenarios/burst8.toml", "--speed", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("invalid value '{bad}' for '--speed <SPEED>'")),
            "{err}"
        );
    }
}

#[test]
fn serves_vllms_api_and_answers_bad_requests_with_openai_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "scenarios/burst8.toml", &["--speed", "20"]);
    let u = s.urls[0].clone();
    rt().block_on(async {
        let c = client();
        let (st, be, body) = call(&c, "GET", &format!("{u}/v1/models"), None).await;
        assert_eq!((st, be.as_str()), (200, "backend-0"));
        let model = serde_json::from_str::<Value>(&body).unwrap()["data"][0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        for path in [
            "/health",
            "/version",
            "/get_model_info",
            "/model_info",
            "/get_server_info",
            "/server_info",
            "/get_load",
        ] {
            assert_eq!(call(&c, "GET", &format!("{u}{path}"), None).await.0, 200, "{path}");
        }
        // The render endpoints give one id per token, equal text equal ids.
        let (st, _, body) = call(
            &c,
            "POST",
            &format!("{u}/v1/completions/render"),
            post(&json!({"prompt": "abcd".repeat(40)})),
        )
        .await;
        assert_eq!(st, 200);
        let ids = serde_json::from_str::<Value>(&body).unwrap()["token_ids"].clone();
        assert_eq!(ids.as_array().unwrap().len(), 40);
        assert_eq!(ids[0], ids[39]);
        // Non-streaming completions and chat: usage, finish reason, the backend's name.
        let (st, _, body) = call(
            &c,
            "POST",
            &format!("{u}/v1/completions"),
            post(&json!({"model": model, "prompt": "abcd".repeat(40), "max_tokens": 7, "ignore_eos": true})),
        )
        .await;
        assert_eq!(st, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 7);
        assert_eq!(v["usage"]["prompt_tokens"], 40);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["choices"][0]["text"].as_str().unwrap().chars().count(), 7 * 4);
        assert_eq!(v["system_fingerprint"], "fleetsim:backend-0");
        let (st, _, body) = call(
            &c,
            "POST",
            &format!("{u}/v1/chat/completions"),
            post(
                &json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 30, "min_tokens": 3}),
            ),
        )
        .await;
        assert_eq!(st, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let n = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!((3..=30).contains(&n), "{body}");
        // Errors: malformed JSON, unknown model, oversized body, too long a context, a
        // missing field; each an OpenAI error object.
        let (st, _, body) = call(&c, "POST", &format!("{u}/v1/completions"), Some(b"{not json".to_vec())).await;
        assert_eq!(st, 400);
        assert_eq!(error_of(&body)["type"], "BadRequestError");
        let (st, _, body) = call(
            &c,
            "POST",
            &format!("{u}/v1/completions"),
            post(&json!({"model": "nope", "prompt": "x"})),
        )
        .await;
        assert_eq!(st, 404);
        assert_eq!(error_of(&body)["type"], "NotFoundError");
        // A body past --max-body-bytes is refused as its length is read, before it is sent.
        let (a, closed) = raw(
            &u,
            format!(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
                33 << 20
            )
            .as_bytes(),
            Duration::from_secs(10),
        )
        .await;
        assert!(a.starts_with("HTTP/1.1 413") && closed, "{a}");
        error_of(a.split_once("\r\n\r\n").unwrap().1);
        let (st, _, body) = call(
            &c,
            "POST",
            &format!("{u}/v1/completions"),
            post(&json!({"prompt": "x", "max_tokens": 1_000_000_000u64})),
        )
        .await;
        assert_eq!(st, 400);
        assert!(
            error_of(&body)["message"]
                .as_str()
                .unwrap()
                .contains("maximum context length")
        );
        let (st, _, body) = call(
            &c,
            "POST",
            &format!("{u}/v1/chat/completions"),
            post(&json!({"model": model})),
        )
        .await;
        assert_eq!(st, 400);
        assert_eq!(error_of(&body)["param"], "messages");
        assert_eq!(call(&c, "GET", &format!("{u}/no/such/path"), None).await.0, 404);
        // vLLM's series, with its labels, counting what was served.
        let (st, _, text) = call(&c, "GET", &format!("{u}/metrics"), None).await;
        assert_eq!(st, 200);
        for family in [
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
            "vllm:num_preemptions_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:request_success_total",
            "vllm:time_to_first_token_seconds",
            "vllm:time_per_output_token_seconds",
            "vllm:e2e_request_latency_seconds",
            "vllm:cache_config_info",
        ] {
            assert!(text.contains(&format!("# TYPE {family} ")), "{family} missing:\n{text}");
        }
        let ok =
            format!("vllm:request_success_total{{model_name=\"{model}\",engine=\"0\",finished_reason=\"length\"}} ");
        assert!(text.contains(&ok), "{ok} not in\n{text}");
        let finished = ["stop", "length"]
            .map(|r| sample(&text, "vllm:request_success_total", Some(r)).unwrap())
            .iter()
            .sum::<f64>();
        assert_eq!(finished, 2.0);
        assert!(text.contains(&format!(
            "vllm:e2e_request_latency_seconds_bucket{{model_name=\"{model}\",engine=\"0\",le=\"+Inf\"}} 2.0"
        )));
    });
    let summary = s.stop();
    assert_eq!(summary["requests"]["finished"], 2);
}

/// Streams `prompt` and reads the whole stream: (backend, content tokens, saw usage, saw
/// `[DONE]`).
async fn stream(c: &Http, url: &str, chat: bool, prompt: &str, max_tokens: u32) -> (String, u32, bool, bool) {
    let body = if chat {
        json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "ignore_eos": true,
               "stream": true, "stream_options": {"include_usage": true}})
    } else {
        json!({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true, "stream": true,
               "stream_options": {"include_usage": true}})
    };
    let path = if chat {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    };
    let (st, backend, text) = call(c, "POST", &format!("{url}{path}"), post(&body)).await;
    assert_eq!(st, 200, "{text}");
    let mut tokens = 0;
    let mut usage = false;
    let mut done = false;
    for line in text.split("\n\n").filter(|l| !l.is_empty()) {
        let data = line.strip_prefix("data: ").unwrap_or_else(|| panic!("not SSE: {line}"));
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        if v["usage"].is_object() {
            usage = v["usage"]["completion_tokens"] == max_tokens;
            continue;
        }
        let t = if chat {
            v["choices"][0]["delta"]["content"].as_str()
        } else {
            v["choices"][0]["text"].as_str()
        };
        if t.is_some_and(|t| !t.is_empty()) {
            tokens += 1;
        }
    }
    (backend, tokens, usage, done)
}

#[test]
fn two_thousand_requests_at_500_concurrent_streams_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "scenarios/burst8.toml",
        &[
            "--speed",
            "50",
            "--set",
            "backends.count=8",
            "--set",
            "backends.max_num_seqs=64",
        ],
    );
    let urls = Arc::new(s.urls.clone());
    assert_eq!(urls.len(), 8);
    let per_backend: BTreeMap<String, u64> = rt().block_on(async {
        let c = client();
        let sem = Arc::new(tokio::sync::Semaphore::new(500));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..2000u32 {
            let permit = sem.clone().acquire_owned().await.unwrap();
            let (c, urls) = (c.clone(), urls.clone());
            tasks.spawn(async move {
                let url = &urls[i as usize % urls.len()];
                let prompt = format!("request {i} ").repeat(20);
                let r = stream(&c, url, i % 2 == 0, &prompt, 16).await;
                drop(permit);
                r
            });
        }
        let mut per = BTreeMap::new();
        while let Some(r) = tasks.join_next().await {
            let (backend, tokens, usage, done) = r.unwrap();
            assert_eq!((tokens, usage, done), (16, true, true));
            *per.entry(backend).or_insert(0u64) += 1;
        }
        per
    });
    assert_eq!(per_backend.values().sum::<u64>(), 2000);
    let ports: Vec<u16> = s
        .urls
        .iter()
        .map(|u| u.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    let summary = s.stop();
    // The server's count equals the client's, backend by backend.
    assert_eq!(summary["requests"]["arrived"], 2000);
    assert_eq!(summary["requests"]["finished"], 2000);
    for b in summary["backends"].as_array().unwrap() {
        let name = b["name"].as_str().unwrap();
        assert_eq!(b["requests"].as_u64().unwrap(), per_backend[name], "{name}");
    }
    // A clean stop leaves no port bound.
    for p in ports {
        std::net::TcpListener::bind(("127.0.0.1", p)).unwrap_or_else(|e| panic!("port {p} still bound: {e}"));
    }
}

/// The value of `vllm:NAME` with `finished_reason` (if given) in an exposition.
fn sample(text: &str, name: &str, reason: Option<&str>) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| reason.is_none_or(|r| l.contains(&format!("finished_reason=\"{r}\""))))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn a_client_that_disconnects_mid_stream_frees_its_request() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "scenarios/burst8.toml", &["--speed", "5"]);
    let u = s.urls[1].clone();
    rt().block_on(async {
        let c = client();
        let body = json!({"prompt": "hello ".repeat(50), "max_tokens": 100000, "ignore_eos": true, "stream": true});
        let req = hyper::Request::builder()
            .method("POST")
            .uri(format!("{u}/v1/completions"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
            .unwrap();
        let resp = c.request(req).await.unwrap();
        let mut b = resp.into_body();
        let mut frames = 0;
        while frames < 3 {
            let f = tokio::time::timeout(Duration::from_secs(30), b.frame()).await.unwrap();
            if f.is_some_and(|f| f.is_ok_and(|f| f.is_data())) {
                frames += 1;
            }
        }
        let running = |t: &str| sample(t, "vllm:num_requests_running", None);
        let (_, _, t) = call(&c, "GET", &format!("{u}/metrics"), None).await;
        assert_eq!(running(&t), Some(1.0));
        drop(b);
        // The engine frees it: running back to 0, counted as aborted.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, _, t) = call(&c, "GET", &format!("{u}/metrics"), None).await;
            if running(&t) == Some(0.0) && sample(&t, "vllm:request_success_total", Some("abort")) == Some(1.0) {
                break;
            }
            assert!(Instant::now() < deadline, "the request was not aborted:\n{t}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let summary = s.stop();
    assert_eq!(summary["requests"]["failed"], 1);
    assert_eq!(summary["requests"]["finished"], 0);
}

#[test]
fn the_scenarios_signal_faults_reach_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        dir.path(),
        "faults.toml",
        r#"
name = "serve-faults"
[backends]
count = 3
[router.policy]
kind = "roundrobin"
[[workload.groups]]
name = "g"
sessions = 1
arrival = { kind = "burst", at_s = 0, spread_s = 0 }
input_tokens = 100
output_tokens = 10
[[faults]]
backend = 0
kind = "scrape_fail"
from_s = 0
[[faults]]
backend = 1
kind = "zero_stats"
from_s = 0
"#,
    );
    let s = Served::start(dir.path(), scenario.to_str().unwrap(), &["--speed", "10"]);
    rt().block_on(async {
        let c = client();
        let (st, _, body) = call(&c, "GET", &format!("{}/metrics", s.urls[0]), None).await;
        assert_eq!(st, 500);
        error_of(&body);
        let (st, _, text) = call(&c, "GET", &format!("{}/metrics", s.urls[1]), None).await;
        assert_eq!(st, 200);
        assert!(
            text.contains("sglang:num_requests_running{") && !text.lines().any(|l| l.starts_with("vllm:")),
            "{text}"
        );
        let (st, _, text) = call(&c, "GET", &format!("{}/metrics", s.urls[2]), None).await;
        assert_eq!(st, 200);
        assert!(text.contains("vllm:num_requests_running{"));
    });
    s.stop();
}

/// Whether a request to `url` gets any HTTP answer (a fresh connection each time).
async fn answers(url: &str) -> bool {
    let c = client();
    let req = hyper::Request::get(format!("{url}/health"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    matches!(
        tokio::time::timeout(Duration::from_secs(10), c.request(req)).await,
        Ok(Ok(_))
    )
}

#[test]
fn a_restart_breaks_streams_refuses_connections_and_comes_back_on_the_same_port() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(
        dir.path(),
        "restart.toml",
        r#"
name = "serve-restart"
[backends]
count = 2
[router.policy]
kind = "roundrobin"
[[workload.groups]]
name = "g"
sessions = 1
arrival = { kind = "burst", at_s = 0, spread_s = 0 }
input_tokens = 100
output_tokens = 10
[[fleet_events]]
at_s = 50
backend = 1
kind = "restart"
downtime_s = 100
[[fleet_events]]
at_s = 50
backend = 0
kind = "drain"
"#,
    );
    let s = Served::start(dir.path(), scenario.to_str().unwrap(), &["--speed", "10"]);
    let (u0, u1) = (s.urls[0].clone(), s.urls[1].clone());
    rt().block_on(async {
        let c = client();
        // A stream on backend-1 that outlives the restart breaks with it.
        let body = json!({"prompt": "hello ".repeat(50), "max_tokens": 100000, "ignore_eos": true, "stream": true});
        let req = hyper::Request::post(format!("{u1}/v1/completions"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
            .unwrap();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let broke = tokio::time::timeout(Duration::from_secs(60), resp.into_body().collect()).await;
        assert!(matches!(broke, Ok(Err(_))), "the stream should break at the restart");
        // Down: refused within a moment (the engine fails the stream and the listener
        // closes on two tasks, so a connection may still land between the two), well inside
        // the 10 s of wall time the downtime lasts; the drained backend-0 (idle) is gone
        // for good.
        let deadline = Instant::now() + Duration::from_secs(3);
        while answers(&u1).await {
            assert!(Instant::now() < deadline, "backend-1 answers during its downtime");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while answers(&u0).await {
            assert!(Instant::now() < deadline, "backend-0 still answers after its drain");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Back after the downtime, on the same URL.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !answers(&u1).await {
            assert!(Instant::now() < deadline, "backend-1 did not come back");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (st, backend, _) = call(
            &c,
            "POST",
            &format!("{u1}/v1/completions"),
            post(&json!({"prompt": "after", "max_tokens": 2, "ignore_eos": true})),
        )
        .await;
        assert_eq!((st, backend.as_str()), (200, "backend-1"));
    });
    let summary = s.stop();
    assert_eq!(summary["requests"]["failed"], 1);
    assert_eq!(summary["requests"]["finished"], 1);
}

/// Writes `bytes` on a fresh connection to `url` and reads what comes back until the
/// server closes it or `wait` passes: (the answer, closed by the server).
async fn raw(url: &str, bytes: &[u8], wait: Duration) -> (String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(wait, s.read_to_end(&mut out)).await.is_ok();
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// A POST of `body` to `path` with its length, on a connection closed after the answer.
fn post_raw(path: &str, body: &[u8]) -> Vec<u8> {
    let mut b = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    b.extend_from_slice(body);
    b
}

/// `/health` and a short completion, each answered 200 within a second.
async fn still_answers(c: &Http, u: &str) {
    let health = tokio::time::timeout(Duration::from_secs(1), call(c, "GET", &format!("{u}/health"), None)).await;
    assert_eq!(health.expect("/health within a second").0, 200);
    let body = json!({"prompt": "Hello there", "max_tokens": 3, "ignore_eos": true});
    let done = tokio::time::timeout(
        Duration::from_secs(1),
        call(c, "POST", &format!("{u}/v1/completions"), post(&body)),
    )
    .await;
    let (st, _, text) = done.expect("a completion within a second");
    assert_eq!(st, 200, "{text}");
}

/// No single request stops a server: the request that once made it stop answering
/// (max_tokens 2^64 - 1 with ignore_eos, which wrapped past the context check), the
/// numbers a client may get wrong, a body that claims 2^31 bytes, nested JSON, a bad chunk
/// size, a body that never ends and a thousand connections that send headers and never a
/// body: each is refused with vLLM's error naming the field (or closed after its time-out),
/// while `/health` and a completion still answer within a second; then SIGTERM stops the
/// server and `--out` is written.
#[test]
fn no_single_request_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(
        dir.path(),
        "scenarios/burst8.toml",
        &["--speed", "20", "--header-timeout", "1", "--body-timeout", "1"],
    );
    let u = s.urls[0].clone();
    let max_len: u64 = 29205 * 16;
    rt().block_on(async {
        let c = client();
        let cases: Vec<(Value, &str)> = vec![
            (
                json!({"prompt": "Hello there", "max_tokens": 18_446_744_073_709_551_615u64, "ignore_eos": true}),
                "max_tokens",
            ),
            (
                json!({"prompt": "Hello there", "max_tokens": 18_446_744_073_709_551_615u64}),
                "max_tokens",
            ),
            (
                json!({"prompt": "Hello there", "max_tokens": 4_294_967_296u64, "ignore_eos": true}),
                "max_tokens",
            ),
            (
                json!({"prompt": "Hello there", "max_tokens": max_len, "ignore_eos": true}),
                "max_tokens",
            ),
            (json!({"prompt": "Hello there", "max_tokens": 1e300}), "max_tokens"),
            (json!({"prompt": "Hello there", "max_tokens": -1}), "max_tokens"),
            (json!({"prompt": "Hello there", "max_tokens": 2.5}), "max_tokens"),
            (json!({"prompt": "Hello there", "max_tokens": "many"}), "max_tokens"),
            (json!({"prompt": "Hello there", "min_tokens": -5}), "min_tokens"),
            (json!({"prompt": "Hello there", "n": 1e9}), "n"),
            (json!({"prompt": "Hello there", "temperature": -1}), "temperature"),
            (json!({"prompt": "Hello there", "top_p": 7}), "top_p"),
            (json!({"prompt": "Hello there", "seed": 1e30}), "seed"),
            (
                json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 1e19}),
                "max_completion_tokens",
            ),
        ];
        for (body, field) in &cases {
            let path = if body.get("messages").is_some() {
                "/v1/chat/completions"
            } else {
                "/v1/completions"
            };
            let (st, _, text) = call(&c, "POST", &format!("{u}{path}"), post(body)).await;
            assert_eq!(st, 400, "{body}: {text}");
            assert_eq!(error_of(&text)["param"], *field, "{body}: {text}");
        }
        // A body claiming 2^31 bytes: refused at once, naming the limit.
        let (a, _) = raw(
            &u,
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2147483648\r\n\r\n{\"prompt\"",
            Duration::from_secs(5),
        )
        .await;
        assert!(a.starts_with("HTTP/1.1 413") && a.contains("--max-body-bytes"), "{a}");
        // A malformed chunk size: 400 naming it (not 413).
        let (a, _) = raw(
            &u,
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            Duration::from_secs(5),
        )
        .await;
        assert!(a.starts_with("HTTP/1.1 400") && a.contains("chunk size"), "{a}");
        // JSON nested past serde_json's depth limit.
        let nested = [vec![b'['; 100_000], vec![b']'; 100_000]].concat();
        let (a, _) = raw(&u, &post_raw("/v1/completions", &nested), Duration::from_secs(5)).await;
        assert!(a.starts_with("HTTP/1.1 400") && a.contains("recursion limit"), "{a}");
        // A body that never ends: 408 after --body-timeout, and the connection closed.
        let (a, closed) = raw(
            &u,
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n",
            Duration::from_secs(10),
        )
        .await;
        assert!(
            a.starts_with("HTTP/1.1 408") && a.contains("--body-timeout") && closed,
            "{a}"
        );
        // A thousand idle connections: half send part of their headers, half all of them
        // and no body. The server still answers, and closes them all after its time-outs.
        let addr = u.trim_start_matches("http://").to_string();
        let mut idle = Vec::new();
        for i in 0..1000 {
            use tokio::io::AsyncWriteExt;
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let head: &[u8] = if i % 2 == 0 {
                b"GET /health HTTP/1.1\r\nhost: x\r\n"
            } else {
                b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n"
            };
            s.write_all(head).await.unwrap();
            idle.push(s);
        }
        still_answers(&c, &u).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        for mut s in idle {
            use tokio::io::AsyncReadExt;
            let mut sink = Vec::new();
            let left = deadline.saturating_duration_since(Instant::now());
            let closed = tokio::time::timeout(left, s.read_to_end(&mut sink)).await.is_ok();
            assert!(closed, "an idle connection still open 20 s on");
        }
        still_answers(&c, &u).await;
    });
    let started = Instant::now();
    let summary = s.stop();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "SIGTERM took {:?}",
        started.elapsed()
    );
    assert_eq!(summary["requests"]["finished"], 2);
}

/// Requests as long as the context allows, many of them, at a speed the engines cannot
/// keep up with: `/health` answers within a second all along, a client that leaves frees
/// its request, and SIGTERM stops the server (the engine thread answers a stop between two
/// slices of its work, however far behind it is).
#[test]
fn long_requests_at_full_speed_leave_the_server_answering() {
    let dir = tempfile::tempdir().unwrap();
    let s = Served::start(dir.path(), "scenarios/burst8.toml", &["--speed", "1000000"]);
    let u = s.urls[0].clone();
    let max_len: u64 = 29205 * 16;
    rt().block_on(async {
        let c = client();
        let mut streams = Vec::new();
        for i in 0..16 {
            let body =
                json!({"prompt": format!("huge {i} "), "max_tokens": max_len - 4, "ignore_eos": true, "stream": true});
            let req = hyper::Request::post(format!("{u}/v1/completions"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
                .unwrap();
            let resp = tokio::time::timeout(Duration::from_secs(5), c.request(req))
                .await
                .expect("headers within 5 s")
                .unwrap();
            assert_eq!(resp.status(), 200);
            streams.push(resp);
        }
        for _ in 0..5 {
            let health =
                tokio::time::timeout(Duration::from_secs(1), call(&c, "GET", &format!("{u}/health"), None)).await;
            assert_eq!(health.expect("/health within a second").0, 200);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(streams);
        // The engines catch up with the aborts, and a short request is served.
        let body = json!({"prompt": "Hello there", "max_tokens": 3, "ignore_eos": true});
        let (st, _, text) = tokio::time::timeout(
            Duration::from_secs(30),
            call(&c, "POST", &format!("{u}/v1/completions"), post(&body)),
        )
        .await
        .expect("a completion once the long requests left");
        assert_eq!(st, 200, "{text}");
    });
    let started = Instant::now();
    let summary = s.stop();
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "SIGTERM took {:?}",
        started.elapsed()
    );
    let r = &summary["requests"];
    assert_eq!(r["arrived"], 17, "{r}");
    let ended = r["finished"].as_u64().unwrap() + r["failed"].as_u64().unwrap();
    assert_eq!(ended, 17, "{r}");
}

/// `--kv-events`: a ZMQ subscriber on loopback receives vLLM's frames for a request's
/// blocks: `[topic, seq 0, msgpack [ts, [BlockStored, ...], 0]]`, each block's token ids
/// those `/tokenize` gives for the prompt, chained by `parent_block_hash`.
#[test]
fn kv_events_reach_a_zmq_subscriber_as_vllm_sends_them() {
    use zeromq::{Socket, SocketRecv};
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ep = format!("tcp://127.0.0.1:{port}");
    let s = Served::start(
        dir.path(),
        "scenarios/burst8.toml",
        &["--set", "backends.count=1", "--speed", "5", "--kv-events", &ep],
    );
    let u = s.urls[0].clone();
    rt().block_on(async {
        let mut sub = zeromq::SubSocket::new();
        sub.connect(&ep).await.expect("connects");
        sub.subscribe("").await.expect("subscribes");
        // The subscription reaches the publisher before anything is published.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let c = client();
        let prompt = "hello ".repeat(50);
        let (_, _, tok) = call(&c, "POST", &format!("{u}/tokenize"), post(&json!({"prompt": prompt}))).await;
        let ids: Vec<u64> = serde_json::from_str::<Value>(&tok).unwrap()["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert!(ids.len() >= 32, "{} tokens", ids.len());
        let (st, _, _) = call(
            &c,
            "POST",
            &format!("{u}/v1/completions"),
            post(&json!({"prompt": prompt, "max_tokens": 1})),
        )
        .await;
        assert_eq!(st, 200);
        let m = tokio::time::timeout(Duration::from_secs(30), sub.recv())
            .await
            .expect("an event batch within 30 s")
            .expect("a message");
        let frames = m.into_vec();
        assert_eq!(frames.len(), 3);
        assert!(frames[0].is_empty(), "the default topic is empty");
        assert_eq!(frames[1].as_ref(), 0u64.to_be_bytes());
        let batch = rmpv::decode::read_value(&mut frames[2].as_ref()).expect("msgpack");
        let a = batch.as_array().expect("[ts, events, rank]");
        assert_eq!((a.len(), a[2].as_u64()), (3, Some(0)));
        let get = |ev: &rmpv::Value, k: &str| -> rmpv::Value {
            ev.as_map()
                .unwrap()
                .iter()
                .find(|(key, _)| key.as_str() == Some(k))
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {k}"))
        };
        let evs = a[1].as_array().unwrap();
        assert!(evs.len() >= 2, "{evs:?}");
        for (i, ev) in evs.iter().take(2).enumerate() {
            assert_eq!(get(ev, "type").as_str(), Some("BlockStored"));
            assert_eq!(get(ev, "block_size").as_u64(), Some(16));
            let toks: Vec<u64> = get(ev, "token_ids")
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t.as_u64())
                .collect();
            assert_eq!(toks, ids[i * 16..(i + 1) * 16]);
        }
        assert!(get(&evs[0], "parent_block_hash").is_nil());
        assert_eq!(get(&evs[1], "parent_block_hash"), get(&evs[0], "block_hashes")[0]);
    });
    s.stop();
}
