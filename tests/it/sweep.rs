//! `sim sweep` and `sim merge`: byte-identity across thread counts, shards and resumption;
//! grid order; aggregates; common random numbers; input errors.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::sim;
use predicates::prelude::*;

/// A small burst8 grid: 2 fallbacks x 2 intervals x 3 seeds = 12 runs.
const GRID: [&str; 9] = [
    "sweep",
    "scenarios/burst8.toml",
    "-L",
    "router.policy.fallback",
    "qps,leastinflight",
    "-P",
    "router.engine_stats_interval_s",
    "1",
    "10",
];

fn grid(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = GRID.iter().map(|s| s.to_string()).collect();
    v.extend(["-D", "9", "--seeds", "3", "--quiet"].map(String::from));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// Every file in `dir` except wall-clock ones, by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_file() && !name.starts_with("sweep-perf") {
            out.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    out
}

fn assert_same(a: &Path, b: &Path) {
    let (fa, fb) = (files(a), files(b));
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (k, v) in &fa {
        assert!(v == &fb[k], "{k} differs between {} and {}", a.display(), b.display());
    }
}

fn sweep_into(dir: &Path, extra: &[&str]) {
    sim().args(grid(extra)).arg("--out").arg(dir).assert().success();
}

#[test]
fn output_is_byte_identical_for_any_thread_count() {
    let t = tempfile::tempdir().unwrap();
    let (one, two, four) = (t.path().join("j1"), t.path().join("j2"), t.path().join("j4"));
    sweep_into(&one, &["--jobs", "1"]);
    sweep_into(&two, &["--jobs", "2"]);
    sweep_into(&four, &["--jobs", "4"]);
    assert_same(&one, &two);
    assert_same(&one, &four);
    for f in [
        "sweep.csv",
        "sweep.json",
        "aggregate.csv",
        "aggregate.md",
        "heatmap_idle_while_queued_s.svg",
        "heatmap_idle_while_queued_s.png",
        "line_ttft_p99_s.svg",
        "line_ttft_p99_s.png",
    ] {
        assert!(one.join(f).exists(), "{f} missing");
    }
}

#[test]
fn shards_merge_to_the_unsharded_files() {
    let t = tempfile::tempdir().unwrap();
    let whole = t.path().join("whole");
    let sharded = t.path().join("sharded");
    sweep_into(&whole, &[]);
    for k in 0..3 {
        sweep_into(&sharded, &["--shard", &format!("{k}/3")]);
    }
    let shard_files: Vec<_> = (0..3)
        .map(|k| sharded.join("shards").join(format!("shard-{k}-of-3.json")))
        .collect();
    sim().arg("merge").args(&shard_files).arg("--quiet").assert().success();
    assert_same(&whole, &sharded);

    // Missing and duplicated shards are refused.
    sim()
        .arg("merge")
        .args(&shard_files[..2])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "4 of 12 runs are missing (run 2 belongs to shard 2/3)",
        ));
    sim()
        .arg("merge")
        .args([&shard_files[0], &shard_files[0], &shard_files[1], &shard_files[2]])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("appears in more than one file"));
}

#[test]
fn merge_refuses_shards_of_different_sweeps() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    let b = t.path().join("b");
    sweep_into(&a, &["--shard", "0/2"]);
    sweep_into(&b, &["--shard", "1/2", "--set", "router.policy.band=2"]);
    sim()
        .arg("merge")
        .arg(a.join("shards/shard-0-of-2.json"))
        .arg(b.join("shards/shard-1-of-2.json"))
        .arg("--out")
        .arg(t.path().join("m"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("describes a different sweep"));
}

#[test]
fn resume_completes_an_interrupted_sweep_identically() {
    let t = tempfile::tempdir().unwrap();
    let whole = t.path().join("whole");
    let resumed = t.path().join("resumed");
    sweep_into(&whole, &[]);
    // An interrupted sweep leaves a partial sweep.json: keep every other run.
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(whole.join("sweep.json")).unwrap()).unwrap();
    v["complete"] = false.into();
    // A partial file records the build that wrote it (the one in sweep-perf.json).
    let perf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(whole.join("sweep-perf.json")).unwrap()).unwrap();
    v["build"] = perf["build"].clone();
    let rows = v["rows"].as_array_mut().unwrap();
    let mut i = 0;
    rows.retain(|_| {
        i += 1;
        i % 2 == 0
    });
    std::fs::create_dir_all(&resumed).unwrap();
    std::fs::write(resumed.join("sweep.json"), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    sim()
        .args(grid(&["--resume"]))
        .arg("--out")
        .arg(&resumed)
        .assert()
        .success();
    assert_same(&whole, &resumed);
    // A different sweep cannot resume from it.
    sim()
        .args(grid(&["--resume", "--set", "router.policy.band=3"]))
        .arg("--out")
        .arg(&resumed)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("written by a different sweep"));
}

#[test]
fn rows_follow_grid_order_and_aggregates_match_rows() {
    let t = tempfile::tempdir().unwrap();
    sweep_into(t.path(), &[]);
    let mut r = csv::Reader::from_path(t.path().join("sweep.csv")).unwrap();
    let head = r.headers().unwrap().clone();
    let col = |n: &str| {
        head.iter()
            .position(|h| h == n)
            .unwrap_or_else(|| panic!("no column {n}"))
    };
    let (c_fb, c_int, c_seed, c_iwq) = (
        col("param_fallback"),
        col("param_engine_stats_interval_s"),
        col("seed"),
        col("idle_while_queued_s"),
    );
    col("backends[1].peak_waiting");
    col("scenario_sha256");
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 12);
    let key = |x: &csv::StringRecord| format!("{}/{}/{}", &x[c_fb], &x[c_int], &x[c_seed]);
    let keys: Vec<String> = rows.iter().map(key).collect();
    assert_eq!(
        keys[..4],
        ["qps/1/1", "qps/1/2", "qps/1/3", "qps/10/1"],
        "first axis slowest, seeds fastest"
    );
    assert_eq!(keys[11], "leastinflight/10/3");
    // The aggregate is the mean over the point's seeds.
    let mean: f64 = rows[9..12]
        .iter()
        .map(|x| x[c_iwq].parse::<f64>().unwrap())
        .sum::<f64>()
        / 3.0;
    let mut a = csv::Reader::from_path(t.path().join("aggregate.csv")).unwrap();
    let ah = a.headers().unwrap().clone();
    let last = a.records().last().unwrap().unwrap();
    let got: f64 = last[ah.iter().position(|h| h == "idle_while_queued_mean_s").unwrap()]
        .parse()
        .unwrap();
    assert!((got - mean).abs() <= 1e-5 * mean.abs().max(1.0), "{got} vs {mean}");
    assert_eq!(&last[ah.iter().position(|h| h == "runs").unwrap()], "3");
    assert_eq!(&last[ah.iter().position(|h| h == "seeds").unwrap()], "1-3");
    // Under the QPS fallback every seed strands capacity; the Markdown table says so.
    let md = std::fs::read_to_string(t.path().join("aggregate.md")).unwrap();
    assert!(
        md.contains("| fallback | engine_stats_interval_s | idle_while_queued_s |"),
        "{md}"
    );
    assert!(md.contains("3 seeds (1-3)"));
}

#[test]
fn common_random_numbers_give_every_policy_the_same_workload() {
    use fleetsim::scenario::Source;
    use fleetsim::sweep::spec::{CliAxes, plan};
    let src = Source::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/burst8.toml")).unwrap();
    let cli = CliAxes {
        lists: vec![("router.policy.fallback".into(), "qps,leastinflight".into())],
        seeds: Some(2),
        ..Default::default()
    };
    let p = plan(&src, &cli, 100).unwrap();
    for seed in p.seeds.clone() {
        let wl = |point| {
            let mut sc = p.source_for(&src, point).unwrap().scenario().unwrap();
            sc.sim.seed = seed;
            format!("{:?}", sc.workload().unwrap())
        };
        assert_eq!(wl(0), wl(1), "seed {seed}: the workload must not depend on the policy");
    }
}

#[test]
fn file_sweep_table_and_list() {
    let t = tempfile::tempdir().unwrap();
    let scenario = t.path().join("s.toml");
    let base = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/burst8.toml")).unwrap();
    std::fs::write(
        &scenario,
        format!(
            "{base}\n[sweep]\nseeds = 2\n[[sweep.axis]]\npath = \"router.policy.band\"\nvalues = [0, 1]\n\
             [[sweep.axis]]\nname = \"fleet\"\ncases = [{{ label = \"2x8\", set = {{ \"backends.count\" = 2 }} }}, \
             {{ label = \"3x8\", set = {{ \"backends.count\" = 3 }} }}]\n"
        ),
    )
    .unwrap();
    sim()
        .arg("sweep")
        .arg(&scenario)
        .arg("--list")
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "point\tband\tfleet\n0\t0\t2x8\n1\t0\t3x8\n2\t1\t2x8\n",
        ))
        .stderr(predicate::str::contains("4 points x 2 seeds = 8 runs"));
    // A bad value in a case is reported against its axis.
    std::fs::write(
        &scenario,
        format!("{base}\n[sweep]\n[[sweep.axis]]\nname = \"fleet\"\ncases = [{{ label = \"none\", set = {{ \"backends.count\" = 0 }} }}]\n"),
    )
    .unwrap();
    sim()
        .arg("sweep")
        .arg(&scenario)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("backends.count").and(predicate::str::contains("sweep axis fleet = none")));
}

/// Runs `sim ARGS` and asserts exit code 2 with `needle` on stderr and no panic.
fn rejects(args: &[&str], needle: &str) {
    sim()
        .args(args)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(needle).and(predicate::str::contains("panicked").not()));
}

#[test]
fn bad_grids_are_input_errors() {
    let s = "scenarios/burst8.toml";
    rejects(&["sweep", s, "-P", "router.policy.band", "3", "1"], "empty range");
    rejects(
        &["sweep", s, "-P", "router.policy.band", "0", "3", "-D", "0"],
        "step must be > 0",
    );
    rejects(
        &[
            "sweep",
            s,
            "-L",
            "router.policy.band",
            "0,1",
            "-L",
            "router.policy.band",
            "2",
        ],
        "second axis is named `band`",
    );
    rejects(&["sweep", s, "-L", "router.policy.band", "1,1"], "listed twice");
    rejects(&["sweep", s, "-L", "router.polcy.band", "1,2"], "router.polcy");
    rejects(
        &["sweep", s, "-L", "router.policy.band", "-1,1"],
        "sweep axis band = -1",
    );
    rejects(
        &["sweep", s, "-P", "router.policy.band", "0", "999", "--seeds", "200"],
        "above the cap of 100000",
    );
    rejects(
        &["sweep", s, "-L", "router.policy.band", "1", "--shard", "2/2"],
        "out of range 0..2",
    );
    rejects(
        &["sweep", s, "-L", "router.policy.band", "1", "--metric", "nope"],
        "`nope` is not a summary metric",
    );
    rejects(
        &["sweep", s, "-L", "router.policy.band", "1", "--heatmap", "band,x"],
        "`x` is not an axis",
    );
    rejects(
        &["sweep", s, "-L", "seed", "1,2", "--seeds", "2"],
        "both give the seeds",
    );
}

/// The committed sweep's reading, on a reduced grid (8 backends x 8 slots, 64 agents):
/// QPS ignores the scrape interval and the band exactly; strict argmin on a view older
/// than the burst dogpiles; a wider band spreads the dogpile.
#[test]
fn stale_strict_argmin_dogpiles_and_qps_ignores_engine_stats() {
    let t = tempfile::tempdir().unwrap();
    sim()
        .args([
            "sweep",
            "scenarios/burst8.toml",
            "--set",
            "backends.count=8",
            "--set",
            "backends.max_num_seqs=8",
            "--set",
            "workload.groups[0].sessions=4",
            "--set",
            "workload.groups[1].sessions=64",
            "-L",
            "router.policy.fallback",
            "qps,leastinflight",
            "-L",
            "router.policy.band",
            "0,4",
            "-L",
            "router.engine_stats_interval_s",
            "0.5,5",
            "--seeds",
            "4",
            "--no-plots",
            "--quiet",
            "--out",
        ])
        .arg(t.path())
        .assert()
        .success();
    let mut r = csv::Reader::from_path(t.path().join("sweep.csv")).unwrap();
    let head = r.headers().unwrap().clone();
    let col = |n: &str| head.iter().position(|h| h == n).unwrap();
    let (fb, band, int, seed) = (
        col("param_fallback"),
        col("param_band"),
        col("param_engine_stats_interval_s"),
        col("seed"),
    );
    let metrics = ["idle_while_queued_s", "stranded_slot_s", "ttft_p99_s"].map(col);
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    // QPS: identical outcomes for a seed whatever the band and interval.
    for s in ["1", "2", "3", "4"] {
        let qps: Vec<Vec<String>> = rows
            .iter()
            .filter(|x| &x[fb] == "qps" && &x[seed] == s)
            .map(|x| metrics.iter().map(|&c| x[c].to_string()).collect())
            .collect();
        assert_eq!(qps.len(), 4);
        assert!(qps.windows(2).all(|w| w[0] == w[1]), "seed {s}: {qps:?}");
    }
    let mean_iwq = |f: &str, b: &str, i: &str| {
        let xs: Vec<f64> = rows
            .iter()
            .filter(|x| &x[fb] == f && &x[band] == b && &x[int] == i)
            .map(|x| x[metrics[0]].parse().unwrap())
            .collect();
        xs.iter().sum::<f64>() / xs.len() as f64
    };
    let qps = mean_iwq("qps", "0", "5");
    let (fresh0, stale0, stale4) = (
        mean_iwq("leastinflight", "0", "0.5"),
        mean_iwq("leastinflight", "0", "5"),
        mean_iwq("leastinflight", "4", "5"),
    );
    assert!(stale0 > 2.0 * fresh0, "stale argmin {stale0} vs fresh {fresh0}");
    assert!(stale0 > qps, "stale argmin {stale0} vs qps {qps}");
    assert!(stale4 < stale0, "band 4 {stale4} vs band 0 {stale0}");
    assert!(fresh0 < qps, "fresh least-in-flight {fresh0} vs qps {qps}");
}

#[test]
fn hand_edited_files_are_rejected_and_settings_may_change() {
    let t = tempfile::tempdir().unwrap();
    sweep_into(t.path(), &[]);
    // Changing only the table metric keeps the runs: resume accepts it and runs nothing.
    sim()
        .args(grid(&["--resume", "--metric", "decisions_by_branch.fallback_qps"]))
        .arg("--out")
        .arg(t.path())
        .assert()
        .success();
    let md = std::fs::read_to_string(t.path().join("aggregate.md")).unwrap();
    assert!(md.contains("decisions_by_branch.fallback_qps"), "{md}");
    // A row relabelled by hand is refused with the reason.
    let p = t.path().join("sweep.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    v["rows"][0][2] = 999.into();
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    sim()
        .args(grid(&["--resume"]))
        .arg("--out")
        .arg(t.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("run 0 is labelled point 0 seed 999"));
    sim()
        .arg("merge")
        .arg(&p)
        .arg("--out")
        .arg(t.path().join("m"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("inconsistent sweep file"));
}
