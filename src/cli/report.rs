//! `sim report DIR -o report.html`: one self-contained HTML page of a results folder (the
//! summary, the hints, the time series with zoom, every figure, the explanation and its
//! worst episode, the scenario), readable offline (markup in `crate::html`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;

use super::explain::ExplainFlags;
use super::out::outln;
use crate::html::{self, Page, series::SeriesData};

#[derive(Args, Debug)]
pub(super) struct ReportArgs {
    /// A results folder: `sim run`'s (summary, time series, explanation, scenario), `sim
    /// serve`'s or `sim load`'s, or one of tables and figures (`sim sweep`, `sim family`,
    /// `sim tune`).
    pub(super) dir: PathBuf,
    /// The HTML file to write (one file: data, figures and script inline).
    #[arg(short = 'o', long = "out", value_name = "FILE.html")]
    pub(super) out: PathBuf,
    /// Leave the explanation out (it re-runs the scenario and its counterfactuals).
    #[arg(long)]
    pub(super) no_explain: bool,
    #[command(flatten)]
    pub(super) explain: ExplainFlags,
}

/// What kind of folder `dir` is, from its `summary.json` (`sim run`: no `kind`) or
/// `sweep.json`.
fn kind(dir: &Path) -> Result<(&'static str, Option<serde_json::Value>)> {
    let sp = dir.join("summary.json");
    if sp.exists() {
        let text = std::fs::read_to_string(&sp).with_context(|| format!("reading {}", sp.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", sp.display()))?;
        let k = match crate::live::load::side_by_side::kind_of(dir, &v).as_str() {
            "serve" => "served run",
            "load" => "loaded run",
            _ => "run",
        };
        return Ok((k, Some(v)));
    }
    Ok((
        if dir.join("sweep.json").exists() {
            "sweep"
        } else {
            "results"
        },
        None,
    ))
}

pub(super) fn cmd_report(a: ReportArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.dir.is_dir(), "{}: no such folder", a.dir.display());
    let (kind, summary) = kind(&a.dir)?;
    if kind == "run" {
        crate::atomic::verify(&a.dir)?;
    }
    let name = summary
        .as_ref()
        .and_then(|s| s["scenario"].as_str().map(str::to_string))
        .or_else(|| sweep_name(&a.dir))
        .unwrap_or_else(|| a.dir.display().to_string());
    let mut page = Page::new(&format!("{name}: {kind}"));
    let rerun = match (&summary, kind) {
        (Some(_), "run") if !a.no_explain => Some(super::explain::reproduce(&a.dir, "sim report")?),
        _ => None,
    };
    if let Some(s) = &summary {
        page.section(
            "summary",
            "Summary",
            summary_html(s, rerun.as_ref().map(|r| &r.res.summary)),
        );
        if let Some(h) = hints_html(&a.dir)? {
            page.section("hints", "Hints", h);
        }
    }
    if let Some(data) = SeriesData::read(&a.dir)? {
        page.series(
            &data,
            "Running and waiting requests per backend from timeseries.csv; shaded where some backend had a free slot while another queued.",
        );
    }
    let (tables, figures, files) = folder_files(&a.dir)?;
    if !tables.is_empty() {
        page.section("tables", "Tables", tables);
    }
    if !figures.is_empty() {
        page.section("figures", "Figures", figures);
    }
    if let Some(r) = &rerun {
        let how = a.explain.explain(r.scenario.sim.router.engine_stats_interval)?;
        let x = crate::run::explained(&r.res, &r.scenario, &r.workload, &r.src, &how)?;
        page.section("explanation", "Explanation", explanation_html(&x));
    }
    if !files.is_empty() {
        page.section("scenario", "Scenario", files);
    }
    anyhow::ensure!(
        summary.is_some() || page_has_content(&a.dir),
        "{}: not a results folder (no summary.json, sweep.json, tables or figures)",
        a.dir.display()
    );
    crate::atomic::write_file(&a.out, page.render().as_bytes())
        .with_context(|| format!("writing {}", a.out.display()))?;
    outln!("wrote {}", a.out.display())?;
    Ok(ExitCode::SUCCESS)
}

fn sweep_name(dir: &Path) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).ok()?).ok()?;
    v["meta"]["scenario"].as_str().map(str::to_string)
}

fn page_has_content(dir: &Path) -> bool {
    folder_files(dir).is_ok_and(|(t, f, s)| !(t.is_empty() && f.is_empty() && s.is_empty()))
}

/// The terminal summary of the re-run when there is one, else the summary's figures as a
/// table (a served or loaded run), and the per-backend table either way.
fn summary_html(s: &serde_json::Value, rerun: Option<&crate::metrics::Summary>) -> String {
    if let Some(sum) = rerun {
        return html::pre(&crate::report::render(sum, None));
    }
    let mut md = String::from("| figure | value |\n|---|---:|\n");
    let Some(obj) = s.as_object() else {
        return String::new();
    };
    for (k, v) in obj {
        match v {
            serde_json::Value::Object(inner) => {
                // Counts by kind (decisions by branch) list only the kinds that occurred.
                for (k2, v2) in inner.iter().filter(|(_, v)| v.is_number() && v.as_f64() != Some(0.0)) {
                    md.push_str(&format!("| {k}.{k2} | {v2} |\n"));
                }
            }
            serde_json::Value::Array(_) => {}
            v => md.push_str(&format!(
                "| {k} | {} |\n",
                v.as_str().map_or(v.to_string(), str::to_string)
            )),
        }
    }
    html::markdown(&md.replace('`', "'"))
}

/// `hints.json`'s messages as a list.
fn hints_html(dir: &Path) -> Result<Option<String>> {
    let p = dir.join("hints.json");
    let Ok(text) = std::fs::read_to_string(&p) else {
        return Ok(None);
    };
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
    let items: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| {
            let m = h["message"].as_str()?;
            Some(format!(
                "<li><strong>{}</strong>: {}</li>",
                html::escape(h["kind"].as_str().unwrap_or("hint")),
                html::escape(m)
            ))
        })
        .collect();
    Ok((!items.is_empty()).then(|| format!("<ul>{}</ul>\n", items.join("\n"))))
}

/// The folder's Markdown tables, figures (each once: SVG where both exist) and scenario
/// or sweep description, in name order.
fn folder_files(dir: &Path) -> Result<(String, String, String)> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    let (mut tables, mut figures, mut files) = (String::new(), String::new(), String::new());
    for p in &names {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let read = || std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        match p.extension().and_then(|e| e.to_str()) {
            // explain.md is shown as the explanation when the run is re-run.
            Some("md") if name != "explain.md" || !dir.join("scenario.toml").exists() => {
                tables.push_str(&html::markdown(&String::from_utf8_lossy(&read()?)));
            }
            Some("svg") => figures.push_str(&html::figure(&name, &read()?)),
            Some("png") if !p.with_extension("svg").exists() => figures.push_str(&html::figure(&name, &read()?)),
            Some("toml") => {
                files.push_str(&format!("<p><code>{}</code></p>", html::escape(&name)));
                files.push_str(&html::pre(&String::from_utf8_lossy(&read()?)));
            }
            _ if name == "sweep.json" => {
                let v: serde_json::Value =
                    serde_json::from_slice(&read()?).with_context(|| format!("{}: not JSON", p.display()))?;
                files.push_str("<p>The sweep (<code>sweep.json</code>'s <code>meta</code>):</p>");
                files.push_str(&html::pre(&serde_json::to_string_pretty(&v["meta"])?));
            }
            _ => {}
        }
    }
    Ok((tables, figures, files))
}

/// The worst episode first (most stranded slot-seconds, with a button that zooms the time
/// series to it), then the whole explanation.
fn explanation_html(x: &crate::explain::Explanation) -> String {
    let mut o = String::new();
    let worst = x
        .episodes
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.stranded_slot_s.total_cmp(&b.1.stranded_slot_s));
    if let Some((k, e)) = worst {
        o.push_str(&format!(
            "<div class=\"callout\"><strong>Worst episode</strong> (episode {}): {:.1} s to {:.1} s, {:.1} slot-seconds stranded, up to {} at once. \
             <button data-zoom=\"{},{}\">Zoom the time series to it</button></div>\n",
            k + 1,
            e.from_s,
            e.until_s,
            e.stranded_slot_s,
            e.peak_stranded,
            e.from_s,
            e.until_s
        ));
    }
    o.push_str(&html::markdown(&crate::explain::render(x)));
    o
}
