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
//! Implementation notes. The free queue is a ring of block ids with lazy deletion: a block
//! records the ring slot of its live entry; a hit only bumps the reference
//! count, which leaves that entry stale, and allocation skips stale entries as it pops
//! them. The order of live entries is exactly that of a linked free queue, and the ring
//! (`2 * kv_blocks` slots) is compacted in place when it is full. Unlike a linked list,
//! the blocks about to be evicted can be read ahead without chasing pointers. The slot
//! alone identifies an entry: the occupied slots are distinct, and a push only writes an
//! unoccupied one, so a block's entry in slot `s` is live exactly when the block is
//! unreferenced and records `s`.
//!
//! The content-hash index is touched for every block computed, and
//! its cache misses dominate run time. It is an open-addressing table with linear probing
//! whose 8-byte slots hold a 32-bit tag of the hash and the block (a lookup reads one
//! slot, then the block it names, whose full hash confirms the match and which the caller
//! touches anyway), sized to a power of two of at least twice the block count (it never
//! holds more entries than blocks, so it never grows), with backward-shift deletion (no
//! tombstones). Content hashes are already well mixed, so the tag's low bits are the home
//! slot. Nothing observable depends on slot order: the table
//! is only ever searched by key.
//!
//! Those misses are independent of each other, so the batch operations below
//! ([`BlockPool::allocate_n`], [`BlockPool::cache_range`], [`BlockPool::cached_prefix`],
//! [`BlockPool::release_rev`]) prefetch the blocks and index slots a few blocks ahead: the
//! same operations in the same order, with the memory latency overlapped instead of paid
//! one block at a time.

use super::KvEvent;

const NIL: u32 = u32::MAX;

/// How many blocks ahead the batch operations prefetch index slots: enough misses in
/// flight to cover memory latency, few enough not to crowd out the demand loads (on the
/// 2-core benchmark VM, 8 ran the Mooncake replay ~15% faster than 16; 6 and 12 were no
/// better than 8).
const PREFETCH_AHEAD: usize = 8;

/// Asks the CPU to start loading `p`'s cache line. A hint only: it changes no state.
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and never writes, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The low 31 bits of [`Block::slot_cached`] are a ring slot (`< 2 * kv_blocks < 2^31`), the
/// top bit is the cached flag.
const SLOT_MASK: u32 = (1 << 31) - 1;
const CACHED: u32 = 1 << 31;

/// One block's bookkeeping, kept together so each pool operation touches one cache line,
/// and small (16 bytes) because the blocks of all backends are the simulator's largest
/// randomly accessed data.
#[derive(Clone, Copy)]
struct Block {
    /// Content hash, meaningful when cached.
    hash: u64,
    ref_cnt: u32,
    /// Ring slot of the block's live free-queue entry (when `ref_cnt == 0`), and the
    /// `CACHED` flag.
    slot_cached: u32,
}

impl Block {
    /// True if this block's live free-queue entry sits in ring slot `slot`.
    #[inline]
    fn is_live_at(&self, slot: u32) -> bool {
        self.ref_cnt == 0 && self.slot_cached & SLOT_MASK == slot
    }

    #[inline]
    fn cached(&self) -> bool {
        self.slot_cached & CACHED != 0
    }

    #[inline]
    fn set_cached(&mut self, cached: bool) {
        self.slot_cached = (self.slot_cached & SLOT_MASK) | if cached { CACHED } else { 0 };
    }

    #[inline]
    fn set_slot(&mut self, slot: u32) {
        self.slot_cached = (self.slot_cached & CACHED) | slot;
    }
}

/// The block pool of one engine.
pub struct BlockPool {
    blocks: Vec<Block>,
    /// The free queue: block ids in eviction order, live and stale entries (see the
    /// module docs), in the `len` slots from `head` on, cyclically.
    ring: Box<[u32]>,
    head: u32,
    len: u32,
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
        BlockPool::with_ring_head(n, 0)
    }

    /// [`new`](Self::new) with the free queue starting at ring slot `head` (tests start
    /// near the wrap-around).
    fn with_ring_head(n: u32, head: u32) -> BlockPool {
        assert!(n > 0 && n < crate::backend::MAX_KV_BLOCKS, "kv_blocks out of range");
        assert!(head < 2 * n, "ring head past the ring");
        let mut p = BlockPool {
            blocks: vec![
                Block {
                    hash: 0,
                    ref_cnt: 0,
                    slot_cached: 0
                };
                n as usize
            ],
            ring: vec![0; 2 * n as usize].into_boxed_slice(),
            head,
            len: 0,
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
        self.index.get(hash, |b| self.blocks[b as usize].hash)
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
        for h in hashes.iter().take(PREFETCH_AHEAD) {
            self.index.prefetch(*h);
        }
        for (i, h) in hashes.iter().enumerate() {
            if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                self.index.prefetch(ahead);
            }
            // The lookup has read the block (its hash confirms the match).
            let Some(b) = self.holder(*h) else { break };
            unreferenced += u32::from(self.blocks[b as usize].ref_cnt == 0);
            out.push(b);
        }
        unreferenced
    }

    /// [`cached_prefix`](Self::cached_prefix)'s result again, if it is still `blocks`:
    /// each block still caches its hash of `chain` and the next hash is still uncached
    /// (the index holds one block per cached hash, so then the lookup would find exactly
    /// these). Returns how many are unreferenced, or `None` if anything changed. A block
    /// read per block, prefetched ahead, instead of an index probe and a block read.
    pub fn recheck_prefix(&self, chain: &[u64], blocks: &[u32]) -> Option<u32> {
        if blocks.len() > chain.len() {
            return None;
        }
        let ahead = 2 * PREFETCH_AHEAD;
        for &b in blocks.iter().take(ahead) {
            prefetch(&self.blocks[b as usize]);
        }
        let mut unreferenced = 0;
        for (i, (&b, &h)) in blocks.iter().zip(chain).enumerate() {
            if let Some(&next) = blocks.get(i + ahead) {
                prefetch(&self.blocks[next as usize]);
            }
            let blk = &self.blocks[b as usize];
            if !blk.cached() || blk.hash != h {
                return None;
            }
            unreferenced += u32::from(blk.ref_cnt == 0);
        }
        match chain.get(blocks.len()) {
            Some(&next) if self.holder(next).is_some() => None,
            _ => Some(unreferenced),
        }
    }

    /// The block caching `hash` (must be present).
    pub fn cached_block(&self, hash: u64) -> u32 {
        self.holder(hash).expect("cached_block on content that is not cached")
    }

    /// True if `block` is unreferenced (so touching it consumes a free block).
    pub fn is_unreferenced(&self, block: u32) -> bool {
        self.blocks[block as usize].ref_cnt == 0
    }

    /// Takes a reference on a cached block, removing it from the free queue if needed
    /// (its ring entry goes stale).
    pub fn touch(&mut self, block: u32) {
        let blk = &mut self.blocks[block as usize];
        if blk.ref_cnt == 0 {
            self.free -= 1;
        }
        blk.ref_cnt += 1;
    }

    /// The ring slot `k` entries after the head (`k` at most the ring's size).
    #[inline]
    fn slot(&self, k: u32) -> u32 {
        let s = self.head + k;
        let size = self.ring.len() as u32;
        if s >= size { s - size } else { s }
    }

    /// The block of the ring entry `k` entries after the head.
    #[inline]
    fn ring_at(&self, k: u32) -> u32 {
        self.ring[self.slot(k) as usize]
    }

    /// Pops a block from the head of the free queue (evicting its cached hash).
    pub fn allocate(&mut self) -> u32 {
        self.pop_free()
    }

    /// [`allocate`](Self::allocate), inlined into the batch loop.
    #[inline(always)]
    fn pop_free(&mut self) -> u32 {
        assert!(
            self.free > 0,
            "allocate on an exhausted pool (callers check num_free first)"
        );
        // A free block has a live entry, so this stops before the ring runs out.
        let b = loop {
            let slot = self.head;
            let b = self.ring[slot as usize];
            self.head = self.slot(1);
            self.len -= 1;
            if self.blocks[b as usize].is_live_at(slot) {
                break b;
            }
        };
        self.free -= 1;
        let blk = &mut self.blocks[b as usize];
        if blk.cached() {
            blk.set_cached(false);
            let hash = blk.hash;
            self.index.remove(hash, b);
            if let Some(ev) = self.events.as_mut() {
                ev.push(KvEvent { stored: false, hash });
            }
        }
        self.blocks[b as usize].ref_cnt = 1;
        b
    }

    /// Allocates `n` blocks, appending them to `out`: exactly `n` calls of
    /// [`allocate`](Self::allocate), with the blocks about to be popped, then the index
    /// slots of those to be evicted, prefetched along the ring.
    pub fn allocate_n(&mut self, n: u32, out: &mut Vec<u32>) {
        // Two stages: ring entries 2D ahead have their blocks fetched; entries D ahead,
        // whose blocks should have arrived by then, have their index slots fetched. Never
        // look further than the `n` entries this call pops at least (a decode step pops
        // one, and reading further would cost more than it saves).
        let d = PREFETCH_AHEAD as u32;
        let limit = n.min(self.len);
        for k in 0..limit.min(2 * d) {
            prefetch(&self.blocks[self.ring_at(k) as usize]);
        }
        for k in 0..limit.min(d) {
            self.prefetch_eviction(k);
        }
        for i in 0..n {
            // Ring offsets shrink as entries are popped: offset `k` now is entry `i + k`
            // of the call, give or take the stale entries already skipped.
            let left = n - i;
            if 2 * d < left && 2 * d < self.len {
                prefetch(&self.blocks[self.ring_at(2 * d) as usize]);
            }
            if d < left && d < self.len {
                self.prefetch_eviction(d);
            }
            out.push(self.pop_free());
        }
        // Warm the next allocation too (decode steps allocate one block at a time, so the
        // loop above never looks ahead for them): the head block's index slot now (reading
        // the block), the block behind it for next time.
        if self.len > 0 {
            self.prefetch_eviction(0);
        }
        if self.len > 1 {
            prefetch(&self.blocks[self.ring_at(1) as usize]);
        }
    }

    /// Starts loading the index slot that caching or looking up `hash` will touch (a hint
    /// for content a request will cache soon).
    #[inline]
    pub fn prefetch_content(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// Prefetches the index slot that evicting the block at ring offset `k` would touch.
    #[inline]
    fn prefetch_eviction(&self, k: u32) {
        let blk = &self.blocks[self.ring_at(k) as usize];
        if blk.cached() {
            self.index.prefetch(blk.hash);
        }
    }

    /// Drops one reference; an unreferenced block goes to the tail of the free queue.
    pub fn release(&mut self, block: u32) {
        self.release_one(block);
    }

    /// [`release`](Self::release), inlined into the batch loop.
    #[inline(always)]
    fn release_one(&mut self, block: u32) {
        let blk = &mut self.blocks[block as usize];
        assert!(blk.ref_cnt > 0, "double free of block {block}");
        blk.ref_cnt -= 1;
        if blk.ref_cnt == 0 {
            self.push_tail(block);
        }
    }

    /// [`release`](Self::release) for each block of `blocks` from last to first (the order
    /// a finished request frees its blocks in), prefetching the blocks ahead.
    pub fn release_rev(&mut self, blocks: &[u32]) {
        for (i, &b) in blocks.iter().enumerate().rev() {
            if let Some(ahead) = i.checked_sub(PREFETCH_AHEAD) {
                prefetch(&self.blocks[blocks[ahead] as usize]);
            }
            self.release_one(b);
        }
    }

    /// Registers a full block's content hash. If another block already caches the same
    /// content, the index keeps the first one and this block stays uncached (vLLM can hold
    /// duplicates; one copy is enough for hits).
    pub fn cache(&mut self, block: u32, hash: u64) {
        self.cache_one(block, hash);
    }

    /// [`cache`](Self::cache), inlined into the batch loop.
    #[inline(always)]
    fn cache_one(&mut self, block: u32, hash: u64) {
        debug_assert!(self.blocks[block as usize].ref_cnt > 0);
        if self.blocks[block as usize].cached() {
            return;
        }
        let blocks = &self.blocks;
        if !self.index.insert_new(hash, block, |b| blocks[b as usize].hash) {
            return;
        }
        let blk = &mut self.blocks[block as usize];
        blk.set_cached(true);
        blk.hash = hash;
        if let Some(ev) = self.events.as_mut() {
            ev.push(KvEvent { stored: true, hash });
        }
    }

    /// [`cache`](Self::cache) for each `(blocks[i], hashes[i])` in order, prefetching the
    /// index slots ahead.
    pub fn cache_range(&mut self, blocks: &[u32], hashes: &[u64]) {
        debug_assert_eq!(blocks.len(), hashes.len());
        for h in hashes.iter().take(PREFETCH_AHEAD) {
            self.index.prefetch(*h);
        }
        for (i, (&b, &h)) in blocks.iter().zip(hashes).enumerate() {
            if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                self.index.prefetch(ahead);
            }
            self.cache_one(b, h);
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
        if self.len as usize == self.ring.len() {
            self.compact();
        }
        let slot = self.slot(self.len);
        self.blocks[b as usize].set_slot(slot);
        self.ring[slot as usize] = b;
        self.len += 1;
        self.free += 1;
    }

    /// Drops the stale ring entries, moving the live ones forward in order. Amortised: a
    /// full ring holds twice as many entries as blocks, so this runs after at least as
    /// many pushes as there are blocks.
    #[cold]
    fn compact(&mut self) {
        // In place: an entry moves to a slot at or before its own, one already read.
        let mut kept = 0;
        for k in 0..self.len {
            let slot = self.slot(k);
            let b = self.ring[slot as usize];
            if self.blocks[b as usize].is_live_at(slot) {
                let to = self.slot(kept);
                self.ring[to as usize] = b;
                self.blocks[b as usize].set_slot(to);
                kept += 1;
            }
        }
        self.len = kept;
    }

    /// Checks the pool's internal consistency (used by invariant checks and tests).
    pub fn check(&self) -> Result<(), String> {
        // Live entries are unreferenced by construction and unique (one position each);
        // so the count of live entries must equal both the free count and the count of
        // unreferenced blocks, each of which then has its entry.
        if self.len as usize > self.ring.len() || self.head as usize >= self.ring.len() {
            return Err(format!(
                "ring of {} entries from slot {} in {} slots",
                self.len,
                self.head,
                self.ring.len()
            ));
        }
        let mut count = 0u32;
        for k in 0..self.len {
            let slot = self.slot(k);
            let b = self.ring[slot as usize];
            if b >= self.capacity() {
                return Err(format!("ring entry {k} names block {b}, past the pool"));
            }
            count += u32::from(self.blocks[b as usize].is_live_at(slot));
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
            if b.cached() {
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

/// One slot of [`HashIndex`]: the tag of a content hash and the block caching it (`NIL`:
/// empty). The block's own record holds the full hash.
#[derive(Clone, Copy)]
struct Slot {
    tag: u32,
    block: u32,
}

const EMPTY: Slot = Slot { tag: 0, block: NIL };

/// The 32-bit tag of a content hash: both halves folded, so every bit counts.
#[inline]
fn tag(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

/// Content hash -> block, open addressing with linear probing (see the module docs).
/// Lookups confirm a tag match with `key_of(block)`, the full hash the block caches.
struct HashIndex {
    slots: Vec<Slot>,
    mask: usize,
    len: usize,
}

impl HashIndex {
    /// An index for at most `n` entries.
    fn new(n: u32) -> HashIndex {
        let size = (2 * n as usize).next_power_of_two().max(8);
        assert!(size - 1 <= u32::MAX as usize, "hash index larger than its tags address");
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
    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask
    }

    /// Starts loading the home slot of `hash`.
    #[inline]
    fn prefetch(&self, hash: u64) {
        prefetch(&self.slots[self.home(tag(hash))]);
    }

    /// The block stored under `hash`.
    #[inline]
    fn get(&self, hash: u64, key_of: impl Fn(u32) -> u64) -> Option<u32> {
        let t = tag(hash);
        let mut i = self.home(t);
        loop {
            let s = self.slots[i];
            if s.block == NIL {
                return None;
            }
            if s.tag == t && key_of(s.block) == hash {
                return Some(s.block);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Stores `block` under `hash` unless the hash is present; true if stored.
    #[inline]
    fn insert_new(&mut self, hash: u64, block: u32, key_of: impl Fn(u32) -> u64) -> bool {
        let t = tag(hash);
        let mut i = self.home(t);
        loop {
            let s = self.slots[i];
            if s.block == NIL {
                break;
            }
            if s.tag == t && key_of(s.block) == hash {
                return false;
            }
            i = (i + 1) & self.mask;
        }
        assert!(self.len < self.slots.len() / 2, "hash index over capacity");
        self.slots[i] = Slot { tag: t, block };
        self.len += 1;
        true
    }

    /// Removes the entry `(hash, block)`, which must be present.
    fn remove(&mut self, hash: u64, block: u32) {
        let mask = self.mask;
        let mut i = self.home(tag(hash));
        loop {
            let s = self.slots[i];
            assert!(s.block != NIL, "removing a hash that is not indexed");
            if s.block == block {
                debug_assert_eq!(s.tag, tag(hash));
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
            let home = self.home(s.tag);
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
        // Block `step` holds hash `key[step]`; tags collide for hashes 2^32 apart.
        let mut key = std::collections::BTreeMap::new();
        let mut x = 0x1234_5678u64;
        for step in 0..20_000u32 {
            x = crate::content::mix(x, u64::from(step));
            // Few distinct hashes, clustered homes, equal tags for different hashes.
            let (base, k) = ((x % 64) << 3 | (x % 5), (x >> 40) % 3);
            let h = (k << 32) | (base ^ k);
            assert_eq!(tag(h), tag(base));
            key.insert(step, h);
            let key_of = |b: u32| key[&b];
            if model.len() < 16 && !model.contains_key(&h) && !x.is_multiple_of(3) {
                assert!(ix.insert_new(h, step, key_of));
                model.insert(h, step);
            } else if let Some(&b) = model.get(&h) {
                assert!(!ix.insert_new(h, step, key_of));
                if x.is_multiple_of(2) {
                    ix.remove(h, b);
                    model.remove(&h);
                }
            }
            assert_eq!(ix.len(), model.len());
            let key_of = |b: u32| key[&b];
            for (&k, &v) in &model {
                assert_eq!(ix.get(k, key_of), Some(v));
            }
            assert_eq!(ix.get(h, key_of), model.get(&h).copied());
        }
    }

    #[test]
    fn compaction_keeps_the_free_queue_order() {
        // 4 blocks, cached and freed; then hits released at once, each leaving a stale entry
        // and pushing a new one, until the ring (8 slots) is full and compacts in place.
        let mut p = BlockPool::with_ring_head(4, 6);
        let blocks: Vec<u32> = (0..4).map(|_| p.allocate()).collect();
        for (h, &b) in blocks.iter().enumerate() {
            p.cache(b, h as u64);
        }
        p.release_rev(&blocks);
        let mut compactions = 0;
        for h in [1u64, 3, 0, 1, 2, 1, 3, 0, 0, 2] {
            let b = p.cached_block(h);
            p.touch(b);
            let before = p.len;
            p.release(b);
            compactions += u32::from(p.len <= before);
            p.check().unwrap();
        }
        assert!(compactions >= 2, "the ring compacted {compactions} times");
        // Least recently released first: 1 (last hit 6th), then 3, 0, 2.
        let order: Vec<u64> = (0..4)
            .map(|_| {
                let b = p.allocate();
                p.blocks[b as usize].hash
            })
            .collect();
        assert_eq!(order, [1, 3, 0, 2]);
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

    /// The textbook pool the ring must agree with: a free queue searched and spliced
    /// linearly, a `BTreeMap` index.
    struct NaivePool {
        free: std::collections::VecDeque<u32>,
        refs: Vec<u32>,
        hash_of: Vec<Option<u64>>,
        index: std::collections::BTreeMap<u64, u32>,
    }

    impl NaivePool {
        fn new(n: u32) -> NaivePool {
            NaivePool {
                free: (0..n).collect(),
                refs: vec![0; n as usize],
                hash_of: vec![None; n as usize],
                index: Default::default(),
            }
        }
        fn allocate(&mut self) -> u32 {
            let b = self.free.pop_front().unwrap();
            if let Some(h) = self.hash_of[b as usize].take() {
                self.index.remove(&h);
            }
            self.refs[b as usize] = 1;
            b
        }
        fn touch(&mut self, b: u32) {
            if self.refs[b as usize] == 0 {
                let at = self.free.iter().position(|&x| x == b).unwrap();
                self.free.remove(at);
            }
            self.refs[b as usize] += 1;
        }
        fn release(&mut self, b: u32) {
            self.refs[b as usize] -= 1;
            if self.refs[b as usize] == 0 {
                self.free.push_back(b);
            }
        }
        fn cache(&mut self, b: u32, h: u64) {
            if self.hash_of[b as usize].is_none() && !self.index.contains_key(&h) {
                self.index.insert(h, b);
                self.hash_of[b as usize] = Some(h);
            }
        }
    }

    proptest::proptest! {
        /// Any sequence of pool operations picks the same blocks, evicts the same content
        /// and finds the same prefixes as the textbook LRU pool, through many compactions
        /// of the ring (6 blocks, so stale entries pile up fast), and across the wrap-around
        /// of the ring's slots.
        #[test]
        fn ring_free_queue_matches_a_textbook_lru(
            ops in proptest::collection::vec((0u8..10, 0u32..64), 1..400),
            near_wrap in proptest::bool::ANY,
        ) {
            const N: u32 = 6;
            let mut pool = BlockPool::with_ring_head(N, if near_wrap { 2 * N - 2 } else { 0 });
            let mut naive = NaivePool::new(N);
            let mut held: Vec<u32> = Vec::new();
            let mut out = Vec::new();
            let mut last_lookup: Vec<u32> = Vec::new();
            for (op, x) in ops {
                match op {
                    0 if pool.num_free() > 0 => {
                        let b = pool.allocate();
                        proptest::prop_assert_eq!(b, naive.allocate());
                        held.push(b);
                    }
                    1 => {
                        let n = x % 4;
                        if pool.num_free() >= n {
                            out.clear();
                            pool.allocate_n(n, &mut out);
                            let want: Vec<u32> = (0..n).map(|_| naive.allocate()).collect();
                            proptest::prop_assert_eq!(&out, &want);
                            held.extend_from_slice(&out);
                        }
                    }
                    2 if !held.is_empty() => {
                        let b = held[x as usize % held.len()];
                        let h = u64::from(x % 16);
                        pool.cache(b, h);
                        naive.cache(b, h);
                    }
                    3 => {
                        let h = u64::from(x % 16);
                        let found = pool.holder(h);
                        proptest::prop_assert_eq!(found, naive.index.get(&h).copied());
                        if let Some(b) = found {
                            pool.touch(b);
                            naive.touch(b);
                            held.push(b);
                        }
                    }
                    4 if !held.is_empty() => {
                        let b = held.swap_remove(x as usize % held.len());
                        pool.release(b);
                        naive.release(b);
                    }
                    6.. => {
                        // A hit released at once (4 ops in 10): a stale entry and a new tail
                        // entry, so the ring fills and is compacted.
                        let h = u64::from(x % 16);
                        if let Some(b) = pool.holder(h) {
                            pool.touch(b);
                            naive.touch(b);
                            pool.release(b);
                            naive.release(b);
                        }
                    }
                    5 if !held.is_empty() => {
                        let k = (x as usize % held.len()) + 1;
                        let tail = held.split_off(held.len() - k);
                        pool.release_rev(&tail);
                        for &b in tail.iter().rev() {
                            naive.release(b);
                        }
                    }
                    _ => {}
                }
                proptest::prop_assert_eq!(pool.num_free() as usize, naive.free.len());
                if let Err(e) = pool.check() {
                    return Err(proptest::test_runner::TestCaseError::fail(e));
                }
                let hashes: Vec<u64> = (0..16).collect();
                let mut blocks = Vec::new();
                // Rechecking the previous lookup's blocks agrees with a fresh lookup whenever
                // it answers, and answers whenever nothing it read changed.
                let recheck = pool.recheck_prefix(&hashes, &last_lookup);
                let unreferenced = pool.cached_prefix(&hashes, &mut blocks);
                let want: Vec<u32> = hashes.iter().map_while(|h| naive.index.get(h).copied()).collect();
                if let Some(r) = recheck {
                    proptest::prop_assert_eq!(&last_lookup, &blocks);
                    proptest::prop_assert_eq!(r, unreferenced);
                } else {
                    proptest::prop_assert_ne!(&last_lookup, &blocks);
                }
                proptest::prop_assert_eq!(&blocks, &want);
                last_lookup = blocks;
            }
        }
    }
}
