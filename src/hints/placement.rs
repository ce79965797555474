//! Which mechanism put a run's requests where they are: read from the decision audit (each
//! session's first placement, the branch that made it and the prefix it matched, and the
//! later turns that followed it), so a concentration hint or `sim explain` can name the
//! cause and the key that changes it instead of only the skew.
//!
//! The mechanisms, tried in this order on the busiest backend:
//!
//! * **trie monopoly**: most of its new sessions were placed by a prefix match on a prefix
//!   other sessions had put in the trie (a shared system prompt). At production-stack's
//!   default `prefix_min_match_length = 0` any match at all follows the trie, so the
//!   backend that cached the shared prompt first receives every later session;
//! * **QPS latch**: most of its new sessions were placed by `_qps_routing` (a window of
//!   dispatch counts, not load) and their later turns followed by prefix match: each
//!   first pick is latched for the session's life;
//! * **long-session affinity**: new sessions were spread evenly, but a few sessions with
//!   many more turns stayed on their backend through an affinity branch.
//!
//! A mechanism that depends on what a request asks for (a model only some backends serve)
//! is one more detector in [`Placements::mechanism`]'s list.
//!
//! Owns: the placement record and the mechanism rules. May not see: the simulation.

use serde::Serialize;
use std::collections::HashMap;

use crate::decision::Branch;
use crate::metrics::{DecisionRow, Summary};

/// A session's first placement and what followed it.
#[derive(Clone, Copy, Debug)]
struct Session {
    /// Where its first turn went.
    first: u32,
    /// How the first turn was placed.
    how: Placed,
    /// Characters of prefix the first turn matched.
    match_chars: u64,
    /// Turns routed (the first included).
    turns: u32,
    /// Later turns sent to the first turn's backend by an affinity branch.
    followed: u32,
    /// Where its latest turn went.
    last: u32,
}

/// How a session's first turn was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placed {
    /// An affinity branch matched a prefix already in the router's tree or cache.
    Prefix,
    /// `_qps_routing`: dispatch counts in a window.
    Qps,
    /// Anything else (load, score, hash, round robin, random).
    Other,
}

/// Whether `b` keeps a request where its prefix or session went (whatever the load).
fn affinity(b: Branch) -> bool {
    matches!(
        b,
        Branch::PrefixMatch
            | Branch::FallbackFollow
            | Branch::SessionHash
            | Branch::CacheAwareHit
            | Branch::AibrixPrefixHit
            | Branch::AibrixPrebleHit
            | Branch::AibrixPrebleGatedHit
            | Branch::KvHit
            | Branch::KvFallbackSession
    )
}

/// How a first turn taken on branch `b` with `match_chars` of prefix was placed.
fn placed(b: Branch, match_chars: u64) -> Placed {
    match b {
        Branch::FallbackQps
        | Branch::SessionNoKeyQps
        | Branch::KvFallbackQps
        | Branch::FallbackNoStatsQps
        | Branch::LeastInflightNoStatsQps => Placed::Qps,
        _ if affinity(b) && b != Branch::SessionHash && match_chars > 0 => Placed::Prefix,
        _ => Placed::Other,
    }
}

/// The mechanism that put the busiest backend's requests there, with the key that changes
/// it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mechanism {
    /// `trie-monopoly`, `qps-latch` or `long-session-affinity`.
    pub kind: &'static str,
    /// The backend concerned.
    pub backend: String,
    /// What happened, with the audit's counts.
    pub cause: String,
    /// The scenario key (or keys) that changes it, as `sim run --set` takes them.
    pub key: String,
}

/// Every session's first placement and later turns, read from the audit in decision
/// order (whole or batch by batch: the record is the same however it is cut).
#[derive(Clone, Debug, Default)]
pub struct Placements {
    sessions: HashMap<u32, Session>,
    /// First-seen order of the sessions (the map's order is not deterministic).
    order: Vec<u32>,
}

impl Placements {
    /// Records decision `r`.
    pub fn add(&mut self, r: &DecisionRow) {
        let (id, b) = (r.session.0, r.backend.0);
        match self.sessions.get_mut(&id) {
            Some(s) => {
                s.turns += 1;
                if b == s.first && affinity(r.branch) {
                    s.followed += 1;
                }
                s.last = b;
            }
            None => {
                self.order.push(id);
                self.sessions.insert(
                    id,
                    Session {
                        first: b,
                        how: placed(r.branch, r.match_chars),
                        match_chars: r.match_chars,
                        turns: 1,
                        followed: 0,
                        last: b,
                    },
                );
            }
        }
    }

    /// The sessions first placed on backend `b`, in first-seen order.
    fn placed_on(&self, b: usize) -> Vec<Session> {
        self.order
            .iter()
            .map(|id| self.sessions[id])
            .filter(|s| s.first as usize == b)
            .collect()
    }

    /// The mechanism behind the busiest backend of `s` (by requests per slot), if the
    /// audit shows one; `None` when nothing was routed or no rule applies.
    pub fn mechanism(&self, s: &Summary) -> Option<Mechanism> {
        let hi = busiest(s)?;
        [trie_monopoly, qps_latch, long_sessions]
            .iter()
            .find_map(|rule| rule(self, s, hi))
    }
}

/// The backend with the most requests per slot (the first of equals).
fn busiest(s: &Summary) -> Option<usize> {
    let per_slot = |i: usize| s.backends[i].requests as f64 / f64::from(s.backends[i].slots.max(1));
    (0..s.backends.len())
        .filter(|&i| s.backends[i].requests > 0)
        .max_by(|&a, &b| per_slot(a).total_cmp(&per_slot(b)).then(b.cmp(&a)))
}

/// Sessions' new placements on `hi` are concentrated: at least 2, and more than twice the
/// fair share of the sessions placed anywhere, or (on two backends, where twice the fair
/// share is every session) more than halfway from the fair share to all of them.
fn placements_concentrated(p: &Placements, s: &Summary, hi: usize) -> bool {
    let n = s.backends.len().max(1) as f64;
    let total = p.order.len() as f64;
    let fair = total / n;
    let on_hi = p.placed_on(hi).len() as f64;
    on_hi >= 2.0 && on_hi > (2.0 * fair).min((fair + total) / 2.0)
}

/// trie monopoly: most of `hi`'s new sessions matched a prefix already cached there.
fn trie_monopoly(p: &Placements, s: &Summary, hi: usize) -> Option<Mechanism> {
    if !placements_concentrated(p, s, hi) {
        return None;
    }
    let on = p.placed_on(hi);
    let by_prefix: Vec<&Session> = on.iter().filter(|x| x.how == Placed::Prefix).collect();
    if by_prefix.len() * 2 <= on.len() {
        return None;
    }
    let shared = by_prefix.iter().map(|x| x.match_chars).min().unwrap_or(0);
    let name = &s.backends[hi].name;
    Some(Mechanism {
        kind: "trie-monopoly",
        backend: name.clone(),
        cause: format!(
            "{} of the {} sessions first placed on {name} matched a prefix other sessions had already put there ({shared}+ characters, a shared system prompt): with a prefix threshold at or below that match, every new session follows the trie to the backend that cached the shared prompt first, whatever the load",
            by_prefix.len(),
            on.len(),
        ),
        key: format!(
            "router.policy.prefix_min_match_length above the shared {shared} characters (e.g. --set router.policy.prefix_min_match_length={}), so a new session needs its own prefix to follow the trie",
            next_chunk(shared)
        ),
    })
}

/// The threshold just above `chars` of match: the next whole 128-character chunk.
fn next_chunk(chars: u64) -> u64 {
    (chars / 128 + 1) * 128
}

/// QPS latch: most of `hi`'s new sessions were placed by `_qps_routing` and followed.
fn qps_latch(p: &Placements, s: &Summary, hi: usize) -> Option<Mechanism> {
    let on = p.placed_on(hi);
    let by_qps: Vec<&Session> = on.iter().filter(|x| x.how == Placed::Qps).collect();
    let followed: u32 = by_qps.iter().map(|x| x.followed).sum();
    let later: u32 = by_qps.iter().map(|x| x.turns - 1).sum();
    if by_qps.len() < 2 || by_qps.len() * 2 <= on.len() || followed * 2 <= later || later == 0 {
        return None;
    }
    let name = &s.backends[hi].name;
    Some(Mechanism {
        kind: "qps-latch",
        backend: name.clone(),
        cause: format!(
            "{} sessions were placed on {name} by _qps_routing (dispatch counts in the last window, not load) at their first turn, and {followed} of their {later} later turns followed them there by prefix match: each first pick is latched for the session's life",
            by_qps.len(),
        ),
        key: "router.policy.fallback = \"leastinflight\" (a load-based first pick), or router.policy.insert = \"second_turn\" (latch on a fresher view)".to_string(),
    })
}

/// long-session affinity: new sessions were spread evenly across equal backends, but
/// `hi`'s sessions ran many more turns and stayed.
fn long_sessions(p: &Placements, s: &Summary, hi: usize) -> Option<Mechanism> {
    if placements_concentrated(p, s, hi) {
        return None;
    }
    let on = p.placed_on(hi);
    let turns: u32 = on.iter().map(|x| x.turns).sum();
    let stayed: Vec<&Session> = on.iter().filter(|x| x.last as usize == hi && x.turns > 1).collect();
    let followed: u32 = on.iter().map(|x| x.followed).sum();
    let others: Vec<Session> = p
        .order
        .iter()
        .map(|id| p.sessions[id])
        .filter(|x| x.first as usize != hi)
        .collect();
    if others.is_empty() {
        // Every session started on `hi`: that is uneven spreading, not long sessions.
        return None;
    }
    let mean_elsewhere = others.iter().map(|x| f64::from(x.turns)).sum::<f64>() / others.len() as f64;
    let mean_here = f64::from(turns) / on.len().max(1) as f64;
    let longest = on.iter().map(|x| x.turns).max().unwrap_or(0);
    if on.is_empty() || mean_here < 2.0 * mean_elsewhere || followed * 2 <= turns.saturating_sub(on.len() as u32) {
        return None;
    }
    let name = &s.backends[hi].name;
    Some(Mechanism {
        kind: "long-session-affinity",
        backend: name.clone(),
        cause: format!(
            "new sessions were spread evenly ({} first placed on {name}), but they ran {mean_here:.1} turns on average against {mean_elsewhere:.1} elsewhere (the longest {longest}), and {} of them stayed through their affinity branch: a few long sessions, not uneven spreading, made {name} the busiest",
            on.len(),
            stayed.len(),
        ),
        key: "affinity is the policy's design (it keeps the session's cache warm); to move a long session off a busy backend weigh load over affinity, e.g. router.policy.replace = true for prefixaware, or a load-aware kind (router.policy.kind = \"least_request\")".to_string(),
    })
}
