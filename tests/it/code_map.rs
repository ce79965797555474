//! The code maps list every module: the "Code layout" block of docs/README.md names each
//! top-level module of the three crates (as `name/` or `name.rs`, under its crate's folder),
//! and the application's crate doc (src/lib.rs) links each of them. A module added without
//! its line in both maps fails here, naming the module and the map.

use std::path::{Path, PathBuf};

/// The three crates: (name, its lib.rs, its folder as the code layout writes it).
const CRATES: &[(&str, &str, &str)] = &[
    (
        "fleetsim-core",
        "crates/fleetsim-core/src/lib.rs",
        "crates/fleetsim-core/src/",
    ),
    (
        "fleetsim-io",
        "crates/fleetsim-io/src/lib.rs",
        "crates/fleetsim-io/src/",
    ),
    ("fleetsim", "src/lib.rs", "src/"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The modules a lib.rs declares from files (`mod x;`, `pub mod x;`, `pub(crate) mod x;`),
/// not inline ones (`mod tests { ... }`).
fn modules(lib: &str) -> Vec<String> {
    lib.lines()
        .map(str::trim)
        .filter_map(|l| {
            let rest = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            Some(rest.strip_suffix(';')?.trim().to_string())
        })
        .collect()
}

/// The code layout block of the guide's index: each crate folder with the lines under it.
fn layout_sections(index: &str) -> Vec<(String, String)> {
    let after = index
        .split_once("## Code layout")
        .map(|(_, a)| a)
        .expect("docs/README.md has a `## Code layout` section");
    let block = after.split("```").nth(1).expect("the code layout is a fenced block");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if !line.starts_with(' ') && CRATES.iter().any(|(_, _, dir)| *dir == head) {
            out.push((head.to_string(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// Whether a layout section names module `m` as `m/` or `m.rs`.
fn names(section: &str, m: &str) -> bool {
    section
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')' | '|' | ':' | ';'))
        .any(|w| w == format!("{m}/") || w == format!("{m}.rs"))
}

/// Every module missing from a map, as one line naming module and map.
fn missing(index: &str, lib_doc: &str, crates: &[(&str, Vec<String>, &str)]) -> Vec<String> {
    let sections = layout_sections(index);
    let mut out = Vec::new();
    for (name, mods, dir) in crates {
        let section = sections.iter().find(|(d, _)| d == dir).map(|(_, b)| b.as_str());
        for m in mods {
            if !section.is_some_and(|s| names(s, m)) {
                out.push(format!(
                    "docs/README.md (Code layout): module `{m}` of {name} has no `{m}/` or `{m}.rs` under `{dir}`"
                ));
            }
            if !lib_doc.contains(&format!("[`{m}`]")) {
                out.push(format!(
                    "src/lib.rs (crate doc): module `{m}` of {name} is not linked as [`{m}`]"
                ));
            }
        }
    }
    out
}

fn crate_doc(lib: &str) -> String {
    lib.lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_code_maps_list_every_module() {
    let crates: Vec<(&str, Vec<String>, &str)> = CRATES
        .iter()
        .map(|(name, lib, dir)| (*name, modules(&read(lib)), *dir))
        .collect();
    for (name, mods, _) in &crates {
        assert!(mods.len() > 5, "{name}: modules not found ({mods:?})");
    }
    let bad = missing(&read("docs/README.md"), &crate_doc(&read("src/lib.rs")), &crates);
    assert!(
        bad.is_empty(),
        "the code maps leave out {} module(s); add each with what it owns:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn a_module_left_out_is_named() {
    let index = "# Guide\n\n## Code layout\n\n```\nsrc/                the app\n  cli/              parse\n  report.rs, plot/  files\n```\n";
    let doc = "[`cli`], [`report`]";
    let mods = vec![
        "cli".to_string(),
        "report".into(),
        "plot".into(),
        "sweep".into(),
        "serve".into(),
    ];
    let bad = missing(index, doc, &[("fleetsim", mods, "src/")]);
    assert_eq!(bad.len(), 5, "{bad:#?}");
    assert!(
        bad[0].contains("`plot`") && bad[0].starts_with("src/lib.rs"),
        "{bad:#?}"
    );
    assert!(
        bad[1].contains("`sweep`") && bad[1].starts_with("docs/README.md"),
        "{bad:#?}"
    );
    assert!(bad[3].contains("`serve`") && bad[4].contains("`serve`"), "{bad:#?}");
    assert_eq!(
        modules("pub mod a;\nmod b;\npub(crate) mod c;\n#[cfg(test)]\nmod tests {\n}\npub use x::y;\n"),
        ["a", "b", "c"]
    );
    assert!(Path::new(&root()).join("src/lib.rs").is_file());
}
