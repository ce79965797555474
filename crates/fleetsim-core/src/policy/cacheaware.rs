//! SGLang router `cache_aware` (classic sgl-router, `src/policies/cache_aware.rs` @
//! sgl-project/sglang `b6f20641` and `tree.rs`; design in sglang PR #2114), with the Python
//! `RouterArgs` defaults users get: `cache_threshold = 0.3`, `balance_abs_threshold = 64`,
//! `balance_rel_threshold = 1.5`, `eviction_interval_secs = 120`, `max_tree_size = 2^26`.
//!
//! 1. Loads are router-local in-flight counts (`worker.load()`, zero staleness).
//! 2. Imbalanced iff `max - min > balance_abs_threshold` and `max > min * balance_rel_threshold`
//!    → the least-loaded worker, and the text is inserted for it. Ties: upstream's
//!    `healthy_indices.iter().min_by_key(|&&idx| workers[idx].load())` in
//!    `CacheAwarePolicy::select_worker` ("Use shortest queue when imbalanced") returns the
//!    first minimum in worker-list order, deterministically (`tie = "first"`, the default;
//!    `tie = "random"` is a what-if).
//! 3. Otherwise match the request text in the shared approximate radix tree
//!    ([`super::sgltree`]): `match_rate = matched chars / text chars`; above
//!    `cache_threshold` → a tenant of the deepest matched node; else → the tenant with the
//!    fewest stored characters (a cache *capacity* heuristic, not a load one: the "death
//!    spiral" of sglang PR #14532 when a worker on unique heavy requests has a small tree and
//!    a long queue). Upstream's `prefix_match` also refreshes that "first" tenant's access
//!    times from the deepest node to the root, hit or miss.
//! 4. Insert the text for the chosen worker.
//! 5. Eviction: a background thread sleeps `eviction_interval_secs`, then runs
//!    `evict_tenant_by_size(max_tree_size)`, forever (`interval = 0`: no thread). Here the
//!    passes are due at router start + k x interval (k >= 1) of simulated time and run, at
//!    most one per decision, before the next decision: nothing changes the tree between two
//!    decisions, and a pass leaves every tenant at or below the limit, so further passes
//!    without an insert in between do nothing; the result is the same as running each one
//!    on time. The limit is per tenant, in characters of the tree (classic router; the 2026
//!    SMG gateway made it one total per model).
//!
//! Two later routers forked it, and two parameters follow them (defaults: the classic
//! router above):
//! * `low_match = "least_load"`: below the threshold, the least in-flight worker instead of
//!   the smallest tree: sglang #14650 (merged 2025-12, in sglang-router from 0.2.4;
//!   `sgl-model-gateway/src/policies/cache_aware.rs` of sglang-router 0.3.2's sdist,
//!   `select_worker`), and vllm-project/router 0.1.17's own variant (sdist
//!   `src/policies/cache_aware.rs`, `select_prepared`: `least_loaded` over the healthy
//!   workers). Ties follow `tie` (both upstreams: the first in their worker order, a
//!   random-UUID map, i.e. random per router process).
//! * `spill_gate = true`: smg 1.13.0's HTTP path (sdist `model_gateway/src/policies/cache_aware.rs`,
//!   the spill gate): no max - min imbalance gate; a holder spills when its in-flight count
//!   is above `balance_rel_threshold` x the mean and above the mean plus
//!   `min(balance_abs_threshold, max(ceil(2 sqrt(mean)), 4))`; the request goes to the
//!   least-loaded holder that does not spill, else to the least-loaded worker that does not
//!   (by default the model's in-flight count).
//! * `score = "smg"`: smg's own choice among those candidates and on a miss: the expected
//!   wait of [`super::powerofd`]'s `load = "smg"` (the last 10 s `/metrics` poll plus its own
//!   dispatches since, never below its in-flight count, plus smg's 0.15 s KV-pressure term;
//!   scores within a microsecond drawn at random), over the workers its overload guard
//!   leaves (8 waiting or KV usage 0.8 at the last poll vetoes one); the spill gate's mean is
//!   over those workers (`model_gateway/src/policies/cache_aware.rs` selection,
//!   `policies/least_load.rs`, `worker/overload.rs`).
//!
//! Approximations, stated: the tree matches in chunks of `tree_chunk_chars` characters
//! (default 16) instead of single characters, so a match is short by less than one chunk
//! and a branch's diverging chunk is stored once per branch; among several tenants of the
//! deepest node upstream takes the first key of a concurrent hash map (unspecified order) —
//! here a uniformly random one, drawn only when the match is non-empty (a refresh of the
//! root alone changes nothing observable); ties for the smallest tree go to the first in
//! list order; equal access times in the eviction heap pop by tenant, then node (upstream:
//! unspecified).

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::leastrequest::{Tie, argmin, local_loads};
use super::load_since_scrape::SentSinceScrape;
use super::params::{ParamError, count, finite_non_negative, non_negative, tie_first, tie_suffix_first, unit};
use super::powerofd::{smg_argmin, smg_scores};
use super::sgltree::SglTree;
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;
use crate::time::SimTime;

/// Parameters (upstream defaults in [`CacheAwareParams::default`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheAwareParams {
    /// `--cache-threshold`.
    pub cache_threshold: f64,
    /// `--balance-abs-threshold`.
    pub balance_abs_threshold: u64,
    /// `--balance-rel-threshold`.
    pub balance_rel_threshold: f64,
    /// Tree granularity in characters (1 would be exact, and slow).
    pub tree_chunk_chars: u32,
    /// `--eviction-interval-secs` (0: no eviction thread).
    pub eviction_interval_secs: u64,
    /// `--max-tree-size`: characters per tenant kept by an eviction pass.
    pub max_tree_size: u64,
    /// Ties of the imbalanced shortest-queue pick (upstream `min_by_key`: first).
    pub tie: Tie,
    /// Below the threshold: the smallest tree (classic) or the least load (#14650).
    pub low_match: LowMatch,
    /// smg's spill gate instead of the imbalance gate.
    pub spill_gate: bool,
    /// Which holder of the deepest match a hit goes to.
    pub hit: Hit,
    /// How the least-loaded candidate is chosen.
    pub score: Score,
}

/// How `least_load` picks, on a miss and behind the spill gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Score {
    /// The router's in-flight count, ties by `tie`.
    InFlight,
    /// smg 1.13.0's expected wait over the workers its overload guard leaves.
    Smg,
}

/// smg's `--least-load-kv-pressure-weight` default, seconds.
const SMG_KV_PRESSURE_WEIGHT_S: f64 = 0.15;

/// Which holder of the deepest matched node a hit goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hit {
    /// A uniformly random one (the classic router's first key of a concurrent map).
    Random,
    /// The node's creator (sglang-router 0.3.2: the node's cached `last_tenant`, set by the
    /// inserting tenant and inherited on a split, `src/policies/tree.rs`).
    First,
    /// The least in-flight one, ties by `tie` (vllm-router 0.1.17: the least loaded of the
    /// workers at the best match rate, `select_prepared`).
    LeastLoad,
}

/// Where a request below the match threshold goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowMatch {
    /// The worker with the fewest stored characters (classic sgl-router).
    SmallestTree,
    /// The least in-flight worker (sglang #14650, vllm-router).
    LeastLoad,
}

impl Default for CacheAwareParams {
    fn default() -> Self {
        CacheAwareParams {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            tree_chunk_chars: 16,
            eviction_interval_secs: 120,
            max_tree_size: 1 << 26,
            tie: Tie::First,
            low_match: LowMatch::SmallestTree,
            spill_gate: false,
            hit: Hit::Random,
            score: Score::InFlight,
        }
    }
}

/// The policy state: one tree shared by all workers, and the eviction thread's schedule.
pub struct CacheAware {
    params: CacheAwareParams,
    tree: SglTree,
    /// Router start (the eviction thread's first sleep begins here).
    start: SimTime,
    /// Eviction passes due so far (k of the last pass run, at start + k x interval).
    passes: u64,
    /// Workers registered at the root (upstream `init_workers` inserts "" for each).
    registered: usize,
    /// This router's dispatches since each poll (`score = "smg"`).
    sent: SentSinceScrape,
}

impl CacheAware {
    /// An empty tree.
    pub fn new(params: CacheAwareParams) -> Self {
        CacheAware {
            params,
            tree: SglTree::new(),
            start: SimTime::ZERO,
            passes: 0,
            registered: 0,
            sent: SentSinceScrape::default(),
        }
    }

    /// Runs the eviction pass due by `now`, if any since the last one.
    fn evict_due(&mut self, now: SimTime) {
        let iv = self.params.eviction_interval_secs.saturating_mul(crate::time::NS_PER_S);
        if iv == 0 {
            return;
        }
        let k = now.0.saturating_sub(self.start.0) / iv;
        if k > self.passes {
            self.passes = k;
            self.tree.evict_tenant_by_size(self.params.max_tree_size);
        }
    }

    /// Characters the tree holds for worker `tenant`.
    pub fn tree_chars(&self, tenant: u16) -> u64 {
        self.tree.char_count(tenant)
    }
}

/// Upstream timestamps are wall-clock milliseconds.
fn millis(t: SimTime) -> u64 {
    t.0 / 1_000_000
}

impl RoutingPolicy for CacheAware {
    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(self.params.tree_chunk_chars)
    }

    fn on_router_start(&mut self, now: SimTime) {
        self.start = now;
        self.passes = 0;
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        self.evict_due(view.now);
        let n = view.endpoints.len();
        let tenant = |i: usize| view.endpoints[i].backend.index() as u16;
        while self.registered < n {
            let ms = millis(self.start);
            self.tree.insert(&[], 1, 0, tenant(self.registered), ms);
            self.registered += 1;
        }
        let loads = local_loads(view);
        let (min, max) = (*loads.iter().min().expect("n > 0"), *loads.iter().max().expect("n > 0"));
        let p = self.params;
        let imbalanced =
            !p.spill_gate && max - min > p.balance_abs_threshold && max as f64 > min as f64 * p.balance_rel_threshold;
        let pick = Pick::new(p, &loads, view, &mut self.sent);
        let chunk = u64::from(req.chunk_chars);
        let units = req.prompt_chunks;
        let ms = millis(view.now);
        let (matched, node) = self.tree.prefix_match(units);
        let (pos, branch) = if imbalanced {
            (argmin(&loads, p.tie, rng), Branch::CacheAwareImbalanced)
        } else {
            let matched_chars = (matched as u64 * chunk).min(req.prompt_chars);
            let rate = if req.prompt_chars == 0 {
                0.0
            } else {
                matched_chars as f64 / req.prompt_chars as f64
            };
            // The deepest node's tenants, in endpoint order; upstream takes the first key.
            let holders: Vec<usize> = pick
                .eligible
                .iter()
                .copied()
                .filter(|&i| self.tree.node_has(node, tenant(i)))
                .collect();
            let first = (matched > 0 && !holders.is_empty()).then(|| match p.hit {
                Hit::Random => holders[uniform_index(rng, holders.len())],
                Hit::First => self
                    .tree
                    .tenants(node)
                    .find_map(|t| holders.iter().copied().find(|&i| tenant(i) == t))
                    .unwrap_or(holders[0]),
                Hit::LeastLoad => pick.least(&holders, rng),
            });
            if let Some(f) = first {
                self.tree.refresh(node, tenant(f), ms);
            }
            match first {
                Some(_) if rate > p.cache_threshold && p.spill_gate => pick.spill(&holders, rng),
                Some(f) if rate > p.cache_threshold => (f, Branch::CacheAwareHit),
                _ => self.low_match_pick(&pick, &tenant, rng),
            }
        };
        if p.score == Score::Smg {
            self.sent.record(view.endpoints[pos].backend.index(), view.now);
        }
        self.tree.insert(units, chunk, req.prompt_chars, tenant(pos), ms);
        Decision {
            pos,
            branch,
            match_chars: matched as u64 * chunk,
        }
    }
}

impl CacheAware {
    /// Below the threshold: the smallest tree (first in list order) or the least load.
    fn low_match_pick(&self, pick: &Pick, tenant: &dyn Fn(usize) -> u16, rng: &mut SimRng) -> (usize, Branch) {
        match self.params.low_match {
            LowMatch::LeastLoad => (pick.least(&pick.eligible, rng), Branch::CacheAwareLeastLoad),
            LowMatch::SmallestTree => {
                let pos = (0..pick.loads.len())
                    .min_by_key(|&i| self.tree.char_count(tenant(i)))
                    .expect("n > 0");
                (pos, Branch::CacheAwareSmallestTree)
            }
        }
    }
}

/// The candidates of one decision and how the least loaded of a set is chosen.
struct Pick<'a> {
    params: CacheAwareParams,
    /// Router in-flight per endpoint.
    loads: &'a [u64],
    /// smg's expected wait per endpoint (`score = "smg"`).
    scores: Option<Vec<f64>>,
    /// The endpoints a request may go to (smg: those its overload guard leaves).
    eligible: Vec<usize>,
}

impl<'a> Pick<'a> {
    fn new(params: CacheAwareParams, loads: &'a [u64], view: &RouterView, sent: &mut SentSinceScrape) -> Self {
        let (scores, eligible) = match params.score {
            Score::InFlight => (None, (0..loads.len()).collect()),
            Score::Smg => {
                let (s, ok) = smg_scores(view, sent, SMG_KV_PRESSURE_WEIGHT_S);
                (Some(s), ok)
            }
        };
        Pick {
            params,
            loads,
            scores,
            eligible,
        }
    }

    /// The least loaded of `cands` (non-empty).
    fn least(&self, cands: &[usize], rng: &mut SimRng) -> usize {
        match &self.scores {
            Some(s) => smg_argmin(cands, s, rng),
            None => {
                let sub: Vec<u64> = cands.iter().map(|&i| self.loads[i]).collect();
                cands[argmin(&sub, self.params.tie, rng)]
            }
        }
    }

    /// smg's spill gate on a hit: the least-loaded holder that does not spill, else the
    /// least-loaded eligible worker that does not (else the least loaded of them all).
    fn spill(&self, holders: &[usize], rng: &mut SimRng) -> (usize, Branch) {
        let p = self.params;
        let mean = self.eligible.iter().map(|&i| self.loads[i]).sum::<u64>() as f64 / self.eligible.len() as f64;
        let margin = (p.balance_abs_threshold as f64).min((2.0 * mean.sqrt()).ceil().max(4.0));
        let spills = |i: usize| {
            let l = self.loads[i] as f64;
            l > p.balance_rel_threshold * mean && l > mean + margin
        };
        let safe: Vec<usize> = holders.iter().copied().filter(|&i| !spills(i)).collect();
        if !safe.is_empty() {
            return (self.least(&safe, rng), Branch::CacheAwareHit);
        }
        let others: Vec<usize> = self.eligible.iter().copied().filter(|&i| !spills(i)).collect();
        let pick = self.least(if others.is_empty() { &self.eligible } else { &others }, rng);
        (pick, Branch::CacheAwareSpill)
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy (unset keys: [`CacheAwareParams::default`]).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    cache_threshold: Option<f64>,
    balance_abs_threshold: Option<i64>,
    balance_rel_threshold: Option<f64>,
    tree_chunk_chars: Option<i64>,
    eviction_interval_secs: Option<i64>,
    max_tree_size: Option<i64>,
    tie: Option<String>,
    low_match: Option<String>,
    spill_gate: Option<bool>,
    hit: Option<String>,
    score: Option<String>,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "sglang_cache_aware";
    const DOC: Doc = Doc {
        source: "SGLang classic sgl-router cache_aware (src/policies/cache_aware.rs, tree.rs; PR #2114), RouterArgs defaults",
        decision: "imbalanced (max - min > 64 and max > 1.5 min): shortest queue; match rate > 0.3: a tenant of \
                   the deepest match; else the worker with the smallest tree",
        signals: "router-local in-flight (fresh) and a router-local approximate radix tree of request text, LRU-evicted \
                  per tenant by a background pass every eviction_interval_secs from router start",
        params: &[
            param(
                "cache_threshold",
                "0.3",
                "match rate above which the request follows the tree",
            ),
            param("balance_abs_threshold", "64", "imbalanced iff max - min > this ..."),
            param(
                "balance_rel_threshold",
                "1.5",
                "... and max > min x this: then shortest queue",
            ),
            param("tree_chunk_chars", "16", "tree granularity (upstream: 1 character)"),
            param(
                "eviction_interval_secs",
                "120",
                "seconds between eviction passes, from router start (0: never evict)",
            ),
            param(
                "max_tree_size",
                "67108864",
                "characters per worker a pass keeps (least recently used leaves go first)",
            ),
            param(
                "low_match",
                "\"smallest_tree\"",
                "below the threshold: \"smallest_tree\" (classic) or \"least_load\" (sglang #14650, sglang-router >= 0.2.4; vllm-router)",
            ),
            param(
                "spill_gate",
                "false",
                "true: smg's spill gate replaces the imbalance gate (a holder above 1.5 x mean and mean + margin in-flight is skipped)",
            ),
            param(
                "hit",
                "\"random\"",
                "a hit's holder: \"random\" (classic), \"first\" (the node's creator: sglang-router 0.3.2) or \"least_load\" (vllm-router 0.1.17)",
            ),
            param(
                "score",
                "\"in_flight\"",
                "how the least loaded is chosen: \"in_flight\" or \"smg\" (smg 1.13.0's expected wait from its 10 s /metrics poll, overload veto)",
            ),
        ],
    };
    type Params = Params;
    type Config = CacheAwareParams;
    fn validate(f: Params, _: &Fleet) -> Result<CacheAwareParams, ParamError> {
        let d = CacheAwareParams::default();
        Ok(CacheAwareParams {
            cache_threshold: unit(f.cache_threshold.unwrap_or(d.cache_threshold), "cache_threshold")?,
            balance_abs_threshold: u64::from(count(
                f.balance_abs_threshold.unwrap_or(d.balance_abs_threshold as i64),
                "balance_abs_threshold",
                0,
            )?),
            balance_rel_threshold: finite_non_negative(
                f.balance_rel_threshold.unwrap_or(d.balance_rel_threshold),
                "balance_rel_threshold",
            )?,
            // At least 4: finer trees cost memory and time per stored character.
            tree_chunk_chars: count(
                f.tree_chunk_chars.unwrap_or(i64::from(d.tree_chunk_chars)),
                "tree_chunk_chars",
                4,
            )?,
            eviction_interval_secs: non_negative(
                f.eviction_interval_secs.unwrap_or(d.eviction_interval_secs as i64),
                "eviction_interval_secs",
                "seconds (0 = no eviction)",
            )?,
            max_tree_size: non_negative(
                f.max_tree_size.unwrap_or(d.max_tree_size as i64),
                "max_tree_size",
                "characters",
            )?,
            tie: tie_first(f.tie.as_deref(), "tie", "upstream `min_by_key`")?,
            low_match: match f.low_match.as_deref() {
                None | Some("smallest_tree") => LowMatch::SmallestTree,
                Some("least_load") => LowMatch::LeastLoad,
                Some(o) => {
                    return Err(ParamError::new(
                        "low_match",
                        format!("{o:?}: expected \"smallest_tree\" or \"least_load\""),
                    ));
                }
            },
            spill_gate: f.spill_gate.unwrap_or(d.spill_gate),
            hit: match f.hit.as_deref() {
                None | Some("random") => Hit::Random,
                Some("first") => Hit::First,
                Some("least_load") => Hit::LeastLoad,
                Some(o) => {
                    return Err(ParamError::new(
                        "hit",
                        format!("{o:?}: expected \"random\", \"first\" or \"least_load\""),
                    ));
                }
            },
            score: match f.score.as_deref() {
                None | Some("in_flight") => Score::InFlight,
                Some("smg") => Score::Smg,
                Some(o) => {
                    return Err(ParamError::new(
                        "score",
                        format!("{o:?}: expected \"in_flight\" or \"smg\""),
                    ));
                }
            },
        })
    }
    fn describe(p: &CacheAwareParams) -> String {
        format!(
            "cache_threshold = {}, balance_abs_threshold = {}, balance_rel_threshold = {}, eviction_interval_secs = {}, max_tree_size = {}{}",
            p.cache_threshold,
            p.balance_abs_threshold,
            p.balance_rel_threshold,
            p.eviction_interval_secs,
            p.max_tree_size,
            tie_suffix_first(p.tie)
        ) + if p.low_match == LowMatch::LeastLoad {
            ", low_match = least_load"
        } else {
            ""
        } + if p.spill_gate { ", spill_gate = true" } else { "" }
            + if p.score == Score::Smg { ", score = smg" } else { "" }
    }
    fn build(p: &CacheAwareParams) -> Box<dyn RoutingPolicy> {
        Box::new(CacheAware::new(*p))
    }
    fn upstream(c: &CacheAwareParams, set: &[&str]) -> Option<Upstream> {
        let flags = [
            (
                "cache_threshold",
                "--cache-threshold",
                format!("{:?}", c.cache_threshold),
            ),
            (
                "balance_abs_threshold",
                "--balance-abs-threshold",
                c.balance_abs_threshold.to_string(),
            ),
            (
                "balance_rel_threshold",
                "--balance-rel-threshold",
                format!("{:?}", c.balance_rel_threshold),
            ),
            (
                "eviction_interval_secs",
                "--eviction-interval",
                c.eviction_interval_secs.to_string(),
            ),
            ("max_tree_size", "--max-tree-size", c.max_tree_size.to_string()),
        ];
        let mut how = "--policy cache_aware".to_string();
        for (_, flag, v) in flags.iter().filter(|(k, _, _)| set.contains(k)) {
            how.push_str(&format!(" {flag} {v}"));
        }
        Upstream::new("SGLang router", how)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req, req_chars};
    use crate::rng::stream;

    #[test]
    fn miss_goes_to_the_smallest_tree_hit_follows_the_cache() {
        let mut p = CacheAware::new(CacheAwareParams::default());
        let f = ViewFixture::new(2);
        let mut rng = stream(1, "t", 0);
        // First request: both trees empty, the first worker has the smallest.
        let a = [1u64, 2, 3, 4];
        let d = p.route(&req_chars(&a, 16, 64), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::CacheAwareSmallestTree));
        // A different text: worker 1 now has the smaller tree.
        let b = [9u64, 8, 7, 6];
        assert_eq!(p.route(&req_chars(&b, 16, 64), &f.view(), &mut rng).pos, 1);
        // A text sharing 3 of 4 chunks with `a` (match rate 0.75 > 0.3): worker 0.
        let a2 = [1u64, 2, 3, 5];
        let d = p.route(&req_chars(&a2, 16, 64), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch, d.match_chars), (0, Branch::CacheAwareHit, 48));
        // Sharing 1 of 4 (0.25 <= 0.3): a miss, to the smaller tree (worker 1: 64 chars
        // against worker 0's 64 + 16).
        let c = [1u64, 20, 30, 40];
        assert_eq!(p.route(&req_chars(&c, 16, 64), &f.view(), &mut rng).pos, 1);
    }

    #[test]
    fn imbalance_overrides_the_cache() {
        let mut p = CacheAware::new(CacheAwareParams::default());
        let mut rng = stream(1, "t", 0);
        let a = [1u64, 2];
        p.route(&req_chars(&a, 16, 32), &ViewFixture::new(2).view(), &mut rng);
        // Worker 0 holds the text but runs 100 more: imbalanced (100 > 64, 100 > 0 * 1.5).
        let f = ViewFixture::new(2).in_flight(&[Some(100), Some(0)]);
        let d = p.route(&req_chars(&a, 16, 32), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::CacheAwareImbalanced));
        // 64 apart is not enough (strict >): the cache wins.
        let f = ViewFixture::new(2).in_flight(&[Some(64), Some(0)]);
        assert_eq!(
            p.route(&req_chars(&a, 16, 32), &f.view(), &mut rng).branch,
            Branch::CacheAwareHit
        );
    }

    /// Four requests on two workers, then a text sharing 3 of 4 chunks with the first one,
    /// at `probe_s`: where does it go?
    fn lru_probe(params: CacheAwareParams, probe_s: f64) -> (Decision, CacheAware) {
        let mut p = CacheAware::new(params);
        let mut rng = stream(3, "t", 0);
        let at = |s: f64| ViewFixture::new(2).at(s);
        let a = [1u64, 2, 3, 4];
        assert_eq!(p.route(&req_chars(&a, 16, 64), &at(1.0).view(), &mut rng).pos, 0);
        assert_eq!(
            p.route(&req_chars(&[9, 8, 7, 6], 16, 64), &at(2.0).view(), &mut rng)
                .pos,
            1
        );
        let c = [20u64, 21, 22, 23];
        assert_eq!(p.route(&req_chars(&c, 16, 64), &at(3.0).view(), &mut rng).pos, 0);
        // Worker 0's `c` continued at 50 s: its path is now more recent than `a`'s.
        let c2 = [20u64, 21, 22, 23, 24];
        let d = p.route(&req_chars(&c2, 16, 80), &at(50.0).view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::CacheAwareHit));
        assert_eq!((p.tree_chars(0), p.tree_chars(1)), (144, 64));
        let a2 = [1u64, 2, 3, 5];
        let d = p.route(&req_chars(&a2, 16, 64), &at(probe_s).view(), &mut rng);
        (d, p)
    }

    #[test]
    fn eviction_pass_drops_the_least_recently_used_entries() {
        let small = CacheAwareParams {
            max_tree_size: 100,
            ..CacheAwareParams::default()
        };
        // Default size (2^26 characters): the pass at 120 s keeps everything; `a` still
        // attracts its continuation.
        let (d, _) = lru_probe(CacheAwareParams::default(), 121.0);
        assert_eq!((d.pos, d.branch, d.match_chars), (0, Branch::CacheAwareHit, 48));
        // Small limit, before the first pass (120 s after router start): same.
        let (d, _) = lru_probe(small, 119.0);
        assert_eq!((d.pos, d.branch), (0, Branch::CacheAwareHit));
        // Small limit after the pass: worker 0 had 144 > 100 characters; its least recently
        // used leaf (`a`, 64 characters, last used at 1 s) went, leaving 80; the recent `c`
        // branch stays. `a`'s continuation now matches nothing and goes to the smaller tree.
        let (d, mut p) = lru_probe(small, 121.0);
        assert_eq!((d.pos, d.branch, d.match_chars), (1, Branch::CacheAwareSmallestTree, 0));
        assert_eq!(p.tree_chars(0), 80);
        let mut rng = stream(4, "t", 0);
        let c3 = [20u64, 21, 22, 23, 24, 25];
        let d = p.route(&req_chars(&c3, 16, 96), &ViewFixture::new(2).at(122.0).view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::CacheAwareHit));
        // Interval 0 disables the thread, whatever the limit.
        let off = CacheAwareParams {
            max_tree_size: 0,
            eviction_interval_secs: 0,
            ..CacheAwareParams::default()
        };
        let (d, _) = lru_probe(off, 1000.0);
        assert_eq!((d.pos, d.branch), (0, Branch::CacheAwareHit));
    }

    #[test]
    fn eviction_passes_count_from_router_start() {
        let small = CacheAwareParams {
            max_tree_size: 0,
            ..CacheAwareParams::default()
        };
        let mut p = CacheAware::new(small);
        p.on_router_start(SimTime(100_000_000_000)); // restarted at 100 s
        let mut rng = stream(5, "t", 0);
        let a = [1u64, 2];
        p.route(&req_chars(&a, 16, 32), &ViewFixture::new(1).at(101.0).view(), &mut rng);
        // 200 s is only 100 s after the start: no pass yet, the text still matches.
        let d = p.route(&req_chars(&a, 16, 32), &ViewFixture::new(1).at(200.0).view(), &mut rng);
        assert_eq!(d.branch, Branch::CacheAwareHit);
        // The pass at 220 s empties the tree (limit 0).
        let d = p.route(&req_chars(&a, 16, 32), &ViewFixture::new(1).at(221.0).view(), &mut rng);
        assert_eq!((d.branch, d.match_chars), (Branch::CacheAwareSmallestTree, 0));
    }

    #[test]
    fn imbalanced_ties_first_in_list_or_at_random() {
        // Loads 100, 0, 0: imbalanced (100 > 64 and 100 > 0); two workers at the minimum.
        let f = ViewFixture::new(3).in_flight(&[Some(100), Some(0), Some(0)]);
        let mut rng = stream(1, "t", 0);
        let mut p = CacheAware::new(CacheAwareParams::default());
        for s in 0..20u64 {
            let d = p.route(&req(None, &[s]), &f.view(), &mut rng);
            assert_eq!((d.pos, d.branch), (1, Branch::CacheAwareImbalanced));
        }
        let mut p = CacheAware::new(CacheAwareParams {
            tie: Tie::Random,
            ..CacheAwareParams::default()
        });
        let seen: std::collections::BTreeSet<usize> = (0..200u64)
            .map(|s| p.route(&req(None, &[s]), &f.view(), &mut rng).pos)
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn least_load_below_the_threshold_follows_in_flight_not_the_tree() {
        let mut p = CacheAware::new(CacheAwareParams {
            low_match: LowMatch::LeastLoad,
            ..CacheAwareParams::default()
        });
        let mut rng = stream(1, "t", 0);
        // Worker 0 has the bigger tree but nothing in flight: the classic rule would pick 1.
        p.route(&req_chars(&[1, 2, 3, 4], 16, 64), &ViewFixture::new(2).view(), &mut rng);
        let f = ViewFixture::new(2).in_flight(&[Some(0), Some(3)]);
        let d = p.route(&req_chars(&[9, 8, 7, 6], 16, 64), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::CacheAwareLeastLoad));
        // Ties go to the first in list order.
        let d = p.route(&req_chars(&[5, 5, 5, 5], 16, 64), &ViewFixture::new(2).view(), &mut rng);
        assert_eq!(d.pos, 0);
    }

    #[test]
    fn spill_gate_moves_a_hot_prefix_off_a_holder_far_above_the_mean() {
        let params = CacheAwareParams {
            low_match: LowMatch::LeastLoad,
            spill_gate: true,
            ..CacheAwareParams::default()
        };
        let mut p = CacheAware::new(params);
        let mut rng = stream(2, "t", 0);
        let a = [1u64, 2, 3, 4];
        assert_eq!(
            p.route(&req_chars(&a, 16, 64), &ViewFixture::new(4).view(), &mut rng)
                .pos,
            0
        );
        // Mean 2.25, margin 4 (2 sqrt(2.25) = 3, at least 4): 8 > 3.375 and 8 > 6.25, so the
        // holder spills; the least loaded of the others (first of the zeros) takes it.
        let f = ViewFixture::new(4).in_flight(&[Some(8), Some(1), Some(0), Some(0)]);
        let d = p.route(&req_chars(&a, 16, 64), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (2, Branch::CacheAwareSpill));
        // Now workers 0 and 2 hold it; with 0 at 6 (mean 2, margin 4: 6 > 3 but not > 6) it
        // does not spill, and the least loaded holder wins: 2.
        let f = ViewFixture::new(4).in_flight(&[Some(6), Some(1), Some(1), Some(0)]);
        let d = p.route(&req_chars(&a, 16, 64), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (2, Branch::CacheAwareHit));
        // No imbalance gate: 100 against 0 on two workers is a spill, not "imbalanced".
        let mut p = CacheAware::new(params);
        p.route(&req_chars(&a, 16, 64), &ViewFixture::new(2).view(), &mut rng);
        let f = ViewFixture::new(2).in_flight(&[Some(100), Some(0)]);
        assert_eq!(
            p.route(&req_chars(&a, 16, 64), &f.view(), &mut rng).branch,
            Branch::CacheAwareSpill
        );
    }

    #[test]
    fn low_match_and_spill_gate_parse_and_describe() {
        let fleet = Fleet {
            block_size_tokens: 16,
            kv_blocks: 100,
            chars_per_token: 4,
            max_num_seqs: vec![8],
        };
        let parse = |t: &str| -> Result<CacheAwareParams, ParamError> {
            Kind::validate(serde_json::from_str::<Params>(t).unwrap(), &fleet)
        };
        let c = parse(r#"{"low_match": "least_load", "spill_gate": true}"#).unwrap();
        assert_eq!((c.low_match, c.spill_gate), (LowMatch::LeastLoad, true));
        assert!(Kind::describe(&c).ends_with(", low_match = least_load, spill_gate = true"));
        assert_eq!(parse("{}").unwrap(), CacheAwareParams::default());
        assert_eq!(parse(r#"{"low_match": "tree"}"#).unwrap_err().key, "low_match");
        assert_eq!(parse(r#"{"hit": "first"}"#).unwrap().hit, Hit::First);
        assert_eq!(parse(r#"{"hit": "any"}"#).unwrap_err().key, "hit");
    }

    #[test]
    fn a_hit_goes_to_the_creator_or_the_least_loaded_holder() {
        let a = [1u64, 2, 3, 4];
        let mut rng = stream(6, "t", 0);
        for (hit, want) in [(Hit::First, 1), (Hit::LeastLoad, 0)] {
            let mut p = CacheAware::new(CacheAwareParams {
                hit,
                low_match: LowMatch::LeastLoad,
                ..CacheAwareParams::default()
            });
            // Worker 1 creates the node (worker 0 busy), then worker 0 holds it too (imbalanced).
            let f = ViewFixture::new(2).in_flight(&[Some(1), Some(0)]);
            assert_eq!(p.route(&req_chars(&a, 16, 64), &f.view(), &mut rng).pos, 1);
            let f = ViewFixture::new(2).in_flight(&[Some(0), Some(100)]);
            assert_eq!(p.route(&req_chars(&a, 16, 64), &f.view(), &mut rng).pos, 0);
            // Balanced now, worker 0 less loaded: the creator (1) or the least loaded (0).
            let f = ViewFixture::new(2).in_flight(&[Some(2), Some(3)]);
            let d = p.route(&req_chars(&a, 16, 64), &f.view(), &mut rng);
            assert_eq!((d.pos, d.branch), (want, Branch::CacheAwareHit), "{hit:?}");
        }
    }
}
