//! `sim observe`: `sim run`'s stranding figures on a real fleet's vLLM series.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

use super::out::{out, outln};
use crate::live::fetch;
use crate::observe::{Slots, analyze, exposition, parse_query_range, plot_data, render};

#[derive(Args, Debug)]
pub(super) struct ObserveArgs {
    /// Prometheus server to query (/api/v1/query_range), e.g. http://127.0.0.1:9090.
    #[arg(long, conflicts_with_all = ["file", "scrape"])]
    prometheus: Option<String>,
    /// Start of the range (Unix seconds or RFC 3339), with --prometheus and --to.
    #[arg(long)]
    from: Option<String>,
    /// End of the range (Unix seconds or RFC 3339), with --prometheus and --from.
    #[arg(long)]
    to: Option<String>,
    /// Resolution, seconds (0.01 to 86400; default 15): the query's step, or the polling
    /// interval with --scrape.
    #[arg(long)]
    step: Option<f64>,
    /// PromQL label matchers for the vLLM series, e.g. 'job="vllm"'.
    #[arg(long, default_value = "")]
    selector: String,
    /// A saved query_range response (JSON) of the query `sim observe --print-query` prints,
    /// or timestamped exposition text (OpenMetrics, as `sim run --openmetrics` writes, or
    /// the Prometheus text format).
    #[arg(long, conflicts_with = "scrape")]
    file: Option<PathBuf>,
    /// Poll these engines' /metrics directly (comma-separated URLs) for --duration.
    #[arg(long, value_delimiter = ',')]
    scrape: Vec<String>,
    /// How long to poll with --scrape, seconds (default 60, at most a week).
    #[arg(long)]
    duration: Option<f64>,
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

/// The step's range, seconds.
const STEP_S: std::ops::RangeInclusive<f64> = 0.01..=86_400.0;
/// The most points a query_range answers per series (Prometheus refuses more).
const MAX_QUERY_POINTS: f64 = 11_000.0;
/// The most polls of one scrape.
const MAX_POLLS: f64 = 1_000_000.0;
/// The largest `--file` read, bytes (as large as the answer `--prometheus` reads).
const MAX_FILE_BYTES: u64 = 512 << 20;

/// Where the series come from, the flags checked against each other.
enum Source {
    Prometheus {
        url: String,
        from: f64,
        to: f64,
        step: f64,
    },
    File(PathBuf),
    Scrape {
        urls: Vec<String>,
        duration: f64,
        step: f64,
    },
}

impl ObserveArgs {
    /// The source the flags name, each flag checked against the others: one source; the
    /// flags of another source refused; `--from` and `--to` together, in order; `--step` in
    /// range, and at most as many points as Prometheus or a scrape can give.
    fn source(&self) -> Result<Source> {
        let step = match self.step {
            Some(s) if !(s.is_finite() && STEP_S.contains(&s)) => {
                bail!(
                    "--step {s}: expected seconds from {} to {}",
                    STEP_S.start(),
                    STEP_S.end()
                )
            }
            s => s,
        };
        let range = match (&self.from, &self.to) {
            (None, None) => None,
            (Some(_), None) => bail!("--from is given without --to: give both (Unix seconds or RFC 3339)"),
            (None, Some(_)) => bail!("--to is given without --from: give both (Unix seconds or RFC 3339)"),
            (Some(f), Some(t)) => Some((instant("--from", f)?, instant("--to", t)?)),
        };
        let only = |flag: &str, given: bool, for_what: &str| -> Result<()> {
            if given {
                bail!("{flag} applies to {for_what} only");
            }
            Ok(())
        };
        if let Some(url) = &self.prometheus {
            let Some((from, to)) = range else {
                bail!("--prometheus needs --from and --to (Unix seconds or RFC 3339)");
            };
            only("--duration", self.duration.is_some(), "--scrape")?;
            if to <= from {
                bail!("--from {from} --to {to}: --to must be after --from");
            }
            let step = step.unwrap_or(15.0);
            let points = ((to - from) / step).floor() + 1.0;
            if points > MAX_QUERY_POINTS {
                bail!(
                    "--from/--to span {} s at --step {step}: {points} points, Prometheus answers at most {MAX_QUERY_POINTS} per series; give a --step of at least {}",
                    to - from,
                    ((to - from) / (MAX_QUERY_POINTS - 1.0)).ceil()
                );
            }
            return Ok(Source::Prometheus {
                url: url.clone(),
                from,
                to,
                step,
            });
        }
        only("--from/--to", range.is_some(), "--prometheus")?;
        if let Some(p) = &self.file {
            only("--step", step.is_some(), "--prometheus and --scrape")?;
            only("--duration", self.duration.is_some(), "--scrape")?;
            return Ok(Source::File(p.clone()));
        }
        if self.scrape.is_empty() {
            bail!("give --prometheus URL --from T0 --to T1, --file FILE or --scrape URL,...");
        }
        let duration = self.duration.unwrap_or(60.0);
        if !(duration.is_finite() && duration > 0.0 && duration <= 7.0 * 86_400.0) {
            bail!("--duration {duration}: expected seconds above 0, at most a week (604800)");
        }
        let step = step.unwrap_or(15.0);
        if step > duration {
            bail!("--step {step} is longer than --duration {duration}: a scrape needs at least two polls");
        }
        let polls = (duration / step).floor() + 1.0;
        if polls > MAX_POLLS {
            bail!("--duration {duration} at --step {step}: {polls} polls, at most {MAX_POLLS}; give a larger --step");
        }
        Ok(Source::Scrape {
            urls: self.scrape.clone(),
            duration,
            step,
        })
    }
}

/// A `--from`/`--to` instant: Unix seconds or RFC 3339, as Unix seconds.
fn instant(flag: &str, text: &str) -> Result<f64> {
    let t = text.trim();
    if let Ok(x) = t.parse::<f64>() {
        if x.is_finite() && (0.0..=crate::observe::MAX_TIME_S).contains(&x) {
            return Ok(x);
        }
        bail!(
            "{flag} {x}: expected Unix seconds from 0 to {}",
            crate::observe::MAX_TIME_S
        );
    }
    t.parse::<jiff::Timestamp>()
        .map(|ts| ts.as_millisecond() as f64 / 1000.0)
        .map_err(|_| {
            anyhow::anyhow!(
                "{flag} {}: expected Unix seconds or RFC 3339 (2026-01-05T10:00:00Z)",
                crate::quote::one_line(t)
            )
        })
}

pub(super) fn cmd_observe(a: ObserveArgs) -> Result<ExitCode> {
    if a.print_query {
        outln!("{}", crate::observe::query(&a.selector))?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.selector.contains(['{', '}', '\n']) {
        bail!("--selector: give label matchers without braces, e.g. 'job=\"vllm\"'");
    }
    let source = a.source()?;
    let mut slots = Slots::default();
    for s in &a.slots {
        slots.add(s)?;
    }
    let o = match source {
        Source::Prometheus { url, from, to, step } => {
            fetch::prometheus(&url, &a.selector, &from.to_string(), &to.to_string(), step)?
        }
        Source::File(p) => {
            let size = std::fs::metadata(&p)
                .with_context(|| format!("reading {}", p.display()))?
                .len();
            if size > MAX_FILE_BYTES {
                bail!(
                    "{}: {size} bytes, larger than {MAX_FILE_BYTES} (sim observe --file's bound)",
                    p.display()
                );
            }
            let body = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            let name = p.display().to_string();
            if exposition::is_exposition(&body) {
                exposition::parse(&name, &body)?
            } else {
                parse_query_range(&name, &body)?
            }
        }
        Source::Scrape { urls, duration, step } => {
            fetch::scrape(&urls, Duration::from_secs_f64(duration), Duration::from_secs_f64(step))?
        }
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
