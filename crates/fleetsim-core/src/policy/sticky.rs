//! vllm-project/router 0.1.17 `--policy sticky_least_loaded`
//! (`src/policies/sticky_least_loaded.rs`): a session is pinned, at its first request, to
//! the worker with the fewest *active sessions* (not requests), ties to the largest
//! [`fbi_hash`]`("{session}:{url}")`; later requests of the session go
//! there while it is listed. A session idle for `session_expiration_s` (7,200 s of wall time,
//! `VLLM_ROUTER_SLL_SESSION_EXPIRATION_IN_S`) is dropped at the next sweep (at most one a
//! minute, on a request). A request without a session key goes to the fewest-sessions
//! worker with the tie key of its request text, `""` for chat, and is not recorded: every
//! key-less chat request goes to one worker while the counts are equal.

use std::collections::HashMap;

use super::furc::fbi_hash;
use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::params::{ParamError, secs};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;
use crate::time::{SimDuration, SimTime};

/// The sweep's period (`SWEEP_INTERVAL_SECS`).
const SWEEP: SimDuration = SimDuration(60 * 1_000_000_000);

/// One pinned session.
struct Pinned {
    url: String,
    last_access: SimTime,
}

/// The policy state.
pub struct Sticky {
    expiration: SimDuration,
    sessions: HashMap<String, Pinned>,
    active: HashMap<String, u64>,
    last_sweep: SimTime,
}

impl Sticky {
    /// No sessions yet; the first sweep is a minute after the start.
    pub fn new(expiration: SimDuration) -> Sticky {
        Sticky {
            expiration,
            sessions: HashMap::new(),
            active: HashMap::new(),
            last_sweep: SimTime::ZERO,
        }
    }

    /// Drops the sessions idle for the expiration, at most once per sweep period.
    fn sweep(&mut self, now: SimTime) {
        if now.0.saturating_sub(self.last_sweep.0) < SWEEP.0 {
            return;
        }
        let exp = self.expiration.0;
        let gone: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, p)| now.0.saturating_sub(p.last_access.0) >= exp)
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            let p = self.sessions.remove(&k).expect("listed above");
            self.release(&p.url);
        }
        self.last_sweep = now;
    }

    fn release(&mut self, url: &str) {
        if let Some(c) = self.active.get_mut(url) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                self.active.remove(url);
            }
        }
    }

    /// The fewest-sessions endpoint, ties to the largest hash of `"{tie_key}:{url}"` (the
    /// first in list order on equal hashes).
    fn least_loaded(&self, view: &RouterView, tie_key: &str) -> usize {
        let count = |i: usize| self.active.get(&view.endpoints[i].url).copied().unwrap_or(0);
        let min = (0..view.endpoints.len())
            .map(count)
            .min()
            .expect("non-empty endpoint list");
        let mut best: Option<(usize, u64)> = None;
        for i in (0..view.endpoints.len()).filter(|&i| count(i) == min) {
            let w = fbi_hash(&format!("{tie_key}:{}", view.endpoints[i].url));
            if best.is_none_or(|(_, b)| w > b) {
                best = Some((i, w));
            }
        }
        best.expect("the minimum is a candidate").0
    }
}

impl RoutingPolicy for Sticky {
    fn route(&mut self, req: &RequestInfo, view: &RouterView, _rng: &mut SimRng) -> Decision {
        self.sweep(view.now);
        let decision = |pos, branch| Decision {
            pos,
            branch,
            match_chars: 0,
        };
        let Some(key) = req.session_key else {
            return decision(self.least_loaded(view, ""), Branch::LeastRequest);
        };
        if let Some(p) = self.sessions.get(key) {
            let live = view.now.0.saturating_sub(p.last_access.0) < self.expiration.0;
            let at = view.endpoints.iter().position(|e| e.url == p.url);
            if let (true, Some(pos)) = (live, at) {
                self.sessions.get_mut(key).expect("found above").last_access = view.now;
                return decision(pos, Branch::SessionHash);
            }
            let p = self.sessions.remove(key).expect("found above");
            self.release(&p.url);
        }
        let pos = self.least_loaded(view, key);
        let url = view.endpoints[pos].url.clone();
        *self.active.entry(url.clone()).or_insert(0) += 1;
        self.sessions.insert(
            key.to_string(),
            Pinned {
                url,
                last_access: view.now,
            },
        );
        decision(pos, Branch::LeastRequest)
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default = "default_expiration")]
    session_expiration_s: f64,
}

/// `DEFAULT_SESSION_EXPIRATION_SECS`.
fn default_expiration() -> f64 {
    7200.0
}

impl PolicyKind for Kind {
    const KIND: &'static str = "sticky_least_loaded";
    const DOC: Doc = Doc {
        source: "vllm-project/router 0.1.17 sticky_least_loaded (src/policies/sticky_least_loaded.rs)",
        decision: "a session sticks to the worker with the fewest active sessions at its first request, ties by FurcHash of session and URL",
        signals: "session key header; the router's own session counts; the worker URLs (backends.urls: give the live ones)",
        params: &[param(
            "session_expiration_s",
            "7200",
            "a session idle this long is dropped at the next minute's sweep (VLLM_ROUTER_SLL_SESSION_EXPIRATION_IN_S)",
        )],
    };
    type Params = Params;
    type Config = SimDuration;
    fn validate(p: Params, _: &Fleet) -> Result<SimDuration, ParamError> {
        secs(p.session_expiration_s, "session_expiration_s", false)
    }
    fn describe(c: &SimDuration) -> String {
        if *c == SimDuration::from_secs_f64(default_expiration()) {
            String::new()
        } else {
            format!("session_expiration_s = {}", c.as_secs_f64())
        }
    }
    fn build(c: &SimDuration) -> Box<dyn RoutingPolicy> {
        Box::new(Sticky::new(*c))
    }
    fn upstream(_c: &SimDuration, _set: &[&str]) -> Option<Upstream> {
        Upstream::new("vllm-router 0.1.17", "--policy sticky_least_loaded")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn sessions_spread_by_session_count_and_stick() {
        let f = ViewFixture::new(3);
        let mut p = Sticky::new(SimDuration::from_secs_f64(7200.0));
        let mut rng = stream(0, "t", 0);
        let mut first = Vec::new();
        for s in ["a", "b", "c", "d", "e", "f"] {
            first.push(p.route(&req(Some(s), &[]), &f.view(), &mut rng).pos);
        }
        let mut counts = [0; 3];
        for &i in &first {
            counts[i] += 1;
        }
        assert_eq!(counts, [2, 2, 2], "{first:?}");
        for (s, &want) in ["a", "b", "c", "d", "e", "f"].iter().zip(&first) {
            let d = p.route(&req(Some(s), &[]), &f.view(), &mut rng);
            assert_eq!((d.pos, d.branch), (want, Branch::SessionHash));
        }
    }

    #[test]
    fn the_tie_goes_to_the_largest_hash_and_keyless_requests_are_not_counted() {
        let f = ViewFixture::new(4);
        let mut p = Sticky::new(SimDuration::from_secs_f64(7200.0));
        let mut rng = stream(0, "t", 0);
        let best = (0..4)
            .max_by_key(|&i| fbi_hash(&format!("s:{}", f.endpoints[i].url)))
            .unwrap();
        assert_eq!(p.route(&req(Some("s"), &[]), &f.view(), &mut rng).pos, best);
        let none = p.route(&req(None, &[]), &f.view(), &mut rng).pos;
        assert_ne!(none, best);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, none);
    }

    #[test]
    fn an_idle_session_expires_at_the_sweep() {
        let mut p = Sticky::new(SimDuration::from_secs_f64(100.0));
        let mut rng = stream(0, "t", 0);
        let f = ViewFixture::new(2);
        p.route(&req(Some("a"), &[]), &f.view(), &mut rng);
        assert_eq!(p.active.values().sum::<u64>(), 1);
        let later = ViewFixture::new(2).at(200.0);
        let d = p.route(&req(Some("b"), &[]), &later.view(), &mut rng);
        assert_eq!(d.branch, Branch::LeastRequest);
        assert_eq!(p.sessions.len(), 1);
        assert_eq!(p.active.values().sum::<u64>(), 1);
    }
}
