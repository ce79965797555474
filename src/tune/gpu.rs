//! GPU-seconds in `sim tune`'s objective: `--gpu-weight W` adds the term `gpu_seconds=W`,
//! so a router that lets the autoscaler add replicas for nothing pays for them against the
//! latency it buys. GPU-seconds are measured where the fleet's size is decided in the run
//! (`[autoscaler]`: pod creation to deletion, times the GPUs per replica); a fixed fleet's
//! GPU-seconds are its size times the run's length, the same for every router, so a term on
//! them is refused rather than scored as noise.

/// The autoscaler's summary metrics, which only an autoscaled run has.
const AUTOSCALER_METRICS: [&str; 4] = [
    "gpu_seconds",
    "gpu_seconds_idle_while_queued",
    "cost_usd",
    "cost_per_1k_requests_usd",
];

/// `objective` with `gpu_seconds=weight` appended (when `weight` is given).
pub fn objective(objective: &str, weight: Option<f64>) -> Result<String, String> {
    let Some(w) = weight else {
        return Ok(objective.to_string());
    };
    if !(w.is_finite() && w > 0.0) {
        return Err(format!("--gpu-weight: {w} is not a number > 0"));
    }
    if objective
        .split(',')
        .any(|t| t.split('=').next().map(str::trim) == Some("gpu_seconds"))
    {
        return Err("--gpu-weight: the objective already has a gpu_seconds term; give its weight once".into());
    }
    Ok(format!("{objective},gpu_seconds={w}"))
}

/// Refuses an objective that weighs the autoscaler's GPU-seconds or cost on a scenario
/// without `[autoscaler]` (every run would score NaN).
pub fn check(objective: &str, autoscaled: bool) -> Result<(), String> {
    if autoscaled {
        return Ok(());
    }
    let term = objective
        .split(',')
        .filter_map(|t| t.split('=').next().map(str::trim))
        .find(|m| AUTOSCALER_METRICS.contains(m));
    match term {
        Some(m) => Err(format!(
            "--objective: {m} is measured with an [autoscaler] (a fixed fleet's GPU-seconds are its size times the run's length, the same for every router); add one to the scenario"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_appends_a_term_and_fixed_fleets_refuse_it() {
        assert_eq!(
            objective("ttft_p99_s", Some(0.5)).unwrap(),
            "ttft_p99_s,gpu_seconds=0.5"
        );
        assert_eq!(objective("ttft_p99_s", None).unwrap(), "ttft_p99_s");
        assert!(objective("ttft_p99_s", Some(0.0)).unwrap_err().contains("> 0"));
        assert!(objective("gpu_seconds=2", Some(1.0)).unwrap_err().contains("once"));
        let o = objective("ttft_p99_s", Some(1.0)).unwrap();
        assert!(super::super::objective::Objective::parse(&o).is_ok());
        assert!(check(&o, true).is_ok());
        assert!(check(&o, false).unwrap_err().contains("[autoscaler]"));
        assert!(check("ttft_p99_s,cost_usd=1", false).is_err());
        assert!(check("ttft_p99_s", false).is_ok());
    }
}
