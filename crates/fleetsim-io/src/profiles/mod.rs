//! Model/GPU/TP profiles: step-time coefficients from published calibrations and the model
//! shape that sizes the KV cache, so a backend group can say `profile =
//! "llama-3.1-8b/h100/tp1"` instead of hand-copied numbers.
//!
//! Two kinds of profile, each citing its source file and commit:
//! * **fitted**: BLIS (`inference-sim/inference-sim`) "blackbox" coefficients, fitted by
//!   its authors against GuideLLM sweeps of real vLLM. `best_loss` is BLIS's own fitting
//!   metric for the row (`cmd/default_config.go`: "Calibration metric from coefficient
//!   fitting"); BLIS does not document its unit, so it is shown as published.
//! * **roofline**: no published fit exists for the combination (BLIS fits no L40S row), so
//!   the coefficients are derived from BLIS's roofline inputs ([`roofline`]) and flagged
//!   as uncalibrated.
//!
//! KV capacity is derived the way vLLM derives it (see [`kv_blocks`]).
//!
//! Owns: the profile table and the KV-capacity derivation. May not see: anything of a run.
//! Invariant: each profile names its source and commit; numbers are never tuned to a result.

pub mod auto;
pub mod file;
pub mod gpus;
pub mod kv;
pub mod models;

pub use gpus::{GPUS, Gpu};
pub use kv::{KvInputs, kv_blocks};
pub use models::{MODELS, ModelShape};

use fleetsim_core::backend::perf::StepTimeModel;

/// BLIS commit before PR #553 (Llama-3.1-8B vLLM 0.8.4 rows, with `total_kv_blocks`).
pub const BLIS_PRE_553: &str = "644fd8b6cf805f05183dcc0f44073b07e3c95c2a";
/// BLIS commit before `90522ded` removed the blackbox backend (last tree with its rows).
pub const BLIS_LAST_BLACKBOX: &str = "b563c4405b7847eaf682c6d603065c1faca3ca03";
/// BLIS HEAD read for `hardware_config.json` and `sim/latency/roofline.go`.
pub const BLIS_HEAD: &str = "f90a1e3a6787da17c2cd463dab6fb2660b1b1760";

/// Where a profile's coefficients come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Source {
    /// A published BLIS blackbox fit.
    Fitted {
        /// The BLIS commit whose `defaults.yaml` holds the row.
        commit: &'static str,
        /// The vLLM image the fit was made against.
        vllm: &'static str,
        /// BLIS's `best_loss` for the row, when published.
        best_loss: Option<f64>,
    },
    /// Derived from BLIS's roofline inputs ([`roofline`]); not a fit.
    Roofline,
    /// The physics model for a deployment with the shipped coefficients
    /// (`profile = "auto"`).
    Physics(auto::Deployment),
}

/// One model/GPU/TP combination.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// `<model>/<gpu>/tp<N>`.
    pub id: String,
    /// The model.
    pub model: ModelShape,
    /// The GPU.
    pub gpu: Gpu,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Step-time coefficients.
    pub step_time: StepTimeModel,
    /// Their source.
    pub source: Source,
}

impl Profile {
    /// The source as one line (`sim profiles`, scenario comments).
    pub fn citation(&self) -> String {
        match self.source {
            Source::Fitted { commit, vllm, .. } => format!(
                "BLIS blackbox fit, inference-sim/inference-sim defaults.yaml @ {}, vLLM {vllm}",
                &commit[..7]
            ),
            Source::Roofline => format!(
                "roofline from BLIS hardware_config.json + sim/latency/roofline.go @ {} (uncalibrated)",
                &BLIS_HEAD[..7]
            ),
            Source::Physics(_) => {
                "physics model from the model's shape and the GPU's datasheet, shipped coefficients (sim profiles --physics)".into()
            }
        }
    }

    /// The auto profile of a deployment: the physics model with the shipped coefficients.
    pub fn auto(d: auto::Deployment) -> Profile {
        Profile {
            id: d.id(),
            model: *d.model,
            gpu: *d.gpu,
            tp: d.parallel.tp,
            step_time: d.step_time(&auto::SHIPPED),
            source: Source::Physics(d),
        }
    }

    /// KV blocks at vLLM's defaults (utilization 0.9, 16-token blocks, bf16 cache, no
    /// activation reserve): what `kv_blocks` defaults to for a group with this profile.
    pub fn default_kv_blocks(&self) -> Result<u32, String> {
        kv_blocks(&KvInputs::for_profile(self, 0.9, 16, 2, 0.0))
    }
}

// (model, gpu, tp, [beta0, beta1, beta2] µs, commit, vLLM image, best_loss) as published.
type FitRow = (
    &'static str,
    &'static str,
    u32,
    [f64; 3],
    &'static str,
    &'static str,
    Option<f64>,
);

/// BLIS blackbox rows (`defaults.yaml`, `models[]`, `beta_coeffs` and `best_loss`).
const FITS: &[FitRow] = &[
    (
        "llama-3.1-8b",
        "h100",
        1,
        [5752.705191348184, 17.25086436834028, 5.999143920128404],
        BLIS_PRE_553,
        "v0.8.4",
        Some(379.0472762050282),
    ),
    (
        "llama-3.1-8b",
        "h100",
        2,
        [6910.420479880494, 17.67057489844186, 2.8377471109943855],
        BLIS_PRE_553,
        "v0.8.4",
        Some(424.54516713463454),
    ),
    (
        "llama-3.1-8b",
        "a100",
        1,
        [16441.531547147923, 47.837412108198656, 18.20560632171683],
        BLIS_PRE_553,
        "v0.8.4",
        Some(335.98105991131),
    ),
    (
        "llama-3.1-8b",
        "a100",
        2,
        [8001.630597822392, 26.362876080324924, 14.969035206354745],
        BLIS_PRE_553,
        "v0.8.4",
        Some(827.2597345491479),
    ),
    (
        "qwen2.5-7b",
        "h100",
        1,
        [7051.796874715078, 19.538416565504026, 25.431830886933543],
        BLIS_LAST_BLACKBOX,
        "v0.11.0",
        Some(489.86573167272115),
    ),
    (
        "qwen2.5-7b",
        "a100",
        1,
        [10041.674273463475, 81.12095792183437, 59.98624422876753],
        BLIS_LAST_BLACKBOX,
        "v0.8.4",
        Some(841.3731827421983),
    ),
    (
        "qwen3-14b",
        "h100",
        1,
        [13578.186662538783, 39.44465647189146, 27.3227753326911],
        BLIS_LAST_BLACKBOX,
        "v0.11.0",
        None,
    ),
    (
        "llama-3.3-70b",
        "h100",
        4,
        [12601.271149123822, 76.42284100369776, 66.84396200500741],
        BLIS_LAST_BLACKBOX,
        "v0.8.4",
        Some(295.605845726634),
    ),
    (
        "llama-3.3-70b",
        "h100",
        8,
        [14140.825207623911, 10.025593497696502, 19.401640879612657],
        BLIS_LAST_BLACKBOX,
        "v0.8.4",
        Some(221.029873173539),
    ),
];

/// Combinations BLIS has no fit for, derived with [`roofline`].
const ROOFLINE: &[(&str, &str, u32)] = &[
    ("llama-3.1-8b", "l40s", 1),
    ("qwen2.5-7b", "l40s", 1),
    ("qwen3-14b", "l40s", 1),
    ("qwen3-14b", "a100", 1),
    ("llama-3.3-70b", "l40s", 4),
    ("llama-3.3-70b", "a100", 4),
];

/// The context length at which a roofline profile prices a decode token's KV read.
pub const ROOFLINE_DECODE_CONTEXT_TOKENS: u64 = 1024;

/// Linear coefficients from BLIS's roofline inputs (`sim/latency/roofline.go`):
/// * `beta0` = one read of the rank's weights at peak bandwidth (the floor of any step);
/// * `beta1` = a prefill token's matrix FLOPs (2 per layer-matrix parameter, BLIS's
///   `GemmOps`) over TP at `mfuPrefill` of peak;
/// * `beta2` = a decode token's KV read at [`ROOFLINE_DECODE_CONTEXT_TOKENS`] of context
///   plus its KV write, over TP, at peak bandwidth.
///
/// BLIS takes the max of compute and memory time per step; a sum of linear terms is what
/// the step-time model can hold, so large compute-bound batches are underestimated.
pub fn roofline(m: &ModelShape, g: &Gpu, tp: u32) -> StepTimeModel {
    let mfu = g
        .mfu_prefill
        .expect("roofline profiles name GPUs with BLIS's mfuPrefill");
    let tp = f64::from(tp);
    let bw = g.bw_tbs * 1e12;
    let kv_per_token = 2.0 * f64::from(m.layers) * f64::from(m.kv_heads * m.head_dim) * 2.0;
    let ctx = ROOFLINE_DECODE_CONTEXT_TOKENS as f64;
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    StepTimeModel {
        beta0_us: round2(m.weight_bytes() as f64 / tp / bw * 1e6),
        beta1_us: round2(2.0 * m.layer_matrix_params() as f64 / tp / (g.tflops * 1e12 * mfu) * 1e6),
        beta2_us: round2(kv_per_token * (ctx + 1.0) / tp / bw * 1e6),
        beta3_us: 0.0,
        physics: None,
    }
}

fn model(name: &str) -> &'static ModelShape {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .expect("profile tables name known models")
}

fn gpu(name: &str) -> &'static Gpu {
    GPUS.iter()
        .find(|g| g.name == name)
        .expect("profile tables name known GPUs")
}

/// Every profile, fitted first, each block in table order.
pub fn all() -> Vec<Profile> {
    let mut out: Vec<Profile> = FITS
        .iter()
        .map(|&(m, g, tp, b, commit, vllm, best_loss)| Profile {
            id: format!("{m}/{g}/tp{tp}"),
            model: *model(m),
            gpu: *gpu(g),
            tp,
            step_time: StepTimeModel {
                beta0_us: b[0],
                beta1_us: b[1],
                beta2_us: b[2],
                beta3_us: 0.0,
                physics: None,
            },
            source: Source::Fitted {
                commit,
                vllm,
                best_loss,
            },
        })
        .collect();
    out.extend(ROOFLINE.iter().map(|&(m, g, tp)| Profile {
        id: format!("{m}/{g}/tp{tp}"),
        model: *model(m),
        gpu: *gpu(g),
        tp,
        step_time: roofline(model(m), gpu(g), tp),
        source: Source::Roofline,
    }));
    out
}

/// The profile with this id (case-insensitive), or a message listing the known ones.
pub fn find(id: &str) -> Result<Profile, String> {
    let want = id.trim().to_ascii_lowercase();
    let all = all();
    match all.iter().find(|p| p.id == want) {
        Some(p) => Ok(p.clone()),
        None => Err(format!(
            "unknown profile `{id}`; known: {} (see `sim profiles`)",
            all.iter().map(|p| p.id.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The model shape whose name or Hugging Face repository is `name` (case-insensitive,
/// `-Instruct` and a quantisation suffix optional): how `sim import` maps `vllm serve
/// MODEL` to a profile.
pub fn model_for(name: &str) -> Option<&'static ModelShape> {
    models::resolve(name).map(|(m, _)| m)
}

/// Profiles as an aligned table (`sim profiles`).
pub fn table() -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let rows = all().into_iter().map(|p| {
        let kv = p
            .default_kv_blocks()
            .map(|b| b.to_string())
            .unwrap_or_else(|_| "none".into());
        let loss = match p.source {
            Source::Fitted { best_loss: Some(l), .. } => format!("{l:.1}"),
            Source::Fitted { best_loss: None, .. } => "n/p".into(),
            Source::Roofline | Source::Physics(_) => "-".into(),
        };
        vec![
            p.id.clone(),
            format!("{:.1} GiB", p.model.weight_bytes() as f64 / f64::from(1u32 << 30)),
            kv,
            format!("{:.2}", p.step_time.beta0_us),
            format!("{:.2}", p.step_time.beta1_us),
            format!("{:.2}", p.step_time.beta2_us),
            loss,
            p.citation(),
        ]
    });
    o.push_str(&crate::output::render(
        &[
            "profile",
            "weights",
            "kv_blocks",
            "beta0_us",
            "beta1_us",
            "beta2_us",
            "best_loss",
            "source",
        ],
        rows,
        &[1, 2, 3, 4, 5, 6],
    ));
    let _ = writeln!(
        o,
        "\nkv_blocks: vLLM's derivation at gpu_memory_utilization 0.9, 16-token blocks, bf16 KV, no activation reserve (docs/your-fleet.md).\nbest_loss: BLIS's fitting metric as published (unit undocumented); n/p = not published; - = roofline, not a fit."
    );
    o
}

/// Profiles as JSON (`sim profiles --json`).
pub fn json() -> serde_json::Value {
    let rows: Vec<serde_json::Value> = all()
        .iter()
        .map(|p| {
            let (kind, commit, vllm, loss) = match p.source {
                Source::Fitted {
                    commit,
                    vllm,
                    best_loss,
                } => ("fitted", commit, Some(vllm), best_loss),
                Source::Roofline | Source::Physics(_) => ("roofline", BLIS_HEAD, None, None),
            };
            serde_json::json!({
                "id": p.id,
                "model": p.model.name,
                "hf_repo": p.model.hf_repo,
                "gpu": p.gpu.name,
                "tp": p.tp,
                "gpu_memory_gib": p.gpu.memory_gib,
                "weight_bytes": p.model.weight_bytes(),
                "layers": p.model.layers,
                "kv_heads": p.model.kv_heads,
                "head_dim": p.model.head_dim,
                "kv_blocks_default": p.default_kv_blocks().ok(),
                "beta0_us": p.step_time.beta0_us,
                "beta1_us": p.step_time.beta1_us,
                "beta2_us": p.step_time.beta2_us,
                "kind": kind,
                "source_repo": "inference-sim/inference-sim",
                "source_commit": commit,
                "vllm": vllm,
                "best_loss": loss,
                "citation": p.citation(),
            })
        })
        .collect();
    serde_json::Value::Array(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_least_eight_profiles_covering_gpus_and_sizes() {
        let all = all();
        assert!(all.len() >= 8);
        for g in ["h100", "a100", "l40s"] {
            for m in ["llama-3.1-8b", "qwen3-14b", "llama-3.3-70b"] {
                assert!(all.iter().any(|p| p.gpu.name == g && p.model.name == m), "{m} on {g}");
            }
        }
        let ids: std::collections::BTreeSet<&str> = all.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids.len(), all.len(), "ids are unique");
    }

    #[test]
    fn default_profile_is_the_shipped_default() {
        let p = find("Llama-3.1-8B/H100/tp1").unwrap();
        let d = StepTimeModel::default();
        assert!((p.step_time.beta0_us - d.beta0_us).abs() < 0.01);
        assert!((p.step_time.beta1_us - d.beta1_us).abs() < 0.01);
        assert!((p.step_time.beta2_us - d.beta2_us).abs() < 0.01);
        // And its capacity is the shipped default kv_blocks (BLIS total_kv_blocks 29,205).
        assert_eq!(p.default_kv_blocks(), Ok(29_205));
        assert!(
            find("llama-3.1-8b/h100/tp3")
                .unwrap_err()
                .contains("known: llama-3.1-8b/h100/tp1")
        );
    }

    #[test]
    fn roofline_by_hand() {
        // 8B on L40S, TP1: 16,060,522,496 B / 0.864e12 B/s = 18,588.57 µs;
        // 2 x 6,979,321,856 matrix params / (362.05e12 x 0.32) = 120.48 µs per prefill token;
        // 131,072 B/token x 1025 / 0.864e12 = 155.50 µs per decode token.
        let m = model_for("meta-llama/Llama-3.1-8B-Instruct").unwrap();
        assert_eq!(m.layer_matrix_params(), 6_979_321_856);
        let r = roofline(m, gpu("l40s"), 1);
        assert_eq!((r.beta0_us, r.beta1_us, r.beta2_us), (18588.57, 120.48, 155.5));
    }

    #[test]
    fn roofline_against_the_fit_where_both_exist() {
        // docs/your-fleet.md: on H100 the roofline derivation gives 4794 / 31.4 / 40.1 µs
        // against BLIS's fitted 5753 / 17.3 / 6.0 for Llama-3.1-8B.
        let r = roofline(model_for("llama-3.1-8b").unwrap(), gpu("h100"), 1);
        assert_eq!(
            (
                r.beta0_us.round(),
                (r.beta1_us * 10.0).round(),
                (r.beta2_us * 10.0).round()
            ),
            (4794.0, 314.0, 401.0)
        );
    }

    #[test]
    fn model_names_map_from_vllm_serve_arguments() {
        assert_eq!(model_for("Qwen/Qwen3-14B").unwrap().name, "qwen3-14b");
        assert_eq!(
            model_for("meta-llama/Llama-3.1-8B-Instruct").unwrap().name,
            "llama-3.1-8b"
        );
        assert_eq!(model_for("llama-3.3-70b").unwrap().name, "llama-3.3-70b");
        assert!(model_for("mistralai/Mistral-7B-Instruct-v0.2").is_none());
    }
}
