//! The committed reference (`docs/reference/`) is what the code generates, and it covers
//! every policy `sim policies` lists and every key of the scenario schema; the generated
//! blocks of README.md and the guide (counts, the policy table, the command tables) are what
//! the code generates, and no page states those counts by hand.

use std::path::{Path, PathBuf};

use crate::common::sim;
use fleetsim::reference::{POLICIES, REGENERATE, SCENARIO_KEYS, blocks, files, key_rows};

fn committed(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("docs/reference")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}; generate it with `{REGENERATE}`", p.display()))
}

#[test]
fn committed_reference_is_what_the_code_generates() {
    for (name, text) in files() {
        assert!(
            committed(name) == text,
            "docs/reference/{name} differs from what the code generates; regenerate with `{REGENERATE}` and commit it"
        );
    }
}

#[test]
fn every_policy_of_sim_policies_has_a_section() {
    let out = sim()
        .args(["policies", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out).expect("sim policies --json is JSON");
    assert!(list.len() >= 15, "only {} policies listed", list.len());
    let page = committed(POLICIES);
    for p in &list {
        let kind = p["kind"].as_str().expect("a kind");
        assert!(
            page.contains(&format!("\n## {kind}\n")),
            "policy `{kind}` has no section in docs/reference/{POLICIES}; regenerate with `{REGENERATE}`"
        );
        for q in p["params"].as_array().expect("params") {
            let key = q["key"].as_str().expect("a key");
            assert!(
                page.contains(&format!("| `{key}` |")),
                "`{kind}.{key}` is missing from {POLICIES}"
            );
        }
    }
}

#[test]
fn every_scenario_key_has_a_row() {
    let page = committed(SCENARIO_KEYS);
    let rows = key_rows();
    for top in [
        "name",
        "seed",
        "backends",
        "router",
        "workload",
        "faults",
        "fleet_events",
        "client",
    ] {
        assert!(rows.iter().any(|r| r.path == top), "schema lost `{top}`");
    }
    for r in &rows {
        assert!(
            page.contains(&format!("| `{}` |", r.path)),
            "`{}` is missing from docs/reference/{SCENARIO_KEYS}; regenerate with `{REGENERATE}`",
            r.path
        );
    }
}

#[test]
fn reference_check_and_schema_commands() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/reference");
    sim()
        .arg("reference")
        .arg("--out")
        .arg(&dir)
        .arg("--check")
        .assert()
        .success();
    let tmp = tempfile::tempdir().expect("temp dir");
    std::fs::write(tmp.path().join(POLICIES), "stale\n").expect("write");
    let out = sim()
        .arg("reference")
        .arg("--out")
        .arg(tmp.path())
        .arg("--check")
        .assert()
        .code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains(POLICIES) && err.contains(REGENERATE), "{err}");
    let schema = sim().arg("schema").assert().success().get_output().stdout.clone();
    let v: serde_json::Value = serde_json::from_slice(&schema).expect("sim schema prints JSON");
    assert!(v["properties"]["router"].is_object(), "{v}");
}

/// Where each generated block must stay: (page, block). Deleting a marker from one of these
/// pages would silently freeze the rest of its text; this list makes that a failure.
const PLACES: &[(&str, &str)] = &[
    ("README.md", "commands"),
    ("README.md", "command-count"),
    ("README.md", "policy-count"),
    ("docs/README.md", "policy-count"),
    ("docs/policies.md", "policy-count"),
    ("docs/policies.md", "policy-table"),
    ("docs/running.md", "command-count"),
    ("docs/running.md", "commands"),
    ("docs/running.md", "synopsis"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn generated_blocks_are_what_the_code_generates() {
    let root = root();
    let mut bad = Vec::new();
    let mut cli = <fleetsim::cli::Cli as clap::CommandFactory>::command();
    cli.build();
    for page in blocks::pages(&root) {
        let text = std::fs::read_to_string(root.join(&page)).expect("a page reads");
        match blocks::rewrite(&text, &page, &cli) {
            Err(e) => bad.push(format!("{}: {e}", page.display())),
            Ok((_, stale)) => bad.extend(stale.iter().map(|b| {
                format!(
                    "{}:{}: generated block `{}` differs from what the code generates",
                    page.display(),
                    b.line,
                    b.name
                )
            })),
        }
    }
    assert!(
        bad.is_empty(),
        "{}\nregenerate with `{REGENERATE}` and commit the pages",
        bad.join("\n")
    );
}

#[test]
fn the_pages_keep_their_generated_blocks() {
    let root = root();
    for (page, name) in PLACES {
        let text = std::fs::read_to_string(root.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        let found = blocks::find(&text).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(
            found.iter().any(|b| b.name == *name),
            "{page} lost its generated block `{name}`: put back `{}{name} -->` and `{}`, then run `{REGENERATE}`",
            blocks::BEGIN,
            blocks::END
        );
    }
}

/// Phrases after which a number is a count of the code's own things, which only a
/// generated block may state.
const COUNTED: &[&str] = &[
    "router policies",
    "routing policies",
    "policy kinds",
    "policies,",
    "subcommands",
];

/// `file:line: text` for each hand-written count (outside generated blocks and code blocks).
fn hand_counts(page: &Path, text: &str) -> Vec<String> {
    // The generated text blanked out, line breaks kept (so line numbers stay).
    let mut bytes = text.as_bytes().to_vec();
    for b in blocks::find(text).unwrap_or_default() {
        for c in &mut bytes[b.text] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut out = Vec::new();
    let mut fence = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        if fence {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        for (k, w) in words.iter().enumerate() {
            if !w.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let rest = words[k + 1..].join(" ");
            if COUNTED.iter().any(|p| rest.starts_with(p)) {
                out.push(format!("{}:{}: `{w} {rest}`", page.display(), i + 1));
            }
        }
    }
    out
}

#[test]
fn no_page_counts_policies_or_subcommands_by_hand() {
    let root = root();
    let mut bad = Vec::new();
    for page in blocks::pages(&root) {
        let text = std::fs::read_to_string(root.join(&page)).expect("a page reads");
        bad.extend(hand_counts(&page, &text));
    }
    assert!(
        bad.is_empty(),
        "counts written by hand (they drift when a policy or subcommand is added): use \
         `{}policy-count -->N{}` or `command-count` instead:\n{}",
        blocks::BEGIN,
        blocks::END,
        bad.join("\n")
    );
    let sample = format!(
        "There are 15 router policies.\n\n```\n3 subcommands\n```\nand 4 subcommands here,\n{}command-count -->\n22 subcommands\n{}\n",
        blocks::BEGIN,
        blocks::END
    );
    assert_eq!(
        hand_counts(Path::new("x.md"), &sample),
        ["x.md:1: `15 router policies.`", "x.md:6: `4 subcommands here,`"]
    );
}

#[test]
fn reference_root_rewrites_a_stale_block_and_check_names_it() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let page = format!(
        "# Fleet\n\nIt has {b}policy-count -->1{e} policies.\n\n{b}commands -->\n| stale |\n{e}\n",
        b = blocks::BEGIN,
        e = blocks::END
    );
    std::fs::write(tmp.path().join("README.md"), &page).expect("write");
    let out = sim()
        .arg("reference")
        .arg("--root")
        .arg(tmp.path())
        .arg("--check")
        .assert()
        .code(1);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("README.md (generated `policy-count` at line 3, `commands` at line 5)")
            && err.contains(REGENERATE),
        "{err}"
    );
    sim().arg("reference").arg("--root").arg(tmp.path()).assert().success();
    let new = std::fs::read_to_string(tmp.path().join("README.md")).expect("read");
    let n = fleetsim::policy::registry::REGISTRY.len();
    assert!(new.contains(&format!("policy-count -->{n}<!--")), "{new}");
    assert!(
        new.contains("| `sim run SCENARIO` |") && !new.contains("| stale |"),
        "{new}"
    );
    assert!(tmp.path().join("docs/reference").join(POLICIES).is_file());
    sim()
        .arg("reference")
        .arg("--root")
        .arg(tmp.path())
        .arg("--check")
        .assert()
        .success();
    std::fs::write(
        tmp.path().join("README.md"),
        format!("{}nope -->1{}", blocks::BEGIN, blocks::END),
    )
    .expect("write");
    let out = sim().arg("reference").arg("--root").arg(tmp.path()).assert().code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("README.md: line 1: unknown generated block `nope`"),
        "{err}"
    );
}
