//! Bound expressions of `[expect] checks`: `[AGG(]metric[)] OP number`.
//!
//! * `metric` is a flattened summary key (`idle_while_queued_s`, `ttft_p99_s`,
//!   `backends[1].peak_waiting`; `sweep.csv` lists them all).
//! * `AGG` says how the values of the checked seeds combine: `all` (the default: every seed
//!   must satisfy the bound; the reported value is the worst one), `any` (at least one seed;
//!   the reported value is the best one),
//!   `mean`, `median`, `min`, `max`, `std`, or a quantile `pNN` (`p90`, `p99.9`; linear
//!   interpolation between closest ranks, numpy's default).
//! * `OP` is one of `<`, `<=`, `==`, `!=`, `>=`, `>`. Comparisons are exact: the simulator
//!   is deterministic, so a bound is a property of the code, not of noise.

use std::fmt;

/// How seed values combine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Agg {
    /// Every seed satisfies the bound.
    All,
    /// At least one seed does.
    Any,
    /// Arithmetic mean.
    Mean,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Sample standard deviation (0 for one seed).
    Std,
    /// Quantile as a percentage in [0, 100] (`median` is 50), kept as written so `p99.9`
    /// prints back as `p99.9`.
    Quantile(f64),
}

/// Comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>=`
    Ge,
    /// `>`
    Gt,
}

impl Op {
    fn holds(self, x: f64, bound: f64) -> bool {
        match self {
            Op::Lt => x < bound,
            Op::Le => x <= bound,
            Op::Eq => x == bound,
            Op::Ne => x != bound,
            Op::Ge => x >= bound,
            Op::Gt => x > bound,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Ge => ">=",
            Op::Gt => ">",
        }
    }
}

/// A parsed bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// Aggregate over seeds.
    pub agg: Agg,
    /// Flattened metric key.
    pub metric: String,
    /// Comparison.
    pub op: Op,
    /// Right-hand side.
    pub bound: f64,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let agg = match self.agg {
            Agg::All => String::new(),
            Agg::Any => "any".into(),
            Agg::Mean => "mean".into(),
            Agg::Min => "min".into(),
            Agg::Max => "max".into(),
            Agg::Std => "std".into(),
            Agg::Quantile(50.0) => "median".into(),
            Agg::Quantile(p) => format!("p{p}"),
        };
        if agg.is_empty() {
            write!(f, "{} {} {}", self.metric, self.op.as_str(), self.bound)
        } else {
            write!(f, "{agg}({}) {} {}", self.metric, self.op.as_str(), self.bound)
        }
    }
}

/// Parses `text`; the error says what is wrong and what is expected.
pub fn parse(text: &str) -> Result<Check, String> {
    let t = text.trim();
    let ops = ["<=", ">=", "==", "!=", "<", ">"];
    let (pos, op_text) = ops
        .iter()
        .filter_map(|o| t.find(o).map(|p| (p, *o)))
        .min_by_key(|(p, o)| (*p, std::cmp::Reverse(o.len())))
        .ok_or_else(|| format!("`{t}` has no comparison; expected e.g. `mean(idle_while_queued_s) <= 1.0`"))?;
    let op = match op_text {
        "<=" => Op::Le,
        ">=" => Op::Ge,
        "==" => Op::Eq,
        "!=" => Op::Ne,
        "<" => Op::Lt,
        _ => Op::Gt,
    };
    let lhs = t[..pos].trim();
    let rhs = t[pos + op_text.len()..].trim();
    let bound: f64 = rhs
        .parse()
        .ok()
        .filter(|b: &f64| b.is_finite())
        .ok_or_else(|| format!("`{rhs}` in `{t}` is not a finite number"))?;
    let (agg, metric) = match lhs.find('(') {
        None => (Agg::All, lhs),
        Some(i) => {
            let inner = lhs[i + 1..]
                .strip_suffix(')')
                .ok_or_else(|| format!("`{lhs}` in `{t}`: unclosed `(`"))?;
            let name = lhs[..i].trim();
            let agg = match name {
                "all" => Agg::All,
                "any" => Agg::Any,
                "mean" => Agg::Mean,
                "min" => Agg::Min,
                "max" => Agg::Max,
                "std" => Agg::Std,
                "median" => Agg::Quantile(50.0),
                q if q.starts_with('p') => {
                    let v: f64 = q[1..]
                        .parse()
                        .ok()
                        .filter(|v| (0.0..=100.0).contains(v))
                        .ok_or_else(|| format!("`{q}` in `{t}`: a quantile is p0 to p100"))?;
                    Agg::Quantile(v)
                }
                other => {
                    return Err(format!(
                        "`{other}` in `{t}` is not an aggregate; expected all, any, mean, median, min, max, std or pNN"
                    ));
                }
            };
            (agg, inner.trim())
        }
    };
    if metric.is_empty() {
        return Err(format!("`{t}` names no metric"));
    }
    if !crate::metrics::known_metric(metric) {
        return Err(format!(
            "`{metric}` in `{t}` is not a summary metric (e.g. idle_while_queued_s, ttft_p99_s, backends[1].peak_waiting)"
        ));
    }
    Ok(Check {
        agg,
        // Old spellings (`ttft_p99_s`) stay accepted; the check reads today's name.
        metric: crate::metrics::canonical_metric(metric).into_owned(),
        op,
        bound,
    })
}

/// Linear-interpolation quantile of sorted `xs`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let idx = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (idx.floor() as usize, idx.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (idx - lo as f64)
}

impl Check {
    /// Whether one seed's value satisfies the bound (what `all` asks of every seed).
    pub fn holds_for(&self, x: f64) -> bool {
        self.op.holds(x, self.bound)
    }
}

/// The value a check reports and whether the bound holds, over per-seed `values`.
/// For `all` the reported value is the worst seed in the bound's direction (the maximum
/// for `<`/`<=`, the minimum for `>`/`>=`), for `any` the best one.
pub fn evaluate(c: &Check, values: &[f64]) -> (f64, bool) {
    assert!(!values.is_empty(), "a check needs at least one run");
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    let mean = sorted.iter().sum::<f64>() / n;
    match c.agg {
        Agg::All | Agg::Any => {
            let pass = if c.agg == Agg::All {
                values.iter().all(|&x| c.op.holds(x, c.bound))
            } else {
                values.iter().any(|&x| c.op.holds(x, c.bound))
            };
            // The value that decides: for `all` the worst seed, for `any` the best, where
            // worst / best are taken in the bound's direction (for `==` / `!=`, the first
            // seed that breaks `all` or satisfies `any`, else the first seed).
            let (lo, hi) = (sorted[0], sorted[sorted.len() - 1]);
            let shown = match (c.agg, c.op) {
                (Agg::All, Op::Lt | Op::Le) | (Agg::Any, Op::Gt | Op::Ge) => hi,
                (Agg::All, Op::Gt | Op::Ge) | (Agg::Any, Op::Lt | Op::Le) => lo,
                (Agg::All, _) => values
                    .iter()
                    .copied()
                    .find(|&x| !c.op.holds(x, c.bound))
                    .unwrap_or(values[0]),
                _ => values
                    .iter()
                    .copied()
                    .find(|&x| c.op.holds(x, c.bound))
                    .unwrap_or(values[0]),
            };
            (shown, pass)
        }
        agg => {
            let v = match agg {
                Agg::Mean => mean,
                Agg::Min => sorted[0],
                Agg::Max => sorted[sorted.len() - 1],
                Agg::Std if sorted.len() > 1 => {
                    (sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
                }
                Agg::Std => 0.0,
                Agg::Quantile(p) => quantile(&sorted, p / 100.0),
                Agg::All | Agg::Any => unreachable!("handled above"),
            };
            (v, c.op.holds(v, c.bound))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_aggregates_ops_and_metrics() {
        let c = parse("mean(idle_while_queued_s) <= 1.5").unwrap();
        assert_eq!((c.agg, c.op, c.bound), (Agg::Mean, Op::Le, 1.5));
        let c = parse("backends[1].peak_waiting == 0").unwrap();
        assert_eq!(
            (c.agg, c.metric.as_str(), c.op),
            (Agg::All, "backends[1].peak_waiting", Op::Eq)
        );
        assert_eq!(parse("p99.9(ttft_p99_s)<5").unwrap().agg, Agg::Quantile(99.9));
        assert_eq!(
            parse("p99.9(ttft_p99_s)<5").unwrap().to_string(),
            "p99.9(ttft_p99_s) < 5"
        );
        assert_eq!(
            parse("median(ttft_p99_s) > 0").unwrap().to_string(),
            "median(ttft_p99_s) > 0"
        );
        assert_eq!(parse("latched_sessions != 3").unwrap().op, Op::Ne);
        // The old spelling of a percentile (unit mid-name) reads today's metric.
        assert_eq!(parse("mean(ttft_s.p99) < 5").unwrap().metric, "ttft_p99_s");
        assert_eq!(parse("max(tpot_p99_s) < 1").unwrap().metric, "tpot_p99_s");
        assert_eq!(parse(" min( stranded_slot_s ) >= 2 ").unwrap().agg, Agg::Min);
    }

    #[test]
    fn parse_errors_say_why() {
        assert!(parse("idle_while_queued_s").unwrap_err().contains("no comparison"));
        assert!(
            parse("idle_while_queued_s < x")
                .unwrap_err()
                .contains("not a finite number")
        );
        assert!(
            parse("idle_while_queued_s < inf")
                .unwrap_err()
                .contains("not a finite number")
        );
        assert!(
            parse("avg(idle_while_queued_s) < 1")
                .unwrap_err()
                .contains("not an aggregate")
        );
        assert!(
            parse("p200(idle_while_queued_s) < 1")
                .unwrap_err()
                .contains("p0 to p100")
        );
        assert!(parse("mean(idle_while_queued_s < 1").unwrap_err().contains("unclosed"));
        assert!(parse("idle_s < 1").unwrap_err().contains("not a summary metric"));
        assert!(parse("< 1").unwrap_err().contains("names no metric"));
    }

    #[test]
    fn evaluates_over_seeds() {
        let xs = [1.0, 4.0, 2.0, 3.0];
        let e = |s: &str| evaluate(&parse(s).unwrap(), &xs);
        assert_eq!(e("mean(idle_while_queued_s) == 2.5"), (2.5, true));
        assert_eq!(e("max(idle_while_queued_s) < 4"), (4.0, false));
        assert_eq!(e("min(idle_while_queued_s) >= 1"), (1.0, true));
        assert_eq!(e("median(idle_while_queued_s) == 2.5"), (2.5, true));
        assert_eq!(e("p100(idle_while_queued_s) == 4"), (4.0, true));
        let (sd, _) = e("std(idle_while_queued_s) > 0");
        assert!((sd - 1.2909944487).abs() < 1e-9);
        // all: the worst seed is reported; a failure reports the first failing seed.
        assert_eq!(e("idle_while_queued_s <= 4"), (4.0, true));
        assert_eq!(e("idle_while_queued_s < 3"), (4.0, false));
        assert_eq!(e("idle_while_queued_s >= 2"), (1.0, false));
        // any: one seed is enough; the best seed is reported.
        assert_eq!(e("any(idle_while_queued_s) > 3.5"), (4.0, true));
        assert_eq!(e("any(idle_while_queued_s) > 9"), (4.0, false));
        assert_eq!(e("any(idle_while_queued_s) < 2"), (1.0, true));
        assert_eq!(
            e("idle_while_queued_s != 2"),
            (2.0, false),
            "the first seed that breaks it"
        );
    }
}
