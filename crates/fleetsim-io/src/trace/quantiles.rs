//! Nearest-rank quantiles of token counts and latencies, for `sim trace inspect`.

use serde::Serialize;

/// Quantiles of a token count.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Quantiles {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

impl Quantiles {
    /// Nearest-rank quantiles of `v` (sorted in place).
    pub fn of(v: &mut [u64]) -> Quantiles {
        if v.is_empty() {
            return Quantiles::default();
        }
        v.sort_unstable();
        let q = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Quantiles {
            mean: v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            max: v[v.len() - 1],
        }
    }
}
