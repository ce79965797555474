//! # fleetsim-core
//!
//! The simulation core of fleetsim: N vLLM backends behind a router whose view of them is
//! stale, driven by a workload, measured by ground-truth metrics. It knows no command line,
//! no file format and no plot: the scenario reader (`fleetsim-io`) hands it validated
//! configs, and the application (`fleetsim`) renders what it returns. Cargo enforces that
//! wall: this crate depends on neither, and on no CLI, plotting, YAML, JUnit or schema crate
//! (a test in the application's suite checks `cargo tree`).
//!
//! ## Layers inside the core
//!
//! A module may import from its own layer and the layers below it, never from above:
//!
//! 1. **Simulation**: [`sim`], the one `match` over events that mutates several components
//!    per event, on the [`engine`] `(time, seq)` queue.
//! 2. **Components**, which never import each other sideways except as named here:
//!    [`backend`] (vLLM v1 engine model; never sees the router), [`router`] (discovery,
//!    scraper, request stats; holds the policy and hands it a view), [`policy`] (sees only
//!    a [`policy::RouterView`], built from the view layer's stats types), [`metrics`]
//!    (ground truth; never sees router or policy), [`workload`] (sessions and replay plans,
//!    generated before the run), [`faults`] and [`fleet`] (scheduled changes), [`autoscale`]
//!    (an HPA or KEDA deciding changes from scraped gauges; pods and their cost), [`dist`].
//! 3. **Shared vocabulary**: [`decision`] (the branch a policy took), [`view`] (what the
//!    router knew of a backend, with its read time, and the stats types it is built from),
//!    [`content`], [`ids`], [`rng`], [`time`].
//!
//! ## Determinism contract
//!
//! Same inputs and seed give the same results, bit for bit: time is integer nanoseconds,
//! events at one instant run in the order they were scheduled, every random draw comes from
//! a named stream derived from the master seed, and no hash map is ever iterated into
//! anything observable.

pub mod autoscale;
pub mod backend;
pub mod content;
pub mod decision;
pub mod dist;
pub mod engine;
pub mod faults;
pub mod fleet;
pub mod ids;
pub mod metrics;
pub mod policy;
pub mod rng;
pub mod router;
pub mod sim;
pub mod time;
pub mod view;
pub mod workload;

/// The walls, checked: the core's layers (module doc) and its dependency tree.
#[cfg(test)]
mod walls {
    use std::collections::BTreeMap;
    use std::path::Path;

    /// Each module's layer: a module may name (outside its tests) only modules of a lower
    /// layer. Sideways imports between components are not allowed.
    const LAYERS: [(&str, u8); 17] = [
        ("time", 0),
        ("ids", 0),
        ("rng", 0),
        ("decision", 0),
        // Token counts are checked and their errors printed as times' numbers are.
        ("content", 1),
        ("view", 1),
        ("dist", 1),
        ("engine", 1),
        ("backend", 2),
        ("workload", 2),
        ("fleet", 2),
        ("autoscale", 2),
        ("faults", 3),
        ("policy", 3),
        ("metrics", 3),
        ("router", 4),
        ("sim", 5),
    ];

    /// Crates that belong to the front end or to file formats, never to the core.
    const FRONT_END: &[&str] = &[
        "clap",
        "plotters",
        "png",
        "serde_yaml_ng",
        "quick-junit",
        "schemars",
        "indicatif",
        "comfy-table",
        "toml",
        "toml_edit",
        "csv",
        "parquet",
        "fleetsim-io",
        "tokio",
        "axum",
        "hyper",
        "hyper-util",
        "reqwest",
        "eventsource-stream",
        "argmin",
        "argmin-math",
    ];

    /// `crate::NAME` paths in `text` before its first `#[cfg(test)]`, comments left out.
    fn named_modules(text: &str) -> Vec<String> {
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let mut out = Vec::new();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or("");
            let mut rest = line;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + "crate::".len()..];
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                out.push(name);
            }
        }
        out
    }

    fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                visit(&p, files);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }

    #[test]
    fn no_module_names_a_module_of_its_own_layer_or_above() {
        let layer: BTreeMap<&str, u8> = LAYERS.into_iter().collect();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        visit(&src, &mut files);
        let mut broken = Vec::new();
        for f in files {
            let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            if rel == "lib.rs" {
                continue;
            }
            let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
            let own = *layer
                .get(top)
                .unwrap_or_else(|| panic!("{rel}: module {top} has no layer in LAYERS"));
            for m in named_modules(&std::fs::read_to_string(&f).unwrap()) {
                if m == top {
                    continue;
                }
                let theirs = *layer
                    .get(m.as_str())
                    .unwrap_or_else(|| panic!("{rel}: crate::{m} has no layer"));
                if theirs >= own {
                    broken.push(format!("{rel} (layer {own}) names crate::{m} (layer {theirs})"));
                }
            }
        }
        assert!(broken.is_empty(), "imports across the walls:\n{}", broken.join("\n"));
    }

    #[test]
    fn the_walls_test_sees_an_upward_import() {
        let names = named_modules("use crate::sim::X;\n// crate::router\n#[cfg(test)]\nuse crate::cli;");
        assert_eq!(names, vec!["sim".to_string()]);
    }

    #[test]
    fn the_core_depends_on_no_front_end_crate() {
        let out = std::process::Command::new(env!("CARGO"))
            .args([
                "tree",
                "-p",
                "fleetsim-core",
                "-e",
                "normal,build",
                "--prefix",
                "none",
                "--offline",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("running cargo tree");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let tree = String::from_utf8_lossy(&out.stdout);
        let crates: Vec<&str> = tree.lines().filter_map(|l| l.split_whitespace().next()).collect();
        assert!(crates.contains(&"rand"), "cargo tree listed: {tree}");
        let found: Vec<&str> = FRONT_END.iter().copied().filter(|c| crates.contains(c)).collect();
        assert!(found.is_empty(), "the core depends on {found:?}");
    }
}
