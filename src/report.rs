//! The terminal summary of a run (plain text; data files are written by `export`).
//!
//! Owns: the terminal summary. May not see: anything but a [`crate::metrics::Summary`] and
//! wall-clock figures. Invariant: returns text; writes no file.

use std::fmt::Write;

use crate::export::Perf;
use crate::metrics::Summary;

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Renders the run summary as a short table.
pub fn render(s: &Summary, perf: Option<&Perf>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{}: {}", s.scenario, s.policy);
    let _ = writeln!(
        o,
        "seed {}, {} backends, {} sessions, {} of {} requests finished, {:.1} s simulated",
        s.seed, s.backend_count, s.sessions, s.requests.finished, s.requests.planned, s.sim_time_s
    );
    if let Some(p) = perf {
        let _ = writeln!(
            o,
            "{} events in {:.3} s wall ({:.2} M events/s, {} requests/s)",
            thousands(p.events),
            p.wall_s,
            p.events_per_s / 1e6,
            thousands(p.requests_per_s as u64)
        );
    }
    let _ = writeln!(o);
    o.push_str(&backend_table(s));
    let _ = writeln!(o);
    let _ = writeln!(o, "worst moment        {}", worst_moment(s));
    let _ = writeln!(o, "idle_while_queued_s {:.1}", s.idle_while_queued_s);
    let _ = writeln!(o, "stranded_slot_s     {:.1}", s.stranded_slot_s);
    let _ = writeln!(o, "latched_sessions    {} of {}", s.latched_sessions, s.sessions);
    let _ = writeln!(o, "request share       {}", share_line(s));
    if !s.unserved_models.is_empty() {
        let named: Vec<String> = s
            .unserved_models
            .iter()
            .map(|(m, n)| format!("{} ({n})", crate::quote::quote(m)))
            .collect();
        let _ = writeln!(
            o,
            "unserved models     {} requests refused: no backend serves {}",
            s.requests.unserved_model,
            named.join(", ")
        );
    }
    decisions(&mut o, s);
    latencies(&mut o, s);
    if let Some(a) = &s.autoscale {
        autoscale_lines(&mut o, a);
    }
    capacity_lines(&mut o, s);
    o
}

/// `TTFT <= 2 s, TPOT <= 0.05 s`: the targets set.
fn targets_text(ttft: Option<f64>, tpot: Option<f64>, e2e: Option<f64>) -> String {
    [("TTFT", ttft), ("TPOT", tpot), ("e2e", e2e)]
        .iter()
        .filter_map(|(n, v)| v.map(|x| format!("{n} <= {x} s")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// With `[slo]`: the share of requests and sessions that met their targets and goodput,
/// per session group when there are several; with `[slo]` or `[price]` on a fixed fleet,
/// what it costs.
fn capacity_lines(o: &mut String, s: &Summary) {
    if let Some(slo) = &s.slo {
        let _ = writeln!(
            o,
            "slo                 {} (target {:.1}%): {:.1}% of requests met {}; {} of {} sessions throughout; goodput {:.3} req/s",
            if slo.slo_met { "met" } else { "missed" },
            slo.slo_attainment_target * 100.0,
            slo.slo_attainment * 100.0,
            targets_text(slo.slo_ttft_s, slo.slo_tpot_s, slo.slo_e2e_s),
            slo.slo_sessions_met,
            slo.slo_sessions,
            slo.goodput_rps
        );
        for g in &slo.slo_groups {
            let _ = writeln!(
                o,
                "  group {:<11} {:.1}% of {} requests met {}; {} of {} sessions; goodput {:.3} req/s",
                crate::quote::escape(&g.name),
                g.attainment * 100.0,
                g.requests,
                targets_text(g.ttft_s, g.tpot_s, g.e2e_s),
                g.sessions_met,
                g.sessions,
                g.goodput_rps
            );
        }
    }
    if let Some(c) = &s.fleet_cost {
        let _ = writeln!(
            o,
            "fleet cost          {} GPUs at ${:.2}/h: {:.1} GPU-s, ${:.4}, ${:.4} per 1,000 requests ({})",
            c.gpus,
            c.fleet_usd_per_hour,
            c.gpu_seconds,
            c.cost_usd,
            c.cost_per_1k_requests_usd,
            crate::quote::escape(&c.price_source)
        );
    }
}

/// One row per backend: its share, sessions, queues, busy and idle time, cache hits (and,
/// for a fleet described by groups or profiles, a last column naming them).
fn backend_table(s: &Summary) -> String {
    let labelled = s.backends.iter().any(|b| !b.profile.is_empty() || !b.group.is_empty());
    let mut head = vec![
        "backend",
        "requests",
        "share",
        "sess 1st",
        "sess last",
        "peak run",
        "peak wait",
        "mean run",
        "mean wait",
        "busy s",
        "idle s",
        "cache hit",
    ];
    if labelled {
        head.push("profile");
    }
    let rows = s.backends.iter().map(|b| {
        let mut r = vec![
            b.name.clone(),
            b.requests.to_string(),
            format!("{:.1}%", b.request_share * 100.0),
            b.first_turn_sessions.to_string(),
            b.last_turn_sessions.to_string(),
            b.peak_running.to_string(),
            b.peak_waiting.to_string(),
            format!("{:.2}", b.mean_running),
            format!("{:.2}", b.mean_waiting),
            format!("{:.1}", b.busy_s),
            format!("{:.1}", b.idle_s),
            format!("{:.1}%", b.prefix_cache_hit_rate * 100.0),
        ];
        if labelled {
            r.push(if b.profile.is_empty() {
                "(step_time given)".into()
            } else {
                b.profile.clone()
            });
        }
        r
    });
    crate::output::render(&head, rows, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
}

/// The instant most requests waited while a slot was free elsewhere, backend by backend.
fn worst_moment(s: &Summary) -> String {
    let Some(w) = &s.worst_moment else {
        return "none: no request ever waited while a slot was free elsewhere".into();
    };
    let parts: Vec<String> = w
        .backends
        .iter()
        .enumerate()
        .map(|(i, [r, q])| {
            let name = s
                .backends
                .get(i)
                .map_or_else(|| format!("backend-{i}"), |b| b.name.clone());
            format!("{name} {r} running + {q} waiting")
        })
        .collect();
    format!("t = {:.1} s: {}", w.t_s, parts.join(" | "))
}

/// The decisions by branch (with the kvaware fallback's share) and their regret.
fn decisions(o: &mut String, s: &Summary) {
    let branches: Vec<String> = s
        .decisions_by_branch
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| format!("{b} {n}"))
        .collect();
    let _ = writeln!(o, "decisions           {}", branches.join(", "));
    let counts = s.decisions_by_branch.iter().map(|(b, n)| (b.as_str(), *n as f64));
    if let Some(share) = crate::decision::kv_fallback_share(counts) {
        let _ = writeln!(
            o,
            "                    \u{2020} {:.1}% of decisions took the kvaware fallback. {}.",
            100.0 * share,
            crate::decision::KV_FALLBACK_WHY
        );
    }
    let _ = writeln!(
        o,
        "decision regret     {} of {} picks busier than the least-loaded backend in truth (max +{}); views up to {:.1} s old (median {:.1} s)",
        s.decisions_with_regret, s.decision_regret.count, s.decision_regret.max, s.view_age_s.max, s.view_age_s.p50
    );
}

/// TTFT, TPOT and ITL quantiles, and the throughput.
fn latencies(o: &mut String, s: &Summary) {
    let _ = writeln!(
        o,
        "ttft p50/p90/p99    {:.3} / {:.3} / {:.3} s   (queue wait p99 {:.3} s, e2e p99 {:.3} s)",
        s.ttft_s.p50, s.ttft_s.p90, s.ttft_s.p99, s.queue_wait_s.p99, s.e2e_s.p99
    );
    let _ = writeln!(
        o,
        "tpot p50/p90/p99    {:.4} / {:.4} / {:.4} s per output token after the first",
        s.tpot_s.p50, s.tpot_s.p90, s.tpot_s.p99
    );
    let _ = writeln!(
        o,
        "itl p50/p90/p99     {:.4} / {:.4} / {:.4} s between consecutive output tokens",
        s.itl_s.p50, s.itl_s.p90, s.itl_s.p99
    );
    let _ = writeln!(
        o,
        "throughput          {:.3} req/s, {:.0} output tok/s, prefix cache hit {:.1}%, {} preemptions",
        s.throughput_rps,
        s.output_tokens_per_s,
        s.prefix_cache_hit_rate * 100.0,
        s.preemptions
    );
}

/// An autoscaled run: its scale decisions and what the replicas cost.
fn autoscale_lines(o: &mut String, a: &crate::autoscale::AutoscaleSummary) {
    let _ = writeln!(
        o,
        "autoscaler          {} on {}: {} up, {} down, peak {} replicas, {} added never served, {} requests cut",
        a.autoscaler,
        crate::quote::escape(&a.autoscaler_query),
        a.scale_ups,
        a.scale_downs,
        a.peak_replicas,
        a.replicas_never_served,
        a.requests_cut_by_scale_down
    );
    const SHOWN: usize = 10;
    for e in a.scale_events.iter().take(SHOWN) {
        let metric = e
            .metric
            .map_or_else(|| "no value".to_string(), |m| format!("value {m}"));
        let _ = writeln!(
            o,
            "  scale             t = {:.1} s: {} {} -> {} ({metric}, {})",
            e.t_s, e.by, e.from, e.to, e.reason
        );
    }
    if a.scale_events.len() > SHOWN {
        let _ = writeln!(
            o,
            "  ... and {} more (summary.json scale_events)",
            a.scale_events.len() - SHOWN
        );
    }
    let _ = writeln!(
        o,
        "replica cost        {:.1} GPU-s ({:.1} idle while another backend queued), ${:.2} at ${:.2}/GPU-h, ${:.2} per 1,000 requests",
        a.gpu_seconds, a.gpu_seconds_idle_while_queued, a.cost_usd, a.usd_per_gpu_hour, a.cost_per_1k_requests_usd
    );
}

/// Jain's index and the max/min ratio of requests per slot, with the busiest backend and
/// the backends that served nothing: skew a queue-based headline misses.
fn share_line(s: &Summary) -> String {
    let busiest = s
        .backends
        .iter()
        .max_by(|a, b| a.request_share.total_cmp(&b.request_share).then(b.name.cmp(&a.name)));
    let mut line = format!(
        "Jain {:.3}, max/min {:.1}",
        s.request_jain_index, s.request_share_max_min_ratio
    );
    if let Some(b) = busiest {
        let _ = write!(line, " (busiest {} {:.1}%)", b.name, b.request_share * 100.0);
    }
    if s.backends_never_served > 0 {
        let _ = write!(
            line,
            ", {} of {} backends served nothing",
            s.backends_never_served, s.backend_count
        );
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separator() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(12345678), "12,345,678");
    }
}
