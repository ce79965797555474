//! A scenario file as read: parse, `--set` overrides, tool tables set aside, and every
//! error located at its file, line and key path.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::schema::ScenarioFile;
use super::traces::resolve_trace_files;
use super::validate::validate_all;
use super::{FieldError, Scenario, ScenarioError, from_value, locate, overrides};
use fleetsim_core::workload::Workload;

/// Largest scenario file read (a scenario is a few KiB; this refuses a wrong file early).
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// Top-level tables that belong to other commands (`sim sweep`, `sim check`): a scenario may
/// carry them, `sim run` ignores them, and they never reach validation.
pub const TOOL_TABLES: [&str; 2] = ["sweep", "expect"];

/// A parsed scenario file with overrides applied but not yet validated: the starting point
/// of `sim run` and of every sweep point. Keeps the original text so that any error can be
/// located at its line.
#[derive(Clone, Debug)]
pub struct Source {
    /// The file name used in messages.
    pub file: String,
    /// Names the scenario when the file has no `name`.
    pub stem: String,
    /// The text as read.
    pub text: String,
    /// The scenario table (overrides applied, [`TOOL_TABLES`] removed).
    pub table: toml::Table,
    /// The [`TOOL_TABLES`] present in the file.
    pub tools: toml::Table,
    /// Normalized paths set by overrides, with where each value came from.
    overridden: Vec<(String, String)>,
}

impl Source {
    /// Reads and parses `path`.
    pub fn read(path: &Path) -> Result<Source, ScenarioError> {
        let file = path.display().to_string();
        let text = crate::atomic::read_text(path, MAX_SCENARIO_BYTES, "the scenario")
            .map_err(|(location, message)| ScenarioError::one(file.clone(), location, "", message))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario");
        Source::parse(&text, &file, stem)
    }

    /// Parses `text` (`file` is used in messages).
    pub fn parse(text: &str, file: &str, stem: &str) -> Result<Source, ScenarioError> {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| {
            ScenarioError::one(
                file,
                e.span().map(|s| locate::line_col(text, s.start)),
                "",
                format!("invalid TOML: {}", e.message().trim()),
            )
        })?;
        let mut tools = toml::Table::new();
        for k in TOOL_TABLES {
            if let Some(v) = table.remove(k) {
                tools.insert(k.to_string(), v);
            }
        }
        Ok(Source {
            file: file.to_string(),
            stem: stem.to_string(),
            text: text.to_string(),
            table,
            tools,
            overridden: Vec::new(),
        })
    }

    /// Applies `path=value` overrides in order; `origin` (`--set`, `sweep axis band`) is
    /// named in any error the values later cause.
    pub fn apply(&mut self, sets: &[(String, String)], origin: &str) -> Result<(), ScenarioError> {
        for (k, v) in sets {
            // `expect.*` and `sweep.*` set the tool tables, not the scenario.
            let head = overrides::normalize(k);
            let head = head.split(['.', '[']).next().unwrap_or("");
            let table = if TOOL_TABLES.contains(&head) {
                &mut self.tools
            } else {
                &mut self.table
            };
            overrides::apply(table, k, v).map_err(|m| {
                ScenarioError::one(
                    self.file.clone(),
                    None,
                    overrides::normalize(k),
                    format!("{origin}: {m}"),
                )
            })?;
            self.overridden.push((overrides::normalize(k), origin.to_string()));
        }
        Ok(())
    }

    /// Attaches file, line and override origin to a validation error.
    pub fn error(&self, e: FieldError) -> ScenarioError {
        let under =
            |p: &str| e.path == *p || e.path.starts_with(&format!("{p}.")) || e.path.starts_with(&format!("{p}["));
        // The latest override of a path is the one in effect.
        let origin = self.overridden.iter().rev().find(|(p, _)| under(p)).map(|(_, o)| o);
        ScenarioError {
            file: self.file.clone(),
            location: if origin.is_some() {
                None
            } else {
                locate::locate(&self.text, &e.path)
            },
            message: match origin {
                Some(o) => format!("{} (value from {o})", e.message),
                None => e.message,
            },
            path: e.path,
            also: Vec::new(),
        }
    }

    /// Several errors of this file as one (at least one): sorted by their place in the file (errors of
    /// `--set` values, which have none, last in the order found), the first carrying the rest.
    pub fn errors(&self, found: Vec<FieldError>) -> ScenarioError {
        Self::in_file_order(found.into_iter().map(|e| self.error(e)).collect())
    }

    fn in_file_order(mut all: Vec<ScenarioError>) -> ScenarioError {
        all.sort_by_key(|e| (e.location.is_none(), e.location));
        let mut first = all.remove(0);
        first.also = all;
        first
    }

    /// `file:line:col: path: message` for a key of this file.
    pub fn message(&self, path: &str, message: &str) -> String {
        self.error(FieldError::new(path, message)).to_string()
    }

    /// Validates the scenario without generating its workload. A file with several
    /// mistakes reports all of them (unknown keys, wrong types and refused values alike):
    /// each check owns its key and stops at its first error, so after an error its key is
    /// taken out of a copy of the table (the key's default takes its place) and the file is
    /// checked again, until it passes or no key is left to take out. An error that is only
    /// the echo of a key taken out (a required key, or a check over it) is not reported; its
    /// own key is taken out in turn. The errors come back in file order.
    pub fn scenario(&self) -> Result<Scenario, ScenarioError> {
        let table = self.resolved_table();
        let first = match check(&table, &self.stem) {
            Ok(s) => return Ok(s),
            Err(errs) => errs,
        };
        let found = every_error(table, first, |t| check(t, &self.stem).map(|_| ()));
        Err(self.errors(found))
    }

    /// [`Source::scenario`] with the errors found elsewhere in the file (`more`, e.g. from
    /// [`Source::tool_errors`]) reported beside its own: every error of the file at once,
    /// in file order.
    pub fn scenario_with(&self, more: Vec<FieldError>) -> Result<Scenario, ScenarioError> {
        let mut all: Vec<ScenarioError> = more.into_iter().map(|e| self.error(e)).collect();
        match self.scenario() {
            Ok(s) if all.is_empty() => return Ok(s),
            Ok(_) => {}
            Err(mut e) => {
                all.extend(std::mem::take(&mut e.also));
                all.push(e);
            }
        }
        Err(Self::in_file_order(all))
    }

    /// Every error of the tool tables ([`TOOL_TABLES`]) as `check` sees them, found the way
    /// [`Source::scenario`] finds the scenario's: `check` validates a copy of this source
    /// and returns the first error of each part it checks (each naming its key path); the
    /// key of each error is taken out of the copy's tool tables and the check runs again,
    /// until it passes or no key is left to take out.
    pub fn tool_errors(&self, check: impl Fn(&Source) -> Vec<FieldError>) -> Vec<FieldError> {
        let mut copy = self.clone();
        let first = check(&copy);
        if first.is_empty() {
            return first;
        }
        every_error(self.tools.clone(), first, |t| {
            copy.tools = t.clone();
            let e = check(&copy);
            if e.is_empty() { Ok(()) } else { Err(e) }
        })
    }

    /// Validates and generates the workload; also returns the effective scenario text
    /// (overrides applied, tool tables removed), which results record.
    pub fn build(&self) -> Result<(Scenario, Workload, String), ScenarioError> {
        self.build_with(&crate::trace::TraceCache::new())
    }

    /// [`Source::build`] with the trace files taken from (or read into) `traces`.
    pub fn build_with(&self, traces: &crate::trace::TraceCache) -> Result<(Scenario, Workload, String), ScenarioError> {
        let scenario = self.scenario()?;
        let workload = scenario.workload_with(traces).map_err(|e| self.error(e))?;
        Ok((scenario, workload, self.effective()))
    }

    /// The effective scenario text (trace files as absolute paths).
    pub fn effective(&self) -> String {
        toml::to_string(&self.resolved_table()).unwrap_or_default()
    }

    /// The scenario table with trace files resolved against the scenario's folder.
    fn resolved_table(&self) -> toml::Table {
        let mut t = self.table.clone();
        let base = Path::new(&self.file).parent().unwrap_or(Path::new(""));
        resolve_trace_files(&mut t, base);
        super::backends::resolve_profile_files(&mut t, base);
        t
    }

    /// The file's `seed` as the tools count seeds from it: 1 when absent or not an integer
    /// (the scenario's own validation names that), 0 for a negative one.
    pub fn first_seed(&self) -> u64 {
        self.table
            .get("seed")
            .and_then(toml::Value::as_integer)
            .unwrap_or(1)
            .max(0) as u64
    }

    /// The trace files the scenario replays (resolved), in order.
    pub fn trace_files(&self) -> Vec<std::path::PathBuf> {
        let t = self.resolved_table();
        let Some(toml::Value::Array(list)) = t.get("workload").and_then(|w| w.get("traces")) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|x| x.get("file").and_then(|f| f.as_str()).map(std::path::PathBuf::from))
            .collect()
    }

    /// Deserializes a tool table (`sweep`), with errors located like scenario keys.
    pub fn tool<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, ScenarioError> {
        self.tool_field(name).map_err(|e| self.error(e))
    }

    /// [`Source::tool`] with the error not yet located (its key path and message).
    pub fn tool_field<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, FieldError> {
        self.tools.get(name).map(|v| from_value(v, name)).transpose()
    }
}

/// Most errors collected from one file (a net: every round takes a key out of the file).
const MAX_ERRORS_FOUND: usize = 1000;

/// Deserializes and validates a scenario table: the first error of the file's structure
/// (serde stops at it), or every section's first error.
fn check(table: &toml::Table, stem: &str) -> Result<Scenario, Vec<FieldError>> {
    let raw: ScenarioFile = from_value(&toml::Value::Table(table.clone()), "").map_err(|mut e| {
        e.path = e.path.trim_start_matches('.').to_string();
        vec![e]
    })?;
    validate_all(raw, stem)
}

/// Every error `check` finds in `table`, starting from its errors `first` on the whole
/// table: after each round the key of each error is taken out (its default takes its
/// place) and the table is checked again, until it passes or no key is left to take out.
/// An error that is only the echo of a key taken out is not reported; its key goes too.
fn every_error(
    mut table: toml::Table,
    first: Vec<FieldError>,
    mut check: impl FnMut(&toml::Table) -> Result<(), Vec<FieldError>>,
) -> Vec<FieldError> {
    let mut round = first;
    let mut found: Vec<FieldError> = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    // Each round takes at least one key out, so the rounds end; the bound is a net.
    while found.len() < MAX_ERRORS_FOUND {
        let mut took = false;
        for e in round {
            // A key that cannot be taken out (a required one missing) errs again in the
            // next round: reported once.
            let again = found.iter().any(|f| f.path == e.path && f.message == e.message);
            if !again && !taken.iter().any(|t| related(t, &e.path)) {
                found.push(e.clone());
            }
            let unit = unit_of(&table, &e.path);
            if take_out(&mut table, &unit) {
                took = true;
                taken.push(unit);
            }
        }
        if !took {
            break;
        }
        round = match check(&table) {
            Ok(()) => break,
            Err(errs) => errs,
        };
    }
    found
}

/// Whether one key path is the other or lies under it (`a.b` and `a.b[0].c`): an error at a
/// related path after its key was taken out may be the echo of that.
fn related(a: &str, b: &str) -> bool {
    let under =
        |x: &str, y: &str| x == y || (x.starts_with(y) && matches!(x.as_bytes().get(y.len()), Some(b'.' | b'[')));
    a.is_empty() || b.is_empty() || under(a, b) || under(b, a)
}

/// The key to take out for an error at `path`: the whole distribution table when `path`
/// is one of its parameters (taking out only the parameter would leave the table
/// incomplete, and the next round would report that echo as a second error).
fn unit_of(table: &toml::Table, path: &str) -> String {
    use super::overrides::{Seg, segments};
    let Some((parent, _)) = path.rsplit_once('.') else {
        return path.to_string();
    };
    let Ok(segs) = segments(parent) else {
        return path.to_string();
    };
    let mut at: Option<&toml::Value> = None;
    for seg in &segs {
        at = match (at, seg) {
            (None, Seg::Key(k)) => table.get(k),
            (Some(toml::Value::Table(x)), Seg::Key(k)) => x.get(k),
            (Some(toml::Value::Array(a)), Seg::Index(i)) => a.get(*i),
            _ => None,
        };
        if at.is_none() {
            return path.to_string();
        }
    }
    match at {
        Some(toml::Value::Table(t)) if t.contains_key("dist") => parent.to_string(),
        _ => path.to_string(),
    }
}

/// Takes the key at `path` out of `table` (for a path that ends at an array element, the
/// array's key, so the other elements keep their indices). False when there is no such key.
fn take_out(table: &mut toml::Table, path: &str) -> bool {
    use super::overrides::{Seg, segments};
    let Ok(mut segs) = segments(path) else {
        return false;
    };
    while matches!(segs.last(), Some(Seg::Index(_))) {
        segs.pop();
    }
    let Some(Seg::Key(leaf)) = segs.pop() else {
        return false;
    };
    let t = table;
    let mut at: Option<&mut toml::Value> = None;
    for seg in &segs {
        let next = match (at, seg) {
            (None, Seg::Key(k)) => t.get_mut(k),
            (Some(toml::Value::Table(x)), Seg::Key(k)) => x.get_mut(k),
            (Some(toml::Value::Array(a)), Seg::Index(i)) => a.get_mut(*i),
            _ => None,
        };
        let Some(next) = next else {
            return false;
        };
        at = Some(next);
    }
    match at {
        None => t.remove(&leaf).is_some(),
        Some(toml::Value::Table(x)) => x.remove(&leaf).is_some(),
        Some(_) => false,
    }
}

/// Loads, overrides (`--set path=value`, applied in order) and validates a scenario file.
/// The workload is generated too, so errors in it (e.g. a request larger than the KV cache)
/// surface here.
pub fn load(path: &Path, sets: &[(String, String)]) -> Result<(Scenario, Workload, String), ScenarioError> {
    let mut src = Source::read(path)?;
    src.apply(sets, "--set")?;
    src.build()
}

/// [`load`] from a string (`file` is used in messages). Also returns the effective
/// scenario text (after overrides), which results record.
pub fn load_str(
    text: &str,
    file: &str,
    stem: &str,
    sets: &[(String, String)],
) -> Result<(Scenario, Workload, String), ScenarioError> {
    let mut src = Source::parse(text, file, stem)?;
    src.apply(sets, "--set")?;
    src.build()
}
