//! How a replay of recorded calls compares with the recording: pacing counts, and recorded
//! vs simulated TTFT and end-to-end latency per call (`summary.json` `replay`, `sim explain`).

use serde::Serialize;

use super::{Percentiles, RequestRec, percentiles};
use crate::time::SimTime;
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

/// The replay block of a run from kept records, if it replayed a closed-loop trace or
/// recorded latencies.
pub fn summarize(w: &Workload, requests: &[RequestRec]) -> Option<ReplaySummary> {
    let mut s = ReplayStats::default();
    requests.iter().for_each(|r| s.add(w, r));
    s.finish(w)
}

/// What the replay block needs of the records of replayed sessions, taken record by record
/// in request-id order as they leave a run: the latency samples of calls that record
/// theirs, and each call's send and end time (24 bytes a replayed call).
#[derive(Clone, Debug, Default)]
pub struct ReplayStats {
    rt: Vec<f64>,
    st: Vec<f64>,
    re: Vec<f64>,
    se: Vec<f64>,
    ratio_t: Vec<f64>,
    ratio_e: Vec<f64>,
    calls: u64,
    /// Per call of a replayed session: (sent, session, turn, end; `u64::MAX` in flight).
    spans: Vec<(SimTime, u32, u32, u64)>,
}

impl ReplayStats {
    /// Takes one record as it stands (final, or in flight at the end of the run).
    pub fn add(&mut self, w: &Workload, r: &RequestRec) {
        let Some(rp) = w.sessions[r.session.index()].replay.as_deref() else {
            return;
        };
        let end = r.t_done.or(r.t_failed).map_or(u64::MAX, |t| t.0);
        self.spans.push((r.t_router, r.session.0, r.turn, end));
        let Some(done) = r.t_done else { return };
        let t = r.turn as usize;
        let e2e = rp.recorded_e2e_ns.get(t).copied().unwrap_or(NONE);
        let ttft = rp.recorded_ttft_ns.get(t).copied().unwrap_or(NONE);
        if e2e == NONE && ttft == NONE {
            return;
        }
        self.calls += 1;
        if e2e != NONE {
            let sim = (done.0 - r.t_router.0) as f64 / 1e9;
            self.re.push(e2e as f64 / 1e9);
            self.se.push(sim);
            if e2e > 0 {
                self.ratio_e.push(sim / (e2e as f64 / 1e9));
            }
        }
        if let (true, Some(fc)) = (ttft != NONE, r.t_first_chunk) {
            let sim = (fc.0 - r.t_router.0) as f64 / 1e9;
            self.rt.push(ttft as f64 / 1e9);
            self.st.push(sim);
            if ttft > 0 {
                self.ratio_t.push(sim / (ttft as f64 / 1e9));
            }
        }
    }

    /// The replay block, if the run replayed a closed-loop trace or recorded latencies.
    pub fn finish(self, w: &Workload) -> Option<ReplaySummary> {
        let ReplayStats {
            rt,
            st,
            re,
            se,
            ratio_t,
            ratio_e,
            calls,
            spans,
        } = self;
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
            overlapping_replayed: overlapping_replayed(spans),
            fidelity,
        })
    }
}

/// Calls of replayed sessions sent while an earlier call of the same session was in flight
/// (a call not finished nor failed is in flight to the end of the run); `spans` in
/// request-id order.
fn overlapping_replayed(mut spans: Vec<(SimTime, u32, u32, u64)>) -> u64 {
    // Stable: calls sent at once by one session keep their id order.
    spans.sort_by_key(|&(t, s, turn, _)| (t, s, turn));
    let mut busy_until: std::collections::HashMap<u32, u64> = Default::default();
    let mut n = 0;
    for (t, s, _, end) in spans {
        let b = busy_until.entry(s).or_insert(0);
        if t.0 < *b {
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
