//! The physics step-time model: one engine step's duration from what the step does and
//! what that costs on the hardware, with the per-profile arithmetic done once
//! (`fleetsim_io::profiles::auto` builds a [`PhysicsStep`] from a model's shape, a GPU's
//! datasheet, the parallelism and a few global coefficients) so that a step costs a few
//! multiply-adds, two `max`es and, for a mixture-of-experts model, one `exp`.
//!
//! Per GPU of the tensor-parallel group, a step of `T` tokens (prefill and decode),
//! `B` requests, `C` tokens of context read and `A` attention query-key pairs takes
//!
//! ```text
//! fixed + per_request·B + comm·T
//!   + max(weights, gemm·T + head·B)                                  dense GEMMs
//!   + max(experts·(1 − e^(T·ln(1 − k/E))), expert_gemm·T)            expert GEMMs
//!   + max(kv·C, attention·A)                                         attention
//! ```
//!
//! **Why a max inside, a sum outside.** A kernel streams its operands while it computes, so
//! its time is the larger of the two (the roofline): the weight GEMMs are memory-bound
//! for a decode batch (every weight read once per step, whatever the batch) and
//! compute-bound for a prefill chunk; attention is bound by the KV cache it reads in
//! decode and by its FLOPs in a long prefill. The dense GEMMs, the experts' fused kernels,
//! attention, the all-reduces and the CPU's share run one after another on one stream,
//! so those add. A single max over
//! the whole step would let attention hide under the weights, which it cannot: it runs
//! after them, layer by layer.
//!
//! **Experts.** A mixture-of-experts layer reads only the experts its tokens route to.
//! With `k` of `E` experts per token, `T` tokens touch `E·(1 − (1 − k/E)^T)` distinct
//! experts in expectation (uniform, independent routing): `k` for one token, all `E` for
//! a large batch. `experts` is the time to read all of this GPU's routed-expert weights.

use super::perf::StepShape;

/// A profile's step-time constants, µs (every efficiency and overhead already applied).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhysicsStep {
    /// Per step whatever it does: the CPU's fixed share and the all-reduces' latency.
    pub fixed_us: f64,
    /// Per scheduled request (input preparation, sampling, output processing).
    pub per_request_us: f64,
    /// Per token: moving its activations through the all-reduces (0 at TP 1).
    pub comm_us_per_token: f64,
    /// Reading the weights every token multiplies through (attention projections, dense
    /// and shared-expert MLPs, the LM head).
    pub weights_us: f64,
    /// Reading every routed expert this GPU holds (0 for a dense model).
    pub experts_us: f64,
    /// `ln(1 − k/E)` times the tokens one step's token stands for in the expert group
    /// (the data-parallel ranks sharing an expert-parallel group), 0 for a dense model.
    pub expert_miss_ln: f64,
    /// Dense GEMM compute per token (2 FLOPs per parameter every token multiplies through).
    pub gemm_us_per_token: f64,
    /// Expert GEMM compute per token (2 FLOPs per parameter of its `k` routed experts).
    pub expert_gemm_us_per_token: f64,
    /// GEMM compute per request: the LM head, computed for each request's sampled position.
    pub head_us_per_request: f64,
    /// Reading (and writing) one token's KV cache in every layer.
    pub kv_us_per_token: f64,
    /// Attention compute per query-key pair in every layer.
    pub attention_us_per_pair: f64,
}

impl PhysicsStep {
    /// The step's duration, µs.
    #[inline]
    pub fn step_us(&self, s: &StepShape) -> f64 {
        let t = f64::from(s.prefill_tokens) + f64::from(s.decode_tokens);
        let b = f64::from(s.requests);
        let experts = if self.experts_us > 0.0 {
            (self.experts_us * (1.0 - (t * self.expert_miss_ln).exp())).max(self.expert_gemm_us_per_token * t)
        } else {
            0.0
        };
        let gemm = self
            .weights_us
            .max(self.gemm_us_per_token * t + self.head_us_per_request * b)
            + experts;
        let attention =
            (self.kv_us_per_token * s.context_tokens as f64).max(self.attention_us_per_pair * s.attention_pairs as f64);
        self.fixed_us + self.per_request_us * b + self.comm_us_per_token * t + gemm + attention
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense() -> PhysicsStep {
        PhysicsStep {
            fixed_us: 100.0,
            per_request_us: 2.0,
            comm_us_per_token: 0.0,
            weights_us: 5000.0,
            experts_us: 0.0,
            expert_miss_ln: 0.0,
            gemm_us_per_token: 10.0,
            expert_gemm_us_per_token: 0.0,
            head_us_per_request: 1.0,
            kv_us_per_token: 0.01,
            attention_us_per_pair: 0.001,
        }
    }

    fn shape(prefill: u32, decode: u32, context: u64, pairs: u64, requests: u32) -> StepShape {
        StepShape {
            prefill_tokens: prefill,
            decode_tokens: decode,
            context_tokens: context,
            attention_pairs: pairs,
            requests,
        }
    }

    #[test]
    fn decode_is_bound_by_the_weights_and_prefill_by_the_flops() {
        let p = dense();
        // 8 decodes at 1000 tokens of context: weights 5000 > 80 + 8 of GEMM; KV 80 >
        // attention 8; 100 + 16 + 5000 + 80.
        assert_eq!(p.step_us(&shape(0, 8, 8000, 8000, 8)), 5196.0);
        // A 2048-token chunk from scratch: GEMM 20480 + 1 > 5000; attention pairs
        // 2048·2049/2 = 2,098,176 → 2098.176 > KV 20.48; 100 + 2 + 20481 + 2098.176.
        let pairs = 2048 * 2049 / 2;
        assert!((p.step_us(&shape(2048, 0, 2048, pairs, 1)) - 22681.176).abs() < 1e-6);
    }

    #[test]
    fn experts_read_grows_from_k_to_all_with_the_batch() {
        // 128 experts, 8 per token: one token reads 8/128 of them, 1000 tokens nearly all.
        let p = PhysicsStep {
            experts_us: 12800.0,
            expert_miss_ln: (1.0f64 - 8.0 / 128.0).ln(),
            weights_us: 0.0,
            gemm_us_per_token: 0.0,
            expert_gemm_us_per_token: 0.0,
            head_us_per_request: 0.0,
            fixed_us: 0.0,
            per_request_us: 0.0,
            kv_us_per_token: 0.0,
            attention_us_per_pair: 0.0,
            ..dense()
        };
        assert!((p.step_us(&shape(0, 1, 0, 0, 1)) - 800.0).abs() < 1e-9);
        let two = 12800.0 * (1.0 - (1.0f64 - 1.0 / 16.0).powi(2));
        assert!((p.step_us(&shape(0, 2, 0, 0, 2)) - two).abs() < 1e-9);
        assert!(p.step_us(&shape(1000, 0, 0, 0, 1)) > 12799.0);
    }
}
