//! The whole-file validation: each section through its validator, then the cross-section
//! checks and the memory preflight, into a runnable [`super::Scenario`].

use super::events::{client, faults, fleet_events, router_events};
use super::router::policy;
use super::schema::ScenarioFile;
use super::traces::trace_group;
use super::workload::{arrival, service_time};
use super::{FieldError, Res, Scenario, backends, count, counts, dist, secs};
use fleetsim_core::policy::kind::Fleet;
use fleetsim_core::router::RouterConfig;
use fleetsim_core::sim::{BackendModel, FrontBalancer, SimConfig};
use fleetsim_core::time::SimTime;
use fleetsim_core::workload::GroupConfig;

/// Validates a parsed file. `stem` names the scenario when `name` is absent.
pub fn validate(f: ScenarioFile, stem: &str) -> Res<Scenario> {
    let name = f.name.clone().unwrap_or_else(|| stem.to_string());
    if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
        return Err(FieldError::new(
            "name",
            format!("`{name}` cannot be used as a results folder name"),
        ));
    }
    let fleet_b = backends::validate(&f.backends)?;
    let n = fleet_b.names.len() as u32;
    let r = &f.router;
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
    let policy = policy(r.policy.as_ref(), fleet)?;
    let router = RouterConfig {
        engine_stats_interval: secs(
            r.engine_stats_interval_s
                .unwrap_or_else(|| policy.default_engine_stats_interval_s()),
            "router.engine_stats_interval_s",
            false,
        )?,
        scrape_duration: secs(r.scrape_duration_s, "router.scrape_duration_s", true)?,
        request_stats_window: secs(r.request_stats_window_s, "router.request_stats_window_s", false)?,
        request_stats_lag: secs(r.request_stats_lag_s, "router.request_stats_lag_s", true)?,
        chars_per_token: match count(r.chars_per_token, "router.chars_per_token", 1)? {
            c if c > 64 => {
                return Err(FieldError::new(
                    "router.chars_per_token",
                    format!("must be at most 64, got {c}"),
                ));
            }
            c => c,
        },
        kv_event_lag: secs(r.kv_event_lag_s, "router.kv_event_lag_s", true)?,
        replicas: match count(r.replicas, "router.replicas", 1)? {
            n if n > 1024 => {
                return Err(FieldError::new(
                    "router.replicas",
                    format!("{n} replicas is above the supported 1024"),
                ));
            }
            n => n,
        },
        scrape_jitter: secs(r.scrape_jitter_s, "router.scrape_jitter_s", true)?,
        engine_stats_phase: match r.engine_stats_phase {
            v if (0.0..1.0).contains(&v) => v,
            v => {
                return Err(FieldError::new(
                    "router.engine_stats_phase",
                    format!("must be a fraction of the interval in [0, 1), got {v}"),
                ));
            }
        },
        front: match r.front.as_str() {
            "round_robin" => FrontBalancer::RoundRobin,
            "random" => FrontBalancer::Random,
            "session_hash" => FrontBalancer::SessionHash,
            other => {
                return Err(FieldError::new(
                    "router.front",
                    format!("unknown front balancer `{other}`; expected `round_robin`, `random` or `session_hash`"),
                ));
            }
        },
        block_size_tokens: fleet_b.block_size_tokens,
        fresh_signals: r.fresh_signals,
        policy,
    };
    let limits = &f.limits;
    let max_sim_time = match limits.max_sim_time_s {
        Some(v) => Some(SimTime(secs(v, "limits.max_sim_time_s", false)?.0)),
        None => None,
    };
    if limits.max_events == 0 {
        return Err(FieldError::new("limits.max_events", "must be > 0"));
    }
    let net = &f.network;
    let router_replicas = router.replicas;
    let sim = SimConfig {
        name,
        seed: f.seed,
        backends: fleet_b.names,
        models: fleet_b.models,
        labels: fleet_b.labels,
        router,
        dispatch_latency: secs(net.dispatch_latency_s, "network.dispatch_latency_s", true)?,
        response_latency: secs(net.response_latency_s, "network.response_latency_s", true)?,
        gauge_lag: fleet_b.gauge_lag,
        max_sim_time,
        max_events: limits.max_events,
        faults: faults(&f.faults, n)?,
        router_restarts: router_events(&f.router_events, router_replicas)?,
        fleet_events: fleet_events(&f.fleet_events, n)?,
        client: client(&f.client)?,
    };
    let queueing = matches!(sim.models[0], BackendModel::Queueing { .. });
    if f.workload.groups.is_empty() && f.workload.traces.is_empty() {
        return Err(FieldError::new(
            "workload.groups",
            "needs at least one [[workload.groups]] table (or [[workload.traces]])",
        ));
    }
    let mut groups = Vec::new();
    let mut names_seen = std::collections::BTreeSet::new();
    for (i, g) in f.workload.groups.iter().enumerate() {
        let p = format!("workload.groups[{i}]");
        if g.name.is_empty() || !names_seen.insert(g.name.clone()) {
            return Err(FieldError::new(
                format!("{p}.name"),
                format!("group names must be unique and non-empty, got `{}`", g.name),
            ));
        }
        let sessions = count(g.sessions, &format!("{p}.sessions"), 1)?;
        let service = service_time(g.service_time_s.as_ref(), queueing, &p)?;
        let input = dist(&g.input_tokens, &format!("{p}.input_tokens"))?;
        counts::check(&g.turns, &format!("{p}.turns"), 1, "turns")?;
        counts::check(&g.output_tokens, &format!("{p}.output_tokens"), 1, "output_tokens")?;
        groups.push(GroupConfig {
            name: g.name.clone(),
            sessions,
            arrival: arrival(&g.arrival, &format!("{p}.arrival"))?,
            turns: dist(&g.turns, &format!("{p}.turns"))?,
            system_prompt_tokens: count(g.system_prompt_tokens, &format!("{p}.system_prompt_tokens"), 0)?,
            system_prompt: g.system_prompt.clone().unwrap_or_else(|| g.name.clone()),
            first_input_tokens: match &g.first_input_tokens {
                Some(v) => dist(v, &format!("{p}.first_input_tokens"))?,
                None => input.clone(),
            },
            input_tokens: input,
            output_tokens: dist(&g.output_tokens, &format!("{p}.output_tokens"))?,
            think_time_s: dist(&g.think_time_s, &format!("{p}.think_time_s"))?,
            service_time_s: service,
            sends_session_key: g.sends_session_key,
            max_context_tokens: match g.max_context_tokens {
                Some(v) => Some(count(v, &format!("{p}.max_context_tokens"), 2)?),
                None => None,
            },
            request_api: g.request_api.unwrap_or_default(),
        });
    }
    let mut traces = Vec::new();
    for (i, t) in f.workload.traces.iter().enumerate() {
        let tc = trace_group(t, &format!("workload.traces[{i}]"), queueing)?;
        if !names_seen.insert(tc.name.clone()) {
            return Err(FieldError::new(
                format!("workload.traces[{i}].name"),
                format!(
                    "group names must be unique across [[workload.groups]] and [[workload.traces]], got `{}` twice (set `name`)",
                    tc.name
                ),
            ));
        }
        traces.push(tc);
    }
    let budget = crate::preflight::Budget::new(limits.max_memory_gib)
        .map_err(|m| FieldError::new("limits.max_memory_gib", m))?;
    let fixed = preflight(&sim, &groups, &budget)?;
    for t in &mut traces {
        // What the fleet, the groups and the writing take is not the traces' to use.
        t.max_memory_bytes = budget.bytes.saturating_sub(fixed);
        t.audit_bytes_per_request = crate::preflight::audit_bytes(1, sim.models.len() as u64);
    }
    Ok(Scenario {
        sim,
        groups,
        traces,
        description: f.description,
        context_limit_tokens: fleet_b.context_limit,
        budget,
    })
}

/// Refuses a fleet or workload whose estimated memory exceeds the budget, naming the key that
/// drives it (see [`crate::preflight`]): the KV pools alone, then everything together (the
/// pools, every group's requests with their decision audit over every backend, and the
/// writing of the result files). Returns the estimate.
pub(super) fn preflight(sim: &SimConfig, groups: &[GroupConfig], budget: &crate::preflight::Budget) -> Res<u64> {
    use crate::preflight::{WRITE_BYTES, audit_bytes, kv_bytes, sessions_bytes};
    let backends = sim.models.len() as u64;
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
        .map(|g| {
            let requests = (f64::from(g.sessions) * g.turns.mean().max(1.0)).min(u64::MAX as f64) as u64;
            sessions_bytes(u64::from(g.sessions), g.turns.mean()).saturating_add(audit_bytes(requests, backends))
        })
        .collect();
    let total = need
        .iter()
        .fold(kv_total.saturating_add(WRITE_BYTES), |a, b| a.saturating_add(*b));
    if let Some((i, _)) = need.iter().enumerate().max_by_key(|(_, b)| **b) {
        let g = &groups[i];
        let what = format!(
            "{} sessions x mean turns {} in group {} (with the decision audit over {backends} backends, the KV pools and the writing of the result files)",
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
    Ok(total.max(kv_total.saturating_add(WRITE_BYTES)))
}
