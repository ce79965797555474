//! The PromQL an autoscaler's trigger runs, as a strict subset: one instant vector selector
//! over one of vLLM's gauges, with optional label matchers, optionally under one
//! aggregation (`sum`, `avg`, `max`, `min`, `count`). Anything else is refused with a
//! message naming what is not supported, never read as something else.
//!
//! Evaluation follows Prometheus' instant query: per series the latest sample at or before
//! the query time within the lookback (5 min by default), a series of a pod that went
//! away gone at once (its staleness marker). A missing label reads as the empty string,
//! so `x{model="m"}` over series without `model` matches nothing.

/// A vLLM gauge the simulated engines export (`vllm/v1/metrics/loggers.py` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gauge {
    /// `vllm:num_requests_waiting`.
    Waiting,
    /// `vllm:num_requests_running`.
    Running,
    /// `vllm:kv_cache_usage_perc` (0 to 1).
    KvUsage,
}

impl Gauge {
    /// Every gauge, with its series name.
    pub const ALL: [(Gauge, &'static str); 3] = [
        (Gauge::Waiting, "vllm:num_requests_waiting"),
        (Gauge::Running, "vllm:num_requests_running"),
        (Gauge::KvUsage, "vllm:kv_cache_usage_perc"),
    ];

    /// The series name.
    pub fn name(self) -> &'static str {
        Gauge::ALL.iter().find(|(g, _)| *g == self).expect("listed").1
    }
}

/// An aggregation over the selected series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agg {
    /// `sum`.
    Sum,
    /// `avg`.
    Avg,
    /// `max`.
    Max,
    /// `min`.
    Min,
    /// `count`.
    Count,
}

const AGGS: [(Agg, &str); 5] = [
    (Agg::Sum, "sum"),
    (Agg::Avg, "avg"),
    (Agg::Max, "max"),
    (Agg::Min, "min"),
    (Agg::Count, "count"),
];

/// A label matcher: `name="value"` or `name!="value"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher {
    /// Label name.
    pub label: String,
    /// The value compared with.
    pub value: String,
    /// `!=` instead of `=`.
    pub negated: bool,
}

/// A parsed query.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The aggregation, if any (a bare selector returns one element per series).
    pub agg: Option<Agg>,
    /// The gauge selected.
    pub gauge: Gauge,
    /// Label matchers, in the order written.
    pub matchers: Vec<Matcher>,
    /// The text as written (for reports).
    pub text: String,
}

/// One series' labels and its value at the query time.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesValue<'a> {
    /// `(name, value)` pairs.
    pub labels: &'a [(String, String)],
    /// The sample.
    pub value: f64,
}

/// What an instant query returned.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryResult {
    /// An empty vector.
    Empty,
    /// One element.
    One(f64),
    /// This many elements (a bare selector over several pods).
    Many(usize),
}

impl Query {
    /// Parses `text`, or says what it does not support.
    pub fn parse(text: &str) -> Result<Query, String> {
        let t = text.trim();
        let (agg, inner) = match t.find('(') {
            Some(open) => {
                let name = t[..open].trim();
                let agg = AGGS.iter().find(|(_, n)| *n == name).map(|(a, _)| *a).ok_or_else(|| {
                    format!("`{name}(...)` is not supported; use sum, avg, max, min or count over one vLLM gauge")
                })?;
                if !t.ends_with(')') {
                    return Err(format!(
                        "`{t}`: expected `{name}(<selector>)` with nothing after the closing parenthesis (by/without clauses are not supported)"
                    ));
                }
                (Some(agg), t[open + 1..t.len() - 1].trim())
            }
            None => (None, t),
        };
        let (name, matchers) = match inner.find('{') {
            Some(open) => {
                if !inner.ends_with('}') {
                    return Err(format!("`{inner}`: expected `metric{{label=\"value\", ...}}`"));
                }
                (inner[..open].trim(), matchers(&inner[open + 1..inner.len() - 1])?)
            }
            None => (inner, Vec::new()),
        };
        let gauge = Gauge::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(g, _)| *g)
            .ok_or_else(|| {
                let names: Vec<&str> = Gauge::ALL.iter().map(|(_, n)| *n).collect();
                format!(
                    "`{name}` is not a gauge the simulated engines export (one of {}); functions such as rate() are not supported",
                    names.join(", ")
                )
            })?;
        Ok(Query {
            agg,
            gauge,
            matchers,
            text: t.to_string(),
        })
    }

    /// Whether a series with `labels` is selected.
    pub fn selects(&self, labels: &[(String, String)]) -> bool {
        self.matchers.iter().all(|m| {
            let v = labels
                .iter()
                .find(|(k, _)| *k == m.label)
                .map_or("", |(_, v)| v.as_str());
            (v == m.value) != m.negated
        })
    }

    /// Evaluates the query over the series' current values (those of this gauge).
    pub fn eval(&self, series: &[SeriesValue<'_>]) -> QueryResult {
        let vals: Vec<f64> = series
            .iter()
            .filter(|s| self.selects(s.labels))
            .map(|s| s.value)
            .collect();
        let Some(agg) = self.agg else {
            return match vals.len() {
                0 => QueryResult::Empty,
                1 => QueryResult::One(vals[0]),
                n => QueryResult::Many(n),
            };
        };
        if vals.is_empty() {
            // Aggregating nothing gives an empty vector in Prometheus (count too).
            return QueryResult::Empty;
        }
        QueryResult::One(match agg {
            Agg::Sum => vals.iter().sum(),
            Agg::Avg => vals.iter().sum::<f64>() / vals.len() as f64,
            Agg::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Agg::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
            Agg::Count => vals.len() as f64,
        })
    }
}

/// `label="value", label!="value"` (values in double quotes, `\"` and `\\` escapes).
fn matchers(text: &str) -> Result<Vec<Matcher>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let op_at = rest
            .find(['=', '!', '~'])
            .ok_or_else(|| format!("`{rest}`: expected `label=\"value\"`"))?;
        let label = rest[..op_at].trim();
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("`{label}` is not a label name"));
        }
        let after = &rest[op_at..];
        let (negated, after) = if let Some(a) = after.strip_prefix("!=") {
            if a.starts_with('~') {
                return Err("regex matchers (`!~`) are not supported; use `=` or `!=`".into());
            }
            (true, a)
        } else if after.starts_with("=~") {
            return Err("regex matchers (`=~`) are not supported; use `=` or `!=`".into());
        } else if let Some(a) = after.strip_prefix('=') {
            (false, a)
        } else {
            return Err(format!("`{after}`: expected `=` or `!=` after `{label}`"));
        };
        let after = after.trim_start();
        let body = after
            .strip_prefix('"')
            .ok_or_else(|| format!("the value of `{label}` must be in double quotes"))?;
        let (value, used) = quoted(body).ok_or_else(|| format!("the value of `{label}` has no closing quote"))?;
        out.push(Matcher {
            label: label.to_string(),
            value,
            negated,
        });
        rest = body[used..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
        } else if !rest.is_empty() {
            return Err(format!("`{rest}`: expected `,` between matchers"));
        }
    }
    Ok(out)
}

/// The string up to the closing quote of `s` (after its opening one), and the bytes used.
fn quoted(s: &str) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => out.push(chars.next()?.1),
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pod: &str) -> Vec<(String, String)> {
        vec![
            ("model_name".into(), "llama3".into()),
            ("engine".into(), "0".into()),
            ("pod".into(), pod.into()),
        ]
    }

    #[test]
    fn parses_the_recipes_queries() {
        let q = Query::parse("sum(vllm:num_requests_waiting)").unwrap();
        assert_eq!((q.agg, q.gauge, q.matchers.len()), (Some(Agg::Sum), Gauge::Waiting, 0));
        let q = Query::parse("vllm:num_requests_waiting").unwrap();
        assert_eq!(q.agg, None);
        let q = Query::parse(r#"vllm:num_requests_waiting{model="llama3"}"#).unwrap();
        assert_eq!(q.matchers[0].label, "model");
        let q = Query::parse(r#" max( vllm:kv_cache_usage_perc{pod!="a", engine="0"} ) "#).unwrap();
        assert_eq!((q.agg, q.gauge), (Some(Agg::Max), Gauge::KvUsage));
        assert!(q.matchers[0].negated && !q.matchers[1].negated);
    }

    #[test]
    fn refuses_what_it_does_not_model_naming_it() {
        for (q, says) in [
            ("sum(rate(vllm:num_incoming_requests_total[1m]) > bool 0)", "rate"),
            ("sum by(namespace) (vllm:num_requests_waiting)", "by"),
            ("quantile(vllm:num_requests_waiting)", "quantile"),
            ("vllm:num_requests_waiting{pod=~\"a.*\"}", "regex"),
            ("vllm:num_requests_waiting{pod=a}", "double quotes"),
            ("vllm:gpu_cache_usage_perc", "not a gauge"),
            ("vllm:num_requests_waiting{pod=\"a\" engine=\"0\"}", "expected `,`"),
        ] {
            let e = Query::parse(q).unwrap_err();
            assert!(e.contains(says), "{q}: {e}");
        }
    }

    #[test]
    fn evaluates_like_an_instant_query() {
        let (a, b) = (labels("a"), labels("b"));
        let s = [
            SeriesValue { labels: &a, value: 3.0 },
            SeriesValue { labels: &b, value: 5.0 },
        ];
        let q = |t: &str| Query::parse(t).unwrap().eval(&s);
        assert_eq!(q("sum(vllm:num_requests_waiting)"), QueryResult::One(8.0));
        assert_eq!(q("avg(vllm:num_requests_waiting)"), QueryResult::One(4.0));
        assert_eq!(q("max(vllm:num_requests_waiting)"), QueryResult::One(5.0));
        assert_eq!(q("count(vllm:num_requests_waiting)"), QueryResult::One(2.0));
        assert_eq!(q("vllm:num_requests_waiting"), QueryResult::Many(2));
        assert_eq!(q(r#"vllm:num_requests_waiting{pod="b"}"#), QueryResult::One(5.0));
        assert_eq!(q(r#"sum(vllm:num_requests_waiting{pod!="b"})"#), QueryResult::One(3.0));
        // production-stack's chart default selects on a label vLLM does not export.
        assert_eq!(q(r#"vllm:num_requests_waiting{model="llama3"}"#), QueryResult::Empty);
        assert_eq!(q(r#"sum(vllm:num_requests_waiting{model=""})"#), QueryResult::One(8.0));
    }
}
