//! `[router.policy]` tables of the policies beyond production-stack's own (random,
//! least_request, power_of_d, SGLang, llm-d, AIBrix, KV-aware, Dynamo): raw layer with
//! upstream defaults, and validation into [`PolicyConfig`].

use serde::Deserialize;

use super::{FieldError, Res, count, from_value};
use fleetsim_core::policy::PolicyConfig;
use fleetsim_core::policy::aibrix::AibrixParams;
use fleetsim_core::policy::aibrix_preble::{AibrixPrebleParams, TargetGpu};
use fleetsim_core::policy::cacheaware::CacheAwareParams;
use fleetsim_core::policy::dynamo::DynamoParams;
use fleetsim_core::policy::leastrequest::Tie;
use fleetsim_core::policy::llmd::LlmdParams;
use fleetsim_core::policy::powerofd::LoadSource;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeastRequestFile {
    #[serde(default = "default_tie")]
    tie: String,
}

fn default_tie() -> String {
    "random".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PowerOfDFile {
    #[serde(default = "default_d")]
    d: i64,
    #[serde(default = "default_load")]
    load: String,
}

fn default_d() -> i64 {
    2
}
fn default_load() -> String {
    "local".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheAwareFile {
    cache_threshold: Option<f64>,
    balance_abs_threshold: Option<i64>,
    balance_rel_threshold: Option<f64>,
    tree_chunk_chars: Option<i64>,
    eviction_interval_secs: Option<i64>,
    max_tree_size: Option<i64>,
    tie: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LlmdFile {
    queue_weight: Option<f64>,
    kv_cache_utilization_weight: Option<f64>,
    prefix_cache_weight: Option<f64>,
    load_aware_weight: Option<f64>,
    load_aware_threshold: Option<i64>,
    active_request_weight: Option<f64>,
    block_size_tokens: Option<i64>,
    max_prefix_blocks: Option<i64>,
    lru_capacity_per_pod: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AibrixFile {
    block_chars: Option<i64>,
    max_blocks: Option<i64>,
    block_ttl_s: Option<f64>,
    imbalance_abs_count: Option<i64>,
    std_dev_factor: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AibrixPrebleFile {
    imbalance_abs_count: Option<i64>,
    match_ratio_threshold: Option<f64>,
    target_gpu: Option<String>,
    decoding_length_tokens: Option<i64>,
    time_per_token_s: Option<f64>,
    histogram_window_s: Option<f64>,
    eviction_loop_interval_s: Option<f64>,
    node_ttl_s: Option<f64>,
    tree_chunk_chars: Option<i64>,
    tie: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KvAwareFile {
    kv_aware_threshold: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LbKvAwareFile {
    kv_aware_threshold: Option<i64>,
    imbalanced_threshold: f64,
    tie: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadAwareFile {
    beta: Option<f64>,
    tie: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DynamoFile {
    overlap_score_weight: Option<f64>,
    router_temperature: Option<f64>,
}

fn unit(v: f64, path: &str) -> Res<f64> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(FieldError::new(path, format!("must be in [0, 1], got {v}")))
    }
}

fn weight(v: f64, path: &str) -> Res<f64> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(FieldError::new(path, format!("must be a finite weight >= 0, got {v}")))
    }
}

/// What a policy auto-tunes from the fleet (llm-d sizes its index from the pods).
#[derive(Clone, Copy, Debug)]
pub(super) struct Fleet {
    /// `backends.block_size_tokens`.
    pub block_size_tokens: u32,
    /// `backends.kv_blocks`.
    pub kv_blocks: u32,
    /// `router.chars_per_token` (a token-level prefix tree's unit).
    pub chars_per_token: u32,
}

/// Largest index any prefix-cache policy may be configured to hold (entries).
const MAX_INDEX_ENTRIES: i64 = 10_000_000;

fn non_negative(v: i64, path: &str, unit: &str) -> Res<u64> {
    if v < 0 {
        return Err(FieldError::new(path, format!("must be >= 0 {unit}, got {v}")));
    }
    Ok(v as u64)
}

fn index_size(v: i64, path: &str) -> Res<u32> {
    if !(1..=MAX_INDEX_ENTRIES).contains(&v) {
        return Err(FieldError::new(
            path,
            format!("must be between 1 and {MAX_INDEX_ENTRIES} entries, got {v}"),
        ));
    }
    Ok(v as u32)
}

/// A `tie` rule; `expected` names the upstreams of each choice for the message.
pub(super) fn tie(v: &str, path: &str, expected: &str) -> Res<Tie> {
    match v {
        "random" => Ok(Tie::Random),
        "first" => Ok(Tie::First),
        other => Err(FieldError::new(
            path,
            format!("unknown tie rule `{other}`; expected {expected}"),
        )),
    }
}

/// A group's `request_api`. The default is `chat`: agents (and production-stack's own
/// examples) call `/v1/chat/completions` (see docs/burst8-atlas.md).
pub(super) fn request_api(v: Option<&str>, path: &str) -> Res<fleetsim_core::workload::RequestApi> {
    use fleetsim_core::workload::RequestApi;
    match v.unwrap_or("chat") {
        "chat" => Ok(RequestApi::Chat),
        "completions" => Ok(RequestApi::Completions),
        other => Err(FieldError::new(
            path,
            format!("unknown request API `{other}`; expected `chat` (`messages`) or `completions` (`prompt`)"),
        )),
    }
}

/// `prefixaware`'s `insert`: when a below-threshold pick enters the trie.
pub(super) fn insertion(v: Option<&str>, path: &str) -> Res<fleetsim_core::policy::prefixaware::Insertion> {
    use fleetsim_core::policy::prefixaware::Insertion;
    match v.unwrap_or("at_pick") {
        "at_pick" => Ok(Insertion::AtPick),
        "second_turn" => Ok(Insertion::SecondTurn),
        other => Err(FieldError::new(
            path,
            format!("unknown insertion `{other}`; expected `at_pick` (PR #990, upstream) or `second_turn`"),
        )),
    }
}

/// The `tie` of a policy whose upstream breaks ties to the first endpoint (the default);
/// `upstream` names that rule for the message.
fn tie_first(v: Option<&str>, path: &str, upstream: &str) -> Res<Tie> {
    tie(
        v.unwrap_or("first"),
        path,
        &format!("`first` ({upstream}, the default) or `random`"),
    )
}

/// PR #884's `--imbalanced-threshold`: a float >= 0 (`inf`, upstream's default, is plain
/// `kvaware`).
fn imbalanced_threshold(v: f64, path: &str) -> Res<f64> {
    if v >= 0.0 {
        Ok(v)
    } else {
        Err(FieldError::new(
            path,
            format!("must be a number >= 0 (inf = plain kvaware), got {v}"),
        ))
    }
}

/// Validates the table of `kind` (without the `kind` key); `None` if `kind` is not one of
/// these policies.
pub(super) fn parse(kind: &str, rest: &toml::Value, path: &str, fleet: Fleet) -> Option<Res<PolicyConfig>> {
    let at = |k: &str| format!("{path}.{k}");
    Some(match kind {
        "random" => from_value::<super::schema::NoParams>(rest, path).map(|_| PolicyConfig::Random),
        "least_request" => from_value::<LeastRequestFile>(rest, path).and_then(|f| {
            Ok(PolicyConfig::LeastRequest {
                tie: tie(&f.tie, &at("tie"), "`random` (AIBrix) or `first` (SGLang)")?,
            })
        }),
        "power_of_d" => from_value::<PowerOfDFile>(rest, path).and_then(|f| {
            let load = match f.load.as_str() {
                "local" => LoadSource::Local,
                "scraped" => LoadSource::Scraped,
                "sglang_monitor" => LoadSource::SglangMonitor,
                other => {
                    return Err(FieldError::new(
                        at("load"),
                        format!("unknown load `{other}`; expected `local`, `scraped` or `sglang_monitor`"),
                    ));
                }
            };
            Ok(PolicyConfig::PowerOfD {
                d: count(f.d, &at("d"), 1)?,
                load,
            })
        }),
        "sglang_cache_aware" => from_value::<CacheAwareFile>(rest, path).and_then(|f| {
            let d = CacheAwareParams::default();
            let rel = f.balance_rel_threshold.unwrap_or(d.balance_rel_threshold);
            if !rel.is_finite() || rel < 0.0 {
                return Err(FieldError::new(
                    at("balance_rel_threshold"),
                    format!("must be a finite number >= 0, got {rel}"),
                ));
            }
            Ok(PolicyConfig::SglangCacheAware(CacheAwareParams {
                cache_threshold: unit(f.cache_threshold.unwrap_or(d.cache_threshold), &at("cache_threshold"))?,
                balance_abs_threshold: u64::from(count(
                    f.balance_abs_threshold.unwrap_or(d.balance_abs_threshold as i64),
                    &at("balance_abs_threshold"),
                    0,
                )?),
                balance_rel_threshold: rel,
                // At least 4: finer trees cost memory and time per stored character.
                tree_chunk_chars: count(
                    f.tree_chunk_chars.unwrap_or(i64::from(d.tree_chunk_chars)),
                    &at("tree_chunk_chars"),
                    4,
                )?,
                eviction_interval_secs: non_negative(
                    f.eviction_interval_secs.unwrap_or(d.eviction_interval_secs as i64),
                    &at("eviction_interval_secs"),
                    "seconds (0 = no eviction)",
                )?,
                max_tree_size: non_negative(
                    f.max_tree_size.unwrap_or(d.max_tree_size as i64),
                    &at("max_tree_size"),
                    "characters",
                )?,
                tie: tie_first(f.tie.as_deref(), &at("tie"), "upstream `min_by_key`")?,
            }))
        }),
        "llmd" => from_value::<LlmdFile>(rest, path).and_then(|f| {
            let d = LlmdParams::default();
            // Auto-tuned from the pods like upstream: the engines' block size and GPU blocks.
            let block_tokens = count(
                f.block_size_tokens.unwrap_or(i64::from(fleet.block_size_tokens)),
                &at("block_size_tokens"),
                1,
            )?;
            Ok(PolicyConfig::Llmd(LlmdParams {
                queue_weight: weight(f.queue_weight.unwrap_or(d.queue_weight), &at("queue_weight"))?,
                kv_weight: weight(
                    f.kv_cache_utilization_weight.unwrap_or(d.kv_weight),
                    &at("kv_cache_utilization_weight"),
                )?,
                prefix_weight: weight(
                    f.prefix_cache_weight.unwrap_or(d.prefix_weight),
                    &at("prefix_cache_weight"),
                )?,
                load_aware_weight: weight(
                    f.load_aware_weight.unwrap_or(d.load_aware_weight),
                    &at("load_aware_weight"),
                )?,
                load_aware_threshold: count(
                    f.load_aware_threshold.unwrap_or(i64::from(d.load_aware_threshold)),
                    &at("load_aware_threshold"),
                    1,
                )?,
                active_request_weight: weight(
                    f.active_request_weight.unwrap_or(d.active_request_weight),
                    &at("active_request_weight"),
                )?,
                // `blockSizeTokens x 4` characters per block, as upstream.
                block_chars: block_tokens.saturating_mul(4),
                max_prefix_blocks: count(
                    f.max_prefix_blocks.unwrap_or(i64::from(d.max_prefix_blocks)),
                    &at("max_prefix_blocks"),
                    1,
                )?,
                lru_capacity_per_pod: index_size(
                    f.lru_capacity_per_pod.unwrap_or(i64::from(fleet.kv_blocks)),
                    &at("lru_capacity_per_pod"),
                )?,
            }))
        }),
        "aibrix_prefix_cache" => from_value::<AibrixFile>(rest, path).and_then(|f| {
            let d = AibrixParams::default();
            let k = f.std_dev_factor.unwrap_or(d.std_dev_factor);
            if !k.is_finite() || k < 0.0 {
                return Err(FieldError::new(
                    at("std_dev_factor"),
                    format!("must be a finite number >= 0, got {k}"),
                ));
            }
            Ok(PolicyConfig::AibrixPrefixCache(AibrixParams {
                block_chars: count(f.block_chars.unwrap_or(i64::from(d.block_chars)), &at("block_chars"), 1)?,
                max_blocks: index_size(f.max_blocks.unwrap_or(i64::from(d.max_blocks)), &at("max_blocks"))?,
                block_ttl: super::secs(f.block_ttl_s.unwrap_or(1200.0), &at("block_ttl_s"), false)?,
                imbalance_abs_count: u64::from(count(
                    f.imbalance_abs_count.unwrap_or(d.imbalance_abs_count as i64),
                    &at("imbalance_abs_count"),
                    0,
                )?),
                std_dev_factor: k,
            }))
        }),
        "aibrix_preble" => from_value::<AibrixPrebleFile>(rest, path).and_then(|f| {
            let d = AibrixPrebleParams::default();
            let target_gpu = match f.target_gpu.as_deref().unwrap_or("V100") {
                "V100" => TargetGpu::V100,
                "A6000" => TargetGpu::A6000,
                other => {
                    return Err(FieldError::new(
                        at("target_gpu"),
                        format!(
                            "unknown target GPU `{other}`; expected `V100` (upstream default) or `A6000` \
                             (upstream silently uses V100 for any other value)"
                        ),
                    ));
                }
            };
            let tpt = f.time_per_token_s.unwrap_or(d.time_per_token_s);
            if !tpt.is_finite() || tpt < 0.0 {
                return Err(FieldError::new(
                    at("time_per_token_s"),
                    format!("must be a finite number of seconds >= 0, got {tpt}"),
                ));
            }
            Ok(PolicyConfig::AibrixPreble(AibrixPrebleParams {
                imbalance_abs_count: non_negative(
                    f.imbalance_abs_count.unwrap_or(d.imbalance_abs_count as i64),
                    &at("imbalance_abs_count"),
                    "requests",
                )?,
                match_ratio_threshold: unit(
                    f.match_ratio_threshold.unwrap_or(d.match_ratio_threshold),
                    &at("match_ratio_threshold"),
                )?,
                target_gpu,
                decoding_length_tokens: count(
                    f.decoding_length_tokens.unwrap_or(i64::from(d.decoding_length_tokens)),
                    &at("decoding_length_tokens"),
                    0,
                )?,
                time_per_token_s: tpt,
                histogram_window: super::secs(
                    f.histogram_window_s.unwrap_or(d.histogram_window.as_secs_f64()),
                    &at("histogram_window_s"),
                    false,
                )?,
                eviction_loop_interval: super::secs(
                    f.eviction_loop_interval_s
                        .unwrap_or(d.eviction_loop_interval.as_secs_f64()),
                    &at("eviction_loop_interval_s"),
                    false,
                )?,
                node_ttl: super::secs(
                    f.node_ttl_s.unwrap_or(d.node_ttl.as_secs_f64()),
                    &at("node_ttl_s"),
                    false,
                )?,
                // One token per unit by default, like upstream's tokenised tree.
                tree_chunk_chars: count(
                    f.tree_chunk_chars.unwrap_or(i64::from(fleet.chars_per_token)),
                    &at("tree_chunk_chars"),
                    1,
                )?,
                tie: tie_first(f.tie.as_deref(), &at("tie"), "upstream's strict `<` in list order")?,
            }))
        }),
        "kvaware" => from_value::<KvAwareFile>(rest, path).and_then(|f| {
            Ok(PolicyConfig::KvAware {
                threshold_tokens: u64::from(count(
                    f.kv_aware_threshold.unwrap_or(2000),
                    &at("kv_aware_threshold"),
                    0,
                )?),
                imbalanced_threshold: None,
                tie: Tie::First,
            })
        }),
        "load_balanced_kvaware" => from_value::<LbKvAwareFile>(rest, path).and_then(|f| {
            Ok(PolicyConfig::KvAware {
                threshold_tokens: u64::from(count(
                    f.kv_aware_threshold.unwrap_or(2000),
                    &at("kv_aware_threshold"),
                    0,
                )?),
                imbalanced_threshold: Some(imbalanced_threshold(
                    f.imbalanced_threshold,
                    &at("imbalanced_threshold"),
                )?),
                tie: tie_first(f.tie.as_deref(), &at("tie"), "Python `min()`, PR #884")?,
            })
        }),
        "loadaware" => from_value::<LoadAwareFile>(rest, path).and_then(|f| {
            Ok(PolicyConfig::LoadAware {
                beta: weight(f.beta.unwrap_or(1.0), &at("beta"))?,
                tie: tie_first(f.tie.as_deref(), &at("tie"), "the smallest URL, PR #1035")?,
            })
        }),
        "dynamo" => from_value::<DynamoFile>(rest, path).and_then(|f| {
            let d = DynamoParams::default();
            Ok(PolicyConfig::Dynamo(DynamoParams {
                overlap_score_weight: weight(
                    f.overlap_score_weight.unwrap_or(d.overlap_score_weight),
                    &at("overlap_score_weight"),
                )?,
                temperature: weight(f.router_temperature.unwrap_or(d.temperature), &at("router_temperature"))?,
            }))
        }),
        _ => return None,
    })
}
