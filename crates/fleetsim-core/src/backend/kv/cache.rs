//! One interface over the two pools for the engine. The pool keeps each request slot's
//! block table, so the engine never handles block ids; a lookup's hits wait in the pool
//! until the admission that takes them.

use super::{BlockPool, KvEvent, RunPool, slot_entry};
use crate::ids::RequestId;

/// An engine's KV cache: per block (the reference mode) or per run (the fast mode).
// One per engine, on the hot path: inline rather than boxed.
#[allow(clippy::large_enum_variant)]
pub enum KvCache {
    /// [`BlockPool`] with block tables of block ids.
    Blocks(Blocks),
    /// [`RunPool`], which keeps its own tables.
    Runs(RunPool),
}

/// [`BlockPool`] with the engine's per-request state.
pub struct Blocks {
    pool: BlockPool,
    /// Block ids by request slot.
    tables: Vec<Vec<u32>>,
    /// The last lookup's hit blocks.
    hits: Vec<u32>,
    /// The request and prefix cap of the lookup whose result `hits` holds.
    last_lookup: Option<(RequestId, u32)>,
    /// Recheck a repeated lookup instead of redoing it; off only in the test that checks
    /// both give the same.
    reuse_lookups: bool,
}

impl KvCache {
    /// `n` free blocks, kept per run (`runs`) or per block.
    pub fn new(n: u32, runs: bool) -> KvCache {
        if runs {
            KvCache::Runs(RunPool::new(n))
        } else {
            KvCache::Blocks(Blocks {
                pool: BlockPool::new(n),
                tables: Vec::new(),
                hits: Vec::new(),
                last_lookup: None,
                reuse_lookups: true,
            })
        }
    }

    /// Redo repeated lookups instead of rechecking them (per-block pool; for tests).
    #[cfg(test)]
    pub fn disable_lookup_reuse(&mut self) {
        if let KvCache::Blocks(b) = self {
            b.reuse_lookups = false;
        }
    }

    /// Total blocks.
    pub fn capacity(&self) -> u32 {
        match self {
            KvCache::Blocks(b) => b.pool.capacity(),
            KvCache::Runs(p) => p.capacity(),
        }
    }

    /// Blocks available to allocate.
    #[inline]
    pub fn num_free(&self) -> u32 {
        match self {
            KvCache::Blocks(b) => b.pool.num_free(),
            KvCache::Runs(p) => p.num_free(),
        }
    }

    /// Blocks referenced by at least one request.
    #[inline]
    pub fn num_used(&self) -> u32 {
        match self {
            KvCache::Blocks(b) => b.pool.num_used(),
            KvCache::Runs(p) => p.num_used(),
        }
    }

    /// Sum of all reference counts.
    pub fn total_refs(&self) -> u64 {
        match self {
            KvCache::Blocks(b) => b.pool.total_refs(),
            KvCache::Runs(p) => p.total_refs(),
        }
    }

    /// Blocks request slot `t` holds.
    pub fn held(&self, t: u32) -> u32 {
        match self {
            KvCache::Blocks(b) => b.tables.get(t as usize).map_or(0, |v| v.len() as u32),
            KvCache::Runs(p) => p.held(t),
        }
    }

    /// The longest cached prefix of `chain` for request `id` (blocks, and how many of them
    /// are unreferenced); the next [`admit`](Self::admit) takes them.
    ///
    /// Per block, a head-of-line-blocked request is looked up again at every step until
    /// it fits (on a Mooncake replay, half of all lookups, 94% of the blocks looked up).
    /// When the previous lookup was this request's with the same cap, its result is
    /// checked instead of redone: each block still caching the same hash (a block read,
    /// prefetched ahead, instead of an index probe and a block read) and the next hash
    /// still absent. The index holds exactly one block per cached hash, so that is
    /// exactly the full lookup's result. Per run, a lookup is already one probe per run.
    pub fn lookup(&mut self, id: RequestId, chain: &[u64]) -> (u32, u32) {
        match self {
            KvCache::Blocks(b) => {
                let last = b.last_lookup.take();
                let key = (id, chain.len() as u32);
                let again = b.reuse_lookups && last == Some(key);
                let unreferenced = match again.then(|| b.pool.recheck_prefix(chain, &b.hits)).flatten() {
                    Some(n) => n,
                    None => b.pool.cached_prefix(chain, &mut b.hits),
                };
                b.last_lookup = Some(key);
                (b.hits.len() as u32, unreferenced)
            }
            KvCache::Runs(p) => p.lookup(chain),
        }
    }

    /// No hits for the next admission (prefix caching off).
    pub fn clear_hits(&mut self) {
        match self {
            KvCache::Blocks(b) => {
                b.last_lookup = None;
                b.hits.clear();
            }
            KvCache::Runs(p) => p.clear_hits(),
        }
    }

    /// Takes references on the last lookup's hits for request slot `t`, whose table must
    /// be empty.
    pub fn admit(&mut self, t: u32) {
        match self {
            KvCache::Blocks(b) => {
                for &blk in &b.hits {
                    b.pool.touch(blk);
                }
                let hits = std::mem::take(&mut b.hits);
                slot_entry(&mut b.tables, t).extend_from_slice(&hits);
                b.hits = hits;
            }
            KvCache::Runs(p) => p.admit(t),
        }
    }

    /// Appends `n > 0` newly allocated blocks to request slot `t`'s table.
    #[inline]
    pub fn allocate(&mut self, t: u32, n: u32) {
        match self {
            KvCache::Blocks(b) => b.pool.allocate_n(n, slot_entry(&mut b.tables, t)),
            KvCache::Runs(p) => p.allocate(t, n),
        }
    }

    /// Registers `hashes[from..to]` as the contents of request slot `t`'s blocks
    /// `from..to` (vLLM caches a block's hash when it is allocated for tokens that fill it).
    #[inline]
    pub fn cache(&mut self, t: u32, hashes: &[u64], from: usize, to: usize) {
        match self {
            KvCache::Blocks(b) => {
                let table = &b.tables[t as usize];
                b.pool.cache_range(&table[from..to], &hashes[from..to]);
                // The next block this request fills (a decode step's, usually) will be
                // cached into the index: start loading its slot now.
                if let Some(&next) = hashes.get(to) {
                    b.pool.prefetch_content(next);
                }
            }
            KvCache::Runs(p) => p.cache(t, hashes, from, to),
        }
    }

    /// True when caching `hashes` as request slot `t`'s next blocks would only extend
    /// the run it cached last, each hash new to the index (so the caching reads nothing
    /// another request's allocation or caching changes). Per block, never: that pool's
    /// batch is not proven, and the reference mode steps one step at a time anyway.
    pub fn extends_own_run(&self, t: u32, hashes: &[u64]) -> bool {
        match self {
            KvCache::Blocks(_) => false,
            KvCache::Runs(p) => p.extends_own_run(t, hashes),
        }
    }

    /// Frees request slot `t`'s blocks, last first (so its tail is evicted before its
    /// prefix).
    pub fn release(&mut self, t: u32) {
        match self {
            KvCache::Blocks(b) => {
                if let Some(table) = b.tables.get_mut(t as usize) {
                    b.pool.release_rev(table);
                    table.clear();
                }
            }
            KvCache::Runs(p) => p.release(t),
        }
    }

    /// Starts recording [`KvEvent`]s.
    pub fn enable_events(&mut self) {
        match self {
            KvCache::Blocks(b) => b.pool.enable_events(),
            KvCache::Runs(p) => p.enable_events(),
        }
    }

    /// Moves the events recorded since the last call into `out` (in order).
    pub fn drain_events(&mut self, out: &mut Vec<KvEvent>) {
        match self {
            KvCache::Blocks(b) => b.pool.drain_events(out),
            KvCache::Runs(p) => p.drain_events(out),
        }
    }

    /// Checks the pool's internal consistency, and that the tables hold the references
    /// the pool counts.
    pub fn check(&self) -> Result<(), String> {
        match self {
            KvCache::Blocks(b) => {
                b.pool.check()?;
                let held: u64 = b.tables.iter().map(|v| v.len() as u64).sum();
                if held != b.pool.total_refs() {
                    return Err(format!(
                        "requests hold {held} block refs but the pool counts {}",
                        b.pool.total_refs()
                    ));
                }
                Ok(())
            }
            KvCache::Runs(p) => p.check(),
        }
    }
}
