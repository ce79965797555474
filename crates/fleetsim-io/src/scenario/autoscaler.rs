//! `[autoscaler]`: a Kubernetes HPA or a KEDA ScaledObject over the fleet, with the keys
//! the real objects have (camelCase names in snake_case, seconds suffixed `_s`) and their
//! upstream defaults. The scenario's backends are the replicas at time zero; the fleet is
//! extended to `max_replicas` backends like the last one, absent until a scale-up creates
//! their pods.

use schemars::JsonSchema;
use serde::Deserialize;

use super::backends::Fleet;
use super::{FieldError, Res, count, secs};
use fleetsim_core::autoscale::hpa::{Behavior, HpaSpec, MetricTarget, Policy, PolicyKind, Rules, Select};
use fleetsim_core::autoscale::keda::KedaSpec;
use fleetsim_core::autoscale::query::Query;
use fleetsim_core::autoscale::{AutoscalerConfig, Discovery, Kind, Price};
use fleetsim_core::time::SimDuration;

/// `[autoscaler]`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AutoscalerFile {
    /// `hpa` (a HorizontalPodAutoscaler on a Prometheus metric through prometheus-adapter)
    /// or `keda` (a ScaledObject with one Prometheus trigger).
    pub kind: String,
    /// PromQL over vLLM's series: `[sum|avg|max|min|count](vllm:<gauge>{label="v"})`.
    pub query: String,
    /// HPA: the metric target.
    pub target: Option<f64>,
    /// KEDA: the trigger's `threshold`.
    pub threshold: Option<f64>,
    /// `AverageValue` (default) or `Value`.
    pub metric_type: Option<String>,
    /// KEDA: `activationThreshold` (default 0).
    pub activation_threshold: Option<f64>,
    /// `minReplicas` (HPA, default 1) / `minReplicaCount` (KEDA, default 0).
    pub min_replicas: Option<i64>,
    /// `maxReplicas` (HPA, required) / `maxReplicaCount` (KEDA, default 100).
    pub max_replicas: Option<i64>,
    /// KEDA: `pollingInterval` (default 30).
    pub polling_interval_s: Option<f64>,
    /// KEDA: `cooldownPeriod`, towards zero only (default 300).
    pub cooldown_s: Option<f64>,
    /// KEDA: `initialCooldownPeriod` (default 0).
    pub initial_cooldown_s: Option<f64>,
    /// KEDA: `idleReplicaCount` (only 0 is useful).
    pub idle_replica_count: Option<i64>,
    /// KEDA: the trigger's `ignoreNullValues` (default true).
    pub ignore_null_values: Option<bool>,
    /// KEDA: `fallback`.
    pub fallback: Option<FallbackFile>,
    /// kube-controller-manager's sync period (default 15).
    pub sync_period_s: Option<f64>,
    /// `--horizontal-pod-autoscaler-tolerance`, both directions (default 0.1).
    pub tolerance: Option<f64>,
    /// `--horizontal-pod-autoscaler-downscale-stabilization` (default 300).
    pub downscale_stabilization_s: Option<f64>,
    /// `spec.behavior` (KEDA: `advanced.horizontalPodAutoscalerConfig.behavior`). Absent:
    /// the legacy path; present, even empty: the policy path with the API's defaults.
    pub behavior: Option<BehaviorFile>,
    /// Prometheus' scrape interval (default 30, production-stack's ServiceMonitor).
    pub scrape_interval_s: Option<f64>,
    /// Prometheus' lookback delta (default 300).
    pub lookback_s: Option<f64>,
    /// Pod creation to Ready (default: `pod_start_s + weights_gb / load_gbps +
    /// engine_init_s`, then the chart's probes).
    pub startup_s: Option<f64>,
    /// Default start-up: scheduling and image check (default 10).
    pub pod_start_s: Option<f64>,
    /// Default start-up: the weights, GB (default: the profile's model, else 16.06,
    /// Llama-3.1-8B in bf16).
    pub weights_gb: Option<f64>,
    /// Default start-up: weight load bandwidth, GB/s (default 0.9, a warm page cache).
    pub load_gbps: Option<f64>,
    /// Default start-up: compile, CUDA graphs, KV allocation (default 64, warm caches).
    pub engine_init_s: Option<f64>,
    /// `terminationGracePeriodSeconds` (default 30).
    pub grace_s: Option<f64>,
    /// vLLM `--shutdown-timeout` (default 0: in-flight requests are cut at once).
    pub drain_s: Option<f64>,
    /// The router's discovery: `kubernetes` (default) or `static` (never lists new pods).
    pub discovery: Option<String>,
    /// The series' `model_name` label (default `model`).
    pub model_name: Option<String>,
    /// GPUs per replica (default: the profile's TP, else 1).
    pub gpus_per_replica: Option<i64>,
    /// The GPU, for its price (default: the profile's, else `h100`).
    pub gpu: Option<String>,
    /// Price per GPU-hour, dollars (default: the GPU's stated on-demand price).
    pub usd_per_gpu_hour: Option<f64>,
}

/// KEDA's `fallback`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FallbackFile {
    /// `failureThreshold`.
    pub failure_threshold: i64,
    /// `replicas`.
    pub replicas: i64,
}

/// `behavior`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BehaviorFile {
    /// `scaleUp`.
    pub scale_up: Option<RulesFile>,
    /// `scaleDown`.
    pub scale_down: Option<RulesFile>,
}

/// `scaleUp` / `scaleDown`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RulesFile {
    /// `stabilizationWindowSeconds`.
    pub stabilization_window_s: Option<f64>,
    /// `selectPolicy`: `Max`, `Min`, `Disabled`.
    pub select_policy: Option<String>,
    /// `policies` (replace the defaults entirely).
    pub policies: Option<Vec<PolicyFile>>,
}

/// One scaling policy.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    /// `Pods` or `Percent`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `value`.
    pub value: i64,
    /// `periodSeconds`.
    pub period_s: f64,
}

/// On-demand list prices per GPU-hour, stated (overridable with `usd_per_gpu_hour`).
pub const GPU_PRICES: [(&str, f64, &str); 4] = [
    ("h100", 3.78, "Lambda 1x H100 SXM on-demand, May 2026"),
    ("a100", 2.50, "Modal A100 80GB, May 2026"),
    ("l40s", 1.95, "Modal L40S, May 2026"),
    ("l4", 0.80, "Modal L4, May 2026"),
];

const P: &str = "autoscaler";

fn at(k: &str) -> String {
    format!("{P}.{k}")
}

fn opt_secs(v: Option<f64>, key: &str, default: f64, allow_zero: bool) -> Res<SimDuration> {
    secs(v.unwrap_or(default), &at(key), allow_zero)
}

/// Validates `[autoscaler]` and extends `fleet` to its pool.
pub(super) fn validate(a: &AutoscalerFile, fleet: &mut Fleet) -> Res<AutoscalerConfig> {
    let keda = match a.kind.as_str() {
        "keda" => true,
        "hpa" => false,
        other => {
            return Err(FieldError::new(
                at("kind"),
                format!("unknown autoscaler `{other}`; expected hpa or keda"),
            ));
        }
    };
    let query = Query::parse(&a.query).map_err(|m| FieldError::new(at("query"), m))?;
    let only = |key: &str, given: bool, kind: &str| -> Res<()> {
        if given {
            Err(FieldError::new(at(key), format!("applies only to kind = \"{kind}\"")))
        } else {
            Ok(())
        }
    };
    if keda {
        only("target", a.target.is_some(), "hpa")?;
    } else {
        only("threshold", a.threshold.is_some(), "keda")?;
        for (k, given) in [
            ("activation_threshold", a.activation_threshold.is_some()),
            ("polling_interval_s", a.polling_interval_s.is_some()),
            ("cooldown_s", a.cooldown_s.is_some()),
            ("initial_cooldown_s", a.initial_cooldown_s.is_some()),
            ("idle_replica_count", a.idle_replica_count.is_some()),
            ("ignore_null_values", a.ignore_null_values.is_some()),
            ("fallback", a.fallback.is_some()),
        ] {
            only(k, given, "keda")?;
        }
    }
    let initial = fleet.names.len() as u32;
    let (min, max) = replica_bounds(a, keda, initial)?;
    let hpa = hpa_spec(a, keda, min, max)?;
    let kind = if keda {
        Kind::Keda(keda_spec(a, min)?)
    } else {
        Kind::Hpa
    };
    let (gpus, price) = price(a, fleet)?;
    let cfg = AutoscalerConfig {
        kind,
        query,
        hpa,
        initial_replicas: initial,
        sync_period: opt_secs(a.sync_period_s, "sync_period_s", 15.0, false)?,
        polling_interval: opt_secs(a.polling_interval_s, "polling_interval_s", 30.0, false)?,
        scrape_interval: opt_secs(a.scrape_interval_s, "scrape_interval_s", 30.0, false)?,
        lookback: opt_secs(a.lookback_s, "lookback_s", 300.0, false)?,
        startup: startup(a, fleet)?,
        grace: opt_secs(a.grace_s, "grace_s", 30.0, true)?,
        drain: opt_secs(a.drain_s, "drain_s", 0.0, true)?,
        discovery: match a.discovery.as_deref().unwrap_or("kubernetes") {
            "kubernetes" | "k8s" => Discovery::Kubernetes,
            "static" => Discovery::Static,
            other => {
                return Err(FieldError::new(
                    at("discovery"),
                    format!("unknown discovery `{other}`; expected kubernetes or static"),
                ));
            }
        },
        model_name: a.model_name.clone().unwrap_or_else(|| "model".into()),
        gpus_per_replica: gpus,
        price,
    };
    fleet.extend_to(max.max(initial));
    Ok(cfg)
}

/// `(min, max)`: KEDA's `minReplicaCount` may be 0; the pool holds `max` at most 4096.
fn replica_bounds(a: &AutoscalerFile, keda: bool, initial: u32) -> Res<(u32, u32)> {
    let min = count(
        a.min_replicas.unwrap_or(if keda { 0 } else { 1 }),
        &at("min_replicas"),
        if keda { 0 } else { 1 },
    )?;
    let max = match a.max_replicas {
        Some(m) => count(m, &at("max_replicas"), 1)?,
        None if keda => 100,
        None => return Err(FieldError::new(at("max_replicas"), "an HPA needs `max_replicas`")),
    };
    if max > 4096 {
        return Err(FieldError::new(
            at("max_replicas"),
            format!("{max} is above the supported 4096"),
        ));
    }
    if min > max {
        return Err(FieldError::new(
            at("min_replicas"),
            format!("{min} is above max_replicas = {max}"),
        ));
    }
    if initial > max {
        return Err(FieldError::new(
            at("max_replicas"),
            format!("{max} is below the {initial} backends the scenario starts with"),
        ));
    }
    Ok((min, max))
}

fn hpa_spec(a: &AutoscalerFile, keda: bool, min: u32, max: u32) -> Res<HpaSpec> {
    let (key, v) = if keda {
        ("threshold", a.threshold)
    } else {
        ("target", a.target)
    };
    let target = v.ok_or_else(|| FieldError::new(at(key), format!("kind = \"{}\" needs `{key}`", a.kind)))?;
    if !(target.is_finite() && target > 0.0 && target < 1e12) {
        return Err(FieldError::new(
            at(key),
            format!("must be a positive number, got {target}"),
        ));
    }
    let metric_target = match a.metric_type.as_deref().unwrap_or("AverageValue") {
        "AverageValue" => MetricTarget::AverageValue,
        "Value" => MetricTarget::Value,
        other => {
            return Err(FieldError::new(
                at("metric_type"),
                format!("`{other}` is not supported; expected AverageValue or Value (KEDA rejects Utilization)"),
            ));
        }
    };
    let tol = a.tolerance.unwrap_or(0.1);
    if !(0.0..1.0).contains(&tol) {
        return Err(FieldError::new(
            at("tolerance"),
            format!("must be in [0, 1), got {tol}"),
        ));
    }
    let down = opt_secs(a.downscale_stabilization_s, "downscale_stabilization_s", 300.0, true)?;
    Ok(HpaSpec {
        min_replicas: if keda { min.max(1) } else { min },
        max_replicas: max,
        target,
        metric_target,
        tolerance_down: tol,
        tolerance_up: tol,
        downscale_stabilization: down,
        behavior: a.behavior.as_ref().map(|b| behavior(b, down)).transpose()?,
    })
}

fn behavior(b: &BehaviorFile, down: SimDuration) -> Res<Behavior> {
    let mut out = Behavior::defaults(down);
    if let Some(r) = &b.scale_up {
        rules(r, &mut out.scale_up, "behavior.scale_up")?;
    }
    if let Some(r) = &b.scale_down {
        rules(r, &mut out.scale_down, "behavior.scale_down")?;
    }
    Ok(out)
}

/// One direction's rules over the defaults (a `policies` list replaces them whole).
fn rules(r: &RulesFile, out: &mut Rules, path: &str) -> Res<()> {
    if let Some(w) = r.stabilization_window_s {
        if w > 3600.0 {
            return Err(FieldError::new(
                at(&format!("{path}.stabilization_window_s")),
                "must be at most 3600",
            ));
        }
        out.window = secs(w, &at(&format!("{path}.stabilization_window_s")), true)?;
    }
    if let Some(s) = &r.select_policy {
        out.select = match s.as_str() {
            "Max" => Select::Max,
            "Min" => Select::Min,
            "Disabled" => Select::Disabled,
            other => {
                return Err(FieldError::new(
                    at(&format!("{path}.select_policy")),
                    format!("unknown `{other}`; expected Max, Min or Disabled"),
                ));
            }
        };
    }
    if let Some(ps) = &r.policies {
        out.policies = Vec::new();
        for (i, p) in ps.iter().enumerate() {
            let key = |k: &str| at(&format!("{path}.policies[{i}].{k}"));
            let kind = match p.kind.as_str() {
                "Pods" => PolicyKind::Pods,
                "Percent" => PolicyKind::Percent,
                other => {
                    return Err(FieldError::new(
                        key("type"),
                        format!("unknown `{other}`; expected Pods or Percent"),
                    ));
                }
            };
            if !(p.period_s > 0.0 && p.period_s <= 1800.0) {
                return Err(FieldError::new(
                    key("period_s"),
                    format!("must be in (0, 1800], got {}", p.period_s),
                ));
            }
            out.policies.push(Policy {
                kind,
                value: count(p.value, &key("value"), 1)?,
                period: secs(p.period_s, &key("period_s"), false)?,
            });
        }
    }
    Ok(())
}

fn keda_spec(a: &AutoscalerFile, min: u32) -> Res<KedaSpec> {
    let act = a.activation_threshold.unwrap_or(0.0);
    if !act.is_finite() {
        return Err(FieldError::new(at("activation_threshold"), "must be a finite number"));
    }
    let fallback = match &a.fallback {
        Some(f) => Some((
            count(f.failure_threshold, &at("fallback.failure_threshold"), 0)?,
            count(f.replicas, &at("fallback.replicas"), 0)?,
        )),
        None => None,
    };
    Ok(KedaSpec {
        min_replicas: min,
        idle_replicas: a
            .idle_replica_count
            .map(|v| count(v, &at("idle_replica_count"), 0))
            .transpose()?,
        cooldown: opt_secs(a.cooldown_s, "cooldown_s", 300.0, true)?,
        initial_cooldown: opt_secs(a.initial_cooldown_s, "initial_cooldown_s", 0.0, true)?,
        activation_threshold: act,
        ignore_null_values: a.ignore_null_values.unwrap_or(true),
        fallback,
    })
}

/// The start-up: given, or `pod_start_s + weights_gb / load_gbps + engine_init_s` for the
/// server to answer, then production-stack's probes (startup: 15 s delay, every 10 s;
/// readiness: every 5 s): Ready at `15 + 10 ceil((up - 15) / 10) + 5`.
fn startup(a: &AutoscalerFile, fleet: &Fleet) -> Res<SimDuration> {
    if let Some(s) = a.startup_s {
        for k in ["pod_start_s", "weights_gb", "load_gbps", "engine_init_s"] {
            let given = match k {
                "pod_start_s" => a.pod_start_s.is_some(),
                "weights_gb" => a.weights_gb.is_some(),
                "load_gbps" => a.load_gbps.is_some(),
                _ => a.engine_init_s.is_some(),
            };
            if given {
                return Err(FieldError::new(at(k), "applies only when startup_s is not given"));
            }
        }
        return secs(s, &at("startup_s"), true);
    }
    let weights = a
        .weights_gb
        .unwrap_or_else(|| profile(fleet).map_or(16.06, |p| p.model.weight_bytes() as f64 / 1e9));
    let positive = |v: f64, k: &str| -> Res<f64> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(FieldError::new(at(k), format!("must be a positive number, got {v}")))
        }
    };
    let weights = positive(weights, "weights_gb")?;
    let gbps = positive(a.load_gbps.unwrap_or(0.9), "load_gbps")?;
    let pod = opt_secs(a.pod_start_s, "pod_start_s", 10.0, true)?.as_secs_f64();
    let init = opt_secs(a.engine_init_s, "engine_init_s", 64.0, true)?.as_secs_f64();
    secs(probed_ready_s(pod + weights / gbps + init), &at("startup_s"), true)
}

/// Ready time on the chart's probe grid for a server up at `up_s`.
pub fn probed_ready_s(up_s: f64) -> f64 {
    15.0 + 10.0 * ((up_s - 15.0).max(0.0) / 10.0).ceil() + 5.0
}

/// The last backend's profile, if it names a shipped one.
fn profile(fleet: &Fleet) -> Option<crate::profiles::Profile> {
    let id = &fleet.labels.last()?.profile;
    crate::profiles::find(id).ok()
}

/// GPUs per replica and the price per GPU-hour.
fn price(a: &AutoscalerFile, fleet: &Fleet) -> Res<(u32, Price)> {
    let prof = profile(fleet);
    let gpus = match a.gpus_per_replica {
        Some(g) => count(g, &at("gpus_per_replica"), 1)?,
        None => prof.as_ref().map_or(1, |p| p.tp),
    };
    let gpu = a
        .gpu
        .clone()
        .or_else(|| prof.as_ref().map(|p| p.gpu.name.to_string()))
        .unwrap_or_else(|| "h100".into());
    let listed = GPU_PRICES.iter().find(|(g, _, _)| gpu.starts_with(g));
    let price = match (a.usd_per_gpu_hour, listed) {
        (Some(p), _) if p.is_finite() && p >= 0.0 => Price {
            gpu,
            usd_per_gpu_hour: p,
            source: "autoscaler.usd_per_gpu_hour".into(),
        },
        (Some(p), _) => {
            return Err(FieldError::new(
                at("usd_per_gpu_hour"),
                format!("must be a number >= 0, got {p}"),
            ));
        }
        (None, Some((_, p, src))) => Price {
            gpu,
            usd_per_gpu_hour: *p,
            source: (*src).to_string(),
        },
        (None, None) => {
            let known: Vec<&str> = GPU_PRICES.iter().map(|(g, _, _)| *g).collect();
            return Err(FieldError::new(
                at("usd_per_gpu_hour"),
                format!(
                    "no stated price for GPU `{gpu}` (known: {}); give usd_per_gpu_hour",
                    known.join(", ")
                ),
            ));
        }
    };
    Ok((gpus, price))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_startup_is_about_a_hundred_seconds_for_8b() {
        // 10 + 16.06 / 0.9 + 64 = 91.8 s up, Ready on the probe grid at 100 s.
        let up = 10.0 + 16.06 / 0.9 + 64.0;
        assert_eq!(probed_ready_s(up), 100.0);
        assert_eq!(probed_ready_s(3.0), 20.0, "the first probe is at 15 s");
    }
}
