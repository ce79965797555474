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

use super::hashtrie::HashTrie;
use super::leastinflight::{pick_in_band, scraped_loads};
use super::leastrequest::{Tie, local_loads};
use super::load_since_scrape::SentSinceScrape;
use super::qps::qps_routing;
use super::{Branch, Decision, Fallback, RequestInfo, RouterView, RoutingPolicy};
use crate::dist::uniform_index;
use crate::ids::BackendId;
use crate::rng::SimRng;

/// The policy state.
pub struct PrefixAware {
    trie: HashTrie,
    min_match_chars: u64,
    fallback: Fallback,
    band: u32,
    tie: Tie,
    sent: SentSinceScrape,
}

impl PrefixAware {
    /// A router with an empty trie.
    pub fn new(min_match_chars: u64, fallback: Fallback, band: u32) -> Self {
        PrefixAware {
            trie: HashTrie::new(),
            min_match_chars,
            fallback,
            band,
            tie: Tie::Random,
            sent: SentSinceScrape::default(),
        }
    }

    /// The same router with tie rule `tie` inside the fallback's band.
    pub fn with_tie(mut self, tie: Tie) -> Self {
        self.tie = tie;
        self
    }
}

/// The below-threshold pick: `None` for a load-based fallback that lacks engine stats
/// (then `_qps_routing`, as #1089).
fn fallback_pick(
    fallback: Fallback,
    band: u32,
    tie: Tie,
    sent: &mut SentSinceScrape,
    view: &RouterView,
    rng: &mut SimRng,
) -> Option<usize> {
    let loads = match fallback {
        Fallback::Qps => return Some(qps_routing(view)),
        Fallback::LeastInflight => scraped_loads(view)?,
        Fallback::LocalInflight => local_loads(view),
        Fallback::ScrapedPlusSent => sent.loads(view)?,
    };
    Some(pick_in_band(&loads, band, tie, rng))
}

impl RoutingPolicy for PrefixAware {
    fn prompt_chunk_chars(&self) -> Option<u32> {
        Some(crate::router::CHUNK_CHARS)
    }

    fn route(&mut self, req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let available: Vec<BackendId> = view.endpoints.iter().map(|e| e.backend).collect();
        let (min_match, fallback, band, tie) = (self.min_match_chars, self.fallback, self.band, self.tie);
        let sent = &mut self.sent;
        let d = self
            .trie
            .match_then_insert(req.prompt_chunks, &available, |chunks, matched| {
                let match_chars = chunks as u64 * u64::from(req.chunk_chars);
                let (pos, branch) = if match_chars < min_match {
                    match fallback_pick(fallback, band, tie, sent, view, rng) {
                        Some(pos) if fallback == Fallback::Qps => (pos, Branch::FallbackQps),
                        // Every load-based fallback reports as `fallback_leastinflight`.
                        Some(pos) => (pos, Branch::FallbackLeastInflight),
                        None => (qps_routing(view), Branch::FallbackNoStatsQps),
                    }
                } else {
                    let b = matched[uniform_index(rng, matched.len())];
                    let pos = available
                        .iter()
                        .position(|x| *x == b)
                        .expect("matched set is a subset of available");
                    (pos, Branch::PrefixMatch)
                };
                // Inserted under the pick on both branches (PR #990): the latch.
                (
                    view.endpoints[pos].backend,
                    Decision {
                        pos,
                        branch,
                        match_chars,
                    },
                )
            });
        if self.fallback == Fallback::ScrapedPlusSent {
            self.sent.record(view.endpoints[d.pos].backend.index(), view.now);
        }
        d
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
}
