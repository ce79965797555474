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

use super::jsonl::{Obj, for_each_line, parse_json};
use super::model::{Builder, Calls, NO_SESSION, NONE, RawRow, Timing, TraceError, ms_ns, push_call};

/// Largest `replay.trace_block_size` read (tokens per block hash): vLLM's KV blocks are
/// 1 to a few hundred tokens; a block beyond this cannot be a prompt's unit.
pub const MAX_TRACE_BLOCK_SIZE: u32 = 1 << 20;

#[derive(Deserialize)]
struct EventLine<'a> {
    #[serde(borrow)]
    event: Obj<Event<'a>>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    schema: Cow<'a, str>,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    #[serde(default, borrow)]
    agent_context: Option<Obj<Context<'a>>>,
    #[serde(default, borrow)]
    request: Option<Obj<Request<'a>>>,
    #[serde(default)]
    tool: Option<Obj<Tool>>,
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
    replay: Option<Obj<Replay>>,
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
        let ev: Obj<EventLine> = parse_json(b, line, text)?;
        let ev = ev.0.event.0;
        if !ev.schema.starts_with("dynamo.request.trace.") {
            return Err(b.err(
                line,
                Some("event.schema"),
                format!(
                    "expected `dynamo.request.trace.v1`, got {}",
                    crate::quote::quote(&ev.schema)
                ),
            ));
        }
        match ev.event_type.as_ref() {
            "request_end" => request_end(b, &mut calls, line, ev),
            "tool_end" | "tool_error" => {
                if let Some(d) = ev.tool.and_then(|t| t.0.duration_ms) {
                    let ns = ms_ns(d).ok_or_else(|| {
                        b.err(
                            line,
                            Some("event.tool.duration_ms"),
                            format!("expected milliseconds in [0, 1.8e13], got {d}"),
                        )
                    })?;
                    b.charge(line, 8)?;
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

/// One LLM call: its start, end and TTFT, its session, and its prompt's block hashes.
fn request_end(b: &mut Builder, calls: &mut Calls, line: u64, ev: Event<'_>) -> Result<(), TraceError> {
    let Some(Obj(req)) = ev.request else {
        return Err(b.err(line, Some("event.request"), "a request_end event needs `request`"));
    };
    let start = ms_ns(req.request_received_ms).ok_or_else(|| {
        b.err(
            line,
            Some("event.request.request_received_ms"),
            format!(
                "expected unix milliseconds in [0, 1.8e13], got {}",
                req.request_received_ms
            ),
        )
    })?;
    let dur = |v: Option<f64>, key: &str| -> Result<u64, TraceError> {
        match v {
            None => Ok(NONE),
            Some(ms) => ms_ns(ms).ok_or_else(|| {
                b.err(
                    line,
                    Some(key),
                    format!("expected milliseconds in [0, 1.8e13], got {ms}"),
                )
            }),
        }
    };
    let total = dur(req.total_time_ms, "event.request.total_time_ms")?;
    let ttft = dur(req.ttft_ms, "event.request.ttft_ms")?;
    // The end is the start plus the total: checked, never wrapped around 2^64.
    let end_ns = match total {
        NONE => NONE,
        t => start.checked_add(t).filter(|&e| e != NONE).ok_or_else(|| {
            b.err(
                line,
                Some("event.request.total_time_ms"),
                format!(
                    "request_received_ms {} + total_time_ms {} ends after the year 2554 (2^64 ns)",
                    req.request_received_ms,
                    req.total_time_ms.unwrap_or(0.0)
                ),
            )
        })?,
    };
    let hashes: &[u64] = match &req.replay {
        Some(Obj(rp)) => replay_hashes(b, calls, line, rp, req.input_tokens)?,
        None => &[],
    };
    let session = match ev.agent_context.as_ref().and_then(|c| c.0.session_id.as_deref()) {
        Some(s) => b.session(s),
        None => NO_SESSION,
    };
    let timing = Timing {
        end_ns,
        ttft_ns: ttft,
        think_ns: NONE,
        model: req.model.as_deref(),
    };
    let r = RawRow {
        session,
        blocks: hashes,
        ..RawRow::new(line, start, req.input_tokens, req.output_tokens)
    };
    push_call(b, calls, r, timing)
}

/// A call's prompt content: one hash per whole or partial block of its `input_tokens`, in
/// blocks of the trace's one `trace_block_size` (the first call's, else the format's).
fn replay_hashes<'r>(
    b: &Builder,
    calls: &mut Calls,
    line: u64,
    rp: &'r Replay,
    input_tokens: u64,
) -> Result<&'r [u64], TraceError> {
    let bs = match rp.trace_block_size {
        Some(bs) => {
            if !(1..=MAX_TRACE_BLOCK_SIZE).contains(&bs) {
                return Err(b.err(
                    line,
                    Some("event.request.replay.trace_block_size"),
                    format!("expected 1 to {MAX_TRACE_BLOCK_SIZE} tokens per block, got {bs}"),
                ));
            }
            if calls.block_tokens.is_some_and(|x| x != bs) {
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
            bs
        }
        None => calls
            .block_tokens
            .unwrap_or(super::model::Format::Dynamo.default_block_tokens()),
    };
    // One hash per whole or partial block of the prompt, no more.
    let most = input_tokens.div_ceil(u64::from(bs));
    if rp.input_sequence_hashes.len() as u64 > most {
        return Err(b.err(
            line,
            Some("event.request.replay.input_sequence_hashes"),
            format!(
                "{} block hashes for a prompt of {} tokens in blocks of {bs}: at most {most}",
                rp.input_sequence_hashes.len(),
                input_tokens
            ),
        ));
    }
    Ok(&rp.input_sequence_hashes)
}

#[cfg(test)]
mod tests {
    use crate::trace::model::Format;
    use crate::trace::reader::read_from;

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
        // The end is checked, never wrapped; a tool record is an object; block
        // sizes and hash counts are bounded by the prompt.
        let wrap = ev("a", 1, 5, 1.0, &[])
            .replace("\"request_received_ms\":1", "\"request_received_ms\":17000000000000")
            .replace("\"total_time_ms\":1", "\"total_time_ms\":17000000000000");
        let e = read_from(wrap.as_bytes(), "d", Format::Dynamo, false).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("event.request.total_time_ms"), "{e}");
        assert!(e.message.contains("2^64"), "{e}");
        let tool = r#"{"event":{"schema":"dynamo.request.trace.v1","event_type":"tool_end","tool":[1]}}"#;
        let e = read_from(tool.as_bytes(), "d", Format::Dynamo, false).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("event.tool"), "{e}");
        assert!(e.message.contains("expected a JSON object"), "{e}");
        let e = read_from(b"[{\"schema\": 1}]\n".as_slice(), "d", Format::Dynamo, false).unwrap_err();
        assert!(e.message.contains("expected a JSON object"), "{e}");
        let big = ev("a", 1, 4736, 1.0, &[7; 297]);
        let e = read_from(big.as_bytes(), "d", Format::Dynamo, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "d:1: column `event.request.replay.input_sequence_hashes`: 297 block hashes for a prompt of 4736 tokens in blocks of 16: at most 296"
        );
        assert!(read_from(ev("a", 1, 4736, 1.0, &[7; 296]).as_bytes(), "d", Format::Dynamo, false).is_ok());
        let huge = ev("a", 1, 4736, 1.0, &[7]).replace("\"trace_block_size\":16", "\"trace_block_size\":4294967295");
        let e = read_from(huge.as_bytes(), "d", Format::Dynamo, false).unwrap_err();
        assert!(
            e.message
                .contains("expected 1 to 1048576 tokens per block, got 4294967295"),
            "{e}"
        );
        // skip_bad_rows counts instead.
        let t = read_from(text.as_bytes(), "d", Format::Dynamo, true).unwrap();
        assert_eq!((t.rows.len(), t.skipped), (1, 1));
        assert_eq!(t.calls.as_ref().unwrap().end_ns.len(), 1);
    }
}
