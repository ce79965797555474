//! production-stack Helm values (the chart's own schema, `helm/values.yaml` @ a6c01db) to
//! engines and router settings, following what the chart's templates pass as flags:
//! `deployment-vllm-multi.yaml` turns `vllmConfig` into `vllm serve` flags (and passes
//! `--no-enable-prefix-caching` whenever `vllmConfig` is given without
//! `enablePrefixCaching: true`); `deployment-router.yaml` turns `routerSpec` into router
//! flags. Values absent from the file take the chart's defaults, which differ from the
//! router's own in one place: `engineScrapeInterval` is 15 in the chart, 30 in the router.

use std::path::Path;

use serde_yaml_ng::Value;

use super::flags::{Flag, Parsed};
use super::{Engine, Group, Import, router_flags, src, tables, vllm_flags};

/// The chart's `routerSpec.engineScrapeInterval` default.
pub const CHART_ENGINE_SCRAPE_INTERVAL_S: i64 = 15;

/// The deepest nesting of flow collections (`[` and `{`) a values file may have: far
/// beyond any chart's, and checked in one pass before the YAML parser, whose time grows
/// with the square of the depth.
pub const MAX_FLOW_DEPTH: usize = 64;

/// Scans `text` once for flow collections nested deeper than [`MAX_FLOW_DEPTH`] (outside
/// quoted strings and comments); the line and column of the first too deep, 1-based.
fn flow_depth(text: &str) -> Result<(), (usize, usize)> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (l, line) in text.lines().enumerate() {
        let mut escaped = false;
        for (c, ch) in line.chars().enumerate() {
            match (quote, ch) {
                (Some('"'), '\\') if !escaped => escaped = true,
                (Some(q), _) if ch == q && !escaped => quote = None,
                (Some(_), _) => escaped = false,
                (None, '"' | '\'') => quote = Some(ch),
                (None, '#') if prev.is_whitespace() || c == 0 => break,
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Err((l + 1, c + 1));
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            prev = ch;
        }
        prev = ' ';
    }
    Ok(())
}

/// Reads a values file into `imp` (engines as groups, one per enabled `modelSpec`).
pub fn read(path: &Path, imp: &mut Import, default_gpu: &str, allow_unknown: bool) -> Result<(), String> {
    let file = path.display().to_string();
    let root = values(path, &file)?;
    let h = Helm { file: &file };
    let engine_spec = root.get("servingEngineSpec");
    let specs = match engine_spec.and_then(|s| s.get("modelSpec")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(s)) => s.clone(),
        Some(_) => return Err(h.at("servingEngineSpec.modelSpec", "expected a list of models")),
    };
    for (i, m) in specs.iter().enumerate() {
        let p = format!("servingEngineSpec.modelSpec[{i}]");
        if let Some(g) = model_spec(&h, m, &p, imp, default_gpu, allow_unknown)? {
            imp.groups.push(g);
        }
    }
    if let Some(spec) = engine_spec {
        unread(
            spec,
            "servingEngineSpec",
            &["modelSpec"],
            "cluster settings: no effect on the simulation",
            imp,
        );
    }
    unread(
        &root,
        "",
        &["servingEngineSpec", "routerSpec"],
        "not read by sim import",
        imp,
    );
    if super::served_models(imp).len() > 1 {
        imp.notes.push(
            "the chart's engines serve different models: each group `serves` its modelURL, each template group names its `model`, and the router keeps the endpoints serving the request's model before its routing logic, as production-stack does".into(),
        );
    }
    router_spec(&h, root.get("routerSpec"), imp, default_gpu, allow_unknown)
}

/// The values file as YAML: a mapping of chart values (or nothing).
pub(super) fn values(path: &Path, file: &str) -> Result<Value, String> {
    let text =
        crate::atomic::read_text(path, crate::scenario::MAX_SCENARIO_BYTES, "the values file").map_err(|(at, m)| {
            match at {
                Some((l, c)) => format!("{file}:{l}:{c}: {m}"),
                None => format!("{file}: {m}"),
            }
        })?;
    flow_depth(&text).map_err(|(l, c)| {
        format!("{file}:{l}:{c}: more than {MAX_FLOW_DEPTH} nested `[` or `{{`: not a values file")
    })?;
    let root: Value = serde_yaml_ng::from_str(&text).map_err(|e| match e.location() {
        Some(l) => format!("{file}:{}:{}: {e}", l.line(), l.column()),
        None => format!("{file}: {e}"),
    })?;
    if !matches!(root, Value::Mapping(_) | Value::Null) {
        return Err(format!("{file}: expected a mapping of chart values at the top level"));
    }
    Ok(root)
}

/// The group of engines of one `modelSpec` entry `m` (at `p`), or `None` when it runs none
/// (disabled, or no replicas); what it sets and leaves unread goes to `imp`.
fn model_spec(
    h: &Helm,
    m: &Value,
    p: &str,
    imp: &mut Import,
    default_gpu: &str,
    allow_unknown: bool,
) -> Result<Option<Group>, String> {
    let name = h
        .string(m, p, "name")?
        .ok_or_else(|| h.at(&format!("{p}.name"), "is required"))?;
    if h.boolean(m, p, "enabled")? == Some(false) {
        imp.ignored.push(format!("{p} `{name}` (enabled: false)"));
        return Ok(None);
    }
    let Some(count) = replica_count(h, m, p, &name, imp, allow_unknown)? else {
        return Ok(None);
    };
    let gpu = match h.string(m, p, "requestGPUType")? {
        Some(t) => match ["h100", "a100", "l40s"]
            .iter()
            .find(|g| t.to_ascii_lowercase().contains(*g))
        {
            Some(g) => src(g.to_string(), format!("{p}.requestGPUType {t}")),
            None => src(
                default_gpu.to_string(),
                format!("{p}.requestGPUType {t} unknown: --gpu"),
            ),
        },
        None => src(default_gpu.to_string(), "--gpu"),
    };
    let mut engine = Engine::default();
    if let Some(url) = h.string(m, p, "modelURL")? {
        engine.model = Some(src(url, format!("{p}.modelURL")));
    }
    if let Some(c) = m.get("vllmConfig").filter(|c| !c.is_null()) {
        vllm_config(h, c, &format!("{p}.vllmConfig"), &mut engine, imp, allow_unknown)?;
    }
    for key in ["requestGPU", "resources"] {
        if m.get(key).is_some() {
            imp.ignored.push(format!(
                "{p}.{key} (GPU count and resources: TP comes from vllmConfig.tensorParallelSize)"
            ));
        }
    }
    unread(
        m,
        p,
        MODEL_SPEC_READ,
        "image, storage, scheduling: no effect on routing or step times",
        imp,
    );
    let keda = m
        .get("keda")
        .is_some_and(|k| h.boolean(k, p, "enabled") == Ok(Some(true)));
    for key in ["name", "modelURL", "replicaCount", "requestGPUType"] {
        if m.get(key).is_some() && !(keda && key == "replicaCount") {
            imp.read.push(format!("{p}.{key} (--helm)"));
        }
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') || name.is_empty() {
        return Err(h.at(
            &format!("{p}.name"),
            &format!("{} is not a valid Kubernetes name", crate::quote::quote(&name)),
        ));
    }
    Ok(Some(Group {
        name,
        count,
        urls: None,
        gpu,
        engine,
    }))
}

/// How many engines `modelSpec` entry `m` starts with (`None`: none); under `keda` the
/// chart's ScaledObject goes to `imp.autoscaler`.
fn replica_count(
    h: &Helm,
    m: &Value,
    p: &str,
    name: &str,
    imp: &mut Import,
    allow_unknown: bool,
) -> Result<Option<super::Sourced<i64>>, String> {
    if let Some(k) = m.get("keda").filter(|k| !k.is_null())
        && super::autoscaler::read_helm(h, k, &format!("{p}.keda"), name, imp, allow_unknown)?
    {
        // The chart omits the Deployment's `replicas` under KEDA (deployment-vllm-multi.yaml
        // L33-35): it starts at Kubernetes' default 1 and the HPA raises it to its minimum.
        if m.get("replicaCount").is_some() {
            imp.ignored.push(format!(
                "{p}.replicaCount (--helm; keda.enabled: the chart omits the Deployment's replicas)"
            ));
        }
        return Ok(Some(src(
            1,
            format!("{p}.keda.enabled: the Deployment starts at Kubernetes' default 1"),
        )));
    }
    Ok(match h.int(m, p, "replicaCount")? {
        Some(n) if n < 0 => return Err(h.at(&format!("{p}.replicaCount"), "must be >= 0")),
        Some(0) => {
            imp.ignored.push(format!("{p} `{name}` (replicaCount: 0)"));
            None
        }
        Some(n) => Some(src(n, format!("{p}.replicaCount"))),
        None => Some(src(1, format!("{p}.replicaCount absent: chart default 1"))),
    })
}

/// `modelSpec[]` keys `sim import` reads (or lists with their own reason).
const MODEL_SPEC_READ: &[&str] = &[
    "name",
    "enabled",
    "modelURL",
    "replicaCount",
    "requestGPUType",
    "vllmConfig",
    "requestGPU",
    "resources",
    "keda",
];

/// `routerSpec` keys `sim import` reads.
const ROUTER_SPEC_READ: &[&str] = &[
    "routingLogic",
    "engineScrapeInterval",
    "requestStatsWindow",
    "prefixMinMatchLength",
    "sessionKey",
    "serviceDiscovery",
    "staticBackends",
    "staticModels",
    "replicaCount",
    "extraArgs",
];

/// Lists the keys of mapping `m` (at key path `p`) not in `read` as ignored, with `why`.
fn unread(m: &Value, p: &str, read: &[&str], why: &str, imp: &mut Import) {
    if let Value::Mapping(map) = m {
        for k in map.keys() {
            let k = match k.as_str() {
                Some(k) => k.to_string(),
                None => show(k),
            };
            if !read.contains(&k.as_str()) {
                let path = if p.is_empty() { k } else { format!("{p}.{k}") };
                imp.ignored.push(format!("{path} (--helm; {why})"));
            }
        }
    }
}

/// Error helpers that name the file and key path.
pub(super) struct Helm<'a> {
    pub(super) file: &'a str,
}

impl Helm<'_> {
    pub(super) fn at(&self, path: &str, msg: &str) -> String {
        format!(
            "{}: {}: {msg}",
            crate::quote::escape(self.file),
            crate::quote::escape(path)
        )
    }

    pub(super) fn string(&self, m: &Value, p: &str, k: &str) -> Result<Option<String>, String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(self.at(&format!("{p}.{k}"), "expected a string")),
        }
    }

    pub(super) fn boolean(&self, m: &Value, p: &str, k: &str) -> Result<Option<bool>, String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
            Some(v) => Err(self.at(&format!("{p}.{k}"), &format!("expected true or false, got {}", show(v)))),
        }
    }

    /// An integer (the chart's schema also allows numeric strings).
    pub(super) fn int(&self, m: &Value, p: &str, k: &str) -> Result<Option<i64>, String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64()),
            Some(Value::String(s)) if s.trim().parse::<i64>().is_ok() => Ok(s.trim().parse().ok()),
            Some(v) => Err(self.at(&format!("{p}.{k}"), &format!("expected an integer, got {}", show(v)))),
        }
    }

    pub(super) fn float(&self, m: &Value, p: &str, k: &str) -> Result<Option<f64>, String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(Value::String(s)) if s.trim().parse::<f64>().is_ok() => Ok(s.trim().parse().ok()),
            Some(v) => Err(self.at(&format!("{p}.{k}"), &format!("expected a number, got {}", show(v)))),
        }
    }

    pub(super) fn strings(&self, m: &Value, p: &str, k: &str) -> Result<Vec<String>, String> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Sequence(s)) => s
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    Value::Bool(b) => Ok(b.to_string()),
                    _ => Err(self.at(&format!("{p}.{k}[{i}]"), "expected a string")),
                })
                .collect(),
            Some(_) => Err(self.at(&format!("{p}.{k}"), "expected a list of strings")),
        }
    }
}

pub(super) fn show(v: &Value) -> String {
    serde_yaml_ng::to_string(v)
        .map(|s| crate::quote::quote(s.trim()))
        .unwrap_or_else(|_| "a value of another type".into())
}

/// `vllmConfig`, as `deployment-vllm-multi.yaml` turns it into flags.
fn vllm_config(
    h: &Helm,
    c: &Value,
    p: &str,
    e: &mut Engine,
    imp: &mut Import,
    allow_unknown: bool,
) -> Result<(), String> {
    if !c.is_mapping() {
        return Err(h.at(p, "expected a mapping"));
    }
    let mut flags = Vec::new();
    let mut push = |name: &str, value: Option<String>, key: &str| {
        flags.push(Flag {
            name: name.to_string(),
            written: format!("{p}.{key}"),
            at: format!("{}: {p}.{}", h.file, key.split(' ').next().unwrap_or(key)),
            value,
        })
    };
    // The template: `if .enablePrefixCaching` -> --enable-prefix-caching, else
    // --no-enable-prefix-caching (so an absent key turns prefix caching off).
    match h.boolean(c, p, "enablePrefixCaching")? {
        Some(true) => push("--enable-prefix-caching", None, "enablePrefixCaching"),
        Some(false) => push("--no-enable-prefix-caching", None, "enablePrefixCaching"),
        None => push(
            "--no-enable-prefix-caching",
            None,
            "enablePrefixCaching absent: the chart passes --no-enable-prefix-caching",
        ),
    }
    for (key, flag) in [
        ("maxModelLen", "--max-model-len"),
        ("tensorParallelSize", "--tensor-parallel-size"),
        ("maxNumSeqs", "--max-num-seqs"),
    ] {
        if let Some(v) = h.int(c, p, key)? {
            push(flag, Some(v.to_string()), key);
        }
    }
    if let Some(v) = h.float(c, p, "gpuMemoryUtilization")? {
        push("--gpu-memory-utilization", Some(v.to_string()), "gpuMemoryUtilization");
    }
    let known = [
        "enablePrefixCaching",
        "maxModelLen",
        "tensorParallelSize",
        "maxNumSeqs",
        "gpuMemoryUtilization",
        "extraArgs",
    ];
    if let Value::Mapping(map) = c {
        for k in map.keys().filter_map(Value::as_str) {
            if !known.contains(&k) {
                imp.ignored.push(format!("{p}.{k} (--helm)"));
            }
        }
    }
    let parsed = Parsed {
        flags,
        ..Parsed::default()
    };
    vllm_flags(&parsed, e, "--helm")?;
    imp.read
        .extend(parsed.flags.iter().map(|f| format!("{} (--helm)", f.written)));
    // extraArgs come after the chart's own flags, so they win.
    let extra = h.strings(c, p, "extraArgs")?;
    if !extra.is_empty() {
        let line = shlex::try_join(extra.iter().map(String::as_str))
            .map_err(|e| h.at(&format!("{p}.extraArgs"), &e.to_string()))?;
        let what = format!("{p}.extraArgs");
        let x = super::flags::parse(&line, tables::VLLM, &format!("{}: {what}", h.file), true, allow_unknown)?;
        vllm_flags(&x, e, &what)?;
        for u in &x.unknown {
            imp.ignored.push(format!("{u} ({what}, unknown)"));
        }
        super::ignored_of(&x, tables::VLLM_USED, &what, imp);
    }
    Ok(())
}

/// `routerSpec`, as `deployment-router.yaml` turns it into flags (chart defaults when absent).
fn router_spec(h: &Helm, r: Option<&Value>, imp: &mut Import, gpu: &str, allow_unknown: bool) -> Result<(), String> {
    let empty = Value::Mapping(Default::default());
    let r = r.filter(|v| !v.is_null()).unwrap_or(&empty);
    if !r.is_mapping() {
        return Err(h.at("routerSpec", "expected a mapping"));
    }
    let p = "routerSpec";
    unread(r, p, ROUTER_SPEC_READ, "not modelled", imp);
    let parsed = Parsed {
        flags: chart_flags(h, r)?,
        ..Parsed::default()
    };
    // Flags written from values read as `routerSpec.key` in comments: mark them so.
    router_flags(&parsed, imp, "--helm")?;
    if let Some(n) = h.int(r, p, "replicaCount")? {
        if !(1..=1024).contains(&n) {
            return Err(h.at(
                "routerSpec.replicaCount",
                &format!("must be between 1 and 1024, got {n}"),
            ));
        }
        imp.router.replicas = Some(src(n, "routerSpec.replicaCount (router replicas)"));
    }
    let extra = h.strings(r, p, "extraArgs")?;
    if !extra.is_empty() {
        let line = shlex::try_join(extra.iter().map(String::as_str))
            .map_err(|e| h.at("routerSpec.extraArgs", &e.to_string()))?;
        let x = super::flags::parse(
            &line,
            tables::ROUTER,
            &format!("{}: routerSpec.extraArgs", h.file),
            false,
            allow_unknown,
        )?;
        router_flags(&x, imp, "routerSpec.extraArgs")?;
    }
    // Static backends from the chart describe the fleet when no modelSpec engine does.
    if imp.groups.is_empty()
        && let Some(b) = &imp.router.static_backends
    {
        imp.groups.push(Group {
            name: "backend".into(),
            count: src(b.v.len() as i64, format!("{} URLs in {}", b.v.len(), b.from)),
            urls: Some(b.clone()),
            gpu: src(gpu.to_string(), "--gpu"),
            engine: Engine::default(),
        });
    }
    Ok(())
}

/// The router flags the chart's template passes for `routerSpec` `r`, each naming the key it
/// came from (or the chart default it stands for).
fn chart_flags(h: &Helm, r: &Value) -> Result<Vec<Flag>, String> {
    let p = "routerSpec";
    let mut flags = Vec::new();
    let mut push = |name: &str, value: String, key: String| {
        flags.push(Flag {
            name: name.to_string(),
            at: format!("{}: {}", h.file, key.split(' ').next().unwrap_or(&key)),
            written: key,
            value: Some(value),
        })
    };
    match h.string(r, p, "routingLogic")? {
        Some(v) => push("--routing-logic", v, "routerSpec.routingLogic".into()),
        None => push(
            "--routing-logic",
            "roundrobin".into(),
            "routerSpec.routingLogic absent: chart default roundrobin".into(),
        ),
    }
    match h.int(r, p, "engineScrapeInterval")? {
        Some(v) => push(
            "--engine-stats-interval",
            v.to_string(),
            "routerSpec.engineScrapeInterval".into(),
        ),
        None => push(
            "--engine-stats-interval",
            CHART_ENGINE_SCRAPE_INTERVAL_S.to_string(),
            format!(
                "routerSpec.engineScrapeInterval absent: chart default {CHART_ENGINE_SCRAPE_INTERVAL_S} (the router's own default is 30)"
            ),
        ),
    }
    match h.int(r, p, "requestStatsWindow")? {
        Some(v) => push(
            "--request-stats-window",
            v.to_string(),
            "routerSpec.requestStatsWindow".into(),
        ),
        None => push(
            "--request-stats-window",
            "60".into(),
            "routerSpec.requestStatsWindow absent: chart default 60".into(),
        ),
    }
    // The template passes these only when set (non-empty, non-zero).
    if let Some(v) = h.int(r, p, "prefixMinMatchLength")?.filter(|v| *v != 0) {
        push(
            "--prefix-min-match-length",
            v.to_string(),
            "routerSpec.prefixMinMatchLength".into(),
        );
    }
    if let Some(v) = h.string(r, p, "sessionKey")?.filter(|v| !v.is_empty()) {
        push("--session-key", v, "routerSpec.sessionKey".into());
    }
    if h.string(r, p, "serviceDiscovery")?.as_deref() == Some("static") {
        for (key, flag) in [
            ("staticBackends", "--static-backends"),
            ("staticModels", "--static-models"),
        ] {
            if let Some(v) = h.string(r, p, key)?.filter(|v| !v.is_empty()) {
                push(flag, v, format!("routerSpec.{key}"));
            }
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_nesting_is_bounded_in_one_pass() {
        assert_eq!(flow_depth("a: [1, {b: [2]}]\n"), Ok(()));
        let deep = format!("k:\n  v: {}\n", "[".repeat(100_000));
        assert_eq!(flow_depth(&deep), Err((2, 6 + MAX_FLOW_DEPTH)));
        // Brackets in quotes and comments do not count.
        let quoted = format!(
            "a: \"{}\"\nb: '{}' # {}\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100)
        );
        assert_eq!(flow_depth(&quoted), Ok(()));
    }
}
