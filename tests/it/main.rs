//! The integration tests: one test binary (`it`) with one module per area, so the crate and
//! its dependencies are linked into a test executable once, not once per file.
//!
//! `cargo test --release --test it` runs them all; a filter narrows them to a module or a
//! test, e.g. `cargo test --release --test it burst8::` or `... --test it fuzz::`.
//!
//! The modules' tests run in parallel threads of one process: a test must not change
//! process-wide state (environment variables, the current directory, resource limits) nor
//! write to a fixed path. Whatever needs such state runs `sim` as a subprocess and sets it
//! there (`fuzz` sets its address-space limit in the child).
//! Helpers shared by the modules are in `common`; a property test's saved failure seeds sit
//! beside its file as `NAME.proptest-regressions` (`common::proptest_config`).

use std::path::Path;

mod common;

mod agents;
mod atlas;
mod autoscale;
mod batch;
mod burst8;
mod calibrate;
mod capacity;
mod causes;
mod check;
mod cli;
mod cli_pipe;
mod code_map;
mod columnar;
mod conform;
mod determinism;
mod engine_modes;
mod explain;
mod exports;
mod family;
mod faults;
mod first_hour;
mod fleet;
mod fn_length;
mod fuzz;
mod fuzz_live;
mod fuzz_readers;
mod guarantees;
mod hygiene;
mod imbalance;
mod invariants;
mod journey;
mod lags;
mod links;
mod load;
mod observe;
mod physics;
mod plots;
mod policies;
mod prometheus;
mod queueing;
mod readme;
mod real_router;
mod reference;
mod report;
mod serve;
mod shard_auto;
mod streaming;
mod sweep;
mod trace;
mod tune;
mod your_fleet;

/// Every test file is a module of this binary: a `tests/NAME.rs` or `tests/NAME/main.rs`
/// would be a second test binary (Cargo finds both), and a file under `tests/it/` without
/// its `mod` line here, or a saved-seed file without its test file, would never be read.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let here = tests.join("it");
    let main = std::fs::read_to_string(here.join("main.rs")).unwrap();
    let mut problems = Vec::new();
    let mut modules = 0;
    for e in std::fs::read_dir(&tests).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.extension().is_some_and(|x| x == "rs") || (p.is_dir() && p != here && p.join("main.rs").exists()) {
            problems.push(format!(
                "tests/{name} is a test binary of its own: make it a module of tests/it/"
            ));
        }
    }
    for e in std::fs::read_dir(&here).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let module = p.extension().is_some_and(|x| x == "rs") || (p.is_dir() && p.join("mod.rs").exists());
        if module && name != "main.rs" {
            modules += 1;
            if !main.lines().any(|l| l == format!("mod {stem};")) {
                problems.push(format!(
                    "tests/it/{name} has no `mod {stem};` in tests/it/main.rs: it is never compiled"
                ));
            }
        }
        if p.extension().is_some_and(|x| x == "proptest-regressions") && !here.join(format!("{stem}.rs")).is_file() {
            problems.push(format!(
                "tests/it/{name} has no tests/it/{stem}.rs: its seeds are never replayed"
            ));
        }
    }
    assert!(modules >= 20, "only {modules} modules found in {}", here.display());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
