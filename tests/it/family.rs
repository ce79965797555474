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
