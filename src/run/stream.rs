//! A run whose records go to a writer thread as the run goes: the decision audit (read by
//! the hints' scan, written as the decision files) and, unless a later step reads them
//! whole, the request records and the time series (written as their tables, their plot's
//! points kept).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::export::{DecisionFiles, RecordFiles, Tables};
use crate::hints::HintScan;
use crate::metrics::{DecisionLog, RequestRec, TsRow};
use crate::plot::series::SeriesPoints;
use crate::scenario::Scenario;
use crate::sim::{EngineMode, RunOptions, RunResult, SimError};
use crate::workload::Workload;

/// Where the streamed records go.
pub(super) struct Streams {
    /// The folder of the decision files (none: the audit only feeds the hints).
    pub(super) decisions: Option<PathBuf>,
    /// Take the request records and the time series out of the result.
    pub(super) records: bool,
    /// The folder of their tables (none: dropped once the summary has its share).
    pub(super) records_dir: Option<PathBuf>,
    /// How the tables are written.
    pub(super) tables: Tables,
}

/// What the writer thread leaves.
pub(super) struct Streamed {
    /// The hints' scan of the whole audit.
    pub(super) scan: HintScan,
    /// The decision files written (none if not asked for).
    pub(super) decision_files: Vec<PathBuf>,
    /// The requests and time-series files and the plot's points, when written.
    pub(super) records: Option<(Vec<PathBuf>, SeriesPoints)>,
}

/// What the simulation hands the writer thread.
enum Batch {
    Decisions(DecisionLog),
    /// Final request records, the first of them request `.0`.
    Requests(usize, Vec<RequestRec>),
    Series(Vec<TsRow>),
}

/// Hands each batch of the decision audit (and of the request records and time series,
/// when `records`) to the writer thread; the bounded channel makes the simulation wait when
/// the writer is behind, so at most a few batches are held.
struct ChannelSink {
    tx: std::sync::mpsc::SyncSender<Batch>,
    /// Take the records and series instead of keeping them in the result.
    records: bool,
    /// Send them on to be written (else they are dropped once the summary has its share).
    write_records: bool,
}

impl ChannelSink {
    fn send(&self, b: Batch) {
        // A writer that stopped on an error has dropped its end; its error is reported
        // when it is joined.
        let _ = self.tx.send(b);
    }
}

impl crate::metrics::RecordSink for ChannelSink {
    fn decisions(&mut self, batch: DecisionLog) {
        self.send(Batch::Decisions(batch));
    }

    fn takes_requests(&self) -> bool {
        self.records
    }

    fn requests(&mut self, first_id: usize, batch: Vec<RequestRec>) {
        if self.write_records {
            self.send(Batch::Requests(first_id, batch));
        }
    }

    fn takes_series(&self) -> bool {
        self.records
    }

    fn series(&mut self, batch: Vec<TsRow>) {
        if self.write_records {
            self.send(Batch::Series(batch));
        }
    }
}

/// Batches queued between the simulation and the writer thread.
const QUEUED_BATCHES: usize = 4;

/// Simulates `scenario` on `workload` with its records streamed to a writer thread; returns
/// the run and, apart, what the writer left (its error is reported after the run's own).
pub(super) fn simulate(
    scenario: &Scenario,
    workload: &Workload,
    opts: RunOptions,
    engine: EngineMode,
    streams: Streams,
) -> (Result<(RunResult, Duration), SimError>, Result<Streamed>) {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(QUEUED_BATCHES);
        let mut sink = ChannelSink {
            tx,
            records: streams.records,
            write_records: streams.records_dir.is_some(),
        };
        let writer = scope.spawn(move || write(rx, scenario, workload, streams));
        let ran = crate::sim::run_streamed(scenario.sim.clone(), workload, opts, engine, &mut sink);
        drop(sink);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the thread writing the decision files panicked")));
        (ran, written)
    })
}

/// The writer thread: scans and writes each batch as it comes, until the run drops its end.
fn write(
    rx: std::sync::mpsc::Receiver<Batch>,
    scenario: &Scenario,
    workload: &Workload,
    streams: Streams,
) -> Result<Streamed> {
    let n = scenario.sim.backends.len();
    let key = |s: usize| workload.sessions[s].key.as_str();
    let mut scan = HintScan::new(n, scenario.sim.router.engine_stats_interval.as_secs_f64());
    let mut files = streams
        .decisions
        .map(|d| DecisionFiles::create(&d, streams.tables, n))
        .transpose()?;
    let mut records = streams
        .records_dir
        .map(|d| -> Result<_> {
            Ok((
                RecordFiles::create(&d, streams.tables, &scenario.sim.labels)?,
                SeriesPoints::new(n),
            ))
        })
        .transpose()?;
    for batch in rx {
        match (batch, &mut records) {
            (Batch::Decisions(batch), _) => {
                scan.add(&batch);
                if let Some(f) = &mut files {
                    f.add(&batch, &key)?;
                }
            }
            (Batch::Requests(first, batch), Some((f, _))) => f.add_requests(first, &batch, &key)?,
            (Batch::Series(rows), Some((f, points))) => {
                points.add(&rows);
                f.add_series(&rows)?;
            }
            (_, None) => {}
        }
    }
    Ok(Streamed {
        scan,
        decision_files: files.map(DecisionFiles::finish).transpose()?.unwrap_or_default(),
        records: records.map(|(f, p)| f.finish().map(|paths| (paths, p))).transpose()?,
    })
}
