//! Rendering an [`Explanation`] as the plain-language text of `explain.md` and the terminal;
//! finds nothing itself.

use std::fmt::Write as _;

use super::{CauseGroup, Counterfactual, EpisodeStory, Explanation, Staleness};

/// The explanation as Markdown (also what `sim explain` prints).
pub fn render(x: &Explanation) -> String {
    let mut o = String::new();
    summary(&mut o, x);
    for (k, e) in x.episodes.iter().enumerate() {
        episode(&mut o, k, e);
    }
    whole_run(&mut o, &x.staleness);
    if let Some(a) = &x.autoscale {
        scale_story(&mut o, a);
    }
    if x.counterfactuals.len() > 1 {
        counterfactuals(&mut o, &x.counterfactuals);
    }
    o
}

/// The title, the policy and the stranding in one line, and the audit's limit.
fn summary(o: &mut String, x: &Explanation) {
    let _ = writeln!(o, "# Why capacity was stranded: {} (seed {})", x.scenario, x.seed);
    let _ = writeln!(o);
    let _ = writeln!(o, "Policy: {}.", x.policy);
    let _ = writeln!(
        o,
        "Some backend had a free slot while another queued for {:.1} s ({:.1} stranded slot-seconds).",
        x.idle_while_queued_s, x.stranded_slot_s
    );
    if let Some(k) = x.audit_truncated_at {
        let _ = writeln!(
            o,
            "Note: the decision audit holds only the first {k} decisions (limits.audit_decisions); later placements are explained without their views."
        );
    }
    if x.episodes.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "No stranding episode worth explaining: capacity was never idle while requests queued elsewhere for more than a moment."
        );
    }
    if let Some(c) = &x.concentration {
        concentration(o, c);
    }
}

/// Where the requests went and the mechanism that put them there.
fn concentration(o: &mut String, c: &super::Concentration) {
    let _ = writeln!(o);
    let _ = writeln!(o, "## Where the requests went");
    let _ = writeln!(o);
    let never = if c.never_served > 0 {
        format!(", {} served none", count(c.never_served as usize, "backend"))
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "{} served {} of {} requests{never} (Jain index {:.3}).",
        c.backend, c.requests, c.of, c.jain_index
    );
    match &c.mechanism {
        Some(m) => {
            let _ = writeln!(o);
            let _ = writeln!(o, "**Why ({}).** {}.", m.kind, capitalized(&m.cause));
            let _ = writeln!(o);
            let _ = writeln!(o, "**The key that changes it:** {}.", m.key);
        }
        None => {
            let _ = writeln!(
                o,
                "The audit shows no single mechanism (trie monopoly, QPS latch, long-session affinity) behind it."
            );
        }
    }
}

/// `s` with its first letter upper-cased.
fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or_else(String::new, |f| f.to_uppercase().chain(c).collect())
}

/// Episode `k`: what idled and queued, who waited, why they were placed there, the latch.
fn episode(o: &mut String, k: usize, e: &EpisodeStory) {
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "## Episode {}: {:.1} s to {:.1} s ({:.1} s, {:.1} slot-seconds stranded, up to {} at once)",
        k + 1,
        e.from_s,
        e.until_s,
        e.until_s - e.from_s,
        e.stranded_slot_s,
        e.peak_stranded
    );
    let _ = writeln!(o);
    let idle: Vec<String> = e
        .idle
        .iter()
        .map(|b| format!("{} had a free slot for {:.1} s", b.backend, b.free_s))
        .collect();
    let queued: Vec<String> = e
        .queued
        .iter()
        .map(|b| {
            format!(
                "{} queued up to {}",
                b.backend,
                count(b.peak_waiting as usize, "request")
            )
        })
        .collect();
    let _ = writeln!(o, "**What.** {} while {}.", list(&idle, 4), list(&queued, 4));
    if !e.context.is_empty() {
        let _ = writeln!(o, "**Context.** {}.", e.context.join("; "));
    }
    let Some(q) = e.queued.first() else {
        return;
    };
    let _ = writeln!(
        o,
        "**Who.** {} waited on {} during the episode, from {} ({}).",
        count(e.waiting_requests, "request"),
        q.backend,
        count(e.sessions.len(), "session"),
        list(&e.sessions, 6)
    );
    let _ = writeln!(o, "**Why.** These sessions were placed on {} by:", q.backend);
    for c in &e.causes {
        let _ = writeln!(o, "{}", cause(c));
    }
    if e.latched_turns > 0 {
        let _ = writeln!(
            o,
            "**Latch.** {} of these sessions stayed there: {} later turns followed them through an affinity branch (prefix match, session hash or cache hit) while other backends idled ({}).",
            e.latched_sessions.len(),
            e.latched_turns,
            list(&e.latched_sessions, 6)
        );
    }
}

/// One group of placing decisions: when, what it implies, what the views said, the regret.
fn cause(c: &CauseGroup) -> String {
    let when = if c.from_s == c.until_s {
        format!("at {:.1} s", c.from_s)
    } else {
        format!("between {:.1} s and {:.1} s", c.from_s, c.until_s)
    };
    let views = if c.max_view_age_s > 0.0 {
        format!(
            " They read {} distinct engine-stats view(s), up to {:.1} s old.",
            c.distinct_views, c.max_view_age_s
        )
    } else {
        String::new()
    };
    let regret = if c.max_regret > 0 {
        format!(
            " In truth the pick then had up to {} more requests in flight than the least-loaded backend.",
            c.max_regret
        )
    } else {
        String::new()
    };
    format!(
        "- {} `{}` decision(s) {when} ({} session(s)): {}.{views}{regret} Evidence: {}.",
        c.decisions,
        c.branch,
        c.sessions.len(),
        c.cause.text(),
        c.evidence
    )
}

/// Staleness and regret over the whole run.
fn whole_run(o: &mut String, s: &Staleness) {
    let _ = writeln!(o);
    let _ = writeln!(o, "## Over the whole run");
    let _ = writeln!(o);
    if s.decisions_with_engine_view > 0 {
        let _ = writeln!(
            o,
            "- {} of {} decisions that read engine stats read an entry older than {} s.",
            s.older_than_threshold, s.decisions_with_engine_view, s.stale_after_s
        );
    }
    let _ = writeln!(
        o,
        "- {} decisions picked a backend busier (in truth) than the least-loaded one; {} sessions stayed latched on a first pick that was not among the least loaded.",
        s.decisions_with_regret, s.latched_sessions
    );
}

/// The run beside its counterfactuals (the first of `all`), each with its difference, and
/// what each says about the cause.
fn counterfactuals(o: &mut String, all: &[Counterfactual]) {
    let base = &all[0];
    let _ = writeln!(o);
    let _ = writeln!(o, "## Counterfactuals (same scenario, same seed, same workload)");
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "| run | policy | idle_while_queued_s | stranded_slot_s | TTFT p50 s | TTFT p99 s | peak sessions on one backend |"
    );
    let _ = writeln!(o, "|---|---|---:|---:|---:|---:|---:|");
    for (i, c) in all.iter().enumerate() {
        let d = |v: f64, b: f64, places: usize| {
            if i == 0 {
                format!("{v:.places$}")
            } else {
                format!("{v:.places$} ({:+.places$})", v - b)
            }
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            c.label,
            c.policy,
            d(c.idle_while_queued_s, base.idle_while_queued_s, 1),
            d(c.stranded_slot_s, base.stranded_slot_s, 1),
            d(c.ttft_p50_s, base.ttft_p50_s, 3),
            d(c.ttft_p99_s, base.ttft_p99_s, 3),
            c.peak_backend_sessions
        );
    }
    let _ = writeln!(o);
    for c in &all[1..] {
        let _ = writeln!(o, "- {}", read_counterfactual(base, c));
    }
}

/// One sentence on what a counterfactual says about the cause.
pub(super) fn read_counterfactual(base: &Counterfactual, c: &Counterfactual) -> String {
    let b = base.idle_while_queued_s;
    let change = if b > 0.0 {
        (c.idle_while_queued_s - b) / b
    } else if c.idle_while_queued_s > 0.0 {
        1.0
    } else {
        0.0
    };
    let pct = (change.abs() * 100.0).round();
    if c.label == "fresh signals" {
        if change.abs() < 0.05 {
            "Fresh engine stats would not have helped: the decisions that stranded capacity did not read engine load (a dispatch-rate window, affinity or chance decided), so the fix is in the policy, not in the scrape interval.".to_string()
        } else if change <= -0.5 {
            format!(
                "Fresh engine stats remove {pct}% of the idle-while-queued time: the cause is what the router saw (stale, missing or wrong signals), not what it does with them."
            )
        } else if change < 0.0 {
            format!(
                "Fresh engine stats remove {pct}% of the idle-while-queued time: staleness explains part of it; the rest comes from the policy itself."
            )
        } else {
            format!(
                "Fresh engine stats make it {pct}% worse: the policy over-reacts to exact loads (every decision agrees, so they pile up)."
            )
        }
    } else if change < 0.0 {
        format!("{}: {pct}% less idle-while-queued time on the same workload.", c.policy)
    } else if change > 0.0 {
        format!("{}: {pct}% more idle-while-queued time on the same workload.", c.policy)
    } else {
        format!("{}: the same idle-while-queued time.", c.policy)
    }
}

/// At most `n` names, then "and k more".
/// "1 request", "2 requests".
pub(super) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub(super) fn list(names: &[String], n: usize) -> String {
    if names.len() <= n {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..n].join(", "), names.len() - n)
    }
}
/// Whether the autoscaler's scale-ups bought anything, and why not: the latch.
fn scale_story(o: &mut String, a: &super::ScaleStory) {
    let Some((t, from, to, value, reason)) = &a.first_up else {
        let _ = writeln!(o, "- The autoscaler never scaled up.");
        return;
    };
    let value = value.map_or_else(|| "no value".to_string(), |v| format!("the query read {v}"));
    let _ = writeln!(
        o,
        "- The autoscaler scaled up {} (first at {t:.1} s: {from} -> {to} replicas; {value}, {reason}).",
        count(a.scale_ups as usize, "time")
    );
    if a.replicas_never_served == 0 {
        let _ = writeln!(o, "- Every replica it added served requests.");
        return;
    }
    let _ = writeln!(
        o,
        "- Scale-up bought nothing: {} of the replicas it added never served a request ({}), and pods spent {:.1} replica-seconds idle while another backend queued. The latch: {} sessions stayed on a first pick that was not among the least loaded, and a new endpoint only ever gets new sessions' first turns, so the queue it was added for never moves.",
        a.replicas_never_served,
        list(&a.idle_backends, 6),
        a.replica_seconds_idle_while_queued,
        a.latched_sessions
    );
}
