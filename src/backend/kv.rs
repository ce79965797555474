//! KV-cache block pool with automatic prefix caching, after vLLM v1's `BlockPool`.
//!
//! * A fixed number of blocks (`kv_blocks`, usable blocks; vLLM's reserved null block is
//!   not counted).
//! * Free queue in eviction order: allocation pops the head; a block whose reference count
//!   drops to zero is appended to the tail. A popped block that still carries a cached
//!   hash is evicted from the content index at that moment.
//! * A cache hit on an unreferenced block takes it out of the free queue. Cached but
//!   unreferenced blocks count as free, for admission and for the usage gauge.
//!
//! Together this is LRU over unreferenced blocks; callers free a request's blocks in
//! reverse order so its tail is evicted before its prefix.
//!
//! Implementation note: the content-hash index is a `hashbrown::HashTable` of block ids
//! whose keys live in the blocks themselves (4 bytes per entry instead of 16), because the
//! index is touched for every block computed and its cache misses dominate run time.
//! Content hashes are already well mixed, so they serve as their own table hash.

use hashbrown::HashTable;

const NIL: u32 = u32::MAX;

/// One block's bookkeeping, kept together so each pool operation touches one cache line.
#[derive(Clone, Copy)]
struct Block {
    prev: u32,
    next: u32,
    ref_cnt: u32,
    cached: bool,
    /// Content hash, meaningful when `cached`.
    hash: u64,
}

/// A KV cache event: a full block's content hash entered (`stored`) or left the prefix
/// cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvEvent {
    /// True for `BlockStored`, false for `BlockRemoved`.
    pub stored: bool,
    /// The block's content hash.
    pub hash: u64,
}

/// The block pool of one engine.
pub struct BlockPool {
    blocks: Vec<Block>,
    head: u32,
    tail: u32,
    free: u32,
    /// Cached blocks, found by content hash (the key is `blocks[id].hash`). Never iterated
    /// into anything observable.
    index: HashTable<u32>,
    /// KV events (`BlockStored` / `BlockRemoved`, as vLLM publishes them to KV-aware
    /// routers), recorded only when enabled.
    events: Option<Vec<KvEvent>>,
}

impl BlockPool {
    /// A pool of `n` free, empty blocks.
    pub fn new(n: u32) -> BlockPool {
        assert!(n > 0 && n < NIL, "kv_blocks out of range");
        let mut p = BlockPool {
            blocks: vec![
                Block {
                    prev: NIL,
                    next: NIL,
                    ref_cnt: 0,
                    cached: false,
                    hash: 0
                };
                n as usize
            ],
            head: NIL,
            tail: NIL,
            free: 0,
            events: None,
            index: HashTable::with_capacity(n as usize),
        };
        for b in 0..n {
            p.push_tail(b);
        }
        p
    }

    /// Total blocks.
    pub fn capacity(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks in the free queue (including cached, unreferenced ones).
    pub fn num_free(&self) -> u32 {
        self.free
    }

    /// Blocks referenced by at least one request.
    pub fn num_used(&self) -> u32 {
        self.capacity() - self.free
    }

    /// Sum of reference counts over all blocks.
    pub fn total_refs(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(b.ref_cnt)).sum()
    }

    /// The block caching `hash`, if any.
    #[inline]
    fn holder(&self, hash: u64) -> Option<u32> {
        let blocks = &self.blocks;
        self.index.find(hash, |&b| blocks[b as usize].hash == hash).copied()
    }

    /// Number of leading `hashes` present in the cache.
    pub fn cached_prefix_len(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.holder(**h).is_some()).count()
    }

    /// The blocks holding the longest cached prefix of `hashes` (into `out`), and how many
    /// of them are unreferenced (touching those consumes free blocks). One lookup per block.
    pub fn cached_prefix(&self, hashes: &[u64], out: &mut Vec<u32>) -> u32 {
        out.clear();
        let mut unreferenced = 0;
        for h in hashes {
            let Some(b) = self.holder(*h) else { break };
            unreferenced += u32::from(self.blocks[b as usize].ref_cnt == 0);
            out.push(b);
        }
        unreferenced
    }

    /// The block caching `hash` (must be present).
    pub fn cached_block(&self, hash: u64) -> u32 {
        self.holder(hash).expect("cached_block on content that is not cached")
    }

    /// True if `block` is unreferenced (so touching it consumes a free block).
    pub fn is_unreferenced(&self, block: u32) -> bool {
        self.blocks[block as usize].ref_cnt == 0
    }

    /// Takes a reference on a cached block, removing it from the free queue if needed.
    pub fn touch(&mut self, block: u32) {
        if self.blocks[block as usize].ref_cnt == 0 {
            self.unlink(block);
        }
        self.blocks[block as usize].ref_cnt += 1;
    }

    /// Pops a block from the head of the free queue (evicting its cached hash).
    pub fn allocate(&mut self) -> u32 {
        let b = self.head;
        assert!(b != NIL, "allocate on an exhausted pool (callers check num_free first)");
        self.unlink(b);
        let blk = &mut self.blocks[b as usize];
        if blk.cached {
            blk.cached = false;
            let hash = blk.hash;
            if let Ok(e) = self.index.find_entry(hash, |&x| x == b) {
                e.remove();
            }
            if let Some(ev) = self.events.as_mut() {
                ev.push(KvEvent { stored: false, hash });
            }
        }
        self.blocks[b as usize].ref_cnt = 1;
        b
    }

    /// Drops one reference; an unreferenced block goes to the tail of the free queue.
    pub fn release(&mut self, block: u32) {
        let blk = &mut self.blocks[block as usize];
        assert!(blk.ref_cnt > 0, "double free of block {block}");
        blk.ref_cnt -= 1;
        if blk.ref_cnt == 0 {
            self.push_tail(block);
        }
    }

    /// Registers a full block's content hash. If another block already caches the same
    /// content, the index keeps the first one and this block stays uncached (vLLM can hold
    /// duplicates; one copy is enough for hits).
    pub fn cache(&mut self, block: u32, hash: u64) {
        let blk = &mut self.blocks[block as usize];
        debug_assert!(blk.ref_cnt > 0);
        if blk.cached || self.holder(hash).is_some() {
            return;
        }
        let blk = &mut self.blocks[block as usize];
        blk.cached = true;
        blk.hash = hash;
        let blocks = &self.blocks;
        self.index.insert_unique(hash, block, |&b| blocks[b as usize].hash);
        if let Some(ev) = self.events.as_mut() {
            ev.push(KvEvent { stored: true, hash });
        }
    }

    /// Starts recording [`KvEvent`]s.
    pub fn enable_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// Moves the events recorded since the last call into `out` (in order).
    pub fn drain_events(&mut self, out: &mut Vec<KvEvent>) {
        if let Some(ev) = self.events.as_mut() {
            out.append(ev);
        }
    }

    fn push_tail(&mut self, b: u32) {
        let tail = self.tail;
        {
            let blk = &mut self.blocks[b as usize];
            blk.prev = tail;
            blk.next = NIL;
        }
        if tail != NIL {
            self.blocks[tail as usize].next = b;
        } else {
            self.head = b;
        }
        self.tail = b;
        self.free += 1;
    }

    fn unlink(&mut self, b: u32) {
        let Block { prev: p, next: n, .. } = self.blocks[b as usize];
        if p != NIL {
            self.blocks[p as usize].next = n;
        } else {
            debug_assert_eq!(self.head, b);
            self.head = n;
        }
        if n != NIL {
            self.blocks[n as usize].prev = p;
        } else {
            debug_assert_eq!(self.tail, b);
            self.tail = p;
        }
        let blk = &mut self.blocks[b as usize];
        blk.prev = NIL;
        blk.next = NIL;
        self.free -= 1;
    }

    /// Checks the pool's internal consistency (used by invariant checks and tests).
    pub fn check(&self) -> Result<(), String> {
        let mut count = 0u32;
        let mut b = self.head;
        let mut last = NIL;
        while b != NIL {
            let blk = &self.blocks[b as usize];
            if blk.ref_cnt != 0 {
                return Err(format!("block {b} in free queue with ref {}", blk.ref_cnt));
            }
            if blk.prev != last {
                return Err(format!("broken back link at block {b}"));
            }
            last = b;
            b = blk.next;
            count += 1;
            if count > self.capacity() {
                return Err("free queue has a cycle".into());
            }
        }
        if count != self.free {
            return Err(format!("free count {} but {} blocks in queue", self.free, count));
        }
        let zero_refs = self.blocks.iter().filter(|b| b.ref_cnt == 0).count() as u32;
        if zero_refs != self.free {
            return Err(format!("{zero_refs} unreferenced blocks but {} free", self.free));
        }
        let mut cached = 0;
        for (i, b) in self.blocks.iter().enumerate() {
            if b.cached {
                cached += 1;
                if self.holder(b.hash) != Some(i as u32) {
                    return Err(format!("block {i} is marked cached but the index does not find it"));
                }
            }
        }
        if cached != self.index.len() {
            return Err(format!("{cached} cached blocks but {} index entries", self.index.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_over_unreferenced_blocks() {
        let mut p = BlockPool::new(4);
        let a = p.allocate();
        let b = p.allocate();
        p.cache(a, 100);
        p.cache(b, 200);
        assert_eq!(p.num_free(), 2);
        // Free in reverse order: b first, so b is evicted before a.
        p.release(b);
        p.release(a);
        assert_eq!(p.num_free(), 4);
        assert_eq!(p.cached_prefix_len(&[100, 200]), 2);
        // Two fresh blocks come from the never-used ones first, then b, then a.
        let c = p.allocate();
        let d = p.allocate();
        assert!(c != a && c != b && d != a && d != b);
        let e = p.allocate();
        assert_eq!(e, b);
        assert_eq!(p.cached_prefix_len(&[100, 200]), 1, "200 evicted with block b");
        p.check().unwrap();
    }

    #[test]
    fn hit_takes_block_out_of_free_queue() {
        let mut p = BlockPool::new(2);
        let a = p.allocate();
        p.cache(a, 7);
        p.release(a);
        assert_eq!(p.num_free(), 2);
        let blk = p.cached_block(7);
        assert!(p.is_unreferenced(blk));
        p.touch(blk);
        assert_eq!(p.num_free(), 1);
        p.touch(blk);
        p.release(blk);
        assert_eq!(p.num_free(), 1);
        p.release(blk);
        assert_eq!(p.num_free(), 2);
        p.check().unwrap();
    }

    #[test]
    fn evicted_content_is_never_hit() {
        let mut p = BlockPool::new(2);
        for h in 0..100u64 {
            let b = p.allocate();
            p.cache(b, h);
            p.release(b);
            p.check().unwrap();
        }
        // Only the last two contents can still be cached; the index holds just those.
        assert_eq!(p.cached_prefix_len(&[0]), 0);
        assert_eq!(p.cached_prefix_len(&[99]), 1);
        assert_eq!(p.cached_prefix_len(&[98]), 1);
        assert_eq!(p.index.len(), 2);
    }

    #[test]
    fn duplicate_content_keeps_first() {
        let mut p = BlockPool::new(2);
        let a = p.allocate();
        let b = p.allocate();
        p.cache(a, 1);
        p.cache(b, 1);
        assert_eq!(p.cached_block(1), a);
        p.release(a);
        p.release(b);
        p.check().unwrap();
    }
}
