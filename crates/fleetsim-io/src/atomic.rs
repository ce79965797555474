//! Whole-or-absent outputs. A file is written to a temporary sibling and renamed into place
//! ([`write_file`]); a run's folder is written into a hidden staging folder beside it and
//! moved into place once complete ([`Staging`]), with a manifest, `run.json`, that records
//! the run id and the SHA-256 of every file. So a kill leaves either the previous complete
//! folder, no folder, or the new complete one, and a folder whose files were mixed or
//! edited afterwards is detected ([`verify`]) before `sim explain` or `sim compare` read it.
//!
//! The run id is derived from the files' contents (not from a clock or a counter), so the
//! same scenario and seed give the same `run.json`, byte for byte, and committed results
//! stay reproducible. `perf.json` (wall-clock figures) is outside the manifest.
//!
//! Files are hashed as they are written ([`Hashed`], [`write_file`]) and any other file is
//! hashed streaming, so neither writing nor verifying a run holds a file in memory (a
//! multi-gigabyte `decisions_long.csv` was read whole to be hashed, after the simulation).
//!
//! Owns: staging, rename and the manifest. Invariant: a reader sees a complete folder or
//! none, and every folder read as a run is checked against its manifest first.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Hex SHA-256 of `bytes` (manifests, run ids, scenario hashes).
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The manifest of a results folder.
pub const MANIFEST: &str = "run.json";

/// Files left out of the manifest: they vary from run to run by design.
const UNLISTED: [&str; 2] = [MANIFEST, "perf.json"];

/// The per-decision files, which `sim run --no-decisions` leaves out (both together).
pub const DECISION_FILES: [&str; 2] = ["decisions.csv", "decisions_long.csv"];

/// The files every `sim run` folder holds (the decision files unless `--no-decisions`): a
/// folder read as a run must list them all in its manifest (a manifest of `"files": {}`
/// describes no run).
pub const RUN_FILES: [&str; 7] = [
    "summary.json",
    "requests.csv",
    "timeseries.csv",
    "decisions.csv",
    "decisions_long.csv",
    "scenario.toml",
    "hints.json",
];

/// The columnar twin of a run table (`requests.csv` -> `requests.parquet`): a run written
/// with `sim run --format parquet` holds the twin instead of the CSV.
pub fn columnar_twin(csv_name: &str) -> Option<String> {
    csv_name.strip_suffix(".csv").map(|stem| format!("{stem}.parquet"))
}

/// Files `sim explain` adds to a finished run (outside its run id).
const EXPLAIN_FILES: [&str; 2] = ["explain.md", "explain.json"];

/// Largest manifest read (a run lists a dozen files).
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Digests of files as they were written ([`Hashed::finish`], [`write_file`]), by path, with
/// their lengths: [`Staging::commit`] takes them instead of reading the files back.
static WRITTEN: Mutex<BTreeMap<PathBuf, (String, u64)>> = Mutex::new(BTreeMap::new());

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn record(path: &Path, digest: String, len: u64) {
    if let Ok(mut w) = WRITTEN.lock() {
        w.insert(path.to_path_buf(), (digest, len));
    }
}

/// A file written through a buffer and hashed on the way: [`Hashed::finish`] flushes it and
/// records its SHA-256 for the manifest.
pub struct Hashed {
    out: std::io::BufWriter<fs::File>,
    hasher: Sha256,
    len: u64,
    path: PathBuf,
}

impl Hashed {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Hashed> {
        Ok(Hashed {
            out: std::io::BufWriter::with_capacity(1 << 16, fs::File::create(path)?),
            hasher: Sha256::new(),
            len: 0,
            path: path.to_path_buf(),
        })
    }

    /// Flushes the file and records its digest.
    pub fn finish(mut self) -> std::io::Result<()> {
        self.out.flush()?;
        record(&self.path, hex(&self.hasher.finalize()), self.len);
        Ok(())
    }
}

impl Write for Hashed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// SHA-256 of a file, read in 64 KiB pieces.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut f = fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// The digest of `path`: as recorded while it was written (when its length still agrees),
/// else read back streaming.
fn digest_of(path: &Path) -> std::io::Result<String> {
    let recorded = WRITTEN.lock().ok().and_then(|w| w.get(path).cloned());
    if let Some((d, len)) = recorded
        && fs::metadata(path).is_ok_and(|m| m.len() == len)
    {
        return Ok(d);
    }
    sha256_file(path)
}

/// Forgets the recorded digests of files under `dir` (a committed or abandoned staging).
fn forget(dir: &Path) {
    if let Ok(mut w) = WRITTEN.lock() {
        w.retain(|p, _| !p.starts_with(dir));
    }
}

/// Reads a text file (`what`, for messages) of at most `max_bytes`: an error is `(line and column, message)`, with
/// the line of the first byte that is not UTF-8.
pub fn read_text(path: &Path, max_bytes: u64, what: &str) -> Result<String, (Option<(usize, usize)>, String)> {
    use std::io::Read;
    let f = fs::File::open(path).map_err(|e| (None, format!("cannot read {what}: {e}")))?;
    let mut bytes = Vec::new();
    f.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| (None, format!("cannot read {what}: {e}")))?;
    if bytes.len() as u64 > max_bytes {
        return Err((
            None,
            format!("larger than {} MiB; not a file this command reads", max_bytes >> 20),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let ok = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = ok.iter().filter(|&&c| c == b'\n').count() + 1;
        let col = ok.len() - ok.iter().rposition(|&c| c == b'\n').map_or(0, |p| p + 1) + 1;
        (Some((line, col)), format!("{what} is not UTF-8 text"))
    })
}

/// `run.json`: which run wrote the folder, and each file's digest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// SHA-256 of the listed files' names and digests: equal for byte-identical runs.
    pub run_id: String,
    /// fleetsim version that wrote the folder.
    pub fleetsim_version: String,
    /// SHA-256 of each file, by name.
    pub files: BTreeMap<String, String>,
}

impl Manifest {
    fn id_of<'a>(files: impl Iterator<Item = (&'a String, &'a String)>) -> String {
        let mut id = String::new();
        for (k, v) in files {
            id.push_str(&format!("{k}\t{v}\n"));
        }
        sha256_hex(id.as_bytes())
    }

    /// The run id of `files`: their names and digests, the explanation aside (it explains
    /// the run, and `sim explain` may write it again).
    fn run_id(files: &BTreeMap<String, String>) -> String {
        Manifest::id_of(files.iter().filter(|(k, _)| !EXPLAIN_FILES.contains(&k.as_str())))
    }

    fn of(files: BTreeMap<String, String>) -> Manifest {
        Manifest {
            run_id: Manifest::run_id(&files),
            fleetsim_version: env!("CARGO_PKG_VERSION").to_string(),
            files,
        }
    }

    /// Whether the run id is the one the listed files give.
    fn id_agrees(&self) -> bool {
        self.run_id == Manifest::run_id(&self.files)
    }

    fn bytes(&self) -> Result<Vec<u8>> {
        let mut out = serde_json::to_vec_pretty(self)?;
        out.push(b'\n');
        Ok(out)
    }
}

/// Writes `bytes` to `path` through a temporary sibling and a rename: readers see the old
/// file or the new one, never a truncated one.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    write_with(path, |tmp| Ok(fs::write(tmp, bytes)?))?;
    record(path, sha256_hex(bytes), bytes.len() as u64);
    Ok(())
}

/// As [`write_file`], with `f` building the bytes in memory first (tables, plots).
pub fn write_atomic(path: &Path, f: impl FnOnce(&mut Vec<u8>) -> Result<()>) -> Result<()> {
    let mut buf = Vec::new();
    f(&mut buf)?;
    write_file(path, &buf)
}

/// As [`write_file`], with `f` writing the temporary file (streaming writers).
pub fn write_with(path: &Path, f: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    anyhow::ensure!(!name.is_empty(), "{}: not a file name", path.display());
    // Temporaries of killed writers of this file go first (their process is gone).
    if let Some(dir) = path.parent() {
        remove_dead(
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            &format!(".{name}.tmp-"),
        );
    }
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let done =
        f(&tmp).and_then(|()| fs::rename(&tmp, path).with_context(|| format!("moving {} into place", tmp.display())));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done.with_context(|| format!("writing {}", path.display()))
}

/// A results folder being written: files go to [`Staging::path`], and [`Staging::commit`]
/// moves the complete set to its final place. Dropped uncommitted, it removes itself.
pub struct Staging {
    dest: PathBuf,
    tmp: PathBuf,
    done: bool,
}

impl Staging {
    /// Starts a folder that will replace `dest`. Refuses a `dest` that holds files but is not
    /// a results folder (so `--out .` cannot replace a working directory).
    pub fn new(dest: &Path) -> Result<Staging> {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n != "." && n != "..")
            .with_context(|| format!("{}: name a results folder, not `.` or `..`", dest.display()))?;
        replaceable(dest)?;
        let parent = dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        remove_stale(parent, &name);
        let tmp = parent.join(format!(".{name}.staging-{}", std::process::id()));
        forget(&tmp);
        if tmp.exists() {
            fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
        }
        fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        Ok(Staging {
            dest: dest.to_path_buf(),
            tmp,
            done: false,
        })
    }

    /// Where to write the files.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Writes the manifest and moves the folder into place, replacing any previous run.
    pub fn commit(mut self) -> Result<Manifest> {
        let m = Manifest::of(digests(&self.tmp)?);
        forget(&self.tmp);
        fs::write(self.tmp.join(MANIFEST), m.bytes()?)
            .with_context(|| format!("writing {}", self.tmp.join(MANIFEST).display()))?;
        replaceable(&self.dest)?;
        if self.dest.exists() {
            // Two renames: between them the folder is absent, never half written. The old
            // run is moved aside under a name owned by this process (`.NAME.old-PID`), so a
            // run killed between the renames leaves a leftover the next run removes (its
            // process is gone), and it never blocks the next commit.
            let old = self.old_path();
            if old.exists() {
                fs::remove_dir_all(&old).with_context(|| format!("removing {}", old.display()))?;
            }
            fs::rename(&self.dest, &old).with_context(|| format!("moving {} aside", self.dest.display()))?;
            fs::rename(&self.tmp, &self.dest)
                .with_context(|| format!("moving results into {}", self.dest.display()))?;
            let _ = fs::remove_dir_all(&old);
        } else {
            fs::rename(&self.tmp, &self.dest)
                .with_context(|| format!("moving results into {}", self.dest.display()))?;
        }
        self.done = true;
        Ok(m)
    }

    /// Where the previous run waits between the two renames of [`Staging::commit`].
    fn old_path(&self) -> PathBuf {
        let name = self
            .dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.tmp.with_file_name(format!(".{name}.old-{}", std::process::id()))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.tmp);
            forget(&self.tmp);
        }
    }
}

/// `dest` may be replaced: absent, an empty folder, or a folder `sim run` wrote.
fn replaceable(dest: &Path) -> Result<()> {
    if !dest.exists() {
        return Ok(());
    }
    if !dest.is_dir() {
        bail!("{}: exists and is not a folder", dest.display());
    }
    let empty = fs::read_dir(dest).map(|mut d| d.next().is_none()).unwrap_or(false);
    let ours =
        dest.join(MANIFEST).is_file() || (dest.join("summary.json").is_file() && dest.join("scenario.toml").is_file());
    if empty || ours {
        return Ok(());
    }
    bail!(
        "{}: exists and does not hold a `sim run` result (no {MANIFEST}); give --out a new or empty folder",
        dest.display()
    )
}

/// Removes what killed runs into `name` left beside it: staging folders
/// (`.NAME.staging-PID`), previous runs moved aside (`.NAME.old-PID`), and those older
/// versions left (`.NAME.staging-PID.old`, `.NAME.old`).
fn remove_stale(parent: &Path, name: &str) {
    remove_dead(parent, &format!(".{name}.staging-"));
    remove_dead(parent, &format!(".{name}.old-"));
    let legacy = parent.join(format!(".{name}.old"));
    if legacy.is_dir() && Path::new("/proc/self").exists() {
        let _ = fs::remove_dir_all(legacy);
    }
}

/// Removes the entries of `dir` named `PREFIX<pid>` (or `PREFIX<pid>.old`) whose process is
/// gone. Where processes cannot be told (no /proc), nothing is removed.
fn remove_dead(dir: &Path, prefix: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = f.strip_prefix(prefix).map(|p| p.trim_end_matches(".old")) else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| p == std::process::id() || Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let p = e.path();
            let _ = if p.is_dir() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            };
        }
    }
}

/// SHA-256 of every regular file in `dir` except [`UNLISTED`], by name.
fn digests(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.file_type()?.is_file() || UNLISTED.contains(&name.as_str()) || name.starts_with('.') {
            continue;
        }
        let d = digest_of(&e.path()).with_context(|| format!("reading {}", e.path().display()))?;
        out.insert(name, d);
    }
    Ok(out)
}

/// Adds files written later into a complete folder (`sim explain`'s) to its manifest; the
/// run id is unchanged (it names the run, not the explanation).
pub fn add_to_manifest(dir: &Path, names: &[&str]) -> Result<()> {
    let mut m = read_manifest(dir)?;
    for n in names {
        let p = dir.join(n);
        let d = digest_of(&p).with_context(|| format!("reading {}", p.display()))?;
        m.files.insert((*n).to_string(), d);
    }
    write_file(&dir.join(MANIFEST), &m.bytes()?)
}

fn read_manifest(dir: &Path) -> Result<Manifest> {
    let p = dir.join(MANIFEST);
    if !p.exists() {
        bail!(
            "{}: no {MANIFEST}, so not a complete `sim run` folder (an interrupted run, or one from an older fleetsim); run `sim run` again",
            dir.display()
        );
    }
    let text =
        read_text(&p, MAX_MANIFEST_BYTES, "the manifest").map_err(|(_, m)| anyhow::anyhow!("{}: {m}", p.display()))?;
    let m: Manifest =
        serde_json::from_str(&text).with_context(|| format!("{}: not a fleetsim manifest", p.display()))?;
    // Names are plain file names of the folder: nothing outside it is read or trusted.
    for name in m.files.keys() {
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && !name.contains(['/', '\\'])
            && !name.chars().any(char::is_control)
            && !UNLISTED.contains(&name.as_str());
        if !plain {
            bail!(
                "{}: files.{}: not a file of the folder (a manifest lists plain file names)",
                p.display(),
                crate::quote::quote(name)
            );
        }
    }
    Ok(m)
}

/// Checks that the folder holds exactly one run: the manifest lists every file a run writes
/// ([`RUN_FILES`], a table as CSV or as its [`columnar_twin`]), names only plain files of the folder, agrees with its run id, and every
/// file it lists is present and unchanged (hashed streaming). Returns the manifest.
pub fn verify(dir: &Path) -> Result<Manifest> {
    let m = read_manifest(dir)?;
    let p = dir.join(MANIFEST);
    let listed = |f: &str| m.files.contains_key(f) || columnar_twin(f).is_some_and(|t| m.files.contains_key(&t));
    // The per-decision files are left out together by `sim run --no-decisions`.
    let no_decisions = !DECISION_FILES.iter().any(|f| listed(f));
    if let Some(missing) = RUN_FILES
        .iter()
        .filter(|f| !(no_decisions && DECISION_FILES.contains(*f)))
        .find(|f| !listed(f))
    {
        bail!(
            "{}: does not list {missing}, which every run writes; the folder does not hold one whole run",
            p.display()
        );
    }
    if !m.id_agrees() {
        bail!(
            "{}: its run id is not the one its file list gives (the manifest was edited); run `sim run` again",
            p.display()
        );
    }
    for (name, want) in &m.files {
        let f = dir.join(name);
        if !f.is_file() {
            bail!(
                "{}: listed in {MANIFEST} but missing (or not a file); the folder does not hold one whole run",
                f.display()
            );
        }
        let got = sha256_file(&f).with_context(|| format!("reading {}", f.display()))?;
        if got != *want {
            bail!(
                "{}: not the file run {} wrote (changed or copied from another run); the folder mixes runs, run `sim run` again",
                f.display(),
                m.run_id.chars().take(12).collect::<String>()
            );
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes the files of a run (`summary.json` holding `body`) into `dir`.
    fn write_run(dir: &Path, body: &str) {
        for f in RUN_FILES {
            fs::write(dir.join(f), if f == "summary.json" { body } else { f }).unwrap();
        }
    }

    /// A pid no process has (above Linux's pid_max).
    const DEAD: u32 = 4_000_000_000;

    #[test]
    fn staging_replaces_a_run_whole_and_verify_detects_mixing() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("r");
        for (round, body) in [(0, "a"), (1, "b")] {
            let s = Staging::new(&dest).unwrap();
            write_run(s.path(), body);
            fs::write(s.path().join("perf.json"), format!("{round}")).unwrap();
            let m = s.commit().unwrap();
            assert_eq!(m.files.len(), RUN_FILES.len(), "perf.json is not listed");
            assert_eq!(verify(&dest).unwrap(), m);
        }
        assert_eq!(fs::read_to_string(dest.join("summary.json")).unwrap(), "b");
        // Same contents, same id.
        let id = verify(&dest).unwrap().run_id;
        let s = Staging::new(&dest).unwrap();
        write_run(s.path(), "b");
        assert_eq!(s.commit().unwrap().run_id, id);
        // A file from elsewhere, or a missing one, is refused.
        fs::write(dest.join("summary.json"), "a").unwrap();
        let e = verify(&dest).unwrap_err().to_string();
        assert!(e.contains("mixes runs"), "{e}");
        fs::remove_file(dest.join("summary.json")).unwrap();
        assert!(verify(&dest).unwrap_err().to_string().contains("missing"));
        // Only the final folder remains: no staging litter.
        let names: Vec<_> = fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("r")]);
    }

    #[test]
    fn a_kill_between_the_two_renames_leaves_nothing_that_blocks_the_next_run() {
        // A previous run moved aside and never removed would make every later commit into
        // `r` fail after the whole simulation ("Directory not empty").
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("r");
        let s = Staging::new(&dest).unwrap();
        write_run(s.path(), "old");
        s.commit().unwrap();
        // The state a kill between the renames leaves: the old run aside, no `r`; and the
        // leftovers of older versions and of a killed write_file.
        fs::rename(&dest, root.path().join(format!(".r.old-{DEAD}"))).unwrap();
        fs::create_dir(root.path().join(".r.old")).unwrap();
        fs::write(root.path().join(".r.old").join("summary.json"), "x").unwrap();
        fs::create_dir(root.path().join(format!(".r.staging-{DEAD}"))).unwrap();
        fs::write(root.path().join(format!(".f.json.tmp-{DEAD}")), "half").unwrap();
        for body in ["new", "newer"] {
            let s = Staging::new(&dest).unwrap();
            write_run(s.path(), body);
            s.commit().unwrap();
            verify(&dest).unwrap();
        }
        write_file(&root.path().join("f.json"), b"{}").unwrap();
        let mut names: Vec<_> = fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["f.json", "r"]);
        assert_eq!(fs::read_to_string(dest.join("summary.json")).unwrap(), "newer");
    }

    #[test]
    fn a_manifest_lists_every_run_file_inside_the_folder_and_its_own_id() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("r");
        let s = Staging::new(&dest).unwrap();
        write_run(s.path(), "a");
        let m = s.commit().unwrap();
        let put = |m: &Manifest| fs::write(dest.join(MANIFEST), m.bytes().unwrap()).unwrap();
        // `"files": {}` describes no run.
        put(&Manifest::of(BTreeMap::new()));
        let e = verify(&dest).unwrap_err().to_string();
        assert!(e.contains("run.json: does not list summary.json"), "{e}");
        // An entry outside the folder.
        let mut files = m.files.clone();
        files.insert("../secret".into(), "0".repeat(64));
        put(&Manifest::of(files));
        let e = verify(&dest).unwrap_err().to_string();
        assert!(e.contains("files.`../secret`: not a file of the folder"), "{e}");
        // A file list edited without its run id.
        let mut edited = m.clone();
        edited.files.insert("notes.txt".into(), "0".repeat(64));
        put(&edited);
        let e = verify(&dest).unwrap_err().to_string();
        assert!(e.contains("its run id is not the one its file list gives"), "{e}");
        put(&m);
        verify(&dest).unwrap();
        // An explanation written with the run and written again later keeps the run id.
        fs::write(dest.join("explain.md"), "one").unwrap();
        add_to_manifest(&dest, &["explain.md"]).unwrap();
        fs::write(dest.join("explain.md"), "two").unwrap();
        add_to_manifest(&dest, &["explain.md"]).unwrap();
        assert_eq!(verify(&dest).unwrap().run_id, m.run_id);
        put(&m);
        // A manifest that is not one, or endless, is refused without reading it whole.
        fs::write(dest.join(MANIFEST), vec![b' '; 2 << 20]).unwrap();
        assert!(verify(&dest).unwrap_err().to_string().contains("larger than 1 MiB"));
    }

    #[test]
    fn files_are_hashed_as_they_are_written() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("r");
        let s = Staging::new(&dest).unwrap();
        write_run(s.path(), "a");
        let mut h = Hashed::create(&s.path().join("requests.csv")).unwrap();
        h.write_all(b"x,y\n1,2\n").unwrap();
        h.finish().unwrap();
        let p = s.path().join("requests.csv");
        let recorded = WRITTEN.lock().unwrap().get(&p).cloned().unwrap();
        assert_eq!(recorded, (sha256_file(&p).unwrap(), 8));
        let tmp = s.path().to_path_buf();
        let m = s.commit().unwrap();
        assert_eq!(m.files["requests.csv"], recorded.0);
        assert!(
            WRITTEN.lock().unwrap().keys().all(|k| !k.starts_with(&tmp)),
            "forgotten once committed"
        );
        verify(&dest).unwrap();
    }

    #[test]
    fn an_abandoned_staging_leaves_the_previous_run() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("r");
        let s = Staging::new(&dest).unwrap();
        write_run(s.path(), "old");
        s.commit().unwrap();
        {
            let s = Staging::new(&dest).unwrap();
            fs::write(s.path().join("summary.json"), "half").unwrap();
            // Dropped without commit: an error mid-run.
        }
        assert_eq!(fs::read_to_string(dest.join("summary.json")).unwrap(), "old");
        verify(&dest).unwrap();
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 1);
    }

    #[test]
    fn refuses_to_replace_a_folder_that_is_not_a_run() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("notes.txt"), "mine").unwrap();
        let e = Staging::new(root.path()).err().unwrap().to_string();
        assert!(e.contains("does not hold a `sim run` result"), "{e}");
        assert!(Staging::new(Path::new(".")).is_err());
        let e = verify(root.path()).unwrap_err().to_string();
        assert!(e.contains("no run.json"), "{e}");
    }

    #[test]
    fn write_file_replaces_whole_and_cleans_up_on_error() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("f.csv");
        write_file(&p, b"one").unwrap();
        write_file(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let e = write_with(&p, |tmp| {
            fs::write(tmp, "par")?;
            bail!("disk full")
        });
        assert!(e.is_err());
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 1);
    }
}
