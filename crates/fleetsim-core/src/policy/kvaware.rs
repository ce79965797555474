//! production-stack `KvawareRouter` (`src/vllm_router/routers/routing_logic.py` @ `a6c01db`)
//! and, with `imbalanced_threshold`, PR #884's `LoadBalancedKvawareRouter`.
//!
//! * Lookup: the LMCache controller's `layout_info` for the prompt's tokens, i.e. which
//!   instance holds how many leading tokens. Modelled by the engines' KV-event feed (block
//!   granularity, `router.kv_event_lag_s` late): LMCache's chunks live beside vLLM's prefix
//!   cache, so this can only under-count what a large CPU-side LMCache would hold.
//! * "Take the first key of `layout_info`": the controller's order is unspecified; here the
//!   endpoint with the longest cached prefix, first in discovery order among equals.
//! * Route there unless nothing is cached anywhere or `matched < max(prompt - threshold, 0)`
//!   (`--kv-aware-threshold`, default 2000 tokens); then the upstream fallback: the session
//!   hash ring if the request has a session key, else `_qps_routing`. Load is never read.
//! * PR #884: first, if `max(q) - min(q) >= imbalanced_threshold` over scraped
//!   `running + waiting` (missing stats = 0), route to the argmin (first in list order).
//!   The default threshold is +inf: plain `kvaware`. Upstream lines (production-stack
//!   `refs/pull/884/head` @ `a554656c`, `src/vllm_router/routers/routing_logic.py`):
//!   `_get_queue_length` L443-448 (missing stats = 0), `_is_load_balanced` L450-459
//!   (`max - min < threshold` is balanced), `_route_to_least_loaded` L461-469 (Python
//!   `min(endpoints, key=...)`: the first endpoint among equal queues, deterministic),
//!   tier 1 in `route_request` L493-500; the flag is `type=float, default=float("inf")`
//!   (`src/vllm_router/parsers/parser.py` L418-428). `tie = "random"` is a what-if, not
//!   upstream.
//! * Chat-completions requests (`workload.request_api = "chat"`): upstream tokenizes
//!   `request_json.get("prompt", "")` only (`routing_logic.py` @ `a6c01db0` L357-373,
//!   "TODO (Yuhan): Handle chat completions"), so a chat request looks up zero tokens,
//!   LMCache reports no holder and the request takes the upstream fallback (L386-399).

use super::kind::{Doc, Fleet, LogicKey, LogicValue, PolicyKind, RoutingLogic, StackFlags, param};
use super::leastrequest::{Tie, argmin};
use super::params::{ParamError, count, tie_first, tie_suffix_first};
use super::session::Session;
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::content::RequestApi;
use crate::rng::SimRng;

/// Cached leading tokens per endpoint according to the KV feed (all 0 for a
/// chat-completions request: upstream looks up the empty `prompt` field).
pub fn matched_tokens(req: &RequestInfo, view: &RouterView) -> Vec<u64> {
    let kv = view.kv.expect("KV-event-fed policy without a feed");
    if req.api == RequestApi::Chat {
        return vec![0; view.endpoints.len()];
    }
    view.endpoints
        .iter()
        .map(|e| u64::from(kv.overlap(e.backend, req.block_hashes)) * u64::from(req.block_size_tokens))
        .collect()
}

/// The upstream fallback: session ring with a key, else `_qps_routing`.
pub fn upstream_fallback(session: &mut Session, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
    let d = session.route(req, view, rng);
    Decision {
        branch: if req.session_key.is_some() {
            Branch::KvFallbackSession
        } else {
            Branch::KvFallbackQps
        },
        ..d
    }
}

/// The policy.
pub struct KvAware {
    /// `--kv-aware-threshold` in tokens.
    pub threshold_tokens: u64,
    /// PR #884 `--imbalanced-threshold`, a float >= 0 (None = +inf).
    pub imbalanced_threshold: Option<f64>,
    /// Ties of the imbalanced argmin (`first`: Python `min`, upstream).
    pub tie: Tie,
    session: Session,
}

impl KvAware {
    /// A router with upstream's fallback state.
    pub fn new(threshold_tokens: u64, imbalanced_threshold: Option<f64>) -> Self {
        KvAware {
            threshold_tokens,
            imbalanced_threshold,
            tie: Tie::First,
            session: Session::default(),
        }
    }

    /// The same router with tie rule `tie` on the imbalanced argmin.
    pub fn with_tie(mut self, tie: Tie) -> Self {
        self.tie = tie;
        self
    }
}

impl RoutingPolicy for KvAware {
    fn needs_kv_events(&self) -> bool {
        true
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        if let Some(th) = self.imbalanced_threshold {
            let q: Vec<u64> = view
                .engine_stats
                .iter()
                .map(|e| e.map_or(0, |e| u64::from(e.running) + u64::from(e.waiting)))
                .collect();
            let (lo, hi) = (*q.iter().min().expect("n > 0"), *q.iter().max().expect("n > 0"));
            // Integer loads, float threshold: `spread >= 2.5` needs a spread of 3.
            if (hi - lo) as f64 >= th {
                return Decision {
                    pos: argmin(&q, self.tie, rng),
                    branch: Branch::KvImbalanced,
                    match_chars: 0,
                };
            }
        }
        let m = matched_tokens(req, view);
        let best = *m.iter().max().expect("n > 0");
        let needed = u64::from(req.prompt_tokens).saturating_sub(self.threshold_tokens);
        if best == 0 || best < needed {
            return upstream_fallback(&mut self.session, req, view, rng);
        }
        let pos = m.iter().position(|&x| x == best).expect("max exists");
        Decision {
            pos,
            branch: Branch::KvHit,
            match_chars: best * req.prompt_chars / u64::from(req.prompt_tokens.max(1)),
        }
    }
}

/// production-stack's `--kv-aware-threshold` default, tokens.
const DEFAULT_THRESHOLD_TOKENS: i64 = 2000;

/// The validated configuration of both kinds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// `--kv-aware-threshold`, tokens.
    pub threshold_tokens: u64,
    /// PR #884 `--imbalanced-threshold`, a float >= 0 (None = +inf: plain kvaware).
    pub imbalanced_threshold: Option<f64>,
    /// Ties of PR #884's imbalanced argmin (upstream: first).
    pub tie: Tie,
}

impl Config {
    fn build(&self) -> Box<dyn RoutingPolicy> {
        Box::new(KvAware::new(self.threshold_tokens, self.imbalanced_threshold).with_tie(self.tie))
    }

    fn flags(&self) -> StackFlags {
        let mut f = StackFlags {
            args: vec!["--kv-aware-threshold".into(), self.threshold_tokens.to_string()],
            reads_request_stats: true,
            ..StackFlags::default()
        };
        if let Some(t) = self.imbalanced_threshold {
            f.reads_engine_stats = true;
            f.args.extend(["--imbalanced-threshold".into(), t.to_string()]);
            f.notes.push(format!(
                "{} and --imbalanced-threshold are production-stack PR #884",
                LoadBalancedKind::KIND
            ));
        }
        f
    }
}

fn threshold(v: Option<i64>) -> Result<u64, ParamError> {
    Ok(u64::from(count(
        v.unwrap_or(DEFAULT_THRESHOLD_TOKENS),
        "kv_aware_threshold",
        0,
    )?))
}

/// production-stack `kvaware`'s registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of production-stack `kvaware`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    kv_aware_threshold: Option<i64>,
}

/// `--kv-aware-threshold`, as both KV-aware routing logics read it.
const THRESHOLD_KEY: LogicKey = LogicKey {
    key: "kv_aware_threshold",
    flag: Some("--kv-aware-threshold"),
    default: Some((LogicValue::Int(2000), "default --kv-aware-threshold 2000")),
    unit: None,
};

impl PolicyKind for Kind {
    const KIND: &'static str = "kvaware";
    const DOC: Doc = Doc {
        source: "production-stack KvawareRouter (LMCache controller lookup)",
        decision: "the holder of the longest cached prefix unless more than kv_aware_threshold tokens stay \
                   uncached; else the session ring, or _qps_routing without a session key",
        signals: "cached prefix per engine from KV events (router.kv_event_lag_s, 10 ms) standing in for the LMCache \
                  controller; no load at all; fallback: session ring, else _qps_routing",
        params: &[param(
            "kv_aware_threshold",
            "2000",
            "route to the holder unless more than this many prompt tokens are uncached",
        )],
    };
    const ROUTING_LOGIC: Option<RoutingLogic> = Some(RoutingLogic {
        pr: None,
        keys: &[THRESHOLD_KEY],
        needs: None,
    });
    type Params = Params;
    type Config = Config;
    fn validate(f: Params, _: &Fleet) -> Result<Config, ParamError> {
        Ok(Config {
            threshold_tokens: threshold(f.kv_aware_threshold)?,
            imbalanced_threshold: None,
            tie: Tie::First,
        })
    }
    fn describe(c: &Config) -> String {
        format!("kv_aware_threshold = {}", c.threshold_tokens)
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        c.build()
    }
    fn production_stack(c: &Config) -> Option<StackFlags> {
        Some(c.flags())
    }
}

/// PR #884's load-balanced variant's registry entry ([`super::registry`]).
pub struct LoadBalancedKind;

/// `[router.policy]` of PR #884's load-balanced variant.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancedParams {
    kv_aware_threshold: Option<i64>,
    imbalanced_threshold: f64,
    tie: Option<String>,
}

impl PolicyKind for LoadBalancedKind {
    const KIND: &'static str = "load_balanced_kvaware";
    const DOC: Doc = Doc {
        source: "production-stack PR #884 LoadBalancedKvawareRouter",
        decision: "scraped max - min >= imbalanced_threshold: the least loaded; else kvaware's rule",
        signals: "as kvaware, plus scraped running + waiting (router.engine_stats_interval_s, 30 s; missing = 0)",
        params: &[
            param("kv_aware_threshold", "2000", "as kvaware"),
            param(
                "imbalanced_threshold",
                "(required)",
                "float >= 0; max - min scraped load >= this: argmin, first in list order (upstream default +inf = kvaware)",
            ),
        ],
    };
    const ROUTING_LOGIC: Option<RoutingLogic> = Some(RoutingLogic {
        pr: Some("PR #884"),
        keys: &[
            THRESHOLD_KEY,
            LogicKey {
                key: "imbalanced_threshold",
                flag: Some("--imbalanced-threshold"),
                default: None,
                unit: None,
            },
        ],
        needs: Some((
            "--imbalanced-threshold",
            Kind::KIND,
            "default --imbalanced-threshold inf (PR #884) never rebalances",
        )),
    });
    type Params = LoadBalancedParams;
    type Config = Config;
    fn validate(f: LoadBalancedParams, _: &Fleet) -> Result<Config, ParamError> {
        // PR #884's `--imbalanced-threshold`: a float >= 0 (`inf`, upstream's default, is
        // plain kvaware).
        let t = f.imbalanced_threshold;
        let t = if t >= 0.0 {
            t
        } else {
            return Err(ParamError::new(
                "imbalanced_threshold",
                format!("must be a number >= 0 (inf = plain {}), got {t}", Kind::KIND),
            ));
        };
        Ok(Config {
            threshold_tokens: threshold(f.kv_aware_threshold)?,
            imbalanced_threshold: Some(t),
            tie: tie_first(f.tie.as_deref(), "tie", "Python `min()`, PR #884")?,
        })
    }
    fn describe(c: &Config) -> String {
        format!(
            "kv_aware_threshold = {}, imbalanced_threshold = {}{}",
            c.threshold_tokens,
            c.imbalanced_threshold.unwrap_or(f64::INFINITY),
            tie_suffix_first(c.tie)
        )
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        c.build()
    }
    fn production_stack(c: &Config) -> Option<StackFlags> {
        Some(c.flags())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ids::{BackendId, RequestId};
    use crate::policy::testkit::ViewFixture;
    use crate::rng::stream;
    use crate::time::{SimDuration, SimTime};
    use crate::view::KvEvent;
    use crate::view::KvFeed;

    /// A feed where backend `i` holds the first `held[i]` of blocks 1, 2, 3, ...
    pub fn feed(held: &[u32]) -> KvFeed {
        let mut f = KvFeed::new(held.len(), SimDuration(0));
        for (i, &n) in held.iter().enumerate() {
            let ev = (1..=u64::from(n)).map(|hash| KvEvent { stored: true, hash }).collect();
            f.publish(SimTime(0), BackendId::from_index(i), ev);
        }
        f
    }

    /// A request of `blocks` 16-token blocks hashed 1, 2, 3, ...
    pub fn kv_req<'a>(hashes: &'a [u64], key: Option<&'a str>) -> RequestInfo<'a> {
        RequestInfo {
            request: RequestId(0),
            block_hashes: hashes,
            block_size_tokens: 16,
            prompt_tokens: hashes.len() as u32 * 16,
            session_key: key,
            prompt_chunks: &[],
            chunk_chars: 128,
            prompt_chars: hashes.len() as u64 * 64,
            api: RequestApi::Completions,
        }
    }

    #[test]
    fn follows_the_longest_holder_within_the_threshold() {
        let mut f = ViewFixture::new(3);
        f.kv = Some(feed(&[2, 200, 200]));
        let hashes: Vec<u64> = (1..=250).collect();
        let mut rng = stream(1, "t", 0);
        // 4000 tokens, 3200 matched on backends 1 and 2: needed 4000 - 2000 = 2000 <= 3200.
        let mut p = KvAware::new(2000, None);
        let d = p.route(&kv_req(&hashes, None), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::KvHit), "first of the longest holders");
        // Threshold 500: 3200 < 3500 needed, so the fallback (QPS without a key).
        let mut p = KvAware::new(500, None);
        assert_eq!(
            p.route(&kv_req(&hashes, None), &f.view(), &mut rng).branch,
            Branch::KvFallbackQps
        );
        assert_eq!(
            p.route(&kv_req(&hashes, Some("s")), &f.view(), &mut rng).branch,
            Branch::KvFallbackSession
        );
    }

    #[test]
    fn pr884_balances_first_when_scraped_loads_diverge() {
        let mut f = ViewFixture::new(2).loads(&[(8, 4), (1, 0)]);
        f.kv = Some(feed(&[10, 0]));
        let hashes: Vec<u64> = (1..=10).collect();
        let mut rng = stream(1, "t", 0);
        let mut p = KvAware::new(2000, Some(11.0));
        assert_eq!(
            p.route(&kv_req(&hashes, None), &f.view(), &mut rng).branch,
            Branch::KvImbalanced
        );
        let mut p = KvAware::new(2000, Some(12.0));
        assert_eq!(
            p.route(&kv_req(&hashes, None), &f.view(), &mut rng).pos,
            0,
            "spread 11 < 12: kvaware"
        );
    }

    #[test]
    fn pr884_float_threshold_and_first_url_ties() {
        // Loads 3, 1, 1, 4: spread 3. 2.5 and 3.0 trigger, 3.01 does not; argmin ties go to
        // the first endpoint in list order (Python `min`), never at random.
        let mut f = ViewFixture::new(4).loads(&[(3, 0), (1, 0), (0, 1), (4, 0)]);
        f.kv = Some(feed(&[0, 0, 0, 0]));
        let mut rng = stream(1, "t", 0);
        for th in [0.0, 2.5, 3.0] {
            let mut p = KvAware::new(2000, Some(th));
            for _ in 0..20 {
                let d = p.route(&kv_req(&[1], None), &f.view(), &mut rng);
                assert_eq!((d.pos, d.branch), (1, Branch::KvImbalanced), "threshold {th}");
            }
        }
        let mut p = KvAware::new(2000, Some(3.01));
        assert_ne!(
            p.route(&kv_req(&[1], None), &f.view(), &mut rng).branch,
            Branch::KvImbalanced
        );
        let mut p = KvAware::new(2000, Some(f64::INFINITY));
        assert_ne!(
            p.route(&kv_req(&[1], None), &f.view(), &mut rng).branch,
            Branch::KvImbalanced
        );
    }

    #[test]
    fn pr884_random_ties_reach_every_minimum_and_chat_falls_back() {
        // Loads 3, 1, 1, 4 (spread 3 >= 2): `first` always takes backend 1; `random`
        // reaches backends 1 and 2 and nothing else.
        let mut f = ViewFixture::new(4).loads(&[(3, 0), (1, 0), (0, 1), (4, 0)]);
        f.kv = Some(feed(&[0, 0, 0, 0]));
        let mut rng = stream(1, "t", 0);
        let mut p = KvAware::new(2000, Some(2.0)).with_tie(Tie::Random);
        let seen: std::collections::BTreeSet<usize> = (0..200)
            .map(|_| p.route(&kv_req(&[1], None), &f.view(), &mut rng).pos)
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [1, 2]);
        // A chat-completions request looks up the empty `prompt`: no holder, the fallback,
        // although backend 0 holds the whole prompt.
        let mut f = ViewFixture::new(2);
        f.kv = Some(feed(&[10, 0]));
        let hashes: Vec<u64> = (1..=10).collect();
        let mut p = KvAware::new(2000, None);
        let mut r = kv_req(&hashes, Some("s"));
        assert_eq!(p.route(&r, &f.view(), &mut rng).branch, Branch::KvHit);
        r.api = RequestApi::Chat;
        assert_eq!(p.route(&r, &f.view(), &mut rng).branch, Branch::KvFallbackSession);
    }
}
