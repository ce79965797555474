//! KV-cache capacity from memory, as vLLM v1 computes it at start-up:
//!
//! 1. `requested_memory = total_gpu_memory x gpu_memory_utilization`
//!    (`vllm/v1/worker/gpu_worker.py`, `Worker.init_device`);
//! 2. `available_kv_cache_memory = requested_memory - non_kv_cache_memory`, where the
//!    non-KV memory is the rank's weights plus the profiled activation peak and non-torch
//!    memory (`Worker.determine_available_memory`);
//! 3. `page_size_bytes = 2 x block_size x num_kv_heads x head_size x dtype_size` per layer
//!    (`vllm/v1/kv_cache_interface.py`, `AttentionSpec.page_size_bytes`), with the KV heads
//!    of one tensor-parallel rank, `max(1, total_kv_heads / tp)`
//!    (`vllm/config/model.py`, `ModelConfig.get_num_kv_heads`);
//! 4. `num_blocks = available_memory // page_size // num_layers`
//!    (`vllm/v1/core/kv_cache_utils.py`, `get_num_blocks`).
//!
//! vllm-project/vllm @ bbf906a8 (the stored version read). vLLM measures the activation
//! peak by a dummy forward pass; here it is an input (`activation_memory_gib`, default 0,
//! which reproduces BLIS's `total_kv_blocks` for Llama-3.1-8B on one H100: 29,205). vLLM
//! logs the measured figure at start-up ("... PyTorch activation peak memory takes X GiB").

use super::Profile;

const GIB: f64 = (1u64 << 30) as f64;

/// Everything the derivation reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvInputs {
    /// Memory of one GPU, GiB.
    pub gpu_memory_gib: f64,
    /// `--gpu-memory-utilization` (vLLM default 0.9).
    pub gpu_memory_utilization: f64,
    /// Weight bytes of the whole model.
    pub weight_bytes: u64,
    /// Tensor-parallel size.
    pub tp: u32,
    /// `num_hidden_layers`.
    pub layers: u32,
    /// `num_key_value_heads` (whole model).
    pub kv_heads: u32,
    /// `head_dim`.
    pub head_dim: u32,
    /// KV cache bytes per element (2 for bf16/fp16, 1 for fp8).
    pub kv_dtype_bytes: u32,
    /// `--block-size`.
    pub block_size_tokens: u32,
    /// Activation peak and non-torch memory per GPU, GiB.
    pub activation_memory_gib: f64,
}

impl KvInputs {
    /// The inputs for a profile's model and GPU.
    pub fn for_profile(
        p: &Profile,
        utilization: f64,
        block_size_tokens: u32,
        kv_dtype_bytes: u32,
        activation_gib: f64,
    ) -> Self {
        // An auto profile's weights per GPU follow its dtype and expert spread; the
        // whole-model figure is what the derivation divides by TP.
        let weight_bytes = match p.source {
            super::Source::Physics(d) => d.weight_bytes_per_gpu() * u64::from(p.tp.max(1)),
            _ => p.model.weight_bytes(),
        };
        KvInputs {
            gpu_memory_gib: p.gpu.memory_gib,
            gpu_memory_utilization: utilization,
            weight_bytes,
            tp: p.tp,
            layers: p.model.layers,
            kv_heads: p.model.kv_heads,
            head_dim: p.model.head_dim,
            kv_dtype_bytes,
            block_size_tokens,
            activation_memory_gib: activation_gib,
        }
    }

    /// Bytes of one block across all layers of one rank.
    pub fn block_bytes(&self) -> u64 {
        let heads = (self.kv_heads / self.tp.max(1)).max(1);
        2 * u64::from(self.block_size_tokens)
            * u64::from(heads)
            * u64::from(self.head_dim)
            * u64::from(self.kv_dtype_bytes)
            * u64::from(self.layers)
    }
}

/// KV blocks per engine, or why none fit (one line, GiB figures).
pub fn kv_blocks(k: &KvInputs) -> Result<u32, String> {
    if !(k.gpu_memory_utilization > 0.0 && k.gpu_memory_utilization <= 1.0) {
        return Err(format!(
            "gpu_memory_utilization must be in (0, 1], got {}",
            k.gpu_memory_utilization
        ));
    }
    if !(k.gpu_memory_gib.is_finite() && k.gpu_memory_gib > 0.0 && k.gpu_memory_gib <= 4096.0) {
        return Err(format!("gpu_memory_gib must be in (0, 4096], got {}", k.gpu_memory_gib));
    }
    // At most the GPU's memory: beyond ~1.7e10 GiB the byte count saturated and the sum
    // below wrapped to a small number, giving the full cache.
    if !(k.activation_memory_gib.is_finite() && (0.0..=k.gpu_memory_gib).contains(&k.activation_memory_gib)) {
        return Err(format!(
            "activation_memory_gib must be in [0, {}] GiB (the GPU's memory), got {}",
            k.gpu_memory_gib, k.activation_memory_gib
        ));
    }
    let requested = (k.gpu_memory_gib * GIB * k.gpu_memory_utilization) as u64;
    let weights = k.weight_bytes / u64::from(k.tp.max(1));
    let activation = (k.activation_memory_gib * GIB) as u64;
    // Saturating: an overflow is "nothing fits", never a wrap.
    let non_kv = weights.saturating_add(activation);
    let block = k.block_bytes().max(1);
    if requested <= non_kv || (requested - non_kv) / block == 0 {
        return Err(format!(
            "no KV cache fits: {:.2} GiB x {} = {:.2} GiB per GPU, but weights take {:.2} GiB per GPU (TP {}) and activations {:.2} GiB, and one block needs {:.2} MiB",
            k.gpu_memory_gib,
            k.gpu_memory_utilization,
            requested as f64 / GIB,
            weights as f64 / GIB,
            k.tp,
            k.activation_memory_gib,
            block as f64 / f64::from(1u32 << 20),
        ));
    }
    let blocks = (requested - non_kv) / block;
    u32::try_from(blocks).map_err(|_| format!("{blocks} KV blocks is too many"))
}

#[cfg(test)]
mod tests {
    use super::super::find;
    use super::*;

    fn inputs(id: &str) -> KvInputs {
        KvInputs::for_profile(&find(id).unwrap(), 0.9, 16, 2, 0.0)
    }

    #[test]
    fn hand_computed_figures() {
        // Llama-3.1-8B, H100 80 GiB, TP1: 0.9 x 80 GiB = 77,309,411,328 B; weights
        // 8,030,261,248 x 2 = 16,060,522,496 B; page 2 x 16 x 8 x 128 x 2 = 65,536 B/layer,
        // x 32 layers = 2,097,152 B; (77,309,411,328 - 16,060,522,496) / 2,097,152 = 29,205.7.
        let k = inputs("llama-3.1-8b/h100/tp1");
        assert_eq!(k.block_bytes(), 2_097_152);
        assert_eq!(kv_blocks(&k), Ok(29_205));
        // TP2: each rank holds 4 KV heads and half the weights: (77,309,411,328 -
        // 8,030,261,248) / 1,048,576 = 66,069.6 (BLIS's total_kv_blocks says 132,139: it
        // pools both GPUs' memory, vLLM sizes per rank).
        assert_eq!(kv_blocks(&inputs("llama-3.1-8b/h100/tp2")), Ok(66_069));
        // Llama-3.3-70B, TP4: 141,107,412,992 / 4 = 35,276,853,248 B of weights per rank;
        // 2 x 16 x 2 x 128 x 2 x 80 = 1,310,720 B per block; (77,309,411,328 -
        // 35,276,853,248) / 1,310,720 = 32,068.3.
        assert_eq!(inputs("llama-3.3-70b/h100/tp4").block_bytes(), 1_310_720);
        assert_eq!(kv_blocks(&inputs("llama-3.3-70b/h100/tp4")), Ok(32_068));
        // Qwen3-14B on a 48 GiB L40S: 46,385,646,796 - 29,536,614,400 = 16,849,032,396 B;
        // 2 x 16 x 8 x 128 x 2 x 40 = 2,621,440 B per block -> 6,427.4.
        assert_eq!(kv_blocks(&inputs("qwen3-14b/l40s/tp1")), Ok(6_427));
        // An fp8 cache halves the page and doubles the blocks (to within rounding).
        let fp8 = KvInputs {
            kv_dtype_bytes: 1,
            ..inputs("llama-3.1-8b/h100/tp1")
        };
        assert_eq!(kv_blocks(&fp8), Ok(58_411));
        // A 2 GiB activation reserve costs 1,024 blocks of 2 MiB.
        let act = KvInputs {
            activation_memory_gib: 2.0,
            ..inputs("llama-3.1-8b/h100/tp1")
        };
        assert_eq!(kv_blocks(&act), Ok(28_181));
    }

    #[test]
    fn impossible_memory_is_an_error_naming_the_figures() {
        // 70B on one 80 GiB GPU: 131.4 GiB of weights.
        let k = KvInputs {
            tp: 1,
            ..inputs("llama-3.3-70b/h100/tp4")
        };
        let e = kv_blocks(&k).unwrap_err();
        assert!(e.contains("weights take 131.42 GiB per GPU"), "{e}");
        assert!(
            kv_blocks(&KvInputs {
                gpu_memory_utilization: 1.5,
                ..k
            })
            .unwrap_err()
            .contains("(0, 1]")
        );
        assert!(
            kv_blocks(&KvInputs {
                gpu_memory_gib: -1.0,
                ..k
            })
            .is_err()
        );
    }

    #[test]
    fn activation_memory_beyond_the_gpu_is_refused_not_wrapped() {
        // 1.8e10 GiB saturates to 2^64 bytes and, unchecked, wraps the sum to near zero,
        // so the full KV cache came back.
        let k = inputs("llama-3.1-8b/h100/tp1");
        for a in [1.8e10, 81.0, f64::INFINITY, -1.0] {
            let e = kv_blocks(&KvInputs {
                activation_memory_gib: a,
                ..k
            })
            .unwrap_err();
            assert!(
                e.starts_with("activation_memory_gib must be in [0, 80] GiB"),
                "{a}: {e}"
            );
        }
        let e = kv_blocks(&KvInputs {
            activation_memory_gib: 80.0,
            ..k
        })
        .unwrap_err();
        assert!(e.starts_with("no KV cache fits"), "{e}");
    }
}
