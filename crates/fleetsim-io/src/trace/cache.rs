//! Parsed traces shared by the runs of one command: a sweep or a tune replays the same trace
//! file in every run, so it is read and parsed once and each run works on the shared copy.
//!
//! An entry is keyed by what decides the parse: the path, the reader options and the file's
//! identity on disk (size, modification and change times, device and inode), so a file
//! rewritten between two loads is read again, and a sweep axis naming several files reads
//! each once. Everything that depends on a run (the session placement, window, scale,
//! jitter and synthesis under the run's seed) happens after, on the run's side. A cache
//! lives as long as its owner (the command); [`crate::scenario::Scenario::workload`]
//! uses a fresh one, so a single run keeps nothing once its workload is built.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use super::model::{Format, Trace, TraceError};
use super::reader::{AgentReadOptions, ReadOptions};

/// A file's identity on disk: what changes when its content is rewritten.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileId {
    len: u64,
    modified: Option<SystemTime>,
    /// Device, inode and change time (ns): a rename over the file or any write changes
    /// them, even one that restores the size and modification time.
    node: (u64, u64, i64, i64),
}

impl FileId {
    fn of(path: &Path) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        #[cfg(unix)]
        let node = {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino(), m.ctime(), m.ctime_nsec())
        };
        #[cfg(not(unix))]
        let node = (0, 0, 0, 0);
        Some(FileId {
            len: m.len(),
            modified: m.modified().ok(),
            node,
        })
    }
}

/// What decides a parse.
#[derive(Clone, Debug, PartialEq)]
struct Key {
    path: PathBuf,
    format: Option<Format>,
    skip_bad_rows: bool,
    agent: AgentReadOptions,
}

type Parsed = Arc<OnceLock<Result<Arc<Trace>, TraceError>>>;

/// Traces read so far, shared by reference across worker threads.
#[derive(Debug, Default)]
pub struct TraceCache {
    /// One entry per key, with the identity of the file it was read from. Few entries (one
    /// per trace file a command names), so a list searched in order.
    entries: Mutex<Vec<(Key, FileId, Parsed)>>,
    reads: AtomicU64,
}

impl TraceCache {
    /// An empty cache.
    pub fn new() -> Self {
        TraceCache::default()
    }

    /// The trace at `path`, read with [`super::reader::read_with`] on the first call for this key and
    /// file identity and shared after. Concurrent callers of one key wait for a single
    /// read. A file that cannot be inspected is read without caching, so its error is the
    /// reader's own.
    pub fn read(&self, path: &Path, opts: ReadOptions, agent: &AgentReadOptions) -> Result<Arc<Trace>, TraceError> {
        let read = || {
            self.reads.fetch_add(1, Ordering::Relaxed);
            super::reader::read_with(path, opts, agent).map(Arc::new)
        };
        match self.cell(path, opts, agent) {
            Some(cell) => cell.get_or_init(read).clone(),
            None => read(),
        }
    }

    /// [`TraceCache::read`] that also hands every byte of the file as stored on disk (gzip
    /// or not) to `sink`, in order: when this call parses the file, through the parse's own
    /// read (the file is opened once for both); when the parse is already here, by reading
    /// the bytes alone. A file that cannot be opened feeds nothing.
    pub fn read_with_sink(
        &self,
        path: &Path,
        opts: ReadOptions,
        agent: &AgentReadOptions,
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<Arc<Trace>, TraceError> {
        let mut fed = false;
        let mut read = || {
            fed = true;
            self.reads.fetch_add(1, Ordering::Relaxed);
            super::reader::read_with_sink(path, opts, agent, &mut *sink).map(Arc::new)
        };
        let parsed = match self.cell(path, opts, agent) {
            Some(cell) => cell.get_or_init(read).clone(),
            None => read(),
        };
        if !fed && let Ok(mut f) = std::fs::File::open(path) {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n @ 1..) = std::io::Read::read(&mut f, &mut buf) {
                sink(&buf[..n]);
            }
        }
        parsed
    }

    /// The slot of `path` read with these options, emptied if the file changed since;
    /// `None` for a file that cannot be inspected (read without caching, so its error is
    /// the reader's own).
    fn cell(&self, path: &Path, opts: ReadOptions, agent: &AgentReadOptions) -> Option<Parsed> {
        let id = FileId::of(path)?;
        let key = Key {
            path: path.to_path_buf(),
            format: opts.format,
            skip_bad_rows: opts.skip_bad_rows,
            agent: agent.clone(),
        };
        let cell = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            match entries.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, have, cell)) if *have == id => cell.clone(),
                // The file changed: the old parse is stale, drop it.
                Some(slot) => {
                    slot.1 = id;
                    slot.2 = Parsed::default();
                    slot.2.clone()
                }
                None => {
                    let cell = Parsed::default();
                    entries.push((key, id, cell.clone()));
                    cell
                }
            }
        };
        Some(cell)
    }

    /// How many times a file was read and parsed (tests: a sweep reads each trace once).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROWS: &str =
        "arrival_s,session_id,turn,input_tokens,output_tokens,block_ids\n0,s0,0,10,5,1 2\n1,s0,1,20,5,1 2 3\n";

    fn opts() -> ReadOptions {
        ReadOptions {
            format: Some(Format::Native),
            skip_bad_rows: false,
        }
    }

    #[test]
    fn reads_a_file_once_per_key_across_threads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        std::fs::write(&p, ROWS).unwrap();
        let cache = TraceCache::new();
        let agent = AgentReadOptions::default();
        let traces: Vec<Arc<Trace>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| cache.read(&p, opts(), &agent).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(cache.reads(), 1);
        assert!(traces.iter().all(|t| Arc::ptr_eq(t, &traces[0])));
        assert_eq!(traces[0].rows.len(), 2);
        // Other reader options are another parse.
        let skip = ReadOptions {
            skip_bad_rows: true,
            ..opts()
        };
        cache.read(&p, skip, &agent).unwrap();
        assert_eq!(cache.reads(), 2);
        cache.read(&p, opts(), &agent).unwrap();
        assert_eq!(cache.reads(), 2);
    }

    #[test]
    fn a_changed_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        std::fs::write(&p, ROWS).unwrap();
        let cache = TraceCache::new();
        let agent = AgentReadOptions::default();
        let first = cache.read(&p, opts(), &agent).unwrap();
        // Same size and modification time: only the change time (or inode) tells.
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        let same_len = ROWS.replace("20,5", "30,5");
        assert_eq!(same_len.len(), ROWS.len());
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&p, &same_len).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let second = cache.read(&p, opts(), &agent).unwrap();
        assert_eq!(cache.reads(), 2);
        assert_eq!((first.rows[1].input, second.rows[1].input), (20, 30));
        // A longer file.
        std::fs::write(&p, format!("{ROWS}2,s1,0,40,5,\n")).unwrap();
        assert_eq!(cache.read(&p, opts(), &agent).unwrap().rows.len(), 3);
        assert_eq!(cache.reads(), 3);
        assert_eq!(cache.entries.lock().unwrap().len(), 1, "the stale parse is dropped");
    }

    #[test]
    fn the_sink_sees_the_files_bytes_once_parsed_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("t.csv");
        std::fs::write(&plain, ROWS).unwrap();
        // Compressed: the sink sees the file's bytes, not the decompressed text.
        let gz = dir.path().join("t.csv.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut enc, ROWS.as_bytes()).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        // A row that fails the parse half way: the sink still sees the whole file.
        let bad = dir.path().join("bad.csv");
        std::fs::write(&bad, format!("{ROWS}x,s1,0,1,1,\n{}", "9,s2,0,1,1,\n".repeat(20_000))).unwrap();
        let cache = TraceCache::new();
        let agent = AgentReadOptions::default();
        for (p, ok) in [(&plain, true), (&gz, true), (&bad, false)] {
            let mut seen = Vec::new();
            let got = cache.read_with_sink(p, opts(), &agent, &mut |b| seen.extend_from_slice(b));
            assert_eq!(got.is_ok(), ok, "{}", p.display());
            assert_eq!(seen, std::fs::read(p).unwrap(), "{}", p.display());
            // Parsed already: the bytes are read again, the trace is not.
            let reads = cache.reads();
            let mut again = Vec::new();
            let second = cache.read_with_sink(p, opts(), &agent, &mut |b| again.extend_from_slice(b));
            assert_eq!((cache.reads(), second.is_ok()), (reads, ok));
            assert_eq!(again, seen);
        }
        assert_eq!(cache.reads(), 3);
        // The parse through the sink is the parse: a later plain read takes it.
        cache.read(&plain, opts(), &agent).unwrap();
        assert_eq!(cache.reads(), 3);
        // A missing file feeds nothing and fails as the reader does.
        let mut seen = Vec::new();
        let e = cache
            .read_with_sink(&dir.path().join("absent.csv"), opts(), &agent, &mut |b| {
                seen.extend_from_slice(b)
            })
            .unwrap_err();
        assert!(seen.is_empty() && e.message.starts_with("cannot read the trace"), "{e}");
    }

    #[test]
    fn a_missing_file_is_the_readers_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("absent.csv");
        let cache = TraceCache::new();
        let e = cache.read(&p, opts(), &AgentReadOptions::default()).unwrap_err();
        let direct = super::super::reader::read_with(&p, opts(), &AgentReadOptions::default()).unwrap_err();
        assert_eq!(e, direct);
    }
}
