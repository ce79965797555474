//! Cost per KV block of the engine's KV cache, per block (`BlockPool`, the reference
//! mode) and per run (`RunPool`, the fast mode). The per-block pool was the largest share
//! of the replays' run time (about 70 % of a Mooncake replay, a third of bench-10k).
//! Whole-process timings on a shared machine move by 15 % between runs; this bench times
//! the cache alone, so a change to it can be judged at a few percent.
//!
//! Two loads on one cache of the Mooncake replay's size (29,205 blocks), each a fixed,
//! seeded sequence of the calls an engine makes, through `KvCache` as the engine makes
//! them:
//!
//! * `prefill`: requests of 460 to 1,260 blocks (the replay's mean is about 860), 12 in
//!   flight. Each looks up its cached prefix (again after each release that makes room),
//!   takes the hits, allocates and caches the rest in one call, and releases everything,
//!   last block first, when it leaves. One request in 4 shares one of 4 family prefixes
//!   (up to 800 blocks), so about a tenth of blocks hit, as on the replay (the bench
//!   prints the share).
//! * `decode`: 64 requests grow one block at a time, round robin, with the calls
//!   `VllmEngine::grow` makes (a decode step allocates and caches one block per request
//!   every 16 tokens), and a request of 40 blocks leaves and is replaced.
//!
//! Throughput is blocks allocated per second. Run with `cargo bench --bench block_pool`.
//! To compare two versions, build each (`--no-run`), copy its binary and run the two
//! alternately (`--bench --warm-up-time 1 --measurement-time 3`), taking medians: saved
//! baselines compare runs minutes apart, and this shared machine drifts more than that.

use std::collections::VecDeque;
use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fleetsim::backend::kv::KvCache;
use fleetsim::content::mix;
use fleetsim::ids::RequestId;

/// Blocks per engine in `scenarios/bench/trace-mooncake-1m.toml`.
const KV_BLOCKS: u32 = 29_205;

/// One request's block-hash chain: its family's shared prefix, then its own blocks.
fn chain(i: u64) -> Vec<u64> {
    let r = mix(0xB10C, i);
    let len = 460 + (r % 800) as usize;
    let (family, shared) = if r >> 62 == 0 {
        (r >> 8 & 3, ((r >> 16) % 800) as usize)
    } else {
        (0, 0)
    };
    let mut out = Vec::with_capacity(len);
    let mut h = 0x5851_F42D_4C95_7F2D;
    for k in 0..len as u64 {
        h = if (k as usize) < shared {
            mix(h, family)
        } else {
            mix(h, i << 20 | k)
        };
        out.push(h);
    }
    out
}

/// Engine-shaped prefill traffic on one cache.
struct Prefill {
    kv: KvCache,
    /// Request slots in admission order.
    running: VecDeque<u32>,
    spare: Vec<u32>,
    next_id: u32,
}

impl Prefill {
    fn new(runs: bool) -> Prefill {
        let mut p = Prefill {
            kv: KvCache::new(KV_BLOCKS, runs),
            running: VecDeque::new(),
            spare: (0..16).rev().collect(),
            next_id: 0,
        };
        // Fill the cache with cached blocks, as in steady state.
        p.run(&(0..60).map(chain).collect::<Vec<_>>());
        p
    }

    /// Admits each chain in turn; returns the blocks allocated and the blocks hit.
    fn run(&mut self, chains: &[Vec<u64>]) -> (u64, u64) {
        let (mut allocated, mut hit) = (0, 0);
        for c in chains {
            let id = RequestId(self.next_id);
            self.next_id += 1;
            let (h, need) = loop {
                let (h, evictable) = self.kv.lookup(id, c);
                let need = c.len() as u32 - h;
                if need + evictable <= self.kv.num_free() && self.running.len() < 12 {
                    break (h, need);
                }
                let old = self.running.pop_front().expect("a request that fits alone");
                self.kv.release(old);
                self.spare.push(old);
            };
            let t = self.spare.pop().expect("at most 12 running");
            self.kv.admit(t);
            self.kv.allocate(t, need);
            self.kv.cache(t, c, h as usize, c.len());
            allocated += u64::from(need);
            hit += u64::from(h);
            self.running.push_back(t);
        }
        (allocated, hit)
    }
}

/// Decode traffic: 64 requests growing a block at a time, with the calls
/// `VllmEngine::grow` makes: allocate one block onto the request's table, cache it.
struct Decode {
    kv: KvCache,
    running: Vec<Growing>,
    next: u64,
}

/// One decoding request: its slot and its 40 block hashes.
struct Growing {
    slot: u32,
    hashes: Vec<u64>,
    held: usize,
}

impl Growing {
    fn new(slot: u32, id: u64) -> Growing {
        let mut h = mix(0x5EED, id);
        let hashes = (0..40)
            .map(|_| {
                h = mix(h, id);
                h
            })
            .collect();
        Growing { slot, hashes, held: 0 }
    }
}

impl Decode {
    fn new(runs: bool) -> Decode {
        let mut d = Decode {
            kv: KvCache::new(KV_BLOCKS, runs),
            running: (0..64).map(|i| Growing::new(i as u32, i)).collect(),
            next: 64,
        };
        d.run(4 * KV_BLOCKS as u64);
        d
    }

    /// Allocates and caches `blocks` blocks, round robin over the running requests.
    fn run(&mut self, blocks: u64) {
        for k in 0..blocks {
            let r = &mut self.running[(k % 64) as usize];
            if r.held == 40 {
                self.kv.release(r.slot);
                *r = Growing::new(r.slot, self.next);
                self.next += 1;
            }
            self.kv.allocate(r.slot, 1);
            r.held += 1;
            self.kv.cache(r.slot, &r.hashes, r.held - 1, r.held);
        }
    }
}

fn block_pool(c: &mut Criterion) {
    let mut g = c.benchmark_group("block_pool");
    g.sample_size(20);

    let chains: Vec<Vec<u64>> = (1_000..1_100).map(chain).collect();
    for (name, runs) in [("blocks", false), ("runs", true)] {
        let (blocks, hit) = Prefill::new(runs).run(&chains);
        eprintln!(
            "prefill ({name}): {} requests, {blocks} blocks allocated, {:.1} % of looked-up blocks hit",
            chains.len(),
            100.0 * hit as f64 / (blocks + hit) as f64
        );
        g.throughput(Throughput::Elements(blocks));
        g.bench_function(format!("prefill/{name}"), |b| {
            b.iter_batched(
                || Prefill::new(runs),
                |mut p| black_box(p.run(&chains)),
                BatchSize::LargeInput,
            )
        });
    }

    const DECODE_BLOCKS: u64 = 100_000;
    g.throughput(Throughput::Elements(DECODE_BLOCKS));
    for (name, runs) in [("blocks", false), ("runs", true)] {
        g.bench_function(format!("decode/{name}"), |b| {
            b.iter_batched(
                || Decode::new(runs),
                |mut d| d.run(DECODE_BLOCKS),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, block_pool);
criterion_main!(benches);
