//! `sim calibrate` (a profile fitted to a real engine's series, or the physics model's
//! global coefficients fitted to a list of runs) and `sim validate` (a profile's
//! per-request error on a measurement, or the leave-one-out table of a list of runs);
//! logic in `crate::calibrate`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Args;

use super::out::outln;
use crate::calibrate::window::Window;
use crate::calibrate::{self, SetupOptions, physics, validate};
use crate::measure;
use crate::profiles::auto::SHIPPED;

/// Where the measurement comes from and what the engine ran with.
#[derive(Args, Debug)]
pub(super) struct MeasureArgs {
    /// A measurement: a harness run folder (meta.json, requests.jsonl, timeseries.csv), a
    /// `vllm bench serve --save-result --save-detailed` JSON, an LMBench CSV (with the
    /// Kubernetes Deployment beside it as deployment.yaml, when there is one), or a
    /// session trace with recorded TTFT and ends (validation only). With --physics or
    /// --leave-one-out: a list of runs (TOML, as traces/validation.toml).
    measurements: PathBuf,
    /// The engine's series: a Prometheus query_range JSON or an OpenMetrics dump with
    /// timestamps (replaces the measurement's own series).
    #[arg(long)]
    series: Option<PathBuf>,
    /// `vllm serve` flags the engine ran with, where the measurement does not record them
    /// (e.g. "--max-num-seqs 256 --tensor-parallel-size 2 --data-parallel-size 2").
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    engine_args: String,
    /// The GPU (`sim profiles --gpus`), where the measurement does not name it: its
    /// datasheet sizes the KV cache and prices the auto profile.
    #[arg(long, value_name = "NAME")]
    gpu: Option<String>,
    /// The model (`sim profiles --models`, or a Hugging Face name), where the measurement
    /// does not name it.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Separate servers behind one load balancer that picks one at random (a Kubernetes
    /// Deployment's replicas), where the measurement does not record them.
    #[arg(long, value_name = "N")]
    replicas: Option<u32>,
    /// The same prompts ran on the server just before this run (a load sweep repeating
    /// its prompts): the replay serves each prompt once first, so the prefix cache holds
    /// what the real one held.
    #[arg(long)]
    warm_prefix_cache: bool,
    /// GPU memory, GiB, to derive KV blocks when neither they nor the GPU are recorded.
    #[arg(long)]
    gpu_memory_gib: Option<f64>,
    /// Activation peak and non-torch memory per GPU, GiB, for that derivation (default 0).
    #[arg(long)]
    activation_memory_gib: Option<f64>,
    /// Seconds from the run's first arrival, `A:B` (either end open: `:B`, `A:`):
    /// calibrate fits the engine series inside it, validate scores the requests that
    /// arrive inside it; both replay the whole run.
    #[arg(long, value_name = "A:B")]
    window: Option<String>,
}

impl MeasureArgs {
    fn load(&self) -> Result<measure::Measurement> {
        Ok(measure::load(&self.measurements, self.series.as_deref())?)
    }

    fn options(&self) -> SetupOptions {
        SetupOptions {
            gpu_memory_gib: self.gpu_memory_gib,
            activation_memory_gib: self.activation_memory_gib,
            gpu: self.gpu.clone(),
            model: self.model.clone(),
            replicas: self.replicas,
            fallback: None,
            warm_prefix: self.warm_prefix_cache,
        }
    }

    fn window(&self) -> Result<Window> {
        self.window.as_deref().map_or(Ok(Window::ALL), Window::parse)
    }
}

#[derive(Args, Debug)]
pub(super) struct CalibrateArgs {
    #[command(flatten)]
    m: MeasureArgs,
    /// The profile file to write.
    #[arg(short, long, required_unless_present = "physics")]
    out: Option<PathBuf>,
    /// The profile's name (default: the measurement's folder or file name).
    #[arg(long)]
    name: Option<String>,
    /// What to fit: `physics` (corrections to the physics model's memory, compute and
    /// per-step coefficients; needs the model and the GPU), `linear` (four step-time
    /// coefficients from scratch), or `auto` (physics where the model and GPU are known).
    #[arg(long, default_value = "auto", value_parser = ["auto", "physics", "linear"])]
    form: String,
    /// Write the profile even when the fit is far worse than a faithful replay reaches.
    #[arg(long)]
    accept_poor_fit: bool,
    /// Fit the physics model's global coefficients to every run of the list given as
    /// MEASUREMENTS (the shipped ones: traces/validation.toml) and print them.
    #[arg(long, conflicts_with_all = ["out", "name", "window", "series"])]
    physics: bool,
    /// With --physics: evaluate these coefficients on every run instead of fitting
    /// ("name=value,..."; the rest as shipped; `sim profiles --physics` lists them).
    #[arg(long, requires = "physics", value_name = "NAME=VALUE,...")]
    coefficients: Option<String>,
}

/// Process CPU time (user + system), s, from /proc (Linux); `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5) (utime, stime), counted after the command name.
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn cost_line(cpu0: Option<f64>, wall0: std::time::Instant) -> String {
    let cpu = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) => format!("{:.2} CPU s", b - a),
        _ => "CPU time unavailable".into(),
    };
    format!("{cpu}, {:.2} s wall", wall0.elapsed().as_secs_f64())
}

fn stem(p: &Path) -> String {
    if p.is_dir() {
        return p
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "profile".into());
    }
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".into())
}

/// A loss above this is not a replay of the run (the shipped runs fit at 0.03-0.09).
const POOR_FIT_LOSS: f64 = 0.5;

pub(super) fn cmd_calibrate(a: CalibrateArgs) -> Result<ExitCode> {
    let cpu0 = cpu_seconds();
    let wall0 = std::time::Instant::now();
    if a.physics {
        return calibrate_physics(&a.m.measurements, a.coefficients.as_deref(), cpu0, wall0);
    }
    let out = a.out.clone().ok_or_else(|| anyhow!("--out is required"))?;
    let window = a.m.window()?;
    let m = a.m.load()?;
    let s = calibrate::setup(&m, &a.m.engine_args, &a.m.options())?;
    let totals = calibrate::token_totals(&m, window)?;
    let deployment = s.deployment(&m.source);
    let physics_form = match a.form.as_str() {
        "linear" => false,
        "physics" => {
            deployment.as_ref().map_err(|e| anyhow!("--form physics: {e}"))?;
            true
        }
        _ => deployment.is_ok(),
    };
    let w = calibrate::workload(&m, &s, SHIPPED.client_overhead_us * 1e-6)?;
    let mut t = calibrate::target(&m, &w)?;
    t.window = window;
    let f = match (&deployment, physics_form) {
        (Ok(d), true) => calibrate::fit_physics(&s.cfg, d, &w, &t)?,
        _ => calibrate::fit(&s.cfg, &w, &t)?,
    };
    outln!("{}: {} requests, {}", m.source, m.requests.len(), m.format)?;
    for n in &m.notes {
        outln!("  note: {n}")?;
    }
    outln!("engine: {}", s.engines_line())?;
    outln!("  {}", s.provenance.join(", "))?;
    outln!("{totals}")?;
    if !window.is_all() {
        outln!(
            "window: the series in --window {} fitted (s from the first arrival); every request replayed",
            window.text()
        )?;
    }
    outln!("step time: {}", f.describe())?;
    let term = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
    outln!(
        "fit: loss {:.4}{} (cumulative prompt {}, cumulative generation {}, running {}, waiting {}; normalised RMSE)",
        f.terms.total(),
        f.linear_loss
            .map_or(String::new(), |l| format!(", {l:.4} without the context term")),
        term(f.terms.cum_prompt),
        term(f.terms.cum_gen),
        term(f.terms.running),
        term(f.terms.waiting)
    )?;
    outln!(
        "cost: {} simulations, {} iterations, {}",
        f.simulations,
        f.iterations,
        cost_line(cpu0, wall0)
    )?;
    if f.terms.total() > POOR_FIT_LOSS && !a.accept_poor_fit {
        eprintln!(
            "error: the fit's loss {:.3} is far above what a faithful replay reaches (at most {POOR_FIT_LOSS}; the shipped runs fit at 0.03-0.09): the engine setup above or the measurement is not what ran (a series that stops early, a window without the requests that made it, another run's series); {} not written (--accept-poor-fit writes it anyway)",
            f.terms.total(),
            crate::quote::escape(&out.display().to_string())
        );
        return Ok(ExitCode::from(1));
    }
    if f.terms.total() > POOR_FIT_LOSS {
        outln!(
            "WARNING: the fit's loss {:.3} is far above what a faithful replay reaches (at most {POOR_FIT_LOSS}); written anyway (--accept-poor-fit)",
            f.terms.total()
        )?;
    }
    let name = a.name.clone().unwrap_or_else(|| stem(&a.m.measurements));
    let file = calibrate::profile_file(&name, &m, &s, &f);
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    }
    crate::atomic::write_atomic(&out, |b| {
        b.extend_from_slice(file.to_toml().as_bytes());
        Ok(())
    })?;
    outln!("wrote {}", out.display())?;
    Ok(ExitCode::SUCCESS)
}

/// `sim calibrate --physics RUNS.toml`: the global fit, printed as the shipped table.
fn calibrate_physics(
    list: &Path,
    given: Option<&str>,
    cpu0: Option<f64>,
    wall0: std::time::Instant,
) -> Result<ExitCode> {
    let runs = physics::read_runs(list)?;
    let all: Vec<&physics::Run> = runs.iter().collect();
    let f = match given {
        Some(text) => physics::evaluate(&all, &physics::parse_coefficients(text, &SHIPPED)?),
        None => physics::fit(&all)?,
    };
    let groups: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.entry.group.as_str()).collect();
    outln!(
        "physics model: global coefficients {} {} runs in {} groups of {} (loss {:.5}, {} replays, {})",
        if given.is_some() { "evaluated on" } else { "fitted to" },
        runs.len(),
        groups.len(),
        list.display(),
        f.loss,
        f.replays,
        cost_line(cpu0, wall0)
    )?;
    for (k, v) in f.coefficients.named() {
        let shipped = SHIPPED.named().iter().find(|(n, _)| *n == k).map_or(f64::NAN, |x| x.1);
        let mark = if shipped == v { "" } else { "  (shipped: differs)" };
        outln!("  {k:<22} {v}{mark}")?;
    }
    outln!("\nin-sample errors at these coefficients (simulated / measured - 1):")?;
    outln!(
        "{:<40} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "run",
        "E2E mean",
        "TTFT mean",
        "TPOT mean",
        "E2E p90",
        "TTFT p90",
        "TPOT p90"
    )?;
    for r in &runs {
        let v = physics::replay_run(r, &f.coefficients, Window::ALL)?;
        let e = physics::errors(&v);
        let p = |x: f64| format!("{:+.1} %", x * 100.0);
        outln!(
            "{:<40} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            r.entry.name,
            p(e.mean[0]),
            p(e.mean[1]),
            p(e.mean[2]),
            p(e.p90[0]),
            p(e.p90[1]),
            p(e.p90[2])
        )?;
    }
    let all_match = f.coefficients == SHIPPED;
    outln!(
        "{}",
        if all_match {
            "the shipped coefficients (profiles::auto::SHIPPED) are these"
        } else {
            "the shipped coefficients (profiles::auto::SHIPPED) differ: paste these into crates/fleetsim-io/src/profiles/auto.rs"
        }
    )?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub(super) struct ValidateArgs {
    #[command(flatten)]
    m: MeasureArgs,
    /// The profile: `auto` (derived from the model and GPU by the physics model, no
    /// fitting to this run), a file `sim calibrate` wrote (PATH or file:PATH), or a
    /// shipped id (`sim profiles`). The run's own engine settings are kept.
    #[arg(long, required_unless_present = "leave_one_out")]
    profile: Option<String>,
    /// Judge the physics model on runs it never saw: for each group of the list given as
    /// MEASUREMENTS, refit the global coefficients without it and predict its runs.
    #[arg(long, conflicts_with_all = ["profile", "series", "window"])]
    leave_one_out: bool,
    /// With --leave-one-out: what each fold leaves out, `group` (a model on a GPU: the
    /// fit never saw that model on that hardware) or `run` (one run; its group's other
    /// runs stay in the fit).
    #[arg(long, default_value = "group", value_parser = ["group", "run"], requires = "leave_one_out")]
    by: String,
    /// Output folder (default out/validate-<name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// A bound on a figure of validation.json, e.g. 'abs(e2e_mean_err_pct) <= 3'
    /// (repeatable); exit 1 if any fails.
    #[arg(long = "check", value_name = "BOUND")]
    checks: Vec<String>,
    /// Write no plot.
    #[arg(long)]
    no_plots: bool,
    #[command(flatten)]
    plot: crate::plot::PlotArgs,
}

/// The engine and step time a validation replays, and what to say about them.
struct Chosen {
    s: calibrate::Setup,
    cfg: crate::backend::vllm::VllmConfig,
    name: String,
    client_delay_s: f64,
    notes: Vec<String>,
    /// An auto profile: the prediction carries the physics model's held-out error.
    auto: bool,
}

/// The run's engine with the profile's step time; a profile file's engine fills only
/// what the run does not record, and every difference is said.
fn choose(a: &ValidateArgs, profile: &str, m: &measure::Measurement) -> Result<Chosen> {
    let p = profile
        .strip_prefix(crate::profiles::file::FILE_PREFIX)
        .unwrap_or(profile);
    let mut opts = a.m.options();
    if p.eq_ignore_ascii_case("auto") {
        let s = calibrate::setup(m, &a.m.engine_args, &opts)?;
        let d = s.deployment(&m.source)?;
        let mut cfg = s.cfg.clone();
        cfg.step_time = d.step_time(&SHIPPED);
        let delay = if m.client_timed() {
            SHIPPED.client_overhead_us * 1e-6
        } else {
            0.0
        };
        let mut notes = vec![format!(
            "profile auto: {} priced by the physics model with the shipped coefficients (no fitting to this run)",
            d.id()
        )];
        notes.push(physics::HELD_OUT.band());
        if delay > 0.0 {
            notes.push(format!(
                "times are the client's: each request reaches the engine {:.1} ms after it was sent (client_overhead_us)",
                delay * 1e3
            ));
        }
        return Ok(Chosen {
            name: format!("auto ({})", d.id()),
            s,
            cfg,
            client_delay_s: delay,
            notes,
            auto: true,
        });
    }
    if Path::new(p).is_file() {
        let f = crate::profiles::file::ProfileFile::read(Path::new(p)).map_err(|e| anyhow!("--profile: {e}"))?;
        opts.fallback = Some(f.engine.clone());
        let s = calibrate::setup(m, &a.m.engine_args, &opts)?;
        let mut notes = Vec::new();
        let e = &f.engine;
        for (k, prof, run) in [
            ("max_num_seqs", e.max_num_seqs, s.cfg.max_num_seqs),
            (
                "max_num_batched_tokens",
                e.max_num_batched_tokens,
                s.cfg.max_num_batched_tokens,
            ),
            ("kv_blocks", e.kv_blocks, s.cfg.kv_blocks),
        ] {
            if prof != run {
                notes.push(format!(
                    "the profile file's {k} is {prof}, this run's {run}: the run's is used (the profile gives the step time only)"
                ));
            }
        }
        let mut cfg = s.cfg.clone();
        cfg.step_time = f.step_time_model();
        let delay = if f.physics.is_some() && m.client_timed() {
            f.physics
                .as_ref()
                .and_then(|ph| ph.resolve().ok())
                .map_or(0.0, |(_, c)| c.client_overhead_us * 1e-6)
        } else {
            0.0
        };
        return Ok(Chosen {
            name: f.profile.name,
            s,
            cfg,
            client_delay_s: delay,
            notes,
            auto: false,
        });
    }
    let prof = crate::profiles::find(p).map_err(|e| anyhow!("--profile: {e} (or `auto`, or a profile file)"))?;
    let s = calibrate::setup(m, &a.m.engine_args, &opts)?;
    let mut cfg = s.cfg.clone();
    cfg.step_time = prof.step_time.clone();
    Ok(Chosen {
        name: prof.id,
        s,
        cfg,
        client_delay_s: 0.0,
        notes: vec!["a shipped profile gives the step time only; the engine is the run's".into()],
        auto: false,
    })
}

pub(super) fn cmd_validate(a: ValidateArgs) -> Result<ExitCode> {
    if a.leave_one_out {
        return leave_one_out(&a);
    }
    let profile = a.profile.clone().ok_or_else(|| anyhow!("--profile is required"))?;
    let window = a.m.window()?;
    let m = a.m.load()?;
    let c = choose(&a, &profile, &m)?;
    let w = calibrate::workload(&m, &c.s, c.client_delay_s)?;
    let (v, _) = validate::validate(&m, &c.cfg, &w, &c.name, window)?;
    let metrics = v.metrics();
    let bounds = a
        .checks
        .iter()
        .map(|c| validate::Bound::parse(c, &metrics))
        .collect::<Result<Vec<_>>>()?;
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(format!("validate-{}", stem(&a.m.measurements))));
    std::fs::create_dir_all(&dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    let engine = format!("engine: {}\n  {}", c.s.engines_line(), c.s.provenance.join(", "));
    let json = serde_json::json!({
        "source": v.source,
        "profile": v.profile,
        "window": window.text(),
        "engine": c.s.engines_line(),
        "engine_settings": c.s.provenance,
        "metrics": metrics,
        "expected_abs_err_pct": c.auto.then(|| held_out_json(&physics::HELD_OUT)),
    });
    crate::atomic::write_atomic(&dir.join("validation.json"), |b| {
        b.extend_from_slice(serde_json::to_string_pretty(&json)?.as_bytes());
        b.push(b'\n');
        Ok(())
    })?;
    let md = v.markdown();
    crate::atomic::write_atomic(&dir.join("validation.md"), |b| {
        b.extend_from_slice(md.as_bytes());
        Ok(())
    })?;
    crate::atomic::write_atomic(&dir.join("requests.csv"), |b| {
        let mut wtr = csv::Writer::from_writer(b);
        wtr.write_record([
            "id",
            "ttft_measured_s",
            "ttft_simulated_s",
            "e2e_measured_s",
            "e2e_simulated_s",
        ])?;
        let ttft = &v.latencies[0].pairs;
        let e2e = &v.latencies[v.latencies.len() - 1].pairs;
        for (k, &i) in v.scored.iter().enumerate() {
            wtr.write_record([
                m.requests[i].id.clone(),
                format!("{:.6}", ttft[k].0),
                format!("{:.6}", ttft[k].1),
                format!("{:.6}", e2e[k].0),
                format!("{:.6}", e2e[k].1),
            ])?;
        }
        wtr.flush()?;
        Ok(())
    })?;
    if let Some(dpi) = a.plot.dpi(a.no_plots) {
        crate::plot::save(
            &calibrate::plot::ValidationFigure { v: &v },
            &dir.join("validation"),
            dpi,
        )?;
    }
    for n in &m.notes {
        outln!("note: {n}")?;
    }
    outln!("{engine}")?;
    for n in &c.notes {
        outln!("note: {n}")?;
    }
    outln!()?;
    super::out::out!("{md}")?;
    let mut failed = false;
    for b in &bounds {
        let (x, ok) = b.eval(&metrics);
        failed |= !ok;
        outln!("{} {}: {x:.3}", if ok { "PASS" } else { "FAIL" }, b.text)?;
    }
    outln!("wrote {}", dir.display())?;
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The held-out error as `validation.json` carries it.
fn held_out_json(h: &physics::HeldOutError) -> serde_json::Value {
    serde_json::json!({
        "source": "sim validate --leave-one-out traces/validation.toml (leave one model-on-GPU group out)",
        "runs": h.runs,
        "e2e_mean_median": h.e2e_median,
        "e2e_mean_worst": h.e2e_worst,
        "ttft_mean_median": h.ttft_median,
        "ttft_mean_worst": h.ttft_worst,
        "tpot_mean_median": h.tpot_median,
    })
}

/// The targets the leave-one-out table is held to: median |E2E mean error| and median
/// |TTFT mean error|, and the worst run's |E2E mean error|, %.
pub const LOO_TARGETS: [f64; 3] = [10.0, 20.0, 25.0];

/// `sim validate --leave-one-out RUNS.toml`.
fn leave_one_out(a: &ValidateArgs) -> Result<ExitCode> {
    let cpu0 = cpu_seconds();
    let wall0 = std::time::Instant::now();
    let runs = physics::read_runs(&a.m.measurements)?;
    let by = if a.by == "run" {
        physics::LeaveOut::Run
    } else {
        physics::LeaveOut::Group
    };
    let l = physics::leave_one_out(&runs, by)?;
    let md = l.markdown();
    let (means, p90s) = l.medians();
    let (worst, worst_run) = l.worst_e2e();
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join("leave-one-out"));
    std::fs::create_dir_all(&dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    let json = serde_json::json!({
        "runs": a.m.measurements.display().to_string(),
        "leave_out": a.by,
        "median_abs_err_pct": {
            "e2e_mean": means[0], "ttft_mean": means[1], "tpot_mean": means[2],
            "e2e_p90": p90s[0], "ttft_p90": p90s[1], "tpot_p90": p90s[2],
        },
        "worst_abs_e2e_mean_err_pct": worst,
        "rows": l.rows.iter().map(|r| serde_json::json!({
            "run": r.name, "group": r.group, "profile": r.profile, "requests": r.requests,
            "e2e_mean_err_pct": r.errors.mean[0] * 100.0,
            "ttft_mean_err_pct": r.errors.mean[1] * 100.0,
            "tpot_mean_err_pct": r.errors.mean[2] * 100.0,
            "e2e_p90_err_pct": r.errors.p90[0] * 100.0,
            "ttft_p90_err_pct": r.errors.p90[1] * 100.0,
            "tpot_p90_err_pct": r.errors.p90[2] * 100.0,
        })).collect::<Vec<_>>(),
        "folds": l.folds.iter().map(|(g, c)| serde_json::json!({
            "left_out": g,
            "coefficients": c.named().iter().map(|(k, v)| (k.to_string(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
    });
    crate::atomic::write_atomic(&dir.join("leave-one-out.json"), |b| {
        b.extend_from_slice(serde_json::to_string_pretty(&json)?.as_bytes());
        b.push(b'\n');
        Ok(())
    })?;
    crate::atomic::write_atomic(&dir.join("leave-one-out.md"), |b| {
        b.extend_from_slice(md.as_bytes());
        Ok(())
    })?;
    super::out::out!("{md}")?;
    let met = |x: f64, t: f64| if x <= t { "met" } else { "MISSED" };
    outln!(
        "\ntargets: median E2E mean error {:.1} % (<= {} %: {}), median TTFT mean error {:.1} % (<= {} %: {}), worst E2E mean error {:.1} % ({worst_run}; <= {} %: {})",
        means[0],
        LOO_TARGETS[0],
        met(means[0], LOO_TARGETS[0]),
        means[1],
        LOO_TARGETS[1],
        met(means[1], LOO_TARGETS[1]),
        worst,
        LOO_TARGETS[2],
        met(worst, LOO_TARGETS[2])
    )?;
    if by == physics::LeaveOut::Group {
        let h = physics::HeldOutError::of(&l);
        outln!(
            "{}",
            if h == physics::HELD_OUT {
                "the band auto predictions print (calibrate::physics::HELD_OUT) is this table's".to_string()
            } else {
                format!(
                    "the band auto predictions print (calibrate::physics::HELD_OUT) differs from this table's: {h:?}"
                )
            }
        )?;
    }
    outln!(
        "{} runs, {} folds leaving out one {} each, {} replays, {}",
        l.rows.len(),
        l.folds.len(),
        a.by,
        l.replays,
        cost_line(cpu0, wall0)
    )?;
    outln!("wrote {}", dir.display())?;
    Ok(ExitCode::SUCCESS)
}
