//! `[[workload.traces]]` keys for session-shaped traces: the `sessions` column mapping, the
//! OTel session attributes, `session_arrival` for traces of offsets, and content without
//! hashes (`context`, `shared_prefix_tokens`).

use super::model::{Format, NO_SESSION, NONE, Trace};
use super::reader::AgentReadOptions;
use super::session_log::ColumnMap;
use fleetsim_core::rng::stream;
use fleetsim_core::workload::{Arrival, arrival_times};

/// How a session's calls relate when the trace has no block hashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Context {
    /// Call `k + 1`'s prompt extends call `k`'s prompt and output, up to its own length
    /// (an agent's growing conversation).
    #[default]
    Append,
    /// Every call's prompt is its own (beyond a shared prefix).
    Independent,
}

/// A prefix shared across sessions (a harness's system prompt and tool definitions).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SharedPrefix {
    /// Tokens for every session (`shared_prefix_tokens = N`).
    pub all: Option<u32>,
    /// Tokens per model name (`shared_prefix_tokens = { "model" = N, ... }`).
    pub by_model: Vec<(String, u32)>,
}

impl SharedPrefix {
    /// Tokens for a session whose first call names `model`.
    pub fn tokens_for(&self, model: Option<&str>) -> Option<u32> {
        if !self.by_model.is_empty() {
            let m = model?;
            return self.by_model.iter().find(|(k, _)| k == m).map(|(_, n)| *n);
        }
        self.all
    }

    /// Content name of the prefix: per model name when set per model (sessions of any trace
    /// naming that model share it), else per trace group.
    pub fn key(&self, group: &str, model: Option<&str>) -> String {
        match model {
            Some(m) if !self.by_model.is_empty() => format!("model:{m}"),
            _ => format!("trace:{group}"),
        }
    }
}

/// Session-shaped trace settings of one `[[workload.traces]]` table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentConfig {
    /// Reader options (column mapping, OTel session attributes).
    pub read: AgentReadOptions,
    /// When sessions of a trace of offsets (`offset_s`) open.
    pub session_arrival: Option<Arrival>,
    /// Content of calls without hashes.
    pub context: Context,
    /// Prefix shared across sessions.
    pub shared_prefix: SharedPrefix,
    /// Characters per token of a recorded shared part in characters
    /// (`columns.shared_prefix_chars`); `None`: [`DEFAULT_CHARS_PER_TOKEN`].
    pub chars_per_token: Option<f64>,
}

/// Characters per token when a trace records its shared part in characters: the common
/// rule of thumb for English text and code under BPE tokenizers (and production-stack's
/// `--prefix-chars-per-token` default).
pub const DEFAULT_CHARS_PER_TOKEN: f64 = 4.0;

impl AgentConfig {
    /// Tokens of a recorded shared part of `len` (characters when `in_chars`, rounded up).
    pub fn shared_tokens(&self, len: u32, in_chars: bool) -> u32 {
        if !in_chars {
            return len;
        }
        let cpt = self.chars_per_token.unwrap_or(DEFAULT_CHARS_PER_TOKEN);
        (f64::from(len) / cpt).ceil().min(f64::from(u32::MAX / 2)) as u32
    }
}

/// Validates the keys; errors are `(key, message)` relative to the trace table.
pub fn apply(
    a: &mut AgentConfig,
    format: Option<Format>,
    columns: Option<&toml::Value>,
    context: Option<&str>,
    shared_prefix_tokens: Option<&toml::Value>,
    session_attributes: Option<&[String]>,
) -> Result<(), (String, String)> {
    if let Some(c) = columns {
        if format.is_some_and(|f| f != Format::Sessions) {
            return Err(("columns".into(), "applies only to format = \"sessions\"".into()));
        }
        let m = ColumnMap::from_toml(c).map_err(|(k, m)| {
            let k = if k.is_empty() {
                "columns".to_string()
            } else {
                format!("columns.{k}")
            };
            (k, m)
        })?;
        a.read.columns = Some(m);
    } else if format == Some(Format::Sessions) {
        return Err((
            "columns".into(),
            "format = \"sessions\" needs a column mapping, e.g. columns = { session = \"conv\", start_s = \"t\", input_tokens = \"in\", output_tokens = \"out\" }".into(),
        ));
    }
    if let Some(list) = session_attributes {
        if format.is_some_and(|f| f != Format::Otel) {
            return Err(("session_attributes".into(), "applies only to format = \"otel\"".into()));
        }
        if list.iter().any(String::is_empty) {
            return Err(("session_attributes".into(), "attribute names must not be empty".into()));
        }
        a.read.session_attributes = list.to_vec();
    }
    a.context = match context {
        None | Some("append") => Context::Append,
        Some("independent") => Context::Independent,
        Some(o) => {
            return Err((
                "context".into(),
                format!("unknown context `{o}`; expected `append` or `independent`"),
            ));
        }
    };
    let tokens = |v: &toml::Value, k: &str| -> Result<u32, (String, String)> {
        v.as_integer()
            .filter(|&n| (0..=i64::from(u32::MAX / 2)).contains(&n))
            .map(|n| n as u32)
            .ok_or_else(|| {
                (
                    k.to_string(),
                    format!("expected a whole number of tokens >= 0, got {v}"),
                )
            })
    };
    match shared_prefix_tokens {
        None => {}
        Some(toml::Value::Table(t)) => {
            for (m, v) in t {
                let n = tokens(v, &format!("shared_prefix_tokens.\"{m}\""))?;
                a.shared_prefix.by_model.push((m.clone(), n));
            }
        }
        Some(v) => a.shared_prefix.all = Some(tokens(v, "shared_prefix_tokens")?),
    }
    Ok(())
}

/// Reader options from the command line: `--columns KEY=COL,...` and the session attributes.
pub fn cli_read_options(columns: Option<&str>, attrs: &[String]) -> Result<AgentReadOptions, String> {
    if let Some(a) = attrs
        .iter()
        .find(|a| a.trim().is_empty() || a.trim() != a.as_str() || a.chars().any(char::is_control))
    {
        return Err(format!(
            "--session-attribute {}: an attribute name, non-empty, without surrounding spaces or control characters",
            crate::quote::quote(a)
        ));
    }
    let mut o = AgentReadOptions {
        session_attributes: attrs.to_vec(),
        ..AgentReadOptions::default()
    };
    if let Some(c) = columns {
        let mut t = toml::Table::new();
        for kv in c.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .filter(|(k, v)| !k.trim().is_empty() && !v.trim().is_empty())
                .ok_or_else(|| format!("--columns: expected KEY=COLUMN, got {}", crate::quote::quote(kv)))?;
            t.insert(k.trim().to_string(), toml::Value::String(v.trim().to_string()));
        }
        let m = ColumnMap::from_toml(&toml::Value::Table(t)).map_err(|(k, m)| format!("--columns: {k}: {m}"))?;
        o.columns = Some(m);
    }
    Ok(o)
}

/// Whether `trace` is one of offsets whose sessions `session_arrival` places (so
/// [`place_sessions`] changes it); an error when the trace and the setting disagree.
pub fn needs_placing(trace: &Trace, a: &AgentConfig) -> Result<bool, String> {
    let offsets = trace.calls.as_ref().is_some_and(|c| c.offsets);
    let file = &trace.file;
    match (&a.session_arrival, offsets) {
        (None, true) => Err(format!(
            "{file}: calls are offsets within their session (columns.offset_s); set session_arrival = {{ kind = \"burst\" | \"poisson\" | \"interval\", ... }} to place the sessions"
        )),
        (Some(_), false) => Err(format!(
            "{file}: session_arrival applies only to traces of offsets (columns.offset_s); this trace records its own start times"
        )),
        (arrival, _) => Ok(arrival.is_some()),
    }
}

/// Places the sessions of a trace of offsets (`offset_s`) at `session_arrival` times
/// (seeded per trace group), in order of each session's first row.
pub fn place_sessions(trace: &mut Trace, a: &AgentConfig, group: &str, seed: u64) -> Result<(), String> {
    let (true, Some(arrival)) = (needs_placing(trace, a)?, &a.session_arrival) else {
        return Ok(());
    };
    let file = trace.file.clone();
    let n = trace.session_names.len();
    let mut rng = stream(seed, &format!("trace/{group}/session_arrival"), 0);
    let starts = arrival_times(arrival, n, &mut rng);
    let calls = trace.calls.as_mut().expect("offsets imply calls");
    for (i, row) in trace.rows.iter_mut().enumerate() {
        if row.session == NO_SESSION {
            return Err(format!(
                "{file}:{}: a call given as an offset needs a session id",
                row.line
            ));
        }
        let at = starts[row.session as usize]
            .ok_or_else(|| format!("{file}: session_arrival places a session beyond the simulator's horizon"))?
            .0;
        row.t_ns = row.t_ns.saturating_add(at);
        if calls.end_ns[i] != NONE {
            calls.end_ns[i] = calls.end_ns[i].saturating_add(at);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(s: &str) -> toml::Value {
        toml::from_str::<toml::Table>(&format!("v = {s}")).unwrap()["v"].clone()
    }

    #[test]
    fn keys_validate() {
        let mut a = AgentConfig::default();
        apply(
            &mut a,
            None,
            None,
            Some("independent"),
            Some(&val("{ \"m1\" = 100 }")),
            None,
        )
        .unwrap();
        assert_eq!(a.context, Context::Independent);
        assert_eq!(a.shared_prefix.tokens_for(Some("m1")), Some(100));
        assert_eq!(a.shared_prefix.tokens_for(Some("m2")), None);
        assert_eq!(a.shared_prefix.key("g", Some("m1")), "model:m1");
        let e = apply(&mut a, None, None, Some("glue"), None, None).unwrap_err();
        assert_eq!(e.0, "context");
        let e = apply(&mut a, Some(Format::Sessions), None, None, None, None).unwrap_err();
        assert_eq!(e.0, "columns");
        let e = apply(&mut a, None, None, None, Some(&val("-3")), None).unwrap_err();
        assert_eq!(e.0, "shared_prefix_tokens");
        let e = apply(
            &mut a,
            None,
            Some(&val(
                "{ input_tokens = \"a\", output_tokens = \"b\", start_s = \"t\", nope = \"x\" }",
            )),
            None,
            None,
            None,
        )
        .unwrap_err();
        assert_eq!(e.0, "columns.nope");
    }
}
