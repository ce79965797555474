//! Each catalogue policy's characteristic strength or failure on the burst8 workload (8
//! agents sharing a 2000-token system prompt, opened in a burst, next to a chatty user),
//! over several seeds so no outcome is a coin flip.

use crate::common;

use crate::common::{run_with, shipped};
use fleetsim::sim::RunOptions;

/// Summary of burst8 under `policy` (an inline TOML table) for `seed`.
fn burst8(policy: &str, seed: u64) -> fleetsim::metrics::Summary {
    let seed = seed.to_string();
    let (s, w) = shipped("burst8.toml", &[("router.policy", policy), ("seed", &seed)]);
    run_with(&s, &w, RunOptions::summary_only()).summary
}

/// burst8 with both groups sent as `/v1/completions`: the only API whose `prompt` the
/// kvaware family tokenizes (chat requests take its fallback; tests/it/atlas.rs covers that).
fn burst8_completions(policy: &str, seed: u64) -> fleetsim::metrics::Summary {
    let seed = seed.to_string();
    let api = "\"completions\"";
    let (s, w) = shipped(
        "burst8.toml",
        &[
            ("router.policy", policy),
            ("seed", &seed),
            ("workload.groups[0].request_api", api),
            ("workload.groups[1].request_api", api),
        ],
    );
    run_with(&s, &w, RunOptions::summary_only()).summary
}

fn mean(policy: &str, f: impl Fn(&fleetsim::metrics::Summary) -> f64) -> f64 {
    (1..=6).map(|s| f(&burst8(policy, s))).sum::<f64>() / 6.0
}

/// SGLang cache_aware: the shared system prompt is 2/3 of every agent's first prompt, above
/// the 0.3 cache threshold, so every agent follows the first one's worker, and router-local
/// loads never differ by the 64 that would trigger balancing: all 8 on one backend.
#[test]
fn sglang_cache_aware_concentrates_a_hot_shared_prefix() {
    for seed in 1..=6 {
        let s = burst8("{ kind = \"sglang_cache_aware\" }", seed);
        assert!(s.peak_backend_sessions >= 8, "seed {seed}: {}", s.peak_backend_sessions);
        assert_eq!(s.decisions_by_branch["cache_aware_imbalanced"], 0);
        assert!(
            s.decisions_by_branch["cache_aware_hit"] >= 190,
            "{:?}",
            s.decisions_by_branch
        );
    }
    // With a balance threshold below the burst, the shortest-queue branch takes over.
    let s = burst8(
        "{ kind = \"sglang_cache_aware\", balance_abs_threshold = 1, balance_rel_threshold = 1.0 }",
        1,
    );
    assert!(s.decisions_by_branch["cache_aware_imbalanced"] > 0);
    assert!(s.peak_backend_sessions < 8, "{}", s.peak_backend_sessions);
}

/// llm-d's default profile: prefix-cache x3 outweighs queue x2 when the holder's queue is
/// the longest, the documented hot-spotting of prefix-cache-scorer + max-score picker; and
/// the queue scorer's blindness to running requests.
#[test]
fn llmd_default_profile_hot_spots_a_shared_prefix() {
    let full = mean("{ kind = \"llmd\" }", |s| s.idle_while_queued_s);
    assert!(full > 150.0, "{full}");
    // Without the prefix scorer it is better, but the queue scorer reads only *waiting*:
    // a backend running 4 and one running 0 both score 1 until something queues, so half
    // the picks still land on the full one, fresh 50 ms metrics or not.
    let no_prefix = mean("{ kind = \"llmd\", prefix_cache_weight = 0 }", |s| {
        s.idle_while_queued_s
    });
    let least = mean("{ kind = \"least_request\" }", |s| s.idle_while_queued_s);
    assert!(no_prefix < 0.8 * full, "{no_prefix} vs {full}");
    assert!(no_prefix > 3.0 * least, "{no_prefix} vs least_request {least}");
}

/// Router-local in-flight counts are exact at decision time: least_request and power-of-two
/// on local load place the burst almost perfectly.
#[test]
fn fresh_local_load_spreads_the_burst() {
    for p in ["{ kind = \"least_request\" }", "{ kind = \"power_of_d\", d = 2 }"] {
        let iwq = mean(p, |s| s.idle_while_queued_s);
        assert!(iwq < 15.0, "{p}: {iwq}");
        let peak = mean(p, |s| s.peak_backend_sessions as f64);
        assert!(peak <= 6.0, "{p}: {peak}");
    }
}

/// SGLang power_of_two against vLLM: /get_load is not served, every load is -1, and the
/// policy is as blind as random.
#[test]
fn sglang_power_of_two_is_blind_on_vllm() {
    let blind = mean("{ kind = \"power_of_d\", load = \"sglang_monitor\" }", |s| {
        s.idle_while_queued_s
    });
    let random = mean("{ kind = \"random\" }", |s| s.idle_while_queued_s);
    let local = mean("{ kind = \"power_of_d\" }", |s| s.idle_while_queued_s);
    assert!(blind > 5.0 * local, "blind {blind} vs local {local}");
    assert!(
        (blind - random).abs() < 0.5 * random,
        "blind {blind} vs random {random}"
    );
}

/// The llm-d policy refreshes metrics every 50 ms unless the scenario says otherwise;
/// production-stack policies keep the 30 s default.
#[test]
fn policies_bring_their_upstream_metrics_interval() {
    let text = std::fs::read_to_string(common::scenario_path("burst8.toml")).unwrap();
    let text = text.replace("engine_stats_interval_s = 10", "");
    let (s, _) = common::inline(&text, &[("router.policy", "{ kind = \"llmd\" }")]);
    assert_eq!(s.sim.router.engine_stats_interval.0, 50_000_000);
    let (s, _) = common::inline(&text, &[]);
    assert_eq!(s.sim.router.engine_stats_interval.0, 30_000_000_000);
}

/// AIBrix prefix-cache on two pods: the stddev band never rejects the holder (with two
/// values, max = mean + 1 sd exactly), so only the `max - min > 8` gate could stop the pile,
/// and 8 agents never open a gap of 9.
#[test]
fn aibrix_prefix_cache_on_two_pods_relies_on_the_gate() {
    for seed in 1..=4 {
        let s = burst8("{ kind = \"aibrix_prefix_cache\" }", seed);
        assert!(s.peak_backend_sessions >= 8, "seed {seed}");
        assert_eq!(
            s.decisions_by_branch["aibrix_least_request"] + s.decisions_by_branch["aibrix_prefix_hit"],
            200
        );
    }
    // A gate of 2 requests splits the burst.
    let peak = mean("{ kind = \"aibrix_prefix_cache\", imbalance_abs_count = 2 }", |s| {
        s.peak_backend_sessions as f64
    });
    assert!(peak < 7.0, "{peak}");
}

/// production-stack kvaware reads no load: the shared system prompt's holder takes every
/// agent. PR #1035's loadaware keeps the hit rate and spreads the load; Dynamo's cost
/// (prefill blocks + active blocks) does too.
#[test]
fn kv_event_fed_policies_hot_prefix_vs_load_terms() {
    for seed in 1..=4 {
        let s = burst8_completions("{ kind = \"kvaware\" }", seed);
        assert!(s.peak_backend_sessions >= 8, "seed {seed}: {}", s.peak_backend_sessions);
        assert!(s.decisions_by_branch["kv_hit"] > 150, "{:?}", s.decisions_by_branch);
    }
    let loadaware: Vec<_> = (1..=6)
        .map(|seed| burst8_completions("{ kind = \"loadaware\" }", seed))
        .collect();
    let iwq = loadaware.iter().map(|s| s.idle_while_queued_s).sum::<f64>() / 6.0;
    let hit = loadaware.iter().map(|s| s.prefix_cache_hit_rate).sum::<f64>() / 6.0;
    assert!(iwq < 30.0, "loadaware {iwq}");
    assert!(hit > 0.92, "loadaware hit rate {hit}");
    let iwq = mean("{ kind = \"dynamo\" }", |s| s.idle_while_queued_s);
    assert!(iwq < 15.0, "dynamo {iwq}");
    // PR #884 with a small threshold balances on scraped stats, 10 s stale here.
    let s = burst8_completions("{ kind = \"load_balanced_kvaware\", imbalanced_threshold = 2 }", 1);
    assert!(s.decisions_by_branch["kv_imbalanced"] > 0);
    assert!(s.peak_backend_sessions < 8);
}

/// Router replicas: each keeps its own in-flight counters, so a fresh local signal sees
/// only 1/R of the traffic (production-stack issue #166's point about per-replica QPS), and
/// each keeps its own prefix tree, so a front balancer that is not session-sticky hides a
/// session's history from the replica that routes its next turn.
#[test]
fn replicas_split_local_signals_and_trees() {
    let run = |policy: &str, replicas: &str, front: &str, seed: u64| {
        let seed = seed.to_string();
        let (s, w) = common::shipped(
            "compare-agent-burst.toml",
            &[
                ("router.policy", policy),
                ("router.replicas", replicas),
                ("router.front", front),
                ("seed", &seed),
            ],
        );
        run_with(&s, &w, RunOptions::summary_only()).summary
    };
    let iwq = |replicas: &str| {
        (1..=4)
            .map(|seed| run("{ kind = \"least_request\" }", replicas, "round_robin", seed).idle_while_queued_s)
            .sum::<f64>()
            / 4.0
    };
    let (one, four) = (iwq("1"), iwq("4"));
    assert!(four > 3.0 * one, "least_request: 1 replica {one}, 4 replicas {four}");

    let steady = |front: &str| {
        let (s, w) = common::shipped(
            "compare-steady-chat.toml",
            &[
                ("router.policy", "{ kind = \"sglang_cache_aware\" }"),
                ("router.replicas", "4"),
                ("router.front", front),
            ],
        );
        run_with(&s, &w, RunOptions::summary_only())
            .summary
            .prefix_cache_hit_rate
    };
    let (rr, sticky) = (steady("round_robin"), steady("session_hash"));
    assert!(sticky > rr + 0.1, "session-hash front {sticky} vs round robin {rr}");
}

/// AIBrix prefix-cache-preble on burst8: every agent's first prompt is 2/3 shared system
/// prompt, above the 0.5 match ratio, so after the first agent is costed onto the pod the
/// chat user does not occupy, all follow it to the pod on the system prompt's tree node (the
/// only candidate there, whatever its histogram load); 8 agents never open the PR #2382
/// gate's gap of 9. A gate of 2 in-flight requests sends later agents to the idle pod.
#[test]
fn aibrix_preble_follows_a_hot_prefix_until_the_gate() {
    for seed in 1..=4 {
        let s = burst8("{ kind = \"aibrix_preble\" }", seed);
        let b = &s.decisions_by_branch;
        assert!(s.peak_backend_sessions >= 8, "seed {seed}: {}", s.peak_backend_sessions);
        assert_eq!(b["aibrix_preble_gated_hit"] + b["aibrix_preble_gated_cost"], 0, "{b:?}");
        assert!(b["aibrix_preble_hit"] >= 190, "{b:?}");
        assert_eq!(b["aibrix_preble_hit"] + b["aibrix_preble_cost"], 200);
    }
    let s = burst8("{ kind = \"aibrix_preble\", imbalance_abs_count = 2 }", 1);
    let b = &s.decisions_by_branch;
    assert!(
        b["aibrix_preble_gated_hit"] + b["aibrix_preble_gated_cost"] > 0,
        "{b:?}"
    );
    let peak = mean("{ kind = \"aibrix_preble\", imbalance_abs_count = 2 }", |s| {
        s.peak_backend_sessions as f64
    });
    assert!(peak < 7.0, "{peak}");
}

/// SGLang cache_aware eviction on steady chat (240 sessions, ~5 minutes): the default
/// 2^26 characters per worker is never reached, so the run equals one with the eviction
/// thread off; a limit of 20,000 characters every 10 s evicts the least recently used
/// sessions' entries, their next turns no longer match and go to the smallest tree instead,
/// and the engines' prefix-cache hit rate falls with the lost affinity.
#[test]
fn sglang_cache_aware_eviction_forgets_least_recent_prefixes() {
    let steady = |policy: &str| {
        let (s, w) = common::shipped("compare-steady-chat.toml", &[("router.policy", policy)]);
        run_with(&s, &w, RunOptions::summary_only()).summary
    };
    let default = steady("{ kind = \"sglang_cache_aware\" }");
    let off = steady("{ kind = \"sglang_cache_aware\", eviction_interval_secs = 0 }");
    assert_eq!(default.decisions_by_branch, off.decisions_by_branch);
    assert_eq!(default.prefix_cache_hit_rate, off.prefix_cache_hit_rate);
    assert_eq!(default.idle_while_queued_s, off.idle_while_queued_s);
    let small = steady("{ kind = \"sglang_cache_aware\", eviction_interval_secs = 10, max_tree_size = 20000 }");
    let (hit, small_hit) = (
        default.decisions_by_branch["cache_aware_hit"],
        small.decisions_by_branch["cache_aware_hit"],
    );
    assert!(small_hit * 2 < hit, "hits: default {hit}, evicting {small_hit}");
    assert!(
        small.decisions_by_branch["cache_aware_smallest_tree"]
            > 10 * default.decisions_by_branch["cache_aware_smallest_tree"],
        "{:?}",
        small.decisions_by_branch
    );
    assert!(
        small.prefix_cache_hit_rate < default.prefix_cache_hit_rate - 0.1,
        "{} vs {}",
        small.prefix_cache_hit_rate,
        default.prefix_cache_hit_rate
    );
}
