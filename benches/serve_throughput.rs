//! `sim serve` throughput and timing on this machine (a benchmark, not a test: it asserts
//! nothing about speed). Starts the release `sim serve` with 8 backends, drives it with
//! streaming completions from a hyper client on the same machine, and prints requests/s,
//! streamed tokens/s, and how late the server wrote each token against the engine's
//! schedule (from the server's `serve.json`).
//!
//! ```sh
//! cargo build --release && cargo bench --bench serve_throughput
//! # options (environment): SERVE_REQUESTS=4000 SERVE_CONCURRENCY=200 SERVE_TOKENS=64
//! #                        SERVE_SPEED=1000 SERVE_MAX_NUM_SEQS=256
//! ```
//!
//! Two settings are worth running: a high `SERVE_SPEED` (steps take microseconds of wall
//! time, so the HTTP stack and the client are the limit) and `SERVE_SPEED=1` (real time:
//! the engine's schedule is the limit, and the lateness is the figure of interest).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo bench` passes --bench; nothing else is read from the command line.
    let requests = env("SERVE_REQUESTS", 4000);
    let concurrency = env("SERVE_CONCURRENCY", 200) as usize;
    let tokens = env("SERVE_TOKENS", 64);
    let speed = std::env::var("SERVE_SPEED").unwrap_or_else(|_| "1000".into());
    let seqs = env("SERVE_MAX_NUM_SEQS", 256);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/sim");
    assert!(bin.exists(), "build the release binary first: cargo build --release");
    let dir = std::env::temp_dir().join(format!("fleetsim-serve-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let urls_file = dir.join("urls.txt");
    let out = dir.join("out");
    let mut child = Command::new(&bin)
        .current_dir(&root)
        .args(["serve", "scenarios/burst8.toml", "--quiet", "--speed", &speed])
        .args([
            "--set",
            "backends.count=8",
            "--set",
            &format!("backends.max_num_seqs={seqs}"),
        ])
        .arg("--urls-file")
        .arg(&urls_file)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .spawn()
        .expect("starting sim serve");
    let t0 = Instant::now();
    let urls: Vec<String> = loop {
        if let Ok(t) = std::fs::read_to_string(&urls_file)
            && t.ends_with('\n')
        {
            break t.lines().map(str::to_string).collect();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "sim serve did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    let rt = fleetsim::live::runtime(None).unwrap();
    let urls = Arc::new(urls);
    let (wall, streamed, per_backend) = rt.block_on(async {
        let c: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        let start = Instant::now();
        for i in 0..requests {
            let permit = sem.clone().acquire_owned().await.unwrap();
            let (c, urls) = (c.clone(), urls.clone());
            tasks.spawn(async move {
                let url = format!("{}/v1/completions", urls[i as usize % urls.len()]);
                let body = format!(
                    r#"{{"prompt":"{}","max_tokens":{tokens},"ignore_eos":true,"stream":true}}"#,
                    format!("bench request {i} ").repeat(16)
                );
                let req = hyper::Request::post(url)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                let resp = c.request(req).await.expect("a response");
                let backend = resp.headers()[fleetsim::live::wire::BACKEND_HEADER]
                    .to_str()
                    .unwrap()
                    .to_string();
                let mut body = resp.into_body();
                let mut events = 0u64;
                while let Some(f) = body.frame().await {
                    if let Ok(d) = f.expect("a frame").into_data() {
                        events += d.windows(6).filter(|w| w == b"data: ").count() as u64;
                    }
                }
                drop(permit);
                (backend, events.saturating_sub(1))
            });
        }
        let mut streamed = 0u64;
        let mut per = BTreeMap::new();
        while let Some(r) = tasks.join_next().await {
            let (b, n) = r.unwrap();
            streamed += n;
            *per.entry(b).or_insert(0u64) += 1;
        }
        (start.elapsed(), streamed, per)
    });
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
    let serve: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("serve.json")).unwrap()).unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let s = wall.as_secs_f64();
    println!(
        "sim serve, 8 backends, speed {speed}, max_num_seqs {seqs}: {requests} streamed completions of {tokens} tokens \
         at {concurrency} concurrent streams"
    );
    println!(
        "wall {s:.2} s: {:.0} requests/s, {:.0} streamed tokens/s",
        requests as f64 / s,
        streamed as f64 / s
    );
    println!(
        "server: {} finished of {} arrived; per backend {:?}",
        summary["requests"]["finished"], summary["requests"]["arrived"], per_backend
    );
    let l = &serve["token_lateness_ms"];
    println!(
        "token written - engine schedule, ms: p50 {} p90 {} p99 {} max {} ({} tokens)",
        l["p50"], l["p90"], l["p99"], l["max"], l["count"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
