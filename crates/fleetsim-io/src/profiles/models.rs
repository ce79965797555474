//! Model shapes: what sizes a model's weights, its KV cache and its per-token work, each
//! row from the model's published `config.json` (the row's `source`).
//!
//! Decoder-only transformers with grouped-query attention; a mixture-of-experts model
//! has routed experts (and optionally a shared expert) in some or all of its layers.
//! Counts are the text model's (a vision tower, as Llama 4's, is not counted).
//!
//! Owns: the shape table and the name lookup. Invariant: each row's `params` is the count
//! its shape gives (checked in tests against the published totals).

/// Routed experts of a mixture-of-experts model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moe {
    /// `num_experts` / `num_local_experts`.
    pub experts: u32,
    /// `num_experts_per_tok`.
    pub top_k: u32,
    /// One expert's MLP width (`moe_intermediate_size`; Llama 4's `intermediate_size`).
    pub expert_intermediate: u64,
    /// The shared expert's MLP width, run for every token (0: none).
    pub shared_intermediate: u64,
    /// Layers with experts (the others have a dense MLP of `intermediate`).
    pub moe_layers: u32,
}

/// The shape of a decoder-only model: what sizes its weights and its KV cache.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelShape {
    /// Short name used in profile ids (`llama-3.1-8b`).
    pub name: &'static str,
    /// Hugging Face repository (what `vllm serve` is given).
    pub hf_repo: &'static str,
    /// Other names it is served under (lower case, without an organisation).
    pub aliases: &'static [&'static str],
    /// `num_hidden_layers`.
    pub layers: u32,
    /// `hidden_size`.
    pub hidden: u64,
    /// `num_attention_heads`.
    pub heads: u32,
    /// `num_key_value_heads`.
    pub kv_heads: u32,
    /// `head_dim`.
    pub head_dim: u32,
    /// `intermediate_size` of a dense MLP layer (Llama 4's `intermediate_size_mlp`).
    pub intermediate: u64,
    /// `vocab_size`.
    pub vocab: u64,
    /// `tie_word_embeddings`: the LM head shares the embedding matrix.
    pub tied_embeddings: bool,
    /// Biases on the q, k and v projections (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMS norms on q and k (Qwen3).
    pub qk_norm: bool,
    /// Routed experts, for a mixture-of-experts model.
    pub moe: Option<Moe>,
    /// Parameter count (the shape's; checked in tests).
    pub params: u64,
    /// Bytes per weight as published (2: bf16).
    pub weight_bytes_per_param: u32,
    /// What else the shape reads from its `config.json` (empty for most rows).
    pub source_note: &'static str,
}

impl ModelShape {
    /// Weight bytes of the whole model as published.
    pub fn weight_bytes(&self) -> u64 {
        self.params * u64::from(self.weight_bytes_per_param)
    }

    /// Parameters of the transformer layers' matrices (attention and MLP), the ones every
    /// token multiplies through: BLIS's `GemmOps` basis (embeddings and `lm_head`
    /// excluded). Dense models only (the shipped roofline profiles).
    pub fn layer_matrix_params(&self) -> u64 {
        let q = self.hidden * u64::from(self.heads * self.head_dim);
        let kv = 2 * self.hidden * u64::from(self.kv_heads * self.head_dim);
        let mlp = 3 * self.hidden * self.intermediate;
        u64::from(self.layers) * (2 * q + kv + mlp)
    }

    /// One layer's attention parameters (projections, biases, q/k norms).
    pub fn attention_params(&self) -> u64 {
        let hd = u64::from(self.head_dim);
        let (h, kv) = (u64::from(self.heads), u64::from(self.kv_heads));
        let mut p = 2 * self.hidden * h * hd + 2 * self.hidden * kv * hd;
        if self.qkv_bias {
            p += (h + 2 * kv) * hd;
        }
        if self.qk_norm {
            p += 2 * hd;
        }
        p
    }

    /// Layers with a dense MLP.
    pub fn dense_layers(&self) -> u32 {
        self.layers - self.moe.map_or(0, |m| m.moe_layers)
    }

    /// Parameters outside the layers that every step reads whole: the LM head.
    pub fn head_params(&self) -> u64 {
        self.vocab * self.hidden
    }

    /// Parameters every token multiplies through in the layers: attention, dense MLPs,
    /// shared experts and the routers (not the routed experts).
    pub fn shared_layer_params(&self) -> u64 {
        let l = u64::from(self.layers);
        let mut p = l * self.attention_params() + u64::from(self.dense_layers()) * 3 * self.hidden * self.intermediate;
        if let Some(m) = self.moe {
            let e = u64::from(m.experts);
            p += u64::from(m.moe_layers) * (3 * self.hidden * m.shared_intermediate + self.hidden * e);
        }
        p
    }

    /// Parameters of all routed experts (0 for a dense model).
    pub fn expert_params(&self) -> u64 {
        self.moe.map_or(0, |m| {
            u64::from(m.moe_layers) * u64::from(m.experts) * 3 * self.hidden * m.expert_intermediate
        })
    }

    /// Routed-expert parameters one token multiplies through (its `top_k` experts).
    pub fn active_expert_params(&self) -> u64 {
        self.moe.map_or(0, |m| {
            u64::from(m.moe_layers) * u64::from(m.top_k) * 3 * self.hidden * m.expert_intermediate
        })
    }

    /// Parameters of the whole model, from the shape.
    pub fn shape_params(&self) -> u64 {
        let embeddings = self.vocab * self.hidden * if self.tied_embeddings { 1 } else { 2 };
        let norms = u64::from(self.layers) * 2 * self.hidden + self.hidden;
        embeddings + norms + self.shared_layer_params() + self.expert_params()
    }

    /// Where the shape comes from: the repository's `config.json`.
    pub fn source(&self) -> String {
        let url = format!("https://huggingface.co/{}/blob/main/config.json", self.hf_repo);
        if self.source_note.is_empty() {
            url
        } else {
            format!("{url} ({})", self.source_note)
        }
    }

    /// KV-cache bytes per token (all layers, K and V) at `dtype_bytes` per element.
    pub fn kv_bytes_per_token(&self, dtype_bytes: u32) -> u64 {
        2 * u64::from(self.layers) * u64::from(self.kv_heads * self.head_dim) * u64::from(dtype_bytes)
    }
}

const fn dense(
    name: &'static str,
    hf_repo: &'static str,
    aliases: &'static [&'static str],
    [layers, heads, kv_heads, head_dim]: [u32; 4],
    [hidden, intermediate, vocab, params]: [u64; 4],
    [tied, qkv_bias, qk_norm]: [bool; 3],
    source_note: &'static str,
) -> ModelShape {
    ModelShape {
        name,
        hf_repo,
        aliases,
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        intermediate,
        vocab,
        tied_embeddings: tied,
        qkv_bias,
        qk_norm,
        moe: None,
        params,
        weight_bytes_per_param: 2,
        source_note,
    }
}

const fn with_moe(m: ModelShape, moe: Moe) -> ModelShape {
    ModelShape { moe: Some(moe), ..m }
}

const HF: &str = "";

/// Model shapes, from each model's published `config.json` (`https://huggingface.co/<hf_repo>`).
pub const MODELS: &[ModelShape] = &[
    dense(
        "llama-3.1-8b",
        "meta-llama/Llama-3.1-8B-Instruct",
        &["llama-3.1-8b", "meta-llama-3.1-8b"],
        [32, 32, 8, 128],
        [4096, 14336, 128_256, 8_030_261_248],
        [false, false, false],
        HF,
    ),
    dense(
        "qwen2.5-7b",
        "Qwen/Qwen2.5-7B-Instruct",
        &["qwen2.5-7b"],
        [28, 28, 4, 128],
        [3584, 18944, 152_064, 7_615_616_512],
        [false, true, false],
        HF,
    ),
    dense(
        "qwen3-14b",
        "Qwen/Qwen3-14B",
        &[],
        [40, 40, 8, 128],
        [5120, 17408, 151_936, 14_768_307_200],
        [false, false, true],
        HF,
    ),
    dense(
        "qwen3-32b",
        "Qwen/Qwen3-32B",
        &[],
        [64, 64, 8, 128],
        [5120, 25600, 151_936, 32_762_123_264],
        [false, false, true],
        HF,
    ),
    dense(
        "llama-3.3-70b",
        "meta-llama/Llama-3.3-70B-Instruct",
        &[],
        [80, 64, 8, 128],
        [8192, 28672, 128_256, 70_553_706_496],
        [false, false, false],
        HF,
    ),
    dense(
        "llama-3.1-70b",
        "meta-llama/Llama-3.1-70B-Instruct",
        &["meta-llama-3.1-70b"],
        [80, 64, 8, 128],
        [8192, 28672, 128_256, 70_553_706_496],
        [false, false, false],
        HF,
    ),
    dense(
        "llama-3.1-405b",
        "meta-llama/Llama-3.1-405B-Instruct",
        &["meta-llama-3.1-405b"],
        [126, 128, 8, 128],
        [16384, 53248, 128_256, 405_853_388_800],
        [false, false, false],
        HF,
    ),
    dense(
        "llama-3.2-1b",
        "meta-llama/Llama-3.2-1B-Instruct",
        &[],
        [16, 32, 8, 64],
        [2048, 8192, 128_256, 1_235_814_400],
        [true, false, false],
        HF,
    ),
    dense(
        "llama-3.2-3b",
        "meta-llama/Llama-3.2-3B-Instruct",
        &[],
        [28, 24, 8, 128],
        [3072, 8192, 128_256, 3_212_749_824],
        [true, false, false],
        HF,
    ),
    dense(
        "qwen3-0.6b",
        "Qwen/Qwen3-0.6B",
        &[],
        [28, 16, 8, 128],
        [1024, 3072, 151_936, 596_049_920],
        [true, false, true],
        HF,
    ),
    dense(
        "qwen3-1.7b",
        "Qwen/Qwen3-1.7B",
        &[],
        [28, 16, 8, 128],
        [2048, 6144, 151_936, 1_720_574_976],
        [true, false, true],
        HF,
    ),
    dense(
        "qwen3-4b",
        "Qwen/Qwen3-4B",
        &[],
        [36, 32, 8, 128],
        [2560, 9728, 151_936, 4_022_468_096],
        [true, false, true],
        HF,
    ),
    dense(
        "qwen3-8b",
        "Qwen/Qwen3-8B",
        &[],
        [36, 32, 8, 128],
        [4096, 12288, 151_936, 8_190_735_360],
        [false, false, true],
        HF,
    ),
    dense(
        "mistral-7b",
        "mistralai/Mistral-7B-Instruct-v0.3",
        &["mistral-7b-instruct-v0.3", "mistral-7b-v0.3"],
        [32, 32, 8, 128],
        [4096, 14336, 32_768, 7_248_023_552],
        [false, false, false],
        HF,
    ),
    with_moe(
        dense(
            "qwen3-30b-a3b",
            "Qwen/Qwen3-30B-A3B",
            &["qwen3-30b-a3b-instruct-2507", "qwen3-30b-a3b-thinking-2507"],
            [48, 32, 4, 128],
            [2048, 6144, 151_936, 30_532_122_624],
            [false, false, true],
            HF,
        ),
        Moe {
            experts: 128,
            top_k: 8,
            expert_intermediate: 768,
            shared_intermediate: 0,
            moe_layers: 48,
        },
    ),
    with_moe(
        dense(
            "qwen3-235b-a22b",
            "Qwen/Qwen3-235B-A22B",
            &["qwen3-235b-a22b-instruct-2507", "qwen3-235b-a22b-thinking-2507"],
            [94, 64, 4, 128],
            [4096, 12288, 151_936, 235_093_634_560],
            [false, false, true],
            HF,
        ),
        Moe {
            experts: 128,
            top_k: 8,
            expert_intermediate: 1536,
            shared_intermediate: 0,
            moe_layers: 94,
        },
    ),
    with_moe(
        dense(
            "llama-4-scout",
            "meta-llama/Llama-4-Scout-17B-16E-Instruct",
            &["llama-4-scout-17b-16e"],
            [48, 40, 8, 128],
            [5120, 16384, 202_048, 107_769_861_120],
            [false, false, false],
            "text_config; interleave_moe_layer_step 1: every layer has experts; intermediate_size_mlp is the dense width",
        ),
        Moe {
            experts: 16,
            top_k: 1,
            expert_intermediate: 8192,
            shared_intermediate: 8192,
            moe_layers: 48,
        },
    ),
    with_moe(
        dense(
            "llama-4-maverick",
            "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
            &["llama-4-maverick-17b-128e"],
            [48, 40, 8, 128],
            [5120, 16384, 202_048, 400_711_848_960],
            [false, false, false],
            "text_config; interleave_moe_layer_step 2: every other layer has experts; intermediate_size_mlp is the dense width",
        ),
        Moe {
            experts: 128,
            top_k: 1,
            expert_intermediate: 8192,
            shared_intermediate: 8192,
            moe_layers: 24,
        },
    ),
    with_moe(
        dense(
            "mixtral-8x7b",
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            &["mixtral-8x7b-v0.1"],
            [32, 32, 8, 128],
            [4096, 14336, 32_000, 46_702_792_704],
            [false, false, false],
            HF,
        ),
        Moe {
            experts: 8,
            top_k: 2,
            expert_intermediate: 14336,
            shared_intermediate: 0,
            moe_layers: 32,
        },
    ),
];

/// How a served checkpoint stores its layer weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightDtype {
    /// bf16 / fp16 as published.
    Bf16,
    /// 8-bit float (`-FP8`, `-FP8-dynamic`): 1 byte, run on FP8 tensor cores where the GPU
    /// has them.
    Fp8,
    /// 4-bit integer or float weights (`-AWQ`, `-GPTQ`, `-W4A16`, `-INT4`, `-NVFP4`):
    /// half a byte, computed in bf16.
    Int4,
}

impl WeightDtype {
    /// Bytes per layer weight.
    pub fn bytes(self) -> f64 {
        match self {
            WeightDtype::Bf16 => 2.0,
            WeightDtype::Fp8 => 1.0,
            WeightDtype::Int4 => 0.5,
        }
    }

    /// As a name (`sim profiles`, engine lines).
    pub fn name(self) -> &'static str {
        match self {
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Fp8 => "fp8",
            WeightDtype::Int4 => "int4",
        }
    }
}

/// Quantisation suffixes of served checkpoints, longest first, and the dtype each implies.
const QUANT_SUFFIXES: &[(&str, WeightDtype)] = &[
    ("-fp8-dynamic", WeightDtype::Fp8),
    ("-w8a8-fp8", WeightDtype::Fp8),
    ("-fp8", WeightDtype::Fp8),
    ("-w4a16", WeightDtype::Int4),
    ("-nvfp4", WeightDtype::Int4),
    ("-awq", WeightDtype::Int4),
    ("-gptq-int4", WeightDtype::Int4),
    ("-gptq", WeightDtype::Int4),
    ("-int4", WeightDtype::Int4),
];

/// The model served as `name` (a shape name, a Hugging Face repository with or without
/// its organisation, `-Instruct` optional, a quantisation suffix such as `-FP8-dynamic`
/// read as the weights' dtype), case-insensitive.
pub fn resolve(name: &str) -> Option<(&'static ModelShape, WeightDtype)> {
    let n = name.trim().trim_end_matches('/').to_ascii_lowercase();
    let mut tail = n.rsplit('/').next().unwrap_or(&n).to_string();
    let mut dtype = WeightDtype::Bf16;
    if let Some((s, d)) = QUANT_SUFFIXES.iter().find(|(s, _)| tail.ends_with(s)) {
        tail.truncate(tail.len() - s.len());
        dtype = *d;
    }
    let base = |s: &str| -> String {
        let s = s.to_ascii_lowercase();
        let s = s.rsplit('/').next().unwrap_or(&s).to_string();
        s.strip_suffix("-instruct").map(str::to_string).unwrap_or(s)
    };
    let want = base(&tail);
    MODELS
        .iter()
        .find(|m| want == m.name || want == base(m.hf_repo) || m.aliases.iter().any(|a| want == base(a)))
        .map(|m| (m, dtype))
}

/// The shapes as an aligned table (`sim profiles --models`).
pub fn table() -> String {
    let rows = MODELS.iter().map(|m| {
        let moe = m.moe.map_or("-".to_string(), |e| {
            format!(
                "{} experts, top {}, width {}{}, in {} of {} layers",
                e.experts,
                e.top_k,
                e.expert_intermediate,
                if e.shared_intermediate > 0 {
                    format!(" + shared {}", e.shared_intermediate)
                } else {
                    String::new()
                },
                e.moe_layers,
                m.layers
            )
        });
        let active = m.params - m.expert_params() + m.active_expert_params();
        vec![
            m.name.to_string(),
            m.hf_repo.to_string(),
            format!("{:.2}", m.params as f64 / 1e9),
            format!("{:.2}", active as f64 / 1e9),
            m.layers.to_string(),
            m.hidden.to_string(),
            format!("{}/{}x{}", m.heads, m.kv_heads, m.head_dim),
            m.intermediate.to_string(),
            moe,
            format!("{}", m.kv_bytes_per_token(2) / 1024),
            m.source(),
        ]
    });
    let mut o = crate::output::render(
        &[
            "model",
            "hf_repo",
            "params_b",
            "active_b",
            "layers",
            "hidden",
            "heads/kv x dim",
            "mlp",
            "experts",
            "kv_kib_per_token",
            "source",
        ],
        rows,
        &[2, 3, 4, 5, 7, 9],
    );
    o.push_str("
A served name resolves with or without its organisation and -Instruct; a -FP8 / -FP8-dynamic suffix reads the layer weights as FP8, -AWQ / -GPTQ / -W4A16 / -INT4 / -NVFP4 as 4-bit.
");
    o
}

/// The shapes as JSON (`sim profiles --models --json`).
pub fn json() -> serde_json::Value {
    serde_json::Value::Array(
        MODELS
            .iter()
            .map(|m| {
                serde_json::json!({
                    "model": m.name,
                    "hf_repo": m.hf_repo,
                    "aliases": m.aliases,
                    "params": m.params,
                    "active_params": m.params - m.expert_params() + m.active_expert_params(),
                    "layers": m.layers,
                    "hidden": m.hidden,
                    "heads": m.heads,
                    "kv_heads": m.kv_heads,
                    "head_dim": m.head_dim,
                    "intermediate": m.intermediate,
                    "vocab": m.vocab,
                    "tied_embeddings": m.tied_embeddings,
                    "moe": m.moe.map(|e| serde_json::json!({
                        "experts": e.experts,
                        "top_k": e.top_k,
                        "expert_intermediate": e.expert_intermediate,
                        "shared_intermediate": e.shared_intermediate,
                        "moe_layers": e.moe_layers,
                    })),
                    "kv_bytes_per_token_bf16": m.kv_bytes_per_token(2),
                    "source": m.source(),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_the_shapes_and_match_the_published_totals() {
        // Published totals (model cards), billions: the text model's count agrees to 1 %
        // (Llama 4's cards count the vision tower too: Scout 109B, Maverick 400B).
        let published = [
            ("llama-3.1-8b", 8.03),
            ("llama-3.1-70b", 70.6),
            ("llama-3.1-405b", 405.9),
            ("llama-3.2-1b", 1.24),
            ("llama-3.2-3b", 3.21),
            ("qwen3-0.6b", 0.6),
            ("qwen3-4b", 4.0),
            ("qwen3-8b", 8.2),
            ("qwen3-32b", 32.8),
            ("mistral-7b", 7.25),
            ("qwen3-30b-a3b", 30.5),
            ("qwen3-235b-a22b", 235.0),
            ("llama-4-scout", 109.0),
            ("llama-4-maverick", 400.0),
            ("mixtral-8x7b", 46.7),
        ];
        for m in MODELS {
            assert_eq!(m.shape_params(), m.params, "{}", m.name);
        }
        for (name, b) in published {
            let m = resolve(name).unwrap().0;
            let err = (m.params as f64 / 1e9 / b - 1.0).abs();
            assert!(err < 0.015, "{name}: {} vs {b}B", m.params);
        }
        // Active parameters per token of the MoE models (cards: 3.3B, 22B, 17B, 17B, 12.9B).
        for (name, b) in [
            ("qwen3-30b-a3b", 3.3),
            ("qwen3-235b-a22b", 22.0),
            ("llama-4-scout", 17.0),
            ("llama-4-maverick", 17.0),
            ("mixtral-8x7b", 12.9),
        ] {
            let m = resolve(name).unwrap().0;
            let active = m.params - m.expert_params() + m.active_expert_params();
            assert!((active as f64 / 1e9 / b - 1.0).abs() < 0.03, "{name}: {active}");
        }
    }

    #[test]
    fn served_names_resolve_with_their_dtype() {
        let r = |n: &str| resolve(n).map(|(m, d)| (m.name, d));
        assert_eq!(r("meta-llama/Llama-3.1-8B"), Some(("llama-3.1-8b", WeightDtype::Bf16)));
        assert_eq!(r("Qwen/Qwen3-30B-A3B"), Some(("qwen3-30b-a3b", WeightDtype::Bf16)));
        assert_eq!(
            r("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"),
            Some(("llama-4-scout", WeightDtype::Fp8))
        );
        assert_eq!(r("Qwen/Qwen3-32B-AWQ"), Some(("qwen3-32b", WeightDtype::Int4)));
        assert_eq!(
            r("meta-llama/Llama-3.1-70B-Instruct"),
            Some(("llama-3.1-70b", WeightDtype::Bf16))
        );
        assert_eq!(r("LLAMA-4-MAVERICK"), Some(("llama-4-maverick", WeightDtype::Bf16)));
        assert!(r("deepseek-ai/DeepSeek-V3").is_none());
    }
}
