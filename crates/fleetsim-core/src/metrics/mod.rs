//! Ground-truth measurements: per-request records, time-integrated fleet imbalance, the
//! decision audit log, and the run summary. Everything here is measured on the *live*
//! backend state (what really happened), never on what the router believed.
//!
//! Definitions (all integrals over simulated time):
//! * **Waiting** means in the scheduler's waiting queue: not admitted at the last scheduling
//!   pass (or preempted). A request that reached the engine during the step in progress is
//!   not waiting yet; counting it would turn every sub-step arrival into "stranding".
//! * A backend has a **free slot** when it runs fewer than its slot limit (`max_num_seqs`,
//!   or servers in queueing mode) *and* has nothing waiting (a backend with a queue but spare
//!   slots is blocked on KV or the token budget, so its slots are not really free).
//! * **idle_while_queued_s**: time during which some backend has a free slot while some
//!   backend has a waiting request.
//! * **stranded_slot_s**: integral of `min(total waiting, total free slots)`: request-seconds
//!   of waiting that spare capacity elsewhere could have absorbed.
//! * Only backends **in service** (listed by discovery: not absent, not draining) can have
//!   free slots; a draining backend's queue still counts as waiting.
//! * An **episode** is one maximal stretch of idle_while_queued time; each records, per
//!   backend, how long it had a free slot and how much it queued (`sim explain` reads them).
//! * **latched_sessions**: sessions whose first turn went to a backend that was not among the
//!   least loaded in truth at that instant (outstanding = dispatched and unfinished,
//!   in transit included), and all of whose turns then stayed on that backend.
//!
//! Owns: ground-truth records, the fleet tracker, the decision audit and the summary
//! (`records.rs`, `fleet.rs`, `audit.rs`, `summary.rs`, `names.rs`), SLO attainment and the
//! fleet's cost (`slo.rs`). May not see: the
//! router or the policies (it names a decision by [`crate::decision::Branch`] and a view by
//! [`crate::view::ViewEntry`]). Invariant: measured on the live backend state, never on what
//! the router believed; integrals are over integer time.

mod audit;
pub mod fidelity;
mod fleet;
mod names;
mod records;
mod slo;
mod summary;

pub use audit::{
    AuditEntry, DECISION_BATCH_ENTRIES, DecisionLog, DecisionRow, RECORD_BATCH, RecordSink, View, ViewIter,
};
pub use fleet::{Episode, FleetTracker, WorstMoment};
pub use names::{
    BACKEND_SHARE_METRICS, SHARE_METRICS, UNITS, canonical_metric, flatten, flatten_json, known_metric, split_unit,
    stat_name,
};
pub use records::{RecordWindow, RequestRec, TsRow};
pub use slo::{BackendPrice, FleetCost, SloConfig, SloGroup, SloStats, SloSummary, SloTargets};
pub use summary::{
    BackendSummary, EngineCounters, Percentiles, RequestCounts, RequestStats, Summary, SummaryInputs, percentiles,
    percentiles_ns, round6, summarize, summarize_stats, weighted_percentiles,
};
