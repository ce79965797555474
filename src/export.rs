//! Result files. Export sees only a [`RunResult`], never simulation internals.
//!
//! `summary.json`, `requests.csv`, `timeseries.csv`, `decisions.csv`, `hints.json` and `scenario.toml`
//! (the effective scenario, overrides applied) are byte-identical for the same scenario and
//! seed. `perf.json` holds wall-clock figures and is the only file that varies run to run.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::sim::RunResult;
use crate::time::{SimTime, ns_to_secs};

fn t(x: SimTime) -> String {
    format!("{}", ns_to_secs(x.0))
}

fn opt(x: Option<SimTime>) -> String {
    x.map(t).unwrap_or_default()
}

fn diff(a: Option<SimTime>, b: Option<SimTime>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{}", ns_to_secs((b - a).0)),
        _ => String::new(),
    }
}

/// Wall-clock measurements of a run.
#[derive(Clone, Debug, Serialize)]
pub struct Perf {
    /// Wall seconds spent in the event loop.
    pub wall_s: f64,
    /// Events processed.
    pub events: u64,
    /// Events per wall second.
    pub events_per_s: f64,
    /// Requests simulated per wall second.
    pub requests_per_s: f64,
}

/// Writes all files into `dir`; returns their paths.
pub fn write_all(
    dir: &Path,
    res: &RunResult,
    scenario_toml: &str,
    perf: &Perf,
    hints: &[crate::hints::Hint],
) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating results folder {}", dir.display()))?;
    let mut written = Vec::new();
    let mut file = |name: &str, f: &dyn Fn(&Path) -> Result<()>| -> Result<()> {
        let p = dir.join(name);
        f(&p).with_context(|| format!("writing {}", p.display()))?;
        written.push(p);
        Ok(())
    };
    file("summary.json", &|p| write_json(p, &res.summary))?;
    file("requests.csv", &|p| write_requests(p, res))?;
    file("timeseries.csv", &|p| write_series(p, res))?;
    file("decisions.csv", &|p| write_decisions(p, res))?;
    file("scenario.toml", &|p| Ok(fs::write(p, scenario_toml)?))?;
    file("hints.json", &|p| write_json(p, &hints))?;
    file("perf.json", &|p| write_json(p, perf))?;
    Ok(written)
}

/// Pretty JSON plus a trailing newline.
pub fn write_json<T: Serialize>(p: &Path, v: &T) -> Result<()> {
    let mut f = fs::File::create(p)?;
    serde_json::to_writer_pretty(&mut f, v)?;
    f.write_all(b"\n")?;
    Ok(())
}

fn write_requests(p: &Path, res: &RunResult) -> Result<()> {
    let mut w = csv::Writer::from_path(p)?;
    w.write_record([
        "request_id",
        "session",
        "turn",
        "backend",
        "branch",
        "prompt_tokens",
        "output_tokens",
        "cached_tokens",
        "preemptions",
        "t_router_s",
        "t_engine_s",
        "t_admit_s",
        "t_first_token_s",
        "t_first_chunk_s",
        "t_finish_engine_s",
        "t_done_s",
        "t_failed_s",
        "queue_wait_s",
        "ttft_s",
        "e2e_s",
    ])?;
    for (i, r) in res.requests.iter().enumerate() {
        w.write_record([
            i.to_string(),
            res.session_keys[r.session.index()].clone(),
            r.turn.to_string(),
            r.backend.to_string(),
            r.branch.as_str().to_string(),
            r.prompt_tokens.to_string(),
            r.output_tokens.to_string(),
            r.cached_tokens.to_string(),
            r.preemptions.to_string(),
            t(r.t_router),
            opt(r.t_engine),
            opt(r.t_admit),
            opt(r.t_first_token),
            opt(r.t_first_chunk),
            opt(r.t_finish_engine),
            opt(r.t_done),
            opt(r.t_failed),
            diff(r.t_engine, r.t_admit),
            diff(Some(r.t_router), r.t_first_chunk),
            diff(Some(r.t_router), r.t_done),
        ])?;
    }
    w.flush()?;
    Ok(())
}

fn write_series(p: &Path, res: &RunResult) -> Result<()> {
    let mut w = csv::Writer::from_path(p)?;
    w.write_record(["t_s", "backend", "running", "waiting", "kv_used_blocks"])?;
    for r in &res.series {
        w.write_record([
            t(r.t),
            r.backend.to_string(),
            r.running.to_string(),
            r.waiting.to_string(),
            r.kv_used_blocks.to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}

fn write_decisions(p: &Path, res: &RunResult) -> Result<()> {
    let log = &res.decisions;
    let mut w = csv::Writer::from_path(p)?;
    let mut header: Vec<String> = [
        "t_s",
        "request_id",
        "session",
        "turn",
        "branch",
        "backend",
        "match_chars",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for i in 0..log.n_backends {
        for col in [
            "listed",
            "view_running",
            "view_waiting",
            "view_age_s",
            "view_window_dispatches",
            "true_outstanding",
        ] {
            header.push(format!("b{i}_{col}"));
        }
    }
    w.write_record(&header)?;
    for (k, d) in log.rows.iter().enumerate() {
        let (view, truth) = log.detail(k);
        let mut row = vec![
            t(d.t),
            d.request.to_string(),
            res.session_keys[d.session.index()].clone(),
            d.turn.to_string(),
            d.branch.as_str().to_string(),
            d.backend.to_string(),
            d.match_chars.to_string(),
        ];
        for (v, tr) in view.iter().zip(truth) {
            row.push(u8::from(v.listed).to_string());
            match v.engine {
                Some(e) => {
                    row.push(e.running.to_string());
                    row.push(e.waiting.to_string());
                    row.push(format!("{}", ns_to_secs((d.t - e.read_at).0)));
                }
                None => row.extend([String::new(), String::new(), String::new()]),
            }
            row.push(v.requests.map(|r| r.window_dispatches.to_string()).unwrap_or_default());
            row.push(tr.to_string());
        }
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}
