//! Runs as vLLM's metrics, the alert rules proven on simulated runs with promtool, and
//! `sim observe` against a real Prometheus server loaded with a simulated run. The tests
//! that need Debian's `prometheus` package (`promtool`, `prometheus`) say so and skip where
//! it is absent; `.ci/run` installs it.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command as Proc, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use fleetsim::live::client::get_text;

fn sim() -> Command {
    Command::cargo_bin("sim").unwrap()
}

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
        .display()
        .to_string()
}

/// Whether `tool` runs; if not, says why the test skips.
fn have(tool: &str) -> bool {
    let ok = Proc::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        crate::common::skip(
            &format!("prometheus::* ({tool})"),
            &format!("`{tool}` not found (Debian: apt-get install -y prometheus; .ci/run installs it)"),
        );
    }
    ok
}

fn run_ok(cmd: &mut Proc) -> String {
    let o = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// `sim alerts` on a scenario: rules and their promtool test, both checked by promtool;
/// returns the first firing instant of each alert that fires (from `sim alerts`' report).
fn proven(name: &str, sets: &[&str]) -> Vec<(String, f64)> {
    let dir = tempfile::tempdir().unwrap();
    let (rules, test) = (dir.path().join("rules.yml"), dir.path().join("test.yml"));
    let mut c = sim();
    c.arg("alerts")
        .arg(scenario(name))
        .arg("-o")
        .arg(&rules)
        .arg("--test-out")
        .arg(&test);
    for s in sets {
        c.args(["--set", s]);
    }
    let out = String::from_utf8(c.assert().success().get_output().stdout.clone()).unwrap();
    run_ok(Proc::new("promtool").args(["check", "rules"]).arg(&rules));
    let t = run_ok(Proc::new("promtool").args(["test", "rules"]).arg(&test));
    assert!(t.contains("SUCCESS"), "{t}");
    out.lines()
        .filter_map(|l| {
            let (alert, rest) = l.trim().split_once(": fires ")?;
            let first = rest.split(" s").next()?.parse().ok()?;
            Some((alert.to_string(), first))
        })
        .collect()
}

#[test]
fn alerts_fire_on_the_failures_and_not_on_the_fixes() {
    if !have("promtool") {
        return;
    }
    // burst8: the split starts at the worst moment (41.2 s, the burst) and lasts 196 s; the
    // alert fires once it has held 60 s (six 10 s engine-stats intervals), at the first
    // 15 s evaluation after.
    let b8 = proven("burst8.toml", &[]);
    assert_eq!(b8.len(), 1, "{b8:?}");
    assert_eq!(b8[0].0, "FleetsimIdleWhileQueued");
    assert!((41.2 + 60.0..=41.2 + 60.0 + 15.0).contains(&b8[0].1), "{b8:?}");
    assert_eq!(
        proven("burst8-fixed.toml", &[]),
        vec![],
        "the fix's shorter splits stay below the hold"
    );
    let z = proven("fault-zero-stats.toml", &[]);
    assert_eq!(
        z.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
        ["FleetsimEngineStatsAllZero"]
    );
    let s = proven("skew6.toml", &[]);
    assert_eq!(
        s.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
        ["FleetsimRequestShareSkew"]
    );
    assert_eq!(proven("skew6.toml", &["router.policy.kind=roundrobin"]), vec![]);
}

/// The study's KEDA scale-up: the two pods Ready at 160 s serve nothing while backend-1
/// queues, and the new-replica alert fires once that has held its 60 s; with the routing
/// fix no replica is left idle (and before Ready a pod exports nothing).
#[test]
fn the_new_replica_alert_fires_on_the_scale_up_that_bought_nothing() {
    if !have("promtool") {
        return;
    }
    const NEW_IDLE: &str = "FleetsimNewReplicaIdleWhileQueued";
    let k = proven("autoscale-keda.toml", &[]);
    let first = k.iter().find(|(a, _)| a == NEW_IDLE).map(|x| x.1);
    assert!(
        first.is_some_and(|t| (160.0 + 60.0..=160.0 + 60.0 + 15.0).contains(&t)),
        "{k:?}"
    );
    let fixed = proven("autoscale-keda.toml", &["router.policy.fallback=leastinflight"]);
    assert!(fixed.iter().all(|(a, _)| a != NEW_IDLE), "{fixed:?}");
}

#[test]
fn a_run_exports_vllm_series() {
    let dir = tempfile::tempdir().unwrap();
    sim()
        .args([
            "run",
            &scenario("burst8.toml"),
            "--quiet",
            "--openmetrics",
            "--metrics-step",
            "5",
            "--out",
        ])
        .arg(dir.path().join("r"))
        .assert()
        .success();
    let om = std::fs::read_to_string(dir.path().join("r/metrics.om")).unwrap();
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# TYPE vllm:request_success counter\n"));
    // 160 of 200 requests finished on backend-1 by the last sample (255 s).
    let last = r#"vllm:request_success_total{job="vllm",instance="backend-1:8000",model_name="default",engine="0",finished_reason="stop"} 160 255"#;
    assert!(om.contains(&format!("{last}\n")), "{}", &om[..2000]);
    assert!(om.contains(r#"vllm:e2e_request_latency_seconds_bucket{job="vllm",instance="backend-0:8000",model_name="default",engine="0",le="+Inf"} 40 255"#));
}

#[test]
fn bad_observe_and_alerts_input_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1]]}]}}"#,
    )
    .unwrap();
    for args in [
        vec![
            "observe".to_string(),
            "--file".into(),
            bad.display().to_string(),
            "--slots".into(),
            "4".into(),
        ],
        vec!["observe".into()],
        vec!["alerts".into()],
        vec!["alerts".into(), "--pool".into(), "a=0".into()],
        vec![
            "alerts".into(),
            "--pool".into(),
            "a=4".into(),
            "--selector".into(),
            "x}".into(),
        ],
    ] {
        let o = sim().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

/// Kills the server it holds when dropped (the test's own child, by its handle).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn observe_on_prometheus_agrees_with_the_simulation() {
    if !have("promtool") || !have("prometheus") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let epoch = 1_700_000_000u64;
    sim()
        .args([
            "run",
            &scenario("burst8.toml"),
            "--quiet",
            "--openmetrics",
            "--metrics-epoch",
            &epoch.to_string(),
        ])
        .arg("--out")
        .arg(d.join("run"))
        .assert()
        .success();
    run_ok(
        Proc::new("promtool")
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(d.join("run/metrics.om"))
            .arg(d.join("data")),
    );
    std::fs::write(
        d.join("prometheus.yml"),
        "global:\n  scrape_interval: 15s\nscrape_configs: []\n",
    )
    .unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let child = Proc::new("prometheus")
        .arg(format!("--config.file={}", d.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", d.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--storage.tsdb.retention.time=100y")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Server(child);
    let t0 = Instant::now();
    let rt = fleetsim::live::runtime(Some(1)).unwrap();
    let client = fleetsim::live::client::client(None).unwrap();
    let ready_url = format!("{base}/-/ready");
    loop {
        let answer = get_text(&client, &ready_url, &[], Duration::from_secs(5), 1 << 20);
        let ready = rt.block_on(answer).is_ok_and(|(status, _)| status == 200);
        if ready {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "prometheus not ready on {base} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("run/summary.json")).unwrap()).unwrap();
    let sim_iwq = summary["idle_while_queued_s"].as_f64().unwrap();
    let sim_stranded = summary["stranded_slot_s"].as_f64().unwrap();
    let end = epoch + summary["sim_time_s"].as_f64().unwrap().ceil() as u64;
    let step = 1.0;
    let out = sim()
        .args([
            "observe",
            "--prometheus",
            &base,
            "--from",
            &epoch.to_string(),
            "--to",
            &end.to_string(),
        ])
        .args(["--step", "1", "--slots", "4", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let r: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let obs_iwq = r["idle_while_queued_s"].as_f64().unwrap();
    let obs_stranded = r["stranded_slot_s"].as_f64().unwrap();
    eprintln!(
        "burst8 through Prometheus at {step} s: idle_while_queued_s {obs_iwq} (simulation {sim_iwq}), \
         stranded_slot_s {obs_stranded} (simulation {sim_stranded})"
    );
    assert!((obs_iwq - sim_iwq).abs() <= step, "{obs_iwq} vs {sim_iwq}");
    // Each change of min(waiting, free) moves by less than a step: 2% on burst8's few changes.
    assert!(
        (obs_stranded - sim_stranded).abs() <= 0.02 * sim_stranded,
        "{obs_stranded} vs {sim_stranded}"
    );
    let shares: Vec<f64> = r["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["share"].as_f64().unwrap())
        .collect();
    assert_eq!(shares, [0.2, 0.8]);
}
