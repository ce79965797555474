//! Answers that name the cause: the concentration hints and `sim explain` say which
//! mechanism put the requests where they are (trie monopoly at prefix threshold 0, the QPS
//! latch, a long session's affinity) with the key that changes it, and no hint states a
//! figure the run's own summary contradicts.

use fleetsim::explain::{ExplainOptions, explain, render};
use fleetsim::hints::{Hint, all_hints};
use fleetsim::metrics::Summary;
use fleetsim::scenario::Scenario;
use fleetsim::sim::RunResult;

use crate::common::{inline, run_full, shipped};

/// A run's hints as `sim run` computes them (audit and shares).
fn hints_of(s: &Scenario, res: &RunResult) -> Vec<Hint> {
    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    all_hints(
        &res.decisions,
        &names,
        s.sim.router.engine_stats_interval.as_secs_f64(),
        &res.summary,
    )
}

fn one<'a>(h: &'a [Hint], kind: &str) -> &'a Hint {
    h.iter()
        .find(|h| h.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} hint in {h:#?}"))
}

/// The number after `key` in `text` (digits, dots).
fn number_after(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    let n: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    n.trim_end_matches('.').parse().ok()
}

/// The word (up to a space, comma or bracket) before `key` in `text`.
fn word_before<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let head = &text[..text.find(key)?];
    head.rsplit([' ', '(', ',']).next()
}

/// The figures of a run a hint may state, from its summary (in memory or summary.json).
struct Figures {
    /// Per backend: name, requests, peak waiting, slots, sessions first placed there.
    backends: Vec<(String, u64, u32, u32, u64)>,
    never_served: u64,
    jain: f64,
    idle_while_queued_s: f64,
}

impl Figures {
    fn of(s: &Summary) -> Figures {
        Figures::from_json(&serde_json::to_value(s).unwrap())
    }

    fn from_json(v: &serde_json::Value) -> Figures {
        let backends = v["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["name"].as_str().unwrap().to_string(),
                    b["requests"].as_u64().unwrap(),
                    b["peak_waiting"].as_u64().unwrap() as u32,
                    b["slots"].as_u64().unwrap() as u32,
                    b["first_turn_sessions"].as_u64().unwrap(),
                )
            })
            .collect();
        Figures {
            backends,
            never_served: v["backends_never_served"].as_u64().unwrap(),
            jain: v["request_jain_index"].as_f64().unwrap(),
            idle_while_queued_s: v["idle_while_queued_s"].as_f64().unwrap(),
        }
    }

    fn backend(&self, name: &str) -> &(String, u64, u32, u32, u64) {
        self.backends
            .iter()
            .find(|b| b.0 == name)
            .unwrap_or_else(|| panic!("no backend {name:?}"))
    }
}

/// Every figure `h` states, checked against the summary of the same run.
fn check_claims(h: &Hint, s: &Figures, what: &str) {
    let m = &h.message;
    let ctx = || format!("{what}: {} hint: {m}", h.kind);
    match h.kind {
        "never-served" => {
            let idle = number_after(m, "").expect("leading count") as u64;
            assert_eq!(idle, s.never_served, "{}", ctx());
            let busiest = m
                .split(") while ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .expect("busiest");
            let served = number_after(m, &format!("{busiest} served ")).unwrap() as u64;
            assert_eq!(served, s.backend(busiest).1, "{}", ctx());
            let total: u64 = s.backends.iter().map(|b| b.1).sum();
            assert_eq!(
                number_after(m, &format!("{served} of ")).unwrap() as u64,
                total,
                "{}",
                ctx()
            );
            let jain = number_after(m, "Jain index ").unwrap();
            assert!((jain - s.jain).abs() <= 0.0005, "{}", ctx());
            let queued = s.backends.iter().any(|b| b.2 > 0) || s.idle_while_queued_s > 0.0;
            assert_eq!(m.contains("no queue formed"), !queued, "{}", ctx());
            if let Some(q) = number_after(m, " queued up to ") {
                let who = word_before(m, " queued up to ").unwrap();
                assert_eq!(q as u32, s.backend(who).2, "{}", ctx());
                let idle_s = number_after(m, "capacity idled for ").unwrap();
                assert!((idle_s - s.idle_while_queued_s).abs() <= 0.05, "{}", ctx());
            }
        }
        "share-skew" => {
            let hi = word_before(m, " served ").expect("busiest");
            let n_hi = number_after(m, &format!("{hi} served ")).unwrap() as u64;
            assert_eq!(n_hi, s.backend(hi).1, "{}", ctx());
            let lo = m
                .split(" requests and ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .expect("least busy");
            let n_lo = number_after(m, &format!("requests and {lo} ")).unwrap() as u64;
            assert_eq!(n_lo, s.backend(lo).1, "{}", ctx());
            let ratio = number_after(m, &format!("{n_lo} (")).unwrap();
            assert!((ratio - n_hi as f64 / n_lo as f64).abs() <= 0.05, "{}", ctx());
            let slots = number_after(m, "both have ").unwrap() as u32;
            assert_eq!(slots, s.backend(hi).3, "{}", ctx());
        }
        _ => {}
    }
    // The mechanisms' session counts are the summary's first-turn placements.
    if let Some(i) = m.find(" sessions first placed on ") {
        let on = m[i + " sessions first placed on ".len()..].split(' ').next().unwrap();
        let n = number_after(m, "of the ").unwrap() as u64;
        assert_eq!(n, s.backend(on).4, "{}", ctx());
    }
    if let Some(i) = m.find(" sessions were placed on ") {
        let on = m[i + " sessions were placed on ".len()..].split(' ').next().unwrap();
        let n = number_after(&m[..i], "(qps-latch): ").unwrap() as u64;
        assert!(n <= s.backend(on).4, "{}", ctx());
    }
    if let Some(i) = m.find(" first placed on ") {
        let on = m[i + " first placed on ".len()..].split([')', ' ']).next().unwrap();
        if let Some(n) = number_after(m, "spread evenly (") {
            assert_eq!(n as u64, s.backend(on).4, "{}", ctx());
        }
    }
}

/// skew6 (production-stack's prefix-aware router at its default threshold 0, six equal
/// backends, one shared system prompt): every request on one backend. The never-served hint
/// and the explanation name the trie monopoly and the threshold key, and the key, applied,
/// spreads the sessions.
#[test]
fn trie_monopoly_at_threshold_zero_is_named_with_the_key_that_changes_it() {
    let (s, w) = shipped("skew6.toml", &[]);
    let res = run_full(&s, &w);
    assert_eq!(res.summary.backends_never_served, 5);
    let h = hints_of(&s, &res);
    let never = one(&h, "never-served");
    assert!(never.message.contains("cause (trie-monopoly)"), "{never:#?}");
    assert!(
        never.message.contains("router.policy.prefix_min_match_length"),
        "{never:#?}"
    );
    assert!(never.message.contains("no queue formed"), "{never:#?}");
    check_claims(never, &Figures::of(&res.summary), "skew6");

    let names: Vec<String> = res.summary.backends.iter().map(|b| b.name.clone()).collect();
    let x = explain(
        &res,
        &s.sim,
        &names,
        &ExplainOptions::for_interval(s.sim.router.engine_stats_interval),
    );
    assert!(x.episodes.is_empty());
    let text = render(&x);
    assert!(text.contains("## Where the requests went"), "{text}");
    assert!(text.contains("**Why (trie-monopoly).**"), "{text}");
    assert!(text.contains("prefix_min_match_length"), "{text}");

    // The key as the hint gives it, applied.
    let key = "--set router.policy.prefix_min_match_length=";
    let v = number_after(&never.message, key).expect("a value to set") as u64;
    let (s2, w2) = shipped(
        "skew6.toml",
        &[("router.policy.prefix_min_match_length", &v.to_string())],
    );
    let fixed = run_full(&s2, &w2);
    assert_eq!(fixed.summary.backends_never_served, 0, "{:#?}", fixed.summary.backends);
    assert!(
        fixed.summary.request_jain_index > 0.8,
        "{}",
        fixed.summary.request_jain_index
    );
}

/// burst8: the eight agents' first turns go to _qps_routing (below the threshold) and are
/// latched by the trie; the share-skew hint names the QPS latch and the fallback key, not
/// uneven spreading.
#[test]
fn the_qps_latch_is_named_on_burst8() {
    let (s, w) = shipped("burst8.toml", &[]);
    let res = run_full(&s, &w);
    let h = hints_of(&s, &res);
    let skew = one(&h, "share-skew");
    assert_eq!(skew.backend, "backend-1");
    assert!(skew.message.contains("cause (qps-latch): 8 sessions"), "{skew:#?}");
    assert!(skew.message.contains("router.policy.fallback"), "{skew:#?}");
    assert!(!skew.message.contains("spread unevenly"), "{skew:#?}");
    check_claims(skew, &Figures::of(&res.summary), "burst8");
}

/// The never-served hint on a run where requests waited says where and for how long, not
/// "no queue formed" (autoscale-keda: backend-1 queues while the added replicas idle).
#[test]
fn never_served_states_the_queue_the_run_had() {
    let (s, w) = shipped("autoscale-keda.toml", &[]);
    let res = run_full(&s, &w);
    assert!(res.summary.backends.iter().any(|b| b.peak_waiting > 0));
    let h = hints_of(&s, &res);
    let never = one(&h, "never-served");
    assert!(!never.message.contains("no queue formed"), "{never:#?}");
    assert!(
        never.message.contains("backend-1 queued up to 4 requests"),
        "{never:#?}"
    );
    check_claims(never, &Figures::of(&res.summary), "autoscale-keda");
}

/// Sessions hashed evenly onto four backends, one of them 80 turns long: its backend
/// serves far more, and the share-skew hint blames the long session's affinity, not the
/// spreading.
#[test]
fn a_long_sessions_affinity_is_not_blamed_on_spreading() {
    let (s, w) = inline(
        r#"
name = "long-session"
seed = 1
[backends]
count = 4
max_num_seqs = 8
[router.policy]
kind = "session"
[[workload.groups]]
name = "long"
sessions = 1
arrival = { kind = "burst", at_s = 0 }
turns = 80
input_tokens = { dist = "uniform", min = 50, max = 100 }
output_tokens = { dist = "uniform", min = 20, max = 60 }
think_time_s = { dist = "exponential", mean = 1 }
[[workload.groups]]
name = "short"
sessions = 40
arrival = { kind = "poisson", start_s = 0, rate_per_s = 0.5 }
turns = 2
input_tokens = { dist = "uniform", min = 50, max = 100 }
output_tokens = { dist = "uniform", min = 20, max = 60 }
think_time_s = { dist = "exponential", mean = 1 }
"#,
        &[],
    );
    let res = run_full(&s, &w);
    let h = hints_of(&s, &res);
    let skew = one(&h, "share-skew");
    assert!(skew.message.contains("cause (long-session-affinity)"), "{skew:#?}");
    assert!(!skew.message.contains("spread unevenly"), "{skew:#?}");
    check_claims(skew, &Figures::of(&res.summary), "long-session");
}

/// No hint text contradicts the run's own figures: every committed result's hints against
/// its summary.json, and the runs above.
#[test]
fn hints_state_only_the_runs_own_figures() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let (hp, sp) = (dir.join("hints.json"), dir.join("summary.json"));
        if !hp.exists() || !sp.exists() {
            continue;
        }
        let hints: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&hp).unwrap()).unwrap();
        let summary = Figures::from_json(&serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap());
        for v in hints {
            let kind: &'static str = match v["kind"].as_str().unwrap() {
                "never-served" => "never-served",
                "share-skew" => "share-skew",
                _ => continue,
            };
            let h = Hint {
                kind,
                backend: v["backend"].as_str().unwrap().to_string(),
                from_s: 0.0,
                until_s: 0.0,
                message: v["message"].as_str().unwrap().to_string(),
            };
            check_claims(&h, &summary, &dir.display().to_string());
            checked += 1;
        }
    }
    assert!(
        checked >= 2,
        "only {checked} concentration hints in the committed results"
    );
    for name in ["skew6.toml", "burst8.toml", "mixed-fleet.toml", "fleet-join.toml"] {
        let (s, w) = shipped(name, &[]);
        let res = run_full(&s, &w);
        for h in hints_of(&s, &res) {
            check_claims(&h, &Figures::of(&res.summary), name);
        }
    }
}
