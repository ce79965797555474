//! smg 1.13.0 `--policy prefix_hash` (`model_gateway/src/policies/prefix_hash.rs`,
//! `model_gateway/src/worker/hash_ring.rs`): the first 256 x 4 = 1,024 characters of the
//! routing text (a chat request's message contents joined by single spaces) hashed with
//! xxh3, its hex string placed on a ring of 150 virtual nodes per worker URL (blake3 of
//! `"{url}#{v}"`, the first 8 bytes little-endian), walking forward to the first eligible
//! worker. That owner is kept while its in-flight count is at most
//! `max(1.25 avg, avg + 10)` with `avg = (sum of in-flight + 1) / workers`; otherwise the
//! least in-flight worker under that bound (the first in list order), else the owner anyway.
//! Eligible: not vetoed by smg's load monitor (8 or more waiting, or KV usage at least 0.8, at
//! its last `/metrics` poll every 10 s); when every worker is vetoed smg's placement takes
//! the least in-flight worker. An empty text takes the least in-flight worker.
//!
//! The ring is exact given the live URLs. The key is the content model's hash of the same
//! 1,024 characters, not xxh3 of the text: requests sharing that prefix share an owner, as
//! in smg, but which worker owns which prefix is the model's draw on the same ring.

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::leastrequest::local_loads;
use super::params::{ParamError, count, weight};
use super::powerofd::smg_vetoed;
use super::{Branch, Decision, EndpointInfo, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;

/// Virtual nodes per worker URL (`VIRTUAL_NODES_PER_WORKER`).
pub const VNODES: u32 = 150;
/// smg's characters per token for untokenized text (`CHARS_PER_TOKEN`): fixed, whatever
/// the fleet's tokenizer.
const CHARS_PER_TOKEN: u32 = 4;

/// blake3 of `s`, its first 8 bytes read little-endian (`HashRing::hash_position`).
fn position(s: &str) -> u64 {
    let h = blake3::hash(s.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("blake3 gives 32 bytes"))
}

/// smg's ring over worker URLs.
#[derive(Clone, Debug, Default)]
pub struct BlakeRing {
    /// Sorted (position, URL index).
    entries: Vec<(u64, usize)>,
}

impl BlakeRing {
    /// The ring over `urls`; URL `i` is reported as `i`.
    pub fn new<S: AsRef<str>>(urls: &[S]) -> BlakeRing {
        let mut entries: Vec<(u64, usize)> = urls
            .iter()
            .enumerate()
            .flat_map(|(i, u)| (0..VNODES).map(move |v| (position(&format!("{}#{v}", u.as_ref())), i)))
            .collect();
        entries.sort_unstable();
        BlakeRing { entries }
    }

    /// The first URL at or after `key`'s position (wrapping) that `ok` accepts.
    pub fn find(&self, key: &str, ok: impl Fn(usize) -> bool) -> Option<usize> {
        let at = position(key);
        let start = self.entries.partition_point(|(p, _)| *p < at);
        let n = self.entries.len();
        (0..n).map(|i| self.entries[(start + i) % n].1).find(|&u| ok(u))
    }
}

/// The validated configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// `--prefix-token-count`.
    pub prefix_token_count: u32,
    /// `--prefix-hash-load-factor`.
    pub load_factor: f64,
    /// `--prefix-hash-balance-abs-threshold`.
    pub balance_abs_threshold: u32,
}

/// The policy state: the ring, rebuilt when the endpoint set changes.
pub struct PrefixHash {
    cfg: Config,
    ring: Option<(Vec<EndpointInfo>, BlakeRing)>,
}

impl PrefixHash {
    /// The characters hashed.
    fn key_chars(&self) -> u32 {
        self.cfg.prefix_token_count.saturating_mul(CHARS_PER_TOKEN).max(1)
    }

    /// `load_ok`: within `max(avg * factor, avg + abs)` of `avg = (total + 1) / n`.
    fn load_ok(&self, load: u64, total: u64, n: usize) -> bool {
        if total == 0 || n == 0 {
            return true;
        }
        let avg = (total + 1) as f64 / n as f64;
        let limit = (avg * self.cfg.load_factor).max(avg + f64::from(self.cfg.balance_abs_threshold));
        load as f64 <= limit
    }
}

/// Not vetoed by smg's overload guard at the last poll (no poll: not vetoed).
fn eligible(view: &RouterView, i: usize) -> bool {
    view.engine_stats[i].is_none_or(|e| !smg_vetoed(&e))
}

/// The first least-loaded index of `among`.
fn first_least(loads: &[u64], among: impl Iterator<Item = usize>) -> Option<usize> {
    among.min_by_key(|&i| loads[i])
}

impl RoutingPolicy for PrefixHash {
    fn route(&mut self, req: &RequestInfo, view: &RouterView, _rng: &mut SimRng) -> Decision {
        let n = view.endpoints.len();
        let loads = local_loads(view);
        let ok: Vec<usize> = (0..n).filter(|&i| eligible(view, i)).collect();
        let decision = |pos, branch| Decision {
            pos,
            branch,
            match_chars: 0,
        };
        let (Some(&key), false) = (req.prompt_chunks.first(), ok.is_empty()) else {
            let pick = first_least(&loads, if ok.is_empty() { (0..n).collect() } else { ok }.into_iter());
            return decision(pick.expect("non-empty endpoint list"), Branch::LeastRequest);
        };
        if self
            .ring
            .as_ref()
            .is_none_or(|(eps, _)| eps.as_slice() != view.endpoints)
        {
            let urls: Vec<&str> = view.endpoints.iter().map(|e| e.url.as_str()).collect();
            self.ring = Some((view.endpoints.to_vec(), BlakeRing::new(&urls)));
        }
        let ring = &self.ring.as_ref().expect("built above").1;
        let owner = ring
            .find(&format!("{key:016x}"), |i| eligible(view, i))
            .expect("an eligible endpoint");
        let total: u64 = ok.iter().map(|&i| loads[i]).sum();
        if self.load_ok(loads[owner], total, ok.len()) {
            let chars = req.prompt_chars.min(u64::from(self.key_chars()));
            return Decision {
                pos: owner,
                branch: Branch::PrefixMatch,
                match_chars: chars,
            };
        }
        let spill = first_least(
            &loads,
            ok.iter().copied().filter(|&i| self.load_ok(loads[i], total, ok.len())),
        );
        decision(spill.unwrap_or(owner), Branch::CacheAwareSpill)
    }

    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(self.key_chars())
    }

    fn joins_chat_messages(&self) -> bool {
        true
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default = "default_prefix_token_count")]
    prefix_token_count: i64,
    #[serde(default = "default_load_factor")]
    load_factor: f64,
    #[serde(default = "default_balance_abs_threshold")]
    balance_abs_threshold: i64,
}

fn default_prefix_token_count() -> i64 {
    256
}
fn default_load_factor() -> f64 {
    1.25
}
fn default_balance_abs_threshold() -> i64 {
    10
}

impl PolicyKind for Kind {
    const KIND: &'static str = "prefix_hash";
    const DOC: Doc = Doc {
        source: "smg 1.13.0 prefix_hash (model_gateway/src/policies/prefix_hash.rs, worker/hash_ring.rs)",
        decision: "the first prefix_token_count x 4 characters on a blake3 ring of worker URLs (150 virtual nodes), kept while in-flight <= max(load_factor avg, avg + balance_abs_threshold), else the least in-flight",
        signals: "the prompt's first characters; router-local in-flight; smg's overload veto on the /metrics poll (router.engine_stats_interval_s, 10 s); the worker URLs (backends.urls: give the live ones)",
        params: &[
            param(
                "prefix_token_count",
                "256",
                "tokens hashed, 4 characters each (--prefix-token-count)",
            ),
            param("load_factor", "1.25", "relative load bound (--prefix-hash-load-factor)"),
            param(
                "balance_abs_threshold",
                "10",
                "absolute load bound over the mean (--prefix-hash-balance-abs-threshold)",
            ),
        ],
    };
    const ENGINE_STATS_INTERVAL_S: f64 = 10.0;
    const POLLS_ENDPOINTS_CONCURRENTLY: bool = true;
    type Params = Params;
    type Config = Config;
    fn validate(p: Params, _: &Fleet) -> Result<Config, ParamError> {
        Ok(Config {
            prefix_token_count: count(p.prefix_token_count, "prefix_token_count", 1)?,
            load_factor: weight(p.load_factor, "load_factor")?,
            balance_abs_threshold: count(p.balance_abs_threshold, "balance_abs_threshold", 0)?,
        })
    }
    fn describe(c: &Config) -> String {
        format!(
            "prefix_token_count = {}, load_factor = {}, balance_abs_threshold = {}",
            c.prefix_token_count, c.load_factor, c.balance_abs_threshold
        )
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        Box::new(PrefixHash { cfg: *c, ring: None })
    }
    fn upstream(_c: &Config, _set: &[&str]) -> Option<Upstream> {
        Upstream::new("smg 1.13.0", "--policy prefix_hash")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req_chars};
    use crate::rng::stream;

    fn policy() -> PrefixHash {
        PrefixHash {
            cfg: Config {
                prefix_token_count: 256,
                load_factor: 1.25,
                balance_abs_threshold: 10,
            },
            ring: None,
        }
    }

    /// blake3 reference vector: the empty input's digest begins af1349b9f5f9a1a6.
    #[test]
    fn position_is_blake3_le() {
        assert_eq!(
            position(""),
            u64::from_le_bytes([0xaf, 0x13, 0x49, 0xb9, 0xf5, 0xf9, 0xa1, 0xa6])
        );
    }

    #[test]
    fn one_prefix_one_owner_until_the_bound_then_the_least_loaded() {
        let f = ViewFixture::new(4);
        let mut p = policy();
        let mut rng = stream(0, "t", 0);
        let d = p.route(&req_chars(&[42], 1024, 4000), &f.view(), &mut rng);
        assert_eq!((d.branch, d.match_chars), (Branch::PrefixMatch, 1024));
        let owner = d.pos;
        // The owner at 13 in flight of 13: avg (13 + 1) / 4 = 3.5, bound 13.5: kept.
        let mut c = [Some(0); 4];
        c[owner] = Some(13);
        let f13 = ViewFixture::new(4).in_flight(&c);
        assert_eq!(p.route(&req_chars(&[42], 1024, 4000), &f13.view(), &mut rng).pos, owner);
        // At 14 of 14 (bound 13.75) it spills to the first least loaded.
        c[owner] = Some(14);
        let f14 = ViewFixture::new(4).in_flight(&c);
        let d = p.route(&req_chars(&[42], 1024, 4000), &f14.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (usize::from(owner == 0), Branch::CacheAwareSpill));
    }

    #[test]
    fn a_vetoed_owner_passes_to_the_next_on_the_ring_and_no_text_is_least_loaded() {
        let mut p = policy();
        let mut rng = stream(0, "t", 0);
        let f = ViewFixture::new(4).loads(&[(0, 0); 4]);
        let owner = p.route(&req_chars(&[7], 1024, 4000), &f.view(), &mut rng).pos;
        let mut l = [(0, 0); 4];
        l[owner] = (8, 8);
        let vetoed = ViewFixture::new(4).loads(&l);
        let d = p.route(&req_chars(&[7], 1024, 4000), &vetoed.view(), &mut rng);
        assert_ne!(d.pos, owner);
        let busy = ViewFixture::new(4).in_flight(&[Some(3), Some(1), Some(1), Some(2)]);
        let d = p.route(&req_chars(&[], 1024, 0), &busy.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::LeastRequest));
    }
}
