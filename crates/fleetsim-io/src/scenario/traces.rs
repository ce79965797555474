//! `[[workload.traces]]`: replayed trace groups (file, format, sessions, pacing, scaling).

use std::path::Path;

use super::schema::TraceFile;
use super::workload::{arrival, service_time};
use super::{FieldError, Res, count, secs};
use crate::trace::{Format, Mode, Scale, SessionMode, TraceGroupConfig};
use fleetsim_core::time::SimTime;

/// Validates one `[[workload.traces]]` table (`p` is its key path): its first error, in
/// the order of the steps below.
pub(super) fn trace_group(t: &TraceFile, p: &str, queueing: bool) -> Res<TraceGroupConfig> {
    if t.file.is_empty() {
        return Err(FieldError::new(format!("{p}.file"), "names no file"));
    }
    let file = std::path::PathBuf::from(&t.file);
    let name = match &t.name {
        Some(n) => n.clone(),
        None => file.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_string(),
    };
    if name.is_empty() {
        return Err(FieldError::new(format!("{p}.name"), "must not be empty"));
    }
    let mut g = TraceGroupConfig::new(&name, file);
    if let Some(f) = &t.format {
        g.format = Some(Format::parse(f).map_err(|m| FieldError::new(format!("{p}.format"), m))?);
    }
    timing(t, p, &mut g)?;
    sessions(t, p, &mut g)?;
    agent(t, p, &mut g)?;
    g.max_context_tokens = t
        .max_context_tokens
        .map(|c| count(c, &format!("{p}.max_context_tokens"), 2))
        .transpose()?;
    g.max_idle_gap_ns = t
        .max_idle_gap_s
        .map(|s| secs(s, &format!("{p}.max_idle_gap_s"), true).map(|d| d.0))
        .transpose()?;
    g.block_tokens = t
        .block_tokens
        .map(|b| count(b, &format!("{p}.block_tokens"), 1))
        .transpose()?;
    g.service_time_s = service_time(t.service_time_s.as_ref(), queueing, p)?;
    Ok(g)
}

/// The replay's timing: loop mode, time scale, window, placement in simulated time, request
/// limit, repeats and arrival jitter.
fn timing(t: &TraceFile, p: &str, g: &mut TraceGroupConfig) -> Res<()> {
    g.mode = match t.mode.as_deref() {
        None | Some("open") => Mode::Open,
        Some("closed") => Mode::Closed,
        Some(o) => {
            return Err(FieldError::new(
                format!("{p}.mode"),
                format!("unknown mode `{o}`; expected `open` or `closed`"),
            ));
        }
    };
    let positive = |v: f64, k: &str| -> Res<f64> {
        if !(v.is_finite() && v > 0.0 && v <= 1e9) {
            return Err(FieldError::new(
                format!("{p}.{k}"),
                format!("must be a finite number > 0 (at most 1e9), got {v}"),
            ));
        }
        Ok(v)
    };
    g.scale = match (t.time_scale, t.target_rate_per_s) {
        (Some(_), Some(_)) => {
            return Err(FieldError::new(
                format!("{p}.target_rate_per_s"),
                "set either time_scale or target_rate_per_s, not both",
            ));
        }
        (Some(f), None) => Scale::Factor(positive(f, "time_scale")?),
        (None, Some(r)) => Scale::TargetRate(positive(r, "target_rate_per_s")?),
        (None, None) => Scale::Factor(1.0),
    };
    g.start_s = secs(t.start_s.unwrap_or(0.0), &format!("{p}.start_s"), true)?.0 as f64 / 1e9;
    if let Some(d) = t.duration_s {
        secs(d, &format!("{p}.duration_s"), false)?;
        g.duration_s = Some(d);
    }
    g.at = SimTime(secs(t.at_s.unwrap_or(0.0), &format!("{p}.at_s"), true)?.0);
    if let Some(m) = t.max_requests {
        g.max_requests = Some(u64::from(count(m, &format!("{p}.max_requests"), 1)?));
    }
    g.repeat = count(t.repeat.unwrap_or(1), &format!("{p}.repeat"), 1)?;
    if g.repeat > 1_000_000 {
        return Err(FieldError::new(format!("{p}.repeat"), "at most 1000000"));
    }
    if let Some(j) = t.arrival_jitter_s {
        secs(j, &format!("{p}.arrival_jitter_s"), true)?;
        g.arrival_jitter_s = j;
    }
    Ok(())
}

/// How rows become sessions: the mode, and the settings of inference and synthesis.
fn sessions(t: &TraceFile, p: &str, g: &mut TraceGroupConfig) -> Res<()> {
    if let Some(m) = &t.sessions {
        g.sessions = SessionMode::parse(m).map_err(|e| FieldError::new(format!("{p}.sessions"), e))?;
    }
    if let Some(i) = &t.infer {
        let q = format!("{p}.infer");
        if let Some(v) = i.min_shared_blocks {
            g.infer.min_shared_blocks = count(v, &format!("{q}.min_shared_blocks"), 1)?;
        }
        if let Some(v) = i.max_fanout {
            g.infer.max_fanout = count(v, &format!("{q}.max_fanout"), 1)?;
        }
        if let Some(v) = i.max_gap_s {
            g.infer.max_gap_ns = Some(secs(v, &format!("{q}.max_gap_s"), true)?.0);
        }
        if let Some(v) = i.min_growth_tokens {
            g.infer.min_growth_tokens = count(v, &format!("{q}.min_growth_tokens"), 0)?;
        }
    }
    if let Some(sy) = &t.synthesize {
        let q = format!("{p}.synthesize");
        if let Some(v) = sy.mean_turns {
            if !(v.is_finite() && (1.0..=1e6).contains(&v)) {
                return Err(FieldError::new(
                    format!("{q}.mean_turns"),
                    format!("must be between 1 and 1e6, got {v}"),
                ));
            }
            g.synthesize.mean_turns = v;
        }
        if let Some(v) = sy.max_open {
            g.synthesize.max_open = count(v, &format!("{q}.max_open"), 1)?;
        }
    }
    Ok(())
}

/// Session-shaped traces: when sessions open, the column mapping, content and row filter,
/// and the session key header.
fn agent(t: &TraceFile, p: &str, g: &mut TraceGroupConfig) -> Res<()> {
    if let Some(v) = &t.session_arrival {
        g.agent.session_arrival = Some(arrival(v, &format!("{p}.session_arrival"))?);
    }
    crate::trace::agent_cfg::apply(
        &mut g.agent,
        g.format,
        t.columns.as_ref(),
        t.context.as_deref(),
        t.shared_prefix_tokens.as_ref(),
        t.session_attributes.as_deref(),
    )
    .map_err(|(k, m)| FieldError::new(format!("{p}.{k}"), m))?;
    if let Some(c) = t.chars_per_token {
        if !(c.is_finite() && (0.5..=100.0).contains(&c)) {
            return Err(FieldError::new(
                format!("{p}.chars_per_token"),
                format!("expected characters per token between 0.5 and 100, got {c}"),
            ));
        }
        if g.agent
            .read
            .columns
            .as_ref()
            .is_none_or(|m| m.shared_prefix_chars.is_none())
        {
            return Err(FieldError::new(
                format!("{p}.chars_per_token"),
                "applies only to a shared part recorded in characters (columns.shared_prefix_chars)",
            ));
        }
        g.agent.chars_per_token = Some(c);
    }
    g.sends_session_key = t.sends_session_key;
    g.skip_bad_rows = t.skip_bad_rows;
    if let Some(w) = &t.where_ {
        if g.format.is_some_and(|f| f != Format::Sessions) || g.agent.read.columns.is_none() {
            return Err(FieldError::new(
                format!("{p}.where"),
                "applies only to format = \"sessions\" (a trace read through `columns`)",
            ));
        }
        g.agent.read.filter =
            crate::trace::filter::parse(w).map_err(|(k, m)| FieldError::new(format!("{p}.{k}"), m))?;
    }
    Ok(())
}

/// Resolves every `workload.traces[i].file` of `table` against `base` (the scenario file's
/// folder) into an absolute path, so the effective scenario runs from anywhere.
pub fn resolve_trace_files(table: &mut toml::Table, base: &Path) {
    let Some(toml::Value::Table(w)) = table.get_mut("workload") else {
        return;
    };
    let Some(toml::Value::Array(list)) = w.get_mut("traces") else {
        return;
    };
    for t in list {
        if let Some(toml::Value::String(f)) = t.get_mut("file") {
            let p = Path::new(f.as_str());
            let joined = if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
            let abs = std::fs::canonicalize(&joined)
                .or_else(|_| std::path::absolute(&joined))
                .unwrap_or(joined);
            *f = abs.display().to_string();
        }
    }
}
