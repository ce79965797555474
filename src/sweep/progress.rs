//! Sweep progress: an ETA weighted by each point's measured cost, and a plain progress line
//! every few seconds ([`LINE_EVERY`] by default, `--progress-every-s`) for logs (a Slurm job's stderr is a file, where a progress bar
//! draws nothing until the end).
//!
//! Runs of one point cost about the same (seeds vary only the draws), while points can
//! differ by orders of magnitude (fleet size, request count), so the remaining work is the
//! sum over the runs left of their point's mean measured cost (the mean over all measured
//! runs for a point not yet measured), and the ETA is that work divided by the rate at
//! which measured work is getting done (CPU-seconds per wall second, i.e. the effective
//! parallelism).

use std::time::Duration;

/// Default time between progress lines when stderr is not a terminal.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// Measured cost per point and the runs left.
#[derive(Clone, Debug)]
pub struct Progress {
    cost_s: Vec<f64>,
    measured: Vec<u32>,
    left: Vec<u64>,
    done: u64,
    total: u64,
}

impl Progress {
    /// `todo` lists the point of every run to do.
    pub fn new(points: u64, todo: impl IntoIterator<Item = u64>) -> Progress {
        let mut left = vec![0; points as usize];
        let mut total = 0;
        for p in todo {
            left[p as usize] += 1;
            total += 1;
        }
        Progress {
            cost_s: vec![0.0; points as usize],
            measured: vec![0; points as usize],
            left,
            done: 0,
            total,
        }
    }

    /// Records a finished run of `point` that took `cost_s` seconds on its worker.
    pub fn record(&mut self, point: u64, cost_s: f64) {
        let p = point as usize;
        self.cost_s[p] += cost_s;
        self.measured[p] += 1;
        self.left[p] = self.left[p].saturating_sub(1);
        self.done += 1;
    }

    /// Runs done and to do in this invocation.
    pub fn counts(&self) -> (u64, u64) {
        (self.done, self.total)
    }

    /// Seconds left at `elapsed_s` into the sweep; None until a run has finished.
    pub fn eta_s(&self, elapsed_s: f64) -> Option<f64> {
        let done_s: f64 = self.cost_s.iter().sum();
        let n: u32 = self.measured.iter().sum();
        if n == 0 || done_s <= 0.0 || elapsed_s <= 0.0 {
            return None;
        }
        let overall = done_s / f64::from(n);
        let work_s: f64 = self
            .left
            .iter()
            .zip(self.cost_s.iter().zip(&self.measured))
            .map(|(&l, (&c, &m))| l as f64 * if m > 0 { c / f64::from(m) } else { overall })
            .sum();
        Some(work_s * elapsed_s / done_s)
    }

    /// `sweep: 120/1920 runs (6%), 45 runs/s, 2.7 s elapsed, ETA 40 s`.
    pub fn line(&self, elapsed_s: f64) -> String {
        let pct = if self.total == 0 {
            100.0
        } else {
            100.0 * self.done as f64 / self.total as f64
        };
        let eta = self.eta_s(elapsed_s).map_or("-".to_string(), fmt_duration);
        format!(
            "sweep: {}/{} runs ({pct:.0}%), {:.0} runs/s, {} elapsed, ETA {eta}",
            self.done,
            self.total,
            self.done as f64 / elapsed_s.max(1e-9),
            fmt_duration(elapsed_s)
        )
    }
}

/// `42 s`, `3 min 05 s`, `2 h 07 min`.
pub fn fmt_duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_weights_runs_by_their_points_cost() {
        // Point 0 costs 1 s a run, point 1 costs 9 s; 2 threads (2 s of work per wall s).
        let mut p = Progress::new(2, [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(p.eta_s(1.0), None);
        p.record(0, 1.0);
        p.record(0, 1.0);
        // Point 1 not measured yet: costed as the overall mean (1 s): 2 + 4 runs x 1 s.
        assert_eq!(p.eta_s(1.0), Some(6.0 * 1.0 / 2.0));
        p.record(1, 9.0);
        // Left: 2 x 1 s + 3 x 9 s = 29 s of work at 11 s of work per 5.5 s of wall.
        assert_eq!(p.eta_s(5.5), Some(29.0 * 5.5 / 11.0));
        // An unweighted ETA would say 5 runs x (5.5 s / 3 runs) = 9.2 s.
        assert_eq!(p.counts(), (3, 8));
        assert_eq!(p.line(5.5), "sweep: 3/8 runs (38%), 1 runs/s, 6 s elapsed, ETA 15 s");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_duration(42.4), "42 s");
        assert_eq!(fmt_duration(185.0), "3 min 05 s");
        assert_eq!(fmt_duration(7620.0), "2 h 07 min");
    }
}
