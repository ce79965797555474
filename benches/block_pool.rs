//! Cost per KV block of the block pool, the largest share of the replays' run time
//! (about 70 % of a Mooncake replay, a third of bench-10k). Whole-process timings on a
//! shared machine move by 15 % between runs; this bench times the pool alone, so a change
//! to it can be judged at a few percent.
//!
//! Two loads on one pool of the Mooncake replay's size (29,205 blocks), each a fixed,
//! seeded sequence of the calls an engine makes:
//!
//! * `prefill`: requests of 460 to 1,260 blocks (the replay's mean is about 860), 12 in
//!   flight. Each looks up its cached prefix, takes the hits, allocates and caches the
//!   rest in one call, and releases everything, last block first, when it leaves. One
//!   request in 4 shares one of 4 family prefixes (up to 800 blocks), so about a tenth of
//!   blocks hit, as on the replay (the bench prints the share).
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
use fleetsim::backend::kv::BlockPool;
use fleetsim::content::mix;

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

/// Engine-shaped prefill traffic on one pool.
struct Prefill {
    pool: BlockPool,
    running: VecDeque<Vec<u32>>,
    hits: Vec<u32>,
}

impl Prefill {
    fn new() -> Prefill {
        let mut p = Prefill {
            pool: BlockPool::new(KV_BLOCKS),
            running: VecDeque::new(),
            hits: Vec::new(),
        };
        // Fill the pool with cached blocks, as in steady state.
        p.run(&(0..60).map(chain).collect::<Vec<_>>());
        p
    }

    /// Admits each chain in turn; returns the blocks allocated and the blocks hit.
    fn run(&mut self, chains: &[Vec<u64>]) -> (u64, u64) {
        let (mut allocated, mut hit) = (0, 0);
        for c in chains {
            let evictable = self.pool.cached_prefix(c, &mut self.hits);
            let need = (c.len() - self.hits.len()) as u32;
            while need + evictable > self.pool.num_free() || self.running.len() >= 12 {
                let old = self.running.pop_front().expect("a request that fits alone");
                self.pool.release_rev(&old);
            }
            for &b in &self.hits {
                self.pool.touch(b);
            }
            let mut blocks = self.hits.clone();
            let h = blocks.len();
            self.pool.allocate_n(need, &mut blocks);
            self.pool.cache_range(&blocks[h..], &c[h..]);
            allocated += u64::from(need);
            hit += h as u64;
            self.running.push_back(blocks);
        }
        (allocated, hit)
    }
}

/// Decode traffic: 64 requests growing a block at a time, with the calls
/// `VllmEngine::grow` makes: allocate onto the request's block list, cache the block, then
/// prefetch the index slot of the request's next block.
struct Decode {
    pool: BlockPool,
    running: Vec<Growing>,
    next: u64,
}

/// One decoding request: its id, the hash its next block will have, its blocks.
struct Growing {
    id: u64,
    next_hash: u64,
    blocks: Vec<u32>,
}

impl Growing {
    fn new(id: u64) -> Growing {
        Growing {
            id,
            next_hash: mix(0x5EED, id),
            blocks: Vec::new(),
        }
    }
}

impl Decode {
    fn new() -> Decode {
        let mut d = Decode {
            pool: BlockPool::new(KV_BLOCKS),
            running: (0..64).map(Growing::new).collect(),
            next: 64,
        };
        d.run(4 * KV_BLOCKS as u64);
        d
    }

    /// Allocates and caches `blocks` blocks, round robin over the running requests.
    fn run(&mut self, blocks: u64) {
        for k in 0..blocks {
            let r = &mut self.running[(k % 64) as usize];
            if r.blocks.len() == 40 {
                self.pool.release_rev(&r.blocks);
                *r = Growing::new(self.next);
                self.next += 1;
            }
            self.pool.allocate_n(1, &mut r.blocks);
            let last = r.blocks.len() - 1;
            self.pool.cache_range(&r.blocks[last..], &[r.next_hash]);
            r.next_hash = mix(r.next_hash, r.id);
            self.pool.prefetch_content(r.next_hash);
        }
    }
}

fn block_pool(c: &mut Criterion) {
    let mut g = c.benchmark_group("block_pool");
    g.sample_size(20);

    let chains: Vec<Vec<u64>> = (1_000..1_100).map(chain).collect();
    let (blocks, hit) = Prefill::new().run(&chains);
    eprintln!(
        "prefill: {} requests, {blocks} blocks allocated, {:.1} % of looked-up blocks hit",
        chains.len(),
        100.0 * hit as f64 / (blocks + hit) as f64
    );
    g.throughput(Throughput::Elements(blocks));
    g.bench_function("prefill", |b| {
        b.iter_batched(Prefill::new, |mut p| black_box(p.run(&chains)), BatchSize::LargeInput)
    });

    const DECODE_BLOCKS: u64 = 100_000;
    g.throughput(Throughput::Elements(DECODE_BLOCKS));
    g.bench_function("decode", |b| {
        b.iter_batched(Decode::new, |mut d| d.run(DECODE_BLOCKS), BatchSize::LargeInput)
    });
    g.finish();
}

criterion_group!(benches, block_pool);
criterion_main!(benches);
