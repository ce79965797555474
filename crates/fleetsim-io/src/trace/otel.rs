//! OpenTelemetry GenAI spans as the OpenTelemetry Collector's file exporter writes them:
//! OTLP/JSON, one `ExportTraceServiceRequest` per line
//! (`{"resourceSpans": [{"resource": {...}, "scopeSpans": [{"spans": [...]}]}]}`).
//!
//! A span is an inference call when its `gen_ai.operation.name` is `chat`,
//! `text_completion` or `generate_content` (the GenAI semantic conventions' inference
//! operations). Its start and end are `startTimeUnixNano` / `endTimeUnixNano` (strings or
//! numbers, as OTLP/JSON allows), its tokens `gen_ai.usage.input_tokens` /
//! `gen_ai.usage.output_tokens`, its model `gen_ai.request.model`. The session is the first
//! present of the configured attributes (default `gen_ai.conversation.id`, then
//! `session.id`; span attributes before resource attributes), else the trace id.
//! `execute_tool` spans give tool time; every other span is skipped and counted.

use std::io::Read;

use serde::Deserialize;

use super::jsonl::{Obj, for_each_line, parse_json};
use super::model::{Builder, Calls, NONE, RawRow, Timing, TraceError, push_call};

/// The session attributes tried by default (then the trace id).
pub const DEFAULT_SESSION_ATTRIBUTES: [&str; 2] = ["gen_ai.conversation.id", "session.id"];

/// Reader options.
#[derive(Clone, Debug, PartialEq)]
pub struct OtelOptions {
    /// Attributes naming the session, in order (then the trace id).
    pub session_attributes: Vec<String>,
}

impl Default for OtelOptions {
    fn default() -> Self {
        OtelOptions::new(&[])
    }
}

impl OtelOptions {
    /// With these session attributes (empty: the defaults).
    pub fn new(attrs: &[String]) -> Self {
        OtelOptions {
            session_attributes: if attrs.is_empty() {
                DEFAULT_SESSION_ATTRIBUTES.iter().map(|s| s.to_string()).collect()
            } else {
                attrs.to_vec()
            },
        }
    }
}

#[derive(Deserialize)]
struct Export {
    /// Required: a JSON line without it is not an OTLP export (read as 0 spans before).
    #[serde(rename = "resourceSpans")]
    resource_spans: Vec<Obj<ResourceSpans>>,
}

#[derive(Deserialize)]
struct ResourceSpans {
    #[serde(default)]
    resource: Option<Obj<Resource>>,
    #[serde(rename = "scopeSpans", default)]
    scope_spans: Vec<Obj<ScopeSpans>>,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(default)]
    attributes: Vec<Obj<KeyValue>>,
}

#[derive(Deserialize)]
struct ScopeSpans {
    #[serde(default)]
    spans: Vec<Obj<Span>>,
}

#[derive(Deserialize)]
struct Span {
    #[serde(rename = "traceId", default)]
    trace_id: String,
    #[serde(rename = "startTimeUnixNano")]
    start: Num,
    #[serde(rename = "endTimeUnixNano")]
    end: Num,
    #[serde(default)]
    attributes: Vec<Obj<KeyValue>>,
}

#[derive(Deserialize)]
struct KeyValue {
    key: String,
    #[serde(default)]
    value: Option<Obj<AnyValue>>,
}

#[derive(Deserialize, Default)]
struct AnyValue {
    #[serde(rename = "stringValue", default)]
    string: Option<String>,
    #[serde(rename = "intValue", default)]
    int: Option<Num>,
    #[serde(rename = "doubleValue", default)]
    double: Option<f64>,
}

/// An OTLP/JSON integer: a JSON number or, for 64-bit values, a decimal string.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum Num {
    U(u64),
    F(f64),
    S(String),
}

impl Num {
    fn whole(&self) -> Option<u64> {
        match self {
            Num::U(v) => Some(*v),
            Num::F(f) => (f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19).then_some(*f as u64),
            Num::S(s) => s.trim().parse().ok(),
        }
    }

    fn text(&self) -> String {
        match self {
            Num::U(v) => v.to_string(),
            Num::F(f) => f.to_string(),
            Num::S(s) => format!("\"{}\"", crate::quote::escape(s)),
        }
    }
}

impl AnyValue {
    fn as_str(&self) -> Option<String> {
        if let Some(s) = &self.string {
            return Some(s.clone());
        }
        self.int.as_ref().and_then(Num::whole).map(|v| v.to_string())
    }

    fn as_count(&self) -> Option<u64> {
        if let Some(i) = &self.int {
            return i.whole();
        }
        if let Some(d) = self.double {
            return Num::F(d).whole();
        }
        self.string.as_ref().and_then(|s| s.trim().parse().ok())
    }
}

/// No value (an attribute without `value`).
const NO_VALUE: AnyValue = AnyValue {
    string: None,
    int: None,
    double: None,
};

fn attr<'a>(list: &'a [Obj<KeyValue>], key: &str) -> Option<&'a AnyValue> {
    list.iter()
        .find(|kv| kv.0.key == key)
        .map(|kv| kv.0.value.as_ref().map_or(&NO_VALUE, |v| &v.0))
}

/// Operations that are an LLM inference call.
const INFERENCE: [&str; 3] = ["chat", "text_completion", "generate_content"];

/// Reads OTLP/JSON lines into `b`.
pub(super) fn read(r: impl Read, b: &mut Builder, opts: &OtelOptions) -> Result<(), TraceError> {
    let mut calls = Calls::default();
    for_each_line(r, b, |text, line, b| {
        let ex: Obj<Export> = parse_json(b, line, text)?;
        for (ri, rs) in ex.0.resource_spans.iter().enumerate() {
            let rs = &rs.0;
            let res_attrs: &[Obj<KeyValue>] = rs.resource.as_ref().map_or(&[], |r| &r.0.attributes);
            for (si, ss) in rs.scope_spans.iter().enumerate() {
                for (k, sp) in ss.0.spans.iter().enumerate() {
                    let sp = &sp.0;
                    let at = format!("resourceSpans[{ri}].scopeSpans[{si}].spans[{k}]");
                    let op = attr(&sp.attributes, "gen_ai.operation.name").and_then(AnyValue::as_str);
                    let res = span(b, &mut calls, opts, line, &at, sp, res_attrs, op.as_deref());
                    if let Err(e) = res {
                        b.bad(e)?;
                    }
                }
            }
        }
        Ok(())
    })?;
    b.trace.calls = Some(Box::new(calls));
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn span(
    b: &mut Builder,
    calls: &mut Calls,
    opts: &OtelOptions,
    line: u64,
    at: &str,
    sp: &Span,
    res_attrs: &[Obj<KeyValue>],
    op: Option<&str>,
) -> Result<(), TraceError> {
    let time = |n: &Num, key: &str| {
        n.whole().ok_or_else(|| {
            b.err(
                line,
                Some(&format!("{at}.{key}")),
                format!("expected unix nanoseconds, got {}", n.text()),
            )
        })
    };
    let start = time(&sp.start, "startTimeUnixNano")?;
    let end = time(&sp.end, "endTimeUnixNano")?;
    if end < start {
        return Err(b.err(
            line,
            Some(&format!("{at}.endTimeUnixNano")),
            format!("the span ends ({end}) before it starts ({start})"),
        ));
    }
    match op {
        Some(o) if INFERENCE.contains(&o) => {}
        Some("execute_tool") => {
            b.charge(line, 8)?;
            calls.tool_ns.push(end - start);
            calls.other_records += 1;
            return Ok(());
        }
        _ => {
            calls.other_records += 1;
            return Ok(());
        }
    }
    let count = |key: &str| {
        let v = attr(&sp.attributes, key);
        v.and_then(AnyValue::as_count).ok_or_else(|| {
            b.err(
                line,
                Some(&format!("{at}.attributes.{key}")),
                match v {
                    None => "an inference span needs this attribute".to_string(),
                    Some(_) => "expected a whole number >= 0".to_string(),
                },
            )
        })
    };
    let input = count("gen_ai.usage.input_tokens")?;
    let output = count("gen_ai.usage.output_tokens")?;
    let session = b.session(&session_key(opts, sp, res_attrs));
    let model = attr(&sp.attributes, "gen_ai.request.model")
        .or_else(|| attr(&sp.attributes, "gen_ai.response.model"))
        .and_then(AnyValue::as_str);
    let timing = Timing {
        end_ns: end,
        ttft_ns: NONE,
        think_ns: NONE,
        model: model.as_deref(),
    };
    let r = RawRow {
        session,
        ..RawRow::new(line, start, input, output)
    };
    push_call(b, calls, r, timing)
}

/// The session a span belongs to: the first of the session attributes the span or its
/// resource has, else its trace id.
fn session_key(opts: &OtelOptions, sp: &Span, res_attrs: &[Obj<KeyValue>]) -> String {
    opts.session_attributes
        .iter()
        .find_map(|k| {
            attr(&sp.attributes, k)
                .or_else(|| attr(res_attrs, k))
                .and_then(AnyValue::as_str)
        })
        .unwrap_or_else(|| sp.trace_id.clone())
}

#[cfg(test)]
mod tests {
    use crate::trace::model::Format;
    use crate::trace::reader::read_from;

    fn span(op: &str, conv: &str, start: u64, end: u64, input: &str) -> String {
        format!(
            r#"{{"traceId":"t{conv}","spanId":"s","name":"{op} m","kind":3,"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{{"key":"gen_ai.operation.name","value":{{"stringValue":"{op}"}}}},{{"key":"gen_ai.request.model","value":{{"stringValue":"m"}}}},{{"key":"gen_ai.usage.input_tokens","value":{{"intValue":{input}}}}},{{"key":"gen_ai.usage.output_tokens","value":{{"intValue":"9"}}}},{{"key":"gen_ai.conversation.id","value":{{"stringValue":"{conv}"}}}}]}}"#
        )
    }

    fn export(spans: &[String]) -> String {
        format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"agent"}}}}]}},"scopeSpans":[{{"scope":{{"name":"x"}},"spans":[{}]}}]}}]}}"#,
            spans.join(",")
        )
    }

    #[test]
    fn reads_inference_spans_and_skips_others() {
        let text = format!(
            "{}\n{}\n",
            export(&[
                span("chat", "c1", 1_000, 5_000, "\"120\""),
                span("execute_tool", "c1", 5_000, 7_000, "0")
            ]),
            export(&[
                span("chat", "c1", 7_000, 9_000, "200"),
                span("embeddings", "c2", 1, 2, "3")
            ])
        );
        let t = read_from(text.as_bytes(), "o", Format::Otel, false).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!((t.rows[0].input, t.rows[1].input), (120, 200));
        assert_eq!(t.rows[1].line, 2);
        assert_eq!(t.session_names, vec!["c1".to_string()]);
        let c = t.calls.as_ref().unwrap();
        assert_eq!(c.end_ns, vec![5_000, 9_000]);
        assert_eq!(c.tool_ns, vec![2_000]);
        assert_eq!(c.other_records, 2);
    }

    #[test]
    fn session_attribute_order_and_trace_id_fallback() {
        let s = span("chat", "c1", 1, 2, "5").replace("gen_ai.conversation.id", "other");
        let t = read_from(export(&[s]).as_bytes(), "o", Format::Otel, false).unwrap();
        assert_eq!(t.session_names, vec!["tc1".to_string()]);
    }

    #[test]
    fn malformed_spans_name_line_and_path() {
        let text = format!(
            "{}\n{}\n",
            export(&[span("chat", "c", 1, 2, "5")]),
            export(&[span("chat", "c", 1, 2, "5"), span("chat", "c", 1, 2, "\"many\"")])
        );
        let e = read_from(text.as_bytes(), "o.json", Format::Otel, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "o.json:2: column `resourceSpans[0].scopeSpans[0].spans[1].attributes.gen_ai.usage.input_tokens`: expected a whole number >= 0"
        );
        let t = read_from(text.as_bytes(), "o.json", Format::Otel, true).unwrap();
        assert_eq!((t.rows.len(), t.skipped), (2, 1));
        let e = read_from(
            export(&[span("chat", "c", 9, 2, "5")]).as_bytes(),
            "o",
            Format::Otel,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("ends"), "{e}");
        let e = read_from(
            b"{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [{}]}]}]}\n".as_slice(),
            "o",
            Format::Otel,
            false,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("o:1: column `resourceSpans[0].scopeSpans[0].spans[0]"),
            "{e}"
        );
    }

    #[test]
    fn json_that_is_not_an_otlp_export_is_refused() {
        // `--format otel` on other JSON must not read as 0 spans and exit 0.
        let e = read_from(
            b"{\"timestamp\": 0, \"input_length\": 5}\n".as_slice(),
            "o",
            Format::Otel,
            false,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "o:1: malformed JSON: missing field `resourceSpans`");
        // Records written as arrays are not read positionally.
        let e = read_from(
            b"{\"resourceSpans\": [[null, []]]}\n".as_slice(),
            "o",
            Format::Otel,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("expected a JSON object"), "{e}");
    }
}
