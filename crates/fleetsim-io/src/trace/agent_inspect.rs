//! `sim trace inspect` on session traces: how calls are shaped within sessions.

use serde::Serialize;

use super::model::{NONE, Trace, prefix_chain};
use super::pacing::{PacingCounts, ROOT, pace};
use super::quantiles::Quantiles;
use super::sessions::Sessions;

/// Quantiles of a duration, seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Durations {
    /// Sample size.
    pub count: u64,
    /// Median.
    pub p50_s: f64,
    /// 99th percentile.
    pub p99_s: f64,
    /// Largest.
    pub max_s: f64,
}

impl Durations {
    fn of(mut ns: Vec<u64>) -> Durations {
        let q = Quantiles::of(&mut ns);
        Durations {
            count: ns.len() as u64,
            p50_s: q.p50 as f64 / 1e9,
            p99_s: q.p99 as f64 / 1e9,
            max_s: q.max as f64 / 1e9,
        }
    }
}

/// Session-shape statistics.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AgentStats {
    /// Sessions.
    pub sessions: u64,
    /// Calls per session.
    pub calls_per_session: Quantiles,
    /// Calls that started while an earlier call of their session was running (needs
    /// recorded ends).
    pub overlapping_calls: u64,
    /// Recorded tool-call durations.
    pub tool_time: Durations,
    /// Client time between a call's gating end and its start (recorded think time where the
    /// trace has it, else the happens-before gap).
    pub think_time: Durations,
    /// Input growth from a session's previous call, tokens (calls whose input grew).
    pub context_growth_tokens: Quantiles,
    /// Calls whose input did not grow over their session's previous call.
    pub calls_not_growing: u64,
    /// Most sessions active at once (from first start to last end, or last start).
    pub peak_concurrent_sessions: u64,
    /// Calls that open-loop closed-loop replay would pace by each rule.
    pub pacing: PacingCounts,
    /// With block hashes: share of prompt blocks whose whole prefix appeared earlier in
    /// *another* session (an infinite prefix cache's cross-session hit rate).
    pub cross_session_prefix_share: Option<f64>,
    /// With block hashes: mean tokens of a session's first prompt already sent by another
    /// session (a shared system prompt and tool definitions).
    pub first_call_shared_prefix_tokens: Option<f64>,
}

/// Statistics of `sessions` (as grouped for replay) of `trace`.
pub fn stats(trace: &Trace, sessions: &Sessions, block_tokens: u32) -> AgentStats {
    let calls = trace.calls.as_deref();
    let mut st = AgentStats {
        sessions: sessions.len() as u64,
        ..AgentStats::default()
    };
    let mut per = Vec::with_capacity(sessions.len());
    let mut growth = Vec::new();
    let mut think = Vec::new();
    let mut spans: Vec<(u64, i8)> = Vec::with_capacity(2 * sessions.len());
    for i in 0..sessions.len() {
        let rows = sessions.session(i);
        per.push(rows.len() as u64);
        let starts: Vec<u64> = rows.iter().map(|&r| trace.rows[r as usize].t_ns).collect();
        let p = pace(rows, &starts, calls, &mut st.pacing);
        for (k, &(after, gap)) in p.iter().enumerate() {
            if k > 0 && after != ROOT {
                let recorded = calls.map_or(NONE, |c| c.think_ns[rows[k] as usize]);
                if recorded != NONE || calls.is_some_and(|c| c.end_ns[rows[after as usize] as usize] != NONE) {
                    think.push(gap);
                }
            }
        }
        for w in rows.windows(2) {
            let (a, b) = (trace.rows[w[0] as usize].input, trace.rows[w[1] as usize].input);
            if b > a {
                growth.push(u64::from(b - a));
            } else {
                st.calls_not_growing += 1;
            }
        }
        let first = starts.iter().copied().min().unwrap_or(0);
        let last = rows
            .iter()
            .map(|&r| {
                let e = calls.map_or(NONE, |c| c.end_ns[r as usize]);
                if e == NONE { trace.rows[r as usize].t_ns } else { e }
            })
            .max()
            .unwrap_or(first);
        spans.push((first, 1));
        spans.push((last.max(first) + 1, -1));
    }
    st.overlapping_calls = st.pacing.overlapping;
    st.calls_per_session = Quantiles::of(&mut per);
    st.context_growth_tokens = Quantiles::of(&mut growth);
    st.think_time = Durations::of(think);
    st.tool_time = Durations::of(calls.map_or(Vec::new(), |c| c.tool_ns.clone()));
    spans.sort_unstable();
    let mut open = 0i64;
    for (_, d) in spans {
        open += i64::from(d);
        st.peak_concurrent_sessions = st.peak_concurrent_sessions.max(open as u64);
    }
    if trace.has_blocks() {
        cross_session(trace, sessions, block_tokens, &mut st);
    }
    st
}

/// Prefix blocks first sent by another session (in arrival order).
fn cross_session(trace: &Trace, sessions: &Sessions, block_tokens: u32, st: &mut AgentStats) {
    let mut owner = vec![u32::MAX; trace.rows.len()];
    for i in 0..sessions.len() {
        for &r in sessions.session(i) {
            owner[r as usize] = i as u32;
        }
    }
    let order = super::replay::arrival_order(trace);
    // Chained prefix hash -> the first session that sent it.
    let mut seen: rustc_hash::FxHashMap<u64, u32> = rustc_hash::FxHashMap::default();
    let mut first_call = vec![true; sessions.len()];
    let (mut blocks, mut shared) = (0u64, 0u64);
    let (mut first_tokens, mut firsts) = (0u64, 0u64);
    for r in order {
        let s = owner[r as usize];
        if s == u32::MAX {
            continue;
        }
        let b = trace.rows[r as usize].blocks(&trace.blocks);
        let mut run = true;
        let mut run_blocks = 0u64;
        for h in prefix_chain(b) {
            blocks += 1;
            let from = *seen.entry(h).or_insert(s);
            if run && from != s {
                shared += 1;
                run_blocks += 1;
            } else {
                run = false;
            }
        }
        if std::mem::take(&mut first_call[s as usize]) {
            firsts += 1;
            first_tokens += (run_blocks * u64::from(block_tokens)).min(u64::from(trace.rows[r as usize].input));
        }
    }
    st.cross_session_prefix_share = Some(if blocks == 0 {
        0.0
    } else {
        shared as f64 / blocks as f64
    });
    st.first_call_shared_prefix_tokens = Some(if firsts == 0 {
        0.0
    } else {
        first_tokens as f64 / firsts as f64
    });
}

/// Table rows for the `sim trace inspect` table.
pub fn rows(a: &AgentStats) -> Vec<(String, String)> {
    let d = |x: &Durations| {
        if x.count == 0 {
            "none recorded".to_string()
        } else {
            format!(
                "p50 {:.3} s  p99 {:.3} s  max {:.3} s  ({} values)",
                x.p50_s, x.p99_s, x.max_s, x.count
            )
        }
    };
    let q = &a.calls_per_session;
    let g = &a.context_growth_tokens;
    let mut v = vec![
        (
            "calls per session".to_string(),
            format!("p50 {}  p99 {}  max {}  ({} sessions)", q.p50, q.p99, q.max, a.sessions),
        ),
        ("overlapping calls".into(), a.overlapping_calls.to_string()),
        ("tool time".into(), d(&a.tool_time)),
        ("think time".into(), d(&a.think_time)),
        (
            "context growth".into(),
            format!(
                "p50 {}  p99 {}  max {} tokens per call; {} calls did not grow",
                g.p50, g.p99, g.max, a.calls_not_growing
            ),
        ),
        (
            "peak concurrent sessions".into(),
            a.peak_concurrent_sessions.to_string(),
        ),
        (
            "closed-loop pacing".into(),
            format!(
                "{} after a recorded end, {} after a think time, {} at a session offset, {} arrival-gap fallback",
                a.pacing.after_recorded_end,
                a.pacing.after_think_time,
                a.pacing.at_session_offset,
                a.pacing.arrival_gap_fallback
            ),
        ),
    ];
    if let (Some(s), Some(t)) = (a.cross_session_prefix_share, a.first_call_shared_prefix_tokens) {
        v.push((
            "cross-session prefix".into(),
            format!(
                "{:.1}% of blocks first sent by another session; first calls share {:.0} tokens on average",
                100.0 * s,
                t
            ),
        ));
    }
    v
}
