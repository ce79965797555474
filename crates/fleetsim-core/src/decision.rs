//! The branch a routing policy took at a decision: the vocabulary shared by the policies
//! (which report it), the router (which records it) and metrics and explain (which count
//! and classify it).
//!
//! Owns: [`Branch`] and its stable file names. Sees: nothing else of the crate, so that
//! `metrics` can name a branch without importing `policy` or `router`.
//! Invariant: [`Branch::as_str`] names are stable (they are column values in
//! `decisions.csv` and keys of `summary.json`), and [`Branch::ALL`] is the report order.

/// Which branch of its logic a policy took (reported per decision and in summaries).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Branch {
    /// `roundrobin`.
    RoundRobin,
    /// `session`: hash ring owner of the session key.
    SessionHash,
    /// `session` without a key: `_qps_routing`.
    SessionNoKeyQps,
    /// `prefixaware`: random among endpoints sharing the longest match (>= threshold).
    PrefixMatch,
    /// `prefixaware` below threshold: `_qps_routing` (upstream today).
    FallbackQps,
    /// `prefixaware` below threshold: least-in-flight from engine stats (PR #1089).
    FallbackLeastInflight,
    /// prefixaware `follow = true`: a below-threshold continuation sent where its earlier
    /// prompt went.
    FallbackFollow,
    /// `prefixaware` below threshold, least-in-flight wanted but some endpoint lacks engine
    /// stats: `_qps_routing`.
    FallbackNoStatsQps,
    /// `leastinflight`.
    LeastInflight,
    /// `leastinflight` with missing engine stats: `_qps_routing`.
    LeastInflightNoStatsQps,
    /// `random`.
    Random,
    /// `least_request`.
    LeastRequest,
    /// `power_of_d`.
    PowerOfD,
    /// SGLang `cache_aware`: match rate above the threshold, to a holder of the prefix.
    CacheAwareHit,
    /// SGLang `cache_aware`: miss, to the worker with the smallest tree.
    CacheAwareSmallestTree,
    /// SGLang `cache_aware`: loads imbalanced, to the least-loaded worker.
    CacheAwareImbalanced,
    /// llm-d EPP: highest weighted score.
    LlmdScore,
    /// AIBrix `prefix-cache`: a matched pod within the load band.
    AibrixPrefixHit,
    /// AIBrix `prefix-cache`: no match (or none within the band): least-request.
    AibrixLeastRequest,
    /// AIBrix `prefix-cache-preble`: match ratio above the threshold, least histogram load
    /// among the pods on the longest matching node.
    AibrixPrebleHit,
    /// AIBrix `prefix-cache-preble`: least Preble cost.
    AibrixPrebleCost,
    /// `prefix-cache-preble` with the PR #2382 gate on (min-running pods only), prefix step.
    AibrixPrebleGatedHit,
    /// `prefix-cache-preble` with the PR #2382 gate on, cost step.
    AibrixPrebleGatedCost,
    /// `kvaware`: the holder of the longest cached prefix.
    KvHit,
    /// KV-aware policies' upstream fallback with a session key: the hash ring.
    KvFallbackSession,
    /// KV-aware policies' upstream fallback without a key: `_qps_routing`.
    KvFallbackQps,
    /// `load_balanced_kvaware`: scraped loads spread past the threshold, argmin.
    KvImbalanced,
    /// `loadaware`: best hit-minus-load score.
    LoadAwareScore,
    /// Dynamo and vllm-router `kv_aware`: lowest cost (or softmax sample).
    DynamoCost,
    /// SGLang / vllm-router `cache_aware` below the threshold: the least-loaded worker.
    CacheAwareLeastLoad,
    /// smg `cache_aware`: the holder spilled (its load far above the mean), to the least
    /// loaded worker that does not.
    CacheAwareSpill,
}

impl Branch {
    /// Every branch, in report order.
    pub const ALL: [Branch; 31] = [
        Branch::RoundRobin,
        Branch::SessionHash,
        Branch::SessionNoKeyQps,
        Branch::PrefixMatch,
        Branch::FallbackQps,
        Branch::FallbackLeastInflight,
        Branch::FallbackFollow,
        Branch::FallbackNoStatsQps,
        Branch::LeastInflight,
        Branch::LeastInflightNoStatsQps,
        Branch::Random,
        Branch::LeastRequest,
        Branch::PowerOfD,
        Branch::CacheAwareHit,
        Branch::CacheAwareSmallestTree,
        Branch::CacheAwareImbalanced,
        Branch::LlmdScore,
        Branch::AibrixPrefixHit,
        Branch::AibrixLeastRequest,
        Branch::AibrixPrebleHit,
        Branch::AibrixPrebleCost,
        Branch::AibrixPrebleGatedHit,
        Branch::AibrixPrebleGatedCost,
        Branch::KvHit,
        Branch::KvFallbackSession,
        Branch::KvFallbackQps,
        Branch::KvImbalanced,
        Branch::LoadAwareScore,
        Branch::DynamoCost,
        Branch::CacheAwareLeastLoad,
        Branch::CacheAwareSpill,
    ];

    /// Stable name used in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Branch::RoundRobin => "roundrobin",
            Branch::SessionHash => "session_hash",
            Branch::SessionNoKeyQps => "session_nokey_qps",
            Branch::PrefixMatch => "prefix_match",
            Branch::FallbackQps => "fallback_qps",
            Branch::FallbackLeastInflight => "fallback_leastinflight",
            Branch::FallbackFollow => "fallback_follow",
            Branch::FallbackNoStatsQps => "fallback_nostats_qps",
            Branch::LeastInflight => "leastinflight",
            Branch::LeastInflightNoStatsQps => "leastinflight_nostats_qps",
            Branch::Random => "random",
            Branch::LeastRequest => "least_request",
            Branch::PowerOfD => "power_of_d",
            Branch::CacheAwareHit => "cache_aware_hit",
            Branch::CacheAwareSmallestTree => "cache_aware_smallest_tree",
            Branch::CacheAwareImbalanced => "cache_aware_imbalanced",
            Branch::LlmdScore => "llmd_score",
            Branch::AibrixPrefixHit => "aibrix_prefix_hit",
            Branch::AibrixLeastRequest => "aibrix_least_request",
            Branch::AibrixPrebleHit => "aibrix_preble_hit",
            Branch::AibrixPrebleCost => "aibrix_preble_cost",
            Branch::AibrixPrebleGatedHit => "aibrix_preble_gated_hit",
            Branch::AibrixPrebleGatedCost => "aibrix_preble_gated_cost",
            Branch::KvHit => "kv_hit",
            Branch::KvFallbackSession => "kv_fallback_session",
            Branch::KvFallbackQps => "kv_fallback_qps",
            Branch::KvImbalanced => "kv_imbalanced",
            Branch::LoadAwareScore => "loadaware_score",
            Branch::DynamoCost => "dynamo_cost",
            Branch::CacheAwareLeastLoad => "cache_aware_least_load",
            Branch::CacheAwareSpill => "cache_aware_spill",
        }
    }
}

/// Why a row or run that took `kv_fallback_*` branches does not measure the KV lookup:
/// shown beside such results (the run summary, a sweep's `aggregate.md`).
pub const KV_FALLBACK_WHY: &str = "Chat requests (`request_api = \"chat\"`, the default) always take it: kvaware, load_balanced_kvaware and loadaware tokenize only the body's `prompt` (routing_logic.py @ a6c01db0 L357-373), so such results measure the session-hash / QPS fallback, not the KV lookup (docs/burst8-atlas.md)";

/// Whether a branch is the KV-aware policies' upstream fallback.
fn is_kv_fallback(branch_name: &str) -> bool {
    branch_name.starts_with("kv_fallback_")
}

/// The share of decisions, given `(branch name, count)` pairs, that took a `kv_fallback_*`
/// branch, when above zero: it labels whichever policy fell back, whatever its name.
pub fn kv_fallback_share<'a>(counts: impl IntoIterator<Item = (&'a str, f64)>) -> Option<f64> {
    let (mut fallback, mut all) = (0.0, 0.0);
    for (branch, n) in counts {
        all += n;
        if is_kv_fallback(branch) {
            fallback += n;
        }
    }
    (fallback > 0.0 && all > 0.0).then(|| fallback / all)
}
