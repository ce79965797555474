//! Idle-gap compression (`max_idle_gap_s`): a multi-day trace of agent sessions is mostly
//! nothing, so every mean over simulated time reads 0 and every plot is blank. A gap in
//! which no call of the trace is in flight (from the latest recorded end, or start when
//! the call records no end, to the next start) is cut to `max_idle_gap_s`; every later
//! call moves earlier by the total cut so far. A call in flight is never cut into, so the
//! pacing inside busy periods (think times, overlaps, recorded latencies) is kept exactly;
//! a session's gap that spans an idle period shrinks with it. Recorded `think_s` values
//! are kept as recorded.

use super::model::{NONE, Trace};

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
    let end_of = |t: &Trace, r: usize| match t.calls.as_deref().map(|c| c.end_ns[r]) {
        Some(e) if e != NONE => e.max(t.rows[r].t_ns),
        _ => t.rows[r].t_ns,
    };
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
}
