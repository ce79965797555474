//! The whole-file validation: each section through its validator, then the cross-section
//! checks and the memory preflight, into a runnable [`super::Scenario`].

use super::events::{client, faults, fleet_events, router_events};
use super::router::policy;
use super::schema::ScenarioFile;
use super::traces::trace_group;
use super::workload::{arrival, service_time};
use super::{FieldError, Res, Scenario, backends, count, count_within, counts, dist, secs};
use fleetsim_core::policy::kind::Fleet;
use fleetsim_core::router::RouterConfig;
use fleetsim_core::sim::{BackendModel, FrontBalancer, SimConfig};
use fleetsim_core::time::SimTime;
use fleetsim_core::workload::GroupConfig;

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
    let name = f.name.clone().unwrap_or_else(|| stem.to_string());
    if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
        e.push(FieldError::new(
            "name",
            format!("`{name}` cannot be used as a results folder name"),
        ));
    }
    let fleet_b = keep(backends::validate(&f.backends), e);
    let n = fleet_b.as_ref().map(|b| b.names.len() as u32);
    let r = &f.router;
    let policy = fleet_b.as_ref().and_then(|fleet_b| {
        let fleet = Fleet {
            block_size_tokens: fleet_b.block_size_tokens,
            kv_blocks: fleet_b.kv_blocks,
            // Validated below; clamped here so a bad value is reported under its own key.
            chars_per_token: r.chars_per_token.clamp(1, 64) as u32,
            max_num_seqs: fleet_b
                .models
                .iter()
                .map(|m| match m {
                    BackendModel::Vllm(c) => c.max_num_seqs,
                    BackendModel::Queueing { slots } => *slots,
                })
                .collect(),
        };
        keep(policy(r.policy.as_ref(), fleet), e)
    });
    let engine_stats_interval = policy.as_ref().and_then(|p| {
        keep(
            secs(
                r.engine_stats_interval_s
                    .unwrap_or_else(|| p.default_engine_stats_interval_s()),
                "router.engine_stats_interval_s",
                false,
            ),
            e,
        )
    });
    let scrape_duration = keep(secs(r.scrape_duration_s, "router.scrape_duration_s", true), e);
    let request_stats_window = keep(
        secs(r.request_stats_window_s, "router.request_stats_window_s", false),
        e,
    );
    let request_stats_lag = keep(secs(r.request_stats_lag_s, "router.request_stats_lag_s", true), e);
    let chars_per_token = keep(
        count_within(r.chars_per_token, "router.chars_per_token", 1, 64, |c| {
            format!("must be at most 64, got {c}")
        }),
        e,
    );
    let kv_event_lag = keep(secs(r.kv_event_lag_s, "router.kv_event_lag_s", true), e);
    let replicas = keep(
        count_within(r.replicas, "router.replicas", 1, 1024, |n| {
            format!("{n} replicas is above the supported 1024")
        }),
        e,
    );
    let scrape_jitter = keep(secs(r.scrape_jitter_s, "router.scrape_jitter_s", true), e);
    let engine_stats_phase = match r.engine_stats_phase {
        v if (0.0..1.0).contains(&v) => Some(v),
        v => {
            e.push(FieldError::new(
                "router.engine_stats_phase",
                format!("must be a fraction of the interval in [0, 1), got {v}"),
            ));
            None
        }
    };
    let front = match r.front.as_str() {
        "round_robin" => Some(FrontBalancer::RoundRobin),
        "random" => Some(FrontBalancer::Random),
        "session_hash" => Some(FrontBalancer::SessionHash),
        other => {
            e.push(FieldError::new(
                "router.front",
                format!("unknown front balancer `{other}`; expected `round_robin`, `random` or `session_hash`"),
            ));
            None
        }
    };
    let limits = &f.limits;
    let max_sim_time = match limits.max_sim_time_s {
        Some(v) => keep(secs(v, "limits.max_sim_time_s", false), e).map(|d| Some(SimTime(d.0))),
        None => Some(None),
    };
    if limits.max_events == 0 {
        e.push(FieldError::new("limits.max_events", "must be > 0"));
    }
    let net = &f.network;
    let dispatch_latency = keep(secs(net.dispatch_latency_s, "network.dispatch_latency_s", true), e);
    let response_latency = keep(secs(net.response_latency_s, "network.response_latency_s", true), e);
    let faults = n.and_then(|n| keep(faults(&f.faults, n), e));
    let router_restarts = replicas.and_then(|r| keep(router_events(&f.router_events, r), e));
    let fleet_events = n.and_then(|n| keep(fleet_events(&f.fleet_events, n), e));
    let client = keep(client(&f.client), e);
    // Unknown when the fleet failed: the checks that depend on it wait for a valid fleet.
    let queueing = fleet_b
        .as_ref()
        .map(|b| matches!(b.models[0], BackendModel::Queueing { .. }));
    if f.workload.groups.is_empty() && f.workload.traces.is_empty() {
        e.push(FieldError::new(
            "workload.groups",
            "needs at least one [[workload.groups]] table (or [[workload.traces]])",
        ));
    }
    let mut groups = Vec::new();
    let mut names_seen = std::collections::BTreeSet::new();
    for (i, g) in f.workload.groups.iter().enumerate() {
        let p = format!("workload.groups[{i}]");
        if g.name.is_empty() || !names_seen.insert(g.name.clone()) {
            e.push(FieldError::new(
                format!("{p}.name"),
                format!("group names must be unique and non-empty, got `{}`", g.name),
            ));
        }
        let sessions = keep(count(g.sessions, &format!("{p}.sessions"), 1), e);
        let service = queueing.and_then(|q| keep(service_time(g.service_time_s.as_ref(), q, &p), e));
        let input = keep(dist(&g.input_tokens, &format!("{p}.input_tokens")), e);
        let turns_ok = keep(counts::check(&g.turns, &format!("{p}.turns"), 1, "turns"), e);
        let output_ok = keep(
            counts::check(&g.output_tokens, &format!("{p}.output_tokens"), 1, "output_tokens"),
            e,
        );
        let arrival = keep(arrival(&g.arrival, &format!("{p}.arrival")), e);
        let turns = turns_ok.and_then(|_| keep(dist(&g.turns, &format!("{p}.turns")), e));
        let system_prompt_tokens = keep(
            count(g.system_prompt_tokens, &format!("{p}.system_prompt_tokens"), 0),
            e,
        );
        let first_input_tokens = match &g.first_input_tokens {
            Some(v) => keep(dist(v, &format!("{p}.first_input_tokens")), e),
            None => input.clone(),
        };
        let output_tokens = output_ok.and_then(|_| keep(dist(&g.output_tokens, &format!("{p}.output_tokens")), e));
        let think_time_s = keep(dist(&g.think_time_s, &format!("{p}.think_time_s")), e);
        let max_context_tokens = match g.max_context_tokens {
            Some(v) => keep(count(v, &format!("{p}.max_context_tokens"), 2), e).map(Some),
            None => Some(None),
        };
        if let (
            Some(sessions),
            Some(service_time_s),
            Some(input_tokens),
            Some(arrival),
            Some(turns),
            Some(system_prompt_tokens),
            Some(first_input_tokens),
            Some(output_tokens),
            Some(think_time_s),
            Some(max_context_tokens),
        ) = (
            sessions,
            service,
            input,
            arrival,
            turns,
            system_prompt_tokens,
            first_input_tokens,
            output_tokens,
            think_time_s,
            max_context_tokens,
        ) {
            groups.push(GroupConfig {
                name: g.name.clone(),
                sessions,
                arrival,
                turns,
                system_prompt_tokens,
                system_prompt: g.system_prompt.clone().unwrap_or_else(|| g.name.clone()),
                first_input_tokens,
                input_tokens,
                output_tokens,
                think_time_s,
                service_time_s,
                sends_session_key: g.sends_session_key,
                max_context_tokens,
                request_api: g.request_api.unwrap_or_default(),
            });
        }
    }
    let mut traces = Vec::new();
    for (i, t) in f.workload.traces.iter().enumerate() {
        let Some(q) = queueing else { break };
        let Some(tc) = keep(trace_group(t, &format!("workload.traces[{i}]"), q), e) else {
            continue;
        };
        if !names_seen.insert(tc.name.clone()) {
            e.push(FieldError::new(
                format!("workload.traces[{i}].name"),
                format!(
                    "group names must be unique across [[workload.groups]] and [[workload.traces]], got `{}` twice (set `name`)",
                    tc.name
                ),
            ));
        }
        traces.push(tc);
    }
    let budget = keep(
        crate::preflight::Budget::new(limits.max_memory_gib).map_err(|m| FieldError::new("limits.max_memory_gib", m)),
        e,
    );
    let (
        Some(fleet_b),
        Some(policy),
        Some(engine_stats_interval),
        Some(scrape_duration),
        Some(request_stats_window),
        Some(request_stats_lag),
        Some(chars_per_token),
        Some(kv_event_lag),
        Some(replicas),
        Some(scrape_jitter),
        Some(engine_stats_phase),
        Some(front),
        Some(max_sim_time),
        Some(dispatch_latency),
        Some(response_latency),
        Some(faults),
        Some(router_restarts),
        Some(fleet_events),
        Some(client),
        Some(budget),
    ) = (
        fleet_b,
        policy,
        engine_stats_interval,
        scrape_duration,
        request_stats_window,
        request_stats_lag,
        chars_per_token,
        kv_event_lag,
        replicas,
        scrape_jitter,
        engine_stats_phase,
        front,
        max_sim_time,
        dispatch_latency,
        response_latency,
        faults,
        router_restarts,
        fleet_events,
        client,
        budget,
    )
    else {
        return Err(errs);
    };
    if !errs.is_empty() {
        return Err(errs);
    }
    let router = RouterConfig {
        engine_stats_interval,
        scrape_duration,
        request_stats_window,
        request_stats_lag,
        chars_per_token,
        kv_event_lag,
        replicas,
        scrape_jitter,
        engine_stats_phase,
        front,
        block_size_tokens: fleet_b.block_size_tokens,
        fresh_signals: r.fresh_signals,
        policy,
    };
    let sim = SimConfig {
        name,
        seed: f.seed,
        backends: fleet_b.names,
        models: fleet_b.models,
        labels: fleet_b.labels,
        router,
        dispatch_latency,
        response_latency,
        gauge_lag: fleet_b.gauge_lag,
        max_sim_time,
        max_events: limits.max_events,
        faults,
        router_restarts,
        fleet_events,
        client,
    };
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
        context_limit_tokens: fleet_b.context_limit,
        budget,
        estimate_bytes: fixed,
    })
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
