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
//! Implementation note: the content-hash index is touched for every block computed, and
//! its cache misses dominate run time. It is an open-addressing table with linear probing
//! that stores `(hash, block)` pairs inline (a lookup reads one slot, then only the block
//! it finds, which the caller touches anyway), sized to a power of two of at least twice
//! the block count (it never holds more entries than blocks, so it never grows), with
//! backward-shift deletion (no tombstones). Content hashes are already well mixed, so
//! their low bits are the home slot. Nothing observable depends on slot order: the table
//! is only ever searched by key.

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
    /// Cached blocks, found by content hash. Never iterated into anything observable.
    index: HashIndex,
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
            index: HashIndex::new(n),
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
        self.index.get(hash)
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
            self.index.remove(hash, b);
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
        if blk.cached || !self.index.insert_new(hash, block) {
            return;
        }
        blk.cached = true;
        blk.hash = hash;
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

    #[inline]
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

    #[inline]
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

/// One slot of [`HashIndex`]: a content hash and the block caching it (`NIL`: empty).
#[derive(Clone, Copy)]
struct Slot {
    hash: u64,
    block: u32,
}

const EMPTY: Slot = Slot { hash: 0, block: NIL };

/// Content hash -> block, open addressing with linear probing (see the module docs).
struct HashIndex {
    slots: Vec<Slot>,
    mask: usize,
    len: usize,
}

impl HashIndex {
    /// An index for at most `n` entries.
    fn new(n: u32) -> HashIndex {
        let size = (2 * n as usize).next_power_of_two().max(8);
        HashIndex {
            slots: vec![EMPTY; size],
            mask: size - 1,
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.mask
    }

    /// The block stored under `hash`.
    #[inline]
    fn get(&self, hash: u64) -> Option<u32> {
        let mut i = self.home(hash);
        loop {
            let s = self.slots[i];
            if s.block == NIL {
                return None;
            }
            if s.hash == hash {
                return Some(s.block);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Stores `block` under `hash` unless the hash is present; true if stored.
    #[inline]
    fn insert_new(&mut self, hash: u64, block: u32) -> bool {
        let mut i = self.home(hash);
        loop {
            let s = self.slots[i];
            if s.block == NIL {
                break;
            }
            if s.hash == hash {
                return false;
            }
            i = (i + 1) & self.mask;
        }
        assert!(self.len < self.slots.len() / 2, "hash index over capacity");
        self.slots[i] = Slot { hash, block };
        self.len += 1;
        true
    }

    /// Removes the entry `(hash, block)`, which must be present.
    fn remove(&mut self, hash: u64, block: u32) {
        let mask = self.mask;
        let mut i = self.home(hash);
        loop {
            let s = self.slots[i];
            assert!(s.block != NIL, "removing a hash that is not indexed");
            if s.block == block {
                debug_assert_eq!(s.hash, hash);
                break;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: move later entries of the probe run into the hole when
        // their home slot does not lie (cyclically) after the hole.
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.block == NIL {
                break;
            }
            let home = self.home(s.hash);
            // Distance from home to j and from hole to j, cyclically.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
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
    fn hash_index_matches_a_map_under_churn() {
        // Colliding homes (small table, hashes sharing low bits) and wrap-around.
        let mut ix = HashIndex::new(16);
        let mut model = std::collections::BTreeMap::new();
        let mut x = 0x1234_5678u64;
        for step in 0..20_000u32 {
            x = crate::content::mix(x, u64::from(step));
            let h = (x % 64) << 3 | (x % 5); // few distinct hashes, clustered homes
            if model.len() < 16 && !model.contains_key(&h) && x % 3 != 0 {
                assert!(ix.insert_new(h, step));
                model.insert(h, step);
            } else if let Some(&b) = model.get(&h) {
                assert!(!ix.insert_new(h, 0));
                if x % 2 == 0 {
                    ix.remove(h, b);
                    model.remove(&h);
                }
            }
            assert_eq!(ix.len(), model.len());
            for (&k, &v) in &model {
                assert_eq!(ix.get(k), Some(v));
            }
            assert_eq!(ix.get(h), model.get(&h).copied());
        }
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
