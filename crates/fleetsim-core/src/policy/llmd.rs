//! llm-d inference scheduler / Gateway API Inference Extension EPP, default profile
//! (`pkg/epp/config/loader/defaults.go`): `queue-scorer` x2, `kv-cache-utilization-scorer` x2,
//! `prefix-cache-scorer` x3, `max-score-picker`. Scorer formulas as implemented in
//! llm-d/llm-d-inference-scheduler @ `520af47`:
//!
//! * queue: `(q_max - q) / (q_max - q_min)` over scraped `num_requests_waiting`, 1 for all
//!   when equal (running requests are ignored);
//! * kv-cache utilization: `1 - kv_cache_usage_perc`;
//! * prefix cache: `matched blocks / prompt blocks` from the approximate prefix index;
//! * optional, weight 0 by default: `load-aware-scorer` (scraped waiting `w`: 0.5 if
//!   `w = 0`, else `0.5 (1 - min(w, 128) / 128)`) and `active-request-scorer` (router-local
//!   in-flight `c`: 1 if `c = 0`, else `(c_max - c) / c_max`);
//! * total = Σ weight x clamp01(score); the picker shuffles, then stable-sorts by score, so
//!   exact ties are uniform at random.
//!
//! Freshness: the datalayer polls every pod's `/metrics` concurrently every
//! `--refresh-metrics-interval` = 50 ms (this policy's default
//! `router.engine_stats_interval_s`, on a ticker: no pass time added, no flooring); each
//! value is visible one `router.scrape_duration_s` after its read. A pod with no metrics
//! (failed scrape) scores as queue 0 and KV usage 0, like a fresh pod.
//!
//! The approximate prefix index (`approx-prefix-cache-producer`): blocks of
//! `block_size_tokens x 4` characters (auto-tuned from the engines' block size: 64 for 16),
//! a trailing partial block hashed too but no hash at all for an input shorter than one
//! block, at most `max_prefix_blocks` (256) blocks per request; `hash -> pods` with a
//! per-pod LRU of `lru_capacity_per_pod` entries (auto-tuned to the pod's GPU blocks,
//! `backends.kv_blocks`), eviction removing the pod from that hash. Match
//! walks the hashes in order, stops at the first hash no pod holds, and credits every pod
//! holding each hash. After the pick all the request's hashes are added for the chosen pod:
//! upstream does this asynchronously in `PreRequest`; here it is immediate, which can only
//! make the index fresher than upstream's.

use hashbrown::HashMap;
use lru::LruCache;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::params::{ParamError, count, index_size, weight};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::rng::SimRng;

/// Scorer weights and index parameters (upstream defaults in [`LlmdParams::default`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlmdParams {
    /// `queue-scorer` weight.
    pub queue_weight: f64,
    /// `kv-cache-utilization-scorer` weight.
    pub kv_weight: f64,
    /// `prefix-cache-scorer` weight.
    pub prefix_weight: f64,
    /// `load-aware-scorer` weight (not in the default profile: 0).
    pub load_aware_weight: f64,
    /// `load-aware-scorer` queue threshold (128).
    pub load_aware_threshold: u32,
    /// `active-request-scorer` weight (router-local in-flight; not in the default profile).
    pub active_request_weight: f64,
    /// Index block size in characters (`blockSizeTokens` 16 x 4).
    pub block_chars: u32,
    /// `maxPrefixBlocksToMatch`.
    pub max_prefix_blocks: u32,
    /// Per-pod LRU capacity of the index (entries).
    pub lru_capacity_per_pod: u32,
}

impl Default for LlmdParams {
    fn default() -> Self {
        LlmdParams {
            queue_weight: 2.0,
            kv_weight: 2.0,
            prefix_weight: 3.0,
            load_aware_weight: 0.0,
            load_aware_threshold: 128,
            active_request_weight: 0.0,
            block_chars: 64,
            max_prefix_blocks: 256,
            lru_capacity_per_pod: 31_250,
        }
    }
}

/// The approximate prefix index. Looked up, never iterated.
struct PrefixIndex {
    pods_of: HashMap<u64, SmallVec<[u16; 4]>, FxBuildHasher>,
    /// Per pod, created when the pod is first picked; unbounded caches capped by hand so
    /// nothing is reserved up front.
    lru: Vec<Option<LruCache<u64, (), FxBuildHasher>>>,
    capacity: usize,
}

impl PrefixIndex {
    fn new(capacity: u32) -> Self {
        PrefixIndex {
            pods_of: HashMap::default(),
            lru: Vec::new(),
            capacity: capacity.max(1) as usize,
        }
    }

    /// Matched hashes per pod (indexed by backend index).
    fn score(&self, hashes: &[u64], n_backends: usize) -> Vec<u32> {
        let mut counts = vec![0u32; n_backends];
        for h in hashes {
            match self.pods_of.get(h) {
                Some(pods) if !pods.is_empty() => {
                    for &p in pods {
                        if let Some(c) = counts.get_mut(p as usize) {
                            *c += 1;
                        }
                    }
                }
                _ => break,
            }
        }
        counts
    }

    fn add(&mut self, hashes: &[u64], pod: usize) {
        if self.lru.len() <= pod {
            self.lru.resize_with(pod + 1, || None);
        }
        let lru = self.lru[pod].get_or_insert_with(|| LruCache::unbounded_with_hasher(FxBuildHasher));
        for &h in hashes {
            lru.put(h, ());
            if lru.len() > self.capacity
                && let Some((old, ())) = lru.pop_lru()
                && let Some(set) = self.pods_of.get_mut(&old)
            {
                set.retain(|p| *p as usize != pod);
                if set.is_empty() {
                    self.pods_of.remove(&old);
                }
            }
            let set = self.pods_of.entry(h).or_default();
            if !set.contains(&(pod as u16)) {
                set.push(pod as u16);
            }
        }
    }
}

/// The policy state.
pub struct Llmd {
    params: LlmdParams,
    index: PrefixIndex,
}

impl Llmd {
    /// An empty index.
    pub fn new(params: LlmdParams) -> Self {
        Llmd {
            params,
            index: PrefixIndex::new(params.lru_capacity_per_pod),
        }
    }
}

/// `(q_max - q) / (q_max - q_min)`, 1 for all when equal.
fn queue_scores(q: &[u32]) -> Vec<f64> {
    let (lo, hi) = (*q.iter().min().expect("n > 0"), *q.iter().max().expect("n > 0"));
    q.iter()
        .map(|&x| {
            if hi == lo {
                1.0
            } else {
                f64::from(hi - x) / f64::from(hi - lo)
            }
        })
        .collect()
}

impl RoutingPolicy for Llmd {
    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(self.params.block_chars)
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let p = self.params;
        let n = view.endpoints.len();
        // No hashes at all for an input shorter than one block.
        let usable = if req.prompt_chars < u64::from(p.block_chars) {
            0
        } else {
            req.prompt_chunks.len()
        };
        let hashes = &req.prompt_chunks[..usable.min(p.max_prefix_blocks as usize)];
        let max_id = view.endpoints.iter().map(|e| e.backend.index()).max().unwrap_or(0);
        let matched = self.index.score(hashes, max_id + 1);
        let waiting: Vec<u32> = view.engine_stats.iter().map(|e| e.map_or(0, |e| e.waiting)).collect();
        let q = queue_scores(&waiting);
        let active = super::leastrequest::local_loads(view);
        let c_max = active.iter().copied().max().unwrap_or(0);
        let total: Vec<f64> = (0..n)
            .map(|i| {
                let w = waiting[i];
                let load_aware = if w == 0 {
                    0.5
                } else {
                    0.5 * (1.0 - f64::from(w.min(p.load_aware_threshold)) / f64::from(p.load_aware_threshold.max(1)))
                };
                let act = if active[i] == 0 {
                    1.0
                } else {
                    (c_max - active[i]) as f64 / c_max as f64
                };
                let kv = 1.0 - view.engine_stats[i].map_or(0.0, |e| e.kv_usage());
                let prefix = if hashes.is_empty() {
                    0.0
                } else {
                    f64::from(matched[view.endpoints[i].backend.index()]) / hashes.len() as f64
                };
                p.queue_weight * q[i].clamp(0.0, 1.0)
                    + p.kv_weight * kv.clamp(0.0, 1.0)
                    + p.prefix_weight * prefix.clamp(0.0, 1.0)
                    + p.load_aware_weight * load_aware.clamp(0.0, 1.0)
                    + p.active_request_weight * act.clamp(0.0, 1.0)
            })
            .collect();
        let best = total.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let ties: Vec<usize> = (0..n).filter(|&i| total[i] == best).collect();
        let pos = ties[uniform_index(rng, ties.len())];
        let b = view.endpoints[pos].backend.index();
        let match_chars = u64::from(matched[b]) * u64::from(p.block_chars);
        self.index.add(hashes, b);
        Decision {
            pos,
            branch: Branch::LlmdScore,
            match_chars: match_chars.min(req.prompt_chars),
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy (unset keys: [`LlmdParams::default`], or auto-tuned
/// from the fleet).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
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

impl PolicyKind for Kind {
    const KIND: &'static str = "llmd";
    const DOC: Doc = Doc {
        source: "llm-d / Gateway API Inference Extension EPP default profile (pkg/epp/config/loader/defaults.go)",
        decision: "highest weighted score (queue x2, KV utilisation x2, prefix x3), random ties",
        signals: "scraped waiting and kv_cache_usage_perc every 50 ms (--refresh-metrics-interval, the default \
                  router.engine_stats_interval_s for this policy); router-local approximate prefix index",
        params: &[
            param("queue_weight", "2", "queue-scorer weight"),
            param("kv_cache_utilization_weight", "2", "kv-cache-utilization-scorer weight"),
            param("prefix_cache_weight", "3", "prefix-cache-scorer weight"),
            param(
                "load_aware_weight",
                "0",
                "load-aware-scorer weight (scraped waiting; not in the default profile)",
            ),
            param("load_aware_threshold", "128", "load-aware-scorer queue threshold"),
            param(
                "active_request_weight",
                "0",
                "active-request-scorer weight (router-local in-flight)",
            ),
            param(
                "block_size_tokens",
                "16",
                "index block = block_size_tokens x 4 characters",
            ),
            param("max_prefix_blocks", "256", "maxPrefixBlocksToMatch"),
            param(
                "lru_capacity_per_pod",
                "(auto)",
                "index entries per pod; default: backends.kv_blocks (upstream's auto-tune; 31,250 without it)",
            ),
        ],
    };
    // llm-d `--refresh-metrics-interval`.
    const ENGINE_STATS_INTERVAL_S: f64 = 0.05;
    const POLLS_ENDPOINTS_CONCURRENTLY: bool = true;
    type Params = Params;
    type Config = LlmdParams;
    fn validate(f: Params, fleet: &Fleet) -> Result<LlmdParams, ParamError> {
        let d = LlmdParams::default();
        // Auto-tuned from the pods like upstream: the engines' block size and GPU blocks.
        let block_tokens = count(
            f.block_size_tokens.unwrap_or(i64::from(fleet.block_size_tokens)),
            "block_size_tokens",
            1,
        )?;
        Ok(LlmdParams {
            queue_weight: weight(f.queue_weight.unwrap_or(d.queue_weight), "queue_weight")?,
            kv_weight: weight(
                f.kv_cache_utilization_weight.unwrap_or(d.kv_weight),
                "kv_cache_utilization_weight",
            )?,
            prefix_weight: weight(f.prefix_cache_weight.unwrap_or(d.prefix_weight), "prefix_cache_weight")?,
            load_aware_weight: weight(f.load_aware_weight.unwrap_or(d.load_aware_weight), "load_aware_weight")?,
            load_aware_threshold: count(
                f.load_aware_threshold.unwrap_or(i64::from(d.load_aware_threshold)),
                "load_aware_threshold",
                1,
            )?,
            active_request_weight: weight(
                f.active_request_weight.unwrap_or(d.active_request_weight),
                "active_request_weight",
            )?,
            // `blockSizeTokens x 4` characters per block, as upstream.
            block_chars: block_tokens.saturating_mul(4),
            max_prefix_blocks: count(
                f.max_prefix_blocks.unwrap_or(i64::from(d.max_prefix_blocks)),
                "max_prefix_blocks",
                1,
            )?,
            lru_capacity_per_pod: index_size(
                f.lru_capacity_per_pod.unwrap_or(i64::from(fleet.kv_blocks)),
                "lru_capacity_per_pod",
            )?,
        })
    }
    fn describe(p: &LlmdParams) -> String {
        format!(
            "queue x{}, kv-cache-utilization x{}, prefix-cache x{}",
            p.queue_weight, p.kv_weight, p.prefix_weight
        )
    }
    fn build(p: &LlmdParams) -> Box<dyn RoutingPolicy> {
        Box::new(Llmd::new(*p))
    }
    fn upstream(c: &LlmdParams, _: &[&str]) -> Option<Upstream> {
        // Weights as the EPP's YAML writes them: whole numbers without a point.
        let w = c.prefix_weight;
        let w = if w.fract() == 0.0 {
            format!("{w:.0}")
        } else {
            w.to_string()
        };
        Upstream::new(
            "llm-d inference scheduler",
            format!("EPP default profile, prefix-cache-scorer weight {w}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req_chars};
    use crate::rng::stream;

    #[test]
    fn queue_scores_follow_upstream() {
        assert_eq!(queue_scores(&[0, 5, 10]), [1.0, 0.5, 0.0]);
        assert_eq!(queue_scores(&[3, 3]), [1.0, 1.0], "all equal: 1 for all");
    }

    #[test]
    fn prefix_weight_three_beats_a_short_queue_of_one() {
        let mut p = Llmd::new(LlmdParams::default());
        let mut rng = stream(1, "t", 0);
        let h = [11u64, 12, 13, 14];
        // Cold index, equal queues: random among all; the chosen pod gets the hashes.
        let first = p
            .route(
                &req_chars(&h, 64, 256),
                &ViewFixture::new(2).loads(&[(1, 0), (1, 0)]).view(),
                &mut rng,
            )
            .pos;
        // The pod holding the prefix now has a queue of 2 against 0: queue 0 vs 2, prefix 3 vs 0.
        let mut loads = [(1, 0), (1, 0)];
        loads[first] = (1, 2);
        let d = p.route(
            &req_chars(&h, 64, 256),
            &ViewFixture::new(2).loads(&loads).view(),
            &mut rng,
        );
        assert_eq!(d.pos, first, "3 x full prefix outweighs 2 x queue");
        assert_eq!(d.match_chars, 256);
    }

    #[test]
    fn optional_scorers_follow_upstream() {
        let mut rng = stream(2, "t", 0);
        // Only the active-request scorer: the pod with fewer router-local in-flight wins.
        let mut p = Llmd::new(LlmdParams {
            queue_weight: 0.0,
            kv_weight: 0.0,
            prefix_weight: 0.0,
            active_request_weight: 1.0,
            ..LlmdParams::default()
        });
        let f = ViewFixture::new(2)
            .loads(&[(0, 0), (0, 0)])
            .in_flight(&[Some(3), Some(1)]);
        assert_eq!(p.route(&req_chars(&[1], 64, 64), &f.view(), &mut rng).pos, 1);
        // Only the load-aware scorer: 0.5 at w = 0 beats 0.5 x (1 - 64/128) = 0.25.
        let mut p = Llmd::new(LlmdParams {
            queue_weight: 0.0,
            kv_weight: 0.0,
            prefix_weight: 0.0,
            load_aware_weight: 1.0,
            ..LlmdParams::default()
        });
        let f = ViewFixture::new(2).loads(&[(0, 64), (0, 0)]);
        assert_eq!(p.route(&req_chars(&[1], 64, 64), &f.view(), &mut rng).pos, 1);
    }

    #[test]
    fn lru_eviction_drops_the_pod_from_the_index() {
        let mut idx = PrefixIndex::new(2);
        idx.add(&[1, 2], 0);
        assert_eq!(idx.score(&[1, 2], 1), [2]);
        idx.add(&[3], 0); // evicts 1, the least recently used
        assert_eq!(
            idx.score(&[1, 2], 1),
            [0],
            "the walk stops at the first hash no pod holds"
        );
        assert_eq!(idx.score(&[2, 3], 1), [2]);
    }
}
