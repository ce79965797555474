//! SGLang router `cache_aware` (classic sgl-router, `src/policies/cache_aware.rs` and
//! `tree.rs`; design in sglang PR #2114), with the Python `RouterArgs` defaults users get:
//! `cache_threshold = 0.3`, `balance_abs_threshold = 64`, `balance_rel_threshold = 1.5`.
//!
//! 1. Loads are router-local in-flight counts (`worker.load()`, zero staleness).
//! 2. Imbalanced iff `max - min > balance_abs_threshold` and `max > min * balance_rel_threshold`
//!    → the least-loaded worker (first in list order), and the text is inserted for it.
//! 3. Otherwise match the request text in the shared approximate radix tree:
//!    `match_rate = matched chars / text chars`; above `cache_threshold` → a tenant of the
//!    deepest matched node; else → the tenant with the fewest stored characters (a cache
//!    *capacity* heuristic, not a load one: the "death spiral" of sglang PR #14532 when a
//!    worker on unique heavy requests has a small tree and a long queue).
//! 4. Insert the text for the chosen worker.
//!
//! Approximations, stated: the tree matches in chunks of `tree_chunk_chars` characters
//! (default 16) instead of single characters, so a match is short by less than one chunk;
//! among several tenants of the deepest node upstream takes the first key of a concurrent
//! hash map (unspecified order) — here a uniformly random one; ties for the smallest tree go
//! to the first in list order. Eviction (`max_tree_size` = 2^26 characters per tenant,
//! checked every 120 s) is not modelled: no shipped scenario stores a thousandth of that.

use super::hashtrie::HashTrie;
use super::leastrequest::local_loads;
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::ids::BackendId;
use crate::rng::SimRng;

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
}

impl Default for CacheAwareParams {
    fn default() -> Self {
        CacheAwareParams {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            tree_chunk_chars: 16,
        }
    }
}

/// The policy state: one tree shared by all workers, stored characters per worker.
pub struct CacheAware {
    params: CacheAwareParams,
    tree: HashTrie,
    stored_chars: Vec<u64>,
}

impl CacheAware {
    /// An empty tree.
    pub fn new(params: CacheAwareParams) -> Self {
        CacheAware {
            params,
            tree: HashTrie::new(),
            stored_chars: Vec::new(),
        }
    }
}

impl RoutingPolicy for CacheAware {
    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(self.params.tree_chunk_chars)
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let n = view.endpoints.len();
        let max_id = view.endpoints.iter().map(|e| e.backend.index()).max().unwrap_or(0);
        if self.stored_chars.len() <= max_id {
            self.stored_chars.resize(max_id + 1, 0);
        }
        let loads = local_loads(view);
        let (min, max) = (*loads.iter().min().expect("n > 0"), *loads.iter().max().expect("n > 0"));
        let p = self.params;
        let imbalanced = max - min > p.balance_abs_threshold && max as f64 > min as f64 * p.balance_rel_threshold;
        let available: Vec<BackendId> = view.endpoints.iter().map(|e| e.backend).collect();
        let stored = &self.stored_chars;
        let chunk = u64::from(req.chunk_chars);
        let decision = self
            .tree
            .match_then_insert(req.prompt_chunks, &available, |chunks, matched| {
                let (pos, branch) = if imbalanced {
                    (
                        (0..n).min_by_key(|&i| loads[i]).expect("n > 0"),
                        Branch::CacheAwareImbalanced,
                    )
                } else {
                    let matched_chars = (chunks as u64 * chunk).min(req.prompt_chars);
                    let rate = if req.prompt_chars == 0 {
                        0.0
                    } else {
                        matched_chars as f64 / req.prompt_chars as f64
                    };
                    if rate > p.cache_threshold {
                        let b = matched[uniform_index(rng, matched.len())];
                        (
                            available.iter().position(|x| *x == b).expect("subset"),
                            Branch::CacheAwareHit,
                        )
                    } else {
                        let pos = (0..n).min_by_key(|&i| stored[available[i].index()]).expect("n > 0");
                        (pos, Branch::CacheAwareSmallestTree)
                    }
                };
                (
                    available[pos],
                    Decision {
                        pos,
                        branch,
                        match_chars: chunks as u64 * chunk,
                    },
                )
            });
        let b = available[decision.pos].index();
        self.stored_chars[b] += self.tree.last_insert_added() as u64 * chunk;
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req_chars};
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
}
