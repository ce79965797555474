//! `sim run --format parquet`: the Parquet tables hold exactly the CSV tables' columns and
//! values, are byte-identical run to run, are listed in `run.json`, and the commands that
//! read a run folder either read it (`sim explain`, `sim compare`) or say they need CSV.

use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;

use crate::common::{csv_table, sim};

const TABLES: [&str; 4] = ["requests", "timeseries", "decisions", "decisions_long"];

fn run(out: &Path, extra: &[&str]) {
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(out)
        .args(extra)
        .assert()
        .success();
}

/// A Parquet table with every value written as the CSV writes it (a null as an empty field).
fn parquet_table(p: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let r = SerializedFileReader::new(std::fs::File::open(p).unwrap()).unwrap();
    let head = r
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let rows = r
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            row.unwrap()
                .get_column_iter()
                .map(|(_, f)| match f {
                    Field::Null => String::new(),
                    Field::Long(x) => x.to_string(),
                    Field::Double(x) => x.to_string(),
                    Field::Str(s) => s.clone(),
                    other => panic!("{}: unexpected value {other:?}", p.display()),
                })
                .collect()
        })
        .collect();
    (head, rows)
}

#[test]
fn parquet_tables_hold_the_csv_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let (csv_dir, pq_dir, again) = (tmp.path().join("csv"), tmp.path().join("pq"), tmp.path().join("pq2"));
    run(&csv_dir, &[]);
    run(&pq_dir, &["--format", "parquet"]);
    run(&again, &["--format", "parquet"]);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(pq_dir.join("run.json")).unwrap()).unwrap();
    for t in TABLES {
        let (csv_head, csv_rows) = csv_table(&csv_dir.join(format!("{t}.csv")));
        let (pq_head, pq_rows) = parquet_table(&pq_dir.join(format!("{t}.parquet")));
        assert_eq!(pq_head, csv_head, "{t}: columns");
        assert_eq!(pq_rows.len(), csv_rows.len(), "{t}: rows");
        assert!(!pq_rows.is_empty(), "{t}: no rows");
        for (i, (a, b)) in pq_rows.iter().zip(&csv_rows).enumerate() {
            assert_eq!(a, b, "{t}: row {i}");
        }
        assert!(!pq_dir.join(format!("{t}.csv")).exists(), "{t}.csv is not written");
        assert!(
            manifest["files"][format!("{t}.parquet")].is_string(),
            "{t}.parquet in run.json"
        );
        let (a, b) = (
            std::fs::read(pq_dir.join(format!("{t}.parquet"))).unwrap(),
            std::fs::read(again.join(format!("{t}.parquet"))).unwrap(),
        );
        assert!(a == b, "{t}.parquet differs between two runs");
    }
    // Everything else is the CSV run's, byte for byte.
    for f in ["summary.json", "hints.json", "scenario.toml"] {
        assert_eq!(
            std::fs::read(pq_dir.join(f)).unwrap(),
            std::fs::read(csv_dir.join(f)).unwrap(),
            "{f}"
        );
    }
    assert_eq!(
        std::fs::read(pq_dir.join("run.json")).unwrap(),
        std::fs::read(again.join("run.json")).unwrap()
    );
}

#[test]
fn run_readers_take_a_parquet_run_or_say_they_need_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let (csv_dir, pq_dir) = (tmp.path().join("csv"), tmp.path().join("pq"));
    run(&csv_dir, &[]);
    run(&pq_dir, &["--format", "parquet"]);
    // compare and explain read summary.json and scenario.toml, verified against run.json.
    sim().arg("compare").arg(&csv_dir).arg(&pq_dir).assert().success();
    sim()
        .arg("explain")
        .arg(&pq_dir)
        .arg("--no-counterfactual")
        .assert()
        .success();
    // A changed Parquet file is caught like a changed CSV file.
    let p = pq_dir.join("requests.parquet");
    let mut bytes = std::fs::read(&p).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&p, bytes).unwrap();
    let o = sim()
        .arg("compare")
        .arg(&csv_dir)
        .arg(&pq_dir)
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(String::from_utf8(o.stderr).unwrap().contains("requests.parquet"));
    // The trace converter reads requests.csv, and says so.
    run(&pq_dir, &["--format", "parquet"]);
    let o = sim()
        .args(["trace", "convert", "--from-run"])
        .arg(&pq_dir)
        .arg("--out")
        .arg(tmp.path().join("t.csv"))
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("--format parquet") && err.lines().count() == 1, "{err}");
    sim()
        .args(["run", "scenarios/burst8.toml", "--format", "parquet", "--no-files"])
        .assert()
        .code(2);
}

/// pandas (with pyarrow) reads the tables as the docs show; skips, saying so, when the
/// Python in `FLEETSIM_PYTHON` (or `python3`) lacks them. `.ci/run` installs them.
#[test]
fn pandas_reads_the_parquet_tables() {
    let py = std::env::var("FLEETSIM_PYTHON").unwrap_or_else(|_| "python3".into());
    let has = std::process::Command::new(&py)
        .args(["-c", "import pandas, pyarrow"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        crate::common::skip(
            "columnar::pandas_reads_the_parquet_tables",
            &format!("{py} has no pandas and pyarrow (set FLEETSIM_PYTHON; .ci/run installs them)"),
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    run(&dir, &["--format", "parquet"]);
    let script = r#"
import sys, pandas as pd
d = sys.argv[1]
df = pd.read_parquet(f"{d}/requests.parquet")
print(len(df), df["ttft_s"].quantile(0.99), df["ttft_s"].isna().sum(), df["session"].dtype)
long = pd.read_parquet(f"{d}/decisions_long.parquet")
print(len(long), int(long["picked"].sum()))
"#;
    let o = std::process::Command::new(&py)
        .args(["-c", script])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let mut lines = out.lines();
    let first: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let requests = summary["requests"]["arrived"].as_u64().unwrap();
    assert_eq!(first[0], requests.to_string(), "{out}");
    // numpy's default quantile is the one fleetsim's percentiles use.
    let p99: f64 = first[1].parse().unwrap();
    let want = summary["ttft_s"]["p99"].as_f64().unwrap();
    // summary.json rounds seconds to the microsecond.
    assert!((p99 - want).abs() <= 1e-6, "{p99} vs {want}");
    let second: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let backends = summary["backends"].as_array().unwrap().len() as u64;
    assert_eq!(second[0], (requests * backends).to_string(), "{out}");
    assert_eq!(second[1], requests.to_string(), "one pick per decision: {out}");
}
