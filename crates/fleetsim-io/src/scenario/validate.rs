//! The whole-file validation: each section through its validator, then the cross-section
//! checks and the memory preflight, into a runnable [`super::Scenario`].

use std::collections::BTreeSet;

use super::events::{client, faults, fleet_events, router_events};
use super::schema::{GroupFile, RouterFile, ScenarioFile, TraceFile};
use super::traces::trace_group;
use super::workload::{arrival, service_time};
use super::{FieldError, Res, Scenario, backends, count, count_within, counts, dist, secs};
use crate::trace::TraceGroupConfig;
use fleetsim_core::dist::Dist;
use fleetsim_core::policy::kind::Fleet;
use fleetsim_core::router::RouterConfig;
use fleetsim_core::sim::{BackendModel, FrontBalancer, SimConfig};
use fleetsim_core::time::SimTime;
use fleetsim_core::workload::GroupConfig;

/// `checked!(Config { field: check, .. })`: the config when every field's check passed,
/// else `None`. Each check is an `Option`: `None` where it failed (its error kept) or where
/// a section it needs failed. The checks run in the order written whatever the earlier
/// ones gave, so one pass finds the first error of every key; a check may use the fields
/// written before it, and a field alone names an `Option` checked before.
macro_rules! checked {
    ($config:ident { $($field:ident $(: $check:expr)?),+ $(,)? }) => {{
        $($(let $field = $check;)?)+
        match ($($field,)+) {
            ($(Some($field),)+) => Some($config { $($field),+ }),
            _ => None,
        }
    }};
}

/// Validates a parsed file: its first error in check order (`validate_all` has them all).
pub fn validate(f: ScenarioFile, stem: &str) -> Res<Scenario> {
    validate_all(f, stem).map_err(|mut errs| errs.remove(0))
}

/// Keeps a check's value, or its error for the list.
fn keep<T>(r: Res<T>, errs: &mut Vec<FieldError>) -> Option<T> {
    r.map_err(|e| errs.push(e)).ok()
}

/// Validates a parsed file, every section whatever the others hold: all the errors found
/// (each check stops at its first), in check order. A check that needs another section's
/// result (the policy needs the fleet) is left out when that section failed.
pub fn validate_all(f: ScenarioFile, stem: &str) -> Result<Scenario, Vec<FieldError>> {
    let mut errs = Vec::new();
    let e = &mut errs;
    let name = keep(results_name(f.name.as_deref(), stem), e);
    let mut fleet = keep(backends::validate(&f.backends), e);
    // The autoscaler extends the fleet to its pool before anything is sized from it.
    let autoscaler = match (&f.autoscaler, fleet.as_mut()) {
        (None, _) => Some(None),
        (Some(a), Some(fl)) => keep(super::autoscaler::validate(a, fl), e).map(Some),
        (Some(_), None) => None,
    };
    if f.autoscaler.is_some() && !f.fleet_events.is_empty() {
        e.push(FieldError::new(
            "fleet_events",
            "cannot be combined with [autoscaler]: the autoscaler owns the fleet's membership",
        ));
    }
    let n = fleet.as_ref().map(|b| b.names.len() as u32);
    let router = router(&f.router, fleet.as_ref(), e);
    let (limits, net) = (&f.limits, &f.network);
    let sim = checked!(SimConfig {
        name,
        seed: Some(f.seed),
        router,
        max_sim_time: keep(
            limits
                .max_sim_time_s
                .map(|v| secs(v, "limits.max_sim_time_s", false).map(|d| SimTime(d.0)))
                .transpose(),
            e
        ),
        max_events: keep(max_events(limits.max_events), e),
        dispatch_latency: keep(secs(net.dispatch_latency_s, "network.dispatch_latency_s", true), e),
        response_latency: keep(secs(net.response_latency_s, "network.response_latency_s", true), e),
        faults: n.and_then(|n| keep(faults(&f.faults, n), e)),
        router_restarts: replicas(&f.router)
            .ok()
            .and_then(|r| keep(router_events(&f.router_events, r), e)),
        fleet_events: n.and_then(|n| keep(fleet_events(&f.fleet_events, n), e)),
        client: keep(client(&f.client), e),
        backends: fleet.as_ref().map(|b| b.names.clone()),
        models: fleet.as_ref().map(|b| b.models.clone()),
        labels: fleet.as_ref().map(|b| b.labels.clone()),
        gauge_lag: fleet.as_ref().map(|b| b.gauge_lag),
        autoscaler,
        slo: Some(None),
        prices: Some(None),
    });
    if f.workload.groups.is_empty() && f.workload.traces.is_empty() {
        e.push(FieldError::new(
            "workload.groups",
            "needs at least one [[workload.groups]] table (or [[workload.traces]])",
        ));
    }
    // Unknown when the fleet failed: the checks that depend on it wait for a valid fleet.
    let queueing = fleet
        .as_ref()
        .map(|b| matches!(b.models[0], BackendModel::Queueing { .. }));
    let mut names = BTreeSet::new();
    let groups: Vec<GroupConfig> = f
        .workload
        .groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| group(g, &format!("workload.groups[{i}]"), queueing, &mut names, e))
        .collect();
    let mut traces = traces(&f.workload.traces, queueing, &mut names, e);
    let budget = keep(
        crate::preflight::Budget::new(limits.max_memory_gib).map_err(|m| FieldError::new("limits.max_memory_gib", m)),
        e,
    );
    let (slo, prices) = capacity(&f, &groups, &traces, fleet.as_ref(), e);
    let (Some(mut sim), Some(budget), Some(fleet)) = (sim, budget, fleet) else {
        return Err(errs);
    };
    (sim.slo, sim.prices) = (slo, prices);
    if !errs.is_empty() {
        return Err(errs);
    }
    let fixed = preflight(&sim, &groups, !traces.is_empty(), &budget).map_err(|e| vec![e])?;
    for t in &mut traces {
        // What the fleet, the groups and the writing take is not the traces' to use.
        t.max_memory_bytes = budget.bytes.saturating_sub(fixed);
    }
    Ok(Scenario {
        sim,
        groups,
        traces,
        description: f.description,
        context_limit_tokens: fleet.context_limit,
        budget,
        estimate_bytes: fixed,
    })
}

/// `[slo]` over the session groups (session groups, then traces, as the workload numbers
/// them) and, with `[slo]` or `[price]`, each backend's price.
fn capacity(
    f: &ScenarioFile,
    groups: &[GroupConfig],
    traces: &[TraceGroupConfig],
    fleet: Option<&backends::Fleet>,
    e: &mut Vec<FieldError>,
) -> (
    Option<fleetsim_core::metrics::SloConfig>,
    Option<Vec<fleetsim_core::metrics::BackendPrice>>,
) {
    let names: Vec<String> = groups
        .iter()
        .map(|g| g.name.clone())
        .chain(traces.iter().map(|t| t.name.clone()))
        .collect();
    let slo = f.slo.as_ref().and_then(|s| keep(super::slo::validate(s, &names), e));
    let prices = match fleet {
        Some(b) if f.slo.is_some() || f.price.is_some() => keep(
            super::slo::prices(f.price.as_ref().unwrap_or(&Default::default()), &b.labels),
            e,
        ),
        _ => None,
    };
    (slo, prices)
}

/// The scenario's name (the file stem when it has none): it names the results folder.
fn results_name(name: Option<&str>, stem: &str) -> Res<String> {
    let name = name.unwrap_or(stem);
    if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
        return Err(FieldError::new(
            "name",
            format!("`{name}` cannot be used as a results folder name"),
        ));
    }
    Ok(name.to_string())
}

/// `[router]`, its policy sized to the fleet: `None` when a key failed, or the fleet did.
fn router(r: &RouterFile, fleet: Option<&backends::Fleet>, e: &mut Vec<FieldError>) -> Option<RouterConfig> {
    checked!(RouterConfig {
        policy: fleet.and_then(|b| keep(super::router::policy(r.policy.as_ref(), policy_fleet(b, r)), e)),
        engine_stats_interval: policy.as_ref().and_then(|p| {
            let v = r
                .engine_stats_interval_s
                .unwrap_or_else(|| p.default_engine_stats_interval_s());
            keep(secs(v, "router.engine_stats_interval_s", false), e)
        }),
        scrape_duration: keep(secs(r.scrape_duration_s, "router.scrape_duration_s", true), e),
        request_stats_window: keep(
            secs(r.request_stats_window_s, "router.request_stats_window_s", false),
            e
        ),
        request_stats_lag: keep(secs(r.request_stats_lag_s, "router.request_stats_lag_s", true), e),
        chars_per_token: keep(
            count_within(r.chars_per_token, "router.chars_per_token", 1, 64, |c| {
                format!("must be at most 64, got {c}")
            }),
            e
        ),
        kv_event_lag: keep(secs(r.kv_event_lag_s, "router.kv_event_lag_s", true), e),
        replicas: keep(replicas(r), e),
        scrape_jitter: keep(secs(r.scrape_jitter_s, "router.scrape_jitter_s", true), e),
        engine_stats_phase: keep(phase(r.engine_stats_phase), e),
        front: keep(front(&r.front), e),
        block_size_tokens: fleet.map(|b| b.block_size_tokens),
        fresh_signals: Some(r.fresh_signals),
    })
}

/// What a policy is sized from: the fleet's KV blocks and batch limits, and the router's
/// characters per token.
fn policy_fleet(b: &backends::Fleet, r: &RouterFile) -> Fleet {
    Fleet {
        block_size_tokens: b.block_size_tokens,
        kv_blocks: b.kv_blocks,
        // Validated with the router; clamped here so a bad value is reported under its own key.
        chars_per_token: r.chars_per_token.clamp(1, 64) as u32,
        max_num_seqs: b
            .models
            .iter()
            .map(|m| match m {
                BackendModel::Vllm(c) => c.max_num_seqs,
                BackendModel::Queueing { slots } => *slots,
            })
            .collect(),
    }
}

/// `router.replicas` (the router events need it valid, whatever the router's other keys).
fn replicas(r: &RouterFile) -> Res<u32> {
    count_within(r.replicas, "router.replicas", 1, 1024, |n| {
        format!("{n} replicas is above the supported 1024")
    })
}

/// `router.engine_stats_phase`: a fraction of the scrape interval.
fn phase(v: f64) -> Res<f64> {
    if (0.0..1.0).contains(&v) {
        return Ok(v);
    }
    Err(FieldError::new(
        "router.engine_stats_phase",
        format!("must be a fraction of the interval in [0, 1), got {v}"),
    ))
}

/// `router.front`: the load balancer in front of the replicas.
fn front(name: &str) -> Res<FrontBalancer> {
    match name {
        "round_robin" => Ok(FrontBalancer::RoundRobin),
        "random" => Ok(FrontBalancer::Random),
        "session_hash" => Ok(FrontBalancer::SessionHash),
        other => Err(FieldError::new(
            "router.front",
            format!("unknown front balancer `{other}`; expected `round_robin`, `random` or `session_hash`"),
        )),
    }
}

/// `limits.max_events`.
fn max_events(v: u64) -> Res<u64> {
    if v == 0 {
        return Err(FieldError::new("limits.max_events", "must be > 0"));
    }
    Ok(v)
}

/// One `[[workload.groups]]` table at `p` (`queueing` unknown when the fleet failed); its
/// name joins `names`, which must stay unique.
fn group(
    g: &GroupFile,
    p: &str,
    queueing: Option<bool>,
    names: &mut BTreeSet<String>,
    e: &mut Vec<FieldError>,
) -> Option<GroupConfig> {
    let at = |k: &str| format!("{p}.{k}");
    checked!(GroupConfig {
        name: keep(unique_group_name(&g.name, p, names), e),
        sessions: keep(count(g.sessions, &at("sessions"), 1), e),
        service_time_s: queueing.and_then(|q| keep(service_time(g.service_time_s.as_ref(), q, p), e)),
        input_tokens: keep(dist(&g.input_tokens, &at("input_tokens")), e),
        turns: keep(count_dist(&g.turns, &at("turns"), "turns"), e),
        output_tokens: keep(count_dist(&g.output_tokens, &at("output_tokens"), "output_tokens"), e),
        arrival: keep(arrival(&g.arrival, &at("arrival")), e),
        system_prompt_tokens: keep(count(g.system_prompt_tokens, &at("system_prompt_tokens"), 0), e),
        first_input_tokens: match &g.first_input_tokens {
            Some(v) => keep(dist(v, &at("first_input_tokens")), e),
            None => input_tokens.clone(),
        },
        think_time_s: keep(dist(&g.think_time_s, &at("think_time_s")), e),
        max_context_tokens: keep(
            g.max_context_tokens
                .map(|v| count(v, &at("max_context_tokens"), 2))
                .transpose(),
            e
        ),
        system_prompt: Some(g.system_prompt.clone().unwrap_or_else(|| g.name.clone())),
        sends_session_key: Some(g.sends_session_key),
        request_api: Some(g.request_api.unwrap_or_default()),
        model: keep(request_model(g.model.as_deref(), &at("model")), e),
    })
}

/// A group's `model` at `path`: a model name as a request's `model` field carries it.
fn request_model(m: Option<&str>, path: &str) -> Res<Option<String>> {
    match m {
        Some(m) if m.trim().is_empty() || m.chars().any(char::is_control) => Err(FieldError::new(
            path,
            "a model name: non-empty, without control characters",
        )),
        m => Ok(m.map(str::to_string)),
    }
}

/// A group's name at `p`: non-empty and not taken by an earlier group.
fn unique_group_name(name: &str, p: &str, names: &mut BTreeSet<String>) -> Res<String> {
    if name.is_empty() || !names.insert(name.to_string()) {
        return Err(FieldError::new(
            format!("{p}.name"),
            format!("group names must be unique and non-empty, got `{name}`"),
        ));
    }
    Ok(name.to_string())
}

/// A count-valued distribution (`turns`, `output_tokens`): at least 1 as written, then the
/// distribution.
fn count_dist(v: &toml::Value, path: &str, what: &str) -> Res<Dist> {
    counts::check(v, path, 1, what)?;
    dist(v, path)
}

/// The `[[workload.traces]]` tables (none while the fleet is unknown): their names join
/// `names`, unique across groups and traces.
fn traces(
    list: &[TraceFile],
    queueing: Option<bool>,
    names: &mut BTreeSet<String>,
    e: &mut Vec<FieldError>,
) -> Vec<TraceGroupConfig> {
    let Some(q) = queueing else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let Some(tc) = keep(trace_group(t, &format!("workload.traces[{i}]"), q), e) else {
            continue;
        };
        if !names.insert(tc.name.clone()) {
            e.push(FieldError::new(
                format!("workload.traces[{i}].name"),
                format!(
                    "group names must be unique across [[workload.groups]] and [[workload.traces]], got `{}` twice (set `name`)",
                    tc.name
                ),
            ));
        }
        out.push(tc);
    }
    out
}

/// Refuses a fleet or workload whose estimated memory exceeds the budget, naming the key that
/// drives it (see [`crate::preflight`]): the KV pools alone, then everything together (the
/// pools, every group's requests, the outputs streamed and the writing of the result
/// files). Returns the estimate.
pub(super) fn preflight(
    sim: &SimConfig,
    groups: &[GroupConfig],
    traces: bool,
    budget: &crate::preflight::Budget,
) -> Res<u64> {
    use crate::preflight::{WRITE_BYTES, kv_bytes, sessions_bytes, stream_bytes};
    let backends = sim.models.len() as u64;
    // Traces are sized as they are read: count the most the streamed outputs hold.
    let planned = if traces {
        u64::MAX
    } else {
        groups
            .iter()
            .map(|g| (f64::from(g.sessions) * g.turns.mean().max(1.0)).min(u64::MAX as f64) as u64)
            .fold(0u64, u64::saturating_add)
    };
    let fixed = WRITE_BYTES.saturating_add(stream_bytes(planned, backends));
    let mut kv_total = 0u64;
    let kv_blocks: Vec<u64> = sim
        .models
        .iter()
        .filter_map(|m| match m {
            BackendModel::Vllm(cfg) => Some(u64::from(cfg.kv_blocks)),
            _ => None,
        })
        .collect();
    if !kv_blocks.is_empty() {
        let total = kv_blocks.iter().fold(0u64, |a, b| a.saturating_add(*b));
        let grouped = sim.labels.iter().any(|l| !l.group.is_empty());
        let (key, what) = if grouped {
            (
                "backends.groups",
                format!("{} backends with {total} KV blocks in all", kv_blocks.len()),
            )
        } else {
            (
                "backends.kv_blocks",
                format!("{} backends x backends.kv_blocks = {}", kv_blocks.len(), kv_blocks[0]),
            )
        };
        kv_total = kv_bytes(1, total);
        budget.check(kv_total, &what).map_err(|m| FieldError::new(key, m))?;
    }
    let need: Vec<u64> = groups
        .iter()
        .map(|g| sessions_bytes(u64::from(g.sessions), g.turns.mean()))
        .collect();
    let total = need
        .iter()
        .fold(kv_total.saturating_add(fixed), |a, b| a.saturating_add(*b));
    if let Some((i, _)) = need.iter().enumerate().max_by_key(|(_, b)| **b) {
        let g = &groups[i];
        let what = format!(
            "{} sessions x mean turns {} in group {} (with the KV pools, the outputs streamed and the writing of the result files)",
            g.sessions,
            g.turns.mean(),
            crate::quote::quote(&g.name)
        );
        // Name the factor that drives the estimate.
        let key = if g.turns.mean() > f64::from(g.sessions) {
            "turns"
        } else {
            "sessions"
        };
        budget
            .check(total, &what)
            .map_err(|m| FieldError::new(format!("workload.groups[{i}].{key}"), m))?;
    }
    Ok(total.max(kv_total.saturating_add(fixed)))
}
