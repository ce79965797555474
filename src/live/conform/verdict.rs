//! The figures `sim conform` sets side by side, and the rule that says whether a model
//! agrees with its router: the served figure within 10 % (or an absolute floor) of the
//! model's mean over seeds, or inside the model's range over seeds.

use serde::Serialize;

use crate::metrics::Summary;

/// What one run (served or simulated) measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figures {
    /// Requests per backend, in backend order.
    pub requests: Vec<u64>,
    /// Requests finished.
    pub finished: u64,
    /// Requests planned.
    pub planned: u64,
    /// Slot-seconds idle while another backend queued.
    pub idle_while_queued_s: f64,
    /// Slot-seconds stranded.
    pub stranded_slot_s: f64,
    /// Prefix-cache hit rate of the engines.
    pub prefix_cache_hit_rate: f64,
    /// Time to first token, median, seconds.
    pub ttft_p50_s: f64,
    /// Time to first token, 99th percentile, seconds.
    pub ttft_p99_s: f64,
}

impl Figures {
    /// The figures of a run's summary.
    pub fn of(s: &Summary) -> Figures {
        Figures {
            requests: s.backends.iter().map(|b| b.requests).collect(),
            finished: s.requests.finished,
            planned: s.requests.planned,
            idle_while_queued_s: s.idle_while_queued_s,
            stranded_slot_s: s.stranded_slot_s,
            prefix_cache_hit_rate: s.prefix_cache_hit_rate,
            ttft_p50_s: s.ttft_s.p50,
            ttft_p99_s: s.ttft_s.p99,
        }
    }

    /// Requests per backend, most first: the split whatever the labels (a router's worker
    /// order is its own, often random per process).
    pub fn split(&self) -> Vec<u64> {
        let mut v = self.requests.clone();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }

    /// [`Figures::split`] as shares of all requests (seeds plan different totals).
    pub fn split_shares(&self) -> Vec<f64> {
        let total = self.requests.iter().sum::<u64>().max(1) as f64;
        self.split().into_iter().map(|r| r as f64 / total).collect()
    }
}

/// One figure over the model's seeds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// Mean over seeds.
    pub mean: f64,
    /// Least over seeds.
    pub min: f64,
    /// Most over seeds.
    pub max: f64,
}

impl Spread {
    /// The spread of `xs` (not empty).
    pub fn of(xs: impl IntoIterator<Item = f64>) -> Spread {
        let (mut n, mut sum, mut min, mut max) = (0u32, 0.0, f64::INFINITY, f64::NEG_INFINITY);
        for x in xs {
            n += 1;
            sum += x;
            min = min.min(x);
            max = max.max(x);
        }
        Spread {
            mean: if n == 0 { f64::NAN } else { sum / f64::from(n) },
            min,
            max,
        }
    }

    /// The agreement rule: `x` within 10 % of the mean or `floor` of it, or inside the range.
    pub fn admits(&self, x: f64, floor: f64) -> bool {
        (x - self.mean).abs() <= (REL_TOLERANCE * self.mean.abs()).max(floor) || (self.min <= x && x <= self.max)
    }
}

/// Relative tolerance around the model's seed mean.
pub const REL_TOLERANCE: f64 = 0.10;
/// Absolute floor of the tolerance on `idle_while_queued_s`, seconds.
pub const IWQ_FLOOR_S: f64 = 1.0;
/// Absolute floor of the tolerance on one backend's request share, in requests (divided by
/// the served total).
pub const SPLIT_FLOOR_REQUESTS: f64 = 1.0;

/// The rule, in words (written into conform.json and conform.md).
pub const RULE: &str = "agrees when the served idle_while_queued_s is within 10 % (or 1 s) of the model's mean over \
     seeds or inside its range over seeds, and so is each backend's share of the requests (or within 1 request), the \
     backends ranked by requests (a router's worker order is its own)";

/// The model over its seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelFigures {
    /// Per seed, in seed order.
    pub seeds: Vec<u64>,
    /// Each seed's figures.
    pub runs: Vec<Figures>,
    /// `idle_while_queued_s` over seeds.
    pub idle_while_queued_s: Spread,
    /// `stranded_slot_s` over seeds.
    pub stranded_slot_s: Spread,
    /// Prefix-cache hit rate over seeds.
    pub prefix_cache_hit_rate: Spread,
    /// TTFT p50 over seeds.
    pub ttft_p50_s: Spread,
    /// TTFT p99 over seeds.
    pub ttft_p99_s: Spread,
    /// Ranked request shares (most first) over seeds, rank by rank.
    pub split: Vec<Spread>,
}

impl ModelFigures {
    /// The spreads of `runs` (one per seed, not empty).
    pub fn of(seeds: Vec<u64>, runs: Vec<Figures>) -> ModelFigures {
        let over = |f: fn(&Figures) -> f64| Spread::of(runs.iter().map(f));
        let splits: Vec<Vec<f64>> = runs.iter().map(Figures::split_shares).collect();
        let n = splits.iter().map(Vec::len).max().unwrap_or(0);
        let split = (0..n)
            .map(|r| Spread::of(splits.iter().map(|s| s.get(r).copied().unwrap_or(0.0))))
            .collect();
        ModelFigures {
            idle_while_queued_s: over(|f| f.idle_while_queued_s),
            stranded_slot_s: over(|f| f.stranded_slot_s),
            prefix_cache_hit_rate: over(|f| f.prefix_cache_hit_rate),
            ttft_p50_s: over(|f| f.ttft_p50_s),
            ttft_p99_s: over(|f| f.ttft_p99_s),
            split,
            seeds,
            runs,
        }
    }
}

/// The verdict on one pair.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// Both checks hold.
    pub agrees: bool,
    /// `idle_while_queued_s` passes the rule.
    pub idle_while_queued: bool,
    /// Every rank of the split passes the rule.
    pub split: bool,
    /// The rule.
    pub rule: &'static str,
}

/// Judges served against the model.
pub fn judge(served: &Figures, model: &ModelFigures) -> Verdict {
    let idle_while_queued = model
        .idle_while_queued_s
        .admits(served.idle_while_queued_s, IWQ_FLOOR_S);
    let s = served.split_shares();
    let floor = SPLIT_FLOOR_REQUESTS / served.requests.iter().sum::<u64>().max(1) as f64;
    let split = s.len() == model.split.len() && s.iter().zip(&model.split).all(|(&x, m)| m.admits(x, floor));
    Verdict {
        agrees: idle_while_queued && split,
        idle_while_queued,
        split,
        rule: RULE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(requests: &[u64], iwq: f64) -> Figures {
        Figures {
            requests: requests.to_vec(),
            finished: requests.iter().sum(),
            planned: requests.iter().sum(),
            idle_while_queued_s: iwq,
            stranded_slot_s: 0.0,
            prefix_cache_hit_rate: 0.5,
            ttft_p50_s: 0.1,
            ttft_p99_s: 1.0,
        }
    }

    #[test]
    fn within_ten_percent_or_the_floor_or_the_range() {
        let s = Spread::of([100.0, 120.0, 80.0]);
        assert_eq!((s.mean, s.min, s.max), (100.0, 80.0, 120.0));
        assert!(s.admits(109.9, 1.0));
        assert!(s.admits(119.0, 1.0), "inside the range");
        assert!(!s.admits(121.0, 1.0));
        let z = Spread::of([0.2, 0.4]);
        assert!(z.admits(1.2, 1.0), "the floor");
        assert!(!z.admits(1.5, 1.0));
    }

    #[test]
    fn the_split_is_compared_by_rank_not_label() {
        let model = ModelFigures::of(
            vec![1, 2],
            vec![fig(&[40, 40, 480, 0], 392.0), fig(&[40, 480, 40, 0], 400.0)],
        );
        assert_eq!(model.split[0].mean, 480.0 / 560.0);
        let served = fig(&[0, 520, 0, 40], 399.0);
        let v = judge(&served, &model);
        assert!(v.idle_while_queued);
        assert!(!v.split, "520 / 40 / 0 / 0 is not 480 / 40 / 40 / 0");
        assert!(!v.agrees);
        let v = judge(&fig(&[480, 0, 40, 40], 396.0), &model);
        assert!(v.agrees, "{v:?}");
        // Shares, not counts: a seed planning twice the requests splits the same way.
        let v = judge(&fig(&[960, 0, 80, 80], 396.0), &model);
        assert!(v.split, "{v:?}");
    }

    #[test]
    fn idle_while_queued_outside_disagrees() {
        let model = ModelFigures::of(vec![1], vec![fig(&[140, 140, 140, 140], 29.8)]);
        let v = judge(&fig(&[140, 140, 140, 140], 45.8), &model);
        assert!(v.split && !v.idle_while_queued && !v.agrees);
    }
}
