//! AIBrix gateway `prefix-cache` (`pkg/plugins/gateway/algorithms/prefix_cache.go`, index in
//! `pkg/utils/prefixcacheindexer/hash.go`), with the load gates of PR #933 / #1906:
//!
//! * the prompt's raw bytes in blocks of `block_chars` (4; the incomplete tail is not
//!   hashed), chained hashes, kept in one LRU of `max_blocks` (200,000) blocks whose entries
//!   idle for more than `block_ttl_s` (20 min) are dropped;
//! * load gate: if `max - min` of the gateway's in-flight counts over ready pods exceeds
//!   `imbalance_abs_count` (8, strict), only the pods at the minimum are considered;
//! * match: walk the blocks in order; a pod lacking a block drops out; the walk stops when
//!   no candidate holds the block; each pod keeps `match% = (i + 1) * 100 / blocks` of the
//!   last block it matched (integer division);
//! * among matched pods: shuffle, stable sort by match% descending then in-flight
//!   ascending, take the first with in-flight <= mean + `std_dev_factor` x stddev (over all
//!   ready pods);
//! * no match, or nobody within that band: least-request (uniform among the minima);
//! * after the pick, the request's blocks are recorded for the chosen pod.
//!
//! Signals: the gateway-tracked `realtime_num_requests_running` (router-local, fresh).

use lru::LruCache;
use rand::seq::SliceRandom;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::leastrequest::{Tie, argmin, local_loads};
use super::params::{ParamError, count, finite_non_negative, index_size, secs};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;
use crate::time::{SimDuration, SimTime};

/// Parameters (upstream defaults in [`AibrixParams::default`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AibrixParams {
    /// `AIBRIX_PREFIX_CACHE_BLOCK_SIZE` with the default "character" tokenizer.
    pub block_chars: u32,
    /// Blocks the index holds.
    pub max_blocks: u32,
    /// Entries idle longer than this are evicted.
    pub block_ttl: SimDuration,
    /// `AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT`.
    pub imbalance_abs_count: u64,
    /// `AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR`.
    pub std_dev_factor: f64,
}

impl Default for AibrixParams {
    fn default() -> Self {
        AibrixParams {
            block_chars: 4,
            max_blocks: 200_000,
            block_ttl: SimDuration(1_200_000_000_000),
            imbalance_abs_count: 8,
            std_dev_factor: 1.0,
        }
    }
}

/// Pods holding a block, and when it was last used.
struct Entry {
    pods: SmallVec<[u16; 4]>,
    last: SimTime,
}

/// The policy state.
pub struct AibrixPrefixCache {
    params: AibrixParams,
    /// Unbounded, capped by hand at `max_blocks` so nothing is reserved up front.
    index: LruCache<u64, Entry, FxBuildHasher>,
}

impl AibrixPrefixCache {
    /// An empty index.
    pub fn new(params: AibrixParams) -> Self {
        AibrixPrefixCache {
            params,
            index: LruCache::unbounded_with_hasher(FxBuildHasher),
        }
    }

    fn expire(&mut self, now: SimTime) {
        while let Some((_, e)) = self.index.peek_lru() {
            if now.0.saturating_sub(e.last.0) > self.params.block_ttl.0 {
                self.index.pop_lru();
            } else {
                break;
            }
        }
    }
}

impl RoutingPolicy for AibrixPrefixCache {
    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(self.params.block_chars)
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        self.expire(view.now);
        let n = view.endpoints.len();
        let p = self.params;
        // Full blocks only.
        let full = (req.prompt_chars / u64::from(req.chunk_chars)) as usize;
        let blocks = &req.prompt_chunks[..full.min(req.prompt_chunks.len())];
        let loads = local_loads(view);
        let (min, max) = (*loads.iter().min().expect("n > 0"), *loads.iter().max().expect("n > 0"));
        let mut candidates: Vec<usize> = if max - min > p.imbalance_abs_count {
            (0..n).filter(|&i| loads[i] == min).collect()
        } else {
            (0..n).collect()
        };
        let gated = candidates.len() < n;
        let pod_of = |i: usize| view.endpoints[i].backend.index() as u16;
        let mut pct = vec![0u64; n];
        for (i, h) in blocks.iter().enumerate() {
            let Some(e) = self.index.peek(h) else { break };
            let holders: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|&c| e.pods.contains(&pod_of(c)))
                .collect();
            if holders.is_empty() {
                break;
            }
            for &c in &holders {
                pct[c] = (i as u64 + 1) * 100 / blocks.len() as u64;
            }
            candidates = holders;
        }
        let mut matched: Vec<usize> = (0..n).filter(|&i| pct[i] > 0).collect();
        let mean = loads.iter().sum::<u64>() as f64 / n as f64;
        let sd = (loads.iter().map(|&l| (l as f64 - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        matched.shuffle(rng);
        matched.sort_by(|&a, &b| pct[b].cmp(&pct[a]).then(loads[a].cmp(&loads[b])));
        let limit = mean + p.std_dev_factor * sd;
        let (pos, branch) = match matched.iter().find(|&&i| loads[i] as f64 <= limit) {
            Some(&i) => (i, Branch::AibrixPrefixHit),
            None => {
                let pool: Vec<u64> = (0..n)
                    .map(|i| if gated && loads[i] != min { u64::MAX } else { loads[i] })
                    .collect();
                (argmin(&pool, Tie::Random, rng), Branch::AibrixLeastRequest)
            }
        };
        let pod = pod_of(pos);
        for &h in blocks {
            match self.index.get_mut(&h) {
                Some(e) => {
                    e.last = view.now;
                    if !e.pods.contains(&pod) {
                        e.pods.push(pod);
                    }
                }
                None => {
                    let mut pods = SmallVec::new();
                    pods.push(pod);
                    self.index.put(h, Entry { pods, last: view.now });
                    if self.index.len() > p.max_blocks as usize {
                        self.index.pop_lru();
                    }
                }
            }
        }
        Decision {
            pos,
            branch,
            match_chars: pct[pos] * req.prompt_chars / 100,
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy (unset keys: [`AibrixParams::default`]).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    block_chars: Option<i64>,
    max_blocks: Option<i64>,
    block_ttl_s: Option<f64>,
    imbalance_abs_count: Option<i64>,
    std_dev_factor: Option<f64>,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "aibrix_prefix_cache";
    const DOC: Doc = Doc {
        source: "AIBrix gateway prefix-cache (pkg/plugins/gateway/algorithms/prefix_cache.go) with the load gates of PR #933 / #1906",
        decision: "gate max - min > 8: only the least loaded pods; the best match% within mean + 1 sd of load; \
                   else least-request",
        signals: "gateway in-flight requests (router-local, fresh) and a router-local LRU index of 4-byte prompt blocks",
        params: &[
            param(
                "block_chars",
                "4",
                "AIBRIX_PREFIX_CACHE_BLOCK_SIZE (character tokenizer)",
            ),
            param("max_blocks", "200000", "blocks in the index LRU"),
            param("block_ttl_s", "1200", "entries idle longer than this are evicted"),
            param(
                "imbalance_abs_count",
                "8",
                "max - min in-flight above this: only the least-loaded pods are candidates",
            ),
            param(
                "std_dev_factor",
                "1",
                "a matched pod must run <= mean + factor x stddev",
            ),
        ],
    };
    type Params = Params;
    type Config = AibrixParams;
    fn validate(f: Params, _: &Fleet) -> Result<AibrixParams, ParamError> {
        let d = AibrixParams::default();
        let k = finite_non_negative(f.std_dev_factor.unwrap_or(d.std_dev_factor), "std_dev_factor")?;
        Ok(AibrixParams {
            block_chars: count(f.block_chars.unwrap_or(i64::from(d.block_chars)), "block_chars", 1)?,
            max_blocks: index_size(f.max_blocks.unwrap_or(i64::from(d.max_blocks)), "max_blocks")?,
            block_ttl: secs(f.block_ttl_s.unwrap_or(d.block_ttl.as_secs_f64()), "block_ttl_s", false)?,
            imbalance_abs_count: u64::from(count(
                f.imbalance_abs_count.unwrap_or(d.imbalance_abs_count as i64),
                "imbalance_abs_count",
                0,
            )?),
            std_dev_factor: k,
        })
    }
    fn describe(p: &AibrixParams) -> String {
        format!(
            "imbalance_abs_count = {}, std_dev_factor = {}",
            p.imbalance_abs_count, p.std_dev_factor
        )
    }
    fn build(p: &AibrixParams) -> Box<dyn RoutingPolicy> {
        Box::new(AibrixPrefixCache::new(*p))
    }
    fn upstream(c: &AibrixParams, set: &[&str]) -> Option<Upstream> {
        let mut how = "routing-strategy prefix-cache".to_string();
        if set.contains(&"imbalance_abs_count") {
            how.push_str(&format!(
                ", AIBRIX_PREFIX_CACHE_POD_RUNNING_REQUEST_IMBALANCE_ABS_COUNT={}",
                c.imbalance_abs_count
            ));
        }
        Upstream::new("AIBrix gateway", how)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req_chars};
    use crate::rng::stream;

    #[test]
    fn follows_the_cache_within_the_load_band() {
        let mut p = AibrixPrefixCache::new(AibrixParams::default());
        let mut rng = stream(1, "t", 0);
        let h = [1u64, 2, 3, 4];
        let first = p.route(&req_chars(&h, 4, 16), &ViewFixture::new(3).view(), &mut rng);
        assert_eq!(first.branch, Branch::AibrixLeastRequest, "empty index");
        // Same prompt, loads 1/1/1: the holder is within mean + sd.
        let f = ViewFixture::new(3).in_flight(&[Some(1), Some(1), Some(1)]);
        let d = p.route(&req_chars(&h, 4, 16), &f.view(), &mut rng);
        assert_eq!(
            (d.pos, d.branch, d.match_chars),
            (first.pos, Branch::AibrixPrefixHit, 16)
        );
        // The holder far above the band (mean + 1 sd): least-request instead.
        let mut loads = [Some(0), Some(0), Some(0)];
        loads[first.pos] = Some(6);
        let f = ViewFixture::new(3).in_flight(&loads);
        let d = p.route(&req_chars(&h, 4, 16), &f.view(), &mut rng);
        assert_eq!(d.branch, Branch::AibrixLeastRequest);
        assert_ne!(d.pos, first.pos);
    }

    #[test]
    fn imbalance_gate_restricts_to_the_minimum() {
        let mut p = AibrixPrefixCache::new(AibrixParams::default());
        let mut rng = stream(2, "t", 0);
        let h = [7u64, 8];
        let first = p.route(&req_chars(&h, 4, 8), &ViewFixture::new(2).view(), &mut rng).pos;
        let mut loads = [Some(0), Some(0)];
        loads[first] = Some(9); // 9 - 0 > 8: only the idle pod is considered
        let f = ViewFixture::new(2).in_flight(&loads);
        assert_ne!(p.route(&req_chars(&h, 4, 8), &f.view(), &mut rng).pos, first);
    }
}
