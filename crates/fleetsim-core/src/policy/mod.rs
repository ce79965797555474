//! Routing policies. A policy sees only a [`RouterView`] (what the real router holds at that
//! instant: the endpoint list, the last *published* engine stats with their read times,
//! and router-local request stats) plus the request, and answers with a [`Decision`]. It
//! can never read live backend state.
//!
//! Adding a policy: one file here (with its `pub mod` line below), and one line in
//! [`registry::REGISTRY`]. The file holds
//! the policy (a [`RoutingPolicy`]) and its registry entry: a marker type implementing
//! [`kind::PolicyKind`], which declares the kind name, the parameter struct (serde,
//! `deny_unknown_fields`, upstream defaults) and its validation, the default scrape
//! interval, the builder, the one-line description, the catalogue entry that
//! `sim policies` prints, and how released routers run it: production-stack's command line
//! and `--routing-logic` (what `sim import` reads), or another router's flags (what
//! `sim tune --upstream-only` keeps). Scenario parsing, `sim policies`, `sim tune`,
//! `sim import` and the reference pages read the registry; nothing else names the kind.
//!
//! Owns: routing logic and each policy's own state (rings, tries, counters). May not see:
//! backends, the simulation or metrics; only a `RouterView`. Invariant: a decision is a
//! function of the view, the request, the policy's state and its named random stream.

pub mod aibrix;
pub mod aibrix_preble;
pub mod cacheaware;
pub mod capacity;
pub mod catalogue;
pub mod consistent_hash;
pub mod counterparts;
pub mod dynamo;
pub mod furc;
pub mod hashring;
pub mod hashtrie;
pub mod kind;
pub mod kvaware;
pub mod leastinflight;
pub mod leastrequest;
pub mod llmd;
pub mod load_since_scrape;
pub mod loadaware;
pub mod params;
pub mod powerofd;
pub mod prefix_hash;
pub mod prefixaware;
pub mod qps;
pub mod random;
pub mod registry;
pub mod roundrobin;
pub mod session;
pub mod sgltree;
pub mod sticky;
pub mod vllm_kv_aware;

use crate::ids::{BackendId, RequestId};
use crate::rng::SimRng;
use crate::time::SimTime;
use crate::view::EngineStatsEntry;
use crate::view::KvFeed;
use crate::view::RequestStatsEntry;

pub use kind::PolicyConfig;
pub use registry::{REGISTRY, policy_kinds};

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
    /// The API the request uses: routers that tokenize only a completion's `prompt`
    /// (production-stack `kvaware`, `loadaware`) see nothing of a chat request.
    pub api: crate::content::RequestApi,
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
    /// `(own in-flight + 1) / max_num_seqs` ([`capacity`]): fresh, capacity-aware.
    LocalSlots,
    /// `(scraped running + waiting + own dispatches since + 1) / max_num_seqs`
    /// ([`capacity`]); QPS while stats are missing.
    Slots,
    /// Lowest scraped KV usage, ties by own dispatches since ([`capacity`]).
    KvHeadroom,
}

impl Fallback {
    /// Every fallback, in the order messages list them.
    pub const ALL: [Fallback; 7] = [
        Fallback::Qps,
        Fallback::LeastInflight,
        Fallback::LocalInflight,
        Fallback::ScrapedPlusSent,
        Fallback::LocalSlots,
        Fallback::Slots,
        Fallback::KvHeadroom,
    ];

    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Qps => "qps",
            Fallback::LeastInflight => "leastinflight",
            Fallback::LocalInflight => "local_inflight",
            Fallback::ScrapedPlusSent => "scraped_plus_sent",
            Fallback::LocalSlots => "local_slots",
            Fallback::Slots => "slots",
            Fallback::KvHeadroom => "kv_headroom",
        }
    }

    /// True if the rule divides by each endpoint's slots (`max_num_seqs`).
    pub fn reads_slots(self) -> bool {
        matches!(self, Fallback::LocalSlots | Fallback::Slots)
    }

    /// True if the rule records this router's dispatches since each scrape.
    pub fn records_sent(self) -> bool {
        matches!(self, Fallback::ScrapedPlusSent | Fallback::Slots | Fallback::KvHeadroom)
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
            api: crate::content::RequestApi::Completions,
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
            api: crate::content::RequestApi::Completions,
        }
    }
}
