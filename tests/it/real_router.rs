//! End to end with a real router: `sim serve` (the emulated fleet), vllm-project's router
//! from PyPI (`vllm-router`, found through `FLEETSIM_VLLM_ROUTER`; `.ci/run` installs it in a
//! venv) and `sim load`, all on loopback and bounded in time. Also `sim load`'s refusals,
//! which need no router.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::common::{sim, write};

/// Two backends, round robin in the simulation, six agents sharing a system prompt.
const SCENARIO: &str = r#"
name = "real-router"
seed = 1
[backends]
count = 2
max_num_seqs = 4
[router]
chars_per_token = 4
policy.kind = "roundrobin"
[[workload.groups]]
name = "agents"
sessions = 6
arrival = { kind = "burst", at_s = 0, spread_s = 1 }
turns = 4
system_prompt_tokens = 400
first_input_tokens = 200
input_tokens = 100
output_tokens = 40
think_time_s = 0.5
"#;

/// A child process killed when dropped (a failed assertion leaves nothing running).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The router binary, or `None` with a message saying why the test skips.
fn router() -> Option<PathBuf> {
    match std::env::var_os("FLEETSIM_VLLM_ROUTER") {
        Some(p) if Path::new(&p).is_file() => Some(PathBuf::from(p)),
        Some(p) => {
            crate::common::skip(
                "real_router::*",
                &format!("FLEETSIM_VLLM_ROUTER={} is not a file", Path::new(&p).display()),
            );
            None
        }
        None => {
            crate::common::skip(
                "real_router::*",
                "set FLEETSIM_VLLM_ROUTER to vllm-router from PyPI (python3 -m venv v && \
                 v/bin/pip install vllm-router==0.1.17; .ci/run does)",
            );
            None
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until `f` holds, at most `limit`.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn http_ok(url: &str) -> bool {
    // The test needs no HTTP client of its own: `curl` where present, else a TCP connect.
    match Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", url])
        .output()
    {
        Ok(o) => o.stdout == b"200",
        Err(_) => {
            let addr = url.trim_start_matches("http://").split('/').next().unwrap_or("");
            std::net::TcpStream::connect(addr).is_ok()
        }
    }
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

#[test]
fn vllm_router_round_robin_between_sim_serve_and_sim_load() {
    let Some(router_bin) = router() else { return };
    let dir = tempfile::tempdir().unwrap();
    let scen = write(dir.path(), "real-router.toml", SCENARIO);
    let urls = dir.path().join("urls");
    let served = dir.path().join("served");
    let loaded = dir.path().join("loaded");
    let sim_bin = assert_cmd::cargo::cargo_bin("sim");
    let serve = Guard(
        Command::new(&sim_bin)
            .args(["serve", scen.to_str().unwrap(), "--port-base", "0", "--quiet"])
            .arg("--urls-file")
            .arg(&urls)
            .arg("--out")
            .arg(&served)
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("sim serve's URL file", Duration::from_secs(30), || {
        std::fs::read_to_string(&urls).is_ok_and(|t| t.lines().count() == 2)
    });
    let backends: Vec<String> = std::fs::read_to_string(&urls)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let port = free_port();
    let _router = Guard(
        Command::new(&router_bin)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--policy",
                "round_robin",
            ])
            .args([
                "--prometheus-host",
                "127.0.0.1",
                "--prometheus-port",
                &free_port().to_string(),
            ])
            .arg("--worker-urls")
            .args(&backends)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let target = format!("http://127.0.0.1:{port}");
    wait_for("the router's /health", Duration::from_secs(60), || {
        http_ok(&format!("{target}/health"))
    });
    let out = Command::new(&sim_bin)
        .args([
            "load",
            scen.to_str().unwrap(),
            "--target",
            &target,
            "--duration",
            "60",
            "--quiet",
        ])
        .arg("--out")
        .arg(&loaded)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sim load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Stop the fleet the way an operator does; it writes its results on SIGTERM.
    let pid = serve.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    wait_for("sim serve's results", Duration::from_secs(30), || {
        served.join("summary.json").is_file()
    });

    let s = json(&loaded.join("summary.json"));
    assert_eq!(s["kind"], "load");
    assert_eq!(s["requests"]["planned"], 24);
    assert_eq!(s["requests"]["finished"], 24, "{s:#}");
    // Round robin over two backends, one client: the split is even to one request.
    let shares: Vec<(String, u64)> = s["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap().to_string(), b["requests"].as_u64().unwrap()))
        .collect();
    let names: Vec<&str> = shares.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["backend-0", "backend-1"], "{shares:?}");
    assert!(shares[0].1.abs_diff(shares[1].1) <= 1, "{shares:?}");
    assert!(s["ttft_s"]["p50"].as_f64().unwrap() > 0.0);
    // Every output was the length asked for.
    assert_eq!(s["output_tokens_ratio"], 1.0, "{s:#}");

    // The server counted what the client counted.
    let v = json(&served.join("summary.json"));
    assert_eq!(v["requests"]["finished"], 24, "{v:#}");
    let csv = std::fs::read_to_string(loaded.join("requests.csv")).unwrap();
    assert_eq!(csv.lines().count(), 25);
    assert!(csv.lines().skip(1).all(|l| l.contains(",finished,200,")), "{csv}");

    // Side by side with the simulation of the same scenario.
    let simulated = dir.path().join("simulated");
    sim()
        .args(["run", scen.to_str().unwrap(), "--quiet", "--out"])
        .arg(&simulated)
        .assert()
        .success();
    // Side by side, then the verdict: exit 0 when every shown figure is within 10 %, 1 when
    // one is not (latencies through a real router on a busy machine may differ more).
    let cmp = sim().arg("compare").arg(&loaded).arg(&simulated).output().unwrap();
    let table = String::from_utf8(cmp.stdout).unwrap();
    let within = table.contains("verdict: ") && !table.contains("beyond it:");
    assert_eq!(cmp.status.code(), Some(if within { 0 } else { 1 }), "{table}");
    assert!(table.contains("| requests finished | 24 | 24 |"), "{table}");
    assert!(
        table.contains("| share backend-0 | 12 (50.0%) | 12 (50.0%) |"),
        "{table}"
    );
}

#[test]
fn unreachable_target_is_one_error_exit_2() {
    let port = free_port(); // bound and released: nothing listens there
    let out = sim()
        .args([
            "load",
            "scenarios/burst8.toml",
            "--quiet",
            "--target",
            &format!("http://127.0.0.1:{port}"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("--target http://127.0.0.1:{port}: cannot reach it")),
        "{err}"
    );
}

#[test]
fn bad_flags_name_the_flag() {
    for (args, needle) in [
        (
            vec!["--target", "http://127.0.0.1:9", "--speed", "0"],
            "invalid value '0' for '--speed <SPEED>': expected simulated seconds per wall second, from 0.001 to 1000000",
        ),
        (vec!["--target", "ftp://x", "--speed", "1"], "--target ftp://x"),
        (vec!["--target", "not a url"], "--target not a url"),
        (
            vec!["--target", "http://127.0.0.1:9", "--duration", "0"],
            "--duration 0",
        ),
    ] {
        let out = sim()
            .args(["load", "scenarios/burst8.toml"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
