//! Timed events and faults: `[[router_events]]`, `[[fleet_events]]`, `[client]` retries and
//! `[[faults]]`.

use super::schema::{ClientFile, FaultFile, FleetEventFile, RouterEventFile};
use super::{FieldError, Res, count, secs};
use fleetsim_core::time::SimTime;

pub(super) fn router_events(list: &[RouterEventFile], replicas: u32) -> Res<Vec<(SimTime, Option<u16>)>> {
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let at = |k: &str| format!("router_events[{i}].{k}");
        if e.kind != "restart" {
            return Err(FieldError::new(
                at("kind"),
                format!("unknown router event `{}`; expected `restart`", e.kind),
            ));
        }
        let replica = match e.replica {
            None => None,
            Some(r) if r >= 0 && r < i64::from(replicas) => Some(r as u16),
            Some(r) => {
                return Err(FieldError::new(
                    at("replica"),
                    format!("replica {r} does not exist (router.replicas = {replicas}, indices from 0)"),
                ));
            }
        };
        out.push((SimTime(secs(e.at_s, &at("at_s"), true)?.0), replica));
    }
    Ok(out)
}

pub(super) fn fleet_events(list: &[FleetEventFile], n_backends: u32) -> Res<Vec<fleetsim_core::fleet::FleetEvent>> {
    use fleetsim_core::fleet::{FleetEvent, FleetEventKind};
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let at = |k: &str| format!("fleet_events[{i}].{k}");
        let backend = backend_index(e.backend, n_backends, &at("backend"))?;
        let kind = match e.kind.as_str() {
            "restart" => FleetEventKind::Restart {
                downtime: secs(e.downtime_s.unwrap_or(0.0), &at("downtime_s"), true)?,
            },
            k @ ("join" | "leave" | "drain") => {
                if e.downtime_s.is_some() {
                    return Err(FieldError::new(
                        at("downtime_s"),
                        "`downtime_s` applies only to kind = \"restart\"",
                    ));
                }
                match k {
                    "join" => FleetEventKind::Join,
                    "leave" => FleetEventKind::Leave,
                    _ => FleetEventKind::Drain,
                }
            }
            other => {
                return Err(FieldError::new(
                    at("kind"),
                    format!("unknown fleet event `{other}`; expected join, leave, drain or restart"),
                ));
            }
        };
        out.push(FleetEvent {
            at: SimTime(secs(e.at_s, &at("at_s"), true)?.0),
            backend,
            kind,
        });
    }
    fleetsim_core::fleet::initial_membership(&out, n_backends as usize)
        .map_err(|(i, m)| FieldError::new(format!("fleet_events[{i}]"), m))?;
    Ok(out)
}

pub(super) fn client(c: &ClientFile) -> Res<fleetsim_core::fleet::ClientConfig> {
    let max_retries = count(c.max_retries, "client.max_retries", 0)?;
    if max_retries > 100 {
        return Err(FieldError::new(
            "client.max_retries",
            format!("must be at most 100, got {max_retries}"),
        ));
    }
    let initial = secs(c.retry_initial_delay_s, "client.retry_initial_delay_s", true)?;
    let max = secs(c.retry_max_delay_s, "client.retry_max_delay_s", true)?;
    if max < initial {
        return Err(FieldError::new(
            "client.retry_max_delay_s",
            "must be at least client.retry_initial_delay_s",
        ));
    }
    Ok(fleetsim_core::fleet::ClientConfig {
        max_retries,
        retry_initial_delay: initial,
        retry_max_delay: max,
    })
}

/// A backend index given in a scenario table.
pub(super) fn backend_index(v: i64, n_backends: u32, path: &str) -> Res<fleetsim_core::ids::BackendId> {
    if v < 0 || v >= i64::from(n_backends) {
        return Err(FieldError::new(
            path,
            format!("backend {v} does not exist (backends.count = {n_backends}, indices from 0)"),
        ));
    }
    Ok(fleetsim_core::ids::BackendId::from_index(v as usize))
}

pub(super) fn faults(list: &[FaultFile], n_backends: u32) -> Res<Vec<fleetsim_core::faults::Fault>> {
    use fleetsim_core::faults::{Fault, FaultKind};
    let mut out = Vec::new();
    for (i, f) in list.iter().enumerate() {
        let at = |k: &str| format!("faults[{i}].{k}");
        let backend = backend_index(f.backend, n_backends, &at("backend"))?;
        let only = |key: &str, given: bool, kinds: &str| -> Res<()> {
            if given {
                Err(FieldError::new(at(key), format!("`{key}` applies only to {kinds}")))
            } else {
                Ok(())
            }
        };
        let kind = match f.kind.as_str() {
            "scrape_fail" | "scrape_hang" | "zero_stats" | "frozen_stats" => {
                only("lag_s", f.lag_s.is_some(), "kind = \"extra_lag\"")?;
                only("factor", f.factor.is_some(), "kind = \"slowdown\"")?;
                match f.kind.as_str() {
                    "scrape_fail" => FaultKind::ScrapeFail,
                    "scrape_hang" => FaultKind::ScrapeHang,
                    "zero_stats" => FaultKind::ZeroStats,
                    _ => FaultKind::FrozenStats,
                }
            }
            "extra_lag" => {
                only("factor", f.factor.is_some(), "kind = \"slowdown\"")?;
                let l = f
                    .lag_s
                    .ok_or_else(|| FieldError::new(at("lag_s"), "extra_lag needs `lag_s`"))?;
                FaultKind::ExtraLag(secs(l, &at("lag_s"), false)?)
            }
            "slowdown" => {
                only("lag_s", f.lag_s.is_some(), "kind = \"extra_lag\"")?;
                let x = f
                    .factor
                    .ok_or_else(|| FieldError::new(at("factor"), "slowdown needs `factor`"))?;
                if !(x.is_finite() && x > 0.0 && x <= 1000.0) {
                    return Err(FieldError::new(at("factor"), format!("must be in (0, 1000], got {x}")));
                }
                FaultKind::Slowdown(x)
            }
            other => {
                return Err(FieldError::new(
                    at("kind"),
                    format!(
                        "unknown fault `{other}`; expected scrape_fail, scrape_hang, zero_stats, frozen_stats, extra_lag or slowdown"
                    ),
                ));
            }
        };
        let from = SimTime(secs(f.from_s, &at("from_s"), true)?.0);
        let until = match f.until_s {
            Some(u) => SimTime(secs(u, &at("until_s"), true)?.0),
            None => SimTime(u64::MAX),
        };
        if until <= from {
            return Err(FieldError::new(at("until_s"), "must be after from_s"));
        }
        out.push(Fault {
            backend,
            kind,
            from,
            until,
        });
    }
    Ok(out)
}
