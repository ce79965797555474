//! Signal lags: a burst decided inside one refresh window sees one view.

use crate::common::*;

const BURST: &str = r#"
[backends]
count = 2
[router]
engine_stats_interval_s = 10
[router.policy]
kind = "prefixaware"
prefix_min_match_length = 100000
fallback = "qps"
[[workload.groups]]
name = "s"
sessions = 8
arrival = { kind = "interval", start_s = 1, every_s = 0.05 }
input_tokens = 200
output_tokens = 50
"#;

fn placement(sets: &[(&str, &str)]) -> Vec<u32> {
    let (s, w) = inline(BURST, sets);
    final_placement(&run_full(&s, &w), "s", 2)
}

#[test]
fn router_local_stats_without_lag_alternate_a_burst() {
    // Upstream: the dispatch is recorded before the next request is routed, so
    // _qps_routing sees each pick: absent, absent, then alternating on equal counts.
    assert_eq!(placement(&[]), vec![4, 4]);
}

#[test]
fn request_stats_lag_makes_the_whole_burst_see_one_view() {
    // If dispatches land in the stats 1 s late, every request of a 0.35 s burst sees both
    // endpoints absent and takes the first one.
    assert_eq!(placement(&[("router.request_stats_lag_s", "1")]), vec![8, 0]);
}

#[test]
fn strict_argmin_on_stale_engine_stats_dogpiles() {
    // Least-in-flight with band 0: one long request lands on a backend at 9 s, the scrape at
    // ~10 s sees it running there, and every request of the burst at 10.5 s sees that same
    // view, so the other backend is the strict minimum for all eight.
    let sets = [
        ("router.policy.fallback", "leastinflight"),
        ("router.policy.band", "0"),
        (
            "workload.groups[0].arrival",
            "{ kind = \"interval\", start_s = 10.5, every_s = 0.05 }",
        ),
    ];
    let text = format!(
        "{BURST}\n[[workload.groups]]\nname = \"early\"\nsessions = 1\narrival = {{ kind = \"burst\", at_s = 9 }}\ninput_tokens = 100\noutput_tokens = 4000\n"
    );
    let (s, w) = inline(&text, &sets);
    let res = run_full(&s, &w);
    let early = final_placement(&res, "early", 2);
    let burst = final_placement(&res, "s", 2);
    let busy = if early[0] == 1 { 0 } else { 1 };
    assert_eq!(
        burst[busy], 0,
        "the scrape at ~10 s saw only the early request: {burst:?}"
    );
    assert_eq!(burst[1 - busy], 8);
}

#[test]
fn metrics_lag_delays_what_the_scraper_reads() {
    // With a 5 s metrics lag the scrape at ~10 s reads the engine as of ~5 s (idle), so the
    // strict argmin is a tie and the burst spreads at random instead of dogpiling.
    let text = format!(
        "{BURST}\n[[workload.groups]]\nname = \"early\"\nsessions = 1\narrival = {{ kind = \"burst\", at_s = 9 }}\ninput_tokens = 100\noutput_tokens = 4000\n"
    );
    let sets = [
        ("router.policy.fallback", "leastinflight"),
        ("router.policy.band", "0"),
        (
            "workload.groups[0].arrival",
            "{ kind = \"interval\", start_s = 10.5, every_s = 0.05 }",
        ),
        ("backends.metrics_lag_s", "5"),
    ];
    let (s, w) = inline(&text, &sets);
    let res = run_full(&s, &w);
    let burst = final_placement(&res, "s", 2);
    assert!(burst[0] > 0 && burst[1] > 0, "{burst:?}");
    // The decisions' views show the early request nowhere.
    let log = &res.decisions;
    for (i, d) in log.rows.iter().enumerate() {
        if res.session_keys[d.session.index()].starts_with("s-") {
            let (view, _) = log.detail(i);
            assert!(view.iter().all(|v| v.engine.unwrap().running == 0));
        }
    }
}

#[test]
fn request_stats_stay_consistent_when_responses_beat_the_lagged_dispatch() {
    // Short requests every 10 s, dispatches recorded 5 s late: each response and completion
    // reaches the router before its dispatch does. The updates must still apply in order, so
    // by the next decision nothing is counted as in flight.
    let text = BURST.replace(
        "arrival = { kind = \"interval\", start_s = 1, every_s = 0.05 }",
        "arrival = { kind = \"interval\", start_s = 1, every_s = 10 }",
    );
    let (s, w) = inline(&text, &[("router.request_stats_lag_s", "5")]);
    let res = run_full(&s, &w);
    assert_eq!(res.summary.requests.finished, 8);
    for i in 1..res.decisions.rows.len() {
        let (view, _) = res.decisions.detail(i);
        for v in view.iter().filter_map(|v| v.requests) {
            assert_eq!((v.in_prefill, v.in_decoding), (0, 0), "decision {i}: {v:?}");
        }
    }
}
