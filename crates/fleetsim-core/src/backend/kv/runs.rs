//! The block pool kept per run: the same observable behaviour as [`super::BlockPool`],
//! with O(1) index work per run of blocks instead of per block.
//!
//! A *run* is a stretch of one request's hash chain that the request cached in a row:
//! positions `0..len` of the run hold consecutive hashes of that chain. Four facts about
//! vLLM's pool make runs enough to reproduce it exactly:
//!
//! 1. The index holds one block per cached hash (a duplicate stays uncached), and a chain
//!    hash fixes its whole prefix. So a cached hash is either the first of its run, or
//!    its parent is cached at the position before it in the same run. A lookup therefore
//!    probes the index only where it enters a run (at the run's start: entering in the
//!    middle would need the parent cached twice), and compares hashes along the run in
//!    between. The index holds run starts only.
//! 2. A request holds a cached block only through a lookup hit, which takes a prefix of
//!    every run it enters, or as the run's owner, which holds all of it. So a run's
//!    reference counts never increase along the run: its unreferenced blocks are a
//!    suffix `z..len`, where `z` is the longest prefix still held.
//! 3. Requests free their blocks last first, so a release appends the run's newly
//!    unreferenced positions `z'..z` to the free queue highest first, as one *segment*.
//!    A run's segments tile `z..len`, and the queue meets them highest first: eviction
//!    (from the queue's head) shortens the run from its end, a hit (which takes
//!    `0..x`) removes the lowest segments, and a release adds a lower one.
//! 4. Block ids are never observable. An allocated block is uncached until the request
//!    caches its hash; which physical block it was does not matter.
//!
//! So the free queue is a list of segments (a run's positions, or a number of uncached
//! blocks), a request's block table is a list of pieces (a hit prefix, an owned run, or
//! blocks that duplicate someone else's cached hashes) and a count of uncached blocks at
//! its end, and every operation costs O(1) per segment or piece, plus one pass over the
//! hashes it reads or writes. `tests` drive this pool and [`super::BlockPool`] through
//! the same random operations and compare everything observable after each one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::{KvEvent, slot_entry};

const NIL: u32 = u32::MAX;

/// Content hashes are already well mixed: the map uses them as they are.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// Run start hash -> run, with a counting filter in front. Most probes (one per block a
/// request caches, to keep duplicates uncached) are for hashes that start no run, and the
/// filter answers those with one byte read. Only ever searched by key: the map is
/// iterated only to rebuild the filter, whose counts do not depend on the order.
#[derive(Default)]
struct Starts {
    map: HashMap<u64, u32, BuildHasherDefault<PassThrough>>,
    /// Per slot, how many run starts map to it. A counter that reaches 255 stays there,
    /// so it only ever answers "maybe".
    filter: Vec<u8>,
}

impl Starts {
    #[inline]
    fn slot(&self, h: u64) -> usize {
        // The map's buckets use the low bits and its tags the top ones.
        h.rotate_right(32) as usize & (self.filter.len() - 1)
    }

    #[inline]
    fn get(&self, h: &u64) -> Option<&u32> {
        if self.filter.is_empty() || self.filter[self.slot(*h)] == 0 {
            return None;
        }
        self.map.get(h)
    }

    fn insert(&mut self, h: u64, r: u32) {
        if (self.map.len() + 1) * 8 > self.filter.len() {
            // At most one run start in 8 slots.
            self.filter = vec![0; (self.filter.len() * 2).max(1024)];
            let keys: Vec<u64> = self.map.keys().copied().collect();
            keys.into_iter().for_each(|k| self.count(k));
        }
        self.count(h);
        self.map.insert(h, r);
    }

    fn count(&mut self, h: u64) {
        let s = self.slot(h);
        self.filter[s] = self.filter[s].saturating_add(1);
    }

    fn remove(&mut self, h: &u64) {
        if self.map.remove(h).is_some() {
            let s = self.slot(*h);
            if self.filter[s] != u8::MAX {
                self.filter[s] -= 1;
            }
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// One run (see the module docs). Positions are counted from the run's start.
#[derive(Default)]
struct Run {
    /// The cached hashes, in chain order; empty when the run is unused.
    hashes: Vec<u64>,
    /// For each request holding a hit on the run, the prefix it holds.
    hitters: Vec<u32>,
    /// The request that cached the run still holds all of it (and may extend it).
    owned: bool,
    /// When not owned: positions `z..len` are unreferenced, `z` the longest held prefix.
    z: u32,
    /// The run's free-queue segments, highest positions (nearest the queue's head) first.
    segs: VecDeque<u32>,
}

impl Run {
    /// End of the referenced prefix: positions from here on are in the free queue.
    #[inline]
    fn held_end(&self) -> u32 {
        if self.owned { self.hashes.len() as u32 } else { self.z }
    }
}

/// One free-queue segment: positions `lo..hi` of `run`, queued highest first, or
/// `hi - lo` uncached blocks (`run == NIL`).
#[derive(Clone, Copy)]
struct Seg {
    run: u32,
    lo: u32,
    hi: u32,
    prev: u32,
    next: u32,
}

/// One piece of a request's block table, in table order.
#[derive(Clone, Copy, Debug)]
enum Piece {
    /// A lookup hit: positions `0..len` of `run`.
    Hit { run: u32, len: u32 },
    /// A run this request cached and holds whole.
    Own { run: u32 },
    /// `len` uncached blocks whose hashes were already cached at positions `pos..` of
    /// `run` when this request computed them (the holder may have been evicted since).
    Dup { run: u32, pos: u32, len: u32 },
}

/// One request's blocks: its pieces, then `tail` uncached blocks.
#[derive(Default)]
struct Table {
    pieces: Vec<Piece>,
    tail: u32,
    len: u32,
}

/// The block pool of one engine, kept per run.
pub struct RunPool {
    capacity: u32,
    free: u32,
    refs: u64,
    runs: Vec<Run>,
    spare_runs: Vec<u32>,
    segs: Vec<Seg>,
    spare_segs: Vec<u32>,
    /// The free queue's first and last segments.
    head: u32,
    tail: u32,
    index: Starts,
    /// Block tables by request slot.
    tables: Vec<Table>,
    /// The last lookup's hits: `(run, prefix length)` per run entered.
    hits: Vec<(u32, u32)>,
    events: Option<Vec<KvEvent>>,
}

impl RunPool {
    /// A pool of `n` free, empty blocks.
    pub fn new(n: u32) -> RunPool {
        assert!(n > 0 && n < crate::backend::MAX_KV_BLOCKS, "kv_blocks out of range");
        let mut p = RunPool {
            capacity: n,
            free: 0,
            refs: 0,
            runs: Vec::new(),
            spare_runs: Vec::new(),
            segs: Vec::new(),
            spare_segs: Vec::new(),
            head: NIL,
            tail: NIL,
            index: Starts::default(),
            tables: Vec::new(),
            hits: Vec::new(),
            events: None,
        };
        p.push_uncached(n);
        p
    }

    /// Total blocks.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Blocks available to allocate (never used, or cached but unreferenced).
    pub fn num_free(&self) -> u32 {
        self.free
    }

    /// Blocks referenced by at least one request.
    pub fn num_used(&self) -> u32 {
        self.capacity - self.free
    }

    /// Sum of all reference counts.
    pub fn total_refs(&self) -> u64 {
        self.refs
    }

    /// Blocks in request slot `t`'s table.
    pub fn held(&self, t: u32) -> u32 {
        self.tables.get(t as usize).map_or(0, |tb| tb.len)
    }

    fn table_mut(&mut self, t: u32) -> &mut Table {
        slot_entry(&mut self.tables, t)
    }

    /// Looks up the longest cached prefix of `chain`: how many blocks, and how many of
    /// them are unreferenced. [`admit`](Self::admit) takes them.
    pub fn lookup(&mut self, chain: &[u64]) -> (u32, u32) {
        self.hits.clear();
        let mut p = 0;
        let mut unreferenced = 0;
        while p < chain.len() {
            let Some(&r) = self.index.get(&chain[p]) else { break };
            let run = &self.runs[r as usize];
            let m = run.hashes.iter().zip(&chain[p..]).take_while(|(a, b)| a == b).count();
            debug_assert!(m > 0, "a run's start hash is its first");
            unreferenced += (m as u32).saturating_sub(run.held_end());
            self.hits.push((r, m as u32));
            p += m;
        }
        (p as u32, unreferenced)
    }

    /// Forgets the last lookup's hits (a request admitted without looking up).
    pub fn clear_hits(&mut self) {
        self.hits.clear();
    }

    /// Takes references on the last lookup's hits for request slot `t` (whose table must
    /// be empty): the hit blocks that were unreferenced leave the free queue.
    pub fn admit(&mut self, t: u32) {
        let hits = std::mem::take(&mut self.hits);
        let mut tb = std::mem::take(self.table_mut(t));
        debug_assert_eq!(tb.len, 0, "admitting a request that holds blocks");
        for &(r, x) in &hits {
            self.refs += u64::from(x);
            tb.len += x;
            tb.pieces.push(Piece::Hit { run: r, len: x });
            let run = &mut self.runs[r as usize];
            run.hitters.push(x);
            if !run.owned && x > run.z {
                self.dequeue_up_to(r, x);
            }
        }
        self.tables[t as usize] = tb;
        self.hits = hits;
    }

    /// Takes positions `z..x` of unowned run `r` out of the free queue (its lowest
    /// segments), so that `z` becomes `x`.
    fn dequeue_up_to(&mut self, r: u32, x: u32) {
        loop {
            let run = &mut self.runs[r as usize];
            if run.z >= x {
                break;
            }
            let s = *run.segs.back().expect("unreferenced positions without a segment");
            let seg = self.segs[s as usize];
            debug_assert_eq!(seg.lo, run.z, "a run's lowest segment starts at z");
            if seg.hi <= x {
                run.segs.pop_back();
                run.z = seg.hi;
                self.free -= seg.hi - seg.lo;
                self.unlink(s);
            } else {
                run.z = x;
                self.free -= x - seg.lo;
                self.segs[s as usize].lo = x;
            }
        }
    }

    /// Allocates `n` blocks at the end of request slot `t`'s table, from the head of the
    /// free queue (evicting the cached hashes they held, each run from its end).
    pub fn allocate(&mut self, t: u32, n: u32) {
        assert!(
            n <= self.free,
            "allocate on an exhausted pool (callers check num_free first)"
        );
        let tb = self.table_mut(t);
        tb.tail += n;
        tb.len += n;
        self.free -= n;
        self.refs += u64::from(n);
        let mut left = n;
        while left > 0 {
            let s = self.head;
            let seg = self.segs[s as usize];
            let k = left.min(seg.hi - seg.lo);
            left -= k;
            let hi = seg.hi - k;
            self.segs[s as usize].hi = hi;
            if seg.run == NIL {
                if hi == seg.lo {
                    self.unlink(s);
                }
                continue;
            }
            let run = &mut self.runs[seg.run as usize];
            debug_assert_eq!(run.hashes.len() as u32, seg.hi, "eviction starts at the run's end");
            if let Some(ev) = self.events.as_mut() {
                ev.extend(
                    run.hashes[hi as usize..]
                        .iter()
                        .rev()
                        .map(|&hash| KvEvent { stored: false, hash }),
                );
            }
            if hi == 0 {
                self.index.remove(&run.hashes[0]);
            }
            run.hashes.truncate(hi as usize);
            if hi == seg.lo {
                run.segs.pop_front();
                self.unlink(s);
                if hi == 0 {
                    self.drop_run(seg.run);
                }
            }
        }
    }

    /// Registers `hashes[from..to]` as the contents of request slot `t`'s table positions
    /// `from..to` (uncached blocks at the start of its tail; `hashes` is the request's
    /// whole hash chain, of which it may cache more later). A hash already cached
    /// elsewhere leaves its block uncached, as in [`super::BlockPool::cache`].
    pub fn cache(&mut self, t: u32, hashes: &[u64], from: usize, to: usize) {
        if from >= to {
            return;
        }
        let chain = &hashes[..to];
        let mut tb = std::mem::take(self.table_mut(t));
        debug_assert_eq!((tb.len - tb.tail) as usize, from, "caching past the uncached tail");
        debug_assert!(chain.len() - from <= tb.tail as usize);
        // Where the parent of the next hash is cached, if it is.
        let mut parent = if from == 0 {
            None
        } else {
            self.parent_of(&tb, chain, from)
        };
        let mut p = from;
        while p < to {
            // The common case, a run of blocks after the end of the run this request owns:
            // each hash is new unless it starts another run (module docs, fact 1).
            if let (Some(&Piece::Own { run }), Some((r, q))) = (tb.pieces.last(), parent)
                && run == r
                && q as usize + 1 == self.runs[r as usize].hashes.len()
            {
                let start = p;
                let own = &mut self.runs[r as usize].hashes;
                if own.capacity() - own.len() < to - p {
                    // Room for every hash the request may still cache, at once (a prefill
                    // caches hundreds, then decode steps one at a time).
                    own.reserve_exact(hashes.len() - p);
                }
                // Probe the filter for the whole stretch first, then append it at once.
                p += chain[p..to].iter().take_while(|&h| self.index.get(h).is_none()).count();
                own.extend_from_slice(&chain[start..p]);
                if p > start {
                    if let Some(ev) = self.events.as_mut() {
                        ev.extend(chain[start..p].iter().map(|&hash| KvEvent { stored: true, hash }));
                    }
                    tb.tail -= (p - start) as u32;
                    parent = Some((r, own.len() as u32 - 1));
                    continue;
                }
            }
            let h = chain[p];
            let found = parent
                .filter(|&(r, q)| self.runs[r as usize].hashes.get(q as usize + 1) == Some(&h))
                .map(|(r, q)| (r, q + 1))
                .or_else(|| self.index.get(&h).map(|&r| (r, 0)));
            if let Some((r, q)) = found {
                match tb.pieces.last_mut() {
                    Some(Piece::Dup { run, pos, len }) if *run == r && *pos + *len == q => *len += 1,
                    _ => tb.pieces.push(Piece::Dup { run: r, pos: q, len: 1 }),
                }
                parent = Some((r, q));
            } else {
                // A new run: the parent is uncached, or cached by another request (the
                // fast path above extends this request's own run).
                let r = self.new_run();
                tb.pieces.push(Piece::Own { run: r });
                self.index.insert(h, r);
                let run = &mut self.runs[r as usize].hashes;
                run.reserve_exact(hashes.len() - p);
                run.push(h);
                if let Some(ev) = self.events.as_mut() {
                    ev.push(KvEvent { stored: true, hash: h });
                }
                parent = Some((r, 0));
            }
            tb.tail -= 1;
            p += 1;
        }
        self.tables[t as usize] = tb;
    }

    /// True when [`cache`](Self::cache) of `hashes` for request slot `t` would take its
    /// fast path for every hash: `t`'s last piece is a run it owns (so the parent of the
    /// next hash is that run's end) and no hash starts a run (so none is a duplicate;
    /// fact 1 of the module docs). Such caching adds no index entry and only appends to
    /// `t`'s own run, which no eviction touches while `t` holds it.
    pub fn extends_own_run(&self, t: u32, hashes: &[u64]) -> bool {
        self.tables
            .get(t as usize)
            .is_some_and(|tb| matches!(tb.pieces.last(), Some(Piece::Own { .. })))
            && hashes.iter().all(|h| self.index.get(h).is_none())
    }

    /// Where the hash at chain position `p - 1` is cached, from the table's last piece
    /// (which holds or duplicates it).
    fn parent_of(&self, tb: &Table, chain: &[u64], p: usize) -> Option<(u32, u32)> {
        match *tb.pieces.last().expect("a cached prefix without pieces") {
            Piece::Hit { run, len } => Some((run, len - 1)),
            Piece::Own { run } => Some((run, self.runs[run as usize].hashes.len() as u32 - 1)),
            Piece::Dup { run, pos, len } => {
                let q = pos + len - 1;
                if self.runs[run as usize].hashes.get(q as usize) == Some(&chain[p - 1]) {
                    Some((run, q))
                } else {
                    self.locate(chain, p - 1)
                }
            }
        }
    }

    /// Where `chain[i]` is cached, if it is: in the run that starts at the nearest cached
    /// run start at or before `i` (fact 1 of the module docs), or nowhere.
    #[cold]
    fn locate(&self, chain: &[u64], i: usize) -> Option<(u32, u32)> {
        for j in (0..=i).rev() {
            if let Some(&r) = self.index.get(&chain[j]) {
                let q = i - j;
                return (self.runs[r as usize].hashes.get(q) == Some(&chain[i])).then_some((r, q as u32));
            }
        }
        None
    }

    /// Releases every block of request slot `t`'s table, last first.
    pub fn release(&mut self, t: u32) {
        let Some(tb) = self.tables.get_mut(t as usize) else {
            return;
        };
        let mut tb = std::mem::take(tb);
        self.refs -= u64::from(tb.len);
        self.push_uncached(tb.tail);
        for piece in tb.pieces.drain(..).rev() {
            match piece {
                Piece::Dup { len, .. } => self.push_uncached(len),
                Piece::Hit { run, len } => {
                    let hitters = &mut self.runs[run as usize].hitters;
                    let i = hitters.iter().position(|&x| x == len).expect("hit not held");
                    hitters.swap_remove(i);
                    if !self.runs[run as usize].owned {
                        self.requeue(run);
                    }
                }
                Piece::Own { run } => {
                    let r = &mut self.runs[run as usize];
                    r.owned = false;
                    r.z = r.hashes.len() as u32;
                    self.requeue(run);
                }
            }
        }
        tb.tail = 0;
        tb.len = 0;
        self.tables[t as usize] = tb;
    }

    /// Appends the positions of unowned run `r` that are no longer held to the free
    /// queue, highest first, as one segment.
    fn requeue(&mut self, r: u32) {
        let run = &self.runs[r as usize];
        let z = run.hitters.iter().copied().max().unwrap_or(0);
        let old = run.z;
        if z < old {
            let s = self.push_seg(r, z, old);
            let run = &mut self.runs[r as usize];
            run.segs.push_back(s);
            run.z = z;
            self.free += old - z;
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

    /// An empty, owned run (the caller indexes its start).
    fn new_run(&mut self) -> u32 {
        let r = match self.spare_runs.pop() {
            Some(r) => r,
            None => {
                self.runs.push(Run::default());
                (self.runs.len() - 1) as u32
            }
        };
        let run = &mut self.runs[r as usize];
        run.owned = true;
        run.z = 0;
        r
    }

    /// Returns an emptied run to the spares.
    fn drop_run(&mut self, r: u32) {
        let run = &mut self.runs[r as usize];
        debug_assert!(run.hashes.is_empty() && run.hitters.is_empty() && !run.owned && run.segs.is_empty());
        // Keep small buffers for reuse; let long chains go.
        if run.hashes.capacity() > 256 {
            run.hashes = Vec::new();
        }
        self.spare_runs.push(r);
    }

    /// Appends a segment to the free queue's tail (the caller counts its blocks free).
    fn push_seg(&mut self, run: u32, lo: u32, hi: u32) -> u32 {
        let seg = Seg {
            run,
            lo,
            hi,
            prev: self.tail,
            next: NIL,
        };
        let s = match self.spare_segs.pop() {
            Some(s) => {
                self.segs[s as usize] = seg;
                s
            }
            None => {
                self.segs.push(seg);
                (self.segs.len() - 1) as u32
            }
        };
        if self.tail == NIL {
            self.head = s;
        } else {
            self.segs[self.tail as usize].next = s;
        }
        self.tail = s;
        s
    }

    /// Appends `n` uncached blocks to the free queue.
    fn push_uncached(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.free += n;
        if self.tail != NIL && self.segs[self.tail as usize].run == NIL {
            self.segs[self.tail as usize].hi += n;
        } else {
            self.push_seg(NIL, 0, n);
        }
    }

    /// Takes segment `s` out of the free queue.
    fn unlink(&mut self, s: u32) {
        let Seg { prev, next, .. } = self.segs[s as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.segs[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.segs[next as usize].prev = prev;
        }
        self.spare_segs.push(s);
    }

    /// Checks the pool's internal consistency (used by invariant checks and tests).
    /// Cheap enough to run after every event (`--invariants`): flat arrays and one
    /// pass-through hash set, no per-run allocation.
    pub fn check(&self) -> Result<(), String> {
        let q = self.check_free_queue()?;
        let (run_held, run_refs) = self.check_runs(&q)?;
        let (table_held, table_refs) = self.check_tables()?;
        let (held_blocks, refs) = (run_held + table_held, run_refs + table_refs);
        if refs != self.refs {
            return Err(format!(
                "tables hold {refs} references but the pool counts {}",
                self.refs
            ));
        }
        if held_blocks + q.blocks != u64::from(self.capacity) {
            return Err(format!(
                "{held_blocks} held and {} free blocks in a pool of {}",
                q.blocks, self.capacity
            ));
        }
        Ok(())
    }

    /// The free queue: linked both ways, its blocks counted free.
    fn check_free_queue(&self) -> Result<FreeQueue, String> {
        let mut q = FreeQueue {
            blocks: 0,
            place: vec![u32::MAX; self.segs.len()],
            per_run: vec![0u32; self.runs.len()],
        };
        let (mut s, mut prev, mut k) = (self.head, NIL, 0);
        while s != NIL {
            let seg = self.segs[s as usize];
            if seg.prev != prev || seg.hi <= seg.lo || q.place[s as usize] != u32::MAX {
                return Err(format!("free-queue segment {s} is broken ({}..{})", seg.lo, seg.hi));
            }
            q.blocks += u64::from(seg.hi - seg.lo);
            q.place[s as usize] = k;
            k += 1;
            if seg.run != NIL {
                q.per_run[seg.run as usize] += 1;
            }
            prev = s;
            s = seg.next;
        }
        if prev != self.tail {
            return Err("the free queue's tail is not its last segment".into());
        }
        if q.blocks != u64::from(self.free) {
            return Err(format!("free count {} but {} blocks in queue", self.free, q.blocks));
        }
        Ok(q)
    }

    /// The runs: the spare ones unused, each live one indexed by its start, its hashes
    /// cached once, and (unless owned) its free segments tiling `z..len` in queue order.
    /// Returns the blocks held and the references taken by the runs.
    fn check_runs(&self, q: &FreeQueue) -> Result<(u64, u64), String> {
        let mut spare = vec![false; self.runs.len()];
        for &r in &self.spare_runs {
            spare[r as usize] = true;
        }
        let (mut held_blocks, mut refs) = (0u64, 0u64);
        let total: usize = self.runs.iter().map(|r| r.hashes.len()).sum();
        let mut cached: HashSet<u64, BuildHasherDefault<PassThrough>> =
            HashSet::with_capacity_and_hasher(total, BuildHasherDefault::default());
        let mut live = 0;
        for (r, run) in self.runs.iter().enumerate() {
            if spare[r] {
                if !run.hashes.is_empty() || q.per_run[r] != 0 {
                    return Err(format!("spare run {r} is in use"));
                }
                continue;
            }
            live += 1;
            let (held, taken) = self.check_run(r as u32, run, q, &mut cached)?;
            held_blocks += held;
            refs += taken;
        }
        if live != self.index.len() {
            return Err(format!("{live} runs but {} index entries", self.index.len()));
        }
        Ok((held_blocks, refs))
    }

    /// One live run `r`; returns the blocks it holds and the references on it.
    fn check_run(
        &self,
        r: u32,
        run: &Run,
        q: &FreeQueue,
        cached: &mut HashSet<u64, BuildHasherDefault<PassThrough>>,
    ) -> Result<(u64, u64), String> {
        let in_queue = q.per_run[r as usize] as usize;
        let len = run.hashes.len() as u32;
        if len == 0 || self.index.get(&run.hashes[0]) != Some(&r) {
            return Err(format!("run {r} is empty or not indexed by its start"));
        }
        for &h in &run.hashes {
            if !cached.insert(h) {
                return Err(format!("hash {h:#x} cached twice"));
            }
        }
        let top = run.hitters.iter().copied().max().unwrap_or(0);
        if run.hitters.iter().any(|&x| x == 0 || x > len) {
            return Err(format!("run {r} of {len} has a hit prefix out of range"));
        }
        let hits = run.hitters.iter().map(|&x| u64::from(x)).sum::<u64>();
        if run.owned {
            if !run.segs.is_empty() || in_queue != 0 {
                return Err(format!("owned run {r} has free-queue segments"));
            }
            return Ok((u64::from(len), hits + u64::from(len)));
        }
        if run.z != top {
            return Err(format!("run {r}: z {} but the longest held prefix is {top}", run.z));
        }
        // Segments tile z..len, highest first, in queue order, and they are all of the
        // run's segments in the queue.
        let (mut end, mut last) = (len, None);
        for &s in &run.segs {
            let seg = self.segs[s as usize];
            let at = q.place[s as usize];
            if seg.run != r || seg.hi != end || at == u32::MAX || last.is_some_and(|l| l >= at) {
                return Err(format!("run {r}: segment {s} does not continue down from {end}"));
            }
            end = seg.lo;
            last = Some(at);
        }
        if end != run.z || in_queue != run.segs.len() {
            return Err(format!("run {r}: segments do not tile z..len in queue order"));
        }
        Ok((u64::from(run.z), hits))
    }

    /// The tables: their pieces add up to their length. Returns the blocks they hold and
    /// the references they take of their own (duplicates and tails).
    fn check_tables(&self) -> Result<(u64, u64), String> {
        let (mut held_blocks, mut refs) = (0u64, 0u64);
        for tb in &self.tables {
            let mut len = tb.tail;
            for p in &tb.pieces {
                len += match *p {
                    Piece::Hit { len, .. } | Piece::Dup { len, .. } => len,
                    Piece::Own { run } => self.runs[run as usize].hashes.len() as u32,
                };
                if let Piece::Dup { len, .. } = *p {
                    held_blocks += u64::from(len);
                    refs += u64::from(len);
                }
            }
            if len != tb.len {
                return Err(format!("a table of {} blocks has pieces for {len}", tb.len));
            }
            held_blocks += u64::from(tb.tail);
            refs += u64::from(tb.tail);
        }
        Ok((held_blocks, refs))
    }
}

/// What [`RunPool::check`] learns of the free queue.
struct FreeQueue {
    /// Blocks in the queue.
    blocks: u64,
    /// Each queued segment's place in the queue (`u32::MAX`: not queued).
    place: Vec<u32>,
    /// Segments in the queue per run.
    per_run: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::super::BlockPool;
    use super::*;
    use proptest::prelude::*;

    /// A chain hash of `token` after `parent` (any well-mixed function will do).
    fn chain_hash(parent: u64, token: u64) -> u64 {
        let mut z = parent ^ token.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Request `i`'s chain: `shared` blocks of family `family`, then its own.
    fn chain(i: usize, family: u64, shared: usize, len: usize) -> Vec<u64> {
        let mut h = 0;
        (0..len)
            .map(|p| {
                let token = if p < shared {
                    family * 1_000 + p as u64
                } else {
                    1 << 40 | (i as u64) << 20 | p as u64
                };
                h = chain_hash(h, token);
                h
            })
            .collect()
    }

    /// The per-block pool with block tables, driven as the engine drives it.
    struct Reference {
        pool: BlockPool,
        tables: Vec<Vec<u32>>,
        hits: Vec<u32>,
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Look request `i` up (capped at `cap` of its blocks) and, if it fits, admit it
        /// with `extra` newly allocated blocks, caching up to `cached` of its blocks.
        Admit {
            i: usize,
            cap: usize,
            extra: usize,
            cached: usize,
        },
        /// Request `i` allocates `extra` more blocks and caches `more` more.
        Grow { i: usize, extra: usize, more: usize },
        /// Request `i` frees its blocks.
        Release { i: usize },
    }

    fn op(requests: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..requests, 0usize..40, 0usize..12, 0usize..40)
                .prop_map(|(i, cap, extra, cached)| Op::Admit { i, cap, extra, cached }),
            3 => (0..requests, 0usize..4, 0usize..6).prop_map(|(i, extra, more)| Op::Grow { i, extra, more }),
            2 => (0..requests).prop_map(|i| Op::Release { i }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// Random admissions, growth and releases of requests sharing prefixes (four
        /// families; concurrent requests of a family cache duplicates, and a chain's hash
        /// can outlive its parent) give the same lookups, free and used counts, references
        /// and KV events per run as per block, and both pools stay consistent.
        #[test]
        fn run_pool_matches_block_pool(
            shape in proptest::collection::vec((0u64..2, 0usize..30, 1usize..40), 6),
            ops in proptest::collection::vec(op(6), 1..300),
            capacity in 8u32..64,
        ) {
            let chains: Vec<Vec<u64>> =
                shape.iter().enumerate().map(|(i, &(f, shared, len))| chain(i, f, shared, len)).collect();
            let mut reference = Reference { pool: BlockPool::new(capacity), tables: vec![Vec::new(); 6], hits: Vec::new() };
            let mut runs = RunPool::new(capacity);
            reference.pool.enable_events();
            runs.enable_events();
            // Per request: admitted, blocks cached so far.
            let mut admitted = [false; 6];
            let mut cached = [0usize; 6];
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            for op in ops {
                match op {
                    Op::Admit { i, cap, extra, cached: c } if !admitted[i] => {
                        let cap = cap.min(chains[i].len());
                        let want = &chains[i][..cap];
                        let unreferenced = reference.pool.cached_prefix(want, &mut reference.hits);
                        let hit = reference.hits.len();
                        prop_assert_eq!(runs.lookup(want), (hit as u32, unreferenced));
                        let need = extra as u32;
                        if need + unreferenced > reference.pool.num_free() {
                            continue;
                        }
                        for &b in &reference.hits {
                            reference.pool.touch(b);
                        }
                        reference.tables[i].extend_from_slice(&reference.hits);
                        runs.admit(i as u32);
                        reference.pool.allocate_n(need, &mut reference.tables[i]);
                        runs.allocate(i as u32, need);
                        let to = c.clamp(hit, (hit + extra).min(chains[i].len()));
                        reference.pool.cache_range(&reference.tables[i][hit..to], &chains[i][hit..to]);
                        runs.cache(i as u32, &chains[i], hit, to);
                        admitted[i] = true;
                        cached[i] = to;
                    }
                    Op::Grow { i, extra, more } if admitted[i] => {
                        let need = (extra as u32).min(reference.pool.num_free());
                        reference.pool.allocate_n(need, &mut reference.tables[i]);
                        runs.allocate(i as u32, need);
                        let held = reference.tables[i].len();
                        let to = (cached[i] + more).min(held).min(chains[i].len());
                        let from = cached[i];
                        reference.pool.cache_range(&reference.tables[i][from..to], &chains[i][from..to]);
                        runs.cache(i as u32, &chains[i], from, to);
                        cached[i] = to;
                    }
                    Op::Release { i } if admitted[i] => {
                        reference.pool.release_rev(&reference.tables[i]);
                        reference.tables[i].clear();
                        runs.release(i as u32);
                        admitted[i] = false;
                        cached[i] = 0;
                    }
                    _ => continue,
                }
                prop_assert_eq!(runs.num_free(), reference.pool.num_free());
                prop_assert_eq!(runs.total_refs(), reference.pool.total_refs());
                for (i, t) in reference.tables.iter().enumerate() {
                    prop_assert_eq!(runs.held(i as u32), t.len() as u32);
                }
                reference.pool.drain_events(&mut ea);
                runs.drain_events(&mut eb);
                prop_assert_eq!(&ea, &eb);
                reference.pool.check().map_err(TestCaseError::fail)?;
                runs.check().map_err(TestCaseError::fail)?;
                // Every chain prefix is found alike.
                for c in &chains {
                    let unreferenced = reference.pool.cached_prefix(c, &mut reference.hits);
                    prop_assert_eq!(runs.lookup(c), (reference.hits.len() as u32, unreferenced));
                }
                runs.clear_hits();
            }
        }
    }

    #[test]
    fn a_hit_splits_the_free_queue_and_eviction_shortens_runs_from_the_end() {
        let a = chain(0, 1, 8, 8);
        let mut p = RunPool::new(10);
        p.enable_events();
        p.allocate(0, 8);
        p.cache(0, &a, 0, a.len());
        p.release(0);
        assert_eq!(p.num_free(), 10);
        // A hit on the first 3 blocks takes them out of the queue: 2 uncached + 5 cached
        // stay free.
        assert_eq!(p.lookup(&a[..3]), (3, 3));
        p.admit(1);
        assert_eq!(p.num_free(), 7);
        // Allocating 4 takes the 2 never-cached blocks, then evicts a[7] and a[6].
        p.allocate(1, 4);
        let mut ev = Vec::new();
        p.drain_events(&mut ev);
        let removed: Vec<u64> = ev.iter().filter(|e| !e.stored).map(|e| e.hash).collect();
        assert_eq!(removed, vec![a[7], a[6]]);
        assert_eq!(p.lookup(&a), (6, 3));
        p.check().unwrap();
    }
}
