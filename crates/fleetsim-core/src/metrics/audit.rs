//! The decision audit log: every routing decision with the view the policy saw (compactly
//! interned) and the truth at that instant. A run either keeps the whole log (the
//! [`crate::sim::RunResult`]'s `decisions`) or hands it to a [`RecordSink`] in batches of
//! about [`DECISION_BATCH_ENTRIES`] view entries as it goes, so what it holds stays bounded
//! whatever the number of requests. The same sink may take the per-request records and the
//! time series as they become final ([`RecordSink::takes_requests`],
//! [`RecordSink::takes_series`]).

use crate::decision::Branch;
use crate::ids::{BackendId, RequestId, SessionId};
use crate::time::SimTime;
use crate::view::{EngineStatsEntry, RequestStatsEntry, ViewEntry};

use super::{RequestRec, TsRow};

/// One routing decision, with offsets into the per-backend view and truth arrays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecisionRow {
    /// Decision time.
    pub t: SimTime,
    /// The request.
    pub request: RequestId,
    /// Its session.
    pub session: SessionId,
    /// Its turn.
    pub turn: u32,
    /// The pick.
    pub backend: BackendId,
    /// Branch taken.
    pub branch: Branch,
    /// Prefix match length (characters).
    pub match_chars: u64,
}

/// One backend's entry of one decision's view, compactly (16 bytes instead of a
/// [`ViewEntry`]'s 72): engine stats are interned in [`DecisionLog::engines`] (an entry
/// only changes when a scrape pass publishes, so consecutive decisions share it), and the
/// request stats keep their integer counts (`qps` is `window_dispatches / W`, recomputed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// Index into `engines` (`ENGINE_NONE`: no stats), with `UNLISTED_BIT` set when
    /// discovery did not list the backend.
    engine: u32,
    /// `u32::MAX`: no request stats.
    window_dispatches: u32,
    in_prefill: u32,
    in_decoding: u32,
}

const UNLISTED_BIT: u32 = 1 << 31;
const ENGINE_NONE: u32 = UNLISTED_BIT - 1;
const REQUESTS_NONE: u32 = u32::MAX;

/// Every decision with the view the policy saw and the truth at that instant.
#[derive(Default)]
pub struct DecisionLog {
    /// Backends per decision (length of each view / truth slice).
    pub n_backends: usize,
    /// The request-stats window in seconds (`qps = window_dispatches / W`).
    pub qps_window_s: f64,
    /// Decisions in order.
    pub rows: Vec<DecisionRow>,
    /// `rows.len() * n_backends` compact view entries (read them with [`DecisionLog::view`]).
    pub views: Vec<AuditEntry>,
    /// Distinct engine-stats entries the views refer to.
    pub engines: Vec<EngineStatsEntry>,
    /// `rows.len() * n_backends` true outstanding counts.
    pub truth: Vec<u32>,
    /// Scratch: the router appends the view of the decision in progress here, then
    /// [`DecisionLog::commit_view`] stores it compactly.
    pub scratch: Vec<ViewEntry>,
    /// Per backend: the last interned engine entry and its index.
    last_engine: Vec<Option<(EngineStatsEntry, u32)>>,
}

/// View entries (decisions x backends) after which a streaming run hands its decision log
/// to the [`RecordSink`] and starts a new batch: about 10 MB of views and truth, 32,768
/// decisions of a 16-backend fleet (a batch always holds at least one decision).
pub const DECISION_BATCH_ENTRIES: usize = 1 << 19;

/// Receives a run's records as the run produces them (`crate::sim::run_streamed`): the
/// application writes them to files while the simulation goes on, so neither side holds
/// the whole audit. The core knows no file format; the sink does.
pub trait RecordSink {
    /// The next batch of decisions, in decision order: a [`DecisionLog`] holding only these
    /// (its indices start at 0; request ids are the run's). Called whenever a batch holds
    /// [`RecordSink::batch_entries`] view entries, and once at the end of the run with the rest
    /// (never with an empty batch).
    fn decisions(&mut self, batch: DecisionLog);

    /// View entries (decisions x backends) a batch collects before it is handed over
    /// (a batch always holds at least one decision).
    fn batch_entries(&self) -> usize {
        DECISION_BATCH_ENTRIES
    }

    /// Whether the sink takes the per-request records ([`RecordSink::requests`]); if not
    /// (the default), the run keeps them all in its result.
    fn takes_requests(&self) -> bool {
        false
    }

    /// The next [`RecordSink::record_batch`] final records, in request-id order, the first
    /// of them request `first_id` (consecutive batches continue one another); at the end of
    /// the run the rest (those in flight included, as they stand), in batches as large at
    /// most; never an empty batch. Only if [`RecordSink::takes_requests`].
    fn requests(&mut self, first_id: usize, batch: Vec<RequestRec>) {
        let _ = (first_id, batch);
    }

    /// Records a batch of [`RecordSink::requests`] collects.
    fn record_batch(&self) -> usize {
        RECORD_BATCH
    }

    /// Whether the sink takes the per-backend time series ([`RecordSink::series`]); if not
    /// (the default), the run keeps it in its result.
    fn takes_series(&self) -> bool {
        false
    }

    /// The next time-series rows, in time order (the order of the held series). Called
    /// whenever [`RecordSink::record_batch`] rows are collected and once at the end with the
    /// rest; never with an empty batch. Only if [`RecordSink::takes_series`] and the run
    /// records series.
    fn series(&mut self, batch: Vec<TsRow>) {
        let _ = batch;
    }
}

/// Records (or time-series rows) a streaming run collects before it hands them to the
/// [`RecordSink`]: about 10 MB of request records, 1.5 MB of rows.
pub const RECORD_BATCH: usize = 1 << 16;

/// The view of one decision: one [`ViewEntry`] per backend, decoded on access.
#[derive(Clone, Copy)]
pub struct View<'a> {
    log: &'a DecisionLog,
    entries: &'a [AuditEntry],
}

impl<'a> View<'a> {
    /// Backend `b`'s entry.
    pub fn get(&self, b: usize) -> ViewEntry {
        self.log.decode(self.entries[b])
    }

    /// Number of backends.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True for a fleet of no backends.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in backend order.
    pub fn iter(&self) -> ViewIter<'a> {
        ViewIter {
            log: self.log,
            entries: self.entries.iter(),
        }
    }
}

impl<'a> IntoIterator for View<'a> {
    type Item = ViewEntry;
    type IntoIter = ViewIter<'a>;
    fn into_iter(self) -> ViewIter<'a> {
        self.iter()
    }
}

/// Iterator over a [`View`]'s entries.
pub struct ViewIter<'a> {
    log: &'a DecisionLog,
    entries: std::slice::Iter<'a, AuditEntry>,
}

impl Iterator for ViewIter<'_> {
    type Item = ViewEntry;
    fn next(&mut self) -> Option<ViewEntry> {
        self.entries.next().map(|e| self.log.decode(*e))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl ExactSizeIterator for ViewIter<'_> {}

impl DecisionLog {
    /// An empty log for `n_backends` backends and a request-stats window of `qps_window_s`.
    pub fn new(n_backends: usize, qps_window_s: f64) -> DecisionLog {
        DecisionLog {
            n_backends,
            qps_window_s,
            last_engine: vec![None; n_backends],
            ..Default::default()
        }
    }

    /// Moves the decisions logged so far out into a log of their own (engine entries they
    /// refer to included) and leaves this one empty, ready for the next batch.
    pub fn take_batch(&mut self) -> DecisionLog {
        let batch = DecisionLog {
            n_backends: self.n_backends,
            qps_window_s: self.qps_window_s,
            rows: std::mem::take(&mut self.rows),
            views: std::mem::take(&mut self.views),
            engines: std::mem::take(&mut self.engines),
            truth: std::mem::take(&mut self.truth),
            scratch: Vec::new(),
            last_engine: Vec::new(),
        };
        self.last_engine.iter_mut().for_each(|e| *e = None);
        self.rows.reserve(batch.rows.len());
        self.views.reserve(batch.views.len());
        self.truth.reserve(batch.truth.len());
        batch
    }

    /// Stores the view in `scratch` (one entry per backend) as the next decision's view.
    pub fn commit_view(&mut self) {
        assert_eq!(self.scratch.len(), self.n_backends, "a view covers every backend");
        if self.last_engine.len() != self.n_backends {
            self.last_engine = vec![None; self.n_backends];
        }
        self.views.reserve(self.n_backends);
        for (b, v) in self.scratch.iter().enumerate() {
            let mut engine = match v.engine {
                None => ENGINE_NONE,
                Some(e) => match self.last_engine[b] {
                    Some((last, idx)) if last == e => idx,
                    _ => {
                        let idx = self.engines.len() as u32;
                        assert!(idx < ENGINE_NONE, "too many distinct engine-stats entries");
                        self.engines.push(e);
                        self.last_engine[b] = Some((e, idx));
                        idx
                    }
                },
            };
            if !v.listed {
                engine |= UNLISTED_BIT;
            }
            let (window_dispatches, in_prefill, in_decoding) = match v.requests {
                None => (REQUESTS_NONE, 0, 0),
                Some(r) => {
                    assert!(r.window_dispatches != REQUESTS_NONE, "window dispatch count overflow");
                    debug_assert_eq!(r.qps, f64::from(r.window_dispatches) / self.qps_window_s);
                    (r.window_dispatches, r.in_prefill, r.in_decoding)
                }
            };
            self.views.push(AuditEntry {
                engine,
                window_dispatches,
                in_prefill,
                in_decoding,
            });
        }
        self.scratch.clear();
    }

    fn decode(&self, e: AuditEntry) -> ViewEntry {
        let idx = e.engine & !UNLISTED_BIT;
        ViewEntry {
            engine: (idx != ENGINE_NONE).then(|| self.engines[idx as usize]),
            requests: (e.window_dispatches != REQUESTS_NONE).then(|| RequestStatsEntry {
                window_dispatches: e.window_dispatches,
                qps: f64::from(e.window_dispatches) / self.qps_window_s,
                in_prefill: e.in_prefill,
                in_decoding: e.in_decoding,
            }),
            listed: e.engine & UNLISTED_BIT == 0,
        }
    }

    /// The view decision `i` saw.
    pub fn view(&self, i: usize) -> View<'_> {
        View {
            log: self,
            entries: &self.views[i * self.n_backends..(i + 1) * self.n_backends],
        }
    }

    /// View and truth slices of decision `i`.
    pub fn detail(&self, i: usize) -> (View<'_>, &[u32]) {
        let r = i * self.n_backends..(i + 1) * self.n_backends;
        (self.view(i), &self.truth[r])
    }
}
