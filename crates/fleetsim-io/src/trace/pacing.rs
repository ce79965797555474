//! Builds the happens-before pacing of recorded agent sessions
//! ([`fleetsim_core::workload::pacing`] holds the plan and the rule it follows).

use super::model::Calls;
pub use fleetsim_core::workload::pacing::{NONE, PacingCounts, ROOT, ReplayPlan};

/// Paces one session: `rows` are its calls in order, `start` their recorded starts (ns,
/// unscaled). Returns per call the call it waits for ([`ROOT`]: none) and the recorded gap
/// (after that call's end; for roots, after the session's first call's start), in trace ns.
pub fn pace(rows: &[u32], start: &[u64], calls: Option<&Calls>, counts: &mut PacingCounts) -> Vec<(u32, u64)> {
    let end = |i: usize| calls.map_or(NONE, |c| c.end_ns[rows[i] as usize]);
    let think = |i: usize| calls.map_or(NONE, |c| c.think_ns[rows[i] as usize]);
    let mut out = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        if i == 0 {
            out.push((ROOT, 0));
            counts.at_session_offset += 1;
            continue;
        }
        let s = start[i];
        // The call that finished latest before this one started.
        let mut dep: Option<(u64, usize)> = None;
        let mut unknown_before = false;
        let mut running = false;
        for j in 0..i {
            let e = end(j);
            if e == NONE {
                unknown_before = true;
            } else if e <= s {
                if dep.is_none_or(|(de, _)| e >= de) {
                    dep = Some((e, j));
                }
            } else {
                running = true;
            }
        }
        if running {
            counts.overlapping += 1;
        }
        let th = think(i);
        if th != NONE {
            out.push(((i - 1) as u32, th));
            counts.after_think_time += 1;
        } else if let Some((e, j)) = dep {
            out.push((j as u32, s - e));
            counts.after_recorded_end += 1;
        } else if unknown_before {
            out.push(((i - 1) as u32, s.saturating_sub(start[i - 1])));
            counts.arrival_gap_fallback += 1;
        } else {
            out.push((ROOT, s.saturating_sub(start[0])));
            counts.at_session_offset += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(ends: &[u64], think: &[u64]) -> Calls {
        Calls {
            end_ns: ends.to_vec(),
            think_ns: if think.is_empty() {
                vec![NONE; ends.len()]
            } else {
                think.to_vec()
            },
            ..Calls::default()
        }
    }

    #[test]
    fn happens_before_with_overlaps() {
        // Call 0: 0..10. Calls 1 and 2 start at 12 and 13 (both after 0 ended: wait for 0).
        // Call 3 starts at 14 while 1 and 2 run: waits for 0 too (latest end before 14).
        // Call 4 starts at 30 after 1 (ends 20) and 2 (ends 25) and 3 (ends 40, still
        // running): waits for 2, gap 5.
        // Call 5 starts at 1, overlapping call 0: a root at offset 1.
        let starts = [0, 12, 13, 14, 30];
        let c = calls(&[10, 20, 25, 40, 50], &[]);
        let mut k = PacingCounts::default();
        let p = pace(&[0, 1, 2, 3, 4], &starts, Some(&c), &mut k);
        assert_eq!(p, vec![(ROOT, 0), (0, 2), (0, 3), (0, 4), (2, 5)]);
        assert_eq!(k.after_recorded_end, 4);
        assert_eq!(k.overlapping, 3);
        let c = calls(&[10, 5], &[]);
        let p = pace(&[0, 1], &[0, 1], Some(&c), &mut PacingCounts::default());
        assert_eq!(p, vec![(ROOT, 0), (ROOT, 1)]);
    }

    #[test]
    fn think_time_and_fallback() {
        let c = calls(&[NONE, NONE, NONE], &[NONE, 2, NONE]);
        let mut k = PacingCounts::default();
        let p = pace(&[0, 1, 2], &[0, 7, 9], Some(&c), &mut k);
        assert_eq!(p, vec![(ROOT, 0), (0, 2), (1, 2)]);
        assert_eq!(
            (k.after_think_time, k.arrival_gap_fallback, k.at_session_offset),
            (1, 1, 1)
        );
        let p = pace(&[0, 1], &[5, 9], None, &mut k);
        assert_eq!(p, vec![(ROOT, 0), (0, 4)]);
    }
}
