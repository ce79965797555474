//! Streamed outputs: a run that hands its decision audit out in batches as it goes
//! (`sim::run_streamed`, what `sim run` does) writes byte-identical decision files, CSV
//! and Parquet, and the same hints and summary as a run that keeps the audit whole; it
//! never holds more than one batch of decisions; and `--format auto` picks the format by
//! the planned request count. Likewise the request records and the time series
//! (`RecordSink::takes_requests`, `takes_series`): the same tables, summary and plot.

use std::path::Path;

use crate::common::*;

use fleetsim::export::Tables;
use fleetsim::export::tables::{DecisionFiles, RecordFiles, write_requests_and_series};
use fleetsim::hints::{HintScan, hints};
use fleetsim::metrics::{DecisionLog, RecordSink, RequestRec, TsRow};
use fleetsim::plot::save;
use fleetsim::plot::series::{BackendSeries, SeriesPoints};
use fleetsim::sim::{EngineMode, RunOptions, run_streamed};

/// Writes every batch to both formats at once and keeps only counts.
struct Files<'k> {
    keys: &'k [String],
    entries: usize,
    csv: DecisionFiles,
    parquet: DecisionFiles,
    scan: HintScan,
    batches: usize,
    rows: usize,
    most_rows: usize,
}

impl RecordSink for Files<'_> {
    fn decisions(&mut self, batch: DecisionLog) {
        assert!(!batch.rows.is_empty(), "an empty batch");
        self.batches += 1;
        self.rows += batch.rows.len();
        self.most_rows = self.most_rows.max(batch.rows.len());
        self.scan.add(&batch);
        let keys = self.keys;
        self.csv.add(&batch, &|s| keys[s].as_str()).unwrap();
        self.parquet.add(&batch, &|s| keys[s].as_str()).unwrap();
    }

    fn batch_entries(&self) -> usize {
        self.entries
    }
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Held and streamed in batches of `entries` view entries: the same files, hints and
/// summary; each batch at most `entries / backends` decisions (rounded up).
fn same_streamed_as_held(name: &str, sets: &[(&str, &str)], entries: usize) {
    let (s, w) = shipped(name, sets);
    let interval_s = s.sim.router.engine_stats_interval.as_secs_f64();
    let tmp = tempfile::tempdir().unwrap();
    let (held_dir, streamed_dir) = (tmp.path().join("held"), tmp.path().join("streamed"));
    std::fs::create_dir_all(held_dir.join("pq")).unwrap();
    std::fs::create_dir_all(streamed_dir.join("pq")).unwrap();

    let held = run_full(&s, &w);
    let n = held.decisions.n_backends;
    let names: Vec<String> = held.summary.backends.iter().map(|b| b.name.clone()).collect();
    for (dir, tables) in [(held_dir.clone(), Tables::Csv), (held_dir.join("pq"), Tables::Parquet)] {
        let mut f = DecisionFiles::create(&dir, tables, n).unwrap();
        f.add(&held.decisions, &|k| held.session_keys[k].as_str()).unwrap();
        f.finish().unwrap();
    }

    let mut sink = Files {
        keys: &held.session_keys,
        entries,
        csv: DecisionFiles::create(&streamed_dir, Tables::Csv, n).unwrap(),
        parquet: DecisionFiles::create(&streamed_dir.join("pq"), Tables::Parquet, n).unwrap(),
        scan: HintScan::new(n, interval_s),
        batches: 0,
        rows: 0,
        most_rows: 0,
    };
    let (streamed, _) = run_streamed(s.sim.clone(), &w, RunOptions::default(), EngineMode::Fast, &mut sink).unwrap();
    let Files {
        csv,
        parquet,
        scan,
        batches,
        rows,
        most_rows,
        ..
    } = sink;
    csv.finish().unwrap();
    parquet.finish().unwrap();

    assert!(
        streamed.decisions.rows.is_empty(),
        "{name}: the streamed run kept decisions"
    );
    assert!(streamed.decisions.views.is_empty() && streamed.decisions.truth.is_empty());
    assert_eq!(rows, held.decisions.rows.len(), "{name}: decisions handed out");
    assert!(batches >= 3, "{name}: {batches} batches, too few to test the cuts");
    assert!(
        most_rows <= entries.div_ceil(n),
        "{name}: a batch of {most_rows} decisions, more than {entries} entries / {n} backends"
    );
    for f in [
        "decisions.csv",
        "decisions_long.csv",
        "pq/decisions.parquet",
        "pq/decisions_long.parquet",
    ] {
        assert!(read(&held_dir, f) == read(&streamed_dir, f), "{name}: {f} differs");
    }
    assert_eq!(
        scan.finish(&names),
        hints(&held.decisions, &names, interval_s),
        "{name}: hints"
    );
    assert_eq!(
        serde_json::to_string(&streamed.summary).unwrap(),
        serde_json::to_string(&held.summary).unwrap(),
        "{name}: summary"
    );
    assert_eq!(streamed.requests, held.requests, "{name}: requests");
}

/// Runs with faults (failed scrapes, zero stats) and several policies, cut into batches
/// that are no multiple of the fleet size.
#[test]
fn streamed_decisions_match_the_held_audit() {
    same_streamed_as_held("fault-scrape-failure.toml", &[], 37);
    same_streamed_as_held(
        "fault-scrape-failure.toml",
        &[("router.policy", "{ kind = \"leastinflight\" }")],
        37,
    );
    same_streamed_as_held("fault-zero-stats.toml", &[], 50);
    same_streamed_as_held(
        "compare-steady-chat.toml",
        &[("router.policy", "{ kind = \"sglang_cache_aware\" }")],
        1,
    );
    same_streamed_as_held(
        "compare-steady-chat.toml",
        &[("router.policy", "{ kind = \"llmd\" }")],
        1000,
    );
}

/// Takes the request records and time series as a run hands them out, writing them to both
/// formats and the plot's points at once, and checks the hand-off contract as it goes.
struct Records<'k> {
    keys: &'k [String],
    batch: usize,
    csv: RecordFiles,
    parquet: RecordFiles,
    points: SeriesPoints,
    /// The next request id expected.
    next_id: usize,
    request_batches: usize,
    series_batches: usize,
    most: usize,
}

impl RecordSink for Records<'_> {
    fn decisions(&mut self, _: DecisionLog) {}

    fn takes_requests(&self) -> bool {
        true
    }

    fn requests(&mut self, first_id: usize, batch: Vec<RequestRec>) {
        assert!(!batch.is_empty(), "an empty batch of records");
        assert_eq!(first_id, self.next_id, "records out of order");
        self.next_id += batch.len();
        self.request_batches += 1;
        self.most = self.most.max(batch.len());
        let keys = self.keys;
        self.csv.add_requests(first_id, &batch, &|s| keys[s].as_str()).unwrap();
        self.parquet
            .add_requests(first_id, &batch, &|s| keys[s].as_str())
            .unwrap();
    }

    fn record_batch(&self) -> usize {
        self.batch
    }

    fn takes_series(&self) -> bool {
        true
    }

    fn series(&mut self, rows: Vec<TsRow>) {
        assert!(!rows.is_empty(), "an empty batch of rows");
        self.series_batches += 1;
        self.most = self.most.max(rows.len());
        self.points.add(&rows);
        self.csv.add_series(&rows).unwrap();
        self.parquet.add_series(&rows).unwrap();
    }
}

/// Held and streamed in batches of `batch` records or rows: the same requests and
/// timeseries files (CSV and Parquet), summary and plot, every record handed over once in
/// id order, the result holding none.
fn same_records_streamed_as_held(name: &str, sets: &[(&str, &str)], batch: usize) {
    let (s, w) = shipped(name, sets);
    let tmp = tempfile::tempdir().unwrap();
    let (held_dir, streamed_dir) = (tmp.path().join("held"), tmp.path().join("streamed"));
    for d in [&held_dir, &streamed_dir] {
        std::fs::create_dir_all(d.join("pq")).unwrap();
    }
    let held = run_full(&s, &w);
    write_requests_and_series(&held_dir, &held, Tables::Csv).unwrap();
    write_requests_and_series(&held_dir.join("pq"), &held, Tables::Parquet).unwrap();
    save(
        &BackendSeries::new(&held.summary, &held.series),
        &held_dir.join("plot"),
        fleetsim::plot::scaled::BASE_DPI,
    )
    .unwrap();

    let labels = &s.sim.labels;
    let mut sink = Records {
        keys: &held.session_keys,
        batch,
        csv: RecordFiles::create(&streamed_dir, Tables::Csv, labels).unwrap(),
        parquet: RecordFiles::create(&streamed_dir.join("pq"), Tables::Parquet, labels).unwrap(),
        points: SeriesPoints::new(s.sim.backends.len()),
        next_id: 0,
        request_batches: 0,
        series_batches: 0,
        most: 0,
    };
    let (streamed, _) = run_streamed(s.sim.clone(), &w, RunOptions::default(), EngineMode::Fast, &mut sink).unwrap();
    let Records {
        csv,
        parquet,
        points,
        next_id,
        request_batches,
        series_batches,
        most,
        ..
    } = sink;
    csv.finish().unwrap();
    parquet.finish().unwrap();
    save(
        &BackendSeries::of_points(&streamed.summary, points),
        &streamed_dir.join("plot"),
        fleetsim::plot::scaled::BASE_DPI,
    )
    .unwrap();

    assert!(
        streamed.requests.is_empty() && streamed.series.is_empty(),
        "{name}: kept records"
    );
    assert_eq!(next_id, held.requests.len(), "{name}: records handed over");
    assert!(
        request_batches >= 3 && series_batches >= 3,
        "{name}: {request_batches} and {series_batches} batches, too few to test the cuts"
    );
    assert!(most <= batch, "{name}: a batch of {most}, more than {batch}");
    for f in [
        "requests.csv",
        "timeseries.csv",
        "pq/requests.parquet",
        "pq/timeseries.parquet",
        "plot.svg",
    ] {
        assert!(read(&held_dir, f) == read(&streamed_dir, f), "{name}: {f} differs");
    }
    assert_eq!(
        serde_json::to_string(&streamed.summary).unwrap(),
        serde_json::to_string(&held.summary).unwrap(),
        "{name}: summary"
    );
}

/// Records streamed with failures, retries and restarts (fleet events), a lagged request
/// stats feed (records final only once their dispatch is recorded), labelled fleets, replayed
/// traces (the replay block), a run cut off with requests in flight, and several policies,
/// in batches that divide nothing.
#[test]
fn streamed_records_match_the_held_ones() {
    same_records_streamed_as_held("fleet-restart.toml", &[], 7);
    same_records_streamed_as_held(
        "fleet-restart.toml",
        &[
            ("router.policy", "{ kind = \"leastinflight\" }"),
            ("router.request_stats_lag_s", "30"),
        ],
        13,
    );
    same_records_streamed_as_held("fleet-join.toml", &[], 5);
    same_records_streamed_as_held("mixed-fleet.toml", &[], 97);
    same_records_streamed_as_held("trace-agents.toml", &[], 11);
    same_records_streamed_as_held("fault-router-restart.toml", &[("limits.max_sim_time_s", "60")], 3);
    same_records_streamed_as_held(
        "compare-steady-chat.toml",
        &[("router.policy", "{ kind = \"sglang_cache_aware\" }")],
        1,
    );
}

/// `sim run` streams the audit unless `--explain` needs it whole: the same files either way.
#[test]
fn sim_run_writes_the_same_files_streamed_and_held() {
    let tmp = tempfile::tempdir().unwrap();
    for format in ["csv", "parquet"] {
        let (a, b) = (
            tmp.path().join(format!("s-{format}")),
            tmp.path().join(format!("h-{format}")),
        );
        for (dir, extra) in [(&a, None), (&b, Some("--explain"))] {
            sim()
                .args([
                    "run",
                    "scenarios/fault-scrape-failure.toml",
                    "--quiet",
                    "--format",
                    format,
                    "--out",
                ])
                .arg(dir)
                .args(extra)
                .assert()
                .success();
        }
        let names = ["decisions", "decisions_long", "requests", "timeseries"];
        for t in names {
            let f = format!("{t}.{format}");
            assert!(read(&a, &f) == read(&b, &f), "{f} differs streamed and held");
        }
        for f in ["summary.json", "hints.json"] {
            assert_eq!(read(&a, f), read(&b, f), "{f}");
        }
    }
}

/// `--format auto` (the default) writes CSV for a small run without a word and Parquet for
/// one planning 100,000 requests or more, saying so on stderr.
#[test]
fn format_auto_picks_parquet_for_large_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    sim()
        .args(["run", "scenarios/burst8.toml", "--out"])
        .arg(&small)
        .assert()
        .success()
        .stderr(predicates::str::contains("Parquet").not());
    assert!(small.join("requests.csv").is_file() && !small.join("requests.parquet").exists());

    // 1 M planned requests, simulated for one second.
    let large = tmp.path().join("large");
    sim()
        .args([
            "run",
            "scenarios/bench/trace-mooncake-1m.toml",
            "--set",
            "limits.max_sim_time_s=1",
            "--out",
        ])
        .arg(&large)
        .assert()
        .success()
        .stderr(predicates::str::contains(
            "note: --format auto: 1000000 planned requests (at least 100000), so the tables are Parquet",
        ));
    for t in ["requests", "timeseries", "decisions", "decisions_long"] {
        assert!(large.join(format!("{t}.parquet")).is_file(), "{t}.parquet");
        assert!(!large.join(format!("{t}.csv")).exists(), "{t}.csv");
    }
}

use predicates::prelude::PredicateBooleanExt;
