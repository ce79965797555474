//! GPU datasheets: memory, memory bandwidth, dense tensor throughput per dtype and the
//! GPU-to-GPU link, each row citing the vendor document it comes from.
//!
//! Throughputs are dense (vendors quote "with sparsity" figures twice as large; the rows
//! halve those) with FP32 accumulation where the datasheet distinguishes it. Memory is the
//! datasheet's size in GiB; the driver keeps a few hundred MiB of it (vLLM reads the
//! total the driver reports, e.g. 23.5 GiB on an RTX 4090, 95.6 GiB on an RTX PRO 6000).
//!
//! Owns: the datasheet table and the name lookup. Invariant: numbers are the vendor's,
//! never tuned to a measurement (the physics model's efficiencies absorb the difference).

/// A GPU as its datasheet describes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpu {
    /// Short name used in profile ids (`h100`).
    pub name: &'static str,
    /// The product, as the vendor names it.
    pub product: &'static str,
    /// Lower-case alphanumeric fragments that all appear in the names the driver, a
    /// Kubernetes node label or a user gives it (the longest match wins).
    pub aliases: &'static [&'static [&'static str]],
    /// Memory, GiB.
    pub memory_gib: f64,
    /// Memory bandwidth, TB/s.
    pub bw_tbs: f64,
    /// Dense BF16 tensor throughput, TFLOPS.
    pub tflops: f64,
    /// Dense FP8 tensor throughput, TFLOPS (0: no FP8 tensor cores).
    pub tflops_fp8: f64,
    /// GPU-to-GPU bandwidth, GB/s per direction (NVLink, else the PCIe slot).
    pub link_gbs: f64,
    /// The link.
    pub link: &'static str,
    /// True when the link is NVLink (GPUs talk directly); false for PCIe (through the
    /// host's root complex, or host memory without peer-to-peer).
    pub nvlink: bool,
    /// Achievable fraction of peak in prefill, as BLIS's `hardware_config.json` gives it
    /// (only the BLIS-derived roofline profiles read it).
    pub mfu_prefill: Option<f64>,
    /// Where the numbers come from.
    pub source: &'static str,
}

impl Gpu {
    /// `vllm serve`'s `(max_num_batched_tokens, max_num_seqs)` defaults on this GPU
    /// (`vllm/engine/arg_utils.py`, `get_batch_defaults`: at least 70 GiB and not an A100:
    /// 8192 / 1024; otherwise 2048 / 256).
    pub fn vllm_batch_defaults(&self) -> (u32, u32) {
        if self.memory_gib >= 70.0 && !self.name.starts_with("a100") {
            (8192, 1024)
        } else {
            (2048, 256)
        }
    }

    /// Dense throughput for weights of `fp8` (FP8 tensor cores where the GPU has them,
    /// else BF16: vLLM dequantises), TFLOPS.
    pub fn gemm_tflops(&self, fp8: bool) -> f64 {
        if fp8 && self.tflops_fp8 > 0.0 {
            self.tflops_fp8
        } else {
            self.tflops
        }
    }
}

const H100_PAGE: &str = "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/";
const A100_PAGE: &str = "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/a100/";

/// GPUs with datasheets. The first three rows (with `mfu_prefill`) are BLIS's
/// `hardware_config.json` @ `f90a1e3a` figures, which the datasheets confirm.
pub const GPUS: &[Gpu] = &[
    Gpu {
        name: "h100",
        product: "NVIDIA H100 SXM5 80GB",
        aliases: &[&["h100"]],
        memory_gib: 80.0,
        bw_tbs: 3.35,
        tflops: 989.5,
        tflops_fp8: 1979.0,
        link_gbs: 450.0,
        link: "NVLink 4 (900 GB/s both ways)",
        nvlink: true,
        mfu_prefill: Some(0.45),
        source: H100_PAGE,
    },
    Gpu {
        name: "a100",
        product: "NVIDIA A100 SXM4 80GB",
        aliases: &[&["a100"]],
        memory_gib: 80.0,
        bw_tbs: 2.039,
        tflops: 312.0,
        tflops_fp8: 0.0,
        link_gbs: 300.0,
        link: "NVLink 3 (600 GB/s both ways)",
        nvlink: true,
        mfu_prefill: Some(0.38),
        source: A100_PAGE,
    },
    Gpu {
        name: "l40s",
        product: "NVIDIA L40S",
        aliases: &[&["l40s"]],
        memory_gib: 48.0,
        bw_tbs: 0.864,
        tflops: 362.05,
        tflops_fp8: 733.0,
        link_gbs: 32.0,
        link: "PCIe 4.0 x16",
        nvlink: false,
        mfu_prefill: Some(0.32),
        source: "NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/",
    },
    Gpu {
        name: "h100-pcie",
        product: "NVIDIA H100 PCIe 80GB",
        aliases: &[&["h100", "pcie"]],
        memory_gib: 80.0,
        bw_tbs: 2.0,
        tflops: 756.0,
        tflops_fp8: 1513.0,
        link_gbs: 64.0,
        link: "PCIe 5.0 x16",
        nvlink: false,
        mfu_prefill: None,
        source: "NVIDIA H100 PCIe datasheet (H100 Tensor Core GPU datasheet, PCIe column), https://www.nvidia.com/en-us/data-center/h100/",
    },
    Gpu {
        name: "h100-nvl",
        product: "NVIDIA H100 NVL 94GB",
        aliases: &[&["h100", "nvl"]],
        memory_gib: 94.0,
        bw_tbs: 3.9,
        tflops: 835.5,
        tflops_fp8: 1670.5,
        link_gbs: 300.0,
        link: "NVLink bridge (600 GB/s both ways)",
        nvlink: true,
        mfu_prefill: None,
        source: H100_PAGE,
    },
    Gpu {
        name: "h200",
        product: "NVIDIA H200 SXM 141GB",
        aliases: &[&["h200"]],
        memory_gib: 141.0,
        bw_tbs: 4.8,
        tflops: 989.5,
        tflops_fp8: 1979.0,
        link_gbs: 450.0,
        link: "NVLink 4 (900 GB/s both ways)",
        nvlink: true,
        mfu_prefill: None,
        source: "NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/",
    },
    Gpu {
        name: "b200",
        product: "NVIDIA B200 (HGX B200, per GPU)",
        aliases: &[&["b200"]],
        memory_gib: 180.0,
        bw_tbs: 8.0,
        tflops: 2250.0,
        tflops_fp8: 4500.0,
        link_gbs: 900.0,
        link: "NVLink 5 (1.8 TB/s both ways)",
        nvlink: true,
        mfu_prefill: None,
        source: "NVIDIA HGX B200 specifications (8-GPU figures / 8), https://www.nvidia.com/en-us/data-center/hgx/",
    },
    Gpu {
        name: "a100-40gb",
        product: "NVIDIA A100 SXM4 40GB",
        aliases: &[&["a100", "40gb"]],
        memory_gib: 40.0,
        bw_tbs: 1.555,
        tflops: 312.0,
        tflops_fp8: 0.0,
        link_gbs: 300.0,
        link: "NVLink 3 (600 GB/s both ways)",
        nvlink: true,
        mfu_prefill: None,
        source: A100_PAGE,
    },
    Gpu {
        name: "l4",
        product: "NVIDIA L4",
        aliases: &[&["l4"]],
        memory_gib: 24.0,
        bw_tbs: 0.3,
        tflops: 121.0,
        tflops_fp8: 242.5,
        link_gbs: 32.0,
        link: "PCIe 4.0 x16",
        nvlink: false,
        mfu_prefill: None,
        source: "NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/",
    },
    Gpu {
        name: "a10",
        product: "NVIDIA A10",
        aliases: &[&["a10"]],
        memory_gib: 24.0,
        bw_tbs: 0.6,
        tflops: 125.0,
        tflops_fp8: 0.0,
        link_gbs: 32.0,
        link: "PCIe 4.0 x16",
        nvlink: false,
        mfu_prefill: None,
        source: "NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
    },
    Gpu {
        name: "rtx-4090",
        product: "NVIDIA GeForce RTX 4090",
        aliases: &[&["4090"]],
        memory_gib: 24.0,
        bw_tbs: 1.008,
        tflops: 165.2,
        tflops_fp8: 330.3,
        link_gbs: 32.0,
        link: "PCIe 4.0 x16 (no peer-to-peer)",
        nvlink: false,
        mfu_prefill: None,
        source: "NVIDIA Ada GPU architecture whitepaper, appendix A (RTX 4090: FP16/BF16 and FP8 tensor with FP32 accumulate), https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
    },
    Gpu {
        name: "rtx-6000-ada",
        product: "NVIDIA RTX 6000 Ada Generation",
        aliases: &[&["6000", "ada"]],
        memory_gib: 48.0,
        bw_tbs: 0.96,
        tflops: 364.25,
        tflops_fp8: 728.5,
        link_gbs: 32.0,
        link: "PCIe 4.0 x16",
        nvlink: false,
        mfu_prefill: None,
        source: "NVIDIA RTX 6000 Ada Generation datasheet, https://www.nvidia.com/en-us/design-visualization/rtx-6000/",
    },
    Gpu {
        name: "rtx-pro-6000",
        product: "NVIDIA RTX PRO 6000 Blackwell (Workstation / Server Edition)",
        aliases: &[&["pro6000"]],
        memory_gib: 96.0,
        bw_tbs: 1.792,
        tflops: 503.8,
        tflops_fp8: 1007.6,
        link_gbs: 64.0,
        link: "PCIe 5.0 x16",
        nvlink: false,
        mfu_prefill: None,
        source: "NVIDIA RTX Blackwell GPU architecture whitepaper (RTX PRO 6000: FP16/BF16 and FP8 tensor, FP32 accumulate) and product page, https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/",
    },
];

/// Lower-case letters and digits only.
fn fold(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The GPU a name denotes: a table name (`h100`), the driver's name (`NVIDIA GeForce RTX
/// 4090`), a Kubernetes `nvidia.com/gpu.product` label (`NVIDIA-H100-80GB-HBM3`); the row
/// whose aliases match the most characters.
pub fn resolve(name: &str) -> Option<&'static Gpu> {
    let n = fold(name);
    if n.is_empty() {
        return None;
    }
    if let Some(g) = GPUS.iter().find(|g| fold(g.name) == n) {
        return Some(g);
    }
    GPUS.iter()
        .filter_map(|g| {
            g.aliases
                .iter()
                .filter(|set| set.iter().all(|a| n.contains(a)))
                .map(|set| set.iter().map(|a| a.len()).sum::<usize>())
                .max()
                .map(|score| (score, g))
        })
        .max_by_key(|(score, _)| *score)
        .map(|(_, g)| g)
}

/// The datasheets as an aligned table (`sim profiles --gpus`).
pub fn table() -> String {
    let rows = GPUS.iter().map(|g| {
        vec![
            g.name.to_string(),
            g.product.to_string(),
            format!("{}", g.memory_gib),
            format!("{}", g.bw_tbs),
            format!("{}", g.tflops),
            if g.tflops_fp8 > 0.0 {
                format!("{}", g.tflops_fp8)
            } else {
                "-".into()
            },
            format!("{} ({})", g.link_gbs, g.link),
            g.source.to_string(),
        ]
    });
    let mut o = crate::output::render(
        &[
            "gpu",
            "product",
            "memory_gib",
            "bw_tbs",
            "bf16_tflops",
            "fp8_tflops",
            "link_gbs_per_direction",
            "source",
        ],
        rows,
        &[2, 3, 4, 5],
    );
    o.push_str("
Dense tensor throughput (datasheets' sparsity figures halved). `--gpu NAME` takes the name, the driver's name or a Kubernetes gpu.product label.
");
    o
}

/// The datasheets as JSON (`sim profiles --gpus --json`).
pub fn json() -> serde_json::Value {
    serde_json::Value::Array(
        GPUS.iter()
            .map(|g| {
                serde_json::json!({
                    "gpu": g.name,
                    "product": g.product,
                    "memory_gib": g.memory_gib,
                    "bw_tbs": g.bw_tbs,
                    "bf16_tflops": g.tflops,
                    "fp8_tflops": if g.tflops_fp8 > 0.0 { Some(g.tflops_fp8) } else { None },
                    "link_gbs_per_direction": g.link_gbs,
                    "link": g.link,
                    "source": g.source,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_drivers_labels_and_users_resolve() {
        let r = |n: &str| resolve(n).map(|g| g.name);
        assert_eq!(r("NVIDIA GeForce RTX 4090"), Some("rtx-4090"));
        assert_eq!(
            r("NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
            Some("rtx-pro-6000")
        );
        assert_eq!(r("NVIDIA RTX PRO 6000 Blackwell Server Edition"), Some("rtx-pro-6000"));
        assert_eq!(r("rtx-pro-6000"), Some("rtx-pro-6000"));
        assert_eq!(r("NVIDIA-H100-80GB-HBM3"), Some("h100"));
        assert_eq!(r("NVIDIA H100 PCIe"), Some("h100-pcie"));
        assert_eq!(r("NVIDIA-A100-SXM4-80GB"), Some("a100"));
        assert_eq!(r("NVIDIA A100-SXM4-40GB"), Some("a100-40gb"));
        assert_eq!(r("NVIDIA A10"), Some("a10"));
        assert_eq!(r("NVIDIA RTX 6000 Ada Generation"), Some("rtx-6000-ada"));
        assert_eq!(r("H200"), Some("h200"));
        assert_eq!(r("tpu-v5e"), None);
        assert_eq!(r(""), None);
        let names: std::collections::BTreeSet<&str> = GPUS.iter().map(|g| g.name).collect();
        assert_eq!(names.len(), GPUS.len(), "names are unique");
    }

    #[test]
    fn datasheets_are_plausible() {
        for g in GPUS {
            assert!(
                g.memory_gib > 0.0 && g.bw_tbs > 0.0 && g.tflops > 0.0 && g.link_gbs > 0.0,
                "{}",
                g.name
            );
            // FP8 is twice the dense BF16 figure, as the sheets round it (the L40S sheet:
            // 733 against 362.05, 2.02x).
            assert!(
                g.tflops_fp8 == 0.0 || (g.tflops_fp8 / g.tflops - 2.0).abs() < 0.03,
                "{}",
                g.name
            );
            assert!(g.source.contains("https://"), "{}", g.name);
        }
        assert_eq!(resolve("rtx-pro-6000").unwrap().vllm_batch_defaults(), (8192, 1024));
        assert_eq!(resolve("a100").unwrap().vllm_batch_defaults(), (2048, 256));
        assert_eq!(resolve("rtx-4090").unwrap().vllm_batch_defaults(), (2048, 256));
    }
}
