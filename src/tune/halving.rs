//! Successive halving over seeds with common random numbers: every candidate is screened
//! on the same first seeds, the best `1/eta` (and the scenario's own configuration, the
//! incumbent every result is compared with) get more seeds, and so on until the budget is
//! spent or the leader beats the runner-up with the requested confidence in a paired test
//! (the same seeds for both, so the workload noise cancels).
//!
//! Pure bookkeeping: [`Search::next`] says which candidates run which new seeds,
//! [`Search::absorb`] takes their metrics. The caller runs them (in parallel, sharded or
//! from files); every decision depends only on the metrics, so the outcome does not depend
//! on threads, shards or the order runs finish in.

use serde::Serialize;
use serde_json::{Map, Value};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::objective::Objective;
use crate::check::expr::{Check, evaluate};
use crate::sweep::table::Stat;

/// Search settings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// Total runs allowed.
    pub budget: u64,
    /// Keep the best `1/eta` each round.
    pub eta: u64,
    /// Stop when the leader beats the runner-up at this one-sided confidence.
    pub confidence: f64,
    /// Seeds every candidate gets in the screening round (at least 2, for a variance).
    pub min_seeds: u64,
    /// Run every candidate on `budget / candidates` seeds instead (the exhaustive sweep
    /// successive halving is measured against).
    pub exhaustive: bool,
}

/// A paired comparison of `b` against `a` on common seeds: `d = b - a` per seed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Paired {
    /// Seeds compared.
    pub n: u64,
    /// Mean difference.
    pub mean: f64,
    /// Half-width of its 95% Student-t interval (NaN below 2 seeds).
    pub ci95: f64,
    /// One-sided p-value of "b is not worse than a" (`d <= 0`): small means `a` is better.
    pub p: f64,
}

impl Paired {
    /// The one-sided p-value in the direction the mean difference points (small: the
    /// difference is real); 1 below 2 seeds.
    pub fn p_observed(&self) -> f64 {
        if self.n < 2 {
            1.0
        } else if self.mean >= 0.0 {
            self.p
        } else {
            1.0 - self.p
        }
    }

    /// The search's own test at `confidence`: the paired one-sided test in the observed
    /// direction. The tie, the stop, the report's lead and its per-metric differences all
    /// read this one verdict, so no two statements of the report can disagree.
    pub fn shows(&self, confidence: f64) -> bool {
        self.p_observed() < 1.0 - confidence
    }
}

/// Compares `b` with `a` seed by seed (lower is better).
pub fn paired(a: &[f64], b: &[f64]) -> Paired {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    let s = Stat::of(&d);
    let p = if s.n < 2 {
        1.0
    } else if s.std == 0.0 || !s.std.is_finite() {
        if s.mean > 0.0 { 0.0 } else { 1.0 }
    } else {
        let t = s.mean / (s.std / (s.n as f64).sqrt());
        let dist = StudentsT::new(0.0, 1.0, (s.n - 1) as f64).expect("degrees of freedom >= 1");
        1.0 - dist.cdf(t)
    };
    Paired {
        n: s.n,
        mean: s.mean,
        ci95: s.ci95,
        p,
    }
}

/// A metric's typical value on the screening round: the larger of the scenario's own
/// mean (candidate 0) and the median of the screened candidates' means. A scenario whose
/// first seeds happen to score near zero (0.4 s idle while queued where other seeds give
/// 400 s) is then no divisor that makes one term outweigh every other.
fn typical(runs: &[Vec<Map<String, Value>>], candidates: &[usize], metric: &str) -> f64 {
    let mean = |c: usize| {
        let xs: Vec<f64> = runs[c]
            .iter()
            .filter_map(|row| row.get(metric).and_then(Value::as_f64))
            .collect();
        Stat::of(&xs).mean
    };
    let mut means: Vec<f64> = candidates.iter().map(|&c| mean(c)).filter(|x| x.is_finite()).collect();
    means.sort_by(f64::total_cmp);
    let median = means.get(means.len() / 2).copied().unwrap_or(f64::NAN);
    let own = mean(0);
    match (own.is_finite(), median.is_finite()) {
        (true, true) => own.abs().max(median.abs()),
        (true, false) => own,
        _ => median,
    }
}

/// Why the search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The leader beat the runner-up with the requested confidence.
    Confident,
    /// The budget is spent.
    Budget,
    /// Every candidate ran every seed (exhaustive mode).
    Exhaustive,
    /// Seed-to-seed variance is negligible: every candidate of the round scored within
    /// [`NEGLIGIBLE_CI`] on all its seeds (deterministic runs being the extreme case), so
    /// more seeds cannot change the ranking.
    Negligible,
}

/// The 95% CI half-width of a candidate's score (objective units: the scenario's own
/// configuration scores about the sum of the weights) below which more seeds are not run:
/// 0.001, a thousandth of the scenario's score under the default objective.
pub const NEGLIGIBLE_CI: f64 = 1e-3;

/// One round as run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoundLog {
    /// Candidates that ran, by index.
    pub candidates: Vec<usize>,
    /// The seeds they ran in this round.
    pub seeds: Vec<u64>,
    /// Candidates ranked after the round (best first).
    pub ranking: Vec<usize>,
    /// Leader against runner-up on every seed so far.
    pub leader_vs_runner_up: Option<Paired>,
    /// Candidates that earned the next round on merit (the incumbent runs every round
    /// regardless, for the paired comparison with the winner).
    pub kept: Vec<usize>,
}

/// The state of a search.
pub struct Search {
    /// Settings.
    pub settings: Settings,
    /// The objective (scaled by the scenario's own configuration after the screen).
    pub objective: Objective,
    /// Bounds a candidate must meet to rank above those that do not.
    pub constraints: Vec<Check>,
    /// Seeds in order: `base, base + 1, ...`; candidate `c` ran the first `runs[c].len()`.
    pub base_seed: u64,
    /// Metrics per candidate, per seed (seed order).
    pub runs: Vec<Vec<Map<String, Value>>>,
    /// Candidates still in the race.
    pub survivors: Vec<usize>,
    /// Rounds so far.
    pub rounds: Vec<RoundLog>,
    /// Runs so far.
    pub used: u64,
    /// Why it ended, once it has.
    pub stop: Option<Stop>,
    planned: usize,
}

/// Most runs a tune may be given (`--budget`): a round's seed list and its sweep are
/// allocated from it, so a budget is checked against this before anything is.
pub const MAX_BUDGET: u64 = 1_000_000;

/// Rounds successive halving needs to narrow `n` candidates to two, plus the screen.
pub fn planned_rounds(n: u64, eta: u64) -> usize {
    let mut m = n;
    let mut r = 1;
    while m > 2 {
        m = m.div_ceil(eta).max(2);
        r += 1;
    }
    r
}

impl Search {
    /// A search over `n` candidates (candidate 0 is the scenario's own configuration).
    pub fn new(
        n: usize,
        settings: Settings,
        objective: Objective,
        constraints: Vec<Check>,
        base_seed: u64,
    ) -> Result<Search, String> {
        // Every capacity is checked before anything is allocated from it.
        if settings.budget > MAX_BUDGET {
            return Err(format!(
                "--budget {} is above the {MAX_BUDGET} runs a tune may take; narrow the space or lower it",
                settings.budget
            ));
        }
        let need = settings.min_seeds.checked_mul(n as u64).filter(|&x| x <= MAX_BUDGET);
        let Some(need) = need.filter(|&x| settings.budget >= x) else {
            return Err(format!(
                "--budget {} is below --screen-seeds {} for each of the {n} candidates ({} runs); raise it (at most {MAX_BUDGET}) or narrow the space",
                settings.budget,
                settings.min_seeds,
                need.map_or_else(|| "more than 10^6".to_string(), |x| x.to_string())
            ));
        };
        debug_assert!(need <= settings.budget);
        if settings.eta < 2 {
            return Err(format!("--eta must be at least 2, got {}", settings.eta));
        }
        if !(0.5..1.0).contains(&settings.confidence) {
            return Err(format!("--confidence {} is outside [0.5, 1)", settings.confidence));
        }
        // Seeds run base, base + 1, ...; no candidate runs more than the budget, and every
        // seed must be one `sim run --seed` takes (at most 2^63 - 1).
        let last = base_seed.checked_add(settings.budget.saturating_sub(1));
        if last.is_none_or(|l| l > i64::MAX as u64) {
            return Err(format!(
                "--seed {base_seed}: with --budget {} the seeds would run past 2^63 - 1, the largest seed `sim run` takes; give a seed at most {}",
                settings.budget,
                (i64::MAX as u64).saturating_sub(settings.budget.saturating_sub(1))
            ));
        }
        let planned = if settings.exhaustive {
            1
        } else {
            planned_rounds(n as u64, settings.eta)
        };
        Ok(Search {
            settings,
            objective,
            constraints,
            base_seed,
            runs: vec![Vec::new(); n],
            survivors: (0..n).collect(),
            rounds: Vec::new(),
            used: 0,
            stop: None,
            planned,
        })
    }

    /// The next round: which candidates run which new seeds; `None` once stopped.
    pub fn next(&self) -> Option<(Vec<usize>, Vec<u64>)> {
        if self.stop.is_some() {
            return None;
        }
        let r = self.rounds.len();
        let n_r = self.survivors.len() as u64;
        let left = self.settings.budget - self.used;
        let per = if self.settings.exhaustive {
            left / n_r
        } else if r == 0 {
            (left / self.planned as u64 / n_r).max(self.settings.min_seeds)
        } else {
            left / (self.planned - r).max(1) as u64 / n_r
        };
        let per = per.min(left / n_r);
        if per == 0 {
            return None;
        }
        let have = self.runs[self.survivors[0]].len() as u64;
        let seeds = (have..have + per).map(|i| self.base_seed + i).collect();
        Some((self.survivors.clone(), seeds))
    }

    /// Takes the metrics of the round [`Search::next`] announced: `rows[i][j]` is candidate
    /// `candidates[i]` on seed `seeds[j]`.
    pub fn absorb(&mut self, candidates: &[usize], seeds: &[u64], rows: Vec<Vec<Map<String, Value>>>) {
        for (&c, r) in candidates.iter().zip(rows) {
            self.used += r.len() as u64;
            self.runs[c].extend(r);
        }
        let r = self.rounds.len();
        if r == 0 {
            let runs = &self.runs;
            self.objective.scale(|m| typical(runs, candidates, m));
        }
        let ranking = self.rank(candidates);
        let test = (ranking.len() >= 2).then(|| paired(&self.scores(ranking[0]), &self.scores(ranking[1])));
        self.rounds.push(RoundLog {
            candidates: candidates.to_vec(),
            seeds: seeds.to_vec(),
            ranking: ranking.clone(),
            leader_vs_runner_up: test,
            kept: Vec::new(),
        });
        let confident = test.is_some_and(|t| t.p < 1.0 - self.settings.confidence) && self.feasible(ranking[0]);
        let negligible = candidates.iter().all(|&c| {
            let s = Stat::of(&self.scores(c));
            s.n >= 2 && (s.ci95 < NEGLIGIBLE_CI || s.std == 0.0)
        });
        if self.settings.exhaustive {
            self.stop = Some(Stop::Exhaustive);
        } else if negligible {
            self.stop = Some(Stop::Negligible);
        } else if r >= 1 && confident {
            self.stop = Some(Stop::Confident);
        } else if r + 1 >= self.planned || ranking.len() < 2 {
            self.stop = Some(Stop::Budget);
        } else {
            let contenders = ranking.len() as u64 - u64::from(ranking.contains(&0));
            let keep = contenders.div_ceil(self.settings.eta).max(2) as usize;
            let mut next: Vec<usize> = ranking.iter().copied().take(keep).collect();
            if let Some(log) = self.rounds.last_mut() {
                log.kept = next.clone();
            }
            if !next.contains(&0) {
                next.push(0);
            }
            next.sort_unstable();
            self.survivors = next;
        }
        if self.stop.is_none() && self.next().is_none() {
            self.stop = Some(Stop::Budget);
        }
    }

    /// Per-seed scores of candidate `c` (seed order).
    pub fn scores(&self, c: usize) -> Vec<f64> {
        self.runs[c]
            .iter()
            .map(|row| self.objective.score(|m| row.get(m).and_then(Value::as_f64)))
            .collect()
    }

    /// Per-seed values of `metric` for candidate `c` (NaN where missing).
    pub fn values(&self, c: usize, metric: &str) -> Vec<f64> {
        self.runs[c]
            .iter()
            .map(|row| row.get(metric).and_then(Value::as_f64).unwrap_or(f64::NAN))
            .collect()
    }

    /// Whether `c` meets every constraint on the seeds it ran.
    pub fn feasible(&self, c: usize) -> bool {
        !self.runs[c].is_empty()
            && self.constraints.iter().all(|k| {
                let v = self.values(c, &k.metric);
                v.iter().all(|x| x.is_finite()) && evaluate(k, &v).1
            })
    }

    /// `among` ordered best first: feasible before infeasible, then by mean score, then by
    /// index (the scenario's own configuration wins exact ties).
    pub fn rank(&self, among: &[usize]) -> Vec<usize> {
        let key = |c: usize| {
            let s = Stat::of(&self.scores(c)).mean;
            (!self.feasible(c), if s.is_nan() { f64::INFINITY } else { s }, c)
        };
        let mut v = among.to_vec();
        v.sort_by(|&a, &b| {
            let (ka, kb) = (key(a), key(b));
            ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1)).then(ka.2.cmp(&kb.2))
        });
        v
    }

    /// Every candidate ranked: by the last round it reached on merit, then by its place in
    /// that round's ranking. The incumbent, which runs every round, is placed by merit
    /// too: after the round it would have been eliminated in.
    pub fn final_ranking(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.runs.len()).filter(|&c| !self.runs[c].is_empty()).collect();
        let pos = |c: usize| {
            let r = self.merit_round(c);
            let p = self.rounds[r]
                .ranking
                .iter()
                .position(|&x| x == c)
                .unwrap_or(usize::MAX);
            (std::cmp::Reverse(r), p)
        };
        order.sort_by_key(|&c| pos(c));
        order
    }

    /// The last round `c` ran in (0-based).
    pub fn reached(&self, c: usize) -> usize {
        self.rounds.iter().rposition(|l| l.candidates.contains(&c)).unwrap_or(0)
    }

    /// The last round `c` reached on merit: [`Search::reached`], except for the incumbent,
    /// whose later rounds count only while it was among the kept.
    pub fn merit_round(&self, c: usize) -> usize {
        if c != 0 {
            return self.reached(c);
        }
        (1..self.rounds.len())
            .take_while(|&r| self.rounds[r - 1].kept.contains(&0))
            .last()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(x: f64, c: usize) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("ttft_p99_s".into(), Value::from(x));
        m.insert("stranded_slot_s".into(), Value::from(c as f64));
        m
    }

    fn settings(budget: u64) -> Settings {
        Settings {
            budget,
            eta: 3,
            confidence: 0.95,
            min_seeds: 2,
            exhaustive: false,
        }
    }

    /// Candidate `c` on seed `s` scores `c`-dependent truth plus seed noise shared by all
    /// candidates (common random numbers) and a small candidate-specific wobble.
    fn truth(c: usize, s: u64) -> f64 {
        let base = [5.0, 3.0, 1.0, 1.2, 4.0, 2.0, 6.0, 3.5, 2.5][c];
        base + (s % 7) as f64 + 0.05 * ((c as u64 * 31 + s * 17) % 5) as f64
    }

    fn drive(mut s: Search) -> Search {
        while let Some((cands, seeds)) = s.next() {
            let rows = cands
                .iter()
                .map(|&c| seeds.iter().map(|&x| row(truth(c, x), c)).collect())
                .collect();
            s.absorb(&cands, &seeds, rows);
        }
        s
    }

    #[test]
    fn halving_finds_the_best_and_keeps_the_incumbent() {
        let o = Objective::parse("ttft_s.p99").unwrap();
        let s = drive(Search::new(9, settings(200), o, vec![], 1).unwrap());
        assert_eq!(s.final_ranking()[0], 2);
        assert!(s.used <= 200);
        assert!(
            s.rounds.iter().all(|r| r.candidates.contains(&0)),
            "the incumbent runs every round"
        );
        assert_eq!(s.rounds[0].candidates.len(), 9);
        assert!(s.rounds[1].candidates.len() < 9);
        // Candidates 2 and 3 differ by 0.2 on every seed (up to the wobble): confident.
        assert_eq!(s.stop, Some(Stop::Confident));
    }

    #[test]
    fn deterministic_runs_stop_after_the_screen() {
        // Every seed gives every candidate the same score (a deterministic replay): the
        // screen's two seeds show no variance, and no more seeds are run.
        let o = Objective::parse("ttft_s.p99").unwrap();
        let mut s = Search::new(9, settings(200), o, vec![], 1).unwrap();
        while let Some((cands, seeds)) = s.next() {
            let rows = cands
                .iter()
                .map(|&c| seeds.iter().map(|_| row(truth(c, 0), c)).collect())
                .collect();
            s.absorb(&cands, &seeds, rows);
        }
        assert_eq!(s.stop, Some(Stop::Negligible));
        assert_eq!(s.rounds.len(), 1);
        assert!(s.used < 200 / 2, "{} runs", s.used);
        assert_eq!(s.final_ranking()[0], 2);
    }

    #[test]
    fn constraints_rank_infeasible_candidates_last() {
        let o = Objective::parse("ttft_s.p99").unwrap();
        // "stranded_slot_s" is the candidate's index here: 0, 1 and 2 violate the bound, so
        // the best feasible candidate (3, just behind 2) wins.
        let c = crate::tune::objective::constraints(&["stranded_slot_s >= 3".into()]).unwrap();
        let s = drive(Search::new(9, settings(200), o, c, 1).unwrap());
        assert_eq!(s.final_ranking()[0], 3);
        assert!(!s.feasible(2) && s.feasible(3));
    }

    #[test]
    fn budget_is_checked_and_exhaustive_runs_one_round() {
        let o = Objective::parse("ttft_s.p99").unwrap();
        assert!(
            Search::new(9, settings(17), o.clone(), vec![], 1)
                .err()
                .unwrap()
                .contains("below --screen-seeds 2 for each of the 9 candidates (18 runs)")
        );
        let mut st = settings(90);
        st.exhaustive = true;
        let s = drive(Search::new(9, st, o, vec![], 1).unwrap());
        assert_eq!(s.rounds.len(), 1);
        assert_eq!(s.rounds[0].seeds, (1..=10).collect::<Vec<u64>>());
        assert_eq!(s.final_ranking()[0], 2);
        assert_eq!(s.stop, Some(Stop::Exhaustive));
    }

    #[test]
    fn capacities_are_checked_before_allocating() {
        // Unchecked, --budget 2^64 - 1 panics (capacity overflow), 10^12 aborts allocating
        // the screening round's seeds, and seeds past 2^63 - 1 are run.
        let o = Objective::parse("ttft_s.p99").unwrap();
        let e = Search::new(9, settings(u64::MAX), o.clone(), vec![], 1).err().unwrap();
        assert!(
            e.starts_with("--budget 18446744073709551615 is above the 1000000 runs"),
            "{e}"
        );
        let e = Search::new(9, settings(1_000_000_000_000), o.clone(), vec![], 1)
            .err()
            .unwrap();
        assert!(e.contains("is above the 1000000 runs"), "{e}");
        let mut st = settings(1000);
        st.min_seeds = u64::MAX;
        let e = Search::new(9, st, o.clone(), vec![], 1).err().unwrap();
        assert!(e.contains("more than 10^6 runs"), "{e}");
        let e = Search::new(9, settings(200), o.clone(), vec![], i64::MAX as u64 - 10)
            .err()
            .unwrap();
        assert!(
            e.contains("past 2^63 - 1") && e.contains("at most 9223372036854775608"),
            "{e}"
        );
        assert!(Search::new(9, settings(200), o, vec![], i64::MAX as u64 - 199).is_ok());
    }

    #[test]
    fn paired_test_signs() {
        let p = paired(&[1.0, 2.0, 3.0], &[2.0, 3.1, 4.0]);
        assert!(p.mean > 0.0 && p.p < 0.01, "{p:?}");
        let q = paired(&[1.0, 2.0], &[1.0, 2.0]);
        assert_eq!(q.p, 1.0);
        assert_eq!(paired(&[1.0], &[2.0]).p, 1.0);
        assert_eq!(planned_rounds(58, 3), 5);
        assert_eq!(planned_rounds(2, 3), 1);
    }
}
