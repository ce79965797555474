//! Autoscaler manifests to `[autoscaler]`: a Kubernetes HorizontalPodAutoscaler
//! (`autoscaling/v2`, on an Object, Pods or External metric served by prometheus-adapter),
//! a KEDA ScaledObject (`keda.sh/v1alpha1`, one Prometheus trigger), and production-stack's
//! Helm values `servingEngineSpec.modelSpec[].keda` (rendered by the chart's
//! `templates/scaledobject-vllm.yaml` @ 225be71 into the same ScaledObject).
//!
//! Every key that changes what the controller decides is read or refused by its key path;
//! keys without effect on the simulation (names, addresses, authentication) are listed as
//! ignored. An HPA's metric is a prometheus-adapter name: `vllm_<gauge>` (or `vllm:<gauge>`)
//! becomes `sum(vllm:<gauge>{matchLabels})`, the `metricsQuery` production-stack's
//! `observability/prom-adapter.yaml` gives it (`sum by(namespace) (...)`).

use std::path::Path;

use serde_yaml_ng::Value;

use super::helm::{Helm, show, values};
use super::{Import, Sourced, src};

/// The gauges `[autoscaler] query` reads (the core's PromQL subset).
const GAUGES: [&str; 3] = ["num_requests_waiting", "num_requests_running", "kv_cache_usage_perc"];

/// The chart's default trigger when `keda.triggers` is absent (`scaledobject-vllm.yaml`
/// L60-69): the query selects `model="<name>"`, a label vLLM's series do not carry.
const CHART_DEFAULT_THRESHOLD: f64 = 5.0;

/// `[autoscaler]` as imported: its keys in writing order, each with where it came from.
#[derive(Clone, Debug, Default)]
pub(crate) struct Autoscaler {
    pub keys: Vec<(String, Sourced<toml_edit::Value>)>,
}

impl Autoscaler {
    fn put(&mut self, key: &str, v: impl Into<toml_edit::Value>, from: impl Into<String>) {
        self.keys.push((key.to_string(), src(v.into(), from)));
    }
}

/// Reads an HPA or ScaledObject manifest at `path` into `imp.autoscaler`.
pub fn read_manifest(path: &Path, imp: &mut Import, allow_unknown: bool) -> Result<(), String> {
    let file = path.display().to_string();
    let root = values(path, &file)?;
    let h = Helm { file: &file };
    let kind = h.string(&root, "", "kind")?.unwrap_or_default();
    let api = h.string(&root, "", "apiVersion")?.unwrap_or_default();
    let mut a = Autoscaler::default();
    let mut keys = Keys::new(&h, "", allow_unknown);
    keys.ignore(&root, &["metadata", "status"], "the object's name and observed state");
    keys.check(&root, &["apiVersion", "kind", "spec"], imp)?;
    let spec = root.get("spec").ok_or_else(|| h.at("spec", "is required"))?;
    match (kind.as_str(), api.as_str()) {
        ("HorizontalPodAutoscaler", "autoscaling/v2" | "autoscaling/v2beta2") => {
            hpa(&h, spec, &mut a, imp, allow_unknown)?
        }
        ("ScaledObject", "keda.sh/v1alpha1") => scaled_object(&h, spec, "spec", &mut a, imp, allow_unknown, None)?,
        ("HorizontalPodAutoscaler", other) => {
            return Err(h.at(
                "apiVersion",
                &format!(
                    "{} is not read; expected autoscaling/v2 (v1 has no custom metrics)",
                    show(&Value::String(other.into()))
                ),
            ));
        }
        (k, _) => {
            return Err(h.at(
                "kind",
                &format!(
                    "expected HorizontalPodAutoscaler (autoscaling/v2) or ScaledObject (keda.sh/v1alpha1), got {}",
                    show(&Value::String(k.into()))
                ),
            ));
        }
    }
    set(imp, a, &h, "kind")
}

/// production-stack's `modelSpec[i].keda` (at `p`) for the engines named `name`, if enabled.
pub fn read_helm(
    h: &Helm,
    k: &Value,
    p: &str,
    name: &str,
    imp: &mut Import,
    allow_unknown: bool,
) -> Result<bool, String> {
    if h.boolean(k, p, "enabled")? != Some(true) {
        imp.ignored.push(format!("{p} (--helm; keda.enabled is not true)"));
        return Ok(false);
    }
    let mut a = Autoscaler::default();
    let default = format!("vllm:num_requests_waiting{{model=\"{name}\"}}");
    scaled_object(h, k, p, &mut a, imp, allow_unknown, Some(&default))?;
    set(imp, a, h, p)?;
    Ok(true)
}

/// Stores `a` as the import's one autoscaler (a second is refused at `p`).
fn set(imp: &mut Import, a: Autoscaler, h: &Helm, p: &str) -> Result<(), String> {
    if imp.autoscaler.is_some() {
        return Err(h.at(
            p,
            "a second autoscaler: the simulator scales one pool (the whole fleet), so give one",
        ));
    }
    imp.autoscaler = Some(a);
    Ok(())
}

/// Checks a mapping's keys: read ones pass, ignored ones are listed, others are refused
/// (or listed with `--allow-unknown`).
struct Keys<'a> {
    h: &'a Helm<'a>,
    p: String,
    allow_unknown: bool,
    /// Keys listed as ignored.
    skip: Vec<String>,
    /// Their lines for the scenario's header.
    lines: Vec<String>,
}

impl<'a> Keys<'a> {
    fn new(h: &'a Helm<'a>, p: &str, allow_unknown: bool) -> Keys<'a> {
        Keys {
            h,
            p: p.to_string(),
            allow_unknown,
            skip: Vec::new(),
            lines: Vec::new(),
        }
    }

    fn path(&self, k: &str) -> String {
        if self.p.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.p)
        }
    }

    /// Lists `keys` of `m` that are present as ignored, with `why`.
    fn ignore(&mut self, m: &Value, keys: &[&str], why: &str) {
        for k in keys {
            if m.get(*k).is_some() {
                self.skip.push(k.to_string());
                self.lines.push(format!("{} ({}; {why})", self.path(k), self.h.file));
            }
        }
    }

    /// Refuses a key of `m` neither in `read` nor ignored; moves the ignored lines to `imp`.
    fn check(mut self, m: &Value, read: &[&str], imp: &mut Import) -> Result<(), String> {
        let Value::Mapping(map) = m else {
            let at = if self.p.is_empty() {
                "(top level)"
            } else {
                self.p.as_str()
            };
            return Err(self.h.at(at, "expected a mapping"));
        };
        for k in map.keys() {
            let k = k.as_str().map_or_else(|| show(k), String::from);
            if read.contains(&k.as_str()) || self.skip.contains(&k) {
                continue;
            }
            if !self.allow_unknown {
                return Err(self.h.at(
                    &self.path(&k),
                    "unknown key: it may change what the controller decides, so it is refused (--allow-unknown lists it as ignored)",
                ));
            }
            self.lines.push(format!("{} ({}; unknown)", self.path(&k), self.h.file));
        }
        imp.ignored.append(&mut self.lines);
        Ok(())
    }
}

/// An HPA's `spec`.
fn hpa(h: &Helm, spec: &Value, a: &mut Autoscaler, imp: &mut Import, allow_unknown: bool) -> Result<(), String> {
    let mut keys = Keys::new(h, "spec", allow_unknown);
    keys.ignore(
        spec,
        &["scaleTargetRef"],
        "the scaled Deployment is the scenario's fleet",
    );
    keys.check(spec, &["minReplicas", "maxReplicas", "metrics", "behavior"], imp)?;
    a.put("kind", "hpa", "kind: HorizontalPodAutoscaler");
    let metrics = match spec.get("metrics") {
        Some(Value::Sequence(m)) if m.len() == 1 => &m[0],
        Some(Value::Sequence(m)) if m.len() > 1 => {
            return Err(h.at(
                "spec.metrics[1]",
                "a second metric: the HPA takes the largest proposal over its metrics, which is not modelled; keep one",
            ));
        }
        None => {
            return Err(h.at(
                "spec.metrics",
                "absent: the HPA's default is 80 % CPU, which is not modelled",
            ));
        }
        Some(_) => return Err(h.at("spec.metrics", "expected a list of one metric")),
    };
    hpa_metric(h, metrics, "spec.metrics[0]", a, imp, allow_unknown)?;
    match h.int(spec, "spec", "minReplicas")? {
        Some(n) => a.put("min_replicas", n, "spec.minReplicas"),
        None => a.put("min_replicas", 1i64, "spec.minReplicas absent: default 1"),
    }
    let max = h
        .int(spec, "spec", "maxReplicas")?
        .ok_or_else(|| h.at("spec.maxReplicas", "is required"))?;
    a.put("max_replicas", max, "spec.maxReplicas");
    if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
        let v = behavior(h, b, "spec.behavior", imp, allow_unknown)?;
        a.put("behavior", v, "spec.behavior");
    }
    imp.read.push(format!(
        "{} ({})",
        "spec.minReplicas, spec.maxReplicas, spec.metrics, spec.behavior", h.file
    ));
    Ok(())
}

/// One HPA metric (Object, Pods or External) as a query, a metric type and a target.
fn hpa_metric(
    h: &Helm,
    m: &Value,
    p: &str,
    a: &mut Autoscaler,
    imp: &mut Import,
    allow_unknown: bool,
) -> Result<(), String> {
    let ty = h
        .string(m, p, "type")?
        .ok_or_else(|| h.at(&format!("{p}.type"), "is required"))?;
    let field = match ty.as_str() {
        "Object" => "object",
        "Pods" => "pods",
        "External" => "external",
        "Resource" | "ContainerResource" => {
            return Err(h.at(
                &format!("{p}.type"),
                &format!("{ty} (CPU or memory) is not modelled: the simulator's series are vLLM's"),
            ));
        }
        other => {
            return Err(h.at(
                &format!("{p}.type"),
                &format!("unknown metric type {}", show(&Value::String(other.into()))),
            ));
        }
    };
    Keys::new(h, p, allow_unknown).check(m, &["type", field], imp)?;
    let fp = format!("{p}.{field}");
    let body = m.get(field).ok_or_else(|| h.at(&fp, "is required"))?;
    let mut keys = Keys::new(h, &fp, allow_unknown);
    keys.ignore(
        body,
        &["describedObject"],
        "the namespace the adapter sums over: the scenario's fleet",
    );
    keys.check(body, &["metric", "target"], imp)?;
    let metric = body
        .get("metric")
        .ok_or_else(|| h.at(&format!("{fp}.metric"), "is required"))?;
    let query = adapter_query(h, metric, &format!("{fp}.metric"), imp, allow_unknown)?;
    a.put(
        "query",
        query,
        format!("{fp}.metric (prometheus-adapter: the series summed)"),
    );
    let target = body
        .get("target")
        .ok_or_else(|| h.at(&format!("{fp}.target"), "is required"))?;
    hpa_target(
        h,
        target,
        &format!("{fp}.target"),
        field == "pods",
        a,
        imp,
        allow_unknown,
    )
}

/// An HPA metric's `target` (at `tp`): `Value` (not for a Pods metric) or `AverageValue`,
/// and its quantity.
fn hpa_target(
    h: &Helm,
    target: &Value,
    tp: &str,
    pods: bool,
    a: &mut Autoscaler,
    imp: &mut Import,
    allow_unknown: bool,
) -> Result<(), String> {
    Keys::new(h, tp, allow_unknown).check(target, &["type", "value", "averageValue"], imp)?;
    let tt = h
        .string(target, tp, "type")?
        .ok_or_else(|| h.at(&format!("{tp}.type"), "is required"))?;
    let key = match tt.as_str() {
        "Value" if !pods => "value",
        "AverageValue" => "averageValue",
        other => {
            let allowed = if pods {
                "AverageValue (a Pods metric)"
            } else {
                "Value or AverageValue"
            };
            return Err(h.at(
                &format!("{tp}.type"),
                &format!(
                    "{} is not supported; expected {allowed}",
                    show(&Value::String(other.into()))
                ),
            ));
        }
    };
    let raw = target
        .get(key)
        .ok_or_else(|| h.at(&format!("{tp}.{key}"), "is required"))?;
    let v = quantity(raw).ok_or_else(|| {
        h.at(
            &format!("{tp}.{key}"),
            &format!("expected a Kubernetes quantity, got {}", show(raw)),
        )
    })?;
    a.put("metric_type", tt.as_str(), format!("{tp}.type"));
    a.put("target", v, format!("{tp}.{key}"));
    Ok(())
}

/// A prometheus-adapter metric (`name`, `selector.matchLabels`) as the adapter's query.
fn adapter_query(h: &Helm, metric: &Value, p: &str, imp: &mut Import, allow_unknown: bool) -> Result<String, String> {
    Keys::new(h, p, allow_unknown).check(metric, &["name", "selector"], imp)?;
    let name = h
        .string(metric, p, "name")?
        .ok_or_else(|| h.at(&format!("{p}.name"), "is required"))?;
    let gauge = name
        .strip_prefix("vllm_")
        .or_else(|| name.strip_prefix("vllm:"))
        .filter(|g| GAUGES.contains(g))
        .ok_or_else(|| {
            h.at(
                &format!("{p}.name"),
                &format!(
                    "{} is not one of vLLM's gauges as prometheus-adapter names them: vllm_{}",
                    show(&Value::String(name.clone())),
                    GAUGES.join(", vllm_")
                ),
            )
        })?;
    let mut matchers = Vec::new();
    if let Some(sel) = metric.get("selector").filter(|s| !s.is_null()) {
        let sp = format!("{p}.selector");
        Keys::new(h, &sp, allow_unknown).check(sel, &["matchLabels"], imp)?;
        if let Some(Value::Mapping(ml)) = sel.get("matchLabels") {
            for (k, v) in ml {
                let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
                    return Err(h.at(&format!("{sp}.matchLabels"), "expected string labels and values"));
                };
                let esc = v.replace('\\', "\\\\").replace('"', "\\\"");
                matchers.push(format!("{k}=\"{esc}\""));
            }
        }
    }
    let sel = if matchers.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", matchers.join(","))
    };
    Ok(format!("sum(vllm:{gauge}{sel})"))
}

/// A Kubernetes quantity (`5`, `500m`, `2k`, `1.5`) as a number.
fn quantity(v: &Value) -> Option<f64> {
    let s = match v {
        Value::Number(n) => return n.as_f64().filter(|x| x.is_finite()),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    let (num, mult) = match s.char_indices().last()? {
        (i, 'm') => (&s[..i], 1e-3),
        (i, 'k') => (&s[..i], 1e3),
        (i, 'M') => (&s[..i], 1e6),
        (i, 'G') => (&s[..i], 1e9),
        _ => (s, 1.0),
    };
    num.parse::<f64>().ok().filter(|x| x.is_finite()).map(|x| x * mult)
}

/// `behavior` (`scaleUp`, `scaleDown`) as the scenario's inline table.
fn behavior(h: &Helm, b: &Value, p: &str, imp: &mut Import, allow_unknown: bool) -> Result<toml_edit::Value, String> {
    Keys::new(h, p, allow_unknown).check(b, &["scaleUp", "scaleDown"], imp)?;
    let mut t = toml_edit::InlineTable::new();
    for (yaml, toml) in [("scaleUp", "scale_up"), ("scaleDown", "scale_down")] {
        if let Some(r) = b.get(yaml).filter(|r| !r.is_null()) {
            t.insert(toml, rules(h, r, &format!("{p}.{yaml}"), imp, allow_unknown)?);
        }
    }
    Ok(toml_edit::Value::InlineTable(t))
}

/// One direction's `stabilizationWindowSeconds`, `selectPolicy` and `policies`.
fn rules(h: &Helm, r: &Value, p: &str, imp: &mut Import, allow_unknown: bool) -> Result<toml_edit::Value, String> {
    Keys::new(h, p, allow_unknown).check(r, &["stabilizationWindowSeconds", "selectPolicy", "policies"], imp)?;
    let mut t = toml_edit::InlineTable::new();
    if let Some(w) = h.int(r, p, "stabilizationWindowSeconds")? {
        t.insert("stabilization_window_s", w.into());
    }
    if let Some(s) = h.string(r, p, "selectPolicy")? {
        t.insert("select_policy", s.into());
    }
    match r.get("policies") {
        None | Some(Value::Null) => {}
        Some(Value::Sequence(ps)) => {
            let mut arr = toml_edit::Array::new();
            for (i, pol) in ps.iter().enumerate() {
                let pp = format!("{p}.policies[{i}]");
                Keys::new(h, &pp, allow_unknown).check(pol, &["type", "value", "periodSeconds"], imp)?;
                let need = |k: &str| h.at(&format!("{pp}.{k}"), "is required");
                let mut one = toml_edit::InlineTable::new();
                one.insert("type", h.string(pol, &pp, "type")?.ok_or_else(|| need("type"))?.into());
                one.insert("value", h.int(pol, &pp, "value")?.ok_or_else(|| need("value"))?.into());
                one.insert(
                    "period_s",
                    h.int(pol, &pp, "periodSeconds")?
                        .ok_or_else(|| need("periodSeconds"))?
                        .into(),
                );
                arr.push(toml_edit::Value::InlineTable(one));
            }
            t.insert("policies", toml_edit::Value::Array(arr));
        }
        Some(_) => return Err(h.at(&format!("{p}.policies"), "expected a list")),
    }
    Ok(toml_edit::Value::InlineTable(t))
}

/// A ScaledObject's `spec` (or the chart's `keda` values, with its default trigger) at `p`.
fn scaled_object(
    h: &Helm,
    spec: &Value,
    p: &str,
    a: &mut Autoscaler,
    imp: &mut Import,
    allow_unknown: bool,
    chart_default: Option<&str>,
) -> Result<(), String> {
    let mut keys = Keys::new(h, p, allow_unknown);
    keys.ignore(
        spec,
        &["scaleTargetRef"],
        "the scaled Deployment is the scenario's fleet",
    );
    const READ: [&str; 8] = [
        "pollingInterval",
        "cooldownPeriod",
        "initialCooldownPeriod",
        "minReplicaCount",
        "maxReplicaCount",
        "idleReplicaCount",
        "fallback",
        "advanced",
    ];
    let mut read = READ.to_vec();
    read.push("triggers");
    if chart_default.is_some() {
        // The chart's switch, read by `read_helm`.
        read.push("enabled");
    }
    keys.check(spec, &read, imp)?;
    a.put("kind", "keda", format!("{p}: a ScaledObject"));
    trigger(h, spec, p, a, imp, allow_unknown, chart_default)?;
    for (yaml, toml, default) in [
        ("minReplicaCount", "min_replicas", "KEDA default 0"),
        ("maxReplicaCount", "max_replicas", "KEDA default 100"),
        ("pollingInterval", "polling_interval_s", "KEDA default 30"),
        ("cooldownPeriod", "cooldown_s", "KEDA default 300"),
        ("initialCooldownPeriod", "initial_cooldown_s", ""),
        ("idleReplicaCount", "idle_replica_count", ""),
    ] {
        match h.int(spec, p, yaml)? {
            Some(n) => a.put(toml, n, format!("{p}.{yaml}")),
            None if !default.is_empty() => {
                let n: i64 = default.rsplit(' ').next().and_then(|d| d.parse().ok()).unwrap_or(0);
                a.put(toml, n, format!("{p}.{yaml} absent: {default}"));
            }
            None => {}
        }
    }
    if let Some(f) = spec.get("fallback").filter(|f| !f.is_null()) {
        a.put(
            "fallback",
            fallback(h, f, &format!("{p}.fallback"), imp, allow_unknown)?,
            format!("{p}.fallback"),
        );
    }
    if let Some(adv) = spec.get("advanced").filter(|v| !v.is_null()) {
        advanced(h, adv, &format!("{p}.advanced"), a, imp, allow_unknown)?;
    }
    imp.read.push(format!("{p} ({}: a ScaledObject)", h.file));
    Ok(())
}

/// KEDA's `fallback` (only the `static` behaviour: the fixed replica count).
fn fallback(h: &Helm, f: &Value, p: &str, imp: &mut Import, allow_unknown: bool) -> Result<toml_edit::Value, String> {
    Keys::new(h, p, allow_unknown).check(f, &["failureThreshold", "replicas", "behavior"], imp)?;
    if let Some(b) = h.string(f, p, "behavior")?
        && b != "static"
    {
        return Err(h.at(
            &format!("{p}.behavior"),
            &format!("{} is not modelled; only static (the default)", show(&Value::String(b))),
        ));
    }
    let need = |k: &str| h.at(&format!("{p}.{k}"), "is required");
    let mut t = toml_edit::InlineTable::new();
    t.insert(
        "failure_threshold",
        h.int(f, p, "failureThreshold")?
            .ok_or_else(|| need("failureThreshold"))?
            .into(),
    );
    t.insert(
        "replicas",
        h.int(f, p, "replicas")?.ok_or_else(|| need("replicas"))?.into(),
    );
    Ok(toml_edit::Value::InlineTable(t))
}

/// KEDA's `advanced`: the HPA's `behavior`; `scalingModifiers` are refused.
fn advanced(
    h: &Helm,
    adv: &Value,
    p: &str,
    a: &mut Autoscaler,
    imp: &mut Import,
    allow_unknown: bool,
) -> Result<(), String> {
    let mut keys = Keys::new(h, p, allow_unknown);
    keys.ignore(
        adv,
        &["restoreToOriginalReplicaCount"],
        "acts when the ScaledObject is deleted",
    );
    keys.check(adv, &["horizontalPodAutoscalerConfig"], imp)?;
    let Some(cfg) = adv.get("horizontalPodAutoscalerConfig").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let cp = format!("{p}.horizontalPodAutoscalerConfig");
    let mut keys = Keys::new(h, &cp, allow_unknown);
    keys.ignore(cfg, &["name"], "the generated HPA's name");
    keys.check(cfg, &["behavior"], imp)?;
    if let Some(b) = cfg.get("behavior").filter(|b| !b.is_null()) {
        let bp = format!("{cp}.behavior");
        a.put("behavior", behavior(h, b, &bp, imp, allow_unknown)?, bp);
    }
    Ok(())
}

/// The one Prometheus trigger (or the chart's default when `chart_default` and none).
fn trigger(
    h: &Helm,
    spec: &Value,
    p: &str,
    a: &mut Autoscaler,
    imp: &mut Import,
    allow_unknown: bool,
    chart_default: Option<&str>,
) -> Result<(), String> {
    let tp = format!("{p}.triggers");
    let t = match (spec.get("triggers"), chart_default) {
        (None | Some(Value::Null), Some(q)) => {
            a.put(
                "query",
                q,
                format!("{tp} absent: the chart's default trigger (its `model` label matches no vLLM series)"),
            );
            a.put(
                "threshold",
                CHART_DEFAULT_THRESHOLD,
                format!("{tp} absent: the chart's default threshold"),
            );
            return Ok(());
        }
        (Some(Value::Sequence(ts)), _) if ts.len() == 1 => &ts[0],
        (Some(Value::Sequence(ts)), _) if ts.len() > 1 => {
            return Err(h.at(
                &format!("{tp}[1]"),
                "a second trigger: KEDA scales on the largest of its triggers, which is not modelled; keep one",
            ));
        }
        (Some(Value::Mapping(_)), _) => {
            return Err(h.at(
                &tp,
                "is a mapping; KEDA needs a list of triggers (`- type: prometheus`)",
            ));
        }
        _ => return Err(h.at(&tp, "expected a list of one trigger")),
    };
    let p0 = format!("{tp}[0]");
    let mut keys = Keys::new(h, &p0, allow_unknown);
    keys.ignore(
        t,
        &["name", "authenticationRef", "useCachedMetrics"],
        "no effect on the decisions",
    );
    keys.check(t, &["type", "metadata", "metricType"], imp)?;
    let ty = h.string(t, &p0, "type")?.unwrap_or_default();
    if ty != "prometheus" {
        return Err(h.at(
            &format!("{p0}.type"),
            &format!("{} is not modelled; expected prometheus", show(&Value::String(ty))),
        ));
    }
    let mp = format!("{p0}.metadata");
    let md = t.get("metadata").ok_or_else(|| h.at(&mp, "is required"))?;
    prometheus_metadata(h, md, &mp, a, imp, allow_unknown)?;
    if let Some(m) = h.string(t, &p0, "metricType")? {
        a.put("metric_type", m.as_str(), format!("{p0}.metricType"));
    }
    Ok(())
}

/// A Prometheus trigger's `metadata` (at `mp`): the query and thresholds; where and how
/// KEDA reaches Prometheus is listed as ignored.
fn prometheus_metadata(
    h: &Helm,
    md: &Value,
    mp: &str,
    a: &mut Autoscaler,
    imp: &mut Import,
    allow_unknown: bool,
) -> Result<(), String> {
    let mut keys = Keys::new(h, mp, allow_unknown);
    let none = "where and how KEDA reaches Prometheus: no effect on the value";
    keys.ignore(
        md,
        &[
            "serverAddress",
            "namespace",
            "authModes",
            "customHeaders",
            "unsafeSsl",
            "timeout",
        ],
        none,
    );
    keys.ignore(md, &["metricName"], "not a field of KEDA 2.x's Prometheus scaler");
    keys.check(
        md,
        &["query", "threshold", "activationThreshold", "ignoreNullValues"],
        imp,
    )?;
    let q = h
        .string(md, mp, "query")?
        .ok_or_else(|| h.at(&format!("{mp}.query"), "is required"))?;
    a.put("query", q.trim(), format!("{mp}.query"));
    let th = h
        .float(md, mp, "threshold")?
        .ok_or_else(|| h.at(&format!("{mp}.threshold"), "is required"))?;
    a.put("threshold", th, format!("{mp}.threshold"));
    if let Some(v) = h.float(md, mp, "activationThreshold")? {
        a.put("activation_threshold", v, format!("{mp}.activationThreshold"));
    }
    if let Some(v) = h.boolean(md, mp, "ignoreNullValues")? {
        a.put("ignore_null_values", v, format!("{mp}.ignoreNullValues"));
    }
    Ok(())
}
