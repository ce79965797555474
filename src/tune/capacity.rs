//! `sim tune --sizes ... [--profiles ...]`: the cheapest fleet and router that meet the
//! scenario's `[slo]` at its traffic. Every fleet (size x GPU profile, the profile naming
//! GPU and TP) runs with every router candidate on the same seeds; a (fleet, router) pair
//! meets the SLO when the requests that met their targets, pooled over the seeds, are at
//! least `[slo] attainment` of those received. Among those that meet it, the cheapest
//! fleet by price per hour wins (ties: the higher attainment, then the earlier router).
//! The scenario's own router is the baseline: the GPUs it needs beyond the winner's are
//! what its routing costs.
//!
//! Owns: the fleet axis and the choice. The runs go through the sweep machinery (parallel,
//! byte-identical for any `--jobs`).

use std::path::Path;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use serde::Serialize;

use super::space::Candidate;
use crate::scenario::{Scenario, Source};
use crate::sweep::exec::{ExecOptions, Points, execute};
use crate::sweep::spec::{Axis, Level, Plan, PlotFile};

/// The fleet axes of `sim tune` (any of them turns the search into a capacity search).
// The field docs are `--help` text (plain, with <placeholders>), not Markdown.
#[allow(rustdoc::invalid_html_tags, rustdoc::broken_intra_doc_links)]
#[derive(Args, Debug, Default)]
pub struct CapacityArgs {
    /// Fleet sizes (backends.count) to search, e.g. 2,3,4,5: with this flag `sim tune`
    /// finds the cheapest fleet and router that meet the scenario's [slo].
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub sizes: Vec<u32>,
    /// GPU profiles (backends.profile: model/gpu/tpN, see `sim profiles`) to search beside
    /// the sizes, e.g. llama-3.1-8b/h100/tp1,llama-3.1-8b/a100/tp1.
    #[arg(long, value_delimiter = ',', value_name = "PROFILE,...")]
    pub profiles: Vec<String>,
    /// Seeds per fleet and router in a capacity search.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub capacity_seeds: u64,
}

impl CapacityArgs {
    /// Whether a fleet axis was given.
    pub fn active(&self) -> bool {
        !self.sizes.is_empty() || !self.profiles.is_empty()
    }
}

/// The metrics each run keeps.
const METRICS: [&str; 8] = [
    "slo_requests_met",
    "requests.arrived",
    "slo_attainment",
    "fleet_usd_per_hour",
    "gpus",
    "cost_per_1k_requests_usd",
    "ttft_p99_s",
    "idle_while_queued_s",
];

/// One fleet of the search.
#[derive(Clone, Debug, Serialize)]
pub struct Fleet {
    /// `4 x llama-3.1-8b/h100/tp1`.
    pub label: String,
    /// Its overrides.
    #[serde(skip)]
    pub sets: Vec<(String, String)>,
}

/// The fleets: sizes x profiles (the scenario's own where either list is empty).
pub fn fleets(a: &CapacityArgs, base: &Scenario) -> Result<Vec<Fleet>> {
    if a.sizes.contains(&0) {
        bail!("--sizes: a fleet needs at least 1 backend");
    }
    let sizes: Vec<Option<u32>> = if a.sizes.is_empty() {
        vec![None]
    } else {
        a.sizes.iter().map(|&n| Some(n)).collect()
    };
    let profiles: Vec<Option<&str>> = if a.profiles.is_empty() {
        vec![None]
    } else {
        a.profiles.iter().map(|p| Some(p.as_str())).collect()
    };
    let own_n = base.sim.backends.len();
    let own_p = base.sim.labels.first().map(|l| l.profile.clone()).unwrap_or_default();
    let mut out = Vec::new();
    for p in &profiles {
        for n in &sizes {
            let mut sets = Vec::new();
            if let Some(n) = n {
                sets.push(("backends.count".to_string(), n.to_string()));
            }
            if let Some(p) = p {
                sets.push((
                    "backends.profile".to_string(),
                    toml::Value::String(p.to_string()).to_string(),
                ));
            }
            let prof = p.map_or(own_p.as_str(), |p| p);
            let size = n.map_or(own_n, |n| n as usize);
            let label = if prof.is_empty() {
                format!("{size} backends")
            } else {
                format!("{size} x {prof}")
            };
            out.push(Fleet { label, sets });
        }
    }
    Ok(out)
}

/// One (fleet, router) pair over its seeds.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// The fleet.
    pub fleet: String,
    /// The router candidate.
    pub router: String,
    /// GPUs.
    pub gpus: u64,
    /// The fleet's price per hour, dollars.
    pub fleet_usd_per_hour: f64,
    /// Requests that met their targets over requests received, pooled over the seeds.
    pub attainment: f64,
    /// The lowest attainment of a seed.
    pub worst_seed_attainment: f64,
    /// Whether the pooled attainment reaches the target.
    pub meets: bool,
    /// Mean over seeds: dollars per 1,000 requests.
    pub cost_per_1k_requests_usd: f64,
    /// Mean over seeds: TTFT p99, seconds.
    pub ttft_p99_s: f64,
    /// Mean over seeds: seconds idle while queued.
    pub idle_while_queued_s: f64,
}

/// The answer.
#[derive(Clone, Debug, Serialize)]
pub struct Answer {
    /// The scenario.
    pub scenario: String,
    /// The attainment a fleet must reach.
    pub target_attainment: f64,
    /// Seeds per cell.
    pub seeds: Vec<u64>,
    /// Every cell, fleets in order, routers within.
    pub cells: Vec<Cell>,
    /// Index in `cells` of the cheapest that meets the SLO.
    pub winner: Option<usize>,
    /// Per router, the index of its cheapest cell that meets the SLO.
    pub cheapest_per_router: Vec<(String, Option<usize>)>,
}

/// Runs the capacity search and prints and writes its answer.
#[allow(clippy::too_many_arguments)]
pub fn run(
    a: &CapacityArgs,
    src: &Source,
    base: &Scenario,
    sets: &[(String, String)],
    cands: &[Candidate],
    jobs: usize,
    dir: &Path,
    quiet: bool,
) -> Result<()> {
    let Some(slo) = base.sim.slo.as_ref() else {
        bail!(
            "--sizes/--profiles: the scenario has no [slo]; give the targets the fleet must meet (e.g. --set slo.ttft_s=2)"
        );
    };
    if base.sim.autoscaler.is_some() {
        bail!(
            "--sizes/--profiles: the scenario has an [autoscaler], which sizes the fleet itself; search fixed fleets without it"
        );
    }
    let fleets = fleets(a, base)?;
    let seeds: Vec<u64> = (0..a.capacity_seeds).map(|i| src.first_seed() + i).collect();
    let plan = plan(&fleets, cands, &seeds);
    let mut fp = crate::sweep::Fingerprints::new();
    let inputs = fp.of(src, Some(&plan));
    let meta = crate::sweep::meta(&base.sim.name, sets, plan, inputs);
    let (f, wall) = execute(
        src,
        &meta,
        &Points::new(&meta.plan, fp.traces.clone()),
        ExecOptions {
            jobs,
            shard: None,
            progress: !quiet,
            progress_every: std::time::Duration::from_secs(5),
            done: Vec::new(),
            on_partial: None,
        },
    )
    .map_err(|e| anyhow!("{}: {}", src.file, e.message))?;
    let cells = cells(&fleets, cands, &f.rows, slo.attainment)?;
    let answer = choose(&base.sim.name, slo.attainment, seeds, cells, cands);
    let text = render(&answer);
    std::fs::create_dir_all(dir).map_err(|e| anyhow!("creating {}: {e}", dir.display()))?;
    crate::atomic::write_file(&dir.join("capacity.md"), text.as_bytes())?;
    let mut js = serde_json::to_vec_pretty(&answer)?;
    js.push(b'\n');
    crate::atomic::write_file(&dir.join("capacity.json"), &js)?;
    if !quiet {
        fleetsim_io::out!("{text}")?;
        fleetsim_io::outln!("\nwrote {}/{{capacity.md,capacity.json}}", dir.display())?;
        eprintln!("{} runs in {:.2} s on {jobs} threads", f.rows.len(), wall.as_secs_f64());
    }
    Ok(())
}

/// Two axes, fleet then router, on the same seeds.
fn plan(fleets: &[Fleet], cands: &[Candidate], seeds: &[u64]) -> Plan {
    let paths = |sets: &mut dyn Iterator<Item = &(String, String)>| {
        let mut p: Vec<String> = sets.map(|(k, _)| k.clone()).collect();
        p.sort();
        p.dedup();
        p
    };
    let fleet_axis = Axis {
        name: "fleet".into(),
        paths: paths(&mut fleets.iter().flat_map(|f| &f.sets)),
        levels: fleets
            .iter()
            .map(|f| Level {
                label: f.label.clone(),
                sets: f.sets.clone(),
            })
            .collect(),
    };
    let router_axis = Axis {
        name: "candidate".into(),
        paths: paths(&mut cands.iter().flat_map(|c| &c.sets)),
        levels: cands
            .iter()
            .map(|c| Level {
                label: c.label.clone(),
                sets: c.sets.clone(),
            })
            .collect(),
    };
    Plan {
        axes: vec![fleet_axis, router_axis],
        seeds: seeds.to_vec(),
        metrics: METRICS.iter().map(|m| m.to_string()).collect(),
        counts: Vec::new(),
        plot: PlotFile::default(),
    }
}

/// Each (fleet, router) cell from the runs (points are fleet-major).
fn cells(
    fleets: &[Fleet],
    cands: &[Candidate],
    rows: &[crate::sweep::table::RunRow],
    target: f64,
) -> Result<Vec<Cell>> {
    let get = |m: &serde_json::Map<String, serde_json::Value>, k: &str| -> Result<f64> {
        m.get(k)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| anyhow!("a run reported no {k}"))
    };
    let mut out = Vec::new();
    for (fi, fl) in fleets.iter().enumerate() {
        for (ci, c) in cands.iter().enumerate() {
            let point = (fi * cands.len() + ci) as u64;
            let runs: Vec<_> = rows.iter().filter(|r| r.point == point).map(|r| &r.metrics).collect();
            let n = runs.len().max(1) as f64;
            let (mut met, mut arrived, mut worst) = (0.0, 0.0, f64::INFINITY);
            let (mut usd, mut gpus, mut k, mut ttft, mut iwq) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for m in &runs {
                met += get(m, "slo_requests_met")?;
                arrived += get(m, "requests.arrived")?;
                worst = worst.min(get(m, "slo_attainment")?);
                usd = get(m, "fleet_usd_per_hour")?;
                gpus = get(m, "gpus")?;
                k += get(m, "cost_per_1k_requests_usd")? / n;
                ttft += get(m, "ttft_p99_s")? / n;
                iwq += get(m, "idle_while_queued_s")? / n;
            }
            let attainment = if arrived > 0.0 { met / arrived } else { 0.0 };
            out.push(Cell {
                fleet: fl.label.clone(),
                router: c.label.clone(),
                gpus: gpus as u64,
                fleet_usd_per_hour: usd,
                attainment: fleetsim_core::metrics::round6(attainment),
                worst_seed_attainment: if worst.is_finite() { worst } else { 0.0 },
                meets: arrived > 0.0 && met >= target * arrived,
                cost_per_1k_requests_usd: fleetsim_core::metrics::round6(k),
                ttft_p99_s: fleetsim_core::metrics::round6(ttft),
                idle_while_queued_s: fleetsim_core::metrics::round6(iwq),
            });
        }
    }
    Ok(out)
}

/// The cheapest cell that meets the SLO, overall and per router.
fn choose(scenario: &str, target: f64, seeds: Vec<u64>, cells: Vec<Cell>, cands: &[Candidate]) -> Answer {
    let better = |a: &Cell, b: &Cell| {
        a.fleet_usd_per_hour
            .total_cmp(&b.fleet_usd_per_hour)
            .then(b.attainment.total_cmp(&a.attainment))
    };
    let cheapest = |pred: &dyn Fn(&Cell) -> bool| {
        cells
            .iter()
            .enumerate()
            .filter(|(_, c)| c.meets && pred(c))
            .min_by(|(i, a), (j, b)| better(a, b).then(i.cmp(j)))
            .map(|(i, _)| i)
    };
    let per_router = cands
        .iter()
        .map(|c| (c.label.clone(), cheapest(&|x: &Cell| x.router == c.label)))
        .collect();
    Answer {
        scenario: scenario.to_string(),
        target_attainment: target,
        seeds,
        winner: cheapest(&|_| true),
        cheapest_per_router: per_router,
        cells,
    }
}

/// The answer as Markdown: the verdict, what the scenario's own router costs, the table.
pub fn render(a: &Answer) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Capacity: {}\n\nThe cheapest fleet and router meeting the SLO ({:.1}% of requests within their targets, pooled over {} seeds).\n",
        crate::quote::escape(&a.scenario),
        a.target_attainment * 100.0,
        a.seeds.len()
    );
    match a.winner {
        Some(w) => {
            let c = &a.cells[w];
            let _ = writeln!(
                o,
                "Cheapest: {} behind `{}`: {} GPUs, ${:.2}/h, attainment {:.2}% (worst seed {:.2}%), ${:.4} per 1,000 requests.",
                c.fleet,
                c.router,
                c.gpus,
                c.fleet_usd_per_hour,
                c.attainment * 100.0,
                c.worst_seed_attainment * 100.0,
                c.cost_per_1k_requests_usd
            );
        }
        None => {
            let _ = writeln!(
                o,
                "No fleet searched meets the SLO behind any router: search larger fleets."
            );
        }
    }
    let _ = writeln!(o, "{}", routing_cost(a));
    let _ = writeln!(
        o,
        "| fleet | router | GPUs | $/h | attainment | worst seed | meets | $/1k req | TTFT p99 s | idle while queued s |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for c in &a.cells {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.2} | {:.2}% | {:.2}% | {} | {:.4} | {:.3} | {:.1} |",
            c.fleet,
            c.router.replace('|', "\\|"),
            c.gpus,
            c.fleet_usd_per_hour,
            c.attainment * 100.0,
            c.worst_seed_attainment * 100.0,
            if c.meets { "yes" } else { "no" },
            c.cost_per_1k_requests_usd,
            c.ttft_p99_s,
            c.idle_while_queued_s
        );
    }
    o
}

/// What the scenario's own router (the first candidate) costs against the winner.
fn routing_cost(a: &Answer) -> String {
    let Some((own, own_best)) = a.cheapest_per_router.first() else {
        return String::new();
    };
    let Some(w) = a.winner else {
        return String::new();
    };
    let win = &a.cells[w];
    match own_best {
        Some(i) if *i == w => format!("The scenario's own router (`{own}`) is the winner's router.\n"),
        Some(i) => {
            let c = &a.cells[*i];
            format!(
                "The scenario's own router (`{own}`) needs {} ({} GPUs, ${:.2}/h) to meet it: {} GPU(s) and ${:.2}/h more than {} behind `{}`.\n",
                c.fleet,
                c.gpus,
                c.fleet_usd_per_hour,
                c.gpus as i64 - win.gpus as i64,
                c.fleet_usd_per_hour - win.fleet_usd_per_hour,
                win.fleet,
                win.router
            )
        }
        None => format!(
            "The scenario's own router (`{own}`) meets it with no fleet searched; `{}` does with {} ({} GPUs).\n",
            win.router, win.fleet, win.gpus
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(fleet: &str, router: &str, gpus: u64, usd: f64, att: f64, meets: bool) -> Cell {
        Cell {
            fleet: fleet.into(),
            router: router.into(),
            gpus,
            fleet_usd_per_hour: usd,
            attainment: att,
            worst_seed_attainment: att,
            meets,
            cost_per_1k_requests_usd: 0.0,
            ttft_p99_s: 0.0,
            idle_while_queued_s: 0.0,
        }
    }

    fn cand(label: &str) -> Candidate {
        Candidate {
            label: label.into(),
            sets: Vec::new(),
            policy: Default::default(),
            router: Default::default(),
        }
    }

    #[test]
    fn the_cheapest_fleet_that_meets_wins_and_the_own_router_is_priced() {
        let cells = vec![
            cell("2", "qps", 2, 7.56, 0.5, false),
            cell("2", "fix", 2, 7.56, 0.995, true),
            cell("3", "qps", 3, 11.34, 0.95, false),
            cell("3", "fix", 3, 11.34, 1.0, true),
            cell("4", "qps", 4, 15.12, 0.999, true),
            cell("4", "fix", 4, 15.12, 1.0, true),
        ];
        let a = choose("s", 0.99, vec![1, 2], cells, &[cand("qps"), cand("fix")]);
        assert_eq!(a.winner, Some(1));
        assert_eq!(
            a.cheapest_per_router,
            vec![("qps".into(), Some(4)), ("fix".into(), Some(1))]
        );
        let text = render(&a);
        assert!(
            text.contains("needs 4 (4 GPUs, $15.12/h) to meet it: 2 GPU(s) and $7.56/h more than 2 behind `fix`"),
            "{text}"
        );
        let none = choose(
            "s",
            0.99,
            vec![1],
            vec![cell("2", "qps", 2, 7.56, 0.5, false)],
            &[cand("qps")],
        );
        assert_eq!(none.winner, None);
        assert!(render(&none).contains("No fleet searched meets"));
    }
}
