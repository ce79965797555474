//! `conform.json` (every pair with its served and model figures and verdict) and
//! `conform.md` (the matrix as a table), written whole into the output folder.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::Pair;
use super::verdict::{RULE, Spread};

/// The whole conformance run.
#[derive(Debug, Serialize)]
pub struct Conform<'a> {
    /// `"conform"`.
    pub kind: &'static str,
    /// Scenario name.
    pub scenario: String,
    /// Scenario file as given.
    pub file: String,
    /// Simulated seconds per wall second of the served runs.
    pub speed: f64,
    /// Model seeds.
    pub seeds: u64,
    /// The agreement rule.
    pub rule: &'static str,
    /// Every pair, in table order.
    pub pairs: &'a [Pair],
}

/// Writes `conform.json` and `conform.md` into `dir` (a staging folder).
pub fn write(dir: &Path, c: &Conform) -> Result<()> {
    crate::export::write_json(&dir.join("conform.json"), c)?;
    crate::atomic::write_file(&dir.join("conform.md"), markdown(c).as_bytes())?;
    Ok(())
}

fn spread(s: &Spread, digits: usize) -> String {
    format!("{:.d$} ({:.d$}–{:.d$})", s.mean, s.min, s.max, d = digits)
}

fn split_text(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(" / ")
}

/// The matrix: one row per pair.
pub fn table(pairs: &[Pair]) -> String {
    let mut s = String::from(
        "| router | policy | model | idle_while_queued_s served | model mean (min–max) | split served (shares) | model mean shares | hit rate served / model | TTFT p99 s served / model | verdict |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for p in pairs {
        let model = p
            .model_sets
            .first()
            .map_or_else(|| "(none)".to_string(), |(_, v)| format!("`{v}`"));
        let (iwq, split, hit, ttft) = match &p.served {
            Some(f) => (
                format!("{:.1}", f.idle_while_queued_s),
                format!(
                    "{} ({} %)",
                    split_text(&f.split()),
                    f.split_shares()
                        .iter()
                        .map(|x| format!("{:.1}", 100.0 * x))
                        .collect::<Vec<_>>()
                        .join(" / ")
                ),
                format!("{:.3}", f.prefix_cache_hit_rate),
                format!("{:.2}", f.ttft_p99_s),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let (m_iwq, m_split, m_hit, m_ttft) = match &p.model {
            Some(m) => (
                spread(&m.idle_while_queued_s, 1),
                m.split
                    .iter()
                    .map(|x| format!("{:.1}", 100.0 * x.mean))
                    .collect::<Vec<_>>()
                    .join(" / ")
                    + " %",
                format!("{:.3}", m.prefix_cache_hit_rate.mean),
                format!("{:.2}", m.ttft_p99_s.mean),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let verdict = match (&p.verdict, &p.error) {
            (Some(v), _) if v.agrees => "agrees".to_string(),
            (Some(v), _) => format!(
                "disagrees ({})",
                match (v.idle_while_queued, v.split) {
                    (false, false) => "idle while queued, split",
                    (false, true) => "idle while queued",
                    _ => "split",
                }
            ),
            (None, Some(e)) => format!("failed: {}", e.replace('|', "\\|")),
            (None, None) => p.status.to_string(),
        };
        let _ = writeln!(
            s,
            "| {} {} | `{}` | {model} | {iwq} | {m_iwq} | {split} | {m_split} | {hit} / {m_hit} | {ttft} / {m_ttft} | {verdict} |",
            p.router, p.version, p.policy
        );
    }
    s
}

fn markdown(c: &Conform) -> String {
    let mut s = format!(
        "# sim conform: {}\n\nEach real router between `sim serve` and `sim load` at speed {} (the scenario's seed), \
         beside the catalogue model that claims its policy over {} seeds.\n\nRule: {RULE}.\n\n",
        c.scenario, c.speed, c.seeds
    );
    s.push_str(&table(c.pairs));
    let notes: Vec<&Pair> = c.pairs.iter().filter(|p| p.client_unfinished > 0).collect();
    if !notes.is_empty() {
        s.push('\n');
        for p in notes {
            let _ = writeln!(
                s,
                "- {} `{}`: {} requests did not finish at the client.",
                p.router, p.policy, p.client_unfinished
            );
        }
    }
    s
}
