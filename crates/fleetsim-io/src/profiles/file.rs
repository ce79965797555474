//! Profile files: a profile `sim calibrate` fitted from a fleet's own measurements, named
//! in scenarios as `profile = "file:PATH"` (relative to the scenario's folder) and listed
//! by `sim profiles PATH...`.
//!
//! ```toml
//! [profile]
//! name = "rtx4090-llama-3.1-8b"
//! model = "meta-llama/Llama-3.1-8B"
//! gpu = "NVIDIA GeForce RTX 4090"
//! tensor_parallel_size = 1
//! vllm_version = "0.19.0"
//! measured_at = "2026-08-20T23:19:39.992496Z"
//! source = "traces/vllm-runs/RTX4090_Llama-3.1-8B"
//!
//! [step_time]          # µs: beta0 + beta1 x prefill + beta2 x decode + beta3 x context tokens
//! beta0_us = 12000.0
//! beta1_us = 60.0
//! beta2_us = 90.0
//! beta3_us = 0.1
//!
//! # or, fitted as corrections to the physics model (replaces [step_time]):
//! # [physics]
//! # model = "llama-3.1-8b"
//! # dtype = "bf16"
//! # gpu = "rtx-4090"
//! # tp = 1
//! # dp = 1
//! # kv_dtype_bytes = 2
//! # [physics.coefficients]   # the shipped ones where absent (`sim profiles --physics`)
//! # mem_efficiency = 0.8
//!
//! [engine]             # what the measured engine ran with
//! max_num_seqs = 256
//! max_num_batched_tokens = 2048
//! kv_blocks = 2587
//! block_size_tokens = 16
//! prefix_caching = true
//! reserve_full_isl = true
//!
//! [fit]                # how well the engine series were reproduced
//! loss = 0.05
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use fleetsim_core::backend::perf::StepTimeModel;

/// The prefix that names a profile file in a scenario.
pub const FILE_PREFIX: &str = "file:";

/// `[profile]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct About {
    /// Short name (shown by `sim profiles`).
    pub name: String,
    /// The model as served.
    pub model: Option<String>,
    /// The GPU.
    pub gpu: Option<String>,
    /// Tensor-parallel size.
    pub tensor_parallel_size: Option<u32>,
    /// vLLM version measured.
    pub vllm_version: Option<String>,
    /// When the measurement started.
    pub measured_at: Option<String>,
    /// The measurement fitted.
    pub source: String,
    /// The tool that wrote the file.
    pub generator: String,
}

/// `[step_time]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepTime {
    /// µs per step.
    pub beta0_us: f64,
    /// µs per prefill token.
    pub beta1_us: f64,
    /// µs per decode token.
    pub beta2_us: f64,
    /// µs per token of context attended (0 when absent).
    #[serde(default)]
    pub beta3_us: f64,
}

/// `[engine]`: the configuration the measured engine ran with (defaults for a scenario's
/// group that names the profile).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Engine {
    /// `--max-num-seqs`.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: u32,
    /// Usable KV blocks (vLLM's `num_gpu_blocks` less the null block).
    pub kv_blocks: u32,
    /// Where `kv_blocks` came from.
    pub kv_blocks_from: String,
    /// Tokens per block.
    pub block_size_tokens: u32,
    /// Prefix caching.
    pub prefix_caching: bool,
    /// `scheduler_reserve_full_isl`.
    pub reserve_full_isl: bool,
}

/// `[fit]`: the fit's error and what it took (deterministic figures only; CPU time is
/// printed, not stored, so the file is the same on every machine).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fit {
    /// The minimised loss: the sum of the terms below.
    pub loss: f64,
    /// Normalised RMSE of cumulative prompt tokens (over the measured total).
    pub cum_prompt_nrmse: Option<f64>,
    /// Normalised RMSE of cumulative generation tokens.
    pub cum_generation_nrmse: Option<f64>,
    /// RMSE of running over the measured mean.
    pub running_nrmse: Option<f64>,
    /// RMSE of waiting over the measured mean (at least 1).
    pub waiting_nrmse: Option<f64>,
    /// The optimiser and its settings.
    pub method: String,
    /// Simulations run.
    pub simulations: u64,
    /// Optimiser iterations.
    pub iterations: u64,
}

/// `[physics]`: the physics step-time model for a model on a GPU, with the coefficients
/// the fit corrected (replaces `[step_time]` when present).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Physics {
    /// Model shape (`sim profiles --models`).
    pub model: String,
    /// Layer weights' dtype: `bf16`, `fp8` or `int4`.
    pub dtype: String,
    /// GPU datasheet (`sim profiles --gpus`).
    pub gpu: String,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Data-parallel engines sharing a MoE model's experts.
    pub dp: u32,
    /// KV cache bytes per element.
    pub kv_dtype_bytes: u32,
    /// vLLM's async scheduling (the per-step CPU overhead hidden).
    #[serde(default)]
    pub async_scheduling: bool,
    /// The coefficients, by name (`mem_efficiency`, ..., as `sim profiles --physics`
    /// lists them).
    pub coefficients: std::collections::BTreeMap<String, f64>,
}

impl Physics {
    /// The deployment and coefficients, or what is wrong (naming the key).
    pub fn resolve(&self) -> Result<(super::auto::Deployment, super::auto::Coefficients), String> {
        let (model, _) = super::models::resolve(&self.model)
            .ok_or_else(|| format!("physics.model: unknown model `{}`", self.model))?;
        let dtype = match self.dtype.as_str() {
            "bf16" => super::models::WeightDtype::Bf16,
            "fp8" => super::models::WeightDtype::Fp8,
            "int4" => super::models::WeightDtype::Int4,
            d => return Err(format!("physics.dtype: `{d}` is not bf16, fp8 or int4")),
        };
        let gpu = super::gpus::resolve(&self.gpu).ok_or_else(|| format!("physics.gpu: unknown GPU `{}`", self.gpu))?;
        if self.tp == 0 || self.dp == 0 || !matches!(self.kv_dtype_bytes, 1 | 2) {
            return Err("physics.tp and physics.dp must be at least 1, physics.kv_dtype_bytes 1 or 2".into());
        }
        let mut v = [0.0; super::auto::COEFFICIENTS];
        for (i, (name, default)) in super::auto::SHIPPED.named().iter().enumerate() {
            let x = self.coefficients.get(*name).copied().unwrap_or(*default);
            if !x.is_finite() || x < 0.0 || (name.ends_with("efficiency") && !(x > 0.0 && x <= 1.0)) {
                return Err(format!("physics.coefficients.{name}: {x} is out of range"));
            }
            v[i] = x;
        }
        if let Some(k) = self
            .coefficients
            .keys()
            .find(|k| !super::auto::SHIPPED.named().iter().any(|(n, _)| n == k))
        {
            return Err(format!("physics.coefficients.{k}: unknown coefficient"));
        }
        Ok((
            super::auto::Deployment {
                model,
                dtype,
                gpu,
                parallel: super::auto::Parallel {
                    tp: self.tp,
                    dp: self.dp,
                },
                kv_dtype_bytes: self.kv_dtype_bytes,
                async_scheduling: self.async_scheduling,
            },
            super::auto::Coefficients::from_values(&v),
        ))
    }
}

/// A profile file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// `[profile]`.
    pub profile: About,
    /// `[step_time]` (unused when `[physics]` is present).
    #[serde(default)]
    pub step_time: StepTime,
    /// `[physics]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physics: Option<Physics>,
    /// `[engine]`.
    pub engine: Engine,
    /// `[fit]`.
    pub fit: Fit,
}

impl ProfileFile {
    /// The step-time model: the physics model's when the file has `[physics]`.
    pub fn step_time_model(&self) -> StepTimeModel {
        if let Some((d, c)) = self.physics.as_ref().and_then(|p| p.resolve().ok()) {
            return d.step_time(&c);
        }
        StepTimeModel {
            beta0_us: self.step_time.beta0_us,
            beta1_us: self.step_time.beta1_us,
            beta2_us: self.step_time.beta2_us,
            beta3_us: self.step_time.beta3_us,
            physics: None,
        }
    }

    /// The file's text, with a header comment.
    pub fn to_toml(&self) -> String {
        format!(
            "# A fleetsim profile fitted by `sim calibrate` from a real vLLM engine's series.\n# Name it in a scenario: profile = \"file:PATH\" (relative to the scenario's folder).\n{}",
            toml::to_string(self).expect("a profile serialises")
        )
    }

    /// Parses a profile file; errors name the file, line and key.
    pub fn parse(text: &str, file: &str) -> Result<ProfileFile, String> {
        let p: ProfileFile = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].lines().count().max(1))
                .unwrap_or(1);
            format!("{}:{line}: {}", crate::quote::escape(file), e.message())
        })?;
        let s = &p.step_time;
        for (k, x) in [
            ("beta0_us", s.beta0_us),
            ("beta1_us", s.beta1_us),
            ("beta2_us", s.beta2_us),
            ("beta3_us", s.beta3_us),
        ] {
            if !x.is_finite() || !(0.0..=1e6).contains(&x) {
                return Err(format!(
                    "{}: step_time.{k} must be between 0 and 1e6 µs, got {x}",
                    crate::quote::escape(file)
                ));
            }
        }
        if let Some(ph) = &p.physics {
            ph.resolve()
                .map_err(|m| format!("{}: {m}", crate::quote::escape(file)))?;
        }
        let e = &p.engine;
        for (k, x) in [
            ("max_num_seqs", e.max_num_seqs),
            ("max_num_batched_tokens", e.max_num_batched_tokens),
            ("kv_blocks", e.kv_blocks),
            ("block_size_tokens", e.block_size_tokens),
        ] {
            if x == 0 {
                return Err(format!("{}: engine.{k} must be at least 1", crate::quote::escape(file)));
            }
        }
        if e.kv_blocks >= fleetsim_core::backend::MAX_KV_BLOCKS {
            return Err(format!("{}: engine.kv_blocks is too large", crate::quote::escape(file)));
        }
        Ok(p)
    }

    /// Reads a profile file.
    pub fn read(path: &Path) -> Result<ProfileFile, String> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", crate::quote::escape(&file)))?;
        ProfileFile::parse(&text, &file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let p = ProfileFile {
            profile: About {
                name: "x".into(),
                source: "s".into(),
                generator: "g".into(),
                ..About::default()
            },
            step_time: StepTime {
                beta0_us: 1.0,
                beta1_us: 2.0,
                beta2_us: 3.0,
                beta3_us: 0.0,
            },
            physics: None,
            engine: Engine {
                max_num_seqs: 1,
                max_num_batched_tokens: 2,
                kv_blocks: 3,
                kv_blocks_from: "m".into(),
                block_size_tokens: 16,
                prefix_caching: true,
                reserve_full_isl: true,
            },
            fit: Fit::default(),
        };
        let text = p.to_toml();
        assert_eq!(ProfileFile::parse(&text, "p.toml").unwrap(), p);
        let bad = text.replace("beta1_us = 2.0", "beta1_us = -2.0");
        assert!(
            ProfileFile::parse(&bad, "p.toml")
                .unwrap_err()
                .contains("step_time.beta1_us")
        );
        let bad = text.replace("kv_blocks = 3", "kv_blockz = 3");
        let e = ProfileFile::parse(&bad, "p.toml").unwrap_err();
        assert!(e.starts_with("p.toml:") && e.contains("kv_blockz"), "{e}");
    }
}
