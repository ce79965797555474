//! Resource pre-flight: before the workload or the fleet is allocated, estimate the memory a
//! run needs from what drives it (sessions x turns, backends x KV blocks, trace rows x
//! repeat, the decision audit of every request over every backend, and the writing of the
//! result files) and refuse beyond `limits.max_memory_gib` with one line naming the key and
//! the estimate, instead of an allocation abort (SIGABRT, no message) minutes later, or an
//! "out of memory" after the whole simulation.
//!
//! The estimates are upper-bound style costs per unit measured on this code (a request's
//! plan, its record and its summary samples; a KV block's ring slot and index entry); they
//! aim at the order of magnitude that separates a feasible run from an abort.
//!
//! The scenario's estimate is what `sim run` holds: it streams the decision audit, the
//! request records and the time series to its writer thread as the run goes, so those
//! cost at most a fixed [`STREAM_BYTES`] whatever the run's length, not [`BYTES_PER_VIEW`]
//! per request and backend ([`stream_bytes`]). A request's record is still counted in [`BYTES_PER_REQUEST`]: the
//! records wait in request-id order until the oldest unfinished one is final, and one
//! request that never finishes holds every later record (the safe side). The commands that
//! keep the whole audit (`sim run --explain`, `sim explain`) check it on top
//! ([`held_audit_need`]).
//!
//! Owns: the memory estimate. May not see: a run. Invariant: refuses before allocating,
//! with the key that drives the size.

/// Bytes per planned request: turn plan, request record, per-request metrics (the router's
/// books, the summary's latency samples).
pub const BYTES_PER_REQUEST: u64 = 640;
/// Bytes per session besides its requests (plan, key, router state).
pub const BYTES_PER_SESSION: u64 = 256;
/// Bytes per KV block: the 16-byte ring slot plus its hash-index entry.
pub const BYTES_PER_KV_BLOCK: u64 = 48;
/// Bytes per request per backend of a decision audit kept whole (`sim run --explain`,
/// `sim explain`): a 16-byte view entry and a 4-byte true count.
pub const BYTES_PER_VIEW: u64 = 20;
/// Bytes the writing phase holds besides the run: rows formatted ahead of the files
/// (the application's `export::WINDOW_BYTES`), the plot's bitmap, and buffers. Files are hashed as
/// they are written, never read back whole.
pub const WRITE_BYTES: u64 = 96 << 20;
/// Bytes a streamed `sim run` holds for its outputs whatever its length, measured on the
/// 1M-request Mooncake run (234 MB with every file written, against `--no-files`): batches
/// queued between the simulation and the writer thread (decision batches of about 10 MB,
/// record batches of about 10 MB, a few of each), and one Parquet row group per table being
/// filled (32 MB of values each, with their strings and null flags).
pub const STREAM_BYTES: u64 = 384 << 20;
/// Bytes per request of the streamed outputs that a short run's buffers may hold whole
/// besides its audit: its records and time-series rows as rows (in a Parquet row group
/// with their strings, or formatted CSV).
pub const STREAM_BYTES_PER_REQUEST: u64 = 1024;

/// Bytes the streamed outputs of `requests` requests over `backends` backends hold at most:
/// [`STREAM_BYTES`], or less for a run whose outputs are smaller (its whole audit and
/// [`STREAM_BYTES_PER_REQUEST`] a request).
pub fn stream_bytes(requests: u64, backends: u64) -> u64 {
    audit_bytes(requests, backends)
        .saturating_add(requests.saturating_mul(STREAM_BYTES_PER_REQUEST))
        .min(STREAM_BYTES)
}

/// Share of the machine's memory a run may use by default.
pub const DEFAULT_SHARE: f64 = 0.5;
/// Default when the machine's memory cannot be read.
pub const FALLBACK_LIMIT_GIB: f64 = 8.0;

const GIB: f64 = (1u64 << 30) as f64;

/// The default limit in GiB: half the machine's memory (`MemTotal` in /proc/meminfo),
/// else 8 GiB.
pub fn default_limit_gib() -> f64 {
    machine_memory_bytes().map_or(FALLBACK_LIMIT_GIB, |b| (b as f64 * DEFAULT_SHARE / GIB).max(0.5))
}

fn machine_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A memory budget: the limit and where it came from (for messages).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// Limit in bytes.
    pub bytes: u64,
    /// The limit as written or defaulted, GiB.
    pub gib: f64,
    /// Whether the scenario set it.
    pub explicit: bool,
}

impl Budget {
    /// The budget for `limits.max_memory_gib` (`None`: the default).
    pub fn new(max_memory_gib: Option<f64>) -> Result<Budget, String> {
        let (gib, explicit) = match max_memory_gib {
            Some(g) if g.is_finite() && g > 0.0 && g <= 1e6 => (g, true),
            Some(g) => return Err(format!("must be a number of GiB in (0, 1e6], got {g}")),
            None => (default_limit_gib(), false),
        };
        Ok(Budget {
            bytes: (gib * GIB) as u64,
            gib,
            explicit,
        })
    }

    /// Refuses `need` bytes beyond the budget; `what` says what drives the estimate.
    pub fn check(&self, need: u64, what: &str) -> Result<(), String> {
        if need <= self.bytes {
            return Ok(());
        }
        let origin = if self.explicit {
            String::new()
        } else {
            format!(" (the default: {:.0}% of this machine's memory)", DEFAULT_SHARE * 100.0)
        };
        Err(format!(
            "{what} needs about {} of memory, above limits.max_memory_gib = {:.1}{origin}; make the run smaller or raise limits.max_memory_gib",
            human(need),
            self.gib
        ))
    }
}

/// Bytes for `sessions` sessions of `turns` mean turns each.
pub fn sessions_bytes(sessions: u64, mean_turns: f64) -> u64 {
    let requests = (sessions as f64 * mean_turns.max(1.0)).min(u64::MAX as f64) as u64;
    requests
        .saturating_mul(BYTES_PER_REQUEST)
        .saturating_add(sessions.saturating_mul(BYTES_PER_SESSION))
}

/// Bytes for `backends` KV pools of `kv_blocks` blocks.
pub fn kv_bytes(backends: u64, kv_blocks: u64) -> u64 {
    backends.saturating_mul(kv_blocks).saturating_mul(BYTES_PER_KV_BLOCK)
}

/// Bytes for `requests` replayed trace requests.
pub fn requests_bytes(requests: u64) -> u64 {
    requests.saturating_mul(BYTES_PER_REQUEST + BYTES_PER_SESSION / 4)
}

/// Bytes of the decision audit of `requests` requests over `backends` backends.
pub fn audit_bytes(requests: u64, backends: u64) -> u64 {
    requests.saturating_mul(backends).saturating_mul(BYTES_PER_VIEW)
}

/// Bytes a command that keeps the whole decision audit needs: the scenario's estimate
/// (`estimate`, see [`crate::scenario::Scenario::estimate_bytes`]), every one of its
/// `requests` requests (again: the estimate leaves out the traces'), and their audit over
/// `backends` backends.
pub fn held_audit_need(estimate: u64, requests: u64, backends: u64) -> u64 {
    estimate
        .saturating_add(requests_bytes(requests))
        .saturating_add(audit_bytes(requests, backends))
}

/// `12.3 GiB`, `512 MiB`.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else {
        format!("{:.0} MiB", (b / (1u64 << 20) as f64).ceil())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_beyond_the_limit_naming_it_and_the_estimate() {
        let b = Budget::new(Some(1.0)).unwrap();
        assert!(b.check(1 << 30, "x").is_ok());
        let e = b
            .check(sessions_bytes(1 << 31, 1.0), "workload.groups[0].sessions = 2147483648")
            .unwrap_err();
        assert_eq!(
            e,
            "workload.groups[0].sessions = 2147483648 needs about 1792.0 GiB of memory, above limits.max_memory_gib = 1.0; make the run smaller or raise limits.max_memory_gib"
        );
        assert!(Budget::new(Some(0.0)).is_err());
        assert!(Budget::new(Some(f64::NAN)).is_err());
        let d = Budget::new(None).unwrap();
        assert!(!d.explicit && d.gib >= 0.5);
        assert!(
            d.check(u64::MAX, "x")
                .unwrap_err()
                .contains("(the default: 50% of this machine's memory)")
        );
    }

    #[test]
    fn estimates_saturate_instead_of_overflowing() {
        assert_eq!(audit_bytes(u64::MAX, 3), u64::MAX);
        assert_eq!(audit_bytes(1000, 4), 80_000);
        assert_eq!(held_audit_need(u64::MAX - 1, 10, 10), u64::MAX);
        assert_eq!(held_audit_need(1, 1000, 4), 1 + requests_bytes(1000) + 80_000);
        assert_eq!(stream_bytes(1000, 4), 80_000 + 1000 * STREAM_BYTES_PER_REQUEST);
        assert_eq!(stream_bytes(u64::MAX, 4), STREAM_BYTES);
        assert_eq!(kv_bytes(u64::MAX, 2), u64::MAX);
        assert_eq!(sessions_bytes(u64::MAX, 1e30), u64::MAX);
        assert_eq!(kv_bytes(4096, 1 << 29), 4096 * (1 << 29) * BYTES_PER_KV_BLOCK);
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(1000), "1 MiB");
    }
}
