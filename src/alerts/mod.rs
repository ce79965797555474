//! Prometheus recording and alerting rules that detect, from vLLM's `/metrics` series alone,
//! the failures fleetsim models (`sim alerts`; docs/alerts-and-observe.md explains each):
//!
//! * [`SPLIT`]: a backend has a free slot while another queues, for longer than a stale
//!   router view would explain (the split of burst8: the definition of idle_while_queued);
//! * [`SKEW`]: one backend of a pool of equal capacity finishes far more than its share of
//!   the pool's requests;
//! * [`ZERO`]: a backend's running and waiting gauges read zero for a whole window while its
//!   own request counters show it serving (an exporter the router misreads);
//! * [`STALE`]: a backend's series stopped arriving.
//!
//! Capacity in slots is not among vLLM's series (`vllm:cache_config_info` lists the KV
//! cache, not `max_num_seqs`): each pool's slot count is given (from a scenario's backends,
//! or `--pool`), and `vllm:cache_config_info` enumerates the pool's instances.
//!
//! The rules are built as data and written with a YAML library, never by pasting text: a
//! pool name or selector lands in a YAML string whatever it holds.

pub mod proof;

use anyhow::{Result, bail};
use serde::Serialize;

use crate::time::SimDuration;
use crate::vllm_metrics as vm;

/// The split alert's name.
pub const SPLIT: &str = "FleetsimIdleWhileQueued";
/// The request-share skew alert's name.
pub const SKEW: &str = "FleetsimRequestShareSkew";
/// The all-zero engine stats alert's name.
pub const ZERO: &str = "FleetsimEngineStatsAllZero";
/// The stale scrape alert's name.
pub const STALE: &str = "FleetsimScrapeStale";

/// Backends of one capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Its name (the `pool` label).
    pub name: String,
    /// Slots per backend (`vllm serve --max-num-seqs`).
    pub slots: u32,
    /// Its backends' `instance` labels; empty: every instance the selector matches.
    pub instances: Vec<String>,
}

/// What the rules are built from.
#[derive(Clone, Debug)]
pub struct AlertConfig {
    /// PromQL label matchers every vLLM series is selected with (`job="vllm"`), or empty.
    pub selector: String,
    /// Pools.
    pub pools: Vec<Pool>,
    /// Prometheus's scrape interval for the engines: the rules' evaluation interval.
    pub scrape_interval: SimDuration,
    /// How long the split must last before [`SPLIT`] fires.
    pub split_for: SimDuration,
    /// [`ZERO`]'s window.
    pub zero_window: SimDuration,
    /// Mean requests in flight over [`AlertConfig::zero_window`] (Little's law on the
    /// latency histogram's sum) above which a backend must have been seen busy.
    pub zero_min_inflight: f64,
    /// [`SKEW`]'s window for counting requests.
    pub skew_window: SimDuration,
    /// How long the skew must last.
    pub skew_for: SimDuration,
    /// A backend is skewed when its share exceeds this many times a fair share (1/n).
    pub skew_factor: f64,
    /// Fewest requests a pool must finish in the window before shares mean anything, per
    /// backend.
    pub skew_min_requests_per_backend: u32,
    /// [`STALE`]'s hold: scrapes missed in a row before it fires, times the interval.
    pub stale_for: SimDuration,
}

/// Checks PromQL label matchers as a selector holds them: `label OP "value"`, comma
/// separated (a trailing comma allowed), OP one of `=`, `!=`, `=~`, `!~`, the value a
/// double-, single- or back-quoted string; empty means no matcher. Says what is wrong.
pub fn check_selector(sel: &str) -> std::result::Result<(), String> {
    let mut rest = sel.trim();
    while !rest.is_empty() {
        let name_len = rest
            .char_indices()
            .find(|&(i, c)| !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())))
            .map_or(rest.len(), |(i, _)| i);
        if name_len == 0 {
            return Err(format!("expected a label name at `{rest}`"));
        }
        let after = rest[name_len..].trim_start();
        let op = ["!=", "=~", "!~", "="]
            .into_iter()
            .find(|o| after.starts_with(o))
            .ok_or_else(|| format!("expected =, !=, =~ or !~ after `{}`", &rest[..name_len]))?;
        let value = after[op.len()..].trim_start();
        let q = value
            .chars()
            .next()
            .filter(|c| matches!(c, '"' | '\'' | '`'))
            .ok_or_else(|| format!("expected a quoted value after `{}{op}`", &rest[..name_len]))?;
        let mut end = None;
        let mut escaped = false;
        for (i, c) in value.char_indices().skip(1) {
            match c {
                _ if escaped => escaped = false,
                '\\' if q != '`' => escaped = true,
                c if c == q => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let end = end.ok_or_else(|| format!("unterminated value after `{}{op}`", &rest[..name_len]))?;
        rest = value[end + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
        } else if !rest.is_empty() {
            return Err(format!("expected `,` before `{rest}`"));
        }
    }
    Ok(())
}

impl AlertConfig {
    /// Defaults for a scrape interval and a router engine-stats interval (when known).
    ///
    /// The split must outlast what a stale view explains: a router refreshes its view every
    /// engine-stats interval, and a pick made on an old view corrects itself within a few
    /// refreshes; six refreshes, and at least a minute, is past that.
    pub fn new(scrape: SimDuration, router_stats_interval: Option<SimDuration>, pools: Vec<Pool>) -> AlertConfig {
        let s = scrape.0;
        let min = 60_000_000_000u64;
        let split = router_stats_interval.map_or(min, |i| (6 * i.0).max(min));
        AlertConfig {
            selector: String::new(),
            pools,
            scrape_interval: scrape,
            split_for: SimDuration(split),
            zero_window: SimDuration((8 * s).max(2 * min)),
            zero_min_inflight: 0.5,
            skew_window: SimDuration((20 * s).max(5 * min)),
            skew_for: SimDuration((20 * s).max(5 * min)),
            skew_factor: 2.0,
            skew_min_requests_per_backend: 4,
            stale_for: SimDuration(3 * s),
        }
    }

    /// Refuses what would not make valid PromQL or a meaningful split: a selector must be
    /// bare matchers ([`check_selector`]); pools need distinct names, and no instance may
    /// be in two pools (a pool without instances holds every one, so it must be alone).
    pub fn validate(&self) -> Result<()> {
        if self.selector.contains(['{', '}', '\n']) {
            bail!("--selector: give label matchers without braces, e.g. 'job=\"vllm\"'");
        }
        check_selector(&self.selector).map_err(|e| anyhow::anyhow!("--selector {:?}: {e}", self.selector))?;
        if self.pools.is_empty() {
            bail!("no pool: give --pool NAME=SLOTS (or a scenario)");
        }
        for (i, p) in self.pools.iter().enumerate() {
            if self.pools[..i].iter().any(|q| q.name == p.name) {
                bail!("--pool {}: a second pool of that name", p.name);
            }
        }
        let mut owner: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
        for p in &self.pools {
            if p.slots == 0 {
                bail!("--pool {}: slots must be at least 1", p.name);
            }
            if p.name.contains('`') || p.instances.iter().any(|i| i.contains('`')) {
                bail!("--pool {}: names and instances cannot hold a backtick", p.name);
            }
            if p.instances.is_empty() && self.pools.len() > 1 {
                bail!(
                    "--pool {}: a pool without instances holds every instance, so it overlaps the other pools; give each pool its instances",
                    p.name
                );
            }
            for inst in &p.instances {
                if let Some(other) = owner.insert(inst, &p.name) {
                    bail!("--pool {}: instance {inst} is already in pool {other}", p.name);
                }
            }
        }
        Ok(())
    }

    /// `name{selector, extra}`.
    fn sel(&self, name: &str, extra: &str) -> String {
        let parts: Vec<&str> = [self.selector.as_str(), extra]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if parts.is_empty() {
            name.to_string()
        } else {
            format!("{name}{{{}}}", parts.join(","))
        }
    }
}

/// A duration as PromQL writes it (`90s`, `1500ms`).
pub fn promql_duration(d: SimDuration) -> String {
    let ms = d.0 / 1_000_000;
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A regular expression matching exactly these strings.
fn exact_regex(items: &[String]) -> String {
    let esc: Vec<String> = items
        .iter()
        .map(|s| {
            s.chars()
                .flat_map(|c| {
                    let meta = "\\.+*?()|[]{}^$".contains(c);
                    meta.then_some('\\').into_iter().chain([c])
                })
                .collect()
        })
        .collect();
    esc.join("|")
}

/// One rule in Prometheus's rule file format.
#[derive(Serialize, Debug, Clone)]
pub struct Rule {
    /// Recording rule's output name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    /// Alert name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alert: Option<String>,
    /// PromQL.
    pub expr: String,
    /// Hold.
    #[serde(rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<String>,
    /// Labels added.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "as_map")]
    pub labels: Vec<(String, String)>,
    /// Annotations.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "as_map")]
    pub annotations: Vec<(String, String)>,
}

fn as_map<S: serde::Serializer>(v: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(v.len()))?;
    for (k, x) in v {
        m.serialize_entry(k, x)?;
    }
    m.end()
}

/// A rule group.
#[derive(Serialize, Debug, Clone)]
pub struct Group {
    /// Name.
    pub name: String,
    /// Evaluation interval.
    pub interval: String,
    /// Rules, evaluated in order (later ones read earlier ones' output at the same instant).
    pub rules: Vec<Rule>,
}

/// A rule file.
#[derive(Serialize, Debug, Clone)]
pub struct RuleFile {
    /// Groups.
    pub groups: Vec<Group>,
}

fn record(name: &str, expr: String) -> Rule {
    Rule {
        record: Some(name.into()),
        alert: None,
        expr,
        for_: None,
        labels: vec![],
        annotations: vec![],
    }
}

fn alert(name: &str, expr: String, hold: Option<SimDuration>, summary: &str, description: String) -> Rule {
    Rule {
        record: None,
        alert: Some(name.into()),
        expr,
        for_: hold.filter(|d| d.0 > 0).map(promql_duration),
        labels: vec![("severity".into(), "warning".into())],
        annotations: vec![("summary".into(), summary.into()), ("description".into(), description)],
    }
}

/// The annotations' summary of each alert (`{{ $labels.instance }}` expanded by Prometheus).
pub fn summary_of(alert: &str) -> &'static str {
    match alert {
        SPLIT => "A backend has a free slot while another backend queues",
        SKEW => "{{ $labels.instance }} takes far more than its share of its pool's requests",
        ZERO => "{{ $labels.instance }} reports zero running and waiting requests while it serves",
        _ => "{{ $labels.instance }} stopped sending its vLLM series",
    }
}

/// The rules, in one group evaluated at the scrape interval.
pub fn rules(c: &AlertConfig) -> RuleFile {
    let mut r = recording_rules(c);
    r.extend(alerts(c));
    RuleFile {
        groups: vec![Group {
            name: "fleetsim".into(),
            interval: promql_duration(c.scrape_interval),
            rules: r,
        }],
    }
}

/// The recording rules: per backend its running, waiting, slots and free slots, the
/// fleet's free, waiting and stranded slots, and each backend's share of its pool's
/// requests.
fn recording_rules(c: &AlertConfig) -> Vec<Rule> {
    let running = c.sel(vm::NUM_REQUESTS_RUNNING.name, "");
    let waiting = c.sel(vm::NUM_REQUESTS_WAITING.name, "");
    let success = c.sel(&vm::REQUEST_SUCCESS.sample_name(), "");
    let sw = promql_duration(c.skew_window);
    let mut r = vec![
        // Per backend (instance): engines of one server (data parallel) added up, as a
        // router sees one server.
        record("fleetsim:backend_running", format!("sum by (instance) ({running})")),
        record("fleetsim:backend_waiting", format!("sum by (instance) ({waiting})")),
    ];
    for p in &c.pools {
        let inst = if p.instances.is_empty() {
            String::new()
        } else {
            format!("instance=~`{}`", exact_regex(&p.instances))
        };
        let info = c.sel(vm::CACHE_CONFIG_INFO.name, &inst);
        // One rule per pool, one output name: the pool's instances, valued at its slots.
        r.push(record(
            "fleetsim:backend_slots",
            format!(
                "label_replace(max by (instance) ({info}), \"pool\", `{}`, \"\", \"\") * 0 + {}",
                p.name, p.slots
            ),
        ));
    }
    r.extend([
        // Free slots: below the slot limit with nothing waiting (a backend with a queue and
        // spare slots is blocked on KV or the token budget: its slots are not free).
        record(
            "fleetsim:backend_free_slots",
            "clamp_min(fleetsim:backend_slots - on (instance) group_left fleetsim:backend_running, 0) \
             * on (instance) group_left () (fleetsim:backend_waiting == bool 0)"
                .into(),
        ),
        record("fleetsim:fleet_free_slots", "sum(fleetsim:backend_free_slots)".into()),
        record("fleetsim:fleet_waiting", "sum(fleetsim:backend_waiting)".into()),
        // min(total waiting, total free): requests that spare capacity elsewhere could run;
        // its integral is stranded_slot_s.
        record(
            "fleetsim:fleet_stranded_slots",
            "(fleetsim:fleet_waiting <= fleetsim:fleet_free_slots) or fleetsim:fleet_free_slots".into(),
        ),
        // Requests finished in the skew window, with the backend's pool.
        record(
            "fleetsim:backend_requests_window",
            format!(
                "sum by (instance) ({success} - {success} offset {sw}) \
                 * on (instance) group_left (pool) (fleetsim:backend_slots * 0 + 1)"
            ),
        ),
        record(
            "fleetsim:backend_request_share",
            "fleetsim:backend_requests_window / on (pool) group_left sum by (pool) (fleetsim:backend_requests_window)"
                .into(),
        ),
    ]);
    r
}

/// The alerts: split fleet, skewed share, zero stats, stale series.
fn alerts(c: &AlertConfig) -> Vec<Rule> {
    let running = c.sel(vm::NUM_REQUESTS_RUNNING.name, "");
    let waiting = c.sel(vm::NUM_REQUESTS_WAITING.name, "");
    let e2e_sum = c.sel(&format!("{}_sum", vm::E2E_REQUEST_LATENCY.name), "");
    let zw = promql_duration(c.zero_window);
    let sw = promql_duration(c.skew_window);
    let mut r = Vec::new();
    r.push(alert(
        SPLIT,
        "fleetsim:fleet_free_slots > 0 and fleetsim:fleet_waiting > 0".into(),
        Some(c.split_for),
        summary_of(SPLIT),
        format!(
            "Requests wait on one backend while another has a free slot, for {} or more: the \
             router keeps sending work where it queues (fleetsim's idle_while_queued). Compare \
             fleetsim:backend_running and fleetsim:backend_waiting per instance.",
            promql_duration(c.split_for)
        ),
    ));
    r.push(alert(
        SKEW,
        format!(
            "fleetsim:backend_request_share > on (pool) group_left () ({} / count by (pool) (fleetsim:backend_requests_window)) \
             and on (pool) (sum by (pool) (fleetsim:backend_requests_window) >= {} * count by (pool) (fleetsim:backend_requests_window)) \
             and on (pool) (count by (pool) (fleetsim:backend_requests_window) >= 3)",
            c.skew_factor, c.skew_min_requests_per_backend
        ),
        Some(c.skew_for),
        summary_of(SKEW),
        format!(
            "Over {sw}, this backend finished more than {} times a fair share of its pool's \
             requests (backends of equal capacity): the router concentrates traffic, with or \
             without a queue yet.",
            c.skew_factor
        ),
    ));
    r.push(alert(
        ZERO,
        format!(
            "(max by (instance) (max_over_time({running}[{zw}])) + max by (instance) (max_over_time({waiting}[{zw}])) == 0) \
             and on (instance) (sum by (instance) ({e2e_sum} - {e2e_sum} offset {zw}) > {})",
            c.zero_min_inflight * c.zero_window.as_secs_f64()
        ),
        None,
        summary_of(ZERO),
        format!(
            "Over {zw} every sample of vllm:num_requests_running and vllm:num_requests_waiting \
             read 0, yet requests finished there held {} or more requests in flight on average \
             (the latency histogram's sum): the engine's gauges are not what the router should \
             trust (a metric-name prefix the parser does not know, a broken exporter).",
            c.zero_min_inflight
        ),
    ));
    r.push(alert(
        STALE,
        format!("count by (instance) (max_over_time({running}[1h])) unless count by (instance) ({running})"),
        Some(c.stale_for),
        summary_of(STALE),
        format!(
            "A backend that exported vllm:num_requests_running in the last hour has none now, \
             for {}: a router scraping it works from nothing or from its last value.",
            promql_duration(c.stale_for)
        ),
    ));
    r
}

/// What each rule catches and why its window is what it is, written as a comment above its
/// first occurrence (fixed text, never user input).
fn comment_of(key: &str, c: &AlertConfig) -> Option<String> {
    let scrape = promql_duration(c.scrape_interval);
    Some(match key {
        "fleetsim:backend_running" => format!(
            "Per backend (instance), engines added up. Evaluated every {scrape}, the scrape interval: \
             no rule can see faster than the samples."
        ),
        "fleetsim:backend_slots" => "Each pool's instances (from vllm:cache_config_info, which every vLLM \
             exports) valued at the pool's slots (max_num_seqs, which no vLLM series carries)."
            .into(),
        "fleetsim:backend_free_slots" => "Free slots: below the slot limit with nothing waiting (a backend \
             that queues with spare slots is blocked on KV or the token budget)."
            .into(),
        "fleetsim:fleet_stranded_slots" => "min(total waiting, total free): its integral over time is \
             fleetsim's stranded_slot_s."
            .into(),
        "fleetsim:backend_requests_window" => format!(
            "Requests finished per backend over {} (a counter difference, exact at the samples).",
            promql_duration(c.skew_window)
        ),
        SPLIT => format!(
            "The split: a free slot somewhere while requests wait elsewhere (fleetsim's \
             idle_while_queued). Held {}: a router's view refreshes every engine-stats \
             interval, and a pick made on a stale view is corrected within a few refreshes; \
             six of them (at least a minute) is past any transient.",
            promql_duration(c.split_for)
        ),
        SKEW => format!(
            "Request-share skew in a pool of equal backends (3 or more): one finishes more \
             than {} times its fair share. Window {}: enough requests that a share is not \
             noise (at least {} per backend on average, else no verdict); held as long again \
             so a burst of one session does not page.",
            c.skew_factor,
            promql_duration(c.skew_window),
            c.skew_min_requests_per_backend
        ),
        ZERO => format!(
            "All-zero engine stats on a backend that serves: no sample of running or waiting \
             above 0 for {}, while the requests it finished spent on average {} or more \
             requests' worth of time on it (Little's law on the latency sum). Window: 8 scrapes \
             and at least 2 minutes, so a busy engine cannot slip between samples.",
            promql_duration(c.zero_window),
            c.zero_min_inflight
        ),
        STALE => format!(
            "A scrape gone stale: the backend exported vllm:num_requests_running within the \
             hour and has no current sample. Held {} (3 scrapes) so one lost scrape does not fire.",
            promql_duration(c.stale_for)
        ),
        _ => return None,
    })
}

/// The rules as YAML, with a header saying what wrote them and a comment above each kind
/// of rule.
pub fn to_yaml(f: &RuleFile, c: &AlertConfig, header: &str) -> Result<String> {
    let body = serde_yaml_ng::to_string(f)?;
    let mut out: String = header.lines().map(|l| format!("# {l}\n")).collect();
    let mut seen = std::collections::BTreeSet::new();
    for line in body.lines() {
        let t = line.trim_start();
        let key = t.strip_prefix("- record: ").or_else(|| t.strip_prefix("- alert: "));
        if let Some(text) = key
            .filter(|k| seen.insert(k.to_string()))
            .and_then(|k| comment_of(k, c))
        {
            let indent = &line[..line.len() - t.len()];
            for l in wrap(&text, 88) {
                out.push_str(&format!("{indent}# {l}\n"));
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// Words into lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = vec![];
    for w in text.split_whitespace() {
        match lines.last_mut() {
            Some(l) if l.len() + 1 + w.len() <= width => {
                l.push(' ');
                l.push_str(w);
            }
            _ => lines.push(w.to_string()),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> AlertConfig {
        let pools = vec![Pool {
            name: "a\"b".into(),
            slots: 4,
            instances: vec!["backend-0:8000".into(), "x.y:1".into()],
        }];
        AlertConfig::new(SimDuration(15_000_000_000), Some(SimDuration(10_000_000_000)), pools)
    }

    #[test]
    fn durations_and_regexes() {
        assert_eq!(promql_duration(SimDuration(90_000_000_000)), "90s");
        assert_eq!(promql_duration(SimDuration(1_500_000_000)), "1500ms");
        assert_eq!(exact_regex(&["a.b:1".into(), "c".into()]), "a\\.b:1|c");
        let c = cfg();
        assert_eq!(c.split_for, SimDuration(60_000_000_000));
        assert_eq!(
            AlertConfig::new(c.scrape_interval, Some(SimDuration(30_000_000_000)), vec![])
                .split_for
                .0,
            180_000_000_000
        );
    }

    #[test]
    fn yaml_quotes_user_text_and_names_every_alert() {
        let c = cfg();
        c.validate().unwrap();
        let y = to_yaml(&rules(&c), &c, "written by a test").unwrap();
        assert!(y.contains("  # The split: a free slot"), "{y}");
        assert!(y.starts_with("# written by a test\n"));
        let back: serde_yaml_ng::Value = serde_yaml_ng::from_str(&y).unwrap();
        let rules = back["groups"][0]["rules"].as_sequence().unwrap();
        let alerts: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
        assert_eq!(alerts, [SPLIT, SKEW, ZERO, STALE]);
        let slots = rules
            .iter()
            .find(|r| r["record"].as_str() == Some("fleetsim:backend_slots"))
            .unwrap();
        assert!(slots["expr"].as_str().unwrap().contains("`a\"b`"), "{y}");
        assert!(
            slots["expr"]
                .as_str()
                .unwrap()
                .contains("instance=~`backend-0:8000|x\\.y:1`")
        );
    }

    #[test]
    fn selectors_are_promql_matchers() {
        for ok in [
            "",
            "job=\"vllm\"",
            "job=\"a\", instance=~'b.*',",
            "a!=`x`",
            "a!~\"\\\"q\"",
        ] {
            assert_eq!(check_selector(ok), Ok(()), "{ok}");
        }
        for (bad, want) in [
            ("job==", "quoted value"),
            ("job=", "quoted value"),
            ("=\"x\"", "label name"),
            ("job \"x\"", "expected =,"),
            ("job=\"x", "unterminated"),
            ("a=\"x\" b=\"y\"", "expected `,`"),
            ("1a=\"x\"", "label name"),
        ] {
            let e = check_selector(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn pools_are_distinct() {
        let pool = |name: &str, inst: &[&str]| Pool {
            name: name.into(),
            slots: 4,
            instances: inst.iter().map(|s| s.to_string()).collect(),
        };
        let c = |pools| AlertConfig::new(SimDuration(15_000_000_000), None, pools);
        assert!(c(vec![pool("a", &["x"]), pool("b", &["y"])]).validate().is_ok());
        assert!(c(vec![pool("a", &[])]).validate().is_ok());
        for (pools, want) in [
            (vec![pool("a", &["x"]), pool("a", &["y"])], "a second pool"),
            (vec![pool("a", &["x"]), pool("b", &["x"])], "already in pool a"),
            (vec![pool("a", &[]), pool("b", &["y"])], "without instances"),
        ] {
            let e = c(pools).validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn bad_selectors_and_pools_are_refused() {
        let mut c = cfg();
        c.selector = "job=\"x\"}".into();
        assert!(c.validate().is_err());
        let mut c = cfg();
        c.pools[0].slots = 0;
        assert!(c.validate().is_err());
        let mut c = cfg();
        c.pools.clear();
        assert!(c.validate().is_err());
    }
}
