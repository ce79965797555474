//! What a sweep runs: axes (from `-L`/`-P` and the scenario's `[sweep]` table), seeds, and
//! the stable order of points and runs.
//!
//! Order (documented in README): points are the Cartesian product of the axes in the order
//! they are listed, the first axis varying slowest; within a point the seeds vary fastest.
//! Run `i` is point `i / seeds` with seed `seeds[i % seeds]`; shard `K` of `N` owns the runs
//! with `i % N == K`, so every shard gets a similar mix of cheap and expensive points.

use std::collections::BTreeSet;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::scenario::{FieldError, ScenarioError, Source, normalize};

/// Default cap on runs (points x seeds); `--max-runs` raises it.
pub const DEFAULT_MAX_RUNS: u64 = 100_000;

/// One value of an axis: the overrides it applies and how it is labelled in outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Level {
    /// Label in tables and plots (`0.5`, `qps`, `8x64`).
    pub label: String,
    /// `path = TOML value` overrides.
    pub sets: Vec<(String, String)>,
}

/// One sweep dimension.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    /// Column name without the `param_` prefix.
    pub name: String,
    /// Every path the axis sets (normalized).
    pub paths: Vec<String>,
    /// Its values, in order.
    pub levels: Vec<Level>,
}

/// `[sweep]` in a scenario file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// Replications per point: a count (seeds `seed, seed+1, ...`) or an explicit list.
    pub seeds: Option<SeedsFile>,
    /// Axes, in order (first varies slowest).
    #[serde(default)]
    pub axis: Vec<AxisFile>,
    /// Metrics for the Markdown table and the plots.
    pub metrics: Option<Vec<String>>,
    /// Metrics whose per-point value distribution goes to `counts.md`.
    #[serde(default)]
    pub counts: Vec<String>,
    /// Plots.
    #[serde(default)]
    pub plot: PlotFile,
}

/// `seeds = 20` or `seeds = [1, 2, 3]` (also used by `[expect]`).
#[derive(Debug)]
pub enum SeedsFile {
    /// How many.
    Count(u64),
    /// Which.
    List(Vec<u64>),
}

impl<'de> Deserialize<'de> for SeedsFile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let bad = || {
            D::Error::custom("expected a seed count (`seeds = 20`) or a list of seeds 0..2^63 (`seeds = [1, 5, 9]`)")
        };
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(n) if n >= 0 => Ok(SeedsFile::Count(n as u64)),
            toml::Value::Array(a) => a
                .iter()
                .map(|v| v.as_integer().filter(|n| *n >= 0).map(|n| n as u64).ok_or_else(bad))
                .collect::<Result<Vec<u64>, _>>()
                .map(SeedsFile::List),
            _ => Err(bad()),
        }
    }
}

/// `[[sweep.axis]]`: `path` with `values` or `min`/`max`/`step`, or `name` with `cases`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisFile {
    /// Column name (default: the last key of `path`).
    pub name: Option<String>,
    /// The key the axis sets.
    pub path: Option<String>,
    /// Explicit values.
    pub values: Option<Vec<toml::Value>>,
    /// Scan start (inclusive).
    pub min: Option<toml::Value>,
    /// Scan end (inclusive when the steps land on it).
    pub max: Option<toml::Value>,
    /// Scan step (default 1).
    pub step: Option<toml::Value>,
    /// Multi-key values: `{ label = "8x64", set = { "backends.count" = 8, ... } }`.
    pub cases: Option<Vec<CaseFile>>,
}

/// One case of a multi-key axis.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    /// Its label.
    pub label: String,
    /// Keys it sets.
    pub set: toml::Table,
}

/// `[sweep.plot]`: which axes the plots use (by axis name).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlotFile {
    /// `[x, y]` axes of the heatmap.
    pub heatmap: Option<Vec<String>>,
    /// `[x]` or `[x, series]` axes of the line plot.
    pub line: Option<Vec<String>>,
    /// Metrics to plot (default: the first two headline metrics).
    pub metrics: Option<Vec<String>>,
}

/// A fully resolved sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Axes in order.
    pub axes: Vec<Axis>,
    /// Seeds, in order.
    pub seeds: Vec<u64>,
    /// Headline metrics (Markdown table, plots).
    pub metrics: Vec<String>,
    /// Metrics tabulated as value counts in `counts.md` (none: no file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<String>,
    /// Plot axes.
    pub plot: PlotFile,
}

fn check_metrics(list: &[String]) -> Result<(), String> {
    if let Some(bad) = list.iter().find(|m| !crate::metrics::known_metric(m)) {
        return Err(format!(
            "`{bad}` is not a summary metric (e.g. idle_while_queued_s, ttft_p99_s, backends[1].peak_waiting; sweep.csv lists them all)"
        ));
    }
    Ok(())
}

/// Why a plan is refused: a key of the file's `[sweep]` (located in the file by the
/// caller), or a command-line value (a message of its own).
#[derive(Debug)]
pub enum PlanError {
    /// A `[sweep]` key (or a `--set sweep.*` value).
    At(FieldError),
    /// A command-line axis, seed count or the run cap.
    Text(String),
}

impl From<String> for PlanError {
    fn from(m: String) -> Self {
        PlanError::Text(m)
    }
}

fn at(path: &str, m: impl Into<String>) -> PlanError {
    PlanError::At(FieldError::new(path, m.into()))
}

/// Today's names of `list` (old spellings such as `ttft_s.p99` are accepted).
fn canonical_metrics(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|m| crate::metrics::canonical_metric(m).into_owned())
        .collect()
}

/// Headline metrics when none are configured.
pub const DEFAULT_METRICS: [&str; 8] = [
    "idle_while_queued_s",
    "ttft_p99_s",
    "stranded_slot_s",
    "latched_sessions",
    "queue_wait_p99_s",
    "prefix_cache_hit_rate",
    crate::metrics::SHARE_METRICS[0],
    crate::metrics::SHARE_METRICS[1],
];

/// Axes and options given on the command line.
#[derive(Clone, Debug, Default)]
pub struct CliAxes {
    /// `-L PATH V1,V2,...`, in order.
    pub lists: Vec<(String, String)>,
    /// `-P PATH MIN MAX`, in order.
    pub scans: Vec<(String, String, String)>,
    /// `-D STEP`: one for all scans, or one per scan.
    pub steps: Vec<String>,
    /// `--seeds N`.
    pub seeds: Option<u64>,
    /// `--metric M` (repeatable).
    pub metrics: Vec<String>,
    /// `--heatmap X,Y`.
    pub heatmap: Option<String>,
    /// `--line X[,SERIES]`.
    pub line: Option<String>,
}

/// Splits `a,b,{x = 1, y = 2},[1, 2],"c,d"` at top-level commas.
pub fn split_values(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None::<char>);
    for c in s.chars() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out
}

/// The label of a raw value: strings without their quotes, everything else as written.
fn label_of(raw: &str) -> String {
    let r = raw.trim();
    match toml::from_str::<toml::Table>(&format!("v = {r}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
    {
        Some(toml::Value::String(s)) => s,
        Some(v) => toml_literal(&v),
        None => r.to_string(),
    }
}

/// A TOML value as inline TOML text (strings without quotes, for labels).
fn toml_literal(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        // `Value`'s Display writes inline TOML: `0.5`, `[1, 2]`, `{ kind = "roundrobin" }`.
        other => other.to_string(),
    }
}

/// The value text handed to the override machinery.
fn raw_of(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => toml::Value::String(s.clone()).to_string(),
        other => toml_literal(other),
    }
}

fn parse_decimal(s: &str, what: &str) -> Result<Decimal, String> {
    s.trim()
        .parse::<Decimal>()
        .or_else(|_| Decimal::from_scientific(s.trim()))
        .map_err(|_| format!("{what} `{s}` is not a decimal number"))
}

/// Levels of a decimal scan `min, min+step, ... <= max`, exact in decimal (0.1 + 0.2 is 0.3).
pub fn scan_levels(path: &str, min: &str, max: &str, step: &str, cap: u64) -> Result<Vec<Level>, String> {
    let lo = parse_decimal(min, "MIN")?;
    let hi = parse_decimal(max, "MAX")?;
    let d = parse_decimal(step, "STEP")?;
    if d <= Decimal::ZERO {
        return Err(format!("step must be > 0, got {step}"));
    }
    if lo > hi {
        return Err(format!("empty range: MIN {min} is above MAX {max}"));
    }
    let too_wide = || format!("the range {min} to {max} by {step} is too wide to enumerate");
    let count = hi
        .checked_sub(lo)
        .and_then(|w| w.checked_div(d))
        .ok_or_else(too_wide)?
        .floor();
    let count: u64 = u64::try_from(count).unwrap_or(u64::MAX).saturating_add(1);
    if count > cap {
        return Err(format!(
            "{count} values from {min} to {max} by {step} is above the cap of {cap} runs"
        ));
    }
    let mut out = Vec::new();
    let mut x = lo;
    while x <= hi {
        let text = x.normalize().to_string();
        out.push(Level {
            label: text.clone(),
            sets: vec![(path.to_string(), text)],
        });
        match x.checked_add(d) {
            Some(next) => x = next,
            None => break,
        }
    }
    Ok(out)
}

fn default_name(path: &str) -> String {
    let n = normalize(path);
    n.rsplit(['.', '['])
        .next()
        .unwrap_or(&n)
        .trim_end_matches(']')
        .to_string()
}

fn list_axis(path: &str, values: &[String]) -> Axis {
    let path = normalize(path);
    Axis {
        name: default_name(&path),
        paths: vec![path.clone()],
        levels: values
            .iter()
            .map(|v| Level {
                label: label_of(v),
                sets: vec![(path.clone(), v.clone())],
            })
            .collect(),
    }
}

/// Where an axis came from, for messages.
struct Origin(String);

fn file_axes(f: &SweepFile, cap: u64) -> Result<Vec<(Axis, Origin)>, FieldError> {
    let mut out = Vec::new();
    for (i, a) in f.axis.iter().enumerate() {
        let at = format!("sweep.axis[{i}]");
        let err = |sub: &str, m: String| {
            FieldError::new(
                if sub.is_empty() {
                    at.clone()
                } else {
                    format!("{at}.{sub}")
                },
                m,
            )
        };
        let axis = match (&a.path, &a.values, &a.cases, &a.min) {
            (Some(p), Some(vals), None, None) => {
                let raws: Vec<String> = vals.iter().map(raw_of).collect();
                let mut ax = list_axis(p, &raws);
                for (l, v) in ax.levels.iter_mut().zip(vals) {
                    l.label = toml_literal(v);
                }
                ax
            }
            (Some(p), None, None, Some(min)) => {
                let max = a
                    .max
                    .as_ref()
                    .ok_or_else(|| err("", "a scan needs both `min` and `max`".into()))?;
                let step = a.step.as_ref().map(toml_literal).unwrap_or_else(|| "1".into());
                let levels = scan_levels(&normalize(p), &toml_literal(min), &toml_literal(max), &step, cap)
                    .map_err(|m| err("", m))?;
                Axis {
                    name: default_name(p),
                    paths: vec![normalize(p)],
                    levels,
                }
            }
            (None, None, Some(cases), None) => {
                let name = a
                    .name
                    .clone()
                    .ok_or_else(|| err("name", "an axis with `cases` needs a `name`".into()))?;
                let mut paths = BTreeSet::new();
                let mut levels = Vec::new();
                for c in cases {
                    let sets: Vec<(String, String)> = c.set.iter().map(|(k, v)| (normalize(k), raw_of(v))).collect();
                    paths.extend(sets.iter().map(|(k, _)| k.clone()));
                    levels.push(Level {
                        label: c.label.clone(),
                        sets,
                    });
                }
                Axis {
                    name,
                    paths: paths.into_iter().collect(),
                    levels,
                }
            }
            _ => {
                return Err(err(
                    "",
                    "an axis is `path` with `values`, `path` with `min`/`max`[/`step`], or `name` with `cases`".into(),
                ));
            }
        };
        let mut axis = axis;
        if let Some(n) = &a.name {
            axis.name = n.clone();
        }
        out.push((axis, Origin(at)));
    }
    Ok(out)
}

/// Resolves the plan from the scenario's `[sweep]` table and the command line. Command-line
/// axes replace file axes of the same name and are appended otherwise.
pub fn plan(src: &Source, cli: &CliAxes, cap: u64) -> Result<Plan, String> {
    plan_checked(src, cli, cap).map_err(|e| match e {
        PlanError::At(e) => src.error(e).to_string(),
        PlanError::Text(m) => m,
    })
}

/// [`plan`] with a `[sweep]` key's error not yet located.
pub fn plan_checked(src: &Source, cli: &CliAxes, cap: u64) -> Result<Plan, PlanError> {
    let file: SweepFile = src.tool_field("sweep").map_err(PlanError::At)?.unwrap_or_default();
    let mut axes = file_axes(&file, cap).map_err(PlanError::At)?;
    merge_cli_axes(&mut axes, cli, cap)?;
    let seeds = seeds(src, &file, cli, cap, &mut axes)?;
    check_axes(&axes)?;
    let axes: Vec<Axis> = axes.into_iter().map(|(a, _)| a).collect();
    check_runs(&axes, seeds.len(), cap)?;
    let metrics = metrics(&file, cli)?;
    let plot = plot_spec(&file, cli, &axes)?;
    Ok(Plan {
        axes,
        seeds,
        metrics,
        counts: canonical_metrics(&file.counts),
        plot,
    })
}

/// An error at an axis: naming its key when the axis is the file's, its flag when it is
/// the command line's.
fn at_axis(o: &Origin, m: String) -> PlanError {
    if o.0.starts_with("sweep.") {
        at(&o.0, m)
    } else {
        PlanError::Text(format!("{}: {m}", o.0))
    }
}

/// Adds the command line's `-L` and `-P` axes to the file's `axes`: one on a path or name
/// the file already sweeps replaces it, the others are appended.
fn merge_cli_axes(axes: &mut Vec<(Axis, Origin)>, cli: &CliAxes, cap: u64) -> Result<(), PlanError> {
    let mut cli_axes = Vec::new();
    for (p, vals) in &cli.lists {
        cli_axes.push((list_axis(p, &split_values(vals)), Origin(format!("-L {p}"))));
    }
    if !cli.steps.is_empty() && cli.steps.len() != 1 && cli.steps.len() != cli.scans.len() {
        return Err(format!(
            "{} -D steps for {} -P scans: give one step for all scans or one per scan",
            cli.steps.len(),
            cli.scans.len()
        )
        .into());
    }
    if cli.scans.is_empty() && !cli.steps.is_empty() {
        return Err(String::from("-D/--parameter-step needs a -P/--parameter-scan").into());
    }
    for (i, (p, lo, hi)) in cli.scans.iter().enumerate() {
        let step = cli.steps.get(i).or(cli.steps.first()).map_or("1", String::as_str);
        let levels = scan_levels(&normalize(p), lo, hi, step, cap).map_err(|m| format!("-P {p}: {m}"))?;
        cli_axes.push((
            Axis {
                name: default_name(p),
                paths: vec![normalize(p)],
                levels,
            },
            Origin(format!("-P {p}")),
        ));
    }
    for (ax, o) in cli_axes {
        if let Some(slot) = axes
            .iter_mut()
            .find(|(f, Origin(fo))| fo.starts_with("sweep.") && (f.paths == ax.paths || f.name == ax.name))
        {
            *slot = (ax, o);
        } else {
            axes.push((ax, o));
        }
    }
    Ok(())
}

/// The seeds: a `seed` axis (taken out of `axes`), `--seeds`, or `[sweep] seeds`.
fn seeds(
    src: &Source,
    file: &SweepFile,
    cli: &CliAxes,
    cap: u64,
    axes: &mut Vec<(Axis, Origin)>,
) -> Result<Vec<u64>, PlanError> {
    let base_seed = src.table.get("seed").and_then(toml::Value::as_integer).unwrap_or(1);
    let mut seeds: Option<Vec<u64>> = None;
    let mut seed_from = String::new();
    // A seed axis sets `seed` and nothing else at every level (a `cases` axis where some case
    // leaves it unset is refused later, as any case that sets `seed`).
    let seed_axis = |a: &Axis| a.paths == ["seed"] && a.levels.iter().all(|l| l.sets.len() == 1);
    if let Some(pos) = axes.iter().position(|(a, _)| seed_axis(a)) {
        let (a, o) = axes.remove(pos);
        let mut list = Vec::new();
        for l in &a.levels {
            let s: u64 = l.sets[0]
                .1
                .parse()
                .map_err(|_| at_axis(&o, format!("seed `{}` is not an integer in 0..2^63", l.label)))?;
            list.push(s);
        }
        seed_from = o.0;
        seeds = Some(list);
    }
    if let Some(n) = cli.seeds {
        if seeds.is_some() && !seed_from.starts_with("sweep.") {
            return Err(format!("--seeds and {seed_from} both give the seeds; use one").into());
        }
        seeds = Some(count_seeds(base_seed, n, cap).map_err(|m| format!("--seeds: {m}"))?);
    } else if seeds.is_none() {
        seeds = Some(match &file.seeds {
            None => vec![base_seed as u64],
            Some(SeedsFile::Count(n)) => count_seeds(base_seed, *n, cap).map_err(|m| at("sweep.seeds", m))?,
            Some(SeedsFile::List(l)) => {
                seed_from = "sweep.seeds".into();
                l.clone()
            }
        });
    }
    let seeds = seeds.unwrap_or_default();
    check_seeds(&seeds).map_err(|m| {
        if seed_from.starts_with("sweep.") && cli.seeds.is_none() {
            at(&seed_from, m)
        } else {
            PlanError::Text(format!("seeds: {m}"))
        }
    })?;
    Ok(seeds)
}

/// Every axis has values, and names, paths and labels are distinct.
fn check_axes(axes: &[(Axis, Origin)]) -> Result<(), PlanError> {
    let mut names = BTreeSet::new();
    let mut paths = BTreeSet::new();
    for (a, o) in axes {
        let here = |m: String| at_axis(o, m);
        if a.levels.is_empty()
            || a.levels
                .iter()
                .any(|l| l.label.is_empty() && l.sets.iter().all(|s| s.1.is_empty()))
        {
            return Err(here("the axis has no values (or an empty one)".into()));
        }
        if a.name.is_empty() || a.name.contains([',', '=', '/']) {
            return Err(here(format!("axis name `{}` cannot be used as a column name", a.name)));
        }
        if !names.insert(a.name.clone()) {
            return Err(here(format!(
                "a second axis is named `{}`; name one with `name = ...`",
                a.name
            )));
        }
        for p in &a.paths {
            if !paths.insert(p.clone()) {
                return Err(here(format!("`{p}` is swept by two axes")));
            }
            if p == "seed" {
                return Err(here(
                    "sweep seeds with `--seeds` or `-L seed ...`, not inside a case".into(),
                ));
            }
        }
        let mut labels = BTreeSet::new();
        for l in &a.levels {
            if !labels.insert(l.label.clone()) {
                return Err(here(format!("value `{}` is listed twice", l.label)));
            }
        }
    }
    Ok(())
}

/// Points x seeds within `cap`.
fn check_runs(axes: &[Axis], seeds: usize, cap: u64) -> Result<(), PlanError> {
    let points: u64 = axes
        .iter()
        .map(|a| a.levels.len() as u64)
        .try_fold(1u64, u64::checked_mul)
        .unwrap_or(u64::MAX);
    let runs = points.saturating_mul(seeds as u64);
    if runs > cap {
        return Err(format!(
            "the sweep has {points} points x {seeds} seeds = {runs} runs, above the cap of {cap} (raise it with --max-runs)"
        )
        .into());
    }
    Ok(())
}

/// The table's metrics: `--metric`, else `[sweep] metrics`, else the defaults (and the
/// file's `counts` checked).
fn metrics(file: &SweepFile, cli: &CliAxes) -> Result<Vec<String>, PlanError> {
    let metrics = if !cli.metrics.is_empty() {
        cli.metrics.clone()
    } else if let Some(m) = file.metrics.clone() {
        m
    } else {
        DEFAULT_METRICS.iter().map(|s| s.to_string()).collect()
    };
    check_metrics(&metrics).map_err(|m| {
        if cli.metrics.is_empty() {
            at("sweep.metrics", m)
        } else {
            PlanError::Text(format!("--metrics: {m}"))
        }
    })?;
    check_metrics(&file.counts).map_err(|m| at("sweep.counts", m))?;
    Ok(canonical_metrics(&metrics))
}

/// The plots: `[sweep.plot]` with `--heatmap` and `--line` over it, their axes checked
/// against `axes`.
fn plot_spec(file: &SweepFile, cli: &CliAxes, axes: &[Axis]) -> Result<PlotFile, PlanError> {
    let mut plot = file.plot.clone();
    if let Some(m) = &plot.metrics {
        check_metrics(m).map_err(|m| at("sweep.plot.metrics", m))?;
        plot.metrics = Some(canonical_metrics(m));
    }
    if let Some(h) = &cli.heatmap {
        plot.heatmap = Some(h.split(',').map(|s| s.trim().to_string()).collect());
    }
    if let Some(l) = &cli.line {
        plot.line = Some(l.split(',').map(|s| s.trim().to_string()).collect());
    }
    let names: Vec<&str> = axes.iter().map(|a| a.name.as_str()).collect();
    for (what, want, list, flag) in [
        ("heatmap", 2, &plot.heatmap, &cli.heatmap),
        ("line", 1, &plot.line, &cli.line),
    ] {
        let here = |m: String| {
            if flag.is_none() {
                at(&format!("sweep.plot.{what}"), m)
            } else {
                PlanError::Text(format!("--{what}: {m}"))
            }
        };
        if let Some(l) = list {
            if l.len() != want && !(what == "line" && l.len() == 2) {
                let shape = if what == "line" { "[x] or [x, series]" } else { "[x, y]" };
                return Err(here(format!("expected {shape} axis names, got {l:?}")));
            }
            if let Some(bad) = l.iter().find(|n| !names.contains(&n.as_str())) {
                return Err(here(format!("`{bad}` is not an axis (axes: {})", names.join(", "))));
            }
            if l.len() == 2 && l[0] == l[1] {
                return Err(here(format!("the same axis `{}` twice", l[0])));
            }
        }
    }
    Ok(plot)
}

/// Seeds `base, base + 1, ...` (`n` of them, at most `cap`).
pub fn count_seeds(base: i64, n: u64, cap: u64) -> Result<Vec<u64>, String> {
    if n == 0 {
        return Err("at least one seed is needed".into());
    }
    if n > cap {
        return Err(format!(
            "{n} seeds is above the cap of {cap} runs (raise it with --max-runs)"
        ));
    }
    let base = base.max(0) as u64;
    (0..n)
        .map(|i| {
            base.checked_add(i)
                .filter(|s| *s <= i64::MAX as u64)
                .ok_or_else(|| "seeds run past 2^63 - 1".to_string())
        })
        .collect()
}

pub fn check_seeds(seeds: &[u64]) -> Result<(), String> {
    if seeds.is_empty() {
        return Err("at least one seed is needed".into());
    }
    let mut seen = BTreeSet::new();
    for s in seeds {
        if *s > i64::MAX as u64 {
            return Err(format!("seed {s} is above 2^63 - 1"));
        }
        if !seen.insert(*s) {
            return Err(format!("seed {s} is listed twice"));
        }
    }
    Ok(())
}

impl Plan {
    /// Metrics that get plots.
    pub fn plot_metrics(&self) -> &[String] {
        match &self.plot.metrics {
            Some(m) => m,
            None => &self.metrics[..self.metrics.len().min(2)],
        }
    }

    /// Grid points.
    pub fn points(&self) -> u64 {
        self.axes.iter().map(|a| a.levels.len() as u64).product()
    }

    /// Runs (points x seeds).
    pub fn runs(&self) -> u64 {
        self.points() * self.seeds.len() as u64
    }

    /// Level index of each axis at `point` (first axis slowest).
    pub fn coords(&self, point: u64) -> Vec<usize> {
        let mut rest = point;
        let mut out = vec![0; self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            let n = a.levels.len() as u64;
            out[i] = (rest % n) as usize;
            rest /= n;
        }
        out
    }

    /// Labels of each axis at `point`.
    pub fn labels(&self, point: u64) -> Vec<&str> {
        self.coords(point)
            .iter()
            .zip(&self.axes)
            .map(|(c, a)| a.levels[*c].label.as_str())
            .collect()
    }

    /// Point and seed of run `i`.
    pub fn run_at(&self, i: u64) -> (u64, u64) {
        let n = self.seeds.len() as u64;
        (i / n, self.seeds[(i % n) as usize])
    }

    /// Source for `point`: the base with the point's overrides applied, each attributed to
    /// its axis in error messages.
    pub fn source_for(&self, base: &Source, point: u64) -> Result<Source, ScenarioError> {
        let mut src = base.clone();
        for (c, a) in self.coords(point).iter().zip(&self.axes) {
            let level = &a.levels[*c];
            src.apply(&level.sets, &format!("sweep axis {} = {}", a.name, level.label))?;
        }
        Ok(src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_top_level_commas_only() {
        assert_eq!(split_values("1, 2,3"), ["1", "2", "3"]);
        assert_eq!(
            split_values("{ kind = \"a\", b = 1 },[1, 2],\"x,y\""),
            ["{ kind = \"a\", b = 1 }", "[1, 2]", "\"x,y\""]
        );
        assert_eq!(label_of("\"qps\""), "qps");
        assert_eq!(label_of("qps"), "qps");
        assert_eq!(label_of("0.5"), "0.5");
        assert_eq!(label_of("{ kind = \"roundrobin\" }"), "{ kind = \"roundrobin\" }");
        assert_eq!(label_of("[1, 2]"), "[1, 2]");
    }

    #[test]
    fn decimal_scans_are_exact() {
        let l = scan_levels("x", "0.1", "0.5", "0.1", 100).unwrap();
        let labels: Vec<_> = l.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(labels, ["0.1", "0.2", "0.3", "0.4", "0.5"]);
        let l = scan_levels("x", "1", "10", "4", 100).unwrap();
        assert_eq!(l.iter().map(|l| l.label.as_str()).collect::<Vec<_>>(), ["1", "5", "9"]);
        assert!(
            scan_levels("x", "1", "0", "1", 100)
                .unwrap_err()
                .contains("empty range")
        );
        assert!(
            scan_levels("x", "0", "1", "0", 100)
                .unwrap_err()
                .contains("step must be > 0")
        );
        assert!(
            scan_levels("x", "0", "1", "-1", 100)
                .unwrap_err()
                .contains("step must be > 0")
        );
        assert!(
            scan_levels("x", "0", "1e6", "1", 100)
                .unwrap_err()
                .contains("above the cap")
        );
        assert!(
            scan_levels("x", "a", "1", "1", 100)
                .unwrap_err()
                .contains("not a decimal")
        );
    }

    fn src(extra: &str) -> Source {
        let text = format!("{}\n{extra}", include_str!("../../scenarios/burst8.toml"));
        Source::parse(&text, "s.toml", "s").unwrap()
    }

    #[test]
    fn grid_order_first_axis_slowest_seeds_fastest() {
        let cli = CliAxes {
            lists: vec![("router.policy.band".into(), "0,1".into())],
            scans: vec![("router.engine_stats_interval_s".into(), "1".into(), "3".into())],
            seeds: Some(2),
            ..Default::default()
        };
        let p = plan(&src(""), &cli, 1000).unwrap();
        assert_eq!(p.points(), 6);
        assert_eq!(p.runs(), 12);
        assert_eq!(p.labels(0), ["0", "1"]);
        assert_eq!(p.labels(1), ["0", "2"]);
        assert_eq!(p.labels(3), ["1", "1"]);
        assert_eq!(p.run_at(3), (1, 2));
        assert_eq!(p.seeds, [1, 2]);
    }

    #[test]
    fn a_case_that_sets_seed_beside_one_that_does_not_is_an_error_not_a_panic() {
        // Regression: indexing the unset case's first override panicked, even with --list.
        let extra = "[[sweep.axis]]\nname = \"c\"\ncases = [ { label = \"a\", set = { seed = 3 } }, { label = \"b\", set = {} } ]\n";
        let e = plan(&src(extra), &CliAxes::default(), DEFAULT_MAX_RUNS).unwrap_err();
        assert!(e.contains("sweep.axis[0]: sweep seeds with `--seeds`"), "{e}");
    }

    #[test]
    fn file_axes_cases_and_cli_replacement() {
        let extra = r#"
[sweep]
seeds = [5, 7]
[[sweep.axis]]
path = "router.policy.band"
values = [0, 1, 2]
[[sweep.axis]]
name = "fleet"
cases = [ { label = "small", set = { "backends.count" = 2 } },
          { label = "big", set = { "backends.count" = 4, "workload.groups[1].sessions" = 16 } } ]
"#;
        let p = plan(&src(extra), &CliAxes::default(), 1000).unwrap();
        assert_eq!(p.axes.len(), 2);
        assert_eq!(p.axes[1].paths, ["backends.count", "workload.groups[1].sessions"]);
        assert_eq!(p.seeds, [5, 7]);
        let cli = CliAxes {
            lists: vec![("router.policy.band".into(), "4".into())],
            ..Default::default()
        };
        let p = plan(&src(extra), &cli, 1000).unwrap();
        assert_eq!(
            p.axes[0].levels.len(),
            1,
            "the CLI axis replaces the file axis in place"
        );
        assert_eq!(p.axes[0].name, "band");
    }

    #[test]
    fn rejects_bad_grids() {
        let e = |cli: CliAxes| plan(&src(""), &cli, 100).unwrap_err();
        let dup = CliAxes {
            lists: vec![
                ("router.policy.band".into(), "0".into()),
                ("router.policy.band".into(), "1".into()),
            ],
            ..Default::default()
        };
        assert!(e(dup).contains("second axis is named `band`"), "duplicate axes");
        let twice = CliAxes {
            lists: vec![("router.policy.band".into(), "0,0".into())],
            ..Default::default()
        };
        assert!(e(twice).contains("listed twice"));
        let big = CliAxes {
            scans: vec![("router.policy.band".into(), "0".into(), "99".into())],
            seeds: Some(2),
            ..Default::default()
        };
        assert!(e(big).contains("above the cap of 100"));
        let steps = CliAxes {
            steps: vec!["1".into()],
            ..Default::default()
        };
        assert!(e(steps).contains("needs a -P"));
        let seeds = CliAxes {
            seeds: Some(0),
            ..Default::default()
        };
        assert!(e(seeds).contains("at least one seed"));
        let plot = CliAxes {
            lists: vec![("router.policy.band".into(), "0".into())],
            heatmap: Some("band,nope".into()),
            ..Default::default()
        };
        assert!(e(plot).contains("`nope` is not an axis"));
        let bad_file = src("[sweep]\n[[sweep.axis]]\npath = \"router.policy.band\"\n");
        let m = plan(&bad_file, &CliAxes::default(), 100).unwrap_err();
        assert!(m.starts_with("s.toml:") && m.contains("sweep.axis[0]"), "{m}");
        let empty = src("[sweep]\n[[sweep.axis]]\npath = \"router.policy.band\"\nvalues = []\n");
        assert!(
            plan(&empty, &CliAxes::default(), 100)
                .unwrap_err()
                .contains("no values")
        );
    }
}
