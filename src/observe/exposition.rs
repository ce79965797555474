//! `sim observe --file` on exposition text: a file of timestamped samples in the
//! OpenMetrics text format (what `sim run --openmetrics` and `promtool tsdb
//! dump-openmetrics` write; timestamps in seconds, the file ends with `# EOF`) or in the
//! Prometheus text format (what `promtool tsdb dump` writes; timestamps in milliseconds).
//!
//! Only the families `sim observe` reads are kept; every sample of theirs needs an
//! `instance` label and a timestamp. A line that cannot be read is one error naming the file
//! and the line.

use std::collections::BTreeMap;

use anyhow::{Result, bail};

use super::{LabeledSeries, Observed, bad_time, bad_value, collect, wanted};

/// Whether `text` is exposition text rather than a query_range answer (JSON).
pub fn is_exposition(text: &str) -> bool {
    !text.trim_start().starts_with('{')
}

/// Reads exposition text (module doc) into observed series.
pub fn parse(source: &str, text: &str) -> Result<Observed> {
    let names = wanted();
    let open_metrics = text.lines().any(|l| l.trim_end() == "# EOF");
    // Seconds per timestamp unit: OpenMetrics counts seconds, the Prometheus format
    // milliseconds.
    let unit_s = if open_metrics { 1.0 } else { 1e-3 };
    let mut series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{source}:{}", i + 1);
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let Some(ix) = names.iter().position(|n| n == name) else {
            continue;
        };
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(inner) => labels(inner).map_err(|e| anyhow::anyhow!("{}: {e}", at()))?,
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let mut fields = rest.split_ascii_whitespace();
        let value = fields
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| anyhow::anyhow!("{}: {name}: expected a value after the labels", at()))?;
        let Some(ts) = fields.next() else {
            bail!(
                "{}: {name}: a sample without a timestamp (--file reads timestamped samples, as `sim run --openmetrics` \
                 and `promtool tsdb dump` write them)",
                at()
            );
        };
        let t = ts
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite())
            .ok_or_else(|| anyhow::anyhow!("{}: {name}: timestamp {ts:?} is not a number", at()))?;
        if fields.next().is_some_and(|f| !f.starts_with('#')) {
            bail!("{}: {name}: more than a value and a timestamp", at());
        }
        if let Some(e) = bad_value(ix, value) {
            bail!("{}: {name}: {e}", at());
        }
        if let Some(e) = bad_time(t * unit_s) {
            bail!("{}: {name}: {e}", at());
        }
        let mut key = labels;
        key.insert("__name__".into(), name.to_string());
        series.entry(key).or_default().push((t * unit_s, value));
    }
    let unit = if open_metrics {
        "seconds (OpenMetrics)"
    } else {
        "milliseconds (the Prometheus text format)"
    };
    collect(
        format!("{source} (timestamps in {unit})"),
        series.into_iter().collect::<Vec<LabeledSeries>>(),
    )
}

/// The labels of a sample, from just after its `{`: the pairs, and the line after the `}`.
fn labels(inner: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut out = BTreeMap::new();
    let mut rest = inner.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((out, after));
        }
        let eq = rest.find('=').ok_or("a label without `=`")?;
        let key = rest[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("label name {key:?} is not a label name"));
        }
        let after_eq = rest[eq + 1..].trim_start();
        let body = after_eq
            .strip_prefix('"')
            .ok_or_else(|| format!("label {key}: value not quoted"))?;
        let (value, used) = unquote(body).ok_or_else(|| format!("label {key}: value not closed"))?;
        out.insert(key.to_string(), value);
        rest = body[used..].trim_start();
        rest = rest.strip_prefix(',').map_or(rest, str::trim_start);
    }
}

/// A quoted label value from just after its opening quote (escapes `\\`, `\"`, `\n`): the
/// value and the bytes used, the closing quote included.
fn unquote(s: &str) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const OM: &str = "# TYPE vllm:num_requests_running gauge\n\
        vllm:num_requests_running{instance=\"a:1\",engine=\"0\"} 2 100\n\
        vllm:num_requests_running{instance=\"a:1\",engine=\"0\"} 1 101.5\n\
        vllm:num_requests_waiting{instance=\"a:1\",engine=\"0\"} 0 100\n\
        vllm:num_requests_waiting{instance=\"a:1\",engine=\"0\"} 3 101.5\n\
        vllm:other{instance=\"a:1\"} 1 100\n# EOF\n";

    #[test]
    fn reads_open_metrics_and_the_prometheus_format() {
        let o = parse("f.om", OM).unwrap();
        assert_eq!(o.times, vec![100.0, 101.5]);
        assert_eq!(o.backends[0].instance, "a:1");
        assert_eq!(o.backends[0].waiting, vec![Some(0.0), Some(3.0)]);
        assert!(o.source.contains("seconds (OpenMetrics)"));
        let prom = "vllm:num_requests_running{instance=\"a:1\"} 2 100000\n\
                    vllm:num_requests_waiting{instance=\"a:1\"} 1 100000\n";
        assert_eq!(parse("f.prom", prom).unwrap().times, vec![100.0]);
        assert!(is_exposition(OM) && !is_exposition(" {\"status\":\"success\"}"));
    }

    #[test]
    fn unreadable_lines_are_named() {
        let e = |t: &str| format!("{:#}", parse("f.om", t).unwrap_err());
        assert!(
            e("vllm:num_requests_running{instance=\"a\"} 2\n# EOF\n")
                .contains("f.om:1: vllm:num_requests_running: a sample without a timestamp")
        );
        assert!(
            e("x 1\nvllm:num_requests_running{instance=\"a} 2 1\n")
                .contains("f.om:2: label instance: value not closed")
        );
        assert!(e("vllm:num_requests_running{instance=\"a\"} two 1\n").contains("f.om:1:"));
        assert!(e("vllm:num_requests_running{instance=\"a\"} 2 soon\n").contains("timestamp \"soon\""));
        assert!(e("vllm:num_requests_running{in-stance=\"a\"} 2 1\n").contains("not a label name"));
        let neg = e(
            "vllm:num_requests_waiting{instance=\"a\"} 1 1\nvllm:num_requests_waiting{instance=\"a\"} -1e300 2\n# EOF\n",
        );
        assert!(
            neg.contains("f.om:2: vllm:num_requests_waiting: -1e300: expected a count from 0 to"),
            "{neg}"
        );
        let ns = e("vllm:num_requests_running{instance=\"a\"} 1 1767607200000000000\n# EOF\n");
        assert!(
            ns.contains("f.om:1: vllm:num_requests_running: timestamp") && ns.contains("nanoseconds?"),
            "{ns}"
        );
    }
}
