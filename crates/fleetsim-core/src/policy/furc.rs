//! The hash vllm-project/router 0.1.17 places workers and keys with
//! (`src/policies/consistent_hash.rs`, `ConsistentHashPolicy::fbi_hash`, ported from
//! mcrouter's `lib/fbi/hash.c`): FurcHash of the key into 2^23 - 1 buckets, then
//! MurmurHash64A of that bucket's four little-endian bytes, both with seed 4,193,360,111.
//! `consistent_hash` puts 160 virtual nodes per worker URL (`"{url}:{i}"`) on a ring of
//! these values; `sticky_least_loaded` breaks ties by the largest `fbi_hash("{key}:{url}")`.
//! Both hash the worker URL strings, so a model must be given the live URLs.

use std::collections::BTreeMap;

/// mcrouter's seed, used by both hashes.
const SEED: u32 = 4_193_360_111;
/// MurmurHash64A's multiplier.
const M: u64 = 0xc6a4_a793_5bd1_e995;
/// MurmurHash64A's shift.
const R: u32 = 47;
/// Virtual nodes per worker (`VIRTUAL_NODES_PER_WORKER`).
pub const VNODES: u32 = 160;

/// MurmurHash64A of `key` with `seed`.
fn murmur_64a(key: &[u8], seed: u32) -> u64 {
    let mut h = u64::from(seed) ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in chunks.by_ref() {
        let mut k = u64::from_le_bytes(c.try_into().expect("eight bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, b) in rest.iter().enumerate() {
            h ^= u64::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^ (h >> R)
}

/// MurmurHash64A of one `u64` (the rehash that extends FurcHash's bit stream).
fn murmur_rehash_64a(k: u64) -> u64 {
    let mut h = u64::from(SEED) ^ 8u64.wrapping_mul(M);
    let mut k = k.wrapping_mul(M);
    k ^= k >> R;
    k = k.wrapping_mul(M);
    h ^= k;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^ (h >> R)
}

/// FurcHash's bit stream over `key`: bit `idx` of the `idx / 64`-th hash in the chain.
struct Bits<'a> {
    key: &'a [u8],
    cache: Vec<u64>,
}

impl Bits<'_> {
    fn get(&mut self, idx: u32) -> bool {
        let ord = (idx >> 6) as usize;
        while self.cache.len() <= ord {
            let next = match self.cache.last() {
                None => murmur_64a(self.key, SEED),
                Some(&prev) => murmur_rehash_64a(prev),
            };
            self.cache.push(next);
        }
        (self.cache[ord] >> (idx & 0x3f)) & 1 != 0
    }
}

/// FurcHash of `key` into `m` buckets (32 tries, shift 23; 0 when every try fails).
fn furc_hash(key: &str, m: u32) -> u32 {
    const MAX_TRIES: u32 = 32;
    const SHIFT: u32 = 23;
    if m <= 1 {
        return 0;
    }
    let mut bits = Bits {
        key: key.as_bytes(),
        cache: Vec::with_capacity(4),
    };
    let mut d = 0;
    while m > (1u32 << d) {
        d += 1;
    }
    let mut a = d;
    for _ in 0..MAX_TRIES {
        while !bits.get(a) {
            if d == 0 {
                return 0;
            }
            d -= 1;
            a = d;
        }
        a += SHIFT;
        let mut num = 1u32;
        for _ in 0..d.saturating_sub(1) {
            num = (num << 1) | u32::from(bits.get(a));
            a += SHIFT;
        }
        if num < m {
            return num;
        }
    }
    0
}

/// `ConsistentHashPolicy::fbi_hash`: FurcHash into 2^23 - 1 buckets, widened to 64 bits.
pub fn fbi_hash(key: &str) -> u64 {
    let bucket = furc_hash(key, (1u32 << 23) - 1);
    murmur_64a(&bucket.to_le_bytes(), SEED)
}

/// vllm-router's ring: 160 points per worker URL; a key goes to the first point at or after
/// its hash, wrapping to the first. A later URL overwrites a colliding point (the router
/// inserts in its worker order; the model in URL-list order).
#[derive(Clone, Debug, Default)]
pub struct FurcRing {
    points: BTreeMap<u64, usize>,
}

impl FurcRing {
    /// The ring over `urls`; URL `i` is reported as `i`.
    pub fn new<S: AsRef<str>>(urls: &[S]) -> FurcRing {
        let mut points = BTreeMap::new();
        for (i, u) in urls.iter().enumerate() {
            for v in 0..VNODES {
                points.insert(fbi_hash(&format!("{}:{v}", u.as_ref())), i);
            }
        }
        FurcRing { points }
    }

    /// The URL index owning `key`; `None` on an empty ring.
    pub fn get(&self, key: &str) -> Option<usize> {
        let h = fbi_hash(key);
        self.points
            .range(h..)
            .next()
            .or_else(|| self.points.iter().next())
            .map(|(_, &i)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by vllm-router 0.1.17's own `fbi_hash`, `furc_hash` and
    /// `murmur_hash_64a` (the functions of `src/policies/consistent_hash.rs` compiled as
    /// they are in a scratch program).
    #[test]
    fn matches_vllm_router() {
        for (key, want) in GOLDEN {
            assert_eq!(fbi_hash(key), *want, "fbi_hash({key:?})");
        }
    }

    const GOLDEN: &[(&str, u64)] = &[
        ("", 0xc066_3e02_9346_e424),
        ("a", 0x29d1_ab12_ec5f_ea11),
        ("request:", 0x13b2_f1ae_12a8_b5ab),
        ("header:x-session-id:agents-0", 0x3c01_d283_acf2_05e7),
        ("header:x-session-id:chat-1", 0xc42f_0390_5373_48ed),
        ("http://127.0.0.1:8001:0", 0x0667_ebc6_c13d_00c2),
        ("http://127.0.0.1:8001:159", 0xffef_dd7b_e8aa_22e6),
        (":http://127.0.0.1:8001", 0x775f_0ccf_0c46_dda6),
        ("agents-3:http://127.0.0.1:8002", 0x162b_73aa_6950_0e62),
        ("abcdefghijklmnopq", 0x2cb7_5672_ea30_8f08),
    ];

    #[test]
    fn ring_spreads_keys_and_is_stable() {
        let urls = [
            "http://127.0.0.1:8001",
            "http://127.0.0.1:8002",
            "http://127.0.0.1:8003",
        ];
        let ring = FurcRing::new(&urls);
        let mut c = [0u32; 3];
        for i in 0..3000 {
            c[ring.get(&format!("header:x-session-id:s{i}")).unwrap()] += 1;
        }
        assert!(c.iter().all(|&n| n > 600), "{c:?}");
        assert_eq!(ring.get("request:"), ring.get("request:"));
        assert_eq!(FurcRing::new::<&str>(&[]).get("a"), None);
    }
}
