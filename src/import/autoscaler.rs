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
    let mut r = Reader::new(&h, imp, allow_unknown);
    let mut keys = r.keys("");
    keys.ignore(&root, &["metadata", "status"], "the object's name and observed state");
    r.check(keys, &root, &["apiVersion", "kind", "spec"])?;
    let spec = root.get("spec").ok_or_else(|| h.at("spec", "is required"))?;
    match (kind.as_str(), api.as_str()) {
        ("HorizontalPodAutoscaler", "autoscaling/v2" | "autoscaling/v2beta2") => r.hpa(spec)?,
        ("ScaledObject", "keda.sh/v1alpha1") => r.scaled_object(spec, "spec", None)?,
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
    r.finish("kind")
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
    let default = format!("vllm:num_requests_waiting{{model=\"{name}\"}}");
    let mut r = Reader::new(h, imp, allow_unknown);
    r.scaled_object(k, p, Some(&default))?;
    r.finish(p)?;
    Ok(true)
}

/// One manifest being read: the file (for errors naming key paths), the import that
/// collects the keys read and ignored, whether unknown keys are listed rather than refused,
/// and the `[autoscaler]` keys so far.
struct Reader<'h, 'i> {
    h: &'h Helm<'h>,
    imp: &'i mut Import,
    allow_unknown: bool,
    a: Autoscaler,
}

impl<'h, 'i> Reader<'h, 'i> {
    fn new(h: &'h Helm<'h>, imp: &'i mut Import, allow_unknown: bool) -> Self {
        Reader {
            h,
            imp,
            allow_unknown,
            a: Autoscaler::default(),
        }
    }

    /// The key checker for the mapping at `p`.
    fn keys(&self, p: &str) -> Keys<'h> {
        Keys::new(self.h, p, self.allow_unknown)
    }

    /// Runs `keys`' check of `m` against `read`.
    fn check(&mut self, keys: Keys<'h>, m: &Value, read: &[&str]) -> Result<(), String> {
        keys.check(m, read, self.imp)
    }

    /// Checks that the mapping `m` at `p` has only the keys `read`.
    fn only(&mut self, m: &Value, p: &str, read: &[&str]) -> Result<(), String> {
        let keys = self.keys(p);
        self.check(keys, m, read)
    }

    /// Stores the autoscaler read as the import's one autoscaler (a second is refused at `p`).
    fn finish(self, p: &str) -> Result<(), String> {
        if self.imp.autoscaler.is_some() {
            return Err(self.h.at(
                p,
                "a second autoscaler: the simulator scales one pool (the whole fleet), so give one",
            ));
        }
        self.imp.autoscaler = Some(self.a);
        Ok(())
    }

    /// An HPA's `spec`.
    fn hpa(&mut self, spec: &Value) -> Result<(), String> {
        let h = self.h;
        let mut keys = self.keys("spec");
        keys.ignore(
            spec,
            &["scaleTargetRef"],
            "the scaled Deployment is the scenario's fleet",
        );
        self.check(keys, spec, &["minReplicas", "maxReplicas", "metrics", "behavior"])?;
        self.a.put("kind", "hpa", "kind: HorizontalPodAutoscaler");
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
        self.hpa_metric(metrics, "spec.metrics[0]")?;
        match h.int(spec, "spec", "minReplicas")? {
            Some(n) => self.a.put("min_replicas", n, "spec.minReplicas"),
            None => self.a.put("min_replicas", 1i64, "spec.minReplicas absent: default 1"),
        }
        let max = h
            .int(spec, "spec", "maxReplicas")?
            .ok_or_else(|| h.at("spec.maxReplicas", "is required"))?;
        self.a.put("max_replicas", max, "spec.maxReplicas");
        if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
            let v = self.behavior(b, "spec.behavior")?;
            self.a.put("behavior", v, "spec.behavior");
        }
        self.imp.read.push(format!(
            "{} ({})",
            "spec.minReplicas, spec.maxReplicas, spec.metrics, spec.behavior", h.file
        ));
        Ok(())
    }

    /// One HPA metric (Object, Pods or External) as a query, a metric type and a target.
    fn hpa_metric(&mut self, m: &Value, p: &str) -> Result<(), String> {
        let h = self.h;
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
        self.only(m, p, &["type", field])?;
        let fp = format!("{p}.{field}");
        let body = m.get(field).ok_or_else(|| h.at(&fp, "is required"))?;
        let mut keys = self.keys(&fp);
        keys.ignore(
            body,
            &["describedObject"],
            "the namespace the adapter sums over: the scenario's fleet",
        );
        self.check(keys, body, &["metric", "target"])?;
        let metric = body
            .get("metric")
            .ok_or_else(|| h.at(&format!("{fp}.metric"), "is required"))?;
        let query = self.adapter_query(metric, &format!("{fp}.metric"))?;
        self.a.put(
            "query",
            query,
            format!("{fp}.metric (prometheus-adapter: the series summed)"),
        );
        let target = body
            .get("target")
            .ok_or_else(|| h.at(&format!("{fp}.target"), "is required"))?;
        self.hpa_target(target, &format!("{fp}.target"), field == "pods")
    }

    /// An HPA metric's `target` (at `tp`): `Value` (not for a Pods metric) or `AverageValue`,
    /// and its quantity.
    fn hpa_target(&mut self, target: &Value, tp: &str, pods: bool) -> Result<(), String> {
        let h = self.h;
        self.only(target, tp, &["type", "value", "averageValue"])?;
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
        self.a.put("metric_type", tt.as_str(), format!("{tp}.type"));
        self.a.put("target", v, format!("{tp}.{key}"));
        Ok(())
    }

    /// A prometheus-adapter metric (`name`, `selector.matchLabels`) as the adapter's query.
    fn adapter_query(&mut self, metric: &Value, p: &str) -> Result<String, String> {
        let h = self.h;
        self.only(metric, p, &["name", "selector"])?;
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
            self.only(sel, &sp, &["matchLabels"])?;
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

    /// `behavior` (`scaleUp`, `scaleDown`) as the scenario's inline table.
    fn behavior(&mut self, b: &Value, p: &str) -> Result<toml_edit::Value, String> {
        self.only(b, p, &["scaleUp", "scaleDown"])?;
        let mut t = toml_edit::InlineTable::new();
        for (yaml, toml) in [("scaleUp", "scale_up"), ("scaleDown", "scale_down")] {
            if let Some(r) = b.get(yaml).filter(|r| !r.is_null()) {
                t.insert(toml, self.rules(r, &format!("{p}.{yaml}"))?);
            }
        }
        Ok(toml_edit::Value::InlineTable(t))
    }

    /// One direction's `stabilizationWindowSeconds`, `selectPolicy` and `policies`.
    fn rules(&mut self, r: &Value, p: &str) -> Result<toml_edit::Value, String> {
        let h = self.h;
        self.only(r, p, &["stabilizationWindowSeconds", "selectPolicy", "policies"])?;
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
                    self.only(pol, &pp, &["type", "value", "periodSeconds"])?;
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
    fn scaled_object(&mut self, spec: &Value, p: &str, chart_default: Option<&str>) -> Result<(), String> {
        let h = self.h;
        let mut keys = self.keys(p);
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
        self.check(keys, spec, &read)?;
        self.a.put("kind", "keda", format!("{p}: a ScaledObject"));
        self.trigger(spec, p, chart_default)?;
        for (yaml, toml, default) in [
            ("minReplicaCount", "min_replicas", "KEDA default 0"),
            ("maxReplicaCount", "max_replicas", "KEDA default 100"),
            ("pollingInterval", "polling_interval_s", "KEDA default 30"),
            ("cooldownPeriod", "cooldown_s", "KEDA default 300"),
            ("initialCooldownPeriod", "initial_cooldown_s", ""),
            ("idleReplicaCount", "idle_replica_count", ""),
        ] {
            match h.int(spec, p, yaml)? {
                Some(n) => self.a.put(toml, n, format!("{p}.{yaml}")),
                None if !default.is_empty() => {
                    let n: i64 = default.rsplit(' ').next().and_then(|d| d.parse().ok()).unwrap_or(0);
                    self.a.put(toml, n, format!("{p}.{yaml} absent: {default}"));
                }
                None => {}
            }
        }
        if let Some(f) = spec.get("fallback").filter(|f| !f.is_null()) {
            let v = self.fallback(f, &format!("{p}.fallback"))?;
            self.a.put("fallback", v, format!("{p}.fallback"));
        }
        if let Some(adv) = spec.get("advanced").filter(|v| !v.is_null()) {
            self.advanced(adv, &format!("{p}.advanced"))?;
        }
        self.imp.read.push(format!("{p} ({}: a ScaledObject)", h.file));
        Ok(())
    }

    /// KEDA's `fallback` (only the `static` behaviour: the fixed replica count).
    fn fallback(&mut self, f: &Value, p: &str) -> Result<toml_edit::Value, String> {
        let h = self.h;
        self.only(f, p, &["failureThreshold", "replicas", "behavior"])?;
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
    fn advanced(&mut self, adv: &Value, p: &str) -> Result<(), String> {
        let mut keys = self.keys(p);
        keys.ignore(
            adv,
            &["restoreToOriginalReplicaCount"],
            "acts when the ScaledObject is deleted",
        );
        self.check(keys, adv, &["horizontalPodAutoscalerConfig"])?;
        let Some(cfg) = adv.get("horizontalPodAutoscalerConfig").filter(|v| !v.is_null()) else {
            return Ok(());
        };
        let cp = format!("{p}.horizontalPodAutoscalerConfig");
        let mut keys = self.keys(&cp);
        keys.ignore(cfg, &["name"], "the generated HPA's name");
        self.check(keys, cfg, &["behavior"])?;
        if let Some(b) = cfg.get("behavior").filter(|b| !b.is_null()) {
            let bp = format!("{cp}.behavior");
            let v = self.behavior(b, &bp)?;
            self.a.put("behavior", v, bp);
        }
        Ok(())
    }

    /// The one Prometheus trigger (or the chart's default when `chart_default` and none).
    fn trigger(&mut self, spec: &Value, p: &str, chart_default: Option<&str>) -> Result<(), String> {
        let h = self.h;
        let tp = format!("{p}.triggers");
        let t = match (spec.get("triggers"), chart_default) {
            (None | Some(Value::Null), Some(q)) => {
                self.a.put(
                    "query",
                    q,
                    format!("{tp} absent: the chart's default trigger (its `model` label matches no vLLM series)"),
                );
                self.a.put(
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
        let mut keys = self.keys(&p0);
        keys.ignore(
            t,
            &["name", "authenticationRef", "useCachedMetrics"],
            "no effect on the decisions",
        );
        self.check(keys, t, &["type", "metadata", "metricType"])?;
        let ty = h.string(t, &p0, "type")?.unwrap_or_default();
        if ty != "prometheus" {
            return Err(h.at(
                &format!("{p0}.type"),
                &format!("{} is not modelled; expected prometheus", show(&Value::String(ty))),
            ));
        }
        let mp = format!("{p0}.metadata");
        let md = t.get("metadata").ok_or_else(|| h.at(&mp, "is required"))?;
        self.prometheus_metadata(md, &mp)?;
        if let Some(m) = h.string(t, &p0, "metricType")? {
            self.a.put("metric_type", m.as_str(), format!("{p0}.metricType"));
        }
        Ok(())
    }

    /// A Prometheus trigger's `metadata` (at `mp`): the query and thresholds; where and how
    /// KEDA reaches Prometheus is listed as ignored.
    fn prometheus_metadata(&mut self, md: &Value, mp: &str) -> Result<(), String> {
        let h = self.h;
        let mut keys = self.keys(mp);
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
        self.check(
            keys,
            md,
            &["query", "threshold", "activationThreshold", "ignoreNullValues"],
        )?;
        let q = h
            .string(md, mp, "query")?
            .ok_or_else(|| h.at(&format!("{mp}.query"), "is required"))?;
        self.a.put("query", q.trim(), format!("{mp}.query"));
        let th = h
            .float(md, mp, "threshold")?
            .ok_or_else(|| h.at(&format!("{mp}.threshold"), "is required"))?;
        self.a.put("threshold", th, format!("{mp}.threshold"));
        if let Some(v) = h.float(md, mp, "activationThreshold")? {
            self.a
                .put("activation_threshold", v, format!("{mp}.activationThreshold"));
        }
        if let Some(v) = h.boolean(md, mp, "ignoreNullValues")? {
            self.a.put("ignore_null_values", v, format!("{mp}.ignoreNullValues"));
        }
        Ok(())
    }
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
