//! `sim calibrate` (a profile fitted to a real engine's series) and `sim validate` (the
//! profile's per-request error on a measurement); logic in `crate::calibrate`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Args;

use super::out::outln;
use crate::calibrate::{self, SetupOptions, validate};
use crate::measure;

/// Where the measurement comes from and what the engine ran with.
#[derive(Args, Debug)]
pub(super) struct MeasureArgs {
    /// A measurement: a harness run folder (meta.json, requests.jsonl, timeseries.csv), a
    /// `vllm bench serve --save-result --save-detailed` JSON, or a session trace with
    /// recorded TTFT and ends (validation only).
    measurements: PathBuf,
    /// The engine's series: a Prometheus query_range JSON or an OpenMetrics dump with
    /// timestamps (replaces the measurement's own series).
    #[arg(long)]
    series: Option<PathBuf>,
    /// `vllm serve` flags the engine ran with, where the measurement does not record them
    /// (e.g. "--max-num-seqs 256 --max-num-batched-tokens 2048 --num-gpu-blocks-override 2588").
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    engine_args: String,
    /// GPU memory, GiB, to derive KV blocks when neither they nor the GPU are recorded.
    #[arg(long)]
    gpu_memory_gib: Option<f64>,
    /// Activation peak and non-torch memory per GPU, GiB, for that derivation (default 0).
    #[arg(long)]
    activation_memory_gib: Option<f64>,
}

impl MeasureArgs {
    fn load(&self) -> Result<measure::Measurement> {
        Ok(measure::load(&self.measurements, self.series.as_deref())?)
    }

    fn setup(&self, m: &measure::Measurement) -> Result<calibrate::Setup> {
        calibrate::setup(
            m,
            &self.engine_args,
            SetupOptions {
                gpu_memory_gib: self.gpu_memory_gib,
                activation_memory_gib: self.activation_memory_gib,
            },
        )
    }
}

#[derive(Args, Debug)]
pub(super) struct CalibrateArgs {
    #[command(flatten)]
    m: MeasureArgs,
    /// The profile file to write.
    #[arg(short, long)]
    out: PathBuf,
    /// The profile's name (default: the measurement's folder or file name).
    #[arg(long)]
    name: Option<String>,
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

fn stem(p: &std::path::Path) -> String {
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

pub(super) fn cmd_calibrate(a: CalibrateArgs) -> Result<ExitCode> {
    let cpu0 = cpu_seconds();
    let wall0 = std::time::Instant::now();
    let m = a.m.load()?;
    let s = a.m.setup(&m)?;
    let w = calibrate::workload(&m, &s.cfg)?;
    let t = calibrate::target(&m, &w)?;
    let f = calibrate::fit(&s.cfg, &w, &t)?;
    let name = a.name.clone().unwrap_or_else(|| stem(&a.m.measurements));
    let file = calibrate::profile_file(&name, &m, &s, &f);
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    }
    crate::atomic::write_atomic(&a.out, |b| {
        b.extend_from_slice(file.to_toml().as_bytes());
        Ok(())
    })?;
    outln!("{}: {} requests, {}", m.source, m.requests.len(), m.format)?;
    for n in &m.notes {
        outln!("  note: {n}")?;
    }
    outln!("engine: {}", s.provenance.join(", "))?;
    outln!(
        "step time: {:.1} us + {:.3} us x prefill token + {:.3} us x decode token + {:.5} us x context token",
        f.step_time.beta0_us,
        f.step_time.beta1_us,
        f.step_time.beta2_us,
        f.step_time.beta3_us
    )?;
    let term = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
    outln!(
        "fit: loss {:.4}, {:.4} without the context term (cumulative prompt {}, cumulative generation {}, running {}, waiting {}; normalised RMSE)",
        f.terms.total(),
        f.linear_loss,
        term(f.terms.cum_prompt),
        term(f.terms.cum_gen),
        term(f.terms.running),
        term(f.terms.waiting)
    )?;
    let cpu = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) => format!("{:.2} CPU s", b - a),
        _ => "CPU time unavailable".into(),
    };
    outln!(
        "cost: {} simulations, {} iterations, {cpu}, {:.2} s wall",
        f.simulations,
        f.iterations,
        wall0.elapsed().as_secs_f64()
    )?;
    outln!("wrote {}", a.out.display())?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub(super) struct ValidateArgs {
    #[command(flatten)]
    m: MeasureArgs,
    /// The profile: a file `sim calibrate` wrote (PATH or file:PATH), or a shipped id
    /// (`sim profiles`) whose step time is used with the measurement's engine flags.
    #[arg(long)]
    profile: String,
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

pub(super) fn cmd_validate(a: ValidateArgs) -> Result<ExitCode> {
    let m = a.m.load()?;
    let p = a
        .profile
        .strip_prefix(crate::profiles::file::FILE_PREFIX)
        .unwrap_or(&a.profile);
    let (cfg, name) = if std::path::Path::new(p).is_file() {
        let f =
            crate::profiles::file::ProfileFile::read(std::path::Path::new(p)).map_err(|e| anyhow!("--profile: {e}"))?;
        let cfg = crate::backend::vllm::VllmConfig {
            max_num_seqs: f.engine.max_num_seqs,
            max_num_batched_tokens: f.engine.max_num_batched_tokens,
            kv_blocks: f.engine.kv_blocks,
            block_size_tokens: f.engine.block_size_tokens,
            prefix_caching: f.engine.prefix_caching,
            step_time: f.step_time_model(),
            reserve_full_isl: f.engine.reserve_full_isl,
        };
        // Flags given here override the profile's engine (a profile used on another setup).
        let cfg = if a.m.engine_args.trim().is_empty() {
            cfg
        } else {
            let mut s = a.m.setup(&m)?.cfg;
            s.step_time = cfg.step_time;
            s
        };
        (cfg, f.profile.name)
    } else {
        let prof = crate::profiles::find(p).map_err(|e| anyhow!("--profile: {e}"))?;
        let mut cfg = a.m.setup(&m)?.cfg;
        cfg.step_time = prof.step_time.clone();
        (cfg, prof.id)
    };
    let w = calibrate::workload(&m, &cfg)?;
    let (v, _) = validate::validate(&m, &cfg, &w, &name)?;
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
    let json = serde_json::json!({
        "source": v.source,
        "profile": v.profile,
        "metrics": metrics,
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
        for (i, r) in m.requests.iter().enumerate() {
            wtr.write_record([
                r.id.clone(),
                format!("{:.6}", ttft[i].0),
                format!("{:.6}", ttft[i].1),
                format!("{:.6}", e2e[i].0),
                format!("{:.6}", e2e[i].1),
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
