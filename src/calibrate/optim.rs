//! Nelder-Mead (argmin) over a closure, in rounds: each round restarts a simplex around
//! the previous round's best with a smaller step (a restart escapes the collapsed
//! simplices a piecewise-constant loss, as a replay's, can leave). Deterministic.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, anyhow};
use argmin::core::{CostFunction, Executor, State};
use argmin::solver::neldermead::NelderMead;

/// A minimisation's result.
#[derive(Clone, Debug)]
pub struct Minimum {
    /// The best point.
    pub x: Vec<f64>,
    /// Its cost.
    pub cost: f64,
    /// Cost evaluations.
    pub evaluations: u64,
    /// Iterations over all rounds.
    pub iterations: u64,
}

/// One round: iterations and the simplex's step (in the units of `x`).
#[derive(Clone, Copy, Debug)]
pub struct Round {
    /// Most iterations.
    pub iterations: u64,
    /// Each vertex is the start plus this along one axis.
    pub step: f64,
}

struct Problem<'a> {
    cost: &'a (dyn Fn(&[f64]) -> f64 + Sync),
    evaluations: AtomicU64,
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Self::Param) -> std::result::Result<f64, argmin::core::Error> {
        self.evaluations.fetch_add(1, Ordering::Relaxed);
        Ok((self.cost)(x))
    }
}

/// Minimises `cost` from `start` in `rounds`, stopping a round when the simplex's costs'
/// standard deviation falls below `sd_tolerance`.
pub fn minimize(
    cost: &(dyn Fn(&[f64]) -> f64 + Sync),
    start: Vec<f64>,
    rounds: &[Round],
    sd_tolerance: f64,
) -> Result<Minimum> {
    let mut problem = Problem {
        cost,
        evaluations: AtomicU64::new(0),
    };
    let mut best = start;
    let mut best_cost = f64::INFINITY;
    let mut iterations = 0;
    for r in rounds {
        let mut simplex = vec![best.clone()];
        for i in 0..best.len() {
            let mut v = best.clone();
            v[i] += r.step;
            simplex.push(v);
        }
        let solver = NelderMead::new(simplex)
            .with_sd_tolerance(sd_tolerance)
            .map_err(|e| anyhow!("{e}"))?;
        let res = Executor::new(problem, solver)
            .configure(|s| s.max_iters(r.iterations))
            .timer(false)
            .run()
            .map_err(|e| anyhow!("the fit failed: {e}"))?;
        iterations += res.state().get_iter();
        let cost = res.state().get_best_cost();
        if cost <= best_cost {
            best = res
                .state()
                .get_best_param()
                .cloned()
                .context("the optimiser returned no parameters")?;
            best_cost = cost;
        }
        problem = res.problem.problem.context("the optimiser kept the problem")?;
    }
    Ok(Minimum {
        x: best,
        cost: best_cost,
        evaluations: problem.evaluations.load(Ordering::Relaxed),
        iterations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_quadratic_minimum() {
        let f = |x: &[f64]| (x[0] - 1.0).powi(2) + 3.0 * (x[1] + 2.0).powi(2);
        let m = minimize(
            &f,
            vec![0.0, 0.0],
            &[
                Round {
                    iterations: 200,
                    step: 0.5,
                },
                Round {
                    iterations: 100,
                    step: 0.1,
                },
            ],
            1e-12,
        )
        .unwrap();
        assert!((m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] + 2.0).abs() < 1e-4, "{:?}", m.x);
        assert!(m.evaluations > 10 && m.iterations > 5);
    }
}
