//! Routing policies. A policy sees only a [`RouterView`] (what the real router holds at that
//! instant: the endpoint list, the last *published* engine stats with their read times,
//! and router-local request stats) plus the request, and answers with a [`Decision`]. It
//! can never read live backend state.
//!
//! Adding a policy: one file here, one variant in [`PolicyConfig`], one arm in [`build`].
//!
//! Owns: routing logic and each policy's own state (rings, tries, counters). May not see:
//! backends, the simulation or metrics; only a `RouterView`. Invariant: a decision is a
//! function of the view, the request, the policy's state and its named random stream.

pub mod aibrix;
pub mod aibrix_preble;
pub mod cacheaware;
pub mod catalogue;
pub mod dynamo;
pub mod hashring;
pub mod hashtrie;
pub mod kvaware;
pub mod leastinflight;
pub mod leastrequest;
pub mod llmd;
pub mod load_since_scrape;
pub mod loadaware;
pub mod powerofd;
pub mod prefixaware;
pub mod qps;
pub mod random;
pub mod roundrobin;
pub mod session;
pub mod sgltree;

use crate::ids::{BackendId, RequestId};
use crate::rng::SimRng;
use crate::time::SimTime;
use crate::view::EngineStatsEntry;
use crate::view::KvFeed;
use crate::view::RequestStatsEntry;

/// An endpoint as service discovery lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    /// The backend behind the URL.
    pub backend: BackendId,
    /// Its URL (sorted by `roundrobin`, hashed by `session`).
    pub url: String,
}

/// Everything a policy may look at for one decision. All slices are parallel to
/// `endpoints` (available endpoints in discovery order).
pub struct RouterView<'a> {
    /// Decision time.
    pub now: SimTime,
    /// Available endpoints, in discovery order (the order tie-breaks use).
    pub endpoints: &'a [EndpointInfo],
    /// Last published engine stats per endpoint (`None`: missing, as after a failed scrape).
    pub engine_stats: &'a [Option<EngineStatsEntry>],
    /// Router-local request stats per endpoint (`None`: endpoint never used).
    pub request_stats: &'a [Option<RequestStatsEntry>],
    /// The engines' KV-event feed as delivered so far (KV-event-fed policies only).
    pub kv: Option<&'a KvFeed>,
}

/// The request as the router sees it.
pub struct RequestInfo<'a> {
    /// Its id (for policies that track their own requests until they finish).
    pub request: RequestId,
    /// Chained hashes of the prompt's full KV blocks (KV-event-fed policies only).
    pub block_hashes: &'a [u64],
    /// The engines' block size.
    pub block_size_tokens: u32,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// The session-key header value, if the client sends one.
    pub session_key: Option<&'a str>,
    /// Hashes of the prompt's fixed-size character chunks, the last one possibly partial
    /// (filled only for policies whose [`RoutingPolicy::prompt_chunk_chars`] is set).
    pub prompt_chunks: &'a [u64],
    /// Characters per chunk (`HashTrie`: 128 upstream).
    pub chunk_chars: u32,
    /// Characters in the prompt.
    pub prompt_chars: u64,
    /// The request is a chat completion (`messages`), not a completion (`prompt`): routers
    /// that tokenize only `prompt` (production-stack `kvaware`, `loadaware`) see nothing.
    pub chat: bool,
}

pub use crate::decision::Branch;

/// A routing decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Index into `RouterView::endpoints`.
    pub pos: usize,
    /// The branch taken.
    pub branch: Branch,
    /// Prefix match length in characters (trie-based policies; 0 otherwise).
    pub match_chars: u64,
}

/// A routing policy instance (owns its state: counters, rings, tries).
pub trait RoutingPolicy: Send {
    /// Picks an endpoint.
    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision;

    /// The chunk size in characters if the policy reads `RequestInfo::prompt_chunks`
    /// (computing them costs time, so policies that do not read them say `None`).
    fn prompt_chunk_chars(&self) -> Option<u32> {
        None
    }

    /// True if the policy builds a chat request's string by joining the messages' contents
    /// with `"\n"` (production-stack `PrefixAwareRouter`): the router then hashes the
    /// separators into `RequestInfo::prompt_chunks` and counts them in `prompt_chars`.
    fn joins_chat_messages(&self) -> bool {
        false
    }

    /// True if the policy reads `RouterView::kv` and `RequestInfo::block_hashes`.
    fn needs_kv_events(&self) -> bool {
        false
    }

    /// The first output token of a request this policy routed reached the router.
    fn on_first_token(&mut self, _request: RequestId) {}

    /// A request's stream ended.
    fn on_finished(&mut self, _request: RequestId) {}

    /// The router (re)started at `now`: policies with a background loop anchor its ticks
    /// here. A new policy assumes the router started at time 0.
    fn on_router_start(&mut self, _now: SimTime) {}
}

/// `prefixaware`'s below-threshold fallback.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// `_qps_routing` (production-stack main).
    Qps,
    /// Least-in-flight from engine stats, random within a band (PR #1089).
    LeastInflight,
    /// Least-in-flight on the router's own in-flight counts (fresh, as `least_request`):
    /// never stale for a single router, no engine stats needed.
    LocalInflight,
    /// Scraped load plus this router's own dispatches since each entry was read: the
    /// scrape corrected by what the router itself sent after it (QPS while stats are
    /// missing, as #1089).
    ScrapedPlusSent,
}

impl Fallback {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Qps => "qps",
            Fallback::LeastInflight => "leastinflight",
            Fallback::LocalInflight => "local_inflight",
            Fallback::ScrapedPlusSent => "scraped_plus_sent",
        }
    }
}

/// A validated policy configuration.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyConfig {
    /// production-stack `RoundRobinRouter`.
    RoundRobin,
    /// production-stack `SessionRouter` (consistent hash ring on the session key).
    Session,
    /// production-stack `PrefixAwareRouter`.
    PrefixAware {
        /// `--prefix-min-match-length`, in characters (upstream default 0: threshold off).
        prefix_min_match_length: u64,
        /// Below-threshold fallback.
        fallback: Fallback,
        /// Least-in-flight tie band (+1 in PR #1089); unused with `fallback = "qps"`.
        band: u32,
        /// Tie rule within the band (random in PR #1089); unused with `fallback = "qps"`.
        tie: leastrequest::Tie,
        /// Endpoints sampled by a load-based fallback (0: all; 2: power-of-two).
        sample: u32,
        /// When a fallback pick enters the trie (at once upstream).
        insert: prefixaware::Insertion,
        /// A below-threshold request extending a whole earlier below-threshold prompt goes
        /// where that prompt went (not upstream; off by default).
        follow: bool,
    },
    /// Least-in-flight from scraped engine stats on every request (the fix, standalone).
    LeastInflight {
        /// Tie band.
        band: u32,
        /// Tie rule within the band.
        tie: leastrequest::Tie,
    },
    /// Uniform random.
    Random,
    /// Fewest router-local in-flight requests.
    LeastRequest {
        /// Tie rule.
        tie: leastrequest::Tie,
    },
    /// Best of `d` sampled.
    PowerOfD {
        /// Sample size.
        d: u32,
        /// Load signal.
        load: powerofd::LoadSource,
    },
    /// SGLang `cache_aware`.
    SglangCacheAware(cacheaware::CacheAwareParams),
    /// llm-d EPP default profile.
    Llmd(llmd::LlmdParams),
    /// AIBrix `prefix-cache` with its load gates.
    AibrixPrefixCache(aibrix::AibrixParams),
    /// AIBrix `prefix-cache-preble` with the PR #2382 load gate.
    AibrixPreble(aibrix_preble::AibrixPrebleParams),
    /// production-stack `kvaware` (and PR #884's `load_balanced_kvaware` with a threshold).
    KvAware {
        /// `--kv-aware-threshold`, tokens.
        threshold_tokens: u64,
        /// PR #884 `--imbalanced-threshold`, a float >= 0 (None = +inf).
        imbalanced_threshold: Option<f64>,
        /// Ties of PR #884's imbalanced argmin (upstream: first).
        tie: leastrequest::Tie,
    },
    /// production-stack PR #1035 `loadaware`.
    LoadAware {
        /// `beta`.
        beta: f64,
        /// Ties of the argmax (upstream: the smallest URL, `first`).
        tie: leastrequest::Tie,
    },
    /// NVIDIA Dynamo KV router.
    Dynamo(dynamo::DynamoParams),
}

/// Valid `router.policy.kind` values.
pub const POLICY_KINDS: &str = "roundrobin, session, prefixaware, leastinflight, random, least_request, power_of_d, sglang_cache_aware, llmd, aibrix_prefix_cache, aibrix_preble, kvaware, load_balanced_kvaware, loadaware, dynamo";

impl PolicyConfig {
    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        match self {
            PolicyConfig::RoundRobin => "roundrobin".into(),
            PolicyConfig::Session => "session".into(),
            PolicyConfig::PrefixAware {
                prefix_min_match_length,
                fallback,
                band,
                tie,
                sample,
                insert,
                follow,
            } => {
                let sample = match sample {
                    0 => String::new(),
                    d => format!(", sample = {d}"),
                };
                let insert = match insert {
                    prefixaware::Insertion::AtPick => "",
                    prefixaware::Insertion::SecondTurn => ", insert = second_turn",
                };
                let insert = if *follow {
                    format!("{insert}, follow = true")
                } else {
                    insert.to_string()
                };
                match fallback {
                    Fallback::Qps => format!(
                        "prefixaware (prefix_min_match_length = {prefix_min_match_length}, fallback = qps{insert})"
                    ),
                    _ => format!(
                        "prefixaware (prefix_min_match_length = {prefix_min_match_length}, fallback = {}, band = {band}{}{sample}{insert})",
                        fallback.as_str(),
                        tie_suffix(*tie)
                    ),
                }
            }
            PolicyConfig::LeastInflight { band, tie } => format!("leastinflight (band = {band}{})", tie_suffix(*tie)),
            PolicyConfig::Random => "random".into(),
            PolicyConfig::LeastRequest { tie } => format!("least_request (tie = {})", tie.as_str()),
            PolicyConfig::PowerOfD { d, load } => format!("power_of_d (d = {d}, load = {})", load.as_str()),
            PolicyConfig::SglangCacheAware(p) => format!(
                "sglang_cache_aware (cache_threshold = {}, balance_abs_threshold = {}, balance_rel_threshold = {}, eviction_interval_secs = {}, max_tree_size = {}{})",
                p.cache_threshold,
                p.balance_abs_threshold,
                p.balance_rel_threshold,
                p.eviction_interval_secs,
                p.max_tree_size,
                tie_suffix_first(p.tie)
            ),
            PolicyConfig::Llmd(p) => format!(
                "llmd (queue x{}, kv-cache-utilization x{}, prefix-cache x{})",
                p.queue_weight, p.kv_weight, p.prefix_weight
            ),
            PolicyConfig::AibrixPrefixCache(p) => format!(
                "aibrix_prefix_cache (imbalance_abs_count = {}, std_dev_factor = {})",
                p.imbalance_abs_count, p.std_dev_factor
            ),
            PolicyConfig::AibrixPreble(p) => format!(
                "aibrix_preble (imbalance_abs_count = {}, match_ratio_threshold = {}, target_gpu = {}, histogram_window_s = {}{})",
                p.imbalance_abs_count,
                p.match_ratio_threshold,
                p.target_gpu.as_str(),
                p.histogram_window.as_secs_f64(),
                tie_suffix_first(p.tie)
            ),
            PolicyConfig::KvAware {
                threshold_tokens,
                imbalanced_threshold: None,
                ..
            } => format!("kvaware (kv_aware_threshold = {threshold_tokens})"),
            PolicyConfig::KvAware {
                threshold_tokens,
                imbalanced_threshold: Some(t),
                tie,
            } => format!(
                "load_balanced_kvaware (kv_aware_threshold = {threshold_tokens}, imbalanced_threshold = {t}{})",
                tie_suffix_first(*tie)
            ),
            PolicyConfig::LoadAware { beta, tie } => format!("loadaware (beta = {beta}{})", tie_suffix_first(*tie)),
            PolicyConfig::Dynamo(p) => format!(
                "dynamo (overlap_score_weight = {}, router_temperature = {})",
                p.overlap_score_weight, p.temperature
            ),
        }
    }

    /// True if the real router polls every endpoint concurrently on a ticker (llm-d's
    /// datalayer) rather than in sequential passes (production-stack's scraper).
    pub fn polls_endpoints_concurrently(&self) -> bool {
        matches!(self, PolicyConfig::Llmd(_))
    }

    /// The engine-stats refresh interval the real router uses by default, when the
    /// scenario does not set `router.engine_stats_interval_s`.
    pub fn default_engine_stats_interval_s(&self) -> f64 {
        match self {
            // llm-d `--refresh-metrics-interval`.
            PolicyConfig::Llmd(_) => 0.05,
            // production-stack `--engine-stats-interval`.
            _ => 30.0,
        }
    }
}

/// `, tie = first` when the tie rule is not the default (random), so existing reports keep
/// their wording.
fn tie_suffix(tie: leastrequest::Tie) -> &'static str {
    match tie {
        leastrequest::Tie::Random => "",
        leastrequest::Tie::First => ", tie = first",
    }
}

/// `, tie = random` when a policy whose upstream breaks ties to the first endpoint is run
/// with random ties (a what-if), so reports of the upstream rule keep their wording.
fn tie_suffix_first(tie: leastrequest::Tie) -> &'static str {
    match tie {
        leastrequest::Tie::First => "",
        leastrequest::Tie::Random => ", tie = random",
    }
}

/// Instantiates a policy.
pub fn build(cfg: &PolicyConfig) -> Box<dyn RoutingPolicy> {
    match *cfg {
        PolicyConfig::RoundRobin => Box::new(roundrobin::RoundRobin::default()),
        PolicyConfig::Session => Box::new(session::Session::default()),
        PolicyConfig::PrefixAware {
            prefix_min_match_length,
            fallback,
            band,
            tie,
            sample,
            insert,
            follow,
        } => Box::new(prefixaware::PrefixAware::with_options(
            prefix_min_match_length,
            fallback,
            prefixaware::FallbackOptions {
                band,
                tie,
                sample,
                insert,
                follow,
            },
        )),
        PolicyConfig::LeastInflight { band, tie } => Box::new(leastinflight::LeastInflight { band, tie }),
        PolicyConfig::Random => Box::new(random::Random),
        PolicyConfig::LeastRequest { tie } => Box::new(leastrequest::LeastRequest { tie }),
        PolicyConfig::PowerOfD { d, load } => Box::new(powerofd::PowerOfD { d, load }),
        PolicyConfig::SglangCacheAware(p) => Box::new(cacheaware::CacheAware::new(p)),
        PolicyConfig::Llmd(p) => Box::new(llmd::Llmd::new(p)),
        PolicyConfig::AibrixPrefixCache(p) => Box::new(aibrix::AibrixPrefixCache::new(p)),
        PolicyConfig::AibrixPreble(p) => Box::new(aibrix_preble::AibrixPreble::new(p)),
        PolicyConfig::KvAware {
            threshold_tokens,
            imbalanced_threshold,
            tie,
        } => Box::new(kvaware::KvAware::new(threshold_tokens, imbalanced_threshold).with_tie(tie)),
        PolicyConfig::LoadAware { beta, tie } => Box::new(loadaware::LoadAware::new(beta).with_tie(tie)),
        PolicyConfig::Dynamo(p) => Box::new(dynamo::Dynamo::new(p)),
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Hand-built views for policy unit tests.
    use super::*;

    /// Owned storage behind a `RouterView`.
    pub struct ViewFixture {
        pub endpoints: Vec<EndpointInfo>,
        pub engine: Vec<Option<EngineStatsEntry>>,
        pub requests: Vec<Option<RequestStatsEntry>>,
        pub kv: Option<KvFeed>,
        pub now: SimTime,
    }

    impl ViewFixture {
        /// `n` endpoints `http://backend-{i}:8000`, no stats at all.
        pub fn new(n: usize) -> Self {
            ViewFixture {
                endpoints: (0..n)
                    .map(|i| EndpointInfo {
                        backend: BackendId::from_index(i),
                        url: format!("http://backend-{i}:8000"),
                    })
                    .collect(),
                engine: vec![None; n],
                requests: vec![None; n],
                kv: None,
                now: SimTime(0),
            }
        }

        /// Decision time, in seconds.
        pub fn at(mut self, secs: f64) -> Self {
            self.now = SimTime(crate::time::secs_to_ns(secs));
            self
        }

        /// Sets engine loads (running, waiting) for every endpoint.
        pub fn loads(mut self, loads: &[(u32, u32)]) -> Self {
            self.engine = loads
                .iter()
                .map(|&(running, waiting)| {
                    Some(EngineStatsEntry {
                        running,
                        waiting,
                        kv_used_blocks: 0,
                        kv_total_blocks: 0,
                        read_at: SimTime(0),
                    })
                })
                .collect();
            self
        }

        /// Sets window dispatch counts (`None` = absent).
        pub fn dispatches(mut self, d: &[Option<u32>]) -> Self {
            self.requests = d
                .iter()
                .map(|c| {
                    c.map(|n| RequestStatsEntry {
                        window_dispatches: n,
                        qps: f64::from(n) / 60.0,
                        in_prefill: 0,
                        in_decoding: 0,
                    })
                })
                .collect();
            self
        }

        /// Sets router-local in-flight counts (`None` = endpoint never used).
        pub fn in_flight(mut self, c: &[Option<u32>]) -> Self {
            self.requests = c
                .iter()
                .map(|c| {
                    c.map(|n| RequestStatsEntry {
                        window_dispatches: n,
                        qps: f64::from(n) / 60.0,
                        in_prefill: n,
                        in_decoding: 0,
                    })
                })
                .collect();
            self
        }

        pub fn view(&self) -> RouterView<'_> {
            RouterView {
                now: self.now,
                endpoints: &self.endpoints,
                engine_stats: &self.engine,
                request_stats: &self.requests,
                kv: self.kv.as_ref(),
            }
        }
    }

    pub fn req<'a>(key: Option<&'a str>, chunks: &'a [u64]) -> RequestInfo<'a> {
        RequestInfo {
            request: RequestId(0),
            block_hashes: &[],
            block_size_tokens: 16,
            prompt_tokens: chunks.len() as u32 * 32,
            session_key: key,
            prompt_chunks: chunks,
            chunk_chars: 128,
            prompt_chars: chunks.len() as u64 * 128,
            chat: false,
        }
    }

    /// A request of `prompt_chars` characters in chunks of `chunk_chars`.
    pub fn req_chars(chunks: &[u64], chunk_chars: u32, prompt_chars: u64) -> RequestInfo<'_> {
        RequestInfo {
            request: RequestId(0),
            block_hashes: &[],
            block_size_tokens: 16,
            prompt_tokens: (prompt_chars / 4) as u32,
            session_key: None,
            prompt_chunks: chunks,
            chunk_chars,
            prompt_chars,
            chat: false,
        }
    }
}
