//! `sim trace inspect`: what a trace holds, as a table or JSON.

use serde::Serialize;

use super::model::{Trace, prefix_chain};
pub use super::quantiles::Quantiles;
use super::replay::{SessionMode, arrival_order, group_sessions};
use super::sessions::{InferConfig, InferStats, SynthConfig};

/// Prefix-sharing statistics (traces with block ids).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PrefixStats {
    /// Tokens per block.
    pub block_tokens: u32,
    /// Rows with at least one block id.
    pub rows_with_blocks: u64,
    /// Block ids over all rows.
    pub blocks: u64,
    /// Distinct block ids.
    pub distinct_blocks: u64,
    /// Share of blocks whose whole prefix (this block and all before it) appeared in an
    /// earlier request: the hit rate of an infinite prefix cache, by blocks.
    pub reusable_prefix_share: f64,
    /// Rows sharing at least their first block with an earlier row.
    pub rows_sharing_first_block: u64,
}

/// Everything `sim trace inspect` reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Inspection {
    /// File.
    pub file: String,
    /// Format.
    pub format: String,
    /// Requests.
    pub requests: u64,
    /// Rows skipped as malformed.
    pub skipped_rows: u64,
    /// Rows whose 0 output tokens replay as 1.
    pub zero_output_rows: u64,
    /// First to last arrival, seconds.
    pub span_s: f64,
    /// Requests per second over the span.
    pub rate_per_s: f64,
    /// Most arrivals in any 1 s window.
    pub max_arrivals_in_1s: u64,
    /// Distinct arrival instants (batched timestamps show as few).
    pub distinct_arrival_times: u64,
    /// Prompt tokens.
    pub input_tokens: Quantiles,
    /// Output tokens.
    pub output_tokens: Quantiles,
    /// Prefix sharing, when the trace has block ids.
    pub prefix: Option<PrefixStats>,
    /// How sessions were found (`trace`, `infer`, `none`).
    pub session_source: String,
    /// Session statistics.
    pub sessions: InferStats,
    /// Session shape, for traces with session ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<super::agent_inspect::AgentStats>,
    /// The model names the trace's calls carry, with how many calls each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<TraceModel>,
    /// Idle spans: gaps of [`super::idle::REPORT_GAP_NS`] or more with no call in flight.
    pub idle: IdleStats,
    /// The recorded length of a part every call repeats, when a column records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_part: Option<SharedPart>,
}

/// A trace's idle spans (what `max_idle_gap_s` would cut).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IdleStats {
    /// Spans of 10 minutes or more with no call in flight.
    pub gaps: u64,
    /// Their total, seconds.
    pub idle_s: f64,
    /// The longest, seconds.
    pub longest_s: f64,
    /// Share of the span they take, 0 to 1.
    pub share: f64,
    /// The span: first start to last start or recorded end, seconds.
    pub span_s: f64,
}

/// A recorded shared part (`columns.shared_prefix_tokens` or `shared_prefix_chars`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SharedPart {
    /// The mapping key: `shared_prefix_tokens` or `shared_prefix_chars`.
    pub key: String,
    /// Calls recording a part.
    pub calls: u64,
    /// Distinct recorded lengths.
    pub distinct: u64,
    /// The most common length, in the column's unit.
    pub most_common: u32,
    /// Calls recording it.
    pub most_common_calls: u64,
}

/// The recorded shared part of `trace`, if a column records one.
fn shared_part(trace: &Trace) -> Option<SharedPart> {
    let c = trace.calls.as_deref().filter(|c| c.records_shared())?;
    let mut counts: std::collections::BTreeMap<u32, u64> = Default::default();
    for &n in &c.shared_len {
        if n != super::model::NO_SHARED && n > 0 {
            *counts.entry(n).or_default() += 1;
        }
    }
    let (&most_common, &most_common_calls) = counts.iter().max_by_key(|(l, n)| (**n, std::cmp::Reverse(**l)))?;
    Some(SharedPart {
        key: if c.shared_in_chars {
            "shared_prefix_chars"
        } else {
            "shared_prefix_tokens"
        }
        .into(),
        calls: counts.values().sum(),
        distinct: counts.len() as u64,
        most_common,
        most_common_calls,
    })
}

/// One model name of a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TraceModel {
    /// As the trace writes it.
    pub name: String,
    /// Calls naming it.
    pub calls: u64,
    /// The model shape `profile = "auto"` prices it with (`sim profiles --models`), or
    /// `None`: unmapped (give it a profile, or it runs only where a group `serves` it).
    pub shape: Option<String>,
}

/// The model names of `trace`'s calls, most calls first (ties: name).
fn trace_models(trace: &Trace) -> Vec<TraceModel> {
    let Some(c) = trace.calls.as_ref() else {
        return Vec::new();
    };
    let mut counts = vec![0u64; c.models.len()];
    for &m in &c.model {
        if let Some(n) = counts.get_mut(m as usize) {
            *n += 1;
        }
    }
    let mut out: Vec<TraceModel> = c
        .models
        .iter()
        .zip(counts)
        .map(|(name, calls)| TraceModel {
            name: name.clone(),
            calls,
            shape: crate::profiles::models::resolve(name).map(|(m, _)| m.name.to_string()),
        })
        .collect();
    out.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.name.cmp(&b.name)));
    out
}

/// What a trace without block hashes cannot say about its prompts, and the key that
/// models the part every call repeats.
pub const LENGTHS_ONLY: &str = "lengths only: which prompt tokens calls share (a system prompt, tool definitions) is not recorded; replayed, every session's prompt is its own, so a router's prefix affinity has nothing to latch on. If every call repeats a part of known size, model it with shared_prefix_tokens = N (tokens) on the [[workload.traces]] table, or map a column that records it (columns.shared_prefix_chars or shared_prefix_tokens)";

/// Inspects a parsed trace; sessions as `sim run` would group them with `sessions = "auto"`.
pub fn inspect(trace: &Trace, block_tokens: u32, infer: &InferConfig) -> Inspection {
    let order = arrival_order(trace);
    let n = order.len() as u64;
    let times: Vec<u64> = order.iter().map(|&r| trace.rows[r as usize].t_ns).collect();
    let span_ns = match (times.first(), times.last()) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    };
    let mut distinct = times.clone();
    distinct.dedup();
    let mut input: Vec<u64> = trace.rows.iter().map(|r| u64::from(r.input)).collect();
    let mut output: Vec<u64> = trace.rows.iter().map(|r| u64::from(r.output)).collect();
    let prefix = trace.has_blocks().then(|| prefix_stats(trace, &order, block_tokens));
    let (grouping, used, sessions) = group_sessions(
        trace,
        &order,
        SessionMode::Auto,
        infer,
        &SynthConfig::default(),
        block_tokens,
        &mut fleetsim_core::rng::stream(0, "trace/inspect", 0),
    );
    Inspection {
        file: trace.file.clone(),
        format: trace.format.map_or("?", |f| f.as_str()).to_string(),
        requests: n,
        skipped_rows: trace.skipped,
        zero_output_rows: trace.zero_output_rows,
        span_s: span_ns as f64 / 1e9,
        rate_per_s: if span_ns == 0 {
            0.0
        } else {
            n as f64 / (span_ns as f64 / 1e9)
        },
        max_arrivals_in_1s: max_in_one_second(&times),
        distinct_arrival_times: distinct.len() as u64,
        input_tokens: Quantiles::of(&mut input),
        output_tokens: Quantiles::of(&mut output),
        prefix,
        session_source: used.to_string(),
        sessions,
        models: trace_models(trace),
        idle: {
            let sp = super::idle::spans(trace, super::idle::REPORT_GAP_NS);
            IdleStats {
                gaps: sp.gaps,
                idle_s: sp.idle_ns as f64 / 1e9,
                longest_s: sp.longest_ns as f64 / 1e9,
                share: sp.share(),
                span_s: sp.span_ns as f64 / 1e9,
            }
        },
        shared_part: shared_part(trace),
        agent: (trace.has_sessions() || trace.calls.is_some())
            .then(|| super::agent_inspect::stats(trace, &grouping, block_tokens)),
    }
}

/// The most arrivals in any one-second window (`times` sorted, ns): the burst a router sees.
fn max_in_one_second(times: &[u64]) -> u64 {
    let mut burst = 0u64;
    let mut lo = 0usize;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= 1_000_000_000 {
            lo += 1;
        }
        burst = burst.max((hi - lo + 1) as u64);
    }
    burst
}

/// How much of the rows' prefix content repeats, in arrival `order`: the share of blocks
/// that continue a prefix seen before (what a prefix cache could reuse), and the rows that
/// share their first block.
fn prefix_stats(trace: &Trace, order: &[u32], block_tokens: u32) -> PrefixStats {
    let mut seen = rustc_hash::FxHashSet::default();
    let mut first = rustc_hash::FxHashSet::default();
    let mut st = PrefixStats {
        block_tokens,
        distinct_blocks: trace.raw_blocks.len() as u64,
        ..PrefixStats::default()
    };
    let mut reused = 0u64;
    for &r in order {
        let b = trace.rows[r as usize].blocks(&trace.blocks);
        if b.is_empty() {
            continue;
        }
        st.rows_with_blocks += 1;
        st.blocks += b.len() as u64;
        if !first.insert(b[0]) {
            st.rows_sharing_first_block += 1;
        }
        let mut all_seen = true;
        for h in prefix_chain(b) {
            let new = seen.insert(h);
            if all_seen && !new {
                reused += 1;
            } else {
                all_seen = false;
            }
        }
    }
    st.reusable_prefix_share = if st.blocks == 0 {
        0.0
    } else {
        reused as f64 / st.blocks as f64
    };
    st
}

/// What a trace without block hashes records of its shared prompts: a recorded part, or
/// lengths only ([`LENGTHS_ONLY`]).
fn shared_text(x: &Inspection) -> String {
    let Some(p) = &x.shared_part else {
        return LENGTHS_ONLY.into();
    };
    let unit = if p.key == "shared_prefix_chars" {
        "characters"
    } else {
        "tokens"
    };
    format!(
        "recorded (columns.{}): {} of {} calls record a part every call repeats, {} distinct lengths, the most common {} {unit} on {} calls; replayed as a prefix shared by the sessions recording the same length",
        p.key, p.calls, x.requests, p.distinct, p.most_common, p.most_common_calls
    )
}

/// The trace's idle spans and the key that cuts them.
fn idle_text(x: &Inspection) -> String {
    let i = &x.idle;
    let min = super::idle::duration_text(super::idle::REPORT_GAP_NS);
    if i.gaps == 0 {
        return format!("none of {min} or more with no call in flight");
    }
    let ns = |s: f64| (s * 1e9) as u64;
    format!(
        "{:.1} % of the span: {} spans of {min} or more with no call in flight, {} of {}, longest {}; max_idle_gap_s = 60 on the [[workload.traces]] table cuts each to a minute",
        100.0 * i.share,
        i.gaps,
        super::idle::duration_text(ns(i.idle_s)),
        super::idle::duration_text(ns(i.span_s)),
        super::idle::duration_text(ns(i.longest_s)),
    )
}

/// The inspection as an aligned text table.
pub fn render(x: &Inspection) -> String {
    let mut rows: Vec<(String, String)> = vec![
        ("file".into(), x.file.clone()),
        ("format".into(), x.format.clone()),
        ("requests".into(), x.requests.to_string()),
        ("skipped rows".into(), x.skipped_rows.to_string()),
        ("span".into(), format!("{:.3} s", x.span_s)),
        ("rate".into(), format!("{:.3} req/s", x.rate_per_s)),
        ("max arrivals in 1 s".into(), x.max_arrivals_in_1s.to_string()),
        ("distinct arrival times".into(), x.distinct_arrival_times.to_string()),
    ];
    if x.zero_output_rows > 0 {
        rows.push(("rows with 0 output".into(), x.zero_output_rows.to_string()));
    }
    for (name, q) in [("input tokens", &x.input_tokens), ("output tokens", &x.output_tokens)] {
        rows.push((
            name.into(),
            format!(
                "mean {:.1}  p50 {}  p90 {}  p99 {}  max {}",
                q.mean, q.p50, q.p90, q.p99, q.max
            ),
        ));
    }
    match &x.prefix {
        Some(p) => {
            rows.push((
                "prefix blocks".into(),
                format!(
                    "{} ids ({} distinct) of {} tokens on {} requests",
                    p.blocks, p.distinct_blocks, p.block_tokens, p.rows_with_blocks
                ),
            ));
            rows.push((
                "reusable prefix".into(),
                format!(
                    "{:.1}% of blocks (infinite-cache hit rate)",
                    100.0 * p.reusable_prefix_share
                ),
            ));
            rows.push((
                "share first block".into(),
                format!("{} requests with an earlier one", p.rows_sharing_first_block),
            ));
        }
        None => {
            rows.push(("prefix blocks".into(), "none".into()));
            rows.push(("shared prompts".into(), shared_text(x)));
        }
    }
    rows.push(("idle spans".into(), idle_text(x)));
    for m in &x.models {
        let how = match &m.shape {
            Some(shape) => format!("profile = \"auto\" prices it as {shape} (set the group's gpu and serves)"),
            None => "unmapped: no shipped shape; give the group that serves it a profile of its own (`sim run` warns while its calls run on another model's profile)"
                .into(),
        };
        rows.push((
            format!("model {}", crate::quote::quote(&m.name)),
            format!("{} calls; {how}", m.calls),
        ));
    }
    let s = &x.sessions;
    rows.push((
        format!("sessions ({})", x.session_source),
        format!(
            "{} sessions, {} chains of 2+ turns, {} linked turns, {} branches, {} fanout-limited, {} rejected for not growing, longest {}, mean {:.2} turns",
            s.sessions, s.chains, s.linked, s.branches, s.fanout_limited, s.rejected_no_growth, s.longest_chain, s.mean_turns
        ),
    ));
    if let Some(a) = &x.agent {
        rows.extend(super::agent_inspect::rows(a));
    }
    crate::output::render(&[], rows.into_iter().map(|(k, v)| vec![k, v]), &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::model::Format;
    use crate::trace::reader::read_from;

    #[test]
    fn quantiles_and_burstiness() {
        let text = "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [1, 2]}\n\
                    {\"timestamp\": 500, \"input_length\": 2048, \"output_length\": 3, \"hash_ids\": [1, 2, 3, 4]}\n\
                    {\"timestamp\": 900, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [9]}\n\
                    {\"timestamp\": 3000, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 7]}\n";
        let t = read_from(text.as_bytes(), "m", Format::Mooncake, false).unwrap();
        let x = inspect(&t, 512, &InferConfig::default());
        assert_eq!(x.requests, 4);
        assert_eq!(x.max_arrivals_in_1s, 3);
        assert_eq!(x.span_s, 3.0);
        assert_eq!(x.input_tokens.p50, 600);
        assert_eq!(x.input_tokens.max, 2048);
        let p = x.prefix.as_ref().unwrap();
        assert_eq!(p.blocks, 9);
        assert_eq!(p.distinct_blocks, 6);
        // Reused: blocks 1, 2 of row 2 and block 1 of row 4.
        assert!((p.reusable_prefix_share - 3.0 / 9.0).abs() < 1e-12);
        assert_eq!(p.rows_sharing_first_block, 2);
        assert_eq!(x.session_source, "infer");
        assert_eq!(x.sessions.chains, 1);
        assert!(render(&x).contains("max arrivals in 1 s"));
    }
}
