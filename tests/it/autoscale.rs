//! Autoscalers in the loop, end to end: hand-computed replica sequences of an HPA and of
//! KEDA on a fleet whose queue is known exactly (one c-server backend, 13 requests at 5 s,
//! 100 s each, no network delay: the waiting gauge is 12 until 105 s and one less at every
//! completion, 105 + 100 k), scraped by Prometheus every 30 s; the burst8 study scenario;
//! determinism; and the refusals.

use crate::common::*;

/// One backend, one slot, 13 one-turn sessions at 5 s of 100 s each, and `autoscaler`.
fn queue(autoscaler: &str) -> String {
    format!(
        r#"
seed = 1
[backends]
count = 1
model = "queueing"
slots = 1
[network]
dispatch_latency_s = 0
response_latency_s = 0
[router.policy]
kind = "roundrobin"
[[workload.groups]]
name = "batch"
sessions = 13
arrival = {{ kind = "burst", at_s = 5 }}
input_tokens = 1
output_tokens = 1
service_time_s = 100
[autoscaler]
{autoscaler}
"#
    )
}

fn events(s: &fleetsim::metrics::Summary) -> Vec<(f64, u32, u32, Option<f64>)> {
    s.autoscale
        .as_ref()
        .unwrap()
        .scale_events
        .iter()
        .map(|e| (e.t_s, e.from, e.to, e.metric))
        .collect()
}

/// HPA, External AverageValue 5, legacy path (no behavior), min 1, max 3, pods Ready 100 s
/// after creation. At 30 s the scrape reads 12: ceil(12 / 5) = 3, within max(2 x 1, 4):
/// 1 -> 3. The raw proposal stays 3 while the scraped queue is 11 (last read by the sync at
/// 195 s), then 2; the 300 s window lets it down at 495 s (3 -> 2, the sample of 480 s
/// reads 8). 2 holds until the last raw 2 (sync 705 s, sample 690 s: 6) expires: 1005 s,
/// 2 -> 1 (sample 990 s: 3). The new pods are listed at 130 s but no request arrives after
/// 5 s: neither ever serves, and each idles while the first backend queues.
#[test]
fn an_hpa_reproduces_its_hand_computed_sequence() {
    let text = queue(
        "kind = \"hpa\"\nquery = \"sum(vllm:num_requests_waiting)\"\ntarget = 5\nmin_replicas = 1\nmax_replicas = 3\nstartup_s = 100",
    );
    let (s, w) = inline(&text, &[]);
    let r = run_full(&s, &w).summary;
    assert_eq!(
        events(&r),
        vec![
            (30.0, 1, 3, Some(12.0)),
            (495.0, 3, 2, Some(8.0)),
            (1005.0, 2, 1, Some(3.0))
        ]
    );
    let a = r.autoscale.as_ref().unwrap();
    assert_eq!(r.sim_time_s, 1305.0);
    assert_eq!((a.scale_ups, a.scale_downs, a.peak_replicas), (1, 2, 3));
    assert_eq!(a.replicas_never_served, 2);
    // backend-0 0..1305, backend-1 30..1005, backend-2 30..495 (the victim: the most
    // recently ready, ties to the highest slot).
    assert_eq!(a.replica_seconds, 1305.0 + 975.0 + 465.0);
    let per: Vec<f64> = r
        .backends
        .iter()
        .map(|b| b.cost.as_ref().unwrap().replica_seconds)
        .collect();
    assert_eq!(per, vec![1305.0, 975.0, 465.0]);
    // Ready at 130 s, idle while backend-0 queued until deleted.
    assert_eq!(a.replica_seconds_idle_while_queued, (1005.0 - 130.0) + (495.0 - 130.0));
    assert_eq!(a.gpu_seconds, a.replica_seconds, "one GPU per replica");
    assert_eq!(a.requests_cut_by_scale_down, 0);
    assert_eq!(r.requests.finished, 13);
    let cost = 2745.0 / 3600.0 * 3.78;
    assert!((a.cost_usd - cost).abs() < 1e-6, "{} vs {cost}", a.cost_usd);
}

/// KEDA with production-stack's verbatim trigger (tutorial 20: the bare selector
/// `vllm:num_requests_waiting`, threshold 5, min 1, max 2, pollingInterval 15,
/// cooldownPeriod 360). At 30 s one series reads 12: the HPA asks 3, capped at 2, and pod B
/// is created. B is Ready at 130 s and first scraped at 150 s; from then on the query
/// returns two elements, KEDA's scaler errors ("returned multiple elements"), and neither
/// loop changes anything again: 2 replicas to the end, B never served.
#[test]
fn keda_with_the_verbatim_recipe_freezes_once_two_pods_are_scraped() {
    let text = queue(
        "kind = \"keda\"\nquery = \"vllm:num_requests_waiting\"\nthreshold = 5\nmin_replicas = 1\nmax_replicas = 2\npolling_interval_s = 15\ncooldown_s = 360\nstartup_s = 100",
    );
    let (s, w) = inline(&text, &[]);
    let r = run_full(&s, &w).summary;
    assert_eq!(events(&r), vec![(30.0, 1, 2, Some(12.0))]);
    let a = r.autoscale.as_ref().unwrap();
    assert_eq!(a.replicas_never_served, 1);
    assert_eq!(a.replica_seconds, 1305.0 + (1305.0 - 30.0));
    // The same with the query summed: KEDA reads the fleet's total and scales back down
    // once the window lets it (sample 690 s reads 6 -> 2 at most... then 1 at 1005 s).
    let fixed = text.replace(
        "query = \"vllm:num_requests_waiting\"",
        "query = \"sum(vllm:num_requests_waiting)\"",
    );
    let (s, w) = inline(&fixed, &[]);
    let r = run_full(&s, &w).summary;
    assert_eq!(events(&r), vec![(30.0, 1, 2, Some(12.0)), (1005.0, 2, 1, Some(3.0))]);
}

/// Static discovery never lists a new pod: it costs from creation and serves nothing even
/// when requests keep coming; Kubernetes discovery lists it once Ready and it serves.
#[test]
fn static_discovery_never_lists_a_new_pod() {
    let late = "\n[[workload.groups]]\nname = \"late\"\nsessions = 6\narrival = { kind = \"burst\", at_s = 200 }\ninput_tokens = 1\noutput_tokens = 1\nservice_time_s = 100\n";
    let base = queue(
        "kind = \"hpa\"\nquery = \"sum(vllm:num_requests_waiting)\"\ntarget = 5\nmin_replicas = 1\nmax_replicas = 3\nstartup_s = 100",
    );
    let at = base.find("[autoscaler]").unwrap();
    let text = format!("{}{late}{}", &base[..at], &base[at..]);
    let run = |discovery: &str| {
        let (s, w) = inline(&text, &[("autoscaler.discovery", discovery)]);
        run_full(&s, &w).summary
    };
    let k8s = run("\"kubernetes\"");
    assert!(k8s.backends[1].requests + k8s.backends[2].requests > 0);
    assert_eq!(k8s.autoscale.as_ref().unwrap().replicas_never_served, 0);
    let st = run("\"static\"");
    assert_eq!(st.backends[1].requests + st.backends[2].requests, 0);
    assert_eq!(st.autoscale.as_ref().unwrap().replicas_never_served, 2);
    assert_eq!(st.backends[0].requests, 19);
}

/// The study: burst8's latch drives KEDA to add 2 replicas (at 60 s, the first scrape that
/// sees backend-1's 4 waiting agents: ceil(4 / 1) = 4), which serve nothing and idle while
/// backend-1 keeps queueing; with the routing fix nothing queues long enough to scale.
#[test]
fn burst8_under_keda_adds_replicas_that_the_routing_fix_does_not_need() {
    let (s, w) = shipped("autoscale-keda.toml", &[]);
    let r = run_full(&s, &w).summary;
    let a = r.autoscale.as_ref().unwrap();
    assert_eq!(events(&r), vec![(60.0, 2, 4, Some(4.0))]);
    assert_eq!(a.replicas_never_served, 2);
    assert_eq!(r.backends[2].requests + r.backends[3].requests, 0);
    assert!(
        a.replica_seconds_idle_while_queued > 100.0,
        "{}",
        a.replica_seconds_idle_while_queued
    );
    let (s, w) = shipped(
        "autoscale-keda.toml",
        &[("router.policy.fallback", "\"leastinflight\"")],
    );
    let f = run_full(&s, &w).summary;
    let b = f.autoscale.as_ref().unwrap();
    assert_eq!(b.scale_ups, 0);
    assert!(b.gpu_seconds < a.gpu_seconds);
    assert!(b.replica_seconds_idle_while_queued < a.replica_seconds_idle_while_queued / 4.0);
}

/// Same scenario, same bytes: twice, and in the reference engine mode.
#[test]
fn autoscaled_runs_are_deterministic_across_runs_and_engine_modes() {
    let (s, w) = shipped("autoscale-keda.toml", &[]);
    let opts = fleetsim::sim::RunOptions {
        record_event_log: true,
        ..Default::default()
    };
    let a = fleetsim::sim::run_mode(s.sim.clone(), &w, opts, fleetsim::sim::EngineMode::Fast)
        .unwrap()
        .0;
    let b = fleetsim::sim::run_mode(s.sim.clone(), &w, opts, fleetsim::sim::EngineMode::Fast)
        .unwrap()
        .0;
    let c = fleetsim::sim::run_mode(s.sim.clone(), &w, opts, fleetsim::sim::EngineMode::Reference)
        .unwrap()
        .0;
    let json = |r: &fleetsim::sim::RunResult| serde_json::to_string(&r.summary).unwrap();
    assert_eq!(json(&a), json(&b));
    assert_eq!(a.event_log, b.event_log);
    let strip = |r: &fleetsim::sim::RunResult| {
        let mut v: serde_json::Value = serde_json::from_str(&json(r)).unwrap();
        v.as_object_mut().unwrap().remove("events");
        v
    };
    assert_eq!(
        strip(&a),
        strip(&c),
        "the reference mode takes more events, the same outcome"
    );
}

/// Bad `[autoscaler]` keys: one line naming the key, exit 2.
#[test]
fn bad_autoscaler_keys_name_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    for (set, says) in [
        (
            "autoscaler.query=\"sum(rate(vllm:num_requests_waiting[1m]))\"",
            "autoscaler.query",
        ),
        ("autoscaler.kind=\"vpa\"", "autoscaler.kind: unknown autoscaler `vpa`"),
        (
            "autoscaler.target=3",
            "autoscaler.target: applies only to kind = \"hpa\"",
        ),
        (
            "autoscaler.max_replicas=1",
            "autoscaler.max_replicas: 1 is below the 2 backends",
        ),
        ("autoscaler.metric_type=\"Utilization\"", "autoscaler.metric_type"),
        ("autoscaler.discovery=\"dns\"", "autoscaler.discovery"),
    ] {
        let out = sim()
            .args(["run", "scenarios/autoscale-keda.toml", "--set", set, "--out"])
            .arg(tmp.path().join("x"))
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(err.contains(says), "{set}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// `sim run --explain` says which scale-up bought nothing, and why: the latch.
#[test]
fn explain_names_the_scale_up_that_bought_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    sim()
        .args(["run", "scenarios/autoscale-keda.toml", "--explain", "--quiet", "--out"])
        .arg(&out)
        .assert()
        .success();
    let md = std::fs::read_to_string(out.join("explain.md")).unwrap();
    assert!(
        md.contains("first at 60.0 s: 2 -> 4 replicas; the query read 4, DesiredWithinRange"),
        "{md}"
    );
    assert!(
        md.contains(
            "Scale-up bought nothing: 2 of the replicas it added never served a request (backend-2, backend-3)"
        ),
        "{md}"
    );
    assert!(md.contains("The latch:"), "{md}");
}
