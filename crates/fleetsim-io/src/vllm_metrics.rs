//! vLLM's Prometheus metrics, as its `/metrics` endpoint exports them: names, HELP texts,
//! types, label names and histogram buckets, in one place for everything in fleetsim that
//! writes or reads engine series (`sim run --openmetrics`, `sim alerts`, `sim observe`).
//!
//! Source: vLLM `vllm/v1/metrics/loggers.py`, `PrometheusStatLogger.__init__` and
//! `log_metrics_info`, at commit 005a810bc40faa25b8870fbc8559c3462581eee3 (the v1 engine;
//! `vllm:kv_cache_usage_perc` replaced the deprecated `vllm:gpu_cache_usage_perc` there).
//! Every per-engine series carries the labels `model_name` (the served model name) and
//! `engine` (the engine core's index, `"0"` without data parallelism): `labelnames =
//! ["model_name", "engine"]`. `vllm:cache_config_info` is an info gauge set to 1 whose labels
//! are the fields of vLLM's `CacheConfig` (`CacheConfig.metrics_info()`) plus `engine`; it
//! names no slot limit (`max_num_seqs` is a scheduler setting), so whoever needs capacity
//! in slots is told it per pool.
//!
//! A counter's family is named without `_total` (prometheus_client appends it to the
//! sample): the family `vllm:request_success` exports samples `vllm:request_success_total`.

/// A metric's type, as the exposition format's `# TYPE` line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A monotonic count (samples carry the `_total` suffix).
    Counter,
    /// Cumulative buckets with `_bucket{le=...}`, `_count` and `_sum` samples.
    Histogram,
}

impl Kind {
    /// The `# TYPE` word.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// Family name (`vllm:...`, without `_total` for counters).
    pub name: &'static str,
    /// HELP text, verbatim from vLLM.
    pub help: &'static str,
    /// Type.
    pub kind: Kind,
    /// Label names besides [`LABEL_MODEL_NAME`] and [`LABEL_ENGINE`].
    pub extra_labels: &'static [&'static str],
    /// Upper bounds of the histogram buckets (empty unless a histogram); `+Inf` implied.
    pub buckets: &'static [f64],
}

impl Metric {
    /// The name of the sample that carries a counter's value or a histogram's count.
    pub fn sample_name(&self) -> String {
        match self.kind {
            Kind::Gauge => self.name.to_string(),
            Kind::Counter => format!("{}_total", self.name),
            Kind::Histogram => format!("{}_count", self.name),
        }
    }
}

/// The served model's name (`vllm serve --served-model-name`).
pub const LABEL_MODEL_NAME: &str = "model_name";
/// The engine core's index.
pub const LABEL_ENGINE: &str = "engine";
/// `vllm:request_success`'s finish reason (`stop`, `length`, `abort`).
pub const LABEL_FINISHED_REASON: &str = "finished_reason";
/// The label Prometheus gives every scraped series for its target (`host:port`); fleetsim
/// calls a backend by it, as a router addresses a backend by its URL.
pub const LABEL_INSTANCE: &str = "instance";
/// The scrape job's label.
pub const LABEL_JOB: &str = "job";

/// `vllm:num_requests_running`: set from `SchedulerStats.num_running_reqs` each step.
pub const NUM_REQUESTS_RUNNING: Metric = Metric {
    name: "vllm:num_requests_running",
    help: "Number of requests in model execution batches.",
    kind: Kind::Gauge,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:num_requests_waiting`: `SchedulerStats.num_waiting_reqs`.
pub const NUM_REQUESTS_WAITING: Metric = Metric {
    name: "vllm:num_requests_waiting",
    help: "Number of requests waiting to be processed.",
    kind: Kind::Gauge,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:kv_cache_usage_perc`: a fraction (1 is full) despite the name.
pub const KV_CACHE_USAGE_PERC: Metric = Metric {
    name: "vllm:kv_cache_usage_perc",
    help: "KV-cache usage. 1 means 100 percent usage.",
    kind: Kind::Gauge,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:prefix_cache_queries`: prompt tokens looked up in the prefix cache.
pub const PREFIX_CACHE_QUERIES: Metric = Metric {
    name: "vllm:prefix_cache_queries",
    help: "Prefix cache queries, in terms of number of queried tokens.",
    kind: Kind::Counter,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:prefix_cache_hits`: prompt tokens found in the prefix cache.
pub const PREFIX_CACHE_HITS: Metric = Metric {
    name: "vllm:prefix_cache_hits",
    help: "Prefix cache hits, in terms of number of cached tokens.",
    kind: Kind::Counter,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:num_preemptions`.
pub const NUM_PREEMPTIONS: Metric = Metric {
    name: "vllm:num_preemptions",
    help: "Cumulative number of preemption from the engine.",
    kind: Kind::Counter,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:prompt_tokens`: prefill tokens processed.
pub const PROMPT_TOKENS: Metric = Metric {
    name: "vllm:prompt_tokens",
    help: "Number of prefill tokens processed.",
    kind: Kind::Counter,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:generation_tokens`: output tokens generated.
pub const GENERATION_TOKENS: Metric = Metric {
    name: "vllm:generation_tokens",
    help: "Number of generation tokens processed.",
    kind: Kind::Counter,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:request_success`: finished requests, by finish reason.
pub const REQUEST_SUCCESS: Metric = Metric {
    name: "vllm:request_success",
    help: "Count of successfully processed requests.",
    kind: Kind::Counter,
    extra_labels: &[LABEL_FINISHED_REASON],
    buckets: &[],
};

/// `request_latency_buckets` in `PrometheusStatLogger.__init__`, shared by the e2e, queue,
/// inference, prefill and decode histograms.
pub const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];

/// `vllm:e2e_request_latency_seconds`: from the request's arrival at the engine's front end
/// to its last token. Its `_sum` rises by every finished request's time on the engine, so
/// its rate is the time-averaged number of requests the engine held (Little's law).
pub const E2E_REQUEST_LATENCY: Metric = Metric {
    name: "vllm:e2e_request_latency_seconds",
    help: "Histogram of e2e request latency in seconds.",
    kind: Kind::Histogram,
    extra_labels: &[],
    buckets: REQUEST_LATENCY_BUCKETS,
};

/// `vllm:request_queue_time_seconds`: time in the WAITING phase.
pub const REQUEST_QUEUE_TIME: Metric = Metric {
    name: "vllm:request_queue_time_seconds",
    help: "Histogram of time spent in WAITING phase for request.",
    kind: Kind::Histogram,
    extra_labels: &[],
    buckets: REQUEST_LATENCY_BUCKETS,
};

/// `vllm:time_to_first_token_seconds`.
pub const TIME_TO_FIRST_TOKEN: Metric = Metric {
    name: "vllm:time_to_first_token_seconds",
    help: "Histogram of time to first token in seconds.",
    kind: Kind::Histogram,
    extra_labels: &[],
    buckets: &[
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
        160.0, 640.0, 2560.0,
    ],
};

/// `vllm:cache_config_info`: an info gauge (always 1). Its labels are `CacheConfig`'s fields
/// and `engine`, without `model_name`; [`CACHE_CONFIG_LABELS`] are those fleetsim writes.
pub const CACHE_CONFIG_INFO: Metric = Metric {
    name: "vllm:cache_config_info",
    help: "Information of the LLMEngine CacheConfig",
    kind: Kind::Gauge,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:gpu_cache_usage_perc`: the name `vllm:kv_cache_usage_perc` replaced (deprecated
/// in vLLM 0.9, still exported at the cited commit, and read by older routers). Its HELP
/// text is vLLM's two string literals joined as Python joins them, without a space.
pub const GPU_CACHE_USAGE_PERC: Metric = Metric {
    name: "vllm:gpu_cache_usage_perc",
    help: "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
    kind: Kind::Gauge,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:gpu_prefix_cache_queries`: the deprecated name of `vllm:prefix_cache_queries`.
pub const GPU_PREFIX_CACHE_QUERIES: Metric = Metric {
    name: "vllm:gpu_prefix_cache_queries",
    help: "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
    kind: Kind::Counter,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:gpu_prefix_cache_hits`: the deprecated name of `vllm:prefix_cache_hits`.
pub const GPU_PREFIX_CACHE_HITS: Metric = Metric {
    name: "vllm:gpu_prefix_cache_hits",
    help: "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
    kind: Kind::Counter,
    extra_labels: &[],
    buckets: &[],
};

/// `vllm:time_per_output_token_seconds`: one observation per output token after the
/// first, the gap since the token before it (`IterationStats.time_per_output_tokens_iter`).
pub const TIME_PER_OUTPUT_TOKEN: Metric = Metric {
    name: "vllm:time_per_output_token_seconds",
    help: "Histogram of time per output token in seconds.",
    kind: Kind::Histogram,
    extra_labels: &[],
    buckets: &[
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    ],
};

/// `FinishReason` in `vllm/v1/engine/__init__.py`, as `str(reason)` writes it: every
/// `vllm:request_success` series exists from the start, one per reason.
pub const FINISH_REASONS: &[&str] = &["stop", "length", "abort"];

/// A number as Python's `prometheus_client` writes a sample value or a bucket bound
/// (`utils.floatToGoString`): Python's shortest `repr`, switched to Go's exponent form
/// above six integer digits (`1234567.0` is `1.234567e+06`).
pub fn go_float(x: f64) -> String {
    if x == f64::INFINITY {
        return "+Inf".into();
    }
    if x == f64::NEG_INFINITY {
        return "-Inf".into();
    }
    if x.is_nan() {
        return "NaN".into();
    }
    // Rust's `{:?}` is the shortest round-trip form, as Python's repr, and switches to an
    // exponent at the same magnitudes (below 1e-4, from 1e16); Python writes the exponent
    // with a sign and at least two digits.
    let mut s = format!("{x:?}");
    if let Some(e) = s.find('e') {
        let (m, exp) = s.split_at(e);
        let exp = &exp[1..];
        let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
        s = format!("{m}e{sign}{digits:0>2}");
        return s;
    }
    let dot = s.find('.').unwrap_or(s.len());
    if x > 0.0 && dot > 6 {
        let frac = s.get(dot + 1..).unwrap_or("");
        let mantissa = format!("{}.{}{}", &s[..1], &s[1..dot], frac);
        let mantissa = mantissa.trim_end_matches(['0', '.']);
        return format!("{mantissa}e+0{}", dot - 1);
    }
    s
}

/// Appends the `# HELP` and `# TYPE` lines of metric `m` exported under the family name
/// `name` (`m.name`, or the same under another prefix), as `prometheus_client`'s
/// `generate_latest` writes them (a counter's family is named with `_total` there).
pub fn write_header(out: &mut String, name: &str, m: &Metric) {
    use std::fmt::Write;
    let name = match m.kind {
        Kind::Counter => format!("{name}_total"),
        _ => name.to_string(),
    };
    let help = m.help.replace('\\', r"\\").replace('\n', r"\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {}", m.kind.as_str());
}

/// Appends one sample line: `name{label="value",...} value`, label values escaped as the
/// exposition format requires.
pub fn write_sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(k);
            out.push_str("=\"");
            for c in v.chars() {
                match c {
                    '\\' => out.push_str(r"\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str(r"\n"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&go_float(value));
    out.push('\n');
}

/// The `CacheConfig` fields fleetsim models, as `vllm:cache_config_info` labels.
pub const CACHE_CONFIG_LABELS: &[&str] = &["block_size", "enable_prefix_caching", "num_gpu_blocks"];

/// Every family fleetsim writes, in the order it writes them.
pub const EXPORTED: &[Metric] = &[
    CACHE_CONFIG_INFO,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    KV_CACHE_USAGE_PERC,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    NUM_PREEMPTIONS,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    REQUEST_SUCCESS,
    E2E_REQUEST_LATENCY,
    REQUEST_QUEUE_TIME,
    TIME_TO_FIRST_TOKEN,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_vllm_names_with_valid_characters() {
        for m in EXPORTED {
            assert!(m.name.starts_with("vllm:"), "{}", m.name);
            assert!(
                m.name[5..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                m.name
            );
            assert!(!m.name.ends_with("_total"), "{}: a family name has no _total", m.name);
            assert_eq!(m.kind == Kind::Histogram, !m.buckets.is_empty(), "{}", m.name);
            assert!(m.buckets.windows(2).all(|w| w[0] < w[1]), "{}: buckets ascend", m.name);
        }
        assert_eq!(REQUEST_SUCCESS.sample_name(), "vllm:request_success_total");
        assert_eq!(
            E2E_REQUEST_LATENCY.sample_name(),
            "vllm:e2e_request_latency_seconds_count"
        );
        assert_eq!(NUM_REQUESTS_RUNNING.sample_name(), "vllm:num_requests_running");
    }

    #[test]
    fn numbers_are_written_as_prometheus_client_writes_them() {
        for (x, want) in [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (0.001, "0.001"),
            (2560.0, "2560.0"),
            (0.00001, "1e-05"),
            (123456.0, "123456.0"),
            (1234567.0, "1.234567e+06"),
            (10000000.0, "1e+07"),
            (1.5e16, "1.5e+16"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(go_float(x), want, "{x}");
        }
        let mut s = String::new();
        write_header(&mut s, NUM_PREEMPTIONS.name, &NUM_PREEMPTIONS);
        write_sample(
            &mut s,
            "vllm:num_preemptions_total",
            &[("model_name", "a\"b"), ("engine", "0")],
            3.0,
        );
        assert_eq!(
            s,
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n\
             # TYPE vllm:num_preemptions_total counter\n\
             vllm:num_preemptions_total{model_name=\"a\\\"b\",engine=\"0\"} 3.0\n"
        );
    }
}
