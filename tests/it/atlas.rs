//! The burst8 mechanisms atlas (docs/burst8-atlas.md). Tie rules and the candidate fallbacks end to end,
//! `scrape_hang`, the scrape phase, `sim check` descending into scenarios/seed/, and
//! `counts.md`.

use crate::common;
use crate::common::{final_placement, inline, run_full, shipped, sim, write};
use predicates::prelude::*;

/// The pure setup with the burst mid-window: the stale strict argmin with first-URL ties
/// puts every first turn on backend-0; the router's own in-flight counts alternate.
#[test]
fn first_url_ties_on_a_stale_view_dogpile_and_local_inflight_does_not() {
    let (s, w) = shipped("seed/e-argmin-first-url.toml", &[]);
    let r = run_full(&s, &w);
    let first: Vec<u64> = r.summary.backends.iter().map(|b| b.first_turn_sessions).collect();
    assert_eq!(first, vec![8, 0]);
    let (s, w) = shipped(
        "seed/e-argmin-first-url.toml",
        &[("router.policy.fallback", "\"local_inflight\"")],
    );
    let r = run_full(&s, &w);
    let first: Vec<u64> = r.summary.backends.iter().map(|b| b.first_turn_sessions).collect();
    assert_eq!(first, vec![4, 4]);
    assert_eq!(final_placement(&r, "agents", 2).iter().max(), Some(&4));
}

#[test]
fn bad_tie_threshold_and_phase_are_one_line_errors() {
    for (set, needle) in [
        (
            "router.policy.tie=\"last\"",
            "router.policy.tie: unknown tie rule `last`",
        ),
        (
            "router.policy.fallback=\"p2c\"",
            "router.policy.fallback: unknown fallback `p2c`",
        ),
        (
            "router.engine_stats_phase=1.0",
            "router.engine_stats_phase: must be a fraction",
        ),
        (
            "router.policy={ kind = \"load_balanced_kvaware\", imbalanced_threshold = -0.5 }",
            "router.policy.imbalanced_threshold: must be a number >= 0",
        ),
        ("router.policy={ kind = \"leastinflight\", tie = 1 }", "router.policy"),
        (
            "router.policy.sample=-1",
            "router.policy.sample: must be an integer >= 0",
        ),
        (
            "router.policy.insert=\"later\"",
            "router.policy.insert: unknown insertion `later`",
        ),
        (
            "router.policy={ kind = \"loadaware\", tie = \"last\" }",
            "router.policy.tie: unknown tie rule `last`; expected `first` (the smallest URL, PR #1035, the default)",
        ),
        (
            "router.policy={ kind = \"sglang_cache_aware\", tie = \"any\" }",
            "router.policy.tie: unknown tie rule `any`",
        ),
    ] {
        sim()
            .args(["run", "scenarios/burst8.toml", "--no-files", "--set", set])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(needle).and(predicate::function(|e: &str| e.lines().count() == 1)));
    }
    // Floats and inf are accepted, as upstream's float flag.
    for t in ["2.5", "inf", "0"] {
        sim()
            .args(["run", "scenarios/burst8.toml", "--no-files", "--quiet", "--set"])
            .arg(format!(
                "router.policy={{ kind = \"load_balanced_kvaware\", imbalanced_threshold = {t} }}"
            ))
            .assert()
            .success();
    }
}

/// A hung backend stalls the sequential pass for an interval: the backends behind it are
/// read an interval late, so the views every decision sees are older.
#[test]
fn scrape_hang_ages_the_whole_view() {
    let base = std::fs::read_to_string(common::scenario_path("burst8-fixed.toml")).unwrap();
    let (s, w) = inline(&base, &[]);
    let calm = run_full(&s, &w);
    let hung = base.replace(
        "[expect]",
        "[[faults]]\nbackend = 0\nkind = \"scrape_hang\"\n\n[expect]",
    );
    let (s, w) = inline(&hung, &[]);
    let r = run_full(&s, &w);
    // backend-0 never has stats, so #1089 falls back to QPS on every sub-threshold decision.
    assert_eq!(r.summary.decisions_by_branch["fallback_leastinflight"], 0);
    assert!(r.summary.decisions_by_branch["fallback_nostats_qps"] > 0);
    // Each pass takes interval + one read: the view backend-1's entry gives is older.
    assert!(
        r.summary.view_age_s.max > calm.summary.view_age_s.max + 5.0,
        "{} vs {}",
        r.summary.view_age_s.max,
        calm.summary.view_age_s.max
    );
    let fail = base.replace(
        "[expect]",
        "[[faults]]\nbackend = 0\nkind = \"scrape_fail\"\n\n[expect]",
    );
    let (s, w) = inline(&fail, &[]);
    let f = run_full(&s, &w);
    assert!(f.summary.view_age_s.max < calm.summary.view_age_s.max + 0.1);
}

/// Moving the first scrape moves every pass: with phase 0.5 at 10 s, passes start at 5 s.
#[test]
fn scrape_phase_shifts_the_passes() {
    let (s0, w) = shipped("seed/d-1089-midwindow.toml", &[]);
    let (s5, _) = shipped("seed/d-1089-midwindow.toml", &[("router.engine_stats_phase", "0.5")]);
    assert_eq!(s5.sim.router.first_scrape(0, 1).0, 5_000_000_000);
    assert_eq!(s0.sim.router.first_scrape(0, 1).0, 0);
    let (a, b) = (run_full(&s0, &w), run_full(&s5, &w));
    assert_ne!(a.summary.view_age_s.mean, b.summary.view_age_s.mean);
}

#[test]
fn check_descends_into_subfolders_but_not_marked_ones() {
    let t = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(common::scenario_path("burst8.toml")).unwrap();
    let one = base.replace("seeds = 10", "seeds = 1");
    std::fs::create_dir_all(t.path().join("seed")).unwrap();
    std::fs::create_dir_all(t.path().join("bench")).unwrap();
    write(
        t.path(),
        "top.toml",
        &one.replace("name = \"burst8\"", "name = \"top\""),
    );
    write(
        &t.path().join("seed"),
        "deep.toml",
        &one.replace("name = \"burst8\"", "name = \"deep\""),
    );
    write(
        &t.path().join("bench"),
        "big.toml",
        &one.replace("name = \"burst8\"", "name = \"big\""),
    );
    write(&t.path().join("bench"), ".sim-check-skip", "");
    sim()
        .arg("check")
        .arg(t.path())
        .arg("--junit")
        .arg(t.path().join("j.xml"))
        .assert()
        .success()
        .stdout(
            predicate::str::contains("top ")
                .and(predicate::str::contains("deep "))
                .and(predicate::str::contains("big ").not())
                .and(predicate::str::contains("2 scenarios")),
        );
}

#[test]
fn counts_md_tabulates_the_split_per_point() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("s");
    sim()
        .args([
            "sweep",
            "scenarios/seed/splits.toml",
            "--seeds",
            "3",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let md = std::fs::read_to_string(out.join("counts.md")).unwrap();
    assert!(md.contains("| `c threshold 0 (default)` | 3 | 8: 3 (100%) |"), "{md}");
    assert!(md.contains("| `a qps (main)` | 3 | 4: 2 (67%), 5: 1 (33%) |"), "{md}");
    // A sweep without `counts` writes no counts.md.
    let out2 = t.path().join("b8");
    sim()
        .args(["sweep", "scenarios/burst8.toml", "--seeds", "1", "--quiet", "--out"])
        .arg(&out2)
        .assert()
        .success();
    assert!(!out2.join("counts.md").exists());
}

/// The delayed insertion and power-of-two fallbacks end to end on the pure setup with the
/// burst mid-window: power-of-two on two backends samples both, so it is the argmin
/// itself (identical placements); PR #1089 with the insertion delayed runs every session.
#[test]
fn second_turn_insertion_and_power_of_two_run_end_to_end() {
    let set = |extra: &[(&'static str, &'static str)]| {
        let mut v = vec![
            ("router.policy.fallback", "\"local_inflight\""),
            ("router.policy.band", "0"),
            ("router.policy.tie", "\"first\""),
        ];
        v.extend_from_slice(extra);
        v
    };
    let (s, w) = shipped("seed/d-1089-midwindow.toml", &set(&[]));
    let argmin = run_full(&s, &w);
    let (s, w) = shipped("seed/d-1089-midwindow.toml", &set(&[("router.policy.sample", "2")]));
    let p2c = run_full(&s, &w);
    let placed = |r| final_placement(r, "agents", 2);
    assert_eq!(placed(&argmin), placed(&p2c));
    assert_eq!(placed(&argmin).iter().sum::<u32>(), 8);
    let (s, w) = shipped(
        "seed/d-1089-midwindow.toml",
        &[
            ("router.policy.insert", "\"second_turn\""),
            ("router.policy.fallback", "\"leastinflight\""),
        ],
    );
    let delayed = run_full(&s, &w);
    assert_eq!(placed(&delayed).iter().sum::<u32>(), 8);
}

/// `follow = true`: a session's later turns go where its first turn went, so the fresh
/// fallback's 4/4 opening is the final placement, and the decisions say `fallback_follow`;
/// combined with the delayed insertion it is refused (both decide the second turn).
#[test]
fn follow_keeps_each_session_where_it_opened() {
    let (s, w) = shipped(
        "seed/d-1089-midwindow.toml",
        &[
            ("router.policy.fallback", "\"local_inflight\""),
            ("router.policy.band", "0"),
            ("router.policy.tie", "\"first\""),
            ("router.policy.follow", "true"),
        ],
    );
    let r = run_full(&s, &w);
    assert!(r.summary.decisions_by_branch["fallback_follow"] > 0);
    assert_eq!(r.summary.latched_sessions, 0, "no session latched by a later re-pick");
    let mut placed = final_placement(&r, "agents", 2);
    placed.sort();
    assert_eq!(placed, vec![4, 4]);
    sim()
        .args(["run", "scenarios/seed/d-1089-midwindow.toml", "--no-files"])
        .args([
            "--set",
            "router.policy.follow=true",
            "--set",
            "router.policy.insert=\"second_turn\"",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "router.policy.follow: `follow = true` and `insert = \"second_turn\"`",
        ));
}

/// `request_api = "chat"`: production-stack's `kvaware` looks up only `prompt`, so every
/// chat request takes the upstream fallback (the session ring: the agents send keys);
/// sent as completions, the later turns hit the cache. `PrefixAwareRouter` counts the
/// `"\n"` separators of the joined messages, so the matched lengths grow.
#[test]
fn chat_requests_blind_kvaware_and_add_separators_to_prefixaware() {
    let kv = [("router.policy", "{ kind = \"kvaware\" }")];
    let as_completions = ("workload.groups[0].request_api", "\"completions\"");
    let (s, w) = shipped("seed/a-qps-pure.toml", &[kv[0], as_completions]);
    let completions = run_full(&s, &w);
    assert!(completions.summary.decisions_by_branch["kv_hit"] > 0);
    // Chat is the default: no key set.
    let (s, w) = shipped("seed/a-qps-pure.toml", &kv);
    let r = run_full(&s, &w);
    assert_eq!(r.summary.decisions_by_branch["kv_hit"], 0);
    assert_eq!(
        r.summary.decisions_by_branch["kv_fallback_session"] + r.summary.decisions_by_branch["kv_fallback_qps"],
        r.summary.requests.planned
    );
    // prefixaware: the same picks' matched lengths, plus separators.
    let (s, w) = shipped("seed/a-qps-pure.toml", &[as_completions]);
    let total = |r: fleetsim::sim::RunResult| r.decisions.rows.iter().map(|d| d.match_chars).sum::<u64>();
    let plain = total(run_full(&s, &w));
    let (s, w) = shipped("seed/a-qps-pure.toml", &[]);
    let joined = total(run_full(&s, &w));
    assert!(joined > plain, "{joined} vs {plain}");
    sim()
        .args(["run", "scenarios/seed/a-qps-pure.toml", "--no-files", "--set"])
        .arg("workload.groups[0].request_api=\"grpc\"")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "workload.groups[0].request_api: unknown request API `grpc`",
        ));
}
