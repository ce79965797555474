//! The primitives of the per-request floor, each timed alone: what the model cannot avoid
//! doing for a request, whatever the engine around it.
//!
//! * `block_hash`: one hash per 16-token block (`content::block_hashes`, no memo,
//!   a 16,384-token content in one segment): the engine hashes every block of a request
//!   once, at admission.
//! * `chunk_hash`: one hash per 128-character chunk of the prompt string
//!   (`content::char_chunk_hashes`, 4 characters per token, no memo): the prefix-aware
//!   router's input.
//! * `trie_probe`: the prefix-aware router's trie walk, one child probe per chunk
//!   (`HashTrie::longest_prefix_match` of a 128-chunk prompt in a trie of 4,096 such
//!   prompts sharing 8 system prefixes, no session memo), per chunk walked.
//! * `queue`: one push and one pop of the event queue (`engine::EventQueue`) holding
//!   1,024 pending events, per push-pop pair.
//!
//! Multiplied by how often a run needs each (docs/performance.md, "The floor"), these
//! give the CPU time below which no implementation of the same model can go.
//! Run with `cargo bench --bench floor`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fleetsim::content::{Content, block_hashes, char_chunk_hashes, mix, source_id};
use fleetsim::engine::EventQueue;
use fleetsim::ids::BackendId;
use fleetsim::policy::hashtrie::HashTrie;
use fleetsim::time::SimTime;

const TOKENS: u32 = 16_384;
const BLOCK: u32 = 16;
const CHUNK_CHARS: u32 = 128;
const CHARS_PER_TOKEN: u32 = 4;

fn content() -> Content {
    Content::session_turn(None, source_id("bench", "floor", 0), TOKENS, 0)
}

fn block_hash(c: &mut Criterion) {
    let content = content();
    let n = (TOKENS / BLOCK) as usize;
    let mut out = Vec::with_capacity(n);
    let mut g = c.benchmark_group("floor");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("block_hash", |b| {
        b.iter(|| {
            block_hashes(black_box(&content), BLOCK, n, &mut out);
            black_box(out.last().copied())
        })
    });
    g.finish();
}

fn chunk_hash(c: &mut Criterion) {
    let content = content();
    let mut out = Vec::new();
    char_chunk_hashes(&content, CHARS_PER_TOKEN, CHUNK_CHARS, false, &mut out);
    let n = out.len() as u64;
    let mut g = c.benchmark_group("floor");
    g.throughput(Throughput::Elements(n));
    g.bench_function("chunk_hash", |b| {
        b.iter(|| {
            char_chunk_hashes(black_box(&content), CHARS_PER_TOKEN, CHUNK_CHARS, false, &mut out);
            black_box(out.last().copied())
        })
    });
    g.finish();
}

fn trie_probe(c: &mut Criterion) {
    const CHUNKS: usize = 128;
    let prompt = |i: u64| -> Vec<u64> {
        // 8 shared system prefixes of 16 chunks, then the prompt's own chunks.
        (0..CHUNKS as u64)
            .map(|k| if k < 16 { mix(i % 8, k) } else { mix(1_000 + i, k) })
            .collect()
    };
    let mut trie = HashTrie::new();
    for i in 0..4_096u64 {
        trie.insert(&prompt(i), BackendId((i % 16) as u32), None);
    }
    let available: Vec<BackendId> = (0..16).map(BackendId).collect();
    let probes: Vec<Vec<u64>> = (0..64u64).map(|i| prompt(i * 61 % 4_096)).collect();
    let mut g = c.benchmark_group("floor");
    g.throughput(Throughput::Elements((probes.len() * CHUNKS) as u64));
    g.bench_function("trie_probe", |b| {
        b.iter(|| {
            let mut matched = 0;
            for p in &probes {
                matched += trie.longest_prefix_match(black_box(p), &available, None).0;
            }
            assert_eq!(matched, probes.len() * CHUNKS);
            black_box(matched)
        })
    });
    g.finish();
}

fn queue(c: &mut Criterion) {
    const PENDING: u64 = 1_024;
    const PAIRS: u64 = 4_096;
    let mut q: EventQueue<u64> = EventQueue::new();
    let mut t = 0u64;
    for i in 0..PENDING {
        q.push(SimTime(mix(7, i) % 1_000_000), i);
    }
    let mut g = c.benchmark_group("floor");
    g.throughput(Throughput::Elements(PAIRS));
    g.bench_function("queue", |b| {
        b.iter(|| {
            for i in 0..PAIRS {
                let (now, e) = q.pop().expect("pending events");
                t = now.0;
                q.push(SimTime(t + 1 + mix(e, i) % 1_000_000), e);
            }
            black_box(t)
        })
    });
    g.finish();
}

criterion_group!(benches, block_hash, chunk_hash, trie_probe, queue);
criterion_main!(benches);
