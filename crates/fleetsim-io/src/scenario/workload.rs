//! `[[workload.groups]]` arrivals (burst, Poisson and interval processes) and the service
//! time that queueing backends need, for groups and traces alike.

use super::schema::{BurstFile, IntervalFile, PoissonFile};
use super::{FieldError, Res, dist, from_value, secs, tag, without};
use fleetsim_core::dist::Dist;
use fleetsim_core::time::SimTime;
use fleetsim_core::workload::Arrival;

pub(super) const ARRIVAL_KINDS: &str = "burst, poisson, interval";

pub(super) fn arrival(v: &toml::Value, path: &str) -> Res<Arrival> {
    let Some(t) = v.as_table() else {
        return Err(FieldError::new(
            path,
            "expected a table such as { kind = \"burst\", at_s = 30, spread_s = 2 }".to_string(),
        ));
    };
    let kind = tag(t, "kind", path, ARRIVAL_KINDS)?;
    let rest = without(t, "kind");
    match kind {
        "burst" => {
            let b: BurstFile = from_value(&rest, path)?;
            Ok(Arrival::Burst {
                at: SimTime(secs(b.at_s, &format!("{path}.at_s"), true)?.0),
                spread: secs(b.spread_s, &format!("{path}.spread_s"), true)?,
            })
        }
        "poisson" => {
            let p: PoissonFile = from_value(&rest, path)?;
            if !(p.rate_per_s.is_finite() && p.rate_per_s > 0.0) {
                return Err(FieldError::new(
                    format!("{path}.rate_per_s"),
                    format!("must be > 0, got {}", p.rate_per_s),
                ));
            }
            Ok(Arrival::Poisson {
                start: SimTime(secs(p.start_s, &format!("{path}.start_s"), true)?.0),
                rate_per_s: p.rate_per_s,
            })
        }
        "interval" => {
            let p: IntervalFile = from_value(&rest, path)?;
            Ok(Arrival::Interval {
                start: SimTime(secs(p.start_s, &format!("{path}.start_s"), true)?.0),
                every: secs(p.every_s, &format!("{path}.every_s"), false)?,
            })
        }
        other => Err(FieldError::new(
            format!("{path}.kind"),
            format!("unknown arrival `{other}`; expected one of {ARRIVAL_KINDS}"),
        )),
    }
}

/// `service_time_s` of a group or trace at `path`: required by queueing backends, refused by
/// vLLM ones (whose service time comes from the step-time model).
pub(super) fn service_time(v: Option<&toml::Value>, queueing: bool, path: &str) -> Res<Option<Dist>> {
    match (v, queueing) {
        (Some(v), true) => Ok(Some(dist(v, &format!("{path}.service_time_s"))?)),
        (None, true) => Err(FieldError::new(
            path,
            "queueing backends need `service_time_s` (a distribution in seconds)",
        )),
        (Some(_), false) => Err(FieldError::new(
            format!("{path}.service_time_s"),
            "only applies to backends.model = \"queueing\"; vLLM service time comes from the step-time model",
        )),
        (None, false) => Ok(None),
    }
}
