//! `[[workload.groups]]` arrivals: burst, Poisson and interval processes.

use super::schema::{BurstFile, IntervalFile, PoissonFile};
use super::{FieldError, Res, from_value, secs, tag, without};
use crate::time::SimTime;
use crate::workload::Arrival;

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
