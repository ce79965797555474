//! `[slo]` (latency targets, per session group where they differ) and `[price]` (dollars
//! per GPU-hour by GPU, over the stated defaults): what `summary.json`'s attainment,
//! goodput and fleet cost are measured against.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::autoscaler::GPU_PRICES;
use super::{FieldError, Res, secs};
use fleetsim_core::backend::Label;
use fleetsim_core::metrics::{BackendPrice, SloConfig, SloTargets};

/// `[slo]`: targets for every session group, overridden per group in `[slo.groups.NAME]`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SloFile {
    /// Router arrival to first chunk, seconds.
    pub ttft_s: Option<f64>,
    /// Time per output token after the first, seconds (vLLM's benchmark definition).
    pub tpot_s: Option<f64>,
    /// Router arrival to stream end, seconds.
    pub e2e_s: Option<f64>,
    /// The share of requests that must meet their targets for the run to meet the SLO
    /// (default 0.99: a p99 target).
    pub attainment: Option<f64>,
    /// Per session group (`[[workload.groups]]` or `[[workload.traces]]` name): targets
    /// that replace the table's for that group.
    #[serde(default)]
    pub groups: BTreeMap<String, SloTargetsFile>,
}

/// `[slo.groups.NAME]`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SloTargetsFile {
    /// Router arrival to first chunk, seconds.
    pub ttft_s: Option<f64>,
    /// Time per output token after the first, seconds.
    pub tpot_s: Option<f64>,
    /// Router arrival to stream end, seconds.
    pub e2e_s: Option<f64>,
}

/// The default share of requests that must meet their targets.
pub const DEFAULT_ATTAINMENT: f64 = 0.99;

fn targets(ttft: Option<f64>, tpot: Option<f64>, e2e: Option<f64>, p: &str) -> Res<SloTargets> {
    let d = |v: Option<f64>, k: &str| v.map(|v| secs(v, &format!("{p}.{k}"), false)).transpose();
    let tpot_s = match tpot {
        Some(t) if !(t.is_finite() && t > 0.0) => {
            return Err(FieldError::new(
                format!("{p}.tpot_s"),
                format!("must be a number > 0, got {t}"),
            ));
        }
        t => t,
    };
    Ok(SloTargets {
        ttft: d(ttft, "ttft_s")?,
        tpot_s,
        e2e: d(e2e, "e2e_s")?,
    })
}

/// Validates `[slo]` against the workload's session groups (`group_names`, in workload
/// order).
pub(super) fn validate(s: &SloFile, group_names: &[String]) -> Res<SloConfig> {
    let base = targets(s.ttft_s, s.tpot_s, s.e2e_s, "slo")?;
    let attainment = s.attainment.unwrap_or(DEFAULT_ATTAINMENT);
    if !(attainment > 0.0 && attainment <= 1.0) {
        return Err(FieldError::new(
            "slo.attainment",
            format!("must be a share in (0, 1], got {attainment}"),
        ));
    }
    let mut per_group = vec![base; group_names.len()];
    for (name, g) in &s.groups {
        let p = format!("slo.groups.{name}");
        let Some(i) = group_names.iter().position(|n| n == name) else {
            return Err(FieldError::new(
                p,
                format!(
                    "no session group is named `{name}` (groups: {})",
                    group_names.join(", ")
                ),
            ));
        };
        let t = targets(g.ttft_s, g.tpot_s, g.e2e_s, &p)?;
        per_group[i] = SloTargets {
            ttft: t.ttft.or(base.ttft),
            tpot_s: t.tpot_s.or(base.tpot_s),
            e2e: t.e2e.or(base.e2e),
        };
    }
    if let Some(i) = per_group
        .iter()
        .position(|t| t.ttft.is_none() && t.tpot_s.is_none() && t.e2e.is_none())
    {
        let at = if s.groups.is_empty() {
            "slo".to_string()
        } else {
            format!("slo.groups.{}", group_names[i])
        };
        return Err(FieldError::new(
            at,
            format!("group `{}` has no target; set ttft_s, tpot_s or e2e_s", group_names[i]),
        ));
    }
    Ok(SloConfig {
        targets: per_group,
        group_names: group_names.to_vec(),
        attainment,
    })
}

/// Each backend's GPUs (its profile's TP, else 1) and the price of its GPU (its profile's,
/// else `h100`): `[price]` first, then the stated list prices.
pub(super) fn prices(price: &BTreeMap<String, f64>, labels: &[Label]) -> Res<Vec<BackendPrice>> {
    for (gpu, p) in price {
        if !(p.is_finite() && *p >= 0.0) {
            return Err(FieldError::new(
                format!("price.{gpu}"),
                format!("must be a number >= 0, got {p}"),
            ));
        }
    }
    labels
        .iter()
        .map(|l| {
            let prof = crate::profiles::find(&l.profile).ok();
            let gpus = prof.as_ref().map_or(1, |p| p.tp);
            let gpu = prof
                .as_ref()
                .map_or_else(|| "h100".to_string(), |p| p.gpu.name.to_string());
            backend_price(price, gpu, gpus)
        })
        .collect()
}

fn backend_price(price: &BTreeMap<String, f64>, gpu: String, gpus: u32) -> Res<BackendPrice> {
    if let Some((_, p)) = price.iter().find(|(g, _)| gpu.starts_with(g.as_str())) {
        return Ok(BackendPrice {
            gpus,
            gpu,
            usd_per_gpu_hour: *p,
            source: "price".into(),
        });
    }
    match GPU_PRICES.iter().find(|(g, _, _)| gpu.starts_with(g)) {
        Some((_, p, src)) => Ok(BackendPrice {
            gpus,
            gpu,
            usd_per_gpu_hour: *p,
            source: (*src).to_string(),
        }),
        None => {
            let known: Vec<&str> = GPU_PRICES.iter().map(|(g, _, _)| *g).collect();
            Err(FieldError::new(
                format!("price.{gpu}"),
                format!(
                    "no stated price for GPU `{gpu}` (known: {}); give one in [price]",
                    known.join(", ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["chat".into(), "agents".into()]
    }

    #[test]
    fn group_targets_override_the_table_and_unknown_groups_are_named() {
        let mut f = SloFile {
            ttft_s: Some(2.0),
            tpot_s: Some(0.1),
            ..Default::default()
        };
        f.groups.insert(
            "agents".into(),
            SloTargetsFile {
                ttft_s: Some(10.0),
                ..Default::default()
            },
        );
        let c = validate(&f, &names()).unwrap();
        assert_eq!(c.attainment, DEFAULT_ATTAINMENT);
        assert_eq!(c.targets[0].ttft.unwrap().as_secs_f64(), 2.0);
        assert_eq!(c.targets[1].ttft.unwrap().as_secs_f64(), 10.0);
        assert_eq!(c.targets[1].tpot_s, Some(0.1));
        f.groups.insert("batch".into(), SloTargetsFile::default());
        let e = validate(&f, &names()).unwrap_err();
        assert_eq!(e.path, "slo.groups.batch");
        assert!(e.message.contains("chat, agents"), "{}", e.message);
    }

    #[test]
    fn bad_values_name_their_key() {
        let f = SloFile {
            tpot_s: Some(-1.0),
            ..Default::default()
        };
        assert_eq!(validate(&f, &names()).unwrap_err().path, "slo.tpot_s");
        let f = SloFile {
            ttft_s: Some(1.0),
            attainment: Some(1.5),
            ..Default::default()
        };
        assert_eq!(validate(&f, &names()).unwrap_err().path, "slo.attainment");
        let e = validate(&SloFile::default(), &names()).unwrap_err();
        assert!(e.message.contains("no target"), "{}", e.message);
    }

    #[test]
    fn prices_come_from_the_table_then_the_stated_list() {
        let label = |p: &str| Label {
            profile: p.into(),
            ..Default::default()
        };
        let none = BTreeMap::new();
        let p = prices(&none, &[label(""), label("llama-3.1-8b/a100/tp2")]).unwrap();
        assert_eq!((p[0].gpu.as_str(), p[0].gpus, p[0].usd_per_gpu_hour), ("h100", 1, 3.78));
        assert_eq!((p[1].gpu.as_str(), p[1].gpus, p[1].usd_per_gpu_hour), ("a100", 2, 2.50));
        let mut over = BTreeMap::new();
        over.insert("h100".to_string(), 2.0);
        let p = prices(&over, &[label("")]).unwrap();
        assert_eq!((p[0].usd_per_gpu_hour, p[0].source.as_str()), (2.0, "price"));
        over.insert("h100".to_string(), -1.0);
        assert_eq!(prices(&over, &[label("")]).unwrap_err().path, "price.h100");
    }
}
