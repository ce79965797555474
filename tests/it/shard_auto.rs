//! `--shard auto`: the shard from a Slurm job array's or a Kubernetes Indexed Job's
//! environment, set on the child process only. Every combination either gives the shard
//! `--shard K/N` gives (the same bytes) or is refused with one line and exit 2, before
//! anything is written.

use std::path::Path;

use crate::common::{sim, write};

/// Every variable `--shard auto` reads: removed from each child first, so a test run
/// inside a Slurm job or a Kubernetes pod sees only what the test sets.
const VARS: [&str; 6] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "JOB_COMPLETION_INDEX",
];

fn sweep(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> assert_cmd::assert::Assert {
    let mut c = sim();
    c.args([
        "sweep",
        "scenarios/burst8.toml",
        "--seeds",
        "3",
        "--no-plots",
        "--quiet",
    ])
    .arg("--out")
    .arg(out)
    .args(extra);
    for v in VARS {
        c.env_remove(v);
    }
    c.envs(env.iter().copied());
    c.assert()
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn slurm_and_kubernetes_indices_give_the_fixed_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let fixed = tmp.path().join("fixed");
    for k in ["0/2", "1/2"] {
        sweep(&fixed, &["--shard", k], &[]).success();
    }
    /// A case's name, the two tasks' environments, and the extra flags.
    type Case<'a> = (&'a str, [[(&'a str, &'a str); 3]; 2], &'a [&'a str]);
    let cases: [Case; 3] = [
        (
            "slurm",
            [
                [
                    ("SLURM_ARRAY_TASK_ID", "0"),
                    ("SLURM_ARRAY_TASK_COUNT", "2"),
                    ("SLURM_ARRAY_TASK_STEP", "1"),
                ],
                [
                    ("SLURM_ARRAY_TASK_ID", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "2"),
                    ("SLURM_ARRAY_TASK_STEP", "1"),
                ],
            ],
            &[],
        ),
        // --array=1-2: ids from 1.
        (
            "slurm-from-1",
            [
                [
                    ("SLURM_ARRAY_TASK_ID", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "2"),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                ],
                [
                    ("SLURM_ARRAY_TASK_ID", "2"),
                    ("SLURM_ARRAY_TASK_COUNT", "2"),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                ],
            ],
            &["--shard-count", "2"],
        ),
        (
            "kubernetes",
            [
                [
                    ("JOB_COMPLETION_INDEX", "0"),
                    ("JOB_COMPLETION_INDEX", "0"),
                    ("JOB_COMPLETION_INDEX", "0"),
                ],
                [
                    ("JOB_COMPLETION_INDEX", "1"),
                    ("JOB_COMPLETION_INDEX", "1"),
                    ("JOB_COMPLETION_INDEX", "1"),
                ],
            ],
            &["--shard-count", "2"],
        ),
    ];
    for (name, tasks, extra) in cases {
        let out = tmp.path().join(name);
        for env in tasks {
            let mut args = vec!["--shard", "auto"];
            args.extend_from_slice(extra);
            sweep(&out, &args, &env).success();
        }
        for k in 0..2 {
            let f = format!("shards/shard-{k}-of-2.json");
            assert!(
                read(&out.join(&f)) == read(&fixed.join(&f)),
                "{name}: {f} differs from --shard {k}/2"
            );
        }
    }
    // And the merge of auto shards is the unsharded sweep.
    let whole = tmp.path().join("whole");
    sweep(&whole, &[], &[]).success();
    sim()
        .arg("merge")
        .arg(tmp.path().join("kubernetes/shards/shard-0-of-2.json"))
        .arg(tmp.path().join("kubernetes/shards/shard-1-of-2.json"))
        .arg("--no-plots")
        .arg("--out")
        .arg(tmp.path().join("merged"))
        .assert()
        .success();
    for f in ["sweep.csv", "sweep.json", "aggregate.csv"] {
        assert!(read(&whole.join(f)) == read(&tmp.path().join("merged").join(f)), "{f}");
    }
}

#[test]
fn auto_refuses_missing_ambiguous_and_inconsistent_environments() {
    let tmp = tempfile::tempdir().unwrap();
    /// Extra flags, the environment, and what the refusal says.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (&[], &[], "neither SLURM_ARRAY_TASK_ID"),
        (&["--shard-count", "2"], &[], "neither SLURM_ARRAY_TASK_ID"),
        (&[], &[("JOB_COMPLETION_INDEX", "1")], "add --shard-count N"),
        (
            &["--shard-count", "2"],
            &[("JOB_COMPLETION_INDEX", "2")],
            "out of range",
        ),
        (
            &["--shard-count", "2"],
            &[("JOB_COMPLETION_INDEX", "one")],
            "not a whole number",
        ),
        (&[], &[("SLURM_ARRAY_TASK_ID", "1")], "only one is set"),
        (&[], &[("SLURM_ARRAY_TASK_COUNT", "2")], "only one is set"),
        (
            &[],
            &[("SLURM_ARRAY_TASK_ID", "2"), ("SLURM_ARRAY_TASK_COUNT", "2")],
            "outside the array's ids",
        ),
        (
            &["--shard-count", "3"],
            &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "2")],
            "disagrees with SLURM_ARRAY_TASK_COUNT=2",
        ),
        (
            &[],
            &[
                ("SLURM_ARRAY_TASK_ID", "2"),
                ("SLURM_ARRAY_TASK_COUNT", "2"),
                ("SLURM_ARRAY_TASK_STEP", "2"),
            ],
            "SLURM_ARRAY_TASK_STEP=2",
        ),
        (
            &[],
            &[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_COUNT", "2"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "4"),
            ],
            "not SLURM_ARRAY_TASK_COUNT=2 consecutive ids",
        ),
        (
            &["--shard-count", "2"],
            &[
                ("SLURM_ARRAY_TASK_ID", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "2"),
                ("JOB_COMPLETION_INDEX", "0"),
            ],
            "ambiguous",
        ),
    ];
    for (i, (extra, env, want)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("r{i}"));
        let mut args = vec!["--shard", "auto"];
        args.extend_from_slice(extra);
        let o = sweep(&out, &args, env).code(2).get_output().clone();
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(err.contains(want), "{env:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{env:?}: one line: {err}");
        assert!(!out.exists(), "{env:?}: refused before writing");
    }
    // --shard-count only with --shard, and not with a fixed K/N.
    sweep(&tmp.path().join("c1"), &["--shard-count", "2"], &[]).code(2);
    let o = sweep(&tmp.path().join("c2"), &["--shard", "0/2", "--shard-count", "2"], &[])
        .code(2)
        .get_output()
        .clone();
    assert!(
        String::from_utf8(o.stderr)
            .unwrap()
            .contains("--shard-count goes with --shard auto")
    );
}

#[test]
fn tune_rounds_shard_from_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let space = write(
        tmp.path(),
        "space.toml",
        "[[policy]]\nkind = \"leastinflight\"\nband = [0, 1, 2]\n\n[[policy]]\nkind = \"roundrobin\"\n",
    );
    let tune = |out: &Path, extra: &[&str], env: &[(&str, &str)]| {
        let mut c = sim();
        c.args([
            "tune",
            "scenarios/burst8.toml",
            "--budget",
            "16",
            "--quiet",
            "--no-plots",
            "--space",
        ])
        .arg(&space)
        .arg("--out")
        .arg(out)
        .args(extra);
        for v in VARS {
            c.env_remove(v);
        }
        c.envs(env.iter().copied());
        c.assert()
    };
    let (fixed, auto) = (tmp.path().join("fixed"), tmp.path().join("auto"));
    tune(&fixed, &["--shard", "1/2"], &[]).success();
    tune(
        &auto,
        &["--shard", "auto"],
        &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "2")],
    )
    .success();
    let f = "rounds/round-0/shards/shard-1-of-2.json";
    assert!(read(&auto.join(f)) == read(&fixed.join(f)), "{f}");
    assert!(!auto.join("rounds/round-0/shards/shard-0-of-2.json").exists());
    let o = tune(&tmp.path().join("none"), &["--shard", "auto"], &[])
        .code(2)
        .get_output()
        .clone();
    assert!(
        String::from_utf8(o.stderr)
            .unwrap()
            .contains("neither SLURM_ARRAY_TASK_ID")
    );
}
