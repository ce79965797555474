//! `sim family`: the family is a pure function of its seed (members, tables and plot are
//! byte-identical across thread counts), its members are runnable scenarios, and bad
//! arguments exit 2 with one line.

use crate::common::sim;

fn files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for sub in ["", "members"] {
        let mut names: Vec<_> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        names.sort();
        for p in names {
            out.push((
                p.strip_prefix(dir).unwrap().display().to_string(),
                std::fs::read(&p).unwrap(),
            ));
        }
    }
    out
}

#[test]
fn the_family_is_byte_identical_across_thread_counts_and_its_members_run() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |jobs: &str, name: &str| {
        let dir = tmp.path().join(name);
        sim()
            .args(["family", "-n", "3", "--seed", "5", "--seeds", "2", "-j", jobs])
            .args(["--only", "own in-flight,own/slots + replace", "--out"])
            .arg(&dir)
            .assert()
            .success()
            .stdout(predicates::str::contains("| own/slots + replace |"));
        dir
    };
    let (a, b) = (run("1", "a"), run("2", "b"));
    let (fa, fb) = (files(&a), files(&b));
    let names: Vec<&str> = fa.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "family.csv",
            "regret.md",
            "regret.png",
            "regret.svg",
            "members/family-000.toml",
            "members/family-001.toml",
            "members/family-002.toml"
        ]
    );
    assert!(fa == fb, "outputs differ between -j 1 and -j 2");
    let csv = String::from_utf8(fa[0].1.clone()).unwrap();
    // 3 members x 2 candidates, and on each member one of the two is the best (regret 1).
    assert_eq!(csv.lines().count(), 1 + 6);
    for m in 0..3 {
        let best = csv
            .lines()
            .filter(|l| l.starts_with(&format!("{m},")))
            .filter(|l| l.split(',').nth(7) == Some("1.0000"))
            .count();
        assert!(best >= 1, "member {m} has no best candidate:\n{csv}");
    }
    // A member is an ordinary scenario: `sim run` runs it.
    let out = tmp.path().join("run");
    sim()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(a.join("members/family-001.toml"))
        .assert()
        .success();
}

#[test]
fn list_prints_the_members_without_running_and_bad_arguments_exit_2() {
    let out = sim()
        .args(["family", "-n", "4", "--seed", "9", "--list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().filter(|l| l.starts_with("member")).count(), 4);
    assert!(text.contains("candidate  own/slots + replace"));
    let e = sim().args(["family", "--only", "nope"]).output().unwrap();
    assert_eq!(e.status.code(), Some(2));
    let err = String::from_utf8(e.stderr).unwrap();
    assert!(err.starts_with("error: --only: unknown candidate `nope`"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let e = sim().args(["family", "-n", "0"]).output().unwrap();
    assert_eq!(e.status.code(), Some(2));
}

/// A family around the user's scenario judges the user's candidates beside the scenario's
/// own policy: byte-identical across thread counts, member 0 the scenario as written, and
/// (burst8 at its centre) the slot-aware rule the most robust of the three.
#[test]
fn a_family_around_the_users_scenario_judges_the_users_candidates() {
    let tmp = tempfile::tempdir().unwrap();
    let cands = tmp.path().join("cands.toml");
    std::fs::write(
        &cands,
        "[[candidate]]\nlabel = \"round robin\"\npolicy = { kind = \"roundrobin\" }\n",
    )
    .unwrap();
    let run = |jobs: &str, name: &str| {
        let dir = tmp.path().join(name);
        sim()
            .args(["family", "--center", "scenarios/burst8.toml", "-n", "4", "--seeds", "2", "-j", jobs])
            .arg("--candidates")
            .arg(&cands)
            .args([
                "--candidate",
                "own/slots={ kind = \"prefixaware\", prefix_min_match_length = 16384, fallback = \"local_slots\", band = 0, tie = \"first\" }",
                "--out",
            ])
            .arg(&dir)
            .assert()
            .success()
            .stdout(predicates::str::contains("| as written | the centre's own (burst8.toml) |"))
            .stdout(predicates::str::contains("| round robin | yours (cands.toml) |"))
            .stdout(predicates::str::contains("Centre: `scenarios/burst8.toml`; member 0 is it as written"));
        dir
    };
    let (a, b) = (run("1", "a"), run("2", "b"));
    assert!(files(&a) == files(&b), "outputs differ between -j 1 and -j 2");
    let csv = std::fs::read_to_string(a.join("family.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 4 * 3, "{csv}");
    // Member 0 is burst8 itself: its own policy strands what `sim run` reports on seeds 1-2.
    let row = csv
        .lines()
        .find(|l| l.starts_with("0,") && l.contains(",as written,"))
        .unwrap();
    let idle: f64 = row.split(',').nth(4).unwrap().parse().unwrap();
    assert!((idle - (197.4 + 210.8) / 2.0).abs() < 0.1, "{row}");
    // The slot-aware rule is the best or near it on every member; the centre's own is not.
    let worst = |label: &str| {
        csv.lines()
            .filter(|l| l.contains(&format!(",{label},")))
            .map(|l| l.split(',').nth(7).unwrap().parse::<f64>().unwrap())
            .fold(0.0, f64::max)
    };
    assert!(worst("own/slots") < 1.5 && worst("as written") > 10.0, "{csv}");
    sim()
        .args(["run", "--quiet", "--no-files"])
        .arg(a.join("members/burst8-003.toml"))
        .assert()
        .success();
}

#[test]
fn bad_centres_and_candidates_exit_2_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[candidate]]\nlabel = \"x\"\npolicy = { kind = \"roundrobin\" }\nnote = 1\n",
    )
    .unwrap();
    let nope = tmp.path().join("nope.toml");
    std::fs::write(&nope, "[[candidate]]\nlabel = \"x\"\npolicy = { kind = \"nope\" }\n").unwrap();
    let cases: [(Vec<&std::ffi::OsStr>, &str); 6] = [
        (
            vec!["--candidate".as_ref(), "rr".as_ref()],
            "--candidate `rr`: expected LABEL=",
        ),
        (
            vec![
                "--candidate".as_ref(),
                "a={kind=\"roundrobin\"}".as_ref(),
                "--candidate".as_ref(),
                "a={kind=\"random\"}".as_ref(),
            ],
            "two candidates are labelled `a`",
        ),
        (
            vec!["--candidates".as_ref(), bad.as_os_str()],
            "candidate[0].note: unknown key",
        ),
        (vec!["--candidates".as_ref(), nope.as_os_str()], "member 0 under `x`"),
        (
            vec!["--center".as_ref(), "scenarios/missing.toml".as_ref()],
            "scenarios/missing.toml",
        ),
        (
            vec![
                "--center".as_ref(),
                "scenarios/burst8.toml".as_ref(),
                "--set".as_ref(),
                "router.policy.fallback=nope".as_ref(),
            ],
            "router.policy.fallback",
        ),
    ];
    for (args, needle) in cases {
        let e = sim()
            .args(["family", "-n", "2", "--seeds", "1"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8(e.stderr).unwrap();
        assert_eq!(e.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    let e = sim().args(["family", "--set", "seed=2"]).output().unwrap();
    assert_eq!(e.status.code(), Some(2));
}
