//! `sim run`'s seed check: how representative the run's seed is of its scenario.
//!
//! One seed draws one workload; on a scenario whose outcome hangs on which backend a few
//! sessions land first, another seed can turn a harmless run into an hour of stranded
//! capacity (or the reverse), and a single run cannot tell. The check re-runs the scenario
//! at the next [`EXTRA_SEEDS`] seeds (seed + 1, seed + 2, ...: the seeds `sim sweep` and
//! `sim check` count from the same base, each drawing its workload from its own named
//! streams, so the check is as deterministic as the run) and sets the run's headline
//! figures beside theirs. It only prints: nothing of it goes into a results file, which
//! stays the run of the seed asked for.
//!
//! Owns: the seeds checked, the work cap, the seed-sensitivity rule. May not see: the
//! terminal (it returns lines).

use std::fmt::Write as _;

use crate::metrics::Summary;
use crate::scenario::Scenario;
use crate::sim::RunOptions;
use crate::trace::TraceCache;

/// Seeds run beside the run's own.
pub const EXTRA_SEEDS: u64 = 4;

/// Most planned requests for which the check runs (4 more runs of a scenario this size
/// take about a second on one core); above it the check says it was skipped.
pub const MAX_REQUESTS: usize = 50_000;

/// A headline figure the check compares across seeds, and when its spread over the seeds
/// counts as seed-sensitive.
struct Headline {
    /// Its name in the terminal report.
    name: &'static str,
    /// Its unit, after a figure ("" for none).
    unit: &'static str,
    /// Decimals shown.
    decimals: usize,
    /// The figure of a run.
    of: fn(&Summary) -> f64,
    /// Smallest spread (largest minus smallest over the seeds) that may count.
    min_spread: f64,
    /// The spread also counts only if the smallest is at most this fraction of the largest
    /// (1: the spread alone decides).
    max_low_over_high: f64,
}

/// The figures checked: the stranding the report headlines, how evenly requests spread,
/// and the tail latency a user feels.
const HEADLINES: [Headline; 3] = [
    Headline {
        name: "idle_while_queued_s",
        unit: " s",
        decimals: 1,
        of: |s| s.idle_while_queued_s,
        min_spread: 5.0,
        max_low_over_high: 1.0 / 3.0,
    },
    Headline {
        name: "request Jain",
        unit: "",
        decimals: 3,
        of: |s| s.request_jain_index,
        min_spread: 0.2,
        max_low_over_high: 1.0,
    },
    Headline {
        name: "ttft p99",
        unit: " s",
        decimals: 2,
        of: |s| s.ttft_s.p99,
        min_spread: 1.0,
        max_low_over_high: 1.0 / 3.0,
    },
];

/// The check's outcome, ready to print.
#[derive(Debug, PartialEq)]
pub struct SeedCheck {
    /// The `seed check` lines of the report.
    pub lines: Vec<String>,
    /// Whether some headline figure is seed-sensitive (a warning line is among `lines`).
    pub sensitive: bool,
}

/// The seeds checked beside `seed`: the next [`EXTRA_SEEDS`], or the ones before it where
/// those would pass 2^63 - 1 (the largest seed a scenario holds).
pub fn extra_seeds(seed: u64) -> Vec<u64> {
    if seed.saturating_add(EXTRA_SEEDS) <= i64::MAX as u64 {
        (1..=EXTRA_SEEDS).map(|i| seed + i).collect()
    } else {
        (1..=EXTRA_SEEDS).rev().map(|i| seed - i).collect()
    }
}

/// Runs `scenario` at the seeds beside its own on `jobs` threads and compares them with
/// `own` (the run's summary); a line saying it was skipped when the scenario plans more
/// than [`MAX_REQUESTS`] requests. A seed whose run fails is named and left out.
pub fn check(scenario: &Scenario, planned_requests: usize, own: &Summary, jobs: usize) -> anyhow::Result<SeedCheck> {
    if planned_requests > MAX_REQUESTS {
        return Ok(SeedCheck {
            lines: vec![format!(
                "seed check          skipped: {planned_requests} planned requests (the check reruns scenarios up to {MAX_REQUESTS}); compare seeds with `sim sweep` or `sim check`"
            )],
            sensitive: false,
        });
    }
    let seeds = extra_seeds(scenario.sim.seed);
    let traces = TraceCache::new();
    let opts = RunOptions {
        record_series: false,
        record_decisions: false,
        check_invariants: false,
        record_event_log: false,
    };
    let started = std::time::Instant::now();
    let runs = super::parallel(jobs, &seeds, |s| super::at_seed(scenario, *s, &traces, opts))?;
    let wall_s = started.elapsed().as_secs_f64();
    let mut others = Vec::new();
    let mut failed = Vec::new();
    for (seed, run) in seeds.iter().zip(runs) {
        match run {
            Ok(r) => others.push((*seed, r.summary)),
            Err(_) => failed.push(*seed),
        }
    }
    Ok(compare(scenario.sim.seed, own, &others, &failed, wall_s))
}

/// The report's lines: which seeds ran, each headline figure here against theirs, and a
/// warning naming the figure, the seeds and what to do when a figure is seed-sensitive.
pub fn compare(seed: u64, own: &Summary, others: &[(u64, Summary)], failed: &[u64], wall_s: f64) -> SeedCheck {
    let mut lines = vec![format!(
        "seed check          seed {seed} against seeds {} ({} more runs, {wall_s:.2} s wall; --no-seed-check skips)",
        list(
            &others
                .iter()
                .map(|(s, _)| *s)
                .chain(failed.iter().copied())
                .collect::<Vec<_>>()
        ),
        others.len() + failed.len(),
    )];
    if !failed.is_empty() {
        lines.push(format!(
            "                    seeds {} did not finish (run them with --seed to see why); left out",
            list(failed)
        ));
    }
    let mut warnings = Vec::new();
    for h in &HEADLINES {
        let here = (h.of)(own);
        let theirs: Vec<(u64, f64)> = others.iter().map(|(s, r)| (*s, (h.of)(r))).collect();
        if theirs.is_empty() {
            continue;
        }
        lines.push(format!("{:<20}{}", h.name, figures(h, seed, here, &theirs)));
        warnings.extend(sensitive(h, seed, here, &theirs));
    }
    let sensitive = !warnings.is_empty();
    if let Some((_, other)) = warnings.first() {
        let other = *other;
        lines.extend(warnings.into_iter().map(|(w, _)| w));
        lines.push(format!(
            "         one seed does not represent this scenario: `--seed {other}` shows the other case; `sim sweep` or `sim check` ([expect] seeds = 10) judges it over seeds"
        ));
    }
    SeedCheck { lines, sensitive }
}

/// `here` against the other seeds' figures, and where it stands among them.
fn figures(h: &Headline, seed: u64, here: f64, theirs: &[(u64, f64)]) -> String {
    let d = h.decimals;
    let (lo, hi) = bounds(theirs.iter().map(|(_, v)| *v));
    let stands = if here < lo {
        "below every other seed"
    } else if here > hi {
        "above every other seed"
    } else {
        "within the other seeds' range"
    };
    let mut o = format!("{here:.d$}{} at seed {seed}; ", h.unit);
    let values: Vec<String> = theirs.iter().map(|(_, v)| format!("{v:.d$}")).collect();
    let _ = write!(
        o,
        "{}{} at seeds {}: {stands}",
        values.join(" / "),
        h.unit,
        list(&theirs.iter().map(|(s, _)| *s).collect::<Vec<_>>())
    );
    o
}

/// The warning when the figure's spread over every seed (the run's included) is
/// seed-sensitive by the headline's rule, and the first seed on the far side from this run.
fn sensitive(h: &Headline, seed: u64, here: f64, theirs: &[(u64, f64)]) -> Option<(String, u64)> {
    let (lo, hi) = bounds(theirs.iter().map(|(_, v)| *v).chain([here]));
    if !(hi - lo >= h.min_spread && lo <= hi * h.max_low_over_high) {
        return None;
    }
    let d = h.decimals;
    let mid = (lo + hi) / 2.0;
    let far: Vec<u64> = theirs
        .iter()
        .filter(|(_, v)| (*v >= mid) != (here >= mid))
        .map(|(s, _)| *s)
        .collect();
    let all: Vec<u64> = std::iter::once(seed).chain(theirs.iter().map(|(s, _)| *s)).collect();
    let (word, verb) = if far.len() == 1 {
        ("seed", "is")
    } else {
        ("seeds", "are")
    };
    let line = format!(
        "warning: seed-sensitive: {} spans {lo:.d$}-{hi:.d$}{unit} over seeds {} ({here:.d$}{unit} at seed {seed}; {word} {} {verb} on the other side)",
        h.name,
        list(&all),
        list(&far),
        unit = h.unit,
    );
    Some((line, far.first().copied().unwrap_or(seed)))
}

/// Smallest and largest of `values`.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// Seeds as "2-5" when consecutive and ascending, else "2, 4, 7".
fn list(seeds: &[u64]) -> String {
    let consecutive = seeds.len() > 2 && seeds.windows(2).all(|w| w[1] == w[0] + 1);
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if consecutive => format!("{a}-{b}"),
        _ => seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(idle_s: f64, jain: f64, ttft_p99_s: f64) -> Summary {
        let mut s = Summary {
            idle_while_queued_s: idle_s,
            request_jain_index: jain,
            ..Summary::default()
        };
        s.ttft_s.p99 = ttft_p99_s;
        s
    }

    #[test]
    fn extra_seeds_follow_the_run_and_stay_in_range() {
        assert_eq!(extra_seeds(1), vec![2, 3, 4, 5]);
        let max = i64::MAX as u64;
        assert_eq!(extra_seeds(max), vec![max - 4, max - 3, max - 2, max - 1]);
    }

    #[test]
    fn a_bimodal_scenario_is_flagged_and_names_the_other_seeds() {
        let own = summary(0.4, 0.8, 2.0);
        let others: Vec<(u64, Summary)> = [(2, 0.5), (3, 385.0), (4, 404.0), (5, 0.3)]
            .map(|(s, v)| (s, summary(v, 0.8, 2.0)))
            .to_vec();
        let c = compare(1, &own, &others, &[], 0.01);
        assert!(c.sensitive);
        let w = &c.lines[c.lines.len() - 2];
        assert_eq!(
            w,
            "warning: seed-sensitive: idle_while_queued_s spans 0.3-404.0 s over seeds 1-5 (0.4 s at seed 1; seeds 3, 4 are on the other side)"
        );
        assert!(
            c.lines.last().unwrap().contains("`--seed 3` shows the other case"),
            "{:?}",
            c.lines
        );
    }

    #[test]
    fn a_steady_scenario_is_representative() {
        let own = summary(197.4, 0.735, 6.27);
        let others: Vec<(u64, Summary)> = [(2, 210.8), (3, 206.9), (4, 206.7), (5, 205.3)]
            .map(|(s, v)| (s, summary(v, 0.74, 6.3)))
            .to_vec();
        let c = compare(1, &own, &others, &[], 0.01);
        assert!(!c.sensitive, "{:?}", c.lines);
        assert!(
            c.lines[1]
                .contains("197.4 s at seed 1; 210.8 / 206.9 / 206.7 / 205.3 s at seeds 2-5: below every other seed"),
            "{:?}",
            c.lines
        );
        // Small absolute spreads never count, however large their ratio.
        let calm: Vec<(u64, Summary)> = [(2, 0.0), (3, 0.1)].map(|(s, v)| (s, summary(v, 0.99, 0.4))).to_vec();
        assert!(!compare(1, &summary(0.5, 0.99, 0.4), &calm, &[], 0.0).sensitive);
    }

    #[test]
    fn failed_seeds_are_named() {
        let c = compare(1, &summary(1.0, 1.0, 1.0), &[(2, summary(1.0, 1.0, 1.0))], &[3], 0.0);
        assert!(c.lines[0].contains("against seeds 2, 3 (2 more runs"), "{:?}", c.lines);
        assert!(c.lines[1].contains("seeds 3 did not finish"), "{:?}", c.lines);
    }
}
