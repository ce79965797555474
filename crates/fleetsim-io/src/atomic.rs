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
//! Owns: staging, rename and the manifest. Invariant: a reader sees a complete folder or
//! none.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

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
    fn of(files: BTreeMap<String, String>) -> Manifest {
        let mut id = String::new();
        for (k, v) in &files {
            id.push_str(&format!("{k}\t{v}\n"));
        }
        Manifest {
            run_id: sha256_hex(id.as_bytes()),
            fleetsim_version: env!("CARGO_PKG_VERSION").to_string(),
            files,
        }
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
    write_with(path, |tmp| Ok(fs::write(tmp, bytes)?))
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
        fs::write(self.tmp.join(MANIFEST), m.bytes()?)
            .with_context(|| format!("writing {}", self.tmp.join(MANIFEST).display()))?;
        replaceable(&self.dest)?;
        if self.dest.exists() {
            // Two renames: between them the folder is absent, never half written.
            let old = self.tmp.with_extension("old");
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
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.tmp);
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

/// Removes staging folders of `name` left by killed runs (their process is gone).
fn remove_stale(parent: &Path, name: &str) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    let prefix = format!(".{name}.staging-");
    for e in entries.flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = f.strip_prefix(&prefix).map(|p| p.trim_end_matches(".old")) else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive && Path::new("/proc/self").exists() {
            let _ = fs::remove_dir_all(e.path());
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
        let bytes = fs::read(e.path()).with_context(|| format!("reading {}", e.path().display()))?;
        out.insert(name, sha256_hex(&bytes));
    }
    Ok(out)
}

/// Adds files written later into a complete folder (`sim explain`'s) to its manifest; the
/// run id is unchanged (it names the run, not the explanation).
pub fn add_to_manifest(dir: &Path, names: &[&str]) -> Result<()> {
    let mut m = read_manifest(dir)?;
    for n in names {
        let p = dir.join(n);
        let bytes = fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
        m.files.insert((*n).to_string(), sha256_hex(&bytes));
    }
    write_file(&dir.join(MANIFEST), &m.bytes()?)
}

fn read_manifest(dir: &Path) -> Result<Manifest> {
    let p = dir.join(MANIFEST);
    let bytes = fs::read(&p).with_context(|| {
        format!(
            "{}: no {MANIFEST}, so not a complete `sim run` folder (an interrupted run, or one from an older fleetsim); run `sim run` again",
            dir.display()
        )
    })?;
    serde_json::from_slice(&bytes).with_context(|| format!("{}: not a fleetsim manifest", p.display()))
}

/// Checks that every file the manifest lists is present and unchanged: the folder holds
/// exactly one run. Returns the manifest.
pub fn verify(dir: &Path) -> Result<Manifest> {
    let m = read_manifest(dir)?;
    for (name, want) in &m.files {
        let p = dir.join(name);
        let bytes = fs::read(&p).with_context(|| {
            format!(
                "{}: listed in {MANIFEST} but missing; the folder does not hold one whole run",
                p.display()
            )
        })?;
        if sha256_hex(&bytes) != *want {
            bail!(
                "{}: not the file run {} wrote (changed or copied from another run); the folder mixes runs, run `sim run` again",
                p.display(),
                &m.run_id[..12.min(m.run_id.len())]
            );
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_replaces_a_run_whole_and_verify_detects_mixing() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("r");
        for (round, body) in [(0, "a"), (1, "b")] {
            let s = Staging::new(&dest).unwrap();
            fs::write(s.path().join("summary.json"), body).unwrap();
            fs::write(s.path().join("scenario.toml"), "x").unwrap();
            fs::write(s.path().join("perf.json"), format!("{round}")).unwrap();
            let m = s.commit().unwrap();
            assert_eq!(m.files.len(), 2, "perf.json is not listed");
            assert_eq!(verify(&dest).unwrap(), m);
        }
        assert_eq!(fs::read_to_string(dest.join("summary.json")).unwrap(), "b");
        // Same contents, same id.
        let id = verify(&dest).unwrap().run_id;
        let s = Staging::new(&dest).unwrap();
        fs::write(s.path().join("summary.json"), "b").unwrap();
        fs::write(s.path().join("scenario.toml"), "x").unwrap();
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
    fn an_abandoned_staging_leaves_the_previous_run() {
        let root = tempfile::tempdir().unwrap();
        let dest = root.path().join("r");
        let s = Staging::new(&dest).unwrap();
        fs::write(s.path().join("summary.json"), "old").unwrap();
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
