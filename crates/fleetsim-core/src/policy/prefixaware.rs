//! production-stack `PrefixAwareRouter` (main, after PRs #959 and #990), with the
//! below-threshold fallback selectable as proposed in #1089.
//!
//! 1. `(match_len, matched) = hashtrie.longest_prefix_match(prompt, available)`; the length
//!    is in characters, one full chunk (128) per matched node, a matched partial final
//!    chunk included.
//! 2. If `match_len < prefix_min_match_length`: the fallback picks (`_qps_routing`
//!    upstream; least-in-flight within a band with #1089, itself falling back to QPS when
//!    any endpoint lacks engine stats), and **the prompt is inserted into the trie under
//!    that pick** (#990). Candidate fixes of #1073 are further fallbacks: `local_inflight`
//!    (the router's own in-flight counts, fresh) and `scraped_plus_sent` (the scrape plus
//!    this router's dispatches since it); all but `qps` pick within `band` of the
//!    minimum under `tie` (`random` in #1089, `first` = Python `min()` order). This insertion is the latch: every later turn of the session
//!    extends this prompt, matches it, and follows the first pick.
//! 3. Else uniformly at random among the endpoints sharing the longest match; insert.
//!
//! With the default threshold 0 the fallback is unreachable and a new prefix is placed
//! uniformly at random. Load is never consulted on the matched branch.
//!
//! Two further candidate fixes, neither upstream: `sample = d` makes a load-based fallback
//! power-of-d (`d` distinct endpoints drawn uniformly, the least loaded of them within
//! `band`, ties to the first drawn under `tie = "first"`, as SGLang's and AIBrix's
//! power-of-two); `insert = "second_turn"` does not insert a fallback pick at once but
//! remembers the prompt, and inserts when a later request extends that whole prompt (the
//! session's second turn), under that request's own fallback pick, so the latch forms one
//! turn later on a fresher view. A router can do this without session keys: the pending
//! prompts are keyed by a hash of their full chunks. A first prompt whose full chunks are
//! all shared (e.g. only the system prompt) would be mistaken for a later turn's prefix by
//! the next session; the scenarios here have unique first prompts.
//!
//! A third, `follow = true`, keeps the threshold for new prompts only: a below-threshold
//! request that extends the whole of an earlier below-threshold prompt goes to the endpoint
//! that prompt went to (`fallback_follow`) instead of a new fallback pick, so a session stays
//! where its first turn was placed, without session keys (same keying as `second_turn`).

use super::capacity;
use super::hashtrie::HashTrie;
use super::kind::{Doc, Fleet, LogicKey, LogicValue, PolicyKind, RoutingLogic, StackFlags, param};
use super::leastinflight::{pick_in_band, scraped_loads};
use super::leastrequest::{Tie, local_loads};
use super::load_since_scrape::SentSinceScrape;
use super::params::{LEAST_INFLIGHT_TIES, ParamError, count, tie, tie_suffix};
use super::qps::qps_routing;
use super::{Branch, Decision, Fallback, RequestInfo, RouterView, RoutingPolicy};
use crate::content::mix;
use crate::dist::uniform_index;
use crate::ids::BackendId;
use crate::rng::SimRng;
use rand::seq::index::sample;
use rustc_hash::{FxHashMap, FxHashSet};

/// When a below-threshold pick is inserted into the trie.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Insertion {
    /// At once, under the pick (PR #990, upstream main).
    AtPick,
    /// When a later request extends the whole prompt (the session's second turn), under
    /// that request's pick (a candidate fix of #1073).
    SecondTurn,
}

impl Insertion {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            Insertion::AtPick => "at_pick",
            Insertion::SecondTurn => "second_turn",
        }
    }
}

/// The policy state.
pub struct PrefixAware {
    trie: HashTrie,
    picks: Picks,
    /// Keys of the last below-threshold prompt of each session ([`Insertion::SecondTurn`]).
    pending: FxHashSet<u64>,
    /// Scratch: the endpoints of the request being routed.
    available: Vec<BackendId>,
}

/// What picks an endpoint once the trie has matched: the configuration and the state of
/// its fallback.
struct Picks {
    cfg: Config,
    sent: SentSinceScrape,
    /// The last below-threshold prompt of each session and where it went
    /// ([`Config::follow`]).
    followed: FxHashMap<u64, BackendId>,
}

impl PrefixAware {
    /// A router with an empty trie: threshold `min_match_chars`, `fallback` within `band`
    /// (random ties, every endpoint considered, inserted at the pick: PR #1089).
    pub fn new(min_match_chars: u64, fallback: Fallback, band: u32) -> Self {
        PrefixAware::with_config(Config::band(min_match_chars, fallback, band))
    }

    /// A router with every option given.
    pub fn with_config(cfg: Config) -> Self {
        PrefixAware {
            trie: HashTrie::new(),
            picks: Picks {
                cfg,
                sent: SentSinceScrape::default(),
                followed: FxHashMap::default(),
            },
            pending: FxHashSet::default(),
            available: Vec::new(),
        }
    }

    /// The same router told each backend's slots (by backend index).
    pub fn with_slots(mut self, max_num_seqs: Vec<u32>) -> Self {
        self.picks.cfg.max_num_seqs = max_num_seqs;
        self
    }

    /// The same router with tie rule `tie` inside the fallback's band.
    pub fn with_tie(mut self, tie: Tie) -> Self {
        self.picks.cfg.tie = tie;
        self
    }
}

/// Seed of the prefix-key hash chain (`prefix_key`, `take_extended`).
const PREFIX_KEY_SEED: u64 = 0x5EC0_4D70_0000_0000;

/// Key of a prompt's first `n` chunks (the count included, so prefixes of different
/// lengths never collide).
fn prefix_key(chunks: &[u64], n: usize) -> u64 {
    let h = chunks[..n].iter().fold(mix(PREFIX_KEY_SEED, 0), |h, &c| mix(h, c));
    mix(h, n as u64)
}

/// The first (shortest) prefix of `chunks`, shorter than the whole, for which `take` returns
/// something: a remembered earlier prompt, consumed by `take`.
fn take_extended<V>(chunks: &[u64], mut take: impl FnMut(u64) -> Option<V>) -> Option<V> {
    let mut h = mix(PREFIX_KEY_SEED, 0);
    // Incremental `prefix_key` for every n < len: the count is mixed in per length.
    for n in 1..chunks.len() {
        h = mix(h, chunks[n - 1]);
        if let Some(v) = take(mix(h, n as u64)) {
            return Some(v);
        }
    }
    None
}

/// True if some prefix of `chunks`, shorter than the whole, is a pending first prompt; that
/// entry is consumed.
fn extends_pending(pending: &mut FxHashSet<u64>, chunks: &[u64]) -> bool {
    take_extended(chunks, |key| pending.remove(&key).then_some(())).is_some()
}

/// The below-threshold pick: `None` for a load-based fallback that lacks engine stats
/// (then `_qps_routing`, as #1089).
fn fallback_pick(opts: &Config, sent: &mut SentSinceScrape, view: &RouterView, rng: &mut SimRng) -> Option<usize> {
    let max_num_seqs = &opts.max_num_seqs[..];
    let loads = match opts.fallback {
        Fallback::Qps => return Some(qps_routing(view)),
        Fallback::LeastInflight => scraped_loads(view)?,
        Fallback::LocalInflight => local_loads(view),
        Fallback::ScrapedPlusSent => sent.loads(view)?,
        Fallback::LocalSlots => capacity::local_slot_loads(view, max_num_seqs),
        Fallback::Slots => capacity::slot_loads(view, max_num_seqs, sent)?,
        Fallback::KvHeadroom => capacity::kv_headroom_loads(view, sent)?,
    };
    let n = loads.len();
    let d = opts.sample as usize;
    if d == 0 {
        return Some(pick_in_band(&loads, opts.band, opts.tie, rng));
    }
    // Power-of-d: the drawn endpoints in draw order, then the band and tie among them (with
    // d >= n every endpoint is drawn, in random order, so `first` ties are random).
    let drawn: Vec<usize> = sample(rng, n, d.min(n)).into_vec();
    let sub: Vec<u64> = drawn.iter().map(|&i| loads[i]).collect();
    Some(drawn[pick_in_band(&sub, opts.band, opts.tie, rng)])
}

impl RoutingPolicy for PrefixAware {
    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(super::hashtrie::CHUNK_CHARS)
    }

    fn joins_chat_messages(&self) -> bool {
        // `routing_logic.py` @ `a6c01db0` L477-495: `"\n".join(prompt_parts)`.
        true
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let mut available = std::mem::take(&mut self.available);
        available.clear();
        available.extend(view.endpoints.iter().map(|e| e.backend));
        // Only lets the trie walk start from the session's previous path (a speed-up,
        // never a different answer; the router upstream walks from the root).
        let session = req
            .session_key
            .map(|k| std::hash::BuildHasher::hash_one(&rustc_hash::FxBuildHasher, k));
        let picks = &mut self.picks;
        let d = match picks.cfg.insert {
            // Inserted under the pick on both branches (PR #990): the latch.
            Insertion::AtPick => {
                self.trie
                    .match_then_insert(req.prompt_chunks, &available, session, |chunks, matched| {
                        let d = picks.decide(req, view, &available, chunks, matched, rng);
                        (view.endpoints[d.pos].backend, d)
                    })
            }
            Insertion::SecondTurn => {
                let (chunks, matched) = self.trie.longest_prefix_match(req.prompt_chunks, &available, session);
                let d = picks.decide(req, view, &available, chunks, &matched, rng);
                // Below the threshold, a prompt that extends no prompt seen before opens a
                // session: remembered, not inserted. Each later one replaces its
                // predecessor's key, so the set holds one key per open session.
                let full_chunks = full_chunks(req);
                let below = d.branch != Branch::PrefixMatch && full_chunks > 0;
                let later = below && extends_pending(&mut self.pending, req.prompt_chunks);
                if below {
                    self.pending.insert(prefix_key(req.prompt_chunks, full_chunks));
                }
                if !below || later {
                    self.trie
                        .insert(req.prompt_chunks, view.endpoints[d.pos].backend, session);
                }
                d
            }
        };
        if picks.cfg.fallback.records_sent() {
            picks.sent.record(view.endpoints[d.pos].backend.index(), view.now);
        }
        self.available = available;
        d
    }
}

/// The prompt's full chunks (the last, partial one aside).
fn full_chunks(req: &RequestInfo) -> usize {
    (req.prompt_chars / u64::from(req.chunk_chars.max(1))) as usize
}

impl Picks {
    /// The pick once the trie matched `chunks` whole chunks on the endpoints `matched`:
    /// below the threshold the fallback's, else one of the matched endpoints.
    fn decide(
        &mut self,
        req: &RequestInfo,
        view: &RouterView,
        available: &[BackendId],
        chunks: usize,
        matched: &[BackendId],
        rng: &mut SimRng,
    ) -> Decision {
        let match_chars = chunks as u64 * u64::from(req.chunk_chars);
        let (pos, branch) = if match_chars < self.cfg.prefix_min_match_length {
            self.below_threshold(req, view, rng)
        } else {
            self.matched(view, available, matched, rng)
        };
        Decision {
            pos,
            branch,
            match_chars,
        }
    }

    /// Below the threshold: the fallback's pick. With `follow`, a continuation of a
    /// remembered prompt goes where it went (if that endpoint is still available); every
    /// below-threshold prompt is remembered under its pick, replacing the one it continues.
    fn below_threshold(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> (usize, Branch) {
        let follow = self.cfg.follow;
        let earlier = if follow {
            take_extended(req.prompt_chunks, |key| self.followed.remove(&key))
                .and_then(|b| view.endpoints.iter().position(|e| e.backend == b))
        } else {
            None
        };
        let picked = match earlier {
            Some(pos) => (pos, Branch::FallbackFollow),
            None => match fallback_pick(&self.cfg, &mut self.sent, view, rng) {
                Some(pos) if self.cfg.fallback == Fallback::Qps => (pos, Branch::FallbackQps),
                // Every load-based fallback reports as `fallback_leastinflight`.
                Some(pos) => (pos, Branch::FallbackLeastInflight),
                None => (qps_routing(view), Branch::FallbackNoStatsQps),
            },
        };
        let full_chunks = full_chunks(req);
        if follow && full_chunks > 0 {
            self.followed.insert(
                prefix_key(req.prompt_chunks, full_chunks),
                view.endpoints[picked.0].backend,
            );
        }
        picked
    }

    /// At or above the threshold: one of the endpoints sharing the longest match, uniformly
    /// at random. With `replace`, a matched endpoint that is full while another has a free
    /// slot gives way to the fallback's pick (reported as a fallback whose match is above
    /// the threshold).
    fn matched(
        &mut self,
        view: &RouterView,
        available: &[BackendId],
        matched: &[BackendId],
        rng: &mut SimRng,
    ) -> (usize, Branch) {
        let b = matched[uniform_index(rng, matched.len())];
        let pos = available
            .iter()
            .position(|x| *x == b)
            .expect("matched set is a subset of available");
        let moved = (self.cfg.replace && capacity::over_capacity(view, &self.cfg.max_num_seqs, pos))
            .then(|| fallback_pick(&self.cfg, &mut self.sent, view, rng))
            .flatten();
        match moved {
            Some(to) => (to, Branch::FallbackLeastInflight),
            None => (pos, Branch::PrefixMatch),
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy (defaults: upstream main, and PR #1089's band and tie).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default)]
    prefix_min_match_length: i64,
    #[serde(default = "default_fallback")]
    fallback: String,
    #[serde(default = "super::leastinflight::default_band")]
    band: i64,
    #[serde(default = "super::leastinflight::default_tie")]
    tie: String,
    /// Power-of-d sampling for a load-based fallback (0: argmin over all endpoints).
    #[serde(default)]
    sample: i64,
    /// When a below-threshold pick enters the trie: `at_pick` (upstream) or `second_turn`.
    insert: Option<String>,
    /// Below the threshold, a request that extends the whole of an earlier below-threshold
    /// prompt goes to the endpoint that prompt went to, instead of a new fallback pick: a
    /// session continues where it started, without session keys (not upstream; a candidate
    /// fix of production-stack #1073; needs `insert = "at_pick"`).
    #[serde(default)]
    follow: bool,
    /// Above the threshold, move a request whose matched endpoint is full (own in-flight >=
    /// its slots) while another has a free slot (not upstream).
    #[serde(default)]
    replace: bool,
    /// Slots per URL in discovery order (`--static-max-num-seqs`, proposed); default: the
    /// fleet's.
    max_num_seqs: Option<Vec<i64>>,
}

fn default_fallback() -> String {
    Fallback::Qps.as_str().into()
}

/// The validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `--prefix-min-match-length`, in characters (upstream default 0: threshold off).
    pub prefix_min_match_length: u64,
    /// Below-threshold fallback.
    pub fallback: Fallback,
    /// Least-in-flight tie band (+1 in PR #1089); unused with `fallback = "qps"`.
    pub band: u32,
    /// Tie rule within the band (random in PR #1089); unused with `fallback = "qps"`.
    pub tie: Tie,
    /// Endpoints sampled by a load-based fallback (0: all; 2: power-of-two).
    pub sample: u32,
    /// When a fallback pick enters the trie (at once upstream).
    pub insert: Insertion,
    /// A below-threshold request extending a whole earlier below-threshold prompt goes
    /// where that prompt went (not upstream; off by default).
    pub follow: bool,
    /// Re-placement above the threshold (not upstream; off by default).
    pub replace: bool,
    /// Slots per backend index (the fleet's unless given).
    pub max_num_seqs: Vec<u32>,
}

impl Config {
    /// Threshold `min_match_chars`, `fallback` within `band` with PR #1089's random ties,
    /// every endpoint considered, inserted at the pick; no slots given.
    pub fn band(min_match_chars: u64, fallback: Fallback, band: u32) -> Self {
        Config {
            prefix_min_match_length: min_match_chars,
            fallback,
            band,
            tie: Tie::Random,
            sample: 0,
            insert: Insertion::AtPick,
            follow: false,
            replace: false,
            max_num_seqs: Vec::new(),
        }
    }
}

impl PolicyKind for Kind {
    const KIND: &'static str = "prefixaware";
    const DOC: Doc = Doc {
        source: "production-stack PrefixAwareRouter + HashTrie (PR #990); fallback leastinflight = PR #1089",
        decision: "longest trie match (128-character chunks), random among equal matches; below \
                   prefix_min_match_length, the fallback rule (upstream: qps)",
        signals: "router-local trie of 128-char chunks (zero staleness); below the threshold: _qps_routing \
                  (request stats, window 60 s) or scraped engine stats (router.engine_stats_interval_s, 30 s)",
        params: &[
            param(
                "prefix_min_match_length",
                "0",
                "characters of trie match needed to follow the trie",
            ),
            param(
                "fallback",
                "\"qps\"",
                "below the threshold: \"qps\" (upstream), \"leastinflight\" (PR #1089, scraped), \
                 \"local_inflight\" (router's own in-flight, fresh), \"scraped_plus_sent\" (scrape + own dispatches since), \
                 \"local_slots\" / \"slots\" (the same divided by each URL's max_num_seqs) or \"kv_headroom\" (scraped KV usage); \
                 all but qps and leastinflight are not upstream",
            ),
            param("band", "1", "load-based fallbacks: candidates are loads <= min + band"),
            param(
                "tie",
                "\"random\"",
                "load-based fallbacks: \"random\" among candidates (PR #1089) or \"first\" in discovery order",
            ),
            param(
                "sample",
                "0",
                "load-based fallbacks: endpoints drawn per pick (0: all; 2: power-of-two; not upstream)",
            ),
            param(
                "insert",
                "\"at_pick\"",
                "when a fallback pick enters the trie: \"at_pick\" (PR #990) or \"second_turn\" (not upstream)",
            ),
            param(
                "follow",
                "false",
                "true: a below-threshold continuation of a below-threshold prompt goes where it went (not upstream)",
            ),
            param(
                "replace",
                "false",
                "true: above the threshold, a request whose endpoint is full (own in-flight >= slots) moves by the fallback \
                 when another has a free slot; costs that turn's cache hit (not upstream)",
            ),
            param(
                "max_num_seqs",
                "(auto)",
                "slots per URL in discovery order for local_slots / slots / replace, as a proposed \
                 --static-max-num-seqs flag would give them (default: the fleet's)",
            ),
        ],
    };
    const ROUTING_LOGIC: Option<RoutingLogic> = Some(RoutingLogic {
        pr: None,
        keys: &[
            LogicKey {
                key: "prefix_min_match_length",
                flag: Some("--prefix-min-match-length"),
                default: Some((LogicValue::Int(0), "default --prefix-min-match-length 0 (off)")),
                unit: Some("characters"),
            },
            LogicKey {
                key: "fallback",
                flag: None,
                default: Some((LogicValue::Str("qps"), "upstream main (_qps_routing)")),
                unit: None,
            },
        ],
        needs: None,
    });
    type Params = Params;
    type Config = Config;
    fn validate(p: Params, fleet: &Fleet) -> Result<Config, ParamError> {
        let Some(fallback) = Fallback::ALL.into_iter().find(|f| f.as_str() == p.fallback) else {
            return Err(ParamError::new(
                "fallback",
                format!(
                    "unknown fallback `{}`; expected `qps` (upstream), `leastinflight` (PR #1089), `local_inflight`, `scraped_plus_sent`, `local_slots`, `slots` or `kv_headroom`",
                    p.fallback
                ),
            ));
        };
        if p.prefix_min_match_length < 0 {
            return Err(ParamError::new(
                "prefix_min_match_length",
                format!("must be >= 0 characters, got {}", p.prefix_min_match_length),
            ));
        }
        let insert = match p.insert.as_deref() {
            None => Insertion::AtPick,
            Some(v) => [Insertion::AtPick, Insertion::SecondTurn]
                .into_iter()
                .find(|i| i.as_str() == v)
                .ok_or_else(|| {
                    ParamError::new(
                        "insert",
                        format!("unknown insertion `{v}`; expected `at_pick` (PR #990, upstream) or `second_turn`"),
                    )
                })?,
        };
        if p.follow && insert != Insertion::AtPick {
            return Err(ParamError::new(
                "follow",
                "`follow = true` and `insert = \"second_turn\"` both decide the second turn; choose one",
            ));
        }
        Ok(Config {
            prefix_min_match_length: p.prefix_min_match_length as u64,
            fallback,
            band: count(p.band, "band", 0)?,
            tie: tie(&p.tie, "tie", LEAST_INFLIGHT_TIES)?,
            sample: count(p.sample, "sample", 0)?,
            insert,
            follow: p.follow,
            replace: p.replace,
            max_num_seqs: capacity::max_num_seqs_list(p.max_num_seqs, fleet)?,
        })
    }
    fn describe(c: &Config) -> String {
        let sample = match c.sample {
            0 => String::new(),
            d => format!(", sample = {d}"),
        };
        let insert = match c.insert {
            Insertion::AtPick => "",
            Insertion::SecondTurn => ", insert = second_turn",
        };
        let mut insert = if c.follow {
            format!("{insert}, follow = true")
        } else {
            insert.to_string()
        };
        if c.replace {
            insert.push_str(", replace = true");
        }
        let min = c.prefix_min_match_length;
        match c.fallback {
            Fallback::Qps => format!("prefix_min_match_length = {min}, fallback = qps{insert}"),
            f => format!(
                "prefix_min_match_length = {min}, fallback = {}, band = {}{}{sample}{insert}",
                f.as_str(),
                c.band,
                tie_suffix(c.tie)
            ),
        }
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        Box::new(PrefixAware::with_config(c.clone()))
    }
    fn production_stack(c: &Config) -> Option<StackFlags> {
        let mut f = StackFlags {
            reads_request_stats: true,
            ..StackFlags::default()
        };
        if c.sample > 0 || c.insert != Insertion::AtPick || c.follow || c.replace {
            f.notes.push(format!(
                "sample = {}, insert = {}, follow = {}, replace = {}: fleetsim candidate fixes of the sub-threshold fallback (docs/burst8-atlas.md); no upstream flag, this needs a patch",
                c.sample,
                c.insert.as_str(),
                c.follow,
                c.replace
            ));
        }
        if c.fallback.reads_slots() || c.replace {
            f.args.extend(capacity::static_flag(&c.max_num_seqs));
            f.notes.push(capacity::FLAG_NOTE.into());
        }
        f.args.extend([
            "--prefix-min-match-length".into(),
            c.prefix_min_match_length.to_string(),
        ]);
        match c.fallback {
            Fallback::Qps => {}
            Fallback::LeastInflight => {
                f.reads_engine_stats = true;
                f.notes.push(
                    "the least-in-flight fallback is production-stack PR #1089 (no flag: it replaces the QPS fallback)"
                        .into(),
                );
                if c.band != 1 || c.tie != Tie::Random {
                    f.notes.push(format!(
                        "band = {}, tie = {}: PR #1089 picks at random within +1 of the minimum; this needs a patch",
                        c.band,
                        c.tie.as_str()
                    ));
                }
            }
            Fallback::LocalInflight
            | Fallback::ScrapedPlusSent
            | Fallback::LocalSlots
            | Fallback::Slots
            | Fallback::KvHeadroom => {
                f.reads_engine_stats = c.fallback.records_sent();
                f.notes.push(format!(
                    "fallback = {}: a fleetsim candidate fix for the sub-threshold fallback (docs/burst8-atlas.md); no upstream flag, this needs a patch",
                    c.fallback.as_str()
                ));
            }
        }
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn below_threshold_uses_qps_and_latches() {
        // Threshold 3 chunks (384 chars). Backend 1 has fewer dispatches, so QPS picks it;
        // the prompt is inserted, so the next turn (which extends it) follows backend 1 even
        // though backend 1 is now the busy one by every measure.
        let mut p = PrefixAware::new(384, Fallback::Qps, 1);
        let f = ViewFixture::new(2)
            .dispatches(&[Some(10), Some(2)])
            .loads(&[(0, 0), (8, 8)]);
        let mut rng = stream(0, "t", 0);
        let d1 = p.route(&req(None, &[1, 2, 3]), &f.view(), &mut rng);
        assert_eq!((d1.pos, d1.branch, d1.match_chars), (1, Branch::FallbackQps, 0));
        let f2 = ViewFixture::new(2).dispatches(&[Some(0), Some(50)]);
        let d2 = p.route(&req(None, &[1, 2, 3, 4]), &f2.view(), &mut rng);
        assert_eq!((d2.pos, d2.branch, d2.match_chars), (1, Branch::PrefixMatch, 384));
    }

    #[test]
    fn below_threshold_leastinflight_and_nostats() {
        let mut p = PrefixAware::new(10_000, Fallback::LeastInflight, 1);
        let mut rng = stream(0, "t", 0);
        let f = ViewFixture::new(3)
            .loads(&[(4, 4), (1, 0), (4, 0)])
            .dispatches(&[Some(0), Some(9), Some(9)]);
        let d = p.route(&req(None, &[7]), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::FallbackLeastInflight));
        let mut f = f;
        f.engine[2] = None;
        let d = p.route(&req(None, &[8]), &f.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::FallbackNoStatsQps));
    }

    #[test]
    fn threshold_zero_places_new_prefixes_at_random_then_follows() {
        let mut p = PrefixAware::new(0, Fallback::Qps, 1);
        let f = ViewFixture::new(2);
        let mut rng = stream(3, "t", 0);
        let mut first = [0u32; 2];
        for s in 0..2000u64 {
            let d = p.route(&req(None, &[s * 1000]), &f.view(), &mut rng);
            assert_eq!(d.branch, Branch::PrefixMatch);
            first[d.pos] += 1;
            // The same prompt again always follows.
            let again = p.route(&req(None, &[s * 1000, 1]), &f.view(), &mut rng);
            assert_eq!(again.pos, d.pos);
        }
        assert!((first[0] as i64 - 1000).abs() < 120, "{first:?}");
    }

    #[test]
    fn fresh_fallbacks_spread_a_burst_that_one_stale_view_dogpiles() {
        // One scrape, read when both backends were idle; eight new sessions arrive before
        // the next. The stale argmin with first-URL ties sends all eight to backend 0;
        // local in-flight and scrape-plus-sent alternate.
        let mut rng = stream(0, "t", 0);
        let mut stale = PrefixAware::new(100_000, Fallback::LeastInflight, 0).with_tie(Tie::First);
        let mut plus = PrefixAware::new(100_000, Fallback::ScrapedPlusSent, 0).with_tie(Tie::First);
        let mut local = PrefixAware::new(100_000, Fallback::LocalInflight, 0).with_tie(Tie::First);
        let mut in_flight = [0u32; 2];
        let mut picks = (vec![], vec![], vec![]);
        for s in 0..8u64 {
            let f = ViewFixture::new(2)
                .loads(&[(0, 0), (0, 0)])
                .in_flight(&[Some(in_flight[0]), Some(in_flight[1])])
                .at(1.0);
            picks.0.push(stale.route(&req(None, &[s]), &f.view(), &mut rng).pos);
            picks.1.push(plus.route(&req(None, &[s]), &f.view(), &mut rng).pos);
            let d = local.route(&req(None, &[s]), &f.view(), &mut rng);
            assert_eq!(d.branch, Branch::FallbackLeastInflight);
            in_flight[d.pos] += 1;
            picks.2.push(d.pos);
        }
        assert_eq!(picks.0, vec![0; 8]);
        assert_eq!(picks.1, vec![0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(picks.2, vec![0, 1, 0, 1, 0, 1, 0, 1]);
    }

    #[test]
    fn scraped_plus_sent_needs_stats_like_1089() {
        let mut p = PrefixAware::new(100_000, Fallback::ScrapedPlusSent, 1);
        let mut f = ViewFixture::new(2)
            .loads(&[(0, 0), (0, 0)])
            .dispatches(&[Some(4), Some(1)]);
        f.engine[0] = None;
        let d = p.route(&req(None, &[1]), &f.view(), &mut stream(0, "t", 0));
        assert_eq!((d.pos, d.branch), (1, Branch::FallbackNoStatsQps));
    }

    #[test]
    fn power_of_two_fallback_never_picks_the_most_loaded_and_ties_to_the_first_drawn() {
        let f = ViewFixture::new(3).in_flight(&[Some(1), Some(2), Some(9)]);
        let mut p = PrefixAware::with_config(Config {
            sample: 2,
            band: 0,
            tie: Tie::First,
            ..Config::band(100_000, Fallback::LocalInflight, 0)
        });
        let mut rng = stream(5, "t", 0);
        let mut counts = [0u32; 3];
        for s in 0..3000u64 {
            let d = p.route(&req(None, &[s]), &f.view(), &mut rng);
            assert_eq!(d.branch, Branch::FallbackLeastInflight);
            counts[d.pos] += 1;
        }
        // Backend 0 wins both pairs it is in (2/3), backend 1 only {1, 2} (1/3).
        assert_eq!(counts[2], 0, "{counts:?}");
        assert!((counts[0] as i64 - 2000).abs() < 130, "{counts:?}");
        // Equal loads: the first drawn wins, which is uniform over the endpoints.
        let f = ViewFixture::new(2).in_flight(&[Some(3), Some(3)]);
        let mut c = [0u32; 2];
        for s in 0..2000u64 {
            c[p.route(&req(None, &[s + 10_000]), &f.view(), &mut rng).pos] += 1;
        }
        assert!((c[0] as i64 - 1000).abs() < 120, "{c:?}");
    }

    #[test]
    fn second_turn_insertion_latches_on_the_second_pick() {
        // Threshold 8 chunks. Local in-flight, first-URL ties.
        let mut p = PrefixAware::with_config(Config {
            tie: Tie::First,
            insert: Insertion::SecondTurn,
            ..Config::band(8 * 128, Fallback::LocalInflight, 0)
        });
        let mut rng = stream(0, "t", 0);
        let turn1: Vec<u64> = vec![1, 2, 3];
        let turn2: Vec<u64> = vec![1, 2, 3, 4, 5];
        let turn3: Vec<u64> = (1..=9).collect();
        // Turn 1 sees backend 0 idle: picked, not inserted.
        let idle0 = ViewFixture::new(2).in_flight(&[Some(0), Some(5)]);
        let d = p.route(&req(None, &turn1), &idle0.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::FallbackLeastInflight));
        // The same first prompt again matches nothing: it was not inserted.
        let again = p.route(&req(None, &[1, 2, 7]), &idle0.view(), &mut rng);
        assert_eq!(again.match_chars, 0);
        // Turn 2 extends turn 1 and now sees backend 1 idle: picked and inserted there.
        let idle1 = ViewFixture::new(2).in_flight(&[Some(5), Some(0)]);
        let d = p.route(&req(None, &turn2), &idle1.view(), &mut rng);
        assert_eq!((d.pos, d.branch, d.match_chars), (1, Branch::FallbackLeastInflight, 0));
        // Turn 3 matches turn 2's 5 chunks (below 8: still a fallback, here backend 1 again)
        // and, extending a seen prompt, is inserted too; turn 4 then follows the trie.
        let d = p.route(&req(None, &turn3), &idle1.view(), &mut rng);
        assert_eq!((d.pos, d.match_chars), (1, 5 * 128));
        let turn4: Vec<u64> = (1..=12).collect();
        let d = p.route(&req(None, &turn4), &idle0.view(), &mut rng);
        assert_eq!((d.pos, d.branch, d.match_chars), (1, Branch::PrefixMatch, 9 * 128));
    }
}

#[cfg(test)]
mod follow_tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::{SimRng, stream};

    /// Threshold 8 chunks, local in-flight, first-URL ties, `follow` on or off.
    fn router(follow: bool) -> (PrefixAware, SimRng) {
        let cfg = Config {
            tie: Tie::First,
            follow,
            ..Config::band(8 * 128, Fallback::LocalInflight, 0)
        };
        (PrefixAware::with_config(cfg), stream(0, "t", 0))
    }

    #[test]
    fn follow_keeps_a_session_where_its_first_turn_went() {
        let (mut p, mut rng) = router(true);
        let idle0 = ViewFixture::new(2).in_flight(&[Some(0), Some(5)]);
        let idle1 = ViewFixture::new(2).in_flight(&[Some(5), Some(0)]);
        // Session A opens on backend 0 (idle), session B on backend 1.
        let d = p.route(&req(None, &[1, 2, 3]), &idle0.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::FallbackLeastInflight));
        let d = p.route(&req(None, &[7, 8]), &idle1.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::FallbackLeastInflight));
        // A's second turn (below the threshold: 3 chunks matched) follows backend 0 even
        // though backend 1 is now idle; so does its third, which extends the second.
        let d = p.route(&req(None, &[1, 2, 3, 4, 5]), &idle1.view(), &mut rng);
        assert_eq!((d.pos, d.branch, d.match_chars), (0, Branch::FallbackFollow, 3 * 128));
        let d = p.route(&req(None, &[1, 2, 3, 4, 5, 6]), &idle1.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (0, Branch::FallbackFollow));
        // A prompt that extends only part of a remembered one is a new session: fallback.
        let d = p.route(&req(None, &[1, 2, 9]), &idle1.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::FallbackLeastInflight));
        // Without follow the same second turn is re-picked by the fallback.
        let (mut q, _) = router(false);
        q.route(&req(None, &[1, 2, 3]), &idle0.view(), &mut rng);
        let d = q.route(&req(None, &[1, 2, 3, 4, 5]), &idle1.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::FallbackLeastInflight));
    }

    #[test]
    fn follow_falls_back_when_the_earlier_endpoint_is_gone() {
        let (mut p, mut rng) = router(true);
        let three = ViewFixture::new(3).in_flight(&[Some(5), Some(5), Some(0)]);
        let d = p.route(&req(None, &[1, 2, 3]), &three.view(), &mut rng);
        assert_eq!(d.pos, 2);
        // Backend 2 left the view: the next turn takes the fallback among those present.
        let two = ViewFixture::new(2).in_flight(&[Some(4), Some(1)]);
        let d = p.route(&req(None, &[1, 2, 3, 4]), &two.view(), &mut rng);
        assert_eq!((d.pos, d.branch), (1, Branch::FallbackLeastInflight));
    }
}
