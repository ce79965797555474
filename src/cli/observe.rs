//! `sim observe`: `sim run`'s stranding figures on a real fleet's vLLM series.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

use super::out::{out, outln};
use crate::live::fetch;
use crate::observe::{Slots, analyze, parse_query_range, plot_data, render};

#[derive(Args, Debug)]
pub(super) struct ObserveArgs {
    /// Prometheus server to query (/api/v1/query_range), e.g. http://127.0.0.1:9090.
    #[arg(long, conflicts_with_all = ["file", "scrape"], requires_all = ["from", "to"])]
    prometheus: Option<String>,
    /// Start of the range (Unix seconds or RFC 3339), with --prometheus.
    #[arg(long)]
    from: Option<String>,
    /// End of the range (Unix seconds or RFC 3339), with --prometheus.
    #[arg(long)]
    to: Option<String>,
    /// Resolution, seconds: the query's step, or the polling interval with --scrape.
    #[arg(long, default_value_t = 15.0)]
    step: f64,
    /// PromQL label matchers for the vLLM series, e.g. 'job="vllm"'.
    #[arg(long, default_value = "")]
    selector: String,
    /// A saved query_range response (JSON) of the query `sim observe --print-query` prints.
    #[arg(long, conflicts_with = "scrape")]
    file: Option<PathBuf>,
    /// Poll these engines' /metrics directly (comma-separated URLs) for --duration.
    #[arg(long, value_delimiter = ',')]
    scrape: Vec<String>,
    /// How long to poll with --scrape, seconds.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Slots per backend: N for every instance, or INSTANCE=N (repeatable).
    #[arg(long = "slots", value_name = "N|INSTANCE=N")]
    slots: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also write observe.json and the per-backend plot (timeseries.svg/png) here.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    plot: crate::plot::PlotArgs,
    /// Print the PromQL query used (to save a query_range answer for --file) and exit.
    #[arg(long)]
    print_query: bool,
}

pub(super) fn cmd_observe(a: ObserveArgs) -> Result<ExitCode> {
    if a.print_query {
        outln!("{}", crate::observe::query(&a.selector))?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.selector.contains(['{', '}', '\n']) {
        bail!("--selector: give label matchers without braces, e.g. 'job=\"vllm\"'");
    }
    if !(a.step.is_finite() && a.step > 0.0 && a.step <= 86_400.0) {
        bail!("--step {}: expected seconds between 0 and 86400", a.step);
    }
    let mut slots = Slots::default();
    for s in &a.slots {
        slots.add(s)?;
    }
    let o = if let Some(url) = &a.prometheus {
        let (from, to) = (a.from.as_deref().unwrap_or(""), a.to.as_deref().unwrap_or(""));
        fetch::prometheus(url, &a.selector, from, to, a.step)?
    } else if let Some(p) = &a.file {
        let body = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        parse_query_range(&p.display().to_string(), &body)?
    } else if !a.scrape.is_empty() {
        if !(a.duration.is_finite() && a.duration >= 0.0 && a.duration <= 7.0 * 86_400.0) {
            bail!("--duration {}: expected seconds between 0 and a week", a.duration);
        }
        fetch::scrape(
            &a.scrape,
            Duration::from_secs_f64(a.duration),
            Duration::from_secs_f64(a.step),
        )?
    } else {
        bail!("give --prometheus URL --from T0 --to T1, --file FILE or --scrape URL,...");
    };
    let r = analyze(&o, &slots)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&r)?)?;
    } else {
        out!("{}", render(&r))?;
    }
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let p = dir.join("observe.json");
        crate::export::write_json(&p, &r).with_context(|| format!("writing {}", p.display()))?;
        let fig = crate::plot::series::BackendSeries::observed(
            // The source without its query, which would run into the legend.
            format!(
                "observed {}: running + waiting per backend",
                o.source.split(" (").next().unwrap_or("")
            ),
            crate::observe::time_axis(&o),
            r.to_s - r.from_s,
            plot_data(&o, &r),
        );
        crate::plot::save(&fig, &dir.join("timeseries"), a.plot.dpi)?;
        if !a.json {
            outln!(
                "wrote {}/{{observe.json, timeseries.svg, timeseries.png}}",
                dir.display()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
