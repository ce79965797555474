//! The event core, router plumbing and metrics against closed-form queueing results, using
//! the plain queueing backend (Poisson arrivals, one backend, c servers, FIFO).
//!
//! Tolerances are about four standard errors of the sample mean, computed from the
//! asymptotic variance of the mean waiting time (autocorrelation included; e.g. Daley's
//! formula for M/M/1), at fixed seeds, so these tests cannot flake.

use crate::common::*;

fn mmc(customers: u32, rate: f64, slots: u32, service: &str, seed: u64) -> fleetsim::metrics::Summary {
    let text = format!(
        r#"
seed = {seed}
[backends]
count = 1
model = "queueing"
slots = {slots}
[network]
dispatch_latency_s = 0
response_latency_s = 0
[router.policy]
kind = "roundrobin"
[[workload.groups]]
name = "poisson"
sessions = {customers}
arrival = {{ kind = "poisson", rate_per_s = {rate} }}
input_tokens = 1
output_tokens = 1
service_time_s = {service}
"#
    );
    let (s, w) = inline(&text, &[]);
    let opts = fleetsim::sim::RunOptions::summary_only();
    run_with(&s, &w, opts).summary
}

/// Erlang C: probability an arrival waits in M/M/c with offered load `a = lambda / mu`.
fn erlang_c(c: u32, a: f64) -> f64 {
    let mut term = 1.0; // a^k / k!
    let mut sum = 0.0;
    for k in 0..c {
        sum += term;
        term *= a / f64::from(k + 1);
    }
    let last = term * f64::from(c) / (f64::from(c) - a);
    last / (sum + last)
}

fn assert_close(name: &str, got: f64, want: f64, rel_tol: f64) {
    let rel = (got - want).abs() / want;
    assert!(
        rel < rel_tol,
        "{name}: simulated {got:.4}, closed form {want:.4}, relative error {rel:.4} >= {rel_tol}"
    );
}

#[test]
fn mm1_half_load() {
    // lambda 0.5, mu 1: Wq = rho / (mu - lambda) = 1.0 s. Asymptotic variance of the mean
    // wait ~29 (Daley) -> standard error 0.012 at n = 200k; tolerance 5%.
    let s = mmc(200_000, 0.5, 1, "{ dist = \"exponential\", mean = 1.0 }", 11);
    assert_close("M/M/1 rho=0.5 Wq", s.queue_wait_s.mean, 1.0, 0.05);
    // Utilisation = rho: the single server is busy half the time.
    assert_close("M/M/1 utilisation", s.backends[0].busy_s / s.sim_time_s, 0.5, 0.02);
    assert_eq!(s.requests.finished, 200_000);
}

#[test]
fn mm1_high_load() {
    // lambda 0.8, mu 1: Wq = 4.0 s. Asymptotic variance ~1976 -> standard error 0.07 at
    // n = 400k (1.75%); tolerance 7%.
    let s = mmc(400_000, 0.8, 1, "{ dist = \"exponential\", mean = 1.0 }", 12);
    assert_close("M/M/1 rho=0.8 Wq", s.queue_wait_s.mean, 4.0, 0.07);
}

#[test]
fn mmc_erlang_c() {
    // c = 4, lambda = 3, mu = 1 (rho 0.75): Wq = C(4, 3) / (c mu - lambda) = 0.5094 s.
    let want = erlang_c(4, 3.0) / (4.0 - 3.0);
    assert!((want - 0.5094).abs() < 1e-3, "Erlang C sanity: {want}");
    let s = mmc(400_000, 3.0, 4, "{ dist = \"exponential\", mean = 1.0 }", 13);
    assert_close("M/M/4 Wq", s.queue_wait_s.mean, want, 0.05);
    // Mean number in service = a = 3.
    assert_close("M/M/4 mean busy servers", s.backends[0].mean_running, 3.0, 0.02);
}

#[test]
fn md1_pollaczek_khinchine() {
    // Deterministic service 1 s, lambda 0.5: Wq = rho / (2 mu (1 - rho)) = 0.5 s.
    let s = mmc(200_000, 0.5, 1, "1.0", 14);
    assert_close("M/D/1 Wq", s.queue_wait_s.mean, 0.5, 0.05);
}

#[test]
fn mg1_lognormal_service() {
    // M/G/1 (Pollaczek-Khinchine): Wq = lambda E[S^2] / (2 (1 - rho)). Lognormal with mean 1
    // and cv 0.5: E[S^2] = 1 + 0.25. lambda 0.5 -> Wq = 0.5 * 1.25 / 1 = 0.625 s.
    let s = mmc(300_000, 0.5, 1, "{ dist = \"lognormal\", mean = 1.0, cv = 0.5 }", 15);
    assert_close("M/G/1 lognormal Wq", s.queue_wait_s.mean, 0.625, 0.05);
}
