//! LMBench's per-request CSV (LMCache's `lmcache-benchmark`, as llm-d-benchmark runs it):
//! one row per request, `prompt_tokens, generation_tokens, ttft, generation_time,
//! launch_time, finish_time` (seconds; launch and finish are Unix time), one file per
//! offered load. The client's times are all there is: a request is "queued" when
//! launched, its first token at `launch + ttft`, its last at `finish`. Rows may be in any
//! order (they are sorted by launch); token counts may be written as `75.0`.
//!
//! The file records no engine. A Kubernetes Deployment beside it (`deployment.yaml`, as
//! llm-d-benchmark keeps them) gives the model, the `vllm serve` flags, the replicas and
//! the GPU product ([`deployment`]); otherwise the flags of `sim validate` must.
//! The engine series follow from the token times as for `vllm bench serve`: prompt tokens
//! at the first token, generation tokens spread evenly from the first token to the last.

use std::path::Path;

use serde_json::Value;

use super::{
    Client, EngineMeta, MeasuredRequest, Measurement, TraceError, check_clock, check_span, err, finite, read_bounded,
    series_from_tokens, tokens,
};

/// The columns, in the order LMBench writes them.
pub const COLUMNS: [&str; 6] = [
    "prompt_tokens",
    "generation_tokens",
    "ttft",
    "generation_time",
    "launch_time",
    "finish_time",
];

/// The name of the deployment file read beside a CSV.
pub const DEPLOYMENT_FILE: &str = "deployment.yaml";

/// True when `path` is a CSV whose header names LMBench's columns.
pub fn sniff(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let head = text.lines().next().unwrap_or("");
    COLUMNS.iter().all(|c| head.split(',').any(|h| h.trim() == *c))
}

/// Reads an LMBench CSV (and the `deployment.yaml` beside it, when there is one).
pub fn read(path: &Path) -> Result<Measurement, TraceError> {
    let file = path.display().to_string();
    let text = read_bounded(path)?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| err(&file, Some(1), None, e.to_string()))?
        .clone();
    let mut cols = [0usize; 6];
    for (k, name) in COLUMNS.iter().enumerate() {
        cols[k] = headers
            .iter()
            .position(|h| h.trim() == *name)
            .ok_or_else(|| err(&file, Some(1), Some(name), "missing column (an LMBench CSV)"))?;
    }
    let mut rows: Vec<MeasuredRequest> = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let line = i as u64 + 2;
        let rec = rec.map_err(|e| err(&file, Some(line), None, e.to_string()))?;
        let get = |k: usize| -> Result<f64, TraceError> {
            let s = rec
                .get(cols[k])
                .ok_or_else(|| err(&file, Some(line), Some(COLUMNS[k]), "missing"))?;
            let x: f64 = s.trim().parse().map_err(|_| {
                err(
                    &file,
                    Some(line),
                    Some(COLUMNS[k]),
                    format!("not a number: {}", crate::quote::quote(s)),
                )
            })?;
            finite(&file, line, COLUMNS[k], x)
        };
        let (ttft, launch, finish) = (get(2)?, get(4)?, get(5)?);
        if ttft <= 0.0 {
            return Err(err(&file, Some(line), Some("ttft"), format!("{ttft} s: not positive")));
        }
        let out = tokens(&file, line, "generation_tokens", get(1)?)?;
        let r = MeasuredRequest {
            id: format!("row-{line}"),
            line,
            queued_s: launch,
            input_tokens: tokens(&file, line, "prompt_tokens", get(0)?)?,
            output_tokens: out,
            scheduled_s: None,
            first_token_s: launch + ttft,
            last_token_s: finish,
        };
        check_clock(&file, &r)?;
        rows.push(r);
    }
    if rows.is_empty() {
        return Err(err(&file, None, None, "no requests"));
    }
    rows.sort_by(|a, b| a.queued_s.total_cmp(&b.queued_s).then(a.line.cmp(&b.line)));
    let t0 = rows[0].queued_s;
    for r in &mut rows {
        r.queued_s -= t0;
        r.first_token_s -= t0;
        r.last_token_s -= t0;
    }
    let requests = rows;
    let mut notes =
        vec!["times are the client's (launch, first token, finish); the series are derived from them".to_string()];
    let mut engine = EngineMeta {
        started_at: Some(format!("{t0:.3} (Unix s)")),
        ..EngineMeta::default()
    };
    let dep = path.parent().map(|d| d.join(DEPLOYMENT_FILE));
    if let Some(dep) = dep.filter(|d| d.is_file()) {
        let d = deployment(&dep)?;
        notes.push(format!("engine from {}: {}", dep.display(), d.describe()));
        engine = d.apply(engine);
    }
    let mut m = Measurement {
        source: file,
        format: "lmbench",
        engine,
        client: Client::Open,
        requests,
        series: None,
        notes,
    };
    // The span bounded before the series is sized by it.
    check_span(&m.source, &m, ["launch_time", "ttft", "finish_time"])?;
    // The output tokens spread evenly from the first token to the finish.
    let token_times: Vec<Vec<(f64, u32)>> = m
        .requests
        .iter()
        .map(|r| {
            let out = r.output_tokens;
            let gap = if out > 1 {
                (r.last_token_s - r.first_token_s) / f64::from(out - 1)
            } else {
                0.0
            };
            (0..out).map(|k| (r.first_token_s + gap * f64::from(k), 1)).collect()
        })
        .collect();
    m.series = Some(series_from_tokens(
        &m.requests,
        &token_times,
        super::bench::DERIVED_INTERVAL_S,
    ));
    Ok(m)
}

/// What a Kubernetes Deployment of `vllm serve` says about the engine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Deployment {
    /// `spec.replicas`: engines behind one Service.
    pub replicas: Option<u32>,
    /// The `nvidia.com/gpu.product` the pods are pinned to.
    pub gpu: Option<String>,
    /// The container's `vllm serve ...` command line.
    pub vllm_command: Option<String>,
    /// The container image.
    pub image: Option<String>,
}

impl Deployment {
    /// One line for the notes.
    pub fn describe(&self) -> String {
        format!(
            "replicas {}, GPU {}, image {}, `{}`",
            self.replicas.map_or("-".into(), |r| r.to_string()),
            self.gpu.as_deref().unwrap_or("-"),
            self.image.as_deref().unwrap_or("-"),
            self.vllm_command.as_deref().unwrap_or("-")
        )
    }

    /// The engine metadata with the deployment's facts.
    pub fn apply(&self, mut e: EngineMeta) -> EngineMeta {
        e.replicas = self.replicas.or(e.replicas);
        e.gpu = self.gpu.clone().or(e.gpu);
        e.vllm_command = self.vllm_command.clone().or(e.vllm_command);
        if let Some(cmd) = &self.vllm_command {
            let words = shell_words(cmd);
            if let Some(i) = words.iter().position(|w| w == "serve") {
                e.model = words.get(i + 1).cloned().or(e.model);
            }
        }
        e
    }
}

fn shell_words(s: &str) -> Vec<String> {
    s.split_whitespace()
        .filter(|w| *w != "\\")
        .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_string())
        .collect()
}

/// Reads a Kubernetes Deployment (YAML) of `vllm serve`: replicas, the GPU product of its
/// node affinity, the first container's command line and image.
pub fn deployment(path: &Path) -> Result<Deployment, TraceError> {
    let file = path.display().to_string();
    let text = read_bounded(path)?;
    let v: Value = serde_yaml_ng::from_str(&text).map_err(|e| {
        err(
            &file,
            e.location().map(|l| l.line() as u64),
            None,
            format!("not YAML: {e}"),
        )
    })?;
    if v.get("kind").and_then(Value::as_str) != Some("Deployment") {
        return Err(err(&file, None, Some("kind"), "not a Kubernetes Deployment"));
    }
    let spec = &v["spec"];
    let pod = &spec["template"]["spec"];
    let container = pod["containers"]
        .get(0)
        .ok_or_else(|| err(&file, None, Some("spec.template.spec.containers"), "no container"))?;
    let strings = |x: &Value| -> Vec<String> {
        x.as_array()
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    let mut words = strings(&container["command"]);
    words.extend(strings(&container["args"]));
    let joined = words.join(" ").replace("\\\n", " ").replace('\n', " ");
    let vllm_command = joined.find("vllm serve").map(|i| {
        joined[i..]
            .split_whitespace()
            .filter(|w| *w != "\\")
            .collect::<Vec<_>>()
            .join(" ")
    });
    let gpu = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["matchExpressions"].as_array().cloned().unwrap_or_default())
        .find(|e| e["key"].as_str() == Some("nvidia.com/gpu.product"))
        .and_then(|e| e["values"].get(0).and_then(Value::as_str).map(str::to_string));
    let replicas = match spec.get("replicas") {
        None | Some(Value::Null) => None,
        Some(r) => Some(
            r.as_u64()
                .filter(|&x| (1..=4096).contains(&x))
                .ok_or_else(|| err(&file, None, Some("spec.replicas"), format!("not a count ({r})")))?
                as u32,
        ),
    };
    Ok(Deployment {
        replicas,
        gpu,
        vllm_command,
        image: container["image"].as_str().map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sort_by_launch_and_times_follow_the_client() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("LMBench_x.csv");
        std::fs::write(
            &p,
            "prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time\n100,3.0,0.5,1.0,1000.5,1002.0\n50,1,0.25,0.0,1000.0,1000.25\n",
        )
        .unwrap();
        assert!(sniff(&p));
        let m = read(&p).unwrap();
        assert_eq!(m.format, "lmbench");
        assert_eq!(m.requests.len(), 2);
        let (a, b) = (&m.requests[0], &m.requests[1]);
        assert_eq!((a.input_tokens, a.queued_s, a.ttft_s()), (50, 0.0, 0.25));
        assert_eq!((b.input_tokens, b.output_tokens, b.queued_s), (100, 3, 0.5));
        assert_eq!((b.first_token_s, b.last_token_s), (1.0, 2.0));
        // A missing column names itself; a bad count names its line.
        std::fs::write(&p, "prompt_tokens,ttft\n1,2\n").unwrap();
        assert!(read(&p).unwrap_err().to_string().contains("generation_tokens"));
        std::fs::write(
            &p,
            "prompt_tokens,generation_tokens,ttft,generation_time,launch_time,finish_time\n100,2.5,0.5,1.0,1000.5,1002.0\n",
        )
        .unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains(":2") && e.contains("generation_tokens"), "{e}");
    }

    #[test]
    fn a_deployment_names_model_flags_replicas_and_gpu() {
        let d = tempfile::tempdir().unwrap();
        let y = d.path().join(DEPLOYMENT_FILE);
        std::fs::write(
            &y,
            "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 2\n  template:\n    spec:\n      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n            - matchExpressions:\n              - key: nvidia.com/gpu.product\n                operator: In\n                values:\n                - NVIDIA-A100-SXM4-80GB\n      containers:\n      - args:\n        - vllm serve meta-llama/Llama-3.1-70B-Instruct --port 80 --max-model-len\n          20000 --gpu-memory-utilization 0.95 --tensor-parallel-size\n          2\n        command:\n        - /bin/sh\n        - -c\n        image: vllm/vllm-openai:latest\n",
        )
        .unwrap();
        let dep = deployment(&y).unwrap();
        assert_eq!(dep.replicas, Some(2));
        assert_eq!(dep.gpu.as_deref(), Some("NVIDIA-A100-SXM4-80GB"));
        assert_eq!(
            dep.vllm_command.as_deref(),
            Some(
                "vllm serve meta-llama/Llama-3.1-70B-Instruct --port 80 --max-model-len 20000 --gpu-memory-utilization 0.95 --tensor-parallel-size 2"
            )
        );
        let e = dep.apply(EngineMeta::default());
        assert_eq!(e.model.as_deref(), Some("meta-llama/Llama-3.1-70B-Instruct"));
        std::fs::write(&y, "kind: Service\n").unwrap();
        assert!(
            deployment(&y)
                .unwrap_err()
                .to_string()
                .contains("not a Kubernetes Deployment")
        );
    }
}
