//! NVIDIA Dynamo's agent request trace (`dynamo.request.trace.v1`): JSON lines, plain or
//! gzip (the caller decompresses), one event per line:
//! `{"timestamp": ms, "event": {"schema", "event_type", "agent_context": {"session_id"}, ...}}`.
//!
//! * `request_end`: one LLM call. Start `request.request_received_ms` (unix ms), end start +
//!   `total_time_ms`, TTFT `ttft_ms`, `input_tokens`, `output_tokens`, `model`, and the
//!   prompt's exact content as one hash per `replay.trace_block_size` (16) tokens,
//!   `replay.input_sequence_hashes`.
//! * `tool_end` / `tool_error`: a tool call's `duration_ms` (tool time, for inspect).
//! * other event types (`tool_start`, ...) carry nothing the replay needs; counted.

use std::borrow::Cow;
use std::io::Read;

use serde::Deserialize;

use super::calls::{Calls, NONE, Timing, for_each_line, ms_ns, parse_json, push_call};
use super::parse::{Builder, NO_SESSION, TraceError};

#[derive(Deserialize)]
struct EventLine<'a> {
    #[serde(borrow)]
    event: Event<'a>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    schema: Cow<'a, str>,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    #[serde(default, borrow)]
    agent_context: Option<Context<'a>>,
    #[serde(default, borrow)]
    request: Option<Request<'a>>,
    #[serde(default)]
    tool: Option<Tool>,
}

#[derive(Deserialize)]
struct Context<'a> {
    #[serde(default, borrow)]
    session_id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Request<'a> {
    input_tokens: u64,
    output_tokens: u64,
    request_received_ms: f64,
    #[serde(default)]
    total_time_ms: Option<f64>,
    #[serde(default)]
    ttft_ms: Option<f64>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    replay: Option<Replay>,
}

#[derive(Deserialize)]
struct Replay {
    #[serde(default)]
    trace_block_size: Option<u32>,
    #[serde(default)]
    input_sequence_hashes: Vec<u64>,
}

#[derive(Deserialize)]
struct Tool {
    #[serde(default)]
    duration_ms: Option<f64>,
}

/// Reads a Dynamo agent request trace into `b`.
pub(super) fn read(r: impl Read, b: &mut Builder) -> Result<(), TraceError> {
    let mut calls = Calls::default();
    for_each_line(r, b, |text, line, b| {
        let ev: EventLine = parse_json(b, line, text)?;
        let ev = ev.event;
        if !ev.schema.starts_with("dynamo.request.trace.") {
            return Err(b.err(
                line,
                Some("event.schema"),
                format!("expected `dynamo.request.trace.v1`, got `{}`", ev.schema),
            ));
        }
        match ev.event_type.as_ref() {
            "request_end" => {
                let Some(req) = ev.request else {
                    return Err(b.err(line, Some("event.request"), "a request_end event needs `request`"));
                };
                let start = ms_ns(req.request_received_ms).ok_or_else(|| {
                    b.err(
                        line,
                        Some("event.request.request_received_ms"),
                        format!("expected unix milliseconds >= 0, got {}", req.request_received_ms),
                    )
                })?;
                let dur = |v: Option<f64>, key: &str| -> Result<u64, TraceError> {
                    match v {
                        None => Ok(NONE),
                        Some(ms) => ms_ns(ms)
                            .ok_or_else(|| b.err(line, Some(key), format!("expected milliseconds >= 0, got {ms}"))),
                    }
                };
                let total = dur(req.total_time_ms, "event.request.total_time_ms")?;
                let ttft = dur(req.ttft_ms, "event.request.ttft_ms")?;
                let mut hashes: &[u64] = &[];
                if let Some(rp) = &req.replay {
                    if let Some(bs) = rp.trace_block_size {
                        if bs == 0 || calls.block_tokens.is_some_and(|x| x != bs) {
                            return Err(b.err(
                                line,
                                Some("event.request.replay.trace_block_size"),
                                format!(
                                    "{bs} differs from the trace's earlier {} (one block size per trace)",
                                    calls.block_tokens.unwrap_or(0)
                                ),
                            ));
                        }
                        calls.block_tokens = Some(bs);
                    }
                    hashes = &rp.input_sequence_hashes;
                }
                let session = match ev.agent_context.as_ref().and_then(|c| c.session_id.as_deref()) {
                    Some(s) => b.session(s),
                    None => NO_SESSION,
                };
                let timing = Timing {
                    end_ns: if total == NONE { NONE } else { start + total },
                    ttft_ns: ttft,
                    think_ns: NONE,
                    model: req.model.as_deref(),
                };
                push_call(
                    b,
                    &mut calls,
                    line,
                    start,
                    req.input_tokens,
                    req.output_tokens,
                    session,
                    u32::MAX,
                    hashes.iter().copied(),
                    timing,
                )
            }
            "tool_end" | "tool_error" => {
                if let Some(d) = ev.tool.and_then(|t| t.duration_ms) {
                    let ns = ms_ns(d).ok_or_else(|| {
                        b.err(
                            line,
                            Some("event.tool.duration_ms"),
                            format!("expected milliseconds >= 0, got {d}"),
                        )
                    })?;
                    calls.tool_ns.push(ns);
                }
                calls.other_records += 1;
                Ok(())
            }
            _ => {
                calls.other_records += 1;
                Ok(())
            }
        }
    })?;
    b.trace.calls = Some(Box::new(calls));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::trace::parse::{Format, read_from};

    fn ev(session: &str, start_ms: u64, input: u64, total_ms: f64, hashes: &[u64]) -> String {
        format!(
            r#"{{"timestamp":1,"event":{{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"agent_context":{{"session_id":"{session}"}},"request":{{"request_id":"x","model":"m","input_tokens":{input},"output_tokens":7,"cached_tokens":0,"request_received_ms":{start_ms},"ttft_ms":12.5,"total_time_ms":{total_ms},"replay":{{"trace_block_size":16,"input_length":{input},"input_sequence_hashes":{hashes:?}}}}}}}}}"#
        )
    }

    #[test]
    fn reads_requests_tools_and_hashes() {
        let tool = r#"{"timestamp":2,"event":{"schema":"dynamo.request.trace.v1","event_type":"tool_end","agent_context":{"session_id":"a"},"tool":{"tool_call_id":"c","tool_class":"ls","duration_ms":4.07}}}"#;
        let text = format!(
            "{}\n{tool}\n{}\n",
            ev("a", 1000, 40, 250.5, &[11, 12]),
            ev("a:scout:0", 1100, 20, 100.0, &[11])
        );
        let t = read_from(text.as_bytes(), "d", Format::Dynamo, false).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0].t_ns, 1_000_000_000);
        assert_eq!(t.rows[1].line, 3);
        assert_eq!(t.session_names, vec!["a".to_string(), "a:scout:0".to_string()]);
        assert_eq!(t.rows[1].blocks(&t.blocks), &[0]);
        let c = t.calls.as_ref().unwrap();
        assert_eq!(c.end_ns, vec![1_250_500_000, 1_200_000_000]);
        assert_eq!(c.ttft_ns[0], 12_500_000);
        assert_eq!(c.tool_ns, vec![4_070_000]);
        assert_eq!(c.block_tokens, Some(16));
        assert_eq!(c.model_of(1), Some("m"));
    }

    #[test]
    fn malformed_events_name_line_and_key() {
        let bad = ev("a", 1000, 40, 250.5, &[1]).replace("\"input_tokens\":40", "\"input_tokens\":\"x\"");
        let text = format!("{}\n{bad}\n", ev("a", 1, 5, 1.0, &[]));
        let e = read_from(text.as_bytes(), "d.jsonl", Format::Dynamo, false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("d.jsonl:2: column `event.request.input_tokens`: malformed JSON"),
            "{e}"
        );
        let e = read_from(
            b"{\"event\": {\"schema\": \"other\", \"event_type\": \"x\"}}\n".as_slice(),
            "d",
            Format::Dynamo,
            false,
        )
        .unwrap_err();
        assert_eq!(e.column.as_deref(), Some("event.schema"));
        let e = read_from(
            format!("{}\n{{\"event\": ", ev("a", 1, 5, 1.0, &[])).as_bytes(),
            "d",
            Format::Dynamo,
            false,
        )
        .unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        let neg = ev("a", 1, 5, -3.0, &[]);
        let e = read_from(neg.as_bytes(), "d", Format::Dynamo, false).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("event.request.total_time_ms"));
        // skip_bad_rows counts instead.
        let t = read_from(text.as_bytes(), "d", Format::Dynamo, true).unwrap();
        assert_eq!((t.rows.len(), t.skipped), (1, 1));
        assert_eq!(t.calls.as_ref().unwrap().end_ns.len(), 1);
    }
}
