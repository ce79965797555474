//! Closed-loop replay of recorded agent sessions by happens-before.
//!
//! Within a session (calls in order of their recorded start, ties by file order), call `i`
//! waits for the call `j < i` that *finished latest before `i` started* (largest recorded
//! end `<= start_i`; ties: the later call) and is sent the recorded gap
//! `start_i - end_j` after `j` completes in the simulation. A call that overlapped every
//! earlier call in the recording (parallel tool calls, sub-agents started together) waits
//! for none: it is sent at its recorded offset from the session's first call, so calls that
//! overlapped in the recording overlap in the replay. Where a call records only its think
//! time (`think_s`), it waits for the previous call and the think time. Where neither an
//! end nor a think time is recorded, the call falls back to the recorded *arrival* gap
//! after the previous call's completion (the pre-existing closed-loop rule, which counts
//! service time twice); such calls are counted and warned about.
//!
//! [`ReplayPlan`] holds the result per session, plus what content and fidelity need.

/// No value recorded (a recorded latency, end or think time that the trace lacks).
pub const NONE: u64 = u64::MAX;

/// [`ReplayPlan::after`] of a call that waits for no other call.
pub const ROOT: u32 = u32::MAX;

/// How one replayed session's calls are paced and what their content is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplayPlan {
    /// Per call: the call it waits for, or [`ROOT`] (sent `think_before` after the session
    /// opens). Empty: not paced by happens-before.
    pub after: Vec<u32>,
    /// Calls waiting for call `t`: `waiting[starts[t]..starts[t + 1]]`; the roots other than
    /// call 0 are listed last, at index `after.len()`.
    starts: Vec<u32>,
    waiting: Vec<u32>,
    /// Each call's prompt is its own (`context = "independent"`), besides a shared prefix.
    pub independent: bool,
    /// Recorded TTFT per call, ns or [`NONE`] (empty: none recorded).
    pub recorded_ttft_ns: Vec<u64>,
    /// Recorded start-to-end latency per call, ns or [`NONE`] (empty: none recorded).
    pub recorded_e2e_ns: Vec<u64>,
}

impl ReplayPlan {
    /// Whether calls are paced by happens-before.
    pub fn paced(&self) -> bool {
        !self.after.is_empty()
    }

    /// Builds the waiting lists from [`ReplayPlan::after`].
    pub fn with_after(mut self, after: Vec<u32>) -> Self {
        let n = after.len();
        let mut count = vec![0u32; n + 2];
        for (i, &a) in after.iter().enumerate() {
            if i > 0 {
                let k = if a == ROOT { n } else { a as usize };
                count[k + 1] += 1;
            }
        }
        for k in 1..count.len() {
            count[k] += count[k - 1];
        }
        let mut fill = count.clone();
        let mut waiting = vec![0u32; count[n + 1] as usize];
        for (i, &a) in after.iter().enumerate() {
            if i > 0 {
                let k = if a == ROOT { n } else { a as usize };
                waiting[fill[k] as usize] = i as u32;
                fill[k] += 1;
            }
        }
        self.after = after;
        self.starts = count;
        self.waiting = waiting;
        self
    }

    /// Calls sent when call `t` completes.
    pub fn waiting_for(&self, t: u32) -> &[u32] {
        let t = t as usize;
        &self.waiting[self.starts[t] as usize..self.starts[t + 1] as usize]
    }

    /// Calls other than call 0 sent when the session opens.
    pub fn roots_after_first(&self) -> &[u32] {
        self.waiting_for(self.after.len() as u32)
    }

    /// Calls that can never be sent once call `t` is given up: `t` and everything waiting
    /// for it, directly or not.
    pub fn lost_with(&self, t: u32) -> usize {
        let mut lost = vec![false; self.after.len()];
        lost[t as usize] = true;
        let mut n = 1;
        for i in t as usize + 1..self.after.len() {
            let a = self.after[i];
            if a != ROOT && lost[a as usize] {
                lost[i] = true;
                n += 1;
            }
        }
        n
    }
}

/// How the calls of the replayed sessions were paced (for the summary and notes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PacingCounts {
    /// Calls sent the recorded gap after the completion of the call that finished latest
    /// before they started.
    pub after_recorded_end: u64,
    /// Calls sent their recorded think time after the previous call completed.
    pub after_think_time: u64,
    /// Calls sent at their recorded offset from the session's first call (they overlapped
    /// every earlier call, or are first).
    pub at_session_offset: u64,
    /// Calls with neither a recorded end before them nor a think time: sent the recorded
    /// arrival gap after the previous call completed (recorded service time counted twice).
    pub arrival_gap_fallback: u64,
    /// Calls that started while an earlier call of their session was still running in the
    /// recording.
    pub overlapping: u64,
}

impl PacingCounts {
    /// Adds `o`.
    pub fn add(&mut self, o: &PacingCounts) {
        self.after_recorded_end += o.after_recorded_end;
        self.after_think_time += o.after_think_time;
        self.at_session_offset += o.at_session_offset;
        self.arrival_gap_fallback += o.arrival_gap_fallback;
        self.overlapping += o.overlapping;
    }

    /// Whether any call was paced (a closed-loop replay).
    pub fn any(&self) -> bool {
        self.after_recorded_end + self.after_think_time + self.at_session_offset + self.arrival_gap_fallback > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_lists_and_losses() {
        let r = ReplayPlan::default().with_after(vec![ROOT, 0, 0, ROOT, 2, 3]);
        assert_eq!(r.waiting_for(0), &[1, 2]);
        assert_eq!(r.waiting_for(2), &[4]);
        assert_eq!(r.roots_after_first(), &[3]);
        assert_eq!(r.lost_with(0), 4);
        assert_eq!(r.lost_with(3), 2);
        assert_eq!(r.lost_with(5), 1);
    }
}
