//! The router: service discovery (a static, ordered endpoint list), the engine-stats
//! scraper, router-local request stats, and one routing policy.
//!
//! Per request, exactly as production-stack's `route_general_request`: a fresh copy of the
//! engine stats (the last *published* scrape) and of the request stats is taken, the policy
//! decides, and the dispatch is recorded in the request stats before any other request can
//! be routed (optionally after a configurable lag, to model routers that update
//! asynchronously). The router never reads backend state; the simulation hands it scrape
//! results when scrape events fire.
//!
//! Owns: discovery, the scraper, request stats and the policy instance. May not see: the
//! backends' live state (only what a scrape read, with its `read_at`) or the metrics.
//! Invariant: a policy is handed exactly what the real router holds at that instant.

pub mod engine_stats;
pub mod front;
pub mod request_stats;

use crate::view::KvFeed;
use engine_stats::{EngineStatsEntry, EngineStatsScraper, ScrapeNext};
use request_stats::{RequestStatsEntry, RequestStatsMonitor};

use crate::backend::kv::KvEvent;
use crate::content::{Content, block_hashes, char_chunk_hashes};
use crate::ids::{BackendId, ReplicaId, RequestId};
use crate::policy::{Decision, EndpointInfo, PolicyConfig, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::{SimRng, stream};
use crate::time::{SimDuration, SimTime};
use rand::RngExt;

use crate::policy::hashtrie::CHUNK_CHARS;

/// Router timing and plumbing parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterConfig {
    /// `--engine-stats-interval` (upstream default 30 s).
    pub engine_stats_interval: SimDuration,
    /// Round trip of one `/metrics` scrape.
    pub scrape_duration: SimDuration,
    /// `--request-stats-window` (upstream default 60 s).
    pub request_stats_window: SimDuration,
    /// Delay before a dispatch shows in the router's request stats (0 upstream).
    pub request_stats_lag: SimDuration,
    /// Characters per token when the prompt is seen as a string.
    pub chars_per_token: u32,
    /// Transport delay of engine KV events to the router (KV-event-fed policies only).
    pub kv_event_lag: SimDuration,
    /// The engines' KV block size, for the request's block hashes.
    pub block_size_tokens: u32,
    /// Router replicas, each with its own policy state, request stats and scrape phase.
    pub replicas: u32,
    /// How requests are spread over the replicas.
    pub front: front::FrontBalancer,
    /// Uniform jitter added to each sleep between scrape passes (0 upstream).
    pub scrape_jitter: SimDuration,
    /// Start of the first scrape pass as a fraction of the interval, in [0, 1) (0: at
    /// router start). Sweeping it moves the scrape against a burst.
    pub engine_stats_phase: f64,
    /// Counterfactual device: every decision sees the engines' live gauges instead of the
    /// last scrape (the oracle view `sim explain` compares against). Off for real routers.
    pub fresh_signals: bool,
    /// The policy.
    pub policy: PolicyConfig,
}

impl RouterConfig {
    /// When the first scrape pass of replica `r` of `replicas` starts: replicas spread
    /// evenly over one interval (production-stack issue #166: they do not coordinate),
    /// all shifted by `engine_stats_phase`.
    pub fn first_scrape(&self, r: u64, replicas: u64) -> SimTime {
        let i = self.engine_stats_interval.0;
        SimTime(i / replicas * r + (i as f64 * self.engine_stats_phase).round() as u64)
    }
}

pub use crate::view::ViewEntry;

/// Whether backend `b` serves request model `model` (a backend naming no model serves
/// all; a request naming none goes anywhere).
fn backend_serves(serves: &[Option<Vec<u32>>], b: BackendId, model: u32) -> bool {
    model == crate::workload::NO_MODEL
        || serves
            .get(b.index())
            .is_none_or(|s| s.as_ref().is_none_or(|s| s.contains(&model)))
}

/// The router.
pub struct Router {
    cfg: RouterConfig,
    /// Every backend of the fleet, by index (what discovery can list).
    fleet: Vec<EndpointInfo>,
    /// What discovery lists now, in its order (tie-breaks use it).
    endpoints: Vec<EndpointInfo>,
    scraper: EngineStatsScraper,
    req_stats: RequestStatsMonitor,
    policy: Box<dyn RoutingPolicy>,
    rng: SimRng,
    engine_view: Vec<Option<EngineStatsEntry>>,
    request_view: Vec<Option<RequestStatsEntry>>,
    chunks: Vec<u64>,
    blocks: Vec<u64>,
    kv: Option<KvFeed>,
    /// Age of the oldest engine-stats entry in the last decision's view (None: no entries).
    last_view_age: Option<SimDuration>,
    /// The last decision's time and the newest `read_at` in its view, for the invariant
    /// that no view entry is read after the decision that uses it.
    last_view_span: Option<(SimTime, SimTime)>,
    /// Draws scrape-interval jitter.
    jitter_rng: SimRng,
    /// Per backend, the request models it serves (indices in the workload's model list);
    /// `None`: it names no model and serves every request. Empty: nothing names a model.
    serves: Vec<Option<Vec<u32>>>,
    /// Per request model, the listed endpoints serving it, in discovery order; `None`:
    /// every listed endpoint serves it (no filter, the single-model case).
    by_model: Vec<Option<Vec<EndpointInfo>>>,
}

/// The endpoints a request for `model` may go to: `by_model`'s list for that model, or
/// every listed endpoint when it needs no filter.
fn candidates<'a>(
    endpoints: &'a [EndpointInfo],
    by_model: &'a [Option<Vec<EndpointInfo>>],
    model: u32,
) -> &'a [EndpointInfo] {
    match by_model.get(model as usize) {
        Some(Some(list)) => list,
        _ => endpoints,
    }
}

impl Router {
    /// Router replica `replica` over a fleet of backends (by index), of which discovery
    /// lists those with `listed[i]` in index order. Its random streams derive from the
    /// master `seed`, one per purpose (`router.policy`, `router.scrape_jitter`, instance
    /// `replica`), so no stream can stand in for another.
    pub fn new(cfg: RouterConfig, fleet: Vec<EndpointInfo>, listed: &[bool], seed: u64, replica: ReplicaId) -> Router {
        let n = fleet.len();
        for (i, e) in fleet.iter().enumerate() {
            assert_eq!(e.backend.index(), i, "the fleet must be given in backend order");
        }
        assert_eq!(listed.len(), n);
        let endpoints = fleet.iter().filter(|e| listed[e.backend.index()]).cloned().collect();
        let policy = cfg.policy.build();
        Router {
            scraper: if cfg.policy.polls_endpoints_concurrently() {
                EngineStatsScraper::parallel(n, cfg.engine_stats_interval, cfg.scrape_duration)
            } else {
                EngineStatsScraper::new(n, cfg.engine_stats_interval, cfg.scrape_duration)
            },
            req_stats: RequestStatsMonitor::new(n, cfg.request_stats_window),
            kv: policy.needs_kv_events().then(|| KvFeed::new(n, cfg.kv_event_lag)),
            blocks: Vec::new(),
            last_view_age: None,
            last_view_span: None,
            jitter_rng: stream(seed, "router.scrape_jitter", u64::from(replica.0)),
            policy,
            rng: stream(seed, "router.policy", u64::from(replica.0)),
            engine_view: Vec::with_capacity(n),
            request_view: Vec::with_capacity(n),
            chunks: Vec::new(),
            endpoints,
            fleet,
            cfg,
            serves: Vec::new(),
            by_model: Vec::new(),
        }
    }

    /// The models each backend serves (`serves[b]`, indices into the workload's `models`
    /// request model names; `None`: all). Every policy then chooses among the listed
    /// endpoints serving the request's model, as each router filters its workers by the
    /// request's `model` before its routing logic runs (production-stack's request service,
    /// vllm-router's and smg's per-model worker sets; see docs/scenarios-and-fleet-model.md).
    pub fn set_models(&mut self, serves: Vec<Option<Vec<u32>>>, models: usize) {
        assert!(serves.is_empty() || serves.len() == self.fleet.len());
        self.serves = serves;
        self.by_model = vec![None; models];
        self.refilter();
    }

    /// Rebuilds the per-model endpoint lists after the listed endpoints changed.
    fn refilter(&mut self) {
        if self.serves.iter().all(Option::is_none) {
            return;
        }
        for (m, slot) in self.by_model.iter_mut().enumerate() {
            let serving: Vec<EndpointInfo> = self
                .endpoints
                .iter()
                .filter(|e| backend_serves(&self.serves, e.backend, m as u32))
                .cloned()
                .collect();
            *slot = (serving.len() < self.endpoints.len()).then_some(serving);
        }
    }

    /// The listed endpoints a request for `model` may go to ([`crate::workload::NO_MODEL`]:
    /// every listed endpoint).
    pub fn candidates(&self, model: u32) -> &[EndpointInfo] {
        candidates(&self.endpoints, &self.by_model, model)
    }

    /// Whether any backend of the fleet, listed or not, serves `model`: a request for a
    /// model none serves is refused as not found, not as unavailable (production-stack
    /// answers 404 for a model it never saw, 503 for one scaled to zero).
    pub fn fleet_serves(&self, model: u32) -> bool {
        self.serves.is_empty()
            || self
                .fleet
                .iter()
                .any(|e| backend_serves(&self.serves, e.backend, model))
    }

    /// The configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.cfg
    }

    /// The endpoint list (what discovery lists now, in its order).
    pub fn endpoints(&self) -> &[EndpointInfo] {
        &self.endpoints
    }

    /// Discovery lists backend `b` from now on, after every endpoint already listed
    /// (Kubernetes discovery keeps pods in insertion order).
    pub fn add_endpoint(&mut self, b: BackendId) {
        if !self.endpoints.iter().any(|e| e.backend == b) {
            self.endpoints.push(self.fleet[b.index()].clone());
            self.refilter();
        }
    }

    /// Discovery no longer lists backend `b`. The policy's state about it (trie entries,
    /// trees, counters) stays, as upstream never prunes it; lookups only consider listed
    /// endpoints.
    pub fn remove_endpoint(&mut self, b: BackendId) {
        self.endpoints.retain(|e| e.backend != b);
        self.refilter();
    }

    /// Backend `b`'s engine is gone (its KV-event stream ended): a KV-event-fed router drops
    /// its blocks once the news arrives (after the feed's lag).
    pub fn forget_kv(&mut self, now: SimTime, b: BackendId) {
        if let Some(kv) = self.kv.as_mut() {
            kv.clear(now, b);
        }
    }

    /// The backend read at position `pos` of the scrape pass; position 0 starts a pass over
    /// the endpoints listed now. `None`: nothing is listed, the pass is empty.
    pub fn scrape_target(&mut self, pos: usize) -> Option<BackendId> {
        if pos == 0 && !self.scraper.begin_pass(self.endpoints.iter().map(|e| e.backend)) {
            return None;
        }
        Some(self.scraper.target(pos))
    }

    /// The oracle view of a counterfactual run: the published engine stats of every listed
    /// endpoint become `live(b)`, read at `now`.
    pub fn set_fresh_engine_stats(&mut self, now: SimTime, mut live: impl FnMut(BackendId) -> EngineStatsEntry) {
        for e in &self.endpoints {
            let mut v = live(e.backend);
            v.read_at = now;
            self.scraper.set_published(e.backend, v);
        }
    }

    /// Age of the oldest engine-stats entry the last decision saw (None if it saw none).
    pub fn last_view_age(&self) -> Option<SimDuration> {
        self.last_view_age
    }

    /// The invariant that a view's age is never negative, for the last decision: an error
    /// naming the decision and the entry read after it. (The recorded age saturates at
    /// zero, so a negative age would otherwise pass as a fresh view.)
    pub fn check_view_age(&self) -> Result<(), String> {
        match self.last_view_span {
            Some((decided, newest)) if newest > decided => Err(format!(
                "a decision at {} s saw an engine-stats entry read at {} s, after it",
                decided.as_secs_f64(),
                newest.as_secs_f64()
            )),
            _ => Ok(()),
        }
    }

    /// True if the policy consumes engine KV events (the simulation then publishes them).
    pub fn wants_kv_events(&self) -> bool {
        self.kv.is_some()
    }

    /// KV events an engine published at `now`.
    pub fn publish_kv_events(&mut self, now: SimTime, b: BackendId, events: Vec<KvEvent>) {
        if let Some(kv) = self.kv.as_mut() {
            kv.publish(now, b, events);
        }
    }

    /// The first output token of `request` reached the router.
    pub fn on_first_token(&mut self, request: RequestId) {
        self.policy.on_first_token(request);
    }

    /// `request`'s stream ended.
    pub fn on_finished(&mut self, request: RequestId) {
        self.policy.on_finished(request);
    }

    /// Routes one request for `model` among [`Router::candidates`] (non-empty). The view
    /// the policy saw is appended to `audit` if given.
    pub fn route(
        &mut self,
        now: SimTime,
        request: RequestId,
        req: (Option<&str>, u32),
        content: &Content,
        audit: Option<&mut Vec<ViewEntry>>,
    ) -> (BackendId, Decision) {
        let (session_key, model) = req;
        let endpoints = candidates(&self.endpoints, &self.by_model, model);
        self.engine_view.clear();
        self.request_view.clear();
        for ep in endpoints {
            self.engine_view.push(self.scraper.entry(ep.backend));
            self.request_view.push(self.req_stats.entry(ep.backend, now));
        }
        self.last_view_age = self
            .engine_view
            .iter()
            .flatten()
            .map(|e| SimDuration(now.0.saturating_sub(e.read_at.0)))
            .max();
        self.last_view_span = self
            .engine_view
            .iter()
            .flatten()
            .map(|e| e.read_at)
            .max()
            .map(|r| (now, r));
        let chunk_chars = self.policy.prompt_chunk_chars();
        let join = self.policy.joins_chat_messages();
        match chunk_chars {
            Some(c) => char_chunk_hashes(content, self.cfg.chars_per_token, c, join, &mut self.chunks),
            None => self.chunks.clear(),
        }
        if let Some(kv) = self.kv.as_mut() {
            kv.advance(now);
            let bs = self.cfg.block_size_tokens.max(1);
            block_hashes(content, bs, (content.prompt_tokens / bs) as usize, &mut self.blocks);
        }
        let view = RouterView {
            now,
            endpoints,
            engine_stats: &self.engine_view,
            request_stats: &self.request_view,
            kv: self.kv.as_ref(),
        };
        let req = RequestInfo {
            request,
            block_hashes: &self.blocks,
            block_size_tokens: self.cfg.block_size_tokens,
            prompt_tokens: content.prompt_tokens,
            session_key,
            prompt_chunks: &self.chunks,
            chunk_chars: chunk_chars.unwrap_or(CHUNK_CHARS),
            prompt_chars: content.prompt_chars(self.cfg.chars_per_token, join),
            api: content.api(),
        };
        let d = self.policy.route(&req, &view, &mut self.rng);
        assert!(d.pos < endpoints.len(), "policy returned an endpoint out of range");
        if let Some(a) = audit {
            let start = a.len();
            a.resize(start + self.fleet.len(), ViewEntry::UNLISTED);
            for ((ep, e), r) in endpoints.iter().zip(&self.engine_view).zip(&self.request_view) {
                a[start + ep.backend.index()] = ViewEntry {
                    engine: *e,
                    requests: *r,
                    listed: true,
                };
            }
        }
        (endpoints[d.pos].backend, d)
    }

    /// Records a dispatch in the request stats (`RequestStatsMonitor.on_new_request`).
    pub fn on_new_request(&mut self, b: BackendId, now: SimTime) {
        self.req_stats.on_new_request(b, now);
    }

    /// First response chunk received.
    pub fn on_request_response(&mut self, b: BackendId) {
        self.req_stats.on_request_response(b);
    }

    /// Response stream finished.
    pub fn on_request_complete(&mut self, b: BackendId) {
        self.req_stats.on_request_complete(b);
    }

    /// Records the scrape of endpoint `pos`; returns what comes next and after how long.
    pub fn scrape_read(&mut self, pos: usize, entry: Option<EngineStatsEntry>) -> (ScrapeNext, SimDuration) {
        let after = self.scraper.delay_after(pos);
        (self.scraper.record(pos, entry), after)
    }

    /// Ends a scrape pass: publishes, and returns how long until the next pass starts
    /// (the sleep, plus a uniform draw in `[-jitter, +jitter]` when `router.scrape_jitter_s`
    /// is set, never below zero).
    pub fn scrape_pass_end(&mut self) -> SimDuration {
        self.scraper.publish();
        let sleep = self.scraper.sleep();
        let j = self.cfg.scrape_jitter.0;
        if j == 0 {
            return sleep;
        }
        let d = self.jitter_rng.random_range(0..=2 * j) as i128 - j as i128;
        SimDuration((sleep.0 as i128 + d).max(0) as u64)
    }

    /// A router restart at `now`: the policy's state (tries, trees, counters, background
    /// loops, which start over from `now`), request stats, published engine stats and the
    /// KV-event replica are lost; the endpoint list and the scraper's schedule survive (the
    /// next pass repopulates the stats).
    pub fn restart(&mut self, now: SimTime) {
        let n = self.fleet.len();
        self.policy = self.cfg.policy.build();
        self.policy.on_router_start(now);
        self.req_stats = RequestStatsMonitor::new(n, self.cfg.request_stats_window);
        self.scraper.clear_published();
        if self.kv.is_some() {
            self.kv = Some(KvFeed::new(n, self.cfg.kv_event_lag));
        }
    }

    /// Request-stats lag.
    pub fn request_stats_lag(&self) -> SimDuration {
        self.cfg.request_stats_lag
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::NO_MODEL;

    fn router() -> Router {
        router_of(2)
    }

    #[test]
    fn every_policy_sees_only_the_endpoints_serving_the_request_model() {
        let mut r = router_of(3);
        // backend-0 and backend-2 serve model 0, backend-1 serves model 1; model 2: nobody.
        r.set_models(vec![Some(vec![0]), Some(vec![1]), Some(vec![0])], 3);
        let content = Content::session_turn(None, 1, 8, 1);
        let picks = |r: &mut Router, model: u32, n: usize| -> Vec<usize> {
            (0..n)
                .map(|i| {
                    let id = RequestId::from_index(i);
                    r.route(SimTime(i as u64), id, (None, model), &content, None).0.index()
                })
                .collect()
        };
        assert_eq!(picks(&mut r, 0, 4), vec![0, 2, 0, 2]);
        assert_eq!(picks(&mut r, 1, 2), vec![1, 1]);
        assert_eq!(
            r.candidates(NO_MODEL).len(),
            3,
            "a request naming no model goes anywhere"
        );
        assert!(r.candidates(2).is_empty() && !r.fleet_serves(2));
        // Discovery drops backend-1: its model has no endpoint now, but the fleet serves it.
        r.remove_endpoint(BackendId::from_index(1));
        assert!(r.candidates(1).is_empty() && r.fleet_serves(1));
        r.add_endpoint(BackendId::from_index(1));
        assert_eq!(picks(&mut r, 1, 1), vec![1]);
    }

    #[test]
    fn one_model_served_everywhere_needs_no_filter() {
        let mut r = router_of(2);
        r.set_models(vec![Some(vec![0]), Some(vec![0])], 1);
        assert!(
            r.by_model.iter().all(Option::is_none),
            "the single-model case is the unfiltered list"
        );
        r.set_models(vec![Some(vec![0]), None], 1);
        assert!(
            r.by_model.iter().all(Option::is_none),
            "a backend naming no model serves all"
        );
    }

    fn router_of(n: usize) -> Router {
        let policy = PolicyConfig::new::<crate::policy::roundrobin::Kind>(());
        let cfg = RouterConfig {
            engine_stats_interval: SimDuration::from_secs_f64(30.0),
            scrape_duration: SimDuration(0),
            request_stats_window: SimDuration::from_secs_f64(60.0),
            request_stats_lag: SimDuration(0),
            chars_per_token: 4,
            kv_event_lag: SimDuration(0),
            block_size_tokens: 16,
            replicas: 1,
            front: front::FrontBalancer::RoundRobin,
            scrape_jitter: SimDuration(0),
            engine_stats_phase: 0.0,
            fresh_signals: false,
            policy,
        };
        let fleet = (0..n)
            .map(|i| EndpointInfo {
                backend: BackendId::from_index(i),
                url: format!("http://b{i}"),
            })
            .collect();
        Router::new(cfg, fleet, &vec![true; n], 1, ReplicaId(0))
    }

    fn stats(read_at: SimTime) -> EngineStatsEntry {
        EngineStatsEntry {
            running: 1,
            waiting: 0,
            kv_used_blocks: 0,
            kv_total_blocks: 1000,
            read_at,
        }
    }

    #[test]
    fn a_view_read_before_its_decision_passes_and_one_read_after_it_is_named() {
        let mut r = router();
        let content = Content::session_turn(None, 1, 8, 1);
        let at = |s: u64| SimTime(s * 1_000_000_000);
        assert_eq!(r.check_view_age(), Ok(()), "no decision yet");
        r.scraper.set_published(BackendId::from_index(0), stats(at(2)));
        r.scraper.set_published(BackendId::from_index(1), stats(at(5)));
        r.route(at(5), RequestId::from_index(0), (None, NO_MODEL), &content, None);
        assert_eq!(r.check_view_age(), Ok(()), "an age of zero is allowed");
        assert_eq!(r.last_view_age(), Some(SimDuration::from_secs_f64(3.0)));
        // A scrape stamped in the future: the recorded age saturates to 3 s, the check names it.
        r.scraper.set_published(BackendId::from_index(1), stats(at(9)));
        r.route(at(6), RequestId::from_index(1), (None, NO_MODEL), &content, None);
        assert_eq!(r.last_view_age(), Some(SimDuration::from_secs_f64(4.0)));
        assert_eq!(
            r.check_view_age(),
            Err("a decision at 6 s saw an engine-stats entry read at 9 s, after it".into())
        );
    }
}
