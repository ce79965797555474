//! What "better" means for `sim tune`: a weighted objective over summary metrics (each in
//! units of the scenario's own configuration, so weights trade relative changes), bound
//! constraints in the `[expect]` syntax, and the Pareto front over two or three metrics.

use crate::quote::quote as q;
use serde::Serialize;

use crate::check::expr::{self, Check};
use crate::metrics::known_metric;

/// The default objective: stranded capacity (two measures, half weight each), the TTFT
/// tail, the prefix-cache hit rate and the spread of requests over the fleet (Jain's
/// index of requests per slot: a policy that keeps a hot spot scores worse even where the
/// seeds screened happen not to queue), equally weighted.
pub const DEFAULT_OBJECTIVE: &str =
    "stranded_slot_s=0.5,idle_while_queued_s=0.5,ttft_p99_s=1,prefix_cache_hit_rate=1,request_jain_index=1";

/// The default Pareto metrics.
pub const DEFAULT_PARETO: &str = "ttft_p99_s,stranded_slot_s";

/// Whether larger is better for `metric` (rates of useful work and of cache hits).
pub fn maximize(metric: &str) -> bool {
    metric.ends_with("hit_rate")
        || metric.starts_with("throughput")
        || metric.ends_with("tokens_per_s")
        // Jain's fairness index: 1 when every backend serves its share.
        || metric.ends_with("jain_index")
}

/// One weighted term.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Term {
    /// Flattened summary metric.
    pub metric: String,
    /// Weight (> 0); the direction comes from [`maximize`].
    pub weight: f64,
    /// The metric's typical value on the screening seeds, floored (see [`Objective::scale`]).
    pub scale: f64,
}

/// A weighted objective; lower scores are better.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Objective {
    /// Its terms, in the order given.
    pub terms: Vec<Term>,
}

impl Objective {
    /// Parses `metric[=weight],...` (weight 1 when omitted).
    pub fn parse(text: &str) -> Result<Objective, String> {
        let mut terms: Vec<Term> = Vec::new();
        for part in text.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(format!("--objective {}: an empty term", q(text)));
            }
            let (metric, weight) = match part.split_once('=') {
                Some((m, w)) => {
                    let w: f64 = w
                        .trim()
                        .parse()
                        .ok()
                        .filter(|w: &f64| w.is_finite() && *w > 0.0)
                        .ok_or_else(|| {
                            format!(
                                "--objective {}: the weight {} is not a number > 0",
                                q(part),
                                q(w.trim())
                            )
                        })?;
                    (m.trim(), w)
                }
                None => (part, 1.0),
            };
            // Old spellings (`ttft_s.p99`) read today's name (`ttft_p99_s`).
            let metric = &*crate::metrics::canonical_metric(metric);
            if !known_metric(metric) {
                return Err(format!(
                    "--objective: {} is not a summary metric (e.g. stranded_slot_s, idle_while_queued_s, ttft_p99_s, prefix_cache_hit_rate)",
                    q(metric)
                ));
            }
            if terms.iter().any(|t| t.metric == metric) {
                return Err(format!("--objective: {} is given twice", q(metric)));
            }
            terms.push(Term {
                metric: metric.to_string(),
                weight,
                scale: 1.0,
            });
        }
        Ok(Objective { terms })
    }

    /// Sets each term's scale to `typical(metric)` (the search passes the larger of the
    /// scenario's own mean and the median of every candidate's mean on the screening
    /// seeds, so a scenario that happens to score near zero there is no divisor that
    /// blows one term up), floored at 0.01 for metrics in [0, 1] that are maximized (hit
    /// rates, Jain's index) and at 1 otherwise, so a metric at zero counts in its own unit.
    pub fn scale(&mut self, own: impl Fn(&str) -> f64) {
        for t in &mut self.terms {
            let floor = if maximize(&t.metric) { 0.01 } else { 1.0 };
            let m = own(&t.metric);
            t.scale = if m.is_finite() { m.abs().max(floor) } else { floor };
        }
    }

    /// The score of one run (its flattened metrics); NaN if a metric is missing.
    pub fn score(&self, metric: impl Fn(&str) -> Option<f64>) -> f64 {
        self.terms
            .iter()
            .map(|t| {
                let x = metric(&t.metric).unwrap_or(f64::NAN) / t.scale * t.weight;
                if maximize(&t.metric) { -x } else { x }
            })
            .sum()
    }

    /// The objective as written: `0.5 x stranded_slot_s + ... - 1 x prefix_cache_hit_rate`.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (i, t) in self.terms.iter().enumerate() {
            let sign = if maximize(&t.metric) { "-" } else { "+" };
            if i > 0 || sign == "-" {
                s.push_str(&format!(" {sign} "));
            }
            s.push_str(&format!(
                "{} x {}/{}",
                t.weight,
                t.metric,
                crate::sweep::table::fmt_stat(t.scale)
            ));
        }
        s.trim().to_string()
    }
}

/// Parses `--constraint` bounds (the `[expect]` syntax: `mean(ttft_p99_s) <= 2`; a bare
/// metric must hold on every seed).
pub fn constraints(list: &[String]) -> Result<Vec<Check>, String> {
    list.iter()
        .map(|c| expr::parse(c).map_err(|m| format!("--constraint: {m}")))
        .collect()
}

/// Parses `--pareto a,b[,c]`.
pub fn pareto_metrics(text: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = text
        .split(',')
        .map(|s| crate::metrics::canonical_metric(s.trim()).into_owned())
        .collect();
    if !(2..=3).contains(&list.len()) {
        return Err(format!("--pareto {}: give two or three metrics", q(text)));
    }
    for (i, m) in list.iter().enumerate() {
        if !known_metric(m) {
            return Err(format!("--pareto: {} is not a summary metric", q(m)));
        }
        if list[..i].contains(m) {
            return Err(format!("--pareto: {} is given twice", q(m)));
        }
    }
    Ok(list)
}

/// Indices of the points no other point dominates (at least as good on every metric and
/// better on one), in input order. `points[i][j]` is metric `j` of point `i`; `max[j]` says
/// larger is better. Points with a NaN coordinate are never on the front.
pub fn pareto_front(points: &[Vec<f64>], max: &[bool]) -> Vec<usize> {
    let better = |a: f64, b: f64, j: usize| if max[j] { a > b } else { a < b };
    let dominates = |a: &[f64], b: &[f64]| {
        (0..a.len()).all(|j| a[j] == b[j] || better(a[j], b[j], j)) && (0..a.len()).any(|j| better(a[j], b[j], j))
    };
    (0..points.len())
        .filter(|&i| points[i].iter().all(|x| x.is_finite()))
        .filter(|&i| {
            !points
                .iter()
                .any(|q| q.iter().all(|x| x.is_finite()) && dominates(q, &points[i]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_higher_jain_index_is_better() {
        assert!(maximize("request_jain_index"));
        assert!(maximize("prefix_cache_hit_rate"));
        assert!(!maximize("request_share_max_min_ratio"));
        assert!(!maximize("ttft_p99_s"));
    }

    #[test]
    fn parses_weights_and_rejects_bad_terms() {
        let o = Objective::parse(DEFAULT_OBJECTIVE).unwrap();
        assert_eq!(o.terms.len(), 5);
        assert_eq!(o.terms[4].metric, "request_jain_index");
        assert_eq!(o.terms[0].weight, 0.5);
        assert_eq!(Objective::parse("ttft_s.p99").unwrap().terms[0].weight, 1.0);
        assert!(
            Objective::parse("ttft_s.p99=0")
                .unwrap_err()
                .contains("not a number > 0")
        );
        assert!(Objective::parse("nope").unwrap_err().contains("not a summary metric"));
        assert!(Objective::parse("ttft_s.p99,ttft_s.p99").unwrap_err().contains("twice"));
        assert!(Objective::parse("ttft_s.p99,").unwrap_err().contains("empty term"));
    }

    #[test]
    fn scores_are_relative_to_the_scenario_and_signed_by_direction() {
        let mut o = Objective::parse("stranded_slot_s=0.5,ttft_s.p99=1,prefix_cache_hit_rate=1").unwrap();
        o.scale(|m| match m {
            "stranded_slot_s" => 0.0,
            "ttft_p99_s" => 4.0,
            _ => 0.5,
        });
        assert_eq!(o.terms.iter().map(|t| t.scale).collect::<Vec<_>>(), [1.0, 4.0, 0.5]);
        let s = o.score(|m| {
            Some(match m {
                "stranded_slot_s" => 10.0,
                "ttft_p99_s" => 2.0,
                _ => 0.75,
            })
        });
        // 0.5 x 10/1 + 2/4 - 0.75/0.5
        assert!((s - (5.0 + 0.5 - 1.5)).abs() < 1e-12, "{s}");
        assert!(o.score(|_| None).is_nan());
        assert_eq!(
            o.describe(),
            "0.5 x stranded_slot_s/1 + 1 x ttft_p99_s/4 - 1 x prefix_cache_hit_rate/0.5"
        );
    }

    #[test]
    fn pareto_front_keeps_the_non_dominated() {
        let pts = vec![
            vec![1.0, 5.0],
            vec![2.0, 2.0],
            vec![3.0, 3.0], // dominated by [2, 2]
            vec![5.0, 1.0],
            vec![1.0, 5.0], // a tie with point 0: neither dominates
            vec![f64::NAN, 0.0],
        ];
        assert_eq!(pareto_front(&pts, &[false, false]), [0, 1, 3, 4]);
        // Maximizing the second metric: [1, 5] dominates everything else with x >= 1.
        assert_eq!(pareto_front(&pts, &[false, true]), [0, 4]);
    }

    #[test]
    fn constraints_use_the_expect_syntax() {
        let c = constraints(&["mean(ttft_p99_s) <= 2".into()]).unwrap();
        assert_eq!(c[0].metric, "ttft_p99_s");
        assert!(
            constraints(&["ttft_s.p99".into()])
                .unwrap_err()
                .starts_with("--constraint:")
        );
        assert!(pareto_metrics("ttft_s.p99").unwrap_err().contains("two or three"));
        assert!(pareto_metrics("ttft_s.p99,ttft_s.p99").unwrap_err().contains("twice"));
    }
}
