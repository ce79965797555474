//! Idle-gap compression (`max_idle_gap_s`): a multi-day trace of agent sessions is mostly
//! nothing, so every mean over simulated time reads 0 and every plot is blank. A gap in
//! which no call of the trace is in flight (from the latest recorded end, or start when
//! the call records no end, to the next start) is cut to `max_idle_gap_s`; every later
//! call moves earlier by the total cut so far. A call in flight is never cut into, so the
//! pacing inside busy periods (think times, overlaps, recorded latencies) is kept exactly;
//! a session's gap that spans an idle period shrinks with it. Recorded `think_s` values
//! are kept as recorded.

use super::model::{NONE, Trace};
pub use fleetsim_core::workload::IdleSpans;

/// Gaps at least this long count as idle spans in reports (`sim trace inspect`, the run's
/// `idle-trace` hint): a pause between sessions, not a tool call or a user's think time.
pub const REPORT_GAP_NS: u64 = 600_000_000_000;

/// Where row `r`'s call ends: its recorded end, else its start.
fn end_of(t: &Trace, r: usize) -> u64 {
    match t.calls.as_deref().map(|c| c.end_ns[r]) {
        Some(e) if e != NONE => e.max(t.rows[r].t_ns),
        _ => t.rows[r].t_ns,
    }
}

/// The idle spans of `trace` of at least `min_gap_ns`: gaps in which no call is in flight
/// (from the latest recorded end, or start, to the next start), as [`compress`] sees them.
pub fn spans(trace: &Trace, min_gap_ns: u64) -> IdleSpans {
    let order = super::model::arrival_order(trace);
    let mut out = IdleSpans::default();
    let Some(&first) = order.first() else {
        return out;
    };
    let t0 = trace.rows[first as usize].t_ns;
    let mut busy_until = t0;
    for &r in &order {
        let s = trace.rows[r as usize].t_ns;
        if s > busy_until && s - busy_until >= min_gap_ns {
            out.gaps += 1;
            out.idle_ns += s - busy_until;
            out.longest_ns = out.longest_ns.max(s - busy_until);
        }
        busy_until = busy_until.max(end_of(trace, r as usize));
    }
    out.span_ns = busy_until - t0;
    out
}

/// A duration for a sentence: seconds, minutes, hours or days.
pub fn duration_text(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} days", s / 86_400.0)
    }
}

/// What the compression did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleCut {
    /// Gaps cut.
    pub gaps: u64,
    /// Total time removed, ns.
    pub cut_ns: u64,
    /// First start to last start or end, before, ns.
    pub span_before_ns: u64,
    /// ... and after, ns.
    pub span_after_ns: u64,
}

/// Cuts every idle gap of `trace` longer than `max_gap_ns` to `max_gap_ns` (start times
/// and recorded ends move together).
pub fn compress(trace: &mut Trace, max_gap_ns: u64) -> IdleCut {
    let order = super::model::arrival_order(trace);
    let mut cut = IdleCut::default();
    let Some(&first) = order.first() else {
        return cut;
    };
    let t0 = trace.rows[first as usize].t_ns;
    let mut busy_until = t0;
    let mut last = t0;
    let mut shift = 0u64;
    for &r in &order {
        let r = r as usize;
        let s = trace.rows[r].t_ns;
        if s > busy_until.saturating_add(max_gap_ns) {
            let c = s - busy_until - max_gap_ns;
            shift += c;
            cut.gaps += 1;
            cut.cut_ns += c;
        }
        let e = end_of(trace, r);
        busy_until = busy_until.max(e);
        last = last.max(e);
        trace.rows[r].t_ns = s - shift;
        if let Some(c) = trace.calls.as_deref_mut()
            && c.end_ns[r] != NONE
        {
            c.end_ns[r] = c.end_ns[r].max(s) - shift;
        }
    }
    cut.span_before_ns = last - t0;
    cut.span_after_ns = last - t0 - shift;
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::model::{Calls, TraceRow};

    fn trace(rows: &[(u64, u64)]) -> Trace {
        Trace {
            rows: rows
                .iter()
                .map(|&(t, _)| TraceRow {
                    t_ns: t,
                    input: 10,
                    output: 1,
                    session: 0,
                    turn: 0,
                    blocks_off: 0,
                    blocks_len: 0,
                    line: 0,
                })
                .collect(),
            calls: Some(Box::new(Calls {
                end_ns: rows.iter().map(|&(_, e)| e).collect(),
                ttft_ns: vec![NONE; rows.len()],
                think_ns: vec![NONE; rows.len()],
                ..Calls::default()
            })),
            ..Trace::default()
        }
    }

    #[test]
    fn only_gaps_with_nothing_in_flight_are_cut() {
        // Busy 0..10 and 5..20 (overlap), idle 20..1000, busy 1000..1010, idle to 5000.
        let mut t = trace(&[(0, 10), (5, 20), (1000, 1010), (5000, NONE)]);
        let c = compress(&mut t, 100);
        assert_eq!(
            (c.gaps, c.cut_ns, c.span_before_ns, c.span_after_ns),
            (2, 880 + 3890, 5000, 230)
        );
        let starts: Vec<u64> = t.rows.iter().map(|r| r.t_ns).collect();
        assert_eq!(starts, [0, 5, 120, 230]);
        assert_eq!(t.calls.as_ref().unwrap().end_ns[..3], [10, 20, 130]);
        // A gap within the limit, or a call in flight across a long wait, is untouched.
        let mut t = trace(&[(0, 900), (800, 810), (850, NONE)]);
        assert_eq!(compress(&mut t, 100).gaps, 0);
        assert_eq!(t.rows.iter().map(|r| r.t_ns).collect::<Vec<_>>(), [0, 800, 850]);
    }

    #[test]
    fn idle_spans_count_only_gaps_with_nothing_in_flight() {
        // Idle 20..1000 (980) and 1010..5000 (3990); the 5..20 overlap is busy.
        let t = trace(&[(0, 10), (5, 20), (1000, 1010), (5000, NONE)]);
        let s = spans(&t, 100);
        assert_eq!((s.gaps, s.idle_ns, s.longest_ns, s.span_ns), (2, 4970, 3990, 5000));
        assert!((s.share() - 0.994).abs() < 1e-12);
        assert_eq!(spans(&t, 1000).gaps, 1);
        // What compress cuts is each idle span less the limit.
        let mut c = trace(&[(0, 10), (5, 20), (1000, 1010), (5000, NONE)]);
        assert_eq!(compress(&mut c, 100).cut_ns, s.idle_ns - 2 * 100);
    }
}
