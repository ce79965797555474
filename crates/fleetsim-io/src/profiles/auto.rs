//! Profiles derived from a model's shape and a GPU's datasheet alone (`profile = "auto"`,
//! `sim validate --profile auto`): the physics step-time model's constants
//! ([`fleetsim_core::backend::perf::PhysicsStep`]) from the bytes and FLOPs a step moves on
//! that hardware, with the few global [`Coefficients`] fitted once across every shipped
//! real run ([`SHIPPED`]).
//!
//! Per GPU of a tensor-parallel group of `tp` (and, for a mixture-of-experts model served
//! with `dp` data-parallel engines, a MoE group of `tp·dp` GPUs, as vLLM flattens the
//! experts across data-parallel ranks):
//! * weights: the attention, dense-MLP, shared-expert, router and LM-head weights are read
//!   once per step, split over `tp`; each GPU holds `1/(tp·dp)` of the routed experts and
//!   reads those its tokens (and, with `dp > 1`, the other ranks' tokens) route to;
//! * FLOPs: 2 per active parameter per token, the LM head per request, attention
//!   `4·layers·heads·head_dim` per query-key pair, all over `tp`; FP8 weights run on FP8
//!   tensor cores where the GPU has them;
//! * KV: `2·layers·kv_heads·head_dim·dtype` bytes per context token, the KV heads split
//!   over `tp` (at least one per GPU);
//! * communication: two all-reduces per layer at `tp > 1` (attention output, MLP output),
//!   ring traffic `2·(tp − 1)/tp` of the activations over the GPU-to-GPU link, plus the
//!   experts' all-gather and reduce-scatter over the MoE group at `dp > 1`.
//!
//! Owns: the derivation and the shipped coefficients. May not see: a run.

use fleetsim_core::backend::perf::{PhysicsStep, StepTimeModel};

use super::gpus::Gpu;
use super::models::{ModelShape, WeightDtype};

/// The global coefficients of the physics model: efficiencies against the datasheets and
/// the overheads no datasheet states.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coefficients {
    /// Achieved fraction of the datasheet memory bandwidth (weights and KV reads).
    pub mem_efficiency: f64,
    /// Achieved fraction of the datasheet bandwidth and FLOPs in the routed experts'
    /// fused kernels (each expert gets a few of the step's tokens: small, ragged GEMMs).
    pub expert_efficiency: f64,
    /// Achieved fraction of the datasheet memory bandwidth reading the KV cache (paged
    /// attention gathers blocks).
    pub kv_mem_efficiency: f64,
    /// Achieved fraction of the datasheet dense tensor throughput (GEMMs and attention).
    pub flop_efficiency: f64,
    /// Achieved fraction of an NVLink's bandwidth in an all-reduce.
    pub link_efficiency: f64,
    /// Achieved fraction of a PCIe slot's bandwidth in an all-reduce (through the host).
    pub pcie_efficiency: f64,
    /// Per step, µs: the scheduler, input preparation and synchronisation on the CPU,
    /// between GPU steps (hidden under the GPU's step with async scheduling).
    pub step_overhead_us: f64,
    /// Per scheduled request per step, µs.
    pub request_overhead_us: f64,
    /// Per all-reduce, µs: its latency whatever its size.
    pub allreduce_us: f64,
    /// From a client's send to the engine's queue (HTTP, tokenisation), µs: added to
    /// latencies measured at the client, not to the engine's step.
    pub client_overhead_us: f64,
    /// Memory per GPU that is neither weights nor KV cache, GiB (activation peak, CUDA
    /// graphs, communication buffers, the driver's share): what a KV capacity derived
    /// from a datasheet sets aside.
    pub reserve_gib: f64,
}

/// Coefficients in [`Coefficients::named`]'s order.
pub const COEFFICIENTS: usize = 11;

impl Coefficients {
    /// The coefficients as `(name, value)` pairs, in field order (what the fit varies,
    /// prints and the shipped table lists).
    pub fn named(&self) -> [(&'static str, f64); COEFFICIENTS] {
        [
            ("mem_efficiency", self.mem_efficiency),
            ("expert_efficiency", self.expert_efficiency),
            ("kv_mem_efficiency", self.kv_mem_efficiency),
            ("flop_efficiency", self.flop_efficiency),
            ("link_efficiency", self.link_efficiency),
            ("pcie_efficiency", self.pcie_efficiency),
            ("step_overhead_us", self.step_overhead_us),
            ("request_overhead_us", self.request_overhead_us),
            ("allreduce_us", self.allreduce_us),
            ("client_overhead_us", self.client_overhead_us),
            ("reserve_gib", self.reserve_gib),
        ]
    }

    /// From values in [`Coefficients::named`]'s order.
    pub fn from_values(v: &[f64; COEFFICIENTS]) -> Coefficients {
        Coefficients {
            mem_efficiency: v[0],
            expert_efficiency: v[1],
            kv_mem_efficiency: v[2],
            flop_efficiency: v[3],
            link_efficiency: v[4],
            pcie_efficiency: v[5],
            step_overhead_us: v[6],
            request_overhead_us: v[7],
            allreduce_us: v[8],
            client_overhead_us: v[9],
            reserve_gib: v[10],
        }
    }
}

/// The shipped coefficients: fitted by `sim calibrate --physics traces/validation.toml`
/// over every run that file lists (docs/validation.md gives the table, the runs and the
/// leave-one-out errors; a test refits them and fails if they drift).
pub const SHIPPED: Coefficients = Coefficients {
    mem_efficiency: 0.8505,
    expert_efficiency: 0.5007,
    kv_mem_efficiency: 0.8572,
    flop_efficiency: 0.6925,
    link_efficiency: 0.7364,
    pcie_efficiency: 0.1705,
    step_overhead_us: 2048.0,
    request_overhead_us: 28.7,
    allreduce_us: 17.24,
    client_overhead_us: 23700.0,
    reserve_gib: 3.608,
};

/// The shipped coefficients as an aligned table (`sim profiles --physics`).
pub fn table() -> String {
    let what = [
        "achieved fraction of datasheet bandwidth: weights",
        "achieved fraction of datasheet bandwidth and FLOPs: routed experts",
        "achieved fraction of datasheet bandwidth: KV cache reads",
        "achieved fraction of dense tensor FLOPs: GEMMs and attention",
        "achieved fraction of an NVLink: all-reduce traffic",
        "achieved fraction of a PCIe slot: all-reduce traffic",
        "µs per step of CPU work between GPU steps (synchronous scheduling only)",
        "µs per scheduled request per step",
        "µs per all-reduce (two per layer at TP > 1)",
        "µs from a client's send to the engine (client-timed runs only)",
        "GiB per GPU set aside besides weights and KV (derived capacities)",
    ];
    let named = SHIPPED.named();
    let rows = named
        .iter()
        .zip(what)
        .map(|((k, v), w)| vec![k.to_string(), format!("{v}"), w.to_string()]);
    let mut o = crate::output::render(&["coefficient", "value", "meaning"], rows, &[1]);
    o.push_str("
Fitted by `sim calibrate --physics traces/validation.toml`; judged by `sim validate --leave-one-out traces/validation.toml` (docs/validation.md).
");
    o
}

/// How a model is spread over GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallel {
    /// `--tensor-parallel-size`.
    pub tp: u32,
    /// `--data-parallel-size`: engines, each with `tp` GPUs (for a MoE model, the experts
    /// are spread over all `tp·dp` GPUs).
    pub dp: u32,
}

/// A model on a GPU, spread: everything an auto profile is derived from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Deployment {
    /// The model.
    pub model: &'static ModelShape,
    /// Its layer weights' dtype.
    pub dtype: WeightDtype,
    /// The GPU.
    pub gpu: &'static Gpu,
    /// The parallelism.
    pub parallel: Parallel,
    /// KV cache bytes per element (2: bf16, 1: fp8).
    pub kv_dtype_bytes: u32,
    /// vLLM schedules the next step while the GPU runs this one (`async_scheduling`, the
    /// default from vLLM 0.19): the per-step CPU overhead is hidden.
    pub async_scheduling: bool,
}

impl Deployment {
    /// `<model>/<gpu>/tp<N>[/dp<M>]`, with `-fp8` / `-int4` after a quantised model.
    pub fn id(&self) -> String {
        let q = match self.dtype {
            WeightDtype::Bf16 => String::new(),
            d => format!("-{}", d.name()),
        };
        let dp = if self.parallel.dp > 1 {
            format!("/dp{}", self.parallel.dp)
        } else {
            String::new()
        };
        format!("{}{q}/{}/tp{}{dp}", self.model.name, self.gpu.name, self.parallel.tp)
    }

    /// Weight bytes one GPU holds (layer weights in the checkpoint's dtype, embeddings and
    /// LM head in bf16): what vLLM's KV derivation subtracts from memory.
    pub fn weight_bytes_per_gpu(&self) -> u64 {
        let m = self.model;
        let tp = f64::from(self.parallel.tp.max(1));
        let g = tp * f64::from(self.moe_dp());
        let wb = self.dtype.bytes();
        let embed = (m.vocab * m.hidden) as f64 * if m.tied_embeddings { 1.0 } else { 2.0 };
        let layers = m.shared_layer_params() as f64 * wb / tp + m.expert_params() as f64 * wb / g;
        (layers + embed * 2.0 / tp) as u64
    }

    /// Data-parallel ranks sharing the experts (1 for a dense model).
    fn moe_dp(&self) -> u32 {
        if self.model.moe.is_some() {
            self.parallel.dp.max(1)
        } else {
            1
        }
    }

    /// The physics step-time constants with `c`.
    pub fn physics(&self, c: &Coefficients) -> PhysicsStep {
        let m = self.model;
        let tp = self.parallel.tp.max(1);
        let tpf = f64::from(tp);
        let dp = f64::from(self.moe_dp());
        let g = tpf * dp;
        let us_per_byte = 1e6 / (self.gpu.bw_tbs * 1e12 * c.mem_efficiency);
        let us_per_expert_byte = 1e6 / (self.gpu.bw_tbs * 1e12 * c.expert_efficiency);
        let us_per_kv_byte = 1e6 / (self.gpu.bw_tbs * 1e12 * c.kv_mem_efficiency);
        let us_per_gemm_flop = 1e6 / (self.gpu.gemm_tflops(self.dtype == WeightDtype::Fp8) * 1e12 * c.flop_efficiency);
        let us_per_bf16_flop = 1e6 / (self.gpu.tflops * 1e12 * c.flop_efficiency);
        let us_per_expert_flop = us_per_gemm_flop * c.flop_efficiency / c.expert_efficiency;
        let wb = self.dtype.bytes();
        let layers = f64::from(m.layers);
        // The LM head stays in bf16 in quantised checkpoints and is split over TP.
        let head = m.head_params() as f64;
        let weights_us = (m.shared_layer_params() as f64 * wb / tpf + head * 2.0 / tpf) * us_per_byte;
        let (experts_us, expert_miss_ln) = match m.moe {
            Some(moe) => (
                m.expert_params() as f64 * wb / g * us_per_expert_byte,
                (1.0 - f64::from(moe.top_k) / f64::from(moe.experts)).ln() * dp,
            ),
            None => (0.0, 0.0),
        };
        let shared = m.shared_layer_params() as f64;
        let kv_heads = f64::from((m.kv_heads / tp).max(1));
        let kv_bytes = 2.0 * layers * kv_heads * f64::from(m.head_dim) * f64::from(self.kv_dtype_bytes);
        let heads = f64::from(m.heads) / tpf;
        let activation_bytes = m.hidden as f64 * 2.0;
        let link_efficiency = if self.gpu.nvlink {
            c.link_efficiency
        } else {
            c.pcie_efficiency
        };
        let us_per_link_byte = 1e6 / (self.gpu.link_gbs * 1e9 * link_efficiency);
        let (mut allreduces, mut comm_bytes_per_token) = (0.0, 0.0);
        if tp > 1 {
            allreduces += 2.0 * layers;
            comm_bytes_per_token += 2.0 * layers * 2.0 * (tpf - 1.0) / tpf * activation_bytes;
        }
        if let Some(moe) = m.moe.filter(|_| dp > 1.0) {
            // All-gather of every rank's tokens in, reduce-scatter out, per MoE layer.
            let moe_layers = f64::from(moe.moe_layers);
            allreduces += 2.0 * moe_layers;
            comm_bytes_per_token += moe_layers * 2.0 * (g - 1.0) / g * dp * activation_bytes;
        }
        PhysicsStep {
            fixed_us: if self.async_scheduling { 0.0 } else { c.step_overhead_us } + c.allreduce_us * allreduces,
            per_request_us: c.request_overhead_us,
            comm_us_per_token: comm_bytes_per_token * us_per_link_byte,
            weights_us,
            experts_us,
            expert_miss_ln,
            gemm_us_per_token: 2.0 * shared / tpf * us_per_gemm_flop,
            expert_gemm_us_per_token: 2.0 * m.active_expert_params() as f64 / tpf * us_per_expert_flop,
            head_us_per_request: 2.0 * head / tpf * us_per_bf16_flop,
            kv_us_per_token: kv_bytes * us_per_kv_byte,
            attention_us_per_pair: 4.0 * layers * heads * f64::from(m.head_dim) * us_per_bf16_flop,
        }
    }

    /// A step-time model priced by the physics model with `c`.
    pub fn step_time(&self, c: &Coefficients) -> StepTimeModel {
        StepTimeModel {
            beta0_us: 0.0,
            beta1_us: 0.0,
            beta2_us: 0.0,
            beta3_us: 0.0,
            physics: Some(self.physics(c)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::{gpus, models};
    use fleetsim_core::backend::perf::StepShape;

    fn dep(model: &str, gpu: &str, tp: u32, dp: u32) -> Deployment {
        let (model, dtype) = models::resolve(model).unwrap();
        Deployment {
            model,
            dtype,
            gpu: gpus::resolve(gpu).unwrap(),
            parallel: Parallel { tp, dp },
            kv_dtype_bytes: 2,
            async_scheduling: false,
        }
    }

    fn unit() -> Coefficients {
        Coefficients {
            mem_efficiency: 1.0,
            expert_efficiency: 1.0,
            kv_mem_efficiency: 1.0,
            flop_efficiency: 1.0,
            link_efficiency: 1.0,
            pcie_efficiency: 1.0,
            step_overhead_us: 0.0,
            request_overhead_us: 0.0,
            allreduce_us: 0.0,
            client_overhead_us: 0.0,
            reserve_gib: 0.0,
        }
    }

    #[test]
    fn a_decode_step_reads_the_weights_at_datasheet_bandwidth() {
        // Llama-3.1-8B on an H100 at full efficiency: a one-token decode reads the layer
        // weights and the LM head, 2 x (6,979,321,856 + 525,336,576) = 15,009,316,864 B,
        // at 3.35 TB/s: 4480.39 us.
        let d = dep("llama-3.1-8b", "h100", 1, 1);
        let p = d.physics(&unit());
        assert!((p.weights_us - 4480.393).abs() < 0.01, "{}", p.weights_us);
        let one = StepShape {
            decode_tokens: 1,
            context_tokens: 1,
            attention_pairs: 1,
            requests: 1,
            ..StepShape::default()
        };
        // + one token's KV (131,072 B: 0.039 us).
        assert!((p.step_us(&one) - 4480.432).abs() < 0.01);
        assert_eq!(d.id(), "llama-3.1-8b/h100/tp1");
        // TP2 halves every per-GPU term and adds 64 all-reduces.
        let d2 = dep("llama-3.1-8b", "h100", 2, 1).physics(&Coefficients {
            allreduce_us: 5.0,
            ..unit()
        });
        assert!((d2.weights_us - p.weights_us / 2.0).abs() < 1e-6);
        assert_eq!(d2.fixed_us, 320.0);
        // 64 all-reduces x 2 x 1/2 x 8192 B per token at 450 GB/s.
        assert!((d2.comm_us_per_token - 64.0 * 8192.0 / 450e9 * 1e6).abs() < 1e-9);
    }

    #[test]
    fn fp8_moe_reads_its_experts_and_computes_in_fp8() {
        let d = dep(
            "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
            "NVIDIA-H100-80GB-HBM3",
            4,
            1,
        );
        assert_eq!(d.id(), "llama-4-scout-fp8/h100/tp4");
        let p = d.physics(&unit());
        // 48 layers x 16 experts x 3 x 5120 x 8192 x 1 B / 4 GPUs at 3.35 TB/s.
        let experts = 48.0 * 16.0 * 3.0 * 5120.0 * 8192.0 / 4.0 / 3.35e12 * 1e6;
        assert!((p.experts_us - experts).abs() < 1e-6);
        // One token touches 1 of 16 experts.
        assert!(((1.0 - p.expert_miss_ln.exp()) - 1.0 / 16.0).abs() < 1e-12);
        // FP8 GEMMs at 1979 TFLOPS: 2 FLOPs per shared layer parameter over 4 GPUs.
        let m = d.model;
        let shared = m.shared_layer_params() as f64;
        assert!((p.gemm_us_per_token - 2.0 * shared / 4.0 / 1979e12 * 1e6).abs() < 1e-12);
        // Weights per GPU: a quarter of the layers in FP8 plus the embeddings in bf16.
        let w = d.weight_bytes_per_gpu() as f64;
        let want =
            (m.shared_layer_params() + m.expert_params()) as f64 / 4.0 + 2.0 * 2.0 * (m.vocab * m.hidden) as f64 / 4.0;
        assert!((w - want).abs() < 2.0);
    }

    #[test]
    fn data_parallel_experts_are_spread_over_every_rank() {
        let one = dep("Qwen/Qwen3-30B-A3B", "rtx-pro-6000", 1, 1).physics(&unit());
        let two = dep("Qwen/Qwen3-30B-A3B", "rtx-pro-6000", 1, 2).physics(&unit());
        assert!((two.experts_us - one.experts_us / 2.0).abs() < 1e-9);
        assert!((two.expert_miss_ln - 2.0 * one.expert_miss_ln).abs() < 1e-12);
        assert!(two.comm_us_per_token > 0.0 && one.comm_us_per_token == 0.0);
        // A dense model's data-parallel engines are independent.
        let a = dep("llama-3.1-8b", "a100", 1, 1).physics(&unit());
        let b = dep("llama-3.1-8b", "a100", 1, 2).physics(&unit());
        assert_eq!(a, b);
    }
}
