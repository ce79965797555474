//! Sweep results as data: one [`RunRow`] per (point, seed), the [`Meta`] that identifies the
//! sweep, per-point aggregates, and the files they are written to. Everything here is a
//! pure function of `(meta, rows)`, which is what makes `--jobs`, `--shard` + `sim merge`
//! and `--resume` byte-identical to one sequential run.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::spec::Plan;
pub use crate::metrics::flatten;

/// Identifies a sweep; shards and resumed runs must agree on all of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// fleetsim version that produced the rows.
    pub fleetsim_version: String,
    /// Scenario name.
    pub scenario: String,
    /// SHA-256 of the scenario file's bytes.
    pub scenario_sha256: String,
    /// `--set` overrides applied before the axes.
    pub sets: Vec<String>,
    /// Axes, seeds, headline metrics and plots.
    pub plan: Plan,
    /// Points in the grid.
    pub points: u64,
    /// Runs (points x seeds).
    pub runs: u64,
}

impl Meta {
    /// True if `other` describes the same runs (version, scenario, overrides, axes, seeds).
    /// Table and plot settings (headline metrics, plot axes) may differ: they only change
    /// how the same rows are presented.
    pub fn same_runs(&self, other: &Meta) -> bool {
        self.fleetsim_version == other.fleetsim_version
            && self.scenario == other.scenario
            && self.scenario_sha256 == other.scenario_sha256
            && self.sets == other.sets
            && self.plan.axes == other.plan.axes
            && self.plan.seeds == other.plan.seeds
            && self.points == other.points
            && self.runs == other.runs
    }

    /// Checks a file's metadata for internal consistency (files can be edited by hand).
    pub fn validate(&self) -> Result<()> {
        let plan = &self.plan;
        anyhow::ensure!(!plan.seeds.is_empty(), "the sweep lists no seeds");
        if let Some(a) = plan.axes.iter().find(|a| a.levels.is_empty()) {
            bail!("axis `{}` has no values", a.name);
        }
        let points = plan
            .axes
            .iter()
            .try_fold(1u64, |acc, a| acc.checked_mul(a.levels.len() as u64))
            .context("the grid is too large")?;
        let runs = points
            .checked_mul(plan.seeds.len() as u64)
            .context("the grid is too large")?;
        anyhow::ensure!(
            points == self.points && runs == self.runs,
            "meta says {} points / {} runs, the axes and seeds give {points} / {runs}",
            self.points,
            self.runs
        );
        anyhow::ensure!(
            runs <= MAX_FILE_RUNS,
            "{runs} runs is above the {MAX_FILE_RUNS} a sweep file may hold"
        );
        let names: Vec<&str> = plan.axes.iter().map(|a| a.name.as_str()).collect();
        for (what, list, sizes) in [
            ("heatmap", &plan.plot.heatmap, [2usize, 2]),
            ("line", &plan.plot.line, [1, 2]),
        ] {
            if let Some(l) = list {
                anyhow::ensure!(
                    (sizes[0]..=sizes[1]).contains(&l.len()) && l.iter().all(|n| names.contains(&n.as_str())),
                    "plot.{what} names axes the sweep does not have: {l:?}"
                );
            }
        }
        Ok(())
    }
}

/// Largest sweep a results file may describe (a sanity bound against corrupt files).
pub const MAX_FILE_RUNS: u64 = 100_000_000;

/// One run's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// Run index (grid order).
    pub run: u64,
    /// Point index.
    pub point: u64,
    /// Seed.
    pub seed: u64,
    /// Flattened numeric summary metrics, in summary order.
    pub metrics: Map<String, Value>,
}

/// A sweep results file (`sweep.json`, a shard file, or a partial file). On disk the rows
/// are columnar (`columns` once, then one `[run, point, seed, [values]]` line per run,
/// `null` where a run lacks a column), which keeps large sweeps small and diffable.
#[derive(Clone, Debug)]
pub struct SweepFile {
    /// What sweep this is.
    pub meta: Meta,
    /// `[K, N]` for a shard file.
    pub shard: Option<[u64; 2]>,
    /// False while runs are missing (an interrupted or partial file).
    pub complete: bool,
    /// The build that produced the rows ([`super::build::identity`]). Written in shard and
    /// partial files, whose rows may later be merged or resumed, and left out of a
    /// complete unsharded file, which stays byte-identical across builds that agree.
    pub build: Option<String>,
    /// Rows in run order.
    pub rows: Vec<RunRow>,
}

/// The on-disk shape of [`SweepFile`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    meta: Meta,
    #[serde(default)]
    shard: Option<[u64; 2]>,
    #[serde(default)]
    build: Option<String>,
    complete: bool,
    columns: Vec<String>,
    rows: Vec<(u64, u64, u64, Vec<Value>)>,
}

impl SweepFile {
    /// Checks metadata, shard and every row against the grid.
    pub fn validate(&self) -> Result<()> {
        self.meta.validate()?;
        if let Some([k, n]) = self.shard {
            anyhow::ensure!(n >= 1 && k < n, "shard {k}/{n} is not a valid shard");
        }
        for r in &self.rows {
            anyhow::ensure!(
                r.run < self.meta.runs,
                "run {} is outside the grid of {} runs",
                r.run,
                self.meta.runs
            );
            anyhow::ensure!(
                self.meta.plan.run_at(r.run) == (r.point, r.seed),
                "run {} is labelled point {} seed {}, but the grid puts point {} seed {} there",
                r.run,
                r.point,
                r.seed,
                self.meta.plan.run_at(r.run).0,
                self.meta.plan.run_at(r.run).1
            );
            if let Some([k, n]) = self.shard {
                anyhow::ensure!(r.run % n == k, "run {} does not belong to shard {k}/{n}", r.run);
            }
        }
        anyhow::ensure!(
            self.rows.windows(2).all(|w| w[0].run < w[1].run),
            "rows are not in run order (or a run appears twice)"
        );
        Ok(())
    }

    /// Serializes: the metadata pretty-printed, then one line per row.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let cols = columns(&self.rows);
        let mut out = Vec::new();
        let meta = serde_json::to_string_pretty(&self.meta)?.replace('\n', "\n  ");
        write!(out, "{{\n  \"meta\": {meta},\n")?;
        if let Some(sh) = self.shard {
            writeln!(out, "  \"shard\": {},", serde_json::to_string(&sh)?)?;
        }
        if let Some(b) = self.build.as_ref().filter(|_| !self.complete || self.shard.is_some()) {
            writeln!(out, "  \"build\": {},", serde_json::to_string(b)?)?;
        }
        writeln!(out, "  \"complete\": {},", self.complete)?;
        write!(out, "  \"columns\": {},\n  \"rows\": [", serde_json::to_string(&cols)?)?;
        for (i, r) in self.rows.iter().enumerate() {
            let vals: Vec<&Value> = cols.iter().map(|c| r.metrics.get(c).unwrap_or(&Value::Null)).collect();
            let sep = if i == 0 { "" } else { "," };
            write!(
                out,
                "{sep}\n    [{}, {}, {}, {}]",
                r.run,
                r.point,
                r.seed,
                serde_json::to_string(&vals)?
            )?;
        }
        out.extend_from_slice(b"\n  ]\n}\n");
        Ok(out)
    }

    /// Parses [`SweepFile::to_bytes`] output.
    pub fn from_slice(bytes: &[u8]) -> Result<SweepFile> {
        let w: Wire = serde_json::from_slice(bytes)?;
        for (i, c) in w.columns.iter().enumerate() {
            anyhow::ensure!(!c.trim().is_empty(), "columns[{i}] is empty");
            anyhow::ensure!(!w.columns[..i].contains(c), "columns: `{c}` appears twice");
        }
        let mut rows = Vec::with_capacity(w.rows.len());
        for (run, point, seed, vals) in w.rows {
            if vals.len() != w.columns.len() {
                bail!("run {run} has {} values for {} columns", vals.len(), w.columns.len());
            }
            // Metrics are numbers (or null where a run lacks one), never text.
            if let Some((c, v)) = w
                .columns
                .iter()
                .zip(&vals)
                .find(|(_, v)| !(v.is_number() || v.is_null()))
            {
                bail!("run {run}, column `{c}`: expected a number or null, got {v}");
            }
            let metrics = w
                .columns
                .iter()
                .zip(vals)
                .filter(|(_, v)| !v.is_null())
                .map(|(c, v)| (c.clone(), v))
                .collect();
            rows.push(RunRow {
                run,
                point,
                seed,
                metrics,
            });
        }
        Ok(SweepFile {
            meta: w.meta,
            shard: w.shard,
            complete: w.complete,
            build: w.build,
            rows,
        })
    }
}

/// Metric columns: the union over rows, in order of first appearance.
pub fn columns(rows: &[RunRow]) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for r in rows {
        for k in r.metrics.keys() {
            if seen.insert(k.as_str()) {
                out.push(k.clone());
            }
        }
    }
    out
}

fn num(v: &Value) -> String {
    // serde_json prints integers as integers and floats in shortest round-trip form.
    v.to_string()
}

fn seeds_text(seeds: &[u64]) -> String {
    let contiguous = seeds.windows(2).all(|w| w[1] == w[0] + 1);
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if contiguous && seeds.len() > 2 => format!("{a}-{b}"),
        _ => seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(" "),
    }
}

/// Per-point statistics of one metric over its seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// Runs that reported the metric.
    pub n: u64,
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1); NaN when n < 2.
    pub std: f64,
    /// Half-width of the 95% Student-t confidence interval of the mean; NaN when n < 2.
    pub ci95: f64,
}

impl Stat {
    /// Statistics of `xs`.
    pub fn of(xs: &[f64]) -> Stat {
        let n = xs.len();
        if n == 0 {
            return Stat {
                n: 0,
                mean: f64::NAN,
                std: f64::NAN,
                ci95: f64::NAN,
            };
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        if n < 2 {
            return Stat {
                n: 1,
                mean,
                std: f64::NAN,
                ci95: f64::NAN,
            };
        }
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let std = var.sqrt();
        let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
            .expect("degrees of freedom >= 1")
            .inverse_cdf(0.975);
        Stat {
            n: n as u64,
            mean,
            std,
            ci95: t * std / (n as f64).sqrt(),
        }
    }
}

/// Rounds for tables: 6 significant digits, no `-0`, empty for NaN.
pub fn fmt_stat(x: f64) -> String {
    if x.is_nan() {
        return String::new();
    }
    if x == 0.0 {
        return "0".into();
    }
    let digits = 6 - 1 - x.abs().log10().floor() as i32;
    let s = if digits > 0 {
        format!("{:.*}", digits.min(12) as usize, x)
    } else {
        format!("{}", x.round())
    };
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".into() } else { s }
}

/// `mean ± ci` with the interval to 2 significant digits (whole numbers from 100 up) and
/// the mean to the same decimal place, so a table shows only the digits the seeds support.
pub fn fmt_mean_ci(mean: f64, ci: f64) -> String {
    if ci.is_nan() {
        return fmt_stat(mean);
    }
    // An interval below a billionth of the mean is rounding noise of identical seeds: it
    // reads `± 0`, not as twelve zeros (`0.005521000000 ± 0.000000000000`).
    if ci == 0.0 || !ci.is_finite() || ci < 1e-9 * mean.abs() || ci < 1e-12 {
        return format!("{} ± 0", fmt_stat(mean));
    }
    let decimals = (1 - ci.abs().log10().floor() as i32).clamp(0, 12) as usize;
    let m = format!("{mean:.decimals$}");
    let c = format!("{ci:.decimals$}");
    let m = if m.trim_start_matches('-').chars().all(|c| c == '0' || c == '.') {
        m.trim_start_matches('-').to_string()
    } else {
        m
    };
    format!("{m} ± {c}")
}

/// Aggregated rows: per point, per metric column.
pub struct Aggregate {
    /// Metric columns.
    pub columns: Vec<String>,
    /// `(point, stats per column)` for every point with at least one row, in point order.
    pub points: Vec<(u64, Vec<Stat>)>,
}

/// Aggregates `rows` (in run order) per point.
pub fn aggregate(rows: &[RunRow]) -> Aggregate {
    let columns = columns(rows);
    let mut points = Vec::new();
    for (p, run) in point_runs(rows) {
        let (i, j) = (run.start, run.end);
        let stats = columns
            .iter()
            .map(|c| {
                let xs: Vec<f64> = rows[i..j]
                    .iter()
                    .filter_map(|r| r.metrics.get(c).and_then(Value::as_f64))
                    .collect();
                Stat::of(&xs)
            })
            .collect();
        points.push((p, stats));
    }
    Aggregate { columns, points }
}

/// The consecutive rows of each point (rows in run order): `(point, index range)`.
pub fn point_runs(rows: &[RunRow]) -> Vec<(u64, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let p = rows[i].point;
        let j = rows[i..]
            .iter()
            .position(|r| r.point != p)
            .map_or(rows.len(), |k| i + k);
        out.push((p, i..j));
        i = j;
    }
    out
}

fn param_header(plan: &Plan) -> Vec<String> {
    plan.axes.iter().map(|a| format!("param_{}", a.name)).collect()
}

/// Writes a sweep, shard or partial file atomically, creating its folder.
pub fn write_file(path: &Path, f: &SweepFile) -> Result<()> {
    if let Some(d) = path.parent() {
        fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    crate::atomic::write_atomic(path, |o| {
        o.extend(f.to_bytes()?);
        Ok(())
    })
}

/// `sweep.csv`: one row per run.
pub fn write_runs_csv(out: &mut Vec<u8>, meta: &Meta, rows: &[RunRow]) -> Result<()> {
    let cols = columns(rows);
    let mut w = csv::Writer::from_writer(out);
    let mut head = vec!["run".to_string(), "point".into(), "seed".into()];
    head.extend(param_header(&meta.plan));
    head.extend(cols.iter().cloned());
    head.extend(["scenario_sha256".to_string(), "fleetsim_version".into()]);
    w.write_record(&head)?;
    for r in rows {
        let mut rec = vec![r.run.to_string(), r.point.to_string(), r.seed.to_string()];
        rec.extend(meta.plan.labels(r.point).into_iter().map(str::to_string));
        rec.extend(cols.iter().map(|c| r.metrics.get(c).map(num).unwrap_or_default()));
        rec.extend([meta.scenario_sha256.clone(), meta.fleetsim_version.clone()]);
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// `sweep.jsonl`: one flat JSON record per run (`run`, `point`, `seed`, `param_<axis>`
/// labels, then the metrics present in that run), for `pandas.read_json(lines=True)`,
/// DuckDB or `jq` without unpacking `sweep.json`'s columnar rows.
pub fn write_records(out: &mut Vec<u8>, meta: &Meta, rows: &[RunRow]) -> Result<()> {
    let params = param_header(&meta.plan);
    for r in rows {
        let mut rec = Map::new();
        rec.insert("run".into(), r.run.into());
        rec.insert("point".into(), r.point.into());
        rec.insert("seed".into(), r.seed.into());
        for (name, label) in params.iter().zip(meta.plan.labels(r.point)) {
            rec.insert(name.clone(), label.into());
        }
        rec.extend(r.metrics.iter().map(|(k, v)| (k.clone(), v.clone())));
        serde_json::to_writer(&mut *out, &rec)?;
        out.push(b'\n');
    }
    Ok(())
}

/// `aggregate.csv`: one row per point, mean, std and ci95 of every metric, named with the
/// unit last (`ttft_p99_mean_s`, `latched_sessions_std`).
pub fn write_aggregate_csv(out: &mut Vec<u8>, meta: &Meta, agg: &Aggregate) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let mut head = vec!["point".to_string()];
    head.extend(param_header(&meta.plan));
    head.push("runs".into());
    for c in &agg.columns {
        head.extend(["mean", "std", "ci95"].map(|st| crate::metrics::stat_name(c, st)));
    }
    head.extend(["seeds".to_string(), "scenario_sha256".into(), "fleetsim_version".into()]);
    w.write_record(&head)?;
    let seeds = seeds_text(&meta.plan.seeds);
    for (p, stats) in &agg.points {
        let mut rec = vec![p.to_string()];
        rec.extend(meta.plan.labels(*p).into_iter().map(str::to_string));
        rec.push(stats.iter().map(|s| s.n).max().unwrap_or(0).to_string());
        for s in stats {
            rec.extend([fmt_stat(s.mean), fmt_stat(s.std), fmt_stat(s.ci95)]);
        }
        rec.extend([
            seeds.clone(),
            meta.scenario_sha256.clone(),
            meta.fleetsim_version.clone(),
        ]);
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// The first paragraph of the sweep's Markdown files (`aggregate.md`, `counts.md`): what was
/// swept, over how many points and `seeds`, by which build, and what a cell holds.
pub(crate) fn write_md_preamble(out: &mut Vec<u8>, meta: &Meta, seeds: &str, cells: &str) -> Result<()> {
    writeln!(
        out,
        "Sweep of `{}` (scenario sha256 `{}`), {} points x {seeds}, fleetsim {}. Cells: {cells}\n",
        meta.scenario,
        &meta.scenario_sha256[..12.min(meta.scenario_sha256.len())],
        meta.points,
        meta.fleetsim_version
    )?;
    Ok(())
}

/// A Markdown table's header row and its rule.
pub(crate) fn write_md_head(out: &mut Vec<u8>, head: &[String]) -> Result<()> {
    writeln!(out, "| {} |", head.join(" | "))?;
    writeln!(out, "|{}", head.iter().map(|_| "---|").collect::<String>())?;
    Ok(())
}

/// A point's axis labels as the first cells of its Markdown row (code spans, `|` escaped).
pub(crate) fn md_point_cells(plan: &Plan, point: u64) -> Vec<String> {
    plan.labels(point)
        .into_iter()
        .map(|l| format!("`{}`", l.replace('|', "\\|")))
        .collect()
}

/// `aggregate.md`: the headline metrics as `mean ± ci95` per point.
pub fn write_aggregate_md(out: &mut Vec<u8>, meta: &Meta, agg: &Aggregate) -> Result<()> {
    let plan = &meta.plan;
    let done: u64 = agg
        .points
        .iter()
        .map(|(_, st)| st.iter().map(|s| s.n).max().unwrap_or(0))
        .sum();
    let partial = if done < meta.runs {
        format!(" PARTIAL: {done} of {} runs done.", meta.runs)
    } else {
        String::new()
    };
    write_md_preamble(
        out,
        meta,
        &format!("{} seeds ({})", plan.seeds.len(), seeds_text(&plan.seeds)),
        &format!("mean ± 95% CI half-width over seeds.{partial}"),
    )?;
    let shown: Vec<(usize, &String)> = plan
        .metrics
        .iter()
        .filter_map(|m| agg.columns.iter().position(|c| c == m).map(|i| (i, m)))
        .collect();
    let missing: Vec<&String> = plan.metrics.iter().filter(|m| !agg.columns.contains(m)).collect();
    if !missing.is_empty() && !agg.points.is_empty() {
        writeln!(
            out,
            "Not reported by any run (e.g. a backend index beyond the fleet): {}.\n",
            missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        )?;
    }
    let mut head: Vec<String> = plan.axes.iter().map(|a| a.name.clone()).collect();
    head.extend(shown.iter().map(|(_, m)| m.to_string()));
    write_md_head(out, &head)?;
    let mut fell_back = Vec::new();
    for (p, stats) in &agg.points {
        let mut cells = md_point_cells(plan, *p);
        if let Some(share) = kv_fallback_share(&agg.columns, stats) {
            fell_back.push((cells.join(" "), share));
            if let Some(last) = cells.last_mut() {
                last.push_str(" \u{2020}");
            }
        }
        for (i, _) in &shown {
            let s = stats[*i];
            cells.push(fmt_mean_ci(s.mean, s.ci95));
        }
        writeln!(out, "| {} |", cells.join(" | "))?;
    }
    if !fell_back.is_empty() {
        let list: Vec<String> = fell_back
            .iter()
            .map(|(label, share)| format!("{label} on {:.1}%", share * 100.0))
            .collect();
        writeln!(
            out,
            "\n\u{2020} Took production-stack's kvaware fallback (`kv_fallback_session` / `kv_fallback_qps`) on part of its decisions: {}. {}.",
            list.join("; "),
            crate::decision::KV_FALLBACK_WHY
        )?;
    }
    Ok(())
}

/// The share of a point's decisions (pooled over its seeds) that took a `kv_fallback_*`
/// branch, when above zero: derived from the decision counts, so it labels whichever policy
/// fell back, whatever its name.
fn kv_fallback_share(columns: &[String], stats: &[Stat]) -> Option<f64> {
    crate::decision::kv_fallback_share(
        columns
            .iter()
            .zip(stats)
            .filter(|(_, s)| s.n > 0 && s.mean.is_finite())
            .filter_map(|(c, s)| Some((c.strip_prefix("decisions_by_branch.")?, s.mean))),
    )
}

/// Reads a sweep or shard file.
pub fn read(path: &Path) -> Result<SweepFile> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let f = SweepFile::from_slice(&bytes).with_context(|| format!("{}: not a fleetsim sweep file", path.display()))?;
    f.validate()
        .with_context(|| format!("{}: inconsistent sweep file", path.display()))?;
    Ok(f)
}

/// Refuses rows of another build: `path` (recorded `build`) against `other` (`theirs`).
pub fn check_same_build(path: &Path, build: Option<&str>, other: &Path, theirs: Option<&str>) -> Result<()> {
    if build == theirs {
        return Ok(());
    }
    let name = |b: Option<&str>| {
        b.map_or("an unrecorded build (an older fleetsim)".to_string(), |b| {
            format!("`{b}`")
        })
    };
    bail!(
        "{} was written by {}, {} by {}: rows of different builds are not mixed; rerun the sweep with one build",
        path.display(),
        name(build),
        other.display(),
        name(theirs)
    )
}

/// Combines shard files into the complete sweep; every run must appear exactly once and
/// every file must describe the same sweep.
pub fn merge(files: &[(PathBuf, SweepFile)]) -> Result<SweepFile> {
    let Some((first_path, first)) = files.first() else {
        bail!("no shard files given");
    };
    let mut rows: Vec<Option<RunRow>> = vec![None; first.meta.runs as usize];
    // The column order seen so far, and the first row of each point with its file: a
    // renamed or swapped column in one shard must not land in another's place.
    let mut order: Vec<String> = Vec::new();
    let mut by_point: std::collections::BTreeMap<u64, (&RunRow, &Path)> = Default::default();
    for (p, f) in files {
        check_same_build(p, f.build.as_deref(), first_path, first.build.as_deref())?;
        if !f.meta.same_runs(&first.meta) {
            bail!(
                "{} describes a different sweep than {} (scenario, version, overrides, axes or seeds differ)",
                p.display(),
                first_path.display()
            );
        }
        let cols = columns(&f.rows);
        let common: Vec<&String> = cols.iter().filter(|c| order.contains(c)).collect();
        let seen: Vec<&String> = order.iter().filter(|c| cols.contains(c)).collect();
        if common != seen {
            bail!(
                "{}: its metric columns are in another order than in the files before it (renamed or swapped columns?)",
                p.display()
            );
        }
        for c in cols {
            if !order.contains(&c) {
                order.push(c);
            }
        }
        for r in &f.rows {
            // Runs of one point report the same metrics, whatever shard ran them.
            let (o, op) = *by_point.entry(r.point).or_insert((r, p.as_path()));
            if !o.metrics.keys().eq(r.metrics.keys()) {
                bail!(
                    "{}: run {} reports other metric columns than run {} of the same point in {} (renamed columns?)",
                    p.display(),
                    r.run,
                    o.run,
                    op.display()
                );
            }
            let slot = rows
                .get_mut(r.run as usize)
                .with_context(|| format!("{}: run {} is outside the grid", p.display(), r.run))?;
            if slot.is_some() {
                bail!("{}: run {} appears in more than one file", p.display(), r.run);
            }
            *slot = Some(r.clone());
        }
    }
    let missing: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| i)
        .collect();
    if let Some(&m) = missing.first() {
        let shard_hint = first
            .shard
            .map(|[_, n]| format!(" (run {m} belongs to shard {}/{n})", m as u64 % n))
            .unwrap_or_default();
        bail!(
            "{} of {} runs are missing{shard_hint}: run every shard, then merge all their files",
            missing.len(),
            rows.len()
        );
    }
    Ok(SweepFile {
        meta: first.meta.clone(),
        shard: None,
        complete: true,
        build: first.build.clone(),
        rows: rows.into_iter().flatten().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_fallback_share_comes_from_branch_counts() {
        let cols: Vec<String> = [
            "decisions_by_branch.kv_fallback_qps",
            "decisions_by_branch.kv_hit",
            "idle_while_queued_s",
        ]
        .iter()
        .map(|c| c.to_string())
        .collect();
        let share = kv_fallback_share(
            &cols,
            &[Stat::of(&[30.0, 30.0]), Stat::of(&[10.0, 10.0]), Stat::of(&[500.0])],
        );
        assert_eq!(share, Some(0.75));
        assert_eq!(
            kv_fallback_share(&cols, &[Stat::of(&[0.0]), Stat::of(&[40.0]), Stat::of(&[1.0])]),
            None
        );
        assert_eq!(kv_fallback_share(&cols[2..], &[Stat::of(&[1.0])]), None);
    }

    #[test]
    fn stats_match_hand_computation() {
        let s = Stat::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.mean, 2.5);
        assert!((s.std - 1.2909944487).abs() < 1e-9);
        // t(0.975, 3) = 3.182446305
        assert!((s.ci95 - 3.182446305 * 1.2909944487 / 2.0).abs() < 1e-6);
        assert!(Stat::of(&[5.0]).std.is_nan());
        assert_eq!(Stat::of(&[]).n, 0);
    }

    #[test]
    fn formats_six_significant_digits() {
        assert_eq!(fmt_stat(204.912345678), "204.912");
        assert_eq!(fmt_stat(0.000123456789), "0.000123457");
        assert_eq!(fmt_stat(1234567.0), "1234567");
        assert_eq!(fmt_stat(2.0), "2");
        assert_eq!(fmt_stat(-0.0000000000001), "0");
        assert_eq!(fmt_stat(f64::NAN), "");
    }

    #[test]
    fn mean_ci_shows_supported_digits() {
        assert_eq!(fmt_mean_ci(205.473, 9.04541), "205.5 ± 9.0");
        assert_eq!(fmt_mean_ci(0.954034, 0.000809488), "0.95403 ± 0.00081");
        assert_eq!(fmt_mean_ci(663.64, 32.4638), "664 ± 32");
        assert_eq!(fmt_mean_ci(6.75, f64::NAN), "6.75");
        assert_eq!(fmt_mean_ci(2.0, 0.0), "2 ± 0");
        // Rounding noise of identical seeds reads as no interval, like an exact zero.
        assert_eq!(fmt_mean_ci(0.005521, 3e-19), "0.005521 ± 0");
        assert_eq!(fmt_mean_ci(0.147053, 0.0), "0.147053 ± 0");
    }

    #[test]
    fn seeds_are_compact() {
        assert_eq!(seeds_text(&[1, 2, 3, 4]), "1-4");
        assert_eq!(seeds_text(&[1, 5]), "1 5");
    }
}
