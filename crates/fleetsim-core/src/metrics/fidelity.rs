//! How a replay of recorded calls compares with the recording: pacing counts, and recorded
//! vs simulated TTFT and end-to-end latency per call (`summary.json` `replay`, `sim explain`).

use serde::Serialize;

use super::{Percentiles, RequestRec, percentiles};
use crate::workload::Workload;
use crate::workload::pacing::{NONE, PacingCounts};

/// Recorded vs simulated latency of the calls that record it and finished in the run.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Fidelity {
    /// Calls compared.
    pub calls: u64,
    /// Recorded TTFT, seconds.
    pub recorded_ttft_s: Percentiles,
    /// Simulated TTFT of the same calls, seconds.
    pub simulated_ttft_s: Percentiles,
    /// Recorded start-to-end latency, seconds.
    pub recorded_e2e_s: Percentiles,
    /// Simulated end-to-end latency of the same calls, seconds.
    pub simulated_e2e_s: Percentiles,
    /// Per call, simulated / recorded TTFT.
    pub ttft_ratio: Percentiles,
    /// Per call, simulated / recorded end-to-end latency.
    pub e2e_ratio: Percentiles,
}

/// The `replay` block of the summary (absent for runs that replay no session trace).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ReplaySummary {
    /// How closed-loop replays paced their calls (`pacing.overlapping`: calls that
    /// overlapped an earlier call of their session in the recording).
    pub pacing: PacingCounts,
    /// Calls of replayed sessions that reached the router while an earlier call of their
    /// session was still in flight in the run: what the replay did, beside the recording's
    /// `pacing.overlapping`.
    pub overlapping_replayed: u64,
    /// Recorded vs simulated latency, when the trace records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Fidelity>,
}

/// The replay block of a run, if it replayed a closed-loop trace or recorded latencies.
pub fn summarize(w: &Workload, requests: &[RequestRec]) -> Option<ReplaySummary> {
    let mut rt = Vec::new();
    let mut st = Vec::new();
    let mut re = Vec::new();
    let mut se = Vec::new();
    let mut ratio_t = Vec::new();
    let mut ratio_e = Vec::new();
    let mut calls = 0u64;
    for r in requests {
        let Some(rp) = w.sessions[r.session.index()].replay.as_deref() else {
            continue;
        };
        let Some(done) = r.t_done else { continue };
        let t = r.turn as usize;
        let e2e = rp.recorded_e2e_ns.get(t).copied().unwrap_or(NONE);
        let ttft = rp.recorded_ttft_ns.get(t).copied().unwrap_or(NONE);
        if e2e == NONE && ttft == NONE {
            continue;
        }
        calls += 1;
        if e2e != NONE {
            let sim = (done.0 - r.t_router.0) as f64 / 1e9;
            re.push(e2e as f64 / 1e9);
            se.push(sim);
            if e2e > 0 {
                ratio_e.push(sim / (e2e as f64 / 1e9));
            }
        }
        if let (true, Some(fc)) = (ttft != NONE, r.t_first_chunk) {
            let sim = (fc.0 - r.t_router.0) as f64 / 1e9;
            rt.push(ttft as f64 / 1e9);
            st.push(sim);
            if ttft > 0 {
                ratio_t.push(sim / (ttft as f64 / 1e9));
            }
        }
    }
    let fidelity = (calls > 0).then(|| Fidelity {
        calls,
        recorded_ttft_s: percentiles(rt),
        simulated_ttft_s: percentiles(st),
        recorded_e2e_s: percentiles(re),
        simulated_e2e_s: percentiles(se),
        ttft_ratio: percentiles(ratio_t),
        e2e_ratio: percentiles(ratio_e),
    });
    let any = w.pacing.any() || fidelity.is_some();
    any.then(|| ReplaySummary {
        pacing: w.pacing,
        overlapping_replayed: overlapping_replayed(w, requests),
        fidelity,
    })
}

/// Calls of replayed sessions sent while an earlier call of the same session was in flight
/// (a call not finished nor failed is in flight to the end of the run).
fn overlapping_replayed(w: &Workload, requests: &[RequestRec]) -> u64 {
    let mut order: Vec<&RequestRec> = requests
        .iter()
        .filter(|r| w.sessions[r.session.index()].replay.is_some())
        .collect();
    order.sort_by_key(|r| (r.t_router, r.session.index(), r.turn));
    let mut busy_until: std::collections::HashMap<usize, u64> = Default::default();
    let mut n = 0;
    for r in order {
        let end = r.t_done.or(r.t_failed).map_or(u64::MAX, |t| t.0);
        let b = busy_until.entry(r.session.index()).or_insert(0);
        if r.t_router.0 < *b {
            n += 1;
        }
        *b = (*b).max(end);
    }
    n
}

/// The readout as text lines (for `sim run` and `sim explain`).
pub fn render(r: &ReplaySummary) -> Vec<String> {
    let p = &r.pacing;
    let mut out = vec![format!(
        "replay pacing: {} calls after a recorded end, {} after a think time, {} at a session offset, {} on the arrival-gap fallback; {} overlapped an earlier call of their session in the recording, {} in the replay",
        p.after_recorded_end,
        p.after_think_time,
        p.at_session_offset,
        p.arrival_gap_fallback,
        p.overlapping,
        r.overlapping_replayed
    )];
    if let Some(f) = &r.fidelity {
        let row = |name: &str, rec: &Percentiles, sim: &Percentiles, ratio: &Percentiles| {
            format!(
                "{name}: recorded p50 {:.3} s p99 {:.3} s; simulated p50 {:.3} s p99 {:.3} s; simulated/recorded per call p50 {:.2} p90 {:.2} ({} calls)",
                rec.p50, rec.p99, sim.p50, sim.p99, ratio.p50, ratio.p90, ratio.count
            )
        };
        out.push(format!("replay fidelity over {} recorded calls:", f.calls));
        if f.recorded_ttft_s.count > 0 {
            out.push(format!(
                "  {}",
                row("TTFT", &f.recorded_ttft_s, &f.simulated_ttft_s, &f.ttft_ratio)
            ));
        }
        if f.recorded_e2e_s.count > 0 {
            out.push(format!(
                "  {}",
                row("e2e ", &f.recorded_e2e_s, &f.simulated_e2e_s, &f.e2e_ratio)
            ));
        }
    }
    out
}
