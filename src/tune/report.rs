//! What `sim tune` reports: a pure function of the candidates and the finished search.
//! The ranked table (means and 95% intervals), why the winner wins (paired differences
//! against the runner-up and against the scenario's own configuration, on common seeds),
//! the Pareto front, the winner as TOML and as router flags, and the files they go to.

use std::fmt::Write as _;

use anyhow::Result;
use serde::Serialize;

use super::flags::{Flags, production_stack};
use super::halving::{NEGLIGIBLE_CI, Paired, Search, Settings, Stop, paired};
use super::objective::{maximize, pareto_front};
use super::space::{Candidate, Dropped, OWN};
use super::upstream::{Upstream, of_candidate, settings_changed};
use crate::scenario::Source;
use crate::sweep::table::{Stat, fmt_mean_ci, fmt_stat};

/// Mean and 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MeanCi {
    /// Mean.
    pub mean: f64,
    /// Half-width (NaN below 2 seeds).
    pub ci95: f64,
}

impl MeanCi {
    fn of(xs: &[f64]) -> MeanCi {
        let s = Stat::of(xs);
        MeanCi {
            mean: s.mean,
            ci95: s.ci95,
        }
    }

    fn text(&self) -> String {
        fmt_mean_ci(self.mean, self.ci95)
    }
}

/// How the winner is chosen among the candidates the seeds cannot separate (`--tie-break`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TieBreak {
    /// A configuration an upstream router ships today first, then the best score.
    Upstream,
    /// The best mean score (the statistical leader).
    Score,
    /// The highest prefix-cache hit rate.
    PrefixHit,
    /// The fewest settings changed from the policy's upstream defaults.
    Simple,
}

impl TieBreak {
    fn describe(self) -> &'static str {
        match self {
            TieBreak::Upstream => "upstream-ready first, then score",
            TieBreak::Score => "best score",
            TieBreak::PrefixHit => "highest prefix-cache hit rate",
            TieBreak::Simple => "fewest settings changed",
        }
    }
}

/// A p-value to two significant digits (`p < 0.001` below that).
pub fn fmt_p(p: f64) -> String {
    if p.is_nan() {
        return "p = n/a".into();
    }
    if p < 0.001 {
        return "p < 0.001".into();
    }
    let d = (1 - p.log10().floor() as i32).clamp(1, 3) as usize;
    format!("p = {p:.d$}")
}

/// One ranked candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// 1-based.
    pub rank: usize,
    /// Candidate label.
    pub candidate: String,
    /// Seeds it ran.
    pub seeds: usize,
    /// Last round it reached on merit (1-based).
    pub round: usize,
    /// Meets every constraint.
    pub feasible: bool,
    /// Objective score (lower is better; the scenario's own is about the sum of weights).
    pub score: MeanCi,
    /// The shown metrics, in [`Report::metrics`] order.
    pub metrics: Vec<MeanCi>,
    /// It ran the last round's seeds and they cannot separate it from the leader (paired,
    /// at `--confidence`).
    pub tie: bool,
    /// The upstream router that ships this configuration, and how; `None`: needs a patch.
    pub upstream: Option<Upstream>,
}

/// The best configuration upstream ships, named beside a winner that needs a patch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UpstreamAlternative {
    /// Its rank in the table.
    pub rank: usize,
    /// Candidate label.
    pub candidate: String,
    /// Seeds it ran.
    pub seeds: usize,
    /// Its score over those seeds.
    pub score: MeanCi,
    /// The router that ships it, and how.
    pub upstream: Upstream,
}

/// One metric of a paired comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diff {
    /// Metric.
    pub metric: String,
    /// Winner's mean on the common seeds.
    pub winner: f64,
    /// The other's mean on the common seeds.
    pub other: f64,
    /// Paired difference winner - other.
    pub diff: Paired,
    /// The 95% interval of the difference excludes 0.
    pub significant: bool,
    /// The difference favours the winner.
    pub favours_winner: bool,
}

/// The winner against another candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The other candidate.
    pub other: String,
    /// Common seeds.
    pub seeds: u64,
    /// Configuration differences: `key: other -> winner`.
    pub config: Vec<String>,
    /// Objective score, paired: other - winner (the winner's lead; p small = a real lead).
    pub score: Paired,
    /// The confidence every verdict of this comparison is taken at (`--confidence`).
    pub confidence: f64,
    /// Every shown metric.
    pub metrics: Vec<Diff>,
}

/// The Pareto front on each candidate's means over the seeds it ran (the ranked table's).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pareto {
    /// Its metrics.
    pub metrics: Vec<String>,
    /// The screening seeds, which every candidate ran (finalists ran more).
    pub seeds: Vec<u64>,
    /// `(candidate, means)` for every candidate, in candidate order.
    pub points: Vec<(String, Vec<f64>)>,
    /// Indices into `points` of the non-dominated candidates.
    pub front: Vec<usize>,
    /// Per point: the seeds it ran and each metric's 95 % CI half-width (NaN below 2
    /// seeds), so a plot can show how sure each mean is.
    pub spread: Vec<(usize, Vec<f64>)>,
}

/// One round, summarized.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoundSummary {
    /// Candidates that ran.
    pub candidates: usize,
    /// New seeds each ran.
    pub seeds: Vec<u64>,
    /// Leader after the round.
    pub leader: String,
    /// Leader against runner-up on every seed so far.
    pub leader_vs_runner_up: Option<Paired>,
}

/// Everything `sim tune` reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// The objective as used (with its scales).
    pub objective: String,
    /// Constraints.
    pub constraints: Vec<String>,
    /// Search settings.
    pub settings: Settings,
    /// Candidates searched (the scenario's own first).
    pub candidates: usize,
    /// Candidates left out, with why.
    pub dropped: Vec<(String, String)>,
    /// Runs used.
    pub runs: u64,
    /// Why the search ended.
    pub stop: Option<Stop>,
    /// Rounds.
    pub rounds: Vec<RoundSummary>,
    /// The metrics of the table.
    pub metrics: Vec<String>,
    /// Ranked candidates, by mean score (constraint-breakers last).
    pub ranked: Vec<Row>,
    /// The statistical leader: the best mean score among the candidates that ran the most
    /// seeds (the last round's).
    pub leader: String,
    /// The candidates of the last round the seeds cannot separate from the leader, leader
    /// first. A candidate cut earlier is never in it: its few seeds leave its interval wide
    /// enough to overlap the leader's without saying it is as good.
    pub tie: Vec<String>,
    /// How the winner was chosen among them.
    pub tie_break: TieBreak,
    /// The recommendation.
    pub winner: String,
    /// The upstream router that ships the winner, and how.
    pub winner_upstream: Option<Upstream>,
    /// When the winner needs a patch: the best-ranked feasible candidate an upstream router
    /// ships, wherever the search cut it.
    pub best_upstream: Option<UpstreamAlternative>,
    /// Against the runner-up.
    pub vs_runner_up: Option<Comparison>,
    /// Against the scenario's own configuration (absent when it wins).
    pub vs_scenario: Option<Comparison>,
    /// The Pareto front.
    pub pareto: Pareto,
    /// The winner as scenario TOML.
    pub snippet: String,
    /// The winner as production-stack flags, when it is a production-stack router.
    pub flags: Option<Flags>,
}

/// The `[router]` table of the scenario with `c` applied (policy included).
fn effective_router(src: &Source, c: &Candidate) -> toml::Table {
    let mut s = src.clone();
    if s.apply(&c.sets, "tune").is_err() {
        return toml::Table::new();
    }
    s.table
        .get("router")
        .and_then(toml::Value::as_table)
        .cloned()
        .unwrap_or_default()
}

fn show(v: Option<&toml::Value>) -> String {
    match v {
        None => "default".into(),
        Some(toml::Value::String(s)) => s.clone(),
        Some(x) => x.to_string(),
    }
}

/// `key: other -> winner` for every router key or policy parameter that differs.
fn config_diff(src: &Source, winner: &Candidate, other: &Candidate) -> Vec<String> {
    let (w, o) = (effective_router(src, winner), effective_router(src, other));
    let mut out = Vec::new();
    let empty = toml::Table::new();
    let wp = w.get("policy").and_then(toml::Value::as_table).unwrap_or(&empty);
    let op = o.get("policy").and_then(toml::Value::as_table).unwrap_or(&empty);
    let mut keys: Vec<&String> = wp.keys().chain(op.keys()).collect();
    keys.sort_by_key(|k| (*k != "kind", k.to_string()));
    keys.dedup();
    for k in keys {
        if wp.get(k) != op.get(k) {
            out.push(format!("router.policy.{k}: {} -> {}", show(op.get(k)), show(wp.get(k))));
        }
    }
    let mut keys: Vec<&String> = w.keys().chain(o.keys()).filter(|k| *k != "policy").collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        if w.get(k) != o.get(k) {
            out.push(format!("router.{k}: {} -> {}", show(o.get(k)), show(w.get(k))));
        }
    }
    out
}

fn compare(search: &Search, cands: &[Candidate], src: &Source, metrics: &[String], w: usize, o: usize) -> Comparison {
    let n = search.runs[w].len().min(search.runs[o].len());
    let cut = |v: Vec<f64>| v[..n].to_vec();
    let confidence = search.settings.confidence;
    let diffs = metrics
        .iter()
        .map(|m| {
            let (a, b) = (cut(search.values(w, m)), cut(search.values(o, m)));
            // d = a - b: winner - other.
            let d = paired(&b, &a);
            let significant = d.shows(confidence);
            Diff {
                metric: m.clone(),
                winner: Stat::of(&a).mean,
                other: Stat::of(&b).mean,
                diff: d,
                significant,
                favours_winner: if maximize(m) { d.mean > 0.0 } else { d.mean < 0.0 },
            }
        })
        .collect();
    // other - winner: the winner's lead, with the p-value of "it has none".
    let s = paired(&cut(search.scores(w)), &cut(search.scores(o)));
    Comparison {
        other: cands[o].label.clone(),
        seeds: n as u64,
        config: config_diff(src, &cands[w], &cands[o]),
        score: s,
        confidence,
        metrics: diffs,
    }
}

/// The winner as a ready-to-paste scenario fragment.
pub fn snippet(scenario: &str, objective: &str, c: &Candidate) -> String {
    let mut router = c.router.clone();
    router.insert("policy".into(), toml::Value::Table(c.policy.clone()));
    let mut top = toml::Table::new();
    top.insert("router".into(), toml::Value::Table(router));
    let body = toml::to_string(&top).unwrap_or_default();
    let what = if c.label == OWN {
        "the scenario's own configuration is the best found"
    } else {
        "parameters not written keep their upstream defaults"
    };
    format!("# sim tune {scenario}: recommended for {objective}\n# ({what})\n{body}")
}

/// Builds the report.
pub fn build(
    src: &Source,
    scenario: &str,
    cands: &[Candidate],
    dropped: &[Dropped],
    search: &Search,
    pareto_metrics: &[String],
    tie_break: TieBreak,
) -> Report {
    let metrics = shown_metrics(search, pareto_metrics);
    let ran: Vec<usize> = (0..cands.len()).filter(|&c| !search.runs[c].is_empty()).collect();
    let order = search.rank(&ran);
    let ups: Vec<Option<Upstream>> = cands.iter().map(|c| of_candidate(src, c)).collect();
    let (leader, tie) = leader_and_tie(search, &ran, &order);
    let w = tie_winner(search, cands, &ups, leader, &tie, tie_break);
    let objective = search.objective.describe();
    Report {
        scenario: scenario.to_string(),
        objective: objective.clone(),
        constraints: search.constraints.iter().map(|c| c.to_string()).collect(),
        settings: search.settings.clone(),
        candidates: cands.len(),
        dropped: dropped.iter().map(|d| (d.label.clone(), d.reason.clone())).collect(),
        runs: search.used,
        stop: search.stop,
        rounds: search
            .rounds
            .iter()
            .map(|r| RoundSummary {
                candidates: r.candidates.len(),
                seeds: r.seeds.clone(),
                leader: cands[r.ranking[0]].label.clone(),
                leader_vs_runner_up: r.leader_vs_runner_up,
            })
            .collect(),
        ranked: ranked(search, cands, &ups, &order, &tie, &metrics),
        leader: cands[leader].label.clone(),
        tie: tie.iter().map(|&c| cands[c].label.clone()).collect(),
        tie_break,
        winner: cands[w].label.clone(),
        winner_upstream: ups[w].clone(),
        best_upstream: ups[w]
            .is_none()
            .then(|| best_upstream(search, cands, &ups, &order))
            .flatten(),
        // The runner-up: the best-ranked other candidate.
        vs_runner_up: order
            .iter()
            .copied()
            .find(|&c| c != w)
            .map(|r| compare(search, cands, src, &metrics, w, r)),
        vs_scenario: (w != 0).then(|| compare(search, cands, src, &metrics, w, 0)),
        pareto: pareto(search, cands, pareto_metrics),
        snippet: snippet(scenario, &objective, &cands[w]),
        flags: flags_of(src, &cands[w]),
        metrics,
    }
}

/// The metrics the report shows: the objective's, the Pareto front's, the constraints' and
/// the defaults, each once, in that order.
fn shown_metrics(search: &Search, pareto_metrics: &[String]) -> Vec<String> {
    let mut metrics: Vec<String> = Vec::new();
    let wanted = search
        .objective
        .terms
        .iter()
        .map(|t| t.metric.clone())
        .chain(pareto_metrics.iter().cloned())
        .chain(search.constraints.iter().map(|c| c.metric.clone()))
        .chain(crate::sweep::spec::DEFAULT_METRICS.iter().map(|s| s.to_string()));
    for m in wanted {
        if !metrics.contains(&m) {
            metrics.push(m);
        }
    }
    metrics
}

/// The leader (the best of the candidates with the most seeds: the last round's) and the
/// tie: it and every finalist it does not beat at `--confidence` on their common seeds
/// (one-sided paired test), on the same side of the constraints, in ranking order.
fn leader_and_tie(search: &Search, ran: &[usize], order: &[usize]) -> (usize, Vec<usize>) {
    let most = ran.iter().map(|&c| search.runs[c].len()).max().unwrap_or(0);
    let finalists: Vec<usize> = ran.iter().copied().filter(|&c| search.runs[c].len() == most).collect();
    let leader = search.rank(&finalists)[0];
    let lead_scores = search.scores(leader);
    let alpha = 1.0 - search.settings.confidence;
    let tied = |c: usize| {
        if c == leader {
            return true;
        }
        if search.runs[c].len() < most {
            return false;
        }
        let s = search.scores(c);
        let n = s.len().min(lead_scores.len());
        let d = paired(&lead_scores[..n], &s[..n]);
        search.feasible(c) == search.feasible(leader) && n >= 2 && (d.p >= alpha || d.mean.abs() < NEGLIGIBLE_CI)
    };
    let tie = std::iter::once(leader)
        .chain(order.iter().copied().filter(|&c| c != leader && tied(c)))
        .collect();
    (leader, tie)
}

/// The member of the tie that `tie_break` picks (the leader unless it prefers another).
fn tie_winner(
    search: &Search,
    cands: &[Candidate],
    ups: &[Option<Upstream>],
    leader: usize,
    tie: &[usize],
    tie_break: TieBreak,
) -> usize {
    let mean_of = |c: usize, m: &str| Stat::of(&search.values(c, m)).mean;
    let score_of = |c: usize| Stat::of(&search.scores(c)).mean;
    let mut pick = tie.to_vec();
    pick.sort_by(|&a, &b| {
        let base = (a != leader)
            .cmp(&(b != leader))
            .then(score_of(a).total_cmp(&score_of(b)));
        match tie_break {
            TieBreak::Score => base,
            TieBreak::Upstream => ups[a].is_none().cmp(&ups[b].is_none()).then(base),
            TieBreak::PrefixHit => mean_of(b, "prefix_cache_hit_rate")
                .total_cmp(&mean_of(a, "prefix_cache_hit_rate"))
                .then(base),
            TieBreak::Simple => settings_changed(&cands[a].policy, &cands[a].router)
                .cmp(&settings_changed(&cands[b].policy, &cands[b].router))
                .then(base),
        }
    });
    pick[0]
}

/// The best-ranked feasible configuration a released router ships.
fn best_upstream(
    search: &Search,
    cands: &[Candidate],
    ups: &[Option<Upstream>],
    order: &[usize],
) -> Option<UpstreamAlternative> {
    order
        .iter()
        .copied()
        .enumerate()
        .find(|&(_, c)| ups[c].is_some() && search.feasible(c))
        .map(|(i, c)| UpstreamAlternative {
            rank: i + 1,
            candidate: cands[c].label.clone(),
            seeds: search.runs[c].len(),
            score: MeanCi::of(&search.scores(c)),
            upstream: ups[c].clone().expect("filtered on upstream"),
        })
}

/// The ranked table's rows, in `order`.
fn ranked(
    search: &Search,
    cands: &[Candidate],
    ups: &[Option<Upstream>],
    order: &[usize],
    tie: &[usize],
    metrics: &[String],
) -> Vec<Row> {
    order
        .iter()
        .enumerate()
        .map(|(i, &c)| Row {
            rank: i + 1,
            candidate: cands[c].label.clone(),
            seeds: search.runs[c].len(),
            round: search.merit_round(c) + 1,
            feasible: search.feasible(c),
            score: MeanCi::of(&search.scores(c)),
            metrics: metrics.iter().map(|m| MeanCi::of(&search.values(c, m))).collect(),
            tie: tie.contains(&c),
            upstream: ups[c].clone(),
        })
        .collect()
}

/// The Pareto front over `metrics` of each candidate's means over all the seeds it ran: the
/// numbers of the ranked table, so the winner's point is the winner's row (not a screening
/// estimate of it).
fn pareto(search: &Search, cands: &[Candidate], metrics: &[String]) -> Pareto {
    let points: Vec<(String, Vec<f64>)> = cands
        .iter()
        .enumerate()
        .map(|(c, cand)| {
            let v = metrics.iter().map(|m| Stat::of(&search.values(c, m)).mean).collect();
            (cand.label.clone(), v)
        })
        .collect();
    let spread: Vec<(usize, Vec<f64>)> = (0..cands.len())
        .map(|c| {
            let ci = metrics.iter().map(|m| Stat::of(&search.values(c, m)).ci95).collect();
            (search.runs[c].len(), ci)
        })
        .collect();
    let dirs: Vec<bool> = metrics.iter().map(|m| maximize(m)).collect();
    let vals: Vec<Vec<f64>> = points.iter().map(|p| p.1.clone()).collect();
    Pareto {
        metrics: metrics.to_vec(),
        seeds: search.rounds.first().map(|r| r.seeds.clone()).unwrap_or_default(),
        front: pareto_front(&vals, &dirs),
        points,
        spread,
    }
}

/// production-stack's command line for candidate `c` of `src`, if it is one of its routers.
fn flags_of(src: &Source, c: &Candidate) -> Option<Flags> {
    let mut alt = src.clone();
    alt.apply(&c.sets, "tune")
        .ok()
        .and_then(|_| alt.scenario().ok())
        .and_then(|sc| production_stack(&sc.sim.router))
}

fn why(out: &mut String, c: &Comparison, against: &str) {
    // One test for every statement below: the paired one-sided test at --confidence.
    let pct = fmt_stat(c.confidence * 100.0);
    let lead = if c.score.shows(c.confidence) {
        if c.score.mean > 0.0 {
            format!("a lead at {pct}% confidence")
        } else {
            format!("behind at {pct}% confidence")
        }
    } else {
        format!("no lead at {pct}% confidence: a tie on these seeds")
    };
    let _ = writeln!(
        out,
        "\nAgainst {against} `{}` ({} common seeds; the winner's objective lead {} (95% CI), paired one-sided {}: {lead}):",
        c.other,
        c.seeds,
        fmt_mean_ci(c.score.mean, c.score.ci95),
        fmt_p(c.score.p_observed())
    );
    if c.config.is_empty() {
        let _ = writeln!(out, "- configuration: identical router settings");
    }
    for d in &c.config {
        let _ = writeln!(out, "- {d}");
    }
    let sig: Vec<&Diff> = c.metrics.iter().filter(|d| d.significant).collect();
    if sig.is_empty() {
        let tail = if c.score.shows(c.confidence) {
            " (the lead is in the objective's weighted sum, not in any one metric)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "- no shown metric differs at {pct}% confidence on these seeds (the same test){tail}"
        );
    }
    for d in sig {
        let _ = writeln!(
            out,
            "- {}: {} vs {} ({} {}, paired 95% CI; one-sided {})",
            d.metric,
            fmt_sig(d.winner),
            fmt_sig(d.other),
            if d.favours_winner { "better by" } else { "worse by" },
            fmt_mean_ci(d.diff.mean.abs(), d.diff.ci95),
            fmt_p(d.diff.p_observed()),
        );
    }
}

/// A single value to 4 significant digits (whole numbers from 1,000 up).
pub fn fmt_sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return fmt_stat(x);
    }
    let d = (3 - x.abs().log10().floor() as i32).clamp(0, 12) as usize;
    let s = format!("{x:.d$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The report as Markdown; `top` limits the ranked table (the rest is summarized).
pub fn render(r: &Report, top: usize) -> String {
    let mut out = String::new();
    render_search(&mut out, r);
    render_ranking(&mut out, r, top);
    render_winner(&mut out, r);
    if let Some(c) = &r.vs_runner_up {
        why(&mut out, c, "the runner-up");
    }
    match &r.vs_scenario {
        Some(c) => why(&mut out, c, "the scenario's own configuration"),
        None => {
            let _ = writeln!(out, "\nThe scenario's own configuration is the best candidate found.");
        }
    }
    let _ = writeln!(out, "\n```toml\n{}```", r.snippet);
    if let Some(f) = &r.flags {
        let _ = writeln!(
            out,
            "\nproduction-stack router flags:\n\n```\nvllm-router {}\n```",
            f.line()
        );
        for n in &f.notes {
            let _ = writeln!(out, "- {n}");
        }
    }
    render_pareto(&mut out, &r.pareto);
    if !r.dropped.is_empty() {
        let _ = writeln!(out, "\n{} space entries left out:", r.dropped.len());
        for (l, why) in &r.dropped {
            let _ = writeln!(out, "- `{l}`: {why}");
        }
    }
    out
}

/// The title, objective, constraints, why the search stopped, and its rounds.
fn render_search(out: &mut String, r: &Report) {
    let _ = writeln!(out, "# sim tune: {}\n", r.scenario);
    let _ = writeln!(out, "objective (lower is better): {}", r.objective);
    if !r.constraints.is_empty() {
        let _ = writeln!(out, "constraints: {}", r.constraints.join("; "));
    }
    let stop = match r.stop {
        Some(Stop::Confident) => format!(
            "stopped: the leader beat the runner-up at {}% confidence",
            r.settings.confidence * 100.0
        ),
        Some(Stop::Exhaustive) => "exhaustive: every candidate on every seed".into(),
        Some(Stop::Negligible) => format!(
            "stopped: seed-to-seed variance negligible (every candidate's score 95% CI below {NEGLIGIBLE_CI}), more seeds cannot change the ranking"
        ),
        _ => "stopped: budget spent".into(),
    };
    let _ = writeln!(
        out,
        "{} candidates, {} of {} runs in {} rounds (successive halving, eta {}); {stop}",
        r.candidates,
        r.runs,
        r.settings.budget,
        r.rounds.len(),
        r.settings.eta
    );
    for (i, rd) in r.rounds.iter().enumerate() {
        let p = rd.leader_vs_runner_up.map_or(String::new(), |p| {
            format!(
                ", ahead of the runner-up by {} ({})",
                fmt_mean_ci(p.mean, p.ci95),
                fmt_p(p.p)
            )
        });
        let seeds = match (rd.seeds.first(), rd.seeds.last()) {
            (Some(a), Some(b)) if a != b => format!("seeds {a}-{b}"),
            (Some(a), _) => format!("seed {a}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "- round {}: {} candidates x {seeds}; leader `{}`{p}",
            i + 1,
            rd.candidates,
            rd.leader
        );
    }
}

/// The ranked table, its first `top` rows.
fn render_ranking(out: &mut String, r: &Report, top: usize) {
    let _ = writeln!(
        out,
        "\n## Ranking by score (mean ± 95% CI over each candidate's seeds; tie: a last-round candidate not separable from the leader)\n"
    );
    let mut head = vec!["rank", "candidate", "seeds", "tie", "upstream", "score"];
    head.extend(r.metrics.iter().map(String::as_str));
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(head.len()));
    for row in r.ranked.iter().take(top) {
        let mut cells = vec![
            row.rank.to_string(),
            format!(
                "{}{}",
                row.candidate,
                if row.feasible { "" } else { " (violates constraints)" }
            ),
            row.seeds.to_string(),
            if row.candidate == r.winner {
                "winner".into()
            } else if row.tie {
                "tie".into()
            } else {
                String::new()
            },
            row.upstream.as_ref().map_or("patch".into(), |u| u.router.to_string()),
            row.score.text(),
        ];
        cells.extend(row.metrics.iter().map(MeanCi::text));
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    if r.ranked.len() > top {
        let _ = writeln!(out, "\n({} more in tune.md and tune.csv)", r.ranked.len() - top);
    }
}

/// The winner: the tie it was picked from, and which released router ships it (or the best
/// configuration one does).
fn render_winner(out: &mut String, r: &Report) {
    let _ = writeln!(out, "\n## Winner: `{}`", r.winner);
    if r.tie.len() > 1 {
        let mut names: Vec<String> = r.tie.iter().take(8).map(|t| format!("`{t}`")).collect();
        if r.tie.len() > 8 {
            names.push(format!("and {} more marked `tie` in the table", r.tie.len() - 8));
        }
        let _ = writeln!(
            out,
            "\nStatistical tie: {} candidates of the last round cannot be separated from the leader `{}` at {}% (paired on common seeds; a candidate cut earlier is never in the tie); tie-break `{}` ({}) picks `{}`. The tie: {}.",
            r.tie.len(),
            r.leader,
            r.settings.confidence * 100.0,
            serde_json::to_value(r.tie_break)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            r.tie_break.describe(),
            r.winner,
            names.join(", ")
        );
    }
    match &r.winner_upstream {
        Some(u) => {
            let _ = writeln!(out, "\nUpstream: {} ships it today: `{}`", u.router, u.how);
        }
        None => {
            let _ = writeln!(
                out,
                "\nUpstream: no released router ships this configuration (it needs a patch or an open PR)."
            );
            if let Some(a) = &r.best_upstream {
                let _ = writeln!(
                    out,
                    "The best configuration upstream ships is `{}` ({}: `{}`), rank {}, score {} over {} seeds; `--upstream-only` searches among those alone.",
                    a.candidate,
                    a.upstream.router,
                    a.upstream.how,
                    a.rank,
                    a.score.text(),
                    a.seeds
                );
            }
        }
    }
}

/// The non-dominated candidates and their means.
fn render_pareto(out: &mut String, p: &Pareto) {
    let _ = writeln!(
        out,
        "\n## Pareto front ({}; means over each candidate's seeds, as ranked)\n",
        p.metrics.join(", ")
    );
    for &i in &p.front {
        let (label, v) = &p.points[i];
        let vals: Vec<String> = p
            .metrics
            .iter()
            .zip(v)
            .map(|(m, x)| format!("{m} {}", fmt_sig(*x)))
            .collect();
        let _ = writeln!(out, "- `{label}`: {}", vals.join(", "));
    }
}

pub fn csv(r: &Report) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut head = vec![
        "rank".to_string(),
        "candidate".into(),
        "seeds".into(),
        "round".into(),
        "feasible".into(),
        "score_mean".into(),
        "score_ci95".into(),
    ];
    for m in &r.metrics {
        head.push(format!("{m}_mean"));
        head.push(format!("{m}_ci95"));
    }
    w.write_record(&head)?;
    let num = |x: f64| {
        if x.is_nan() {
            String::new()
        } else {
            serde_json::Value::from(x).to_string()
        }
    };
    for row in &r.ranked {
        let mut rec = vec![
            row.rank.to_string(),
            row.candidate.clone(),
            row.seeds.to_string(),
            row.round.to_string(),
            u8::from(row.feasible).to_string(),
            num(row.score.mean),
            num(row.score.ci95),
        ];
        for m in &row.metrics {
            rec.push(num(m.mean));
            rec.push(num(m.ci95));
        }
        w.write_record(&rec)?;
    }
    Ok(w.into_inner()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paired_of(mean: f64, ci95: f64, p: f64) -> Paired {
        Paired { n: 8, mean, ci95, p }
    }

    fn comparison(score: Paired, metric: Paired) -> Comparison {
        Comparison {
            other: "roundrobin".into(),
            seeds: 8,
            config: vec![],
            score,
            confidence: 0.95,
            metrics: vec![Diff {
                metric: "idle_while_queued_s".into(),
                winner: 1.0,
                other: 2.0,
                diff: metric,
                significant: metric.shows(0.95),
                favours_winner: metric.mean < 0.0,
            }],
        }
    }

    /// The report's lead and its per-metric lines come from one test: a lead of 176 +- 204
    /// at one-sided p = 0.040 is "a lead at 95% confidence", and the metric line says no
    /// metric shows one by the same test, instead of "no shown metric differs beyond its 95%
    /// interval" beside "p = 0.040".
    #[test]
    fn the_lead_and_the_metric_lines_read_one_test() {
        let mut out = String::new();
        why(
            &mut out,
            &comparison(paired_of(176.0, 204.0, 0.04), paired_of(-0.5, 2.0, 0.7)),
            "x",
        );
        assert!(out.contains("one-sided p = 0.040: a lead at 95% confidence"), "{out}");
        assert!(
            out.contains("no shown metric differs at 95% confidence on these seeds (the same test)"),
            "{out}"
        );
        assert!(!out.contains("beyond its 95% interval"), "{out}");
        let mut tie = String::new();
        why(
            &mut tie,
            &comparison(paired_of(10.0, 30.0, 0.3), paired_of(-1.0, 0.5, 0.9995)),
            "x",
        );
        assert!(tie.contains("no lead at 95% confidence: a tie on these seeds"), "{tie}");
        assert!(tie.contains("- idle_while_queued_s: 1 vs 2 (better by"), "{tie}");
        assert!(tie.contains("one-sided p < 0.001"), "{tie}");
    }

    #[test]
    fn shows_is_the_one_sided_test_in_the_observed_direction() {
        assert!(paired_of(1.0, 3.0, 0.04).shows(0.95));
        assert!(!paired_of(1.0, 3.0, 0.06).shows(0.95));
        assert!(paired_of(-1.0, 3.0, 0.97).shows(0.95));
        assert!(
            !Paired {
                n: 1,
                mean: 5.0,
                ci95: f64::NAN,
                p: 0.0
            }
            .shows(0.95)
        );
    }
}
