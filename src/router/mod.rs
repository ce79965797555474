//! The router: service discovery (a static, ordered endpoint list), the engine-stats
//! scraper, router-local request stats, and one routing policy.
//!
//! Per request, exactly as production-stack's `route_general_request`: a fresh copy of the
//! engine stats (the last *published* scrape) and of the request stats is taken, the policy
//! decides, and the dispatch is recorded in the request stats before any other request can
//! be routed (optionally after a configurable lag, to model routers that update
//! asynchronously). The router never reads backend state; the simulation hands it scrape
//! results when scrape events fire.

pub mod engine_stats;
pub mod request_stats;

use engine_stats::{EngineStatsEntry, EngineStatsScraper, ScrapeNext};
use request_stats::{RequestStatsEntry, RequestStatsMonitor};

use crate::content::{Content, char_chunk_hashes};
use crate::ids::BackendId;
use crate::policy::{Decision, EndpointInfo, PolicyConfig, RequestInfo, RouterView, RoutingPolicy, build};
use crate::rng::SimRng;
use crate::time::{SimDuration, SimTime};

/// `HashTrie` chunk size in characters (hard-coded upstream; issue #957 asked for a flag).
pub const CHUNK_CHARS: u32 = 128;

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
    /// The policy.
    pub policy: PolicyConfig,
}

/// What the policy saw of one endpoint at a decision, for the audit trail.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ViewEntry {
    /// Published engine stats (`None` = missing).
    pub engine: Option<EngineStatsEntry>,
    /// Request stats (`None` = endpoint never used).
    pub requests: Option<RequestStatsEntry>,
}

/// The router.
pub struct Router {
    cfg: RouterConfig,
    endpoints: Vec<EndpointInfo>,
    scraper: EngineStatsScraper,
    req_stats: RequestStatsMonitor,
    policy: Box<dyn RoutingPolicy>,
    rng: SimRng,
    engine_view: Vec<Option<EngineStatsEntry>>,
    request_view: Vec<Option<RequestStatsEntry>>,
    chunks: Vec<u64>,
}

impl Router {
    /// A router over `endpoints` (discovery order), drawing policy randomness from `rng`.
    pub fn new(cfg: RouterConfig, endpoints: Vec<EndpointInfo>, rng: SimRng) -> Router {
        let n = endpoints.len();
        for (i, e) in endpoints.iter().enumerate() {
            assert_eq!(e.backend.index(), i, "endpoints must be listed in backend order");
        }
        Router {
            scraper: EngineStatsScraper::new(n, cfg.engine_stats_interval, cfg.scrape_duration),
            req_stats: RequestStatsMonitor::new(n, cfg.request_stats_window),
            policy: build(&cfg.policy),
            rng,
            engine_view: Vec::with_capacity(n),
            request_view: Vec::with_capacity(n),
            chunks: Vec::new(),
            endpoints,
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RouterConfig {
        &self.cfg
    }

    /// The endpoint list.
    pub fn endpoints(&self) -> &[EndpointInfo] {
        &self.endpoints
    }

    /// Routes one request. The view the policy saw is appended to `audit` if given.
    pub fn route(
        &mut self,
        now: SimTime,
        session_key: Option<&str>,
        content: &Content,
        audit: Option<&mut Vec<ViewEntry>>,
    ) -> (BackendId, Decision) {
        self.engine_view.clear();
        self.request_view.clear();
        for (pos, ep) in self.endpoints.iter().enumerate() {
            self.engine_view.push(self.scraper.entry(pos));
            self.request_view.push(self.req_stats.entry(ep.backend, now));
        }
        let chunk_chars = self.policy.prompt_chunk_chars();
        match chunk_chars {
            Some(c) => char_chunk_hashes(content, self.cfg.chars_per_token, c, &mut self.chunks),
            None => self.chunks.clear(),
        }
        let view = RouterView {
            now,
            endpoints: &self.endpoints,
            engine_stats: &self.engine_view,
            request_stats: &self.request_view,
        };
        let req = RequestInfo {
            session_key,
            prompt_chunks: &self.chunks,
            chunk_chars: chunk_chars.unwrap_or(CHUNK_CHARS),
            prompt_chars: u64::from(content.prompt_tokens) * u64::from(self.cfg.chars_per_token),
        };
        let d = self.policy.route(&req, &view, &mut self.rng);
        assert!(d.pos < self.endpoints.len(), "policy returned an endpoint out of range");
        if let Some(a) = audit {
            a.extend(self.engine_view.iter().zip(&self.request_view).map(|(e, r)| ViewEntry {
                engine: *e,
                requests: *r,
            }));
        }
        (self.endpoints[d.pos].backend, d)
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
        (self.scraper.record(pos, entry), self.scraper.scrape_duration())
    }

    /// Ends a scrape pass: publishes, and returns how long until the next pass starts.
    pub fn scrape_pass_end(&mut self) -> SimDuration {
        self.scraper.publish();
        self.scraper.sleep()
    }

    /// Request-stats lag.
    pub fn request_stats_lag(&self) -> SimDuration {
        self.cfg.request_stats_lag
    }
}
