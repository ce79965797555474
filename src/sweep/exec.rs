//! Runs a sweep's runs on a rayon pool and collects them in run order.
//!
//! Workers only simulate; the calling thread owns the results, the progress bar and the
//! partial files, which it rewrites at most once per [`PARTIAL_EVERY`] from the rows done so
//! far (in run order), so an interrupted sweep keeps its work and `--resume` picks it up.
//! Each run is a pure function of (scenario, point, seed), so the rows, and every file
//! written from them, do not depend on `--jobs` or on the order in which runs finish.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use super::spec::Plan;
use super::table::{Meta, RunRow, SweepFile, flatten};
use crate::run::Failure;
use crate::scenario::{FieldError, Scenario, Source};
use crate::sim::{RunOptions, SimError};
use crate::trace::TraceCache;

/// Minimum time between partial-file rewrites.
pub const PARTIAL_EVERY: Duration = Duration::from_secs(2);

/// Receives the rows done so far (run order) when a partial rewrite is due.
pub type PartialSink = Box<dyn FnMut(&[RunRow]) -> Result<()>>;

/// How to execute.
pub struct ExecOptions {
    /// Worker threads.
    pub jobs: usize,
    /// `(K, N)`: run only shard K of N.
    pub shard: Option<(u64, u64)>,
    /// Show progress on stderr: a bar on a terminal, else a line every `progress_every`.
    pub progress: bool,
    /// Time between progress lines when stderr is not a terminal.
    pub progress_every: Duration,
    /// Rows already done (from `--resume`), in any order.
    pub done: Vec<RunRow>,
    /// Called with the rows so far (run order) when a partial rewrite is due.
    pub on_partial: Option<PartialSink>,
}

/// What went wrong in one run.
#[derive(Debug)]
pub struct RunFailure {
    /// The run.
    pub run: u64,
    /// Description including the point's axis values and seed.
    pub message: String,
    /// Whether it was an invariant violation (a simulator bug, exit 1) rather than input.
    pub invariant: bool,
}

/// Each point's validated scenario, made once and shared by the point's runs (a run only
/// substitutes its seed), and the trace files the runs replay, parsed once for all of them.
pub struct Points {
    axes: Vec<super::spec::Axis>,
    cells: Vec<OnceLock<Result<Scenario, String>>>,
    traces: Arc<TraceCache>,
}

impl Points {
    /// Nothing validated yet for the points of `plan`; traces come from `traces`.
    pub fn new(plan: &Plan, traces: Arc<TraceCache>) -> Points {
        Points {
            axes: plan.axes.clone(),
            cells: (0..plan.points()).map(|_| OnceLock::new()).collect(),
            traces,
        }
    }

    /// The traces the runs share.
    pub fn traces(&self) -> &TraceCache {
        &self.traces
    }

    /// The validated scenario of `point` (validated on first use; its error, a scenario
    /// error naming the axis and level, on every use).
    fn scenario(&self, base: &Source, plan: &Plan, point: u64) -> Result<&Scenario, &str> {
        self.cells[point as usize]
            .get_or_init(|| {
                let src = plan.source_for(base, point).map_err(|e| e.to_string())?;
                src.scenario().map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// Validates every point (scenario keys, axis values, and the workload under the first
/// seed) before anything runs, so a bad value is reported at once with exit code 2 rather
/// than after hours of work. Another seed can still draw a workload a point cannot hold;
/// that run then fails with its point and seed named. The validated points are kept in
/// `points` for the runs.
pub fn validate_points(base: &Source, plan: &Plan, points: &Points) -> Result<()> {
    for p in 0..plan.points() {
        let mut sc = points.scenario(base, plan, p).map_err(|m| anyhow!("{m}"))?.clone();
        sc.sim.seed = plan.seeds[0];
        sc.workload_with(points.traces()).map_err(|e| {
            anyhow!(
                "{} (at {})",
                located(base, plan, p, e),
                describe(plan, p, plan.seeds[0])
            )
        })?;
    }
    Ok(())
}

/// A workload error of `point`, located in the point's source (rebuilt here: only the
/// error path needs it).
fn located(base: &Source, plan: &Plan, point: u64, e: FieldError) -> String {
    match plan.source_for(base, point) {
        Ok(src) => src.error(e).to_string(),
        Err(se) => se.to_string(),
    }
}

fn describe(plan: &Plan, point: u64, seed: u64) -> String {
    let parts: Vec<String> = plan
        .axes
        .iter()
        .zip(plan.labels(point))
        .map(|(a, l)| format!("{}={l}", a.name))
        .collect();
    format!("point {point} ({}) seed {seed}", parts.join(", "))
}

fn run_one(base: &Source, plan: &Plan, points: &Points, i: u64) -> Result<RunRow, RunFailure> {
    let (point, seed) = plan.run_at(i);
    let fail = |m: String, invariant| RunFailure {
        run: i,
        message: format!("{}: {m}", describe(plan, point, seed)),
        invariant,
    };
    let scenario = points
        .scenario(base, plan, point)
        .map_err(|m| fail(m.to_string(), false))?;
    let res =
        crate::run::at_seed(scenario, seed, points.traces(), RunOptions::summary_only()).map_err(|f| match f {
            Failure::Workload(e) => fail(located(base, plan, point, e), false),
            Failure::Sim(e @ SimError::Invariant(..)) => fail(e.to_string(), true),
            Failure::Sim(e) => fail(e.to_string(), false),
        })?;
    Ok(RunRow {
        run: i,
        point,
        seed,
        metrics: flatten(&res.summary),
    })
}

/// The runs this invocation owns, in run order.
pub fn owned_runs(plan: &Plan, shard: Option<(u64, u64)>) -> Vec<u64> {
    (0..plan.runs())
        .filter(|i| shard.is_none_or(|(k, n)| i % n == k))
        .collect()
}

/// Executes the owned runs not yet done, with the points validated in `points` (those not
/// yet validated are, once each). Returns the file (complete when every owned run
/// finished) and the wall time, or the first failure in run order.
pub fn execute(
    base: &Source,
    meta: &Meta,
    points: &Points,
    mut opts: ExecOptions,
) -> Result<(SweepFile, Duration), RunFailure> {
    let start = Instant::now();
    let plan = &meta.plan;
    // Points prepared for another grid are of no use here (their traces still are).
    let fresh;
    let points = if points.axes == plan.axes {
        points
    } else {
        fresh = Points::new(plan, points.traces.clone());
        &fresh
    };
    let owned = owned_runs(plan, opts.shard);
    let mut slots: Vec<Option<RunRow>> = vec![None; plan.runs() as usize];
    for r in std::mem::take(&mut opts.done) {
        let keep = owned.binary_search(&r.run).is_ok();
        if let Some(slot) = slots.get_mut(r.run as usize).filter(|_| keep) {
            *slot = Some(r);
        }
    }
    let todo: Vec<u64> = owned.iter().copied().filter(|&i| slots[i as usize].is_none()).collect();
    let pool = crate::run::workers(opts.jobs).map_err(|message| RunFailure {
        run: 0,
        message,
        invariant: false,
    })?;
    let mut c = Collector::new(plan, slots, &todo, &opts, start);
    let (tx, rx) = mpsc::channel::<(Result<RunRow, RunFailure>, f64)>();
    std::thread::scope(|scope| {
        let todo = &todo;
        scope.spawn(move || pool.install(|| simulate_all(base, plan, points, todo, tx)));
        for (r, cost_s) in rx {
            c.receive(r, cost_s, &mut opts);
        }
    });
    c.bar.finish_and_clear();
    let rows = c.finish(&mut opts)?;
    let complete = rows.len() == owned.len();
    Ok((
        SweepFile {
            meta: meta.clone(),
            shard: opts.shard.map(|(k, n)| [k, n]),
            complete,
            build: Some(super::build::identity().to_string()),
            rows,
        },
        start.elapsed(),
    ))
}

/// Runs `todo` on the current pool, sending each row (or failure) with its cost in seconds.
/// The lowest failing run so far bounds the rest: runs above it are skipped, runs below it
/// still run, so the failure reported (the lowest in run order) does not depend on --jobs.
fn simulate_all(
    base: &Source,
    plan: &Plan,
    points: &Points,
    todo: &[u64],
    tx: mpsc::Sender<(Result<RunRow, RunFailure>, f64)>,
) {
    let first_fail = AtomicU64::new(u64::MAX);
    todo.par_iter().for_each_with(tx, |tx, &i| {
        if i > first_fail.load(Ordering::Relaxed) {
            return;
        }
        let t0 = Instant::now();
        let r = run_one(base, plan, points, i);
        if r.is_err() {
            first_fail.fetch_min(i, Ordering::Relaxed);
        }
        // The receiver lives until every sender is dropped.
        let _ = tx.send((r, t0.elapsed().as_secs_f64()));
    });
}

/// The calling thread's side of a sweep: the rows in run order, the failures, the progress
/// shown, and the partial files rewritten at most once per [`PARTIAL_EVERY`].
struct Collector {
    start: Instant,
    slots: Vec<Option<RunRow>>,
    failures: Vec<RunFailure>,
    partial_err: Option<String>,
    progress: super::progress::Progress,
    bar: ProgressBar,
    /// Progress lines instead of the bar (stderr is not a terminal).
    lines: bool,
    last_partial: Instant,
    last_line: Instant,
}

impl Collector {
    fn new(plan: &Plan, slots: Vec<Option<RunRow>>, todo: &[u64], opts: &ExecOptions, start: Instant) -> Collector {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Collector {
            start,
            slots,
            failures: Vec::new(),
            partial_err: None,
            progress: super::progress::Progress::new(plan.points(), todo.iter().map(|&i| plan.run_at(i).0)),
            bar: progress_bar(opts.progress && tty, todo.len() as u64),
            lines: opts.progress && !tty,
            last_partial: Instant::now(),
            last_line: Instant::now(),
        }
    }

    /// Takes one run's row (or failure), shows the progress, and rewrites the partial files
    /// when they are due.
    fn receive(&mut self, r: Result<RunRow, RunFailure>, cost_s: f64, opts: &mut ExecOptions) {
        match r {
            Ok(row) => {
                let i = row.run as usize;
                self.progress.record(row.point, cost_s);
                self.slots[i] = Some(row);
                self.bar.inc(1);
                let elapsed_s = self.start.elapsed().as_secs_f64();
                if let Some(eta) = self.progress.eta_s(elapsed_s) {
                    self.bar
                        .set_message(format!("ETA {}", super::progress::fmt_duration(eta)));
                }
                if self.lines && self.last_line.elapsed() >= opts.progress_every {
                    eprintln!("{}", self.progress.line(elapsed_s));
                    self.last_line = Instant::now();
                }
            }
            Err(f) => self.failures.push(f),
        }
        if self.last_partial.elapsed() >= PARTIAL_EVERY
            && let Some(cb) = opts.on_partial.as_mut()
        {
            let rows: Vec<RunRow> = self.slots.iter().flatten().cloned().collect();
            if let Err(e) = cb(&rows) {
                self.partial_err.get_or_insert(format!("{e:#}"));
            }
            self.last_partial = Instant::now();
        }
    }

    /// The rows in run order, or the first failure in run order (the partial files written
    /// first, so the work done is kept).
    fn finish(self, opts: &mut ExecOptions) -> Result<Vec<RunRow>, RunFailure> {
        let rows: Vec<RunRow> = self.slots.into_iter().flatten().collect();
        if let Some(cb) = opts.on_partial.as_mut()
            && (!self.failures.is_empty() || self.partial_err.is_some())
        {
            let _ = cb(&rows);
        }
        if let Some(f) = self.failures.into_iter().min_by_key(|f| f.run) {
            return Err(f);
        }
        if let Some(e) = self.partial_err {
            return Err(RunFailure {
                run: 0,
                message: format!("writing partial results: {e}"),
                invariant: false,
            });
        }
        Ok(rows)
    }
}

/// A bar of `len` runs with their rate and the ETA on stderr; hidden unless `show`.
fn progress_bar(show: bool, len: u64) -> ProgressBar {
    let bar = if show {
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {rate}  {msg}")
            .expect("valid template")
            .with_key("rate", |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} runs/s", s.per_sec());
            }),
    );
    bar
}

/// `shards/shard-K-of-N.json` under `dir`.
pub fn shard_path(dir: &std::path::Path, k: u64, n: u64) -> PathBuf {
    dir.join("shards").join(format!("shard-{k}-of-{n}.json"))
}

/// Parses `K/N` (0-based K, as Slurm array and Kubernetes Indexed Job indices are).
pub fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let (k, n) = s
        .split_once('/')
        .ok_or_else(|| format!("expected K/N (e.g. 0/4), got `{s}`"))?;
    let k: u64 = k
        .trim()
        .parse()
        .map_err(|_| format!("shard index `{k}` is not a number"))?;
    let n: u64 = n
        .trim()
        .parse()
        .map_err(|_| format!("shard count `{n}` is not a number"))?;
    if n == 0 {
        return Err("shard count must be at least 1".into());
    }
    if k >= n {
        return Err(format!(
            "shard index {k} is out of range 0..{n} (indices start at 0, like SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX)"
        ));
    }
    Ok((k, n))
}

/// Turns a failure into the CLI's error (exit code decided by the caller).
pub fn failure_error(f: &RunFailure) -> anyhow::Error {
    anyhow!("{}", f.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::spec::{CliAxes, plan};

    const ROWS: &str = "arrival_s,session_id,turn,input_tokens,output_tokens,block_ids\n0,s0,0,100,5,\n0.5,s1,0,100,5,\n1,s0,1,200,5,\n";

    /// A two-backend scenario replaying `file`, with `axes` (`-L path values`) and 3 seeds.
    fn trace_sweep(file: &std::path::Path, axes: &[(&str, String)]) -> (Source, Plan) {
        let text = format!(
            "[backends]\ncount = 2\n[router.policy]\nkind = \"roundrobin\"\n[[workload.traces]]\nfile = \"{}\"\n",
            file.display()
        );
        let src = Source::parse(&text, "s.toml", "s").unwrap();
        let cli = CliAxes {
            lists: axes.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            seeds: Some(3),
            ..Default::default()
        };
        let p = plan(&src, &cli, 1000).unwrap();
        (src, p)
    }

    fn opts(jobs: usize) -> ExecOptions {
        ExecOptions {
            jobs,
            shard: None,
            progress: false,
            progress_every: Duration::from_secs(60),
            done: Vec::new(),
            on_partial: None,
        }
    }

    #[test]
    fn a_sweep_reads_each_trace_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
        std::fs::write(&a, ROWS).unwrap();
        std::fs::write(&b, ROWS.replace("200,5", "300,7")).unwrap();
        let files = format!("\"{}\",\"{}\"", a.display(), b.display());
        let axes = [
            (
                "router.policy.kind",
                "\"roundrobin\",\"leastinflight\",\"random\"".to_string(),
            ),
            ("workload.traces[0].file", files),
        ];
        let (src, plan) = trace_sweep(&a, &axes);
        assert_eq!((plan.points(), plan.runs()), (6, 18));
        let points = Points::new(&plan, Default::default());
        let inputs = crate::sweep::inputs_sha256(&src, Some(&plan), points.traces());
        // The fingerprint is the scenario text, then each file's path and bytes.
        let mut want = src.text.clone().into_bytes();
        for f in [&a, &b] {
            want.extend(f.display().to_string().as_bytes());
            want.push(0);
            want.extend(std::fs::read(f).unwrap());
            want.push(0);
        }
        assert_eq!(inputs, crate::sweep::sha256_hex(&want));
        validate_points(&src, &plan, &points).unwrap();
        let meta = crate::sweep::meta("s", &[], plan, inputs);
        let (f, _) = execute(&src, &meta, &points, opts(2)).unwrap();
        assert_eq!(f.rows.len(), 18);
        assert_eq!(
            points.traces().reads(),
            2,
            "each of the two files once, for the fingerprint and 6 points x 3 seeds"
        );
        // The second file is replayed: its longer request shows in the points that name it.
        let tokens = |p: u64| f.rows.iter().find(|r| r.point == p).unwrap().metrics["output_tokens_per_s"].clone();
        assert_ne!(tokens(0), tokens(1));
        // The same rows from runs that read their traces afresh, on one thread.
        let fresh = Points::new(&meta.plan, Default::default());
        let (g, _) = execute(&src, &meta, &fresh, opts(1)).unwrap();
        assert_eq!(f.rows, g.rows);
    }

    #[test]
    fn rounds_over_the_same_files_share_one_fingerprint_and_one_read() {
        // As `sim tune` does: the base scenario, then each round's grid of policies.
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.csv");
        std::fs::write(&a, ROWS).unwrap();
        let (src, plan) = trace_sweep(&a, &[("router.policy.kind", "\"random\",\"leastinflight\"".into())]);
        let mut fp = crate::sweep::Fingerprints::new();
        let base = fp.of(&src, None);
        src.build_with(&fp.traces).unwrap();
        assert_eq!(fp.of(&src, Some(&plan)), base);
        let points = Points::new(&plan, fp.traces.clone());
        let meta = crate::sweep::meta("s", &[], plan, base.clone());
        execute(&src, &meta, &points, opts(2)).unwrap();
        assert_eq!(fp.traces.reads(), 1);
        // The value does not depend on who read the file first.
        let fresh = crate::trace::TraceCache::new();
        assert_eq!(crate::sweep::inputs_sha256(&src, Some(&meta.plan), &fresh), base);
        assert_eq!(fresh.reads(), 1);
        assert_eq!(
            crate::sweep::inputs_sha256(&src, None, &fresh),
            base,
            "bytes read again"
        );
        assert_eq!(fresh.reads(), 1);
    }

    #[test]
    fn a_bad_level_fails_its_runs_naming_the_axis_without_validate_points() {
        // As a tune round runs: points validated on first use.
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.csv");
        std::fs::write(&a, ROWS).unwrap();
        let (src, plan) = trace_sweep(&a, &[("router.chars_per_token", "4,0".to_string())]);
        let points = Points::new(&plan, Default::default());
        let inputs = crate::sweep::inputs_sha256(&src, Some(&plan), points.traces());
        let meta = crate::sweep::meta("s", &[], plan, inputs);
        let e = execute(&src, &meta, &points, opts(2)).unwrap_err();
        assert_eq!(e.run, 3, "the first run of the bad point");
        assert!(
            e.message
                .starts_with("point 1 (chars_per_token=0) seed 1: s.toml: router.chars_per_token:"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("(value from sweep axis chars_per_token = 0)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn shard_syntax() {
        assert_eq!(parse_shard("0/4"), Ok((0, 4)));
        assert_eq!(parse_shard("3/4"), Ok((3, 4)));
        assert!(parse_shard("4/4").unwrap_err().contains("out of range"));
        assert!(parse_shard("1/0").unwrap_err().contains("at least 1"));
        assert!(parse_shard("1-4").unwrap_err().contains("K/N"));
        assert!(parse_shard("a/4").unwrap_err().contains("not a number"));
    }
}
