//! The list of tests that skipped, printed at the end of `cargo test`: the workspace's
//! packages run in name order, so this is the last test binary of the last package (the
//! libraries have no doctests to run after it). A test that needs an absent external
//! program (a real router, promtool, pandas) passes while skipping; `skip` in
//! `tests/it/common` records why under the target's temporary folder, and this lists the
//! records and clears them, so a green run still says what it did not test.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped");
    let mut records: Vec<(String, String)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let text = std::fs::read_to_string(&p).ok()?;
            Some((p.display().to_string(), text))
        })
        .collect();
    records.sort();
    if records.is_empty() {
        println!("\nskipped tests: none");
        return;
    }
    println!("\nskipped tests ({}), each passed without testing:", records.len());
    for (path, text) in records {
        print!("  {text}");
        let _ = std::fs::remove_file(path);
    }
}
