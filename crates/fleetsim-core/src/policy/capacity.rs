//! Capacity-aware load signals for `prefixaware`'s below-threshold branch, and the
//! standalone `least_slots` policy: candidate rules for mixed hardware (production-stack
//! #1073's fleet with GPUs of different speeds), none of them upstream.
//!
//! A count-based fallback balances requests, not capacity: on 4 backends x 6 slots + 4 x 2
//! slots it puts 4 sessions on each, and the 2-slot backends queue while the 6-slot ones
//! idle. These rules divide by each backend's slots (`--max-num-seqs`), which the router is
//! told per URL (a static-discovery router, as it is told each URL's model:
//! `max_num_seqs = [...]`, default: the fleet's own values), or read the scraped KV usage:
//!
//! * `local_slots`: `(own in-flight + 1) / max_num_seqs`: the router's own
//!   `in_prefill + in_decoding`, fresh; the `+ 1` is the request being placed, so two idle
//!   backends compare by the share of their slots it would take (the bigger one wins).
//! * `slots`: `(scraped running + waiting + own dispatches since that entry was read + 1) /
//!   max_num_seqs`: the scrape corrected by what this router sent after it (as
//!   `scraped_plus_sent`), normalised; QPS while any endpoint lacks stats (as #1089).
//! * `kv_headroom`: the lowest scraped `vllm:kv_cache_usage_perc` (as the 1e-4 integer
//!   below), ties by own dispatches since the read; no flag needed, the KV cache size is in
//!   the scrape, but it is memory, not slots: two GPUs with the same memory and different
//!   speeds look alike.
//!
//! Normalised loads are compared as integers scaled by [`SCALE`] (exact for slot counts that
//! divide it: every count up to 16), so ties, bands and first-URL rules are those of the
//! count-based fallbacks.
//!
//! Re-placement ([`over_capacity`]): with `replace = true`, a request whose prefix match is
//! above the threshold is re-placed by the fallback when its matched endpoint holds at least
//! its slots in the router's own in-flight requests while another endpoint has a free slot
//! by the same count; the move costs the prefix-cache hit of that turn and, inserted under
//! the new endpoint, moves the session's later turns (the trie's random choice among holders).

use super::kind::{Doc, Fleet, PolicyKind, StackFlags, param};
use super::leastinflight::{by_load_or_qps, pick_in_band};
use super::leastrequest::{Tie, local_loads};
use super::load_since_scrape::SentSinceScrape;
use super::params::{LEAST_INFLIGHT_TIES, ParamError, tie, tie_suffix};
use super::{Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;

/// Scale of normalised loads: divisible by every slot count from 1 to 16.
pub const SCALE: u64 = 720_720;

/// Slots of `view`'s endpoints from the per-backend list (a backend beyond it: 1 slot).
fn slots_of(view: &RouterView, max_num_seqs: &[u32]) -> impl Iterator<Item = u64> {
    view.endpoints
        .iter()
        .map(move |e| u64::from(max_num_seqs.get(e.backend.index()).copied().unwrap_or(1).max(1)))
}

/// `(own in-flight + 1) * SCALE / slots` per endpoint.
pub fn local_slot_loads(view: &RouterView, max_num_seqs: &[u32]) -> Vec<u64> {
    local_loads(view)
        .into_iter()
        .zip(slots_of(view, max_num_seqs))
        .map(|(l, s)| (l + 1) * SCALE / s)
        .collect()
}

/// `(scraped running + waiting + own dispatches since the read + 1) * SCALE / slots`;
/// `None` if some endpoint has no engine stats.
pub fn slot_loads(view: &RouterView, max_num_seqs: &[u32], sent: &mut SentSinceScrape) -> Option<Vec<u64>> {
    let loads = sent.loads(view)?;
    Some(
        loads
            .into_iter()
            .zip(slots_of(view, max_num_seqs))
            .map(|(l, s)| (l + 1) * SCALE / s)
            .collect(),
    )
}

/// Scraped KV usage in units of 1e-4, then own dispatches since the read (ties);
/// `None` if some endpoint has no engine stats.
pub fn kv_headroom_loads(view: &RouterView, sent: &mut SentSinceScrape) -> Option<Vec<u64>> {
    let plus = sent.loads(view)?;
    Some(
        view.engine_stats
            .iter()
            .zip(plus)
            .map(|(e, p)| {
                let e = e.as_ref().expect("checked by sent.loads");
                let since = p - (u64::from(e.running) + u64::from(e.waiting));
                let usage = (e.kv_usage() * 10_000.0).round() as u64;
                usage * 1_000_000 + since.min(999_999)
            })
            .collect(),
    )
}

/// True if the endpoint at `pos` holds at least its slots in the router's own in-flight
/// requests while some other endpoint has a free slot by the same count.
pub fn over_capacity(view: &RouterView, max_num_seqs: &[u32], pos: usize) -> bool {
    let loads = local_loads(view);
    let slots: Vec<u64> = slots_of(view, max_num_seqs).collect();
    loads[pos] >= slots[pos] && (0..loads.len()).any(|i| i != pos && loads[i] < slots[i])
}

/// Validates a `max_num_seqs` list (per URL in discovery order); empty: the fleet's.
pub fn max_num_seqs_list(given: Option<Vec<i64>>, fleet: &Fleet) -> Result<Vec<u32>, ParamError> {
    let Some(given) = given else {
        return Ok(fleet.max_num_seqs.clone());
    };
    if given.len() != fleet.max_num_seqs.len() {
        return Err(ParamError::new(
            "max_num_seqs",
            format!(
                "lists {} values for {} backends (one per URL, in discovery order)",
                given.len(),
                fleet.max_num_seqs.len()
            ),
        ));
    }
    given
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            u32::try_from(v)
                .ok()
                .filter(|&v| v >= 1)
                .ok_or_else(|| ParamError::new(&format!("max_num_seqs[{i}]"), format!("must be >= 1, got {v}")))
        })
        .collect()
}

/// The production-stack flag that would carry the list (static discovery).
pub fn static_flag(max_num_seqs: &[u32]) -> [String; 2] {
    [
        "--static-max-num-seqs".to_string(),
        max_num_seqs.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
    ]
}

/// The note every capacity rule adds to its production-stack command line.
pub const FLAG_NOTE: &str = "--static-max-num-seqs (one value per --static-backends URL) is a proposed flag: \
     parsers/parser.py beside --static-model-labels, parsed in app.py's static branch with \
     parse_comma_separated_args like model_labels; no upstream router reads slots today";

/// Which capacity signal `least_slots` reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Own in-flight / slots (fresh).
    Local,
    /// Scrape + own dispatches since, / slots.
    Scraped,
}

/// `least_slots`: every request to the lowest `(load + 1) / max_num_seqs`.
pub struct LeastSlots {
    max_num_seqs: Vec<u32>,
    signal: Signal,
    tie: Tie,
    sent: SentSinceScrape,
}

impl RoutingPolicy for LeastSlots {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let loads = match self.signal {
            Signal::Local => Some(local_slot_loads(view, &self.max_num_seqs)),
            Signal::Scraped => slot_loads(view, &self.max_num_seqs, &mut self.sent),
        };
        let d = by_load_or_qps(loads.map(|l| pick_in_band(&l, 0, self.tie, rng)), view);
        if self.signal == Signal::Scraped {
            self.sent.record(view.endpoints[d.pos].backend.index(), view.now);
        }
        d
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of `least_slots`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Slots per URL in discovery order (default: the fleet's `max_num_seqs`).
    max_num_seqs: Option<Vec<i64>>,
    #[serde(default = "default_signal")]
    signal: String,
    #[serde(default = "default_tie")]
    tie: String,
}

fn default_signal() -> String {
    "local".into()
}

fn default_tie() -> String {
    "first".into()
}

/// The validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Slots per backend index.
    pub max_num_seqs: Vec<u32>,
    /// Load signal.
    pub signal: Signal,
    /// Tie rule among equal normalised loads.
    pub tie: Tie,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "least_slots";
    const DOC: Doc = Doc {
        source: "not upstream (no router divides by slots): a fleetsim candidate for mixed hardware; \
                 prefixaware's fallbacks local_slots / slots / kv_headroom are the same rules below the threshold",
        decision: "least (load + 1) / slots, where load is the router's own in-flight (signal = local) or the \
                   scrape plus its own dispatches since (signal = scraped); ties: first in discovery order",
        signals: "router's own in-flight (fresh) or scraped running + waiting + own dispatches since the read \
                  (router.engine_stats_interval_s), divided by each URL's --max-num-seqs (a proposed static flag)",
        params: &[
            param(
                "max_num_seqs",
                "(auto)",
                "slots per URL in discovery order, as --static-max-num-seqs would give them (default: the fleet's)",
            ),
            param(
                "signal",
                "\"local\"",
                "\"local\": (own in-flight + 1) / slots; \"scraped\": (scrape + own dispatches since + 1) / slots",
            ),
            param("tie", "\"first\"", "\"first\" in discovery order or \"random\""),
        ],
    };
    type Params = Params;
    type Config = Config;
    fn validate(p: Params, fleet: &Fleet) -> Result<Config, ParamError> {
        let signal = match p.signal.as_str() {
            "local" => Signal::Local,
            "scraped" => Signal::Scraped,
            v => {
                return Err(ParamError::new(
                    "signal",
                    format!("unknown signal `{v}`; expected `local` or `scraped`"),
                ));
            }
        };
        Ok(Config {
            max_num_seqs: max_num_seqs_list(p.max_num_seqs, fleet)?,
            signal,
            tie: tie(&p.tie, "tie", LEAST_INFLIGHT_TIES)?,
        })
    }
    fn describe(c: &Config) -> String {
        let signal = match c.signal {
            Signal::Local => "local",
            Signal::Scraped => "scraped",
        };
        format!("signal = {signal}{}", tie_suffix(c.tie))
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        Box::new(LeastSlots {
            max_num_seqs: c.max_num_seqs.clone(),
            signal: c.signal,
            tie: c.tie,
            sent: SentSinceScrape::default(),
        })
    }
    fn production_stack(c: &Config) -> Option<StackFlags> {
        let mut f = StackFlags {
            reads_request_stats: c.signal == Signal::Local,
            reads_engine_stats: c.signal == Signal::Scraped,
            ..StackFlags::default()
        };
        f.args.extend(static_flag(&c.max_num_seqs));
        f.notes.push(FLAG_NOTE.into());
        f.notes
            .push("least_slots is not a production-stack routing logic; this needs a patch".into());
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn idle_backends_compare_by_slots_and_fill_in_proportion() {
        // 6 + 2 slots, nothing in flight: the 6-slot backend first; placing 8 requests one
        // after another (each counted in flight) fills 6 : 2.
        let slots = [6, 2];
        let mut inflight = [0u32; 2];
        let mut rng = stream(0, "t", 0);
        for _ in 0..8 {
            let f = ViewFixture::new(2).in_flight(&[Some(inflight[0]), Some(inflight[1])]);
            let l = local_slot_loads(&f.view(), &slots);
            inflight[pick_in_band(&l, 0, Tie::First, &mut rng)] += 1;
        }
        assert_eq!(inflight, [6, 2]);
    }

    #[test]
    fn scraped_slots_add_own_dispatches_since_the_read() {
        let f = ViewFixture::new(2).loads(&[(2, 0), (1, 0)]).at(5.0);
        let mut s = SentSinceScrape::default();
        // (2 + 1) / 6 against (1 + 1) / 2.
        assert_eq!(slot_loads(&f.view(), &[6, 2], &mut s), Some(vec![SCALE / 2, SCALE]));
        s.record(0, SimTimeAt::secs(1.0));
        assert_eq!(slot_loads(&f.view(), &[6, 2], &mut s), Some(vec![SCALE * 4 / 6, SCALE]));
        let mut g = f;
        g.engine[1] = None;
        assert_eq!(slot_loads(&g.view(), &[6, 2], &mut s), None);
    }

    struct SimTimeAt;
    impl SimTimeAt {
        fn secs(s: f64) -> crate::time::SimTime {
            crate::time::SimTime(crate::time::secs_to_ns(s))
        }
    }

    #[test]
    fn over_capacity_needs_a_free_slot_elsewhere() {
        let f = ViewFixture::new(2).in_flight(&[Some(2), Some(5)]);
        assert!(over_capacity(&f.view(), &[2, 6], 0));
        assert!(!over_capacity(&f.view(), &[2, 6], 1));
        let full = ViewFixture::new(2).in_flight(&[Some(2), Some(6)]);
        assert!(!over_capacity(&full.view(), &[2, 6], 0), "nowhere to go");
    }

    #[test]
    fn kv_headroom_prefers_the_emptier_cache_then_fewer_dispatches() {
        let mut f = ViewFixture::new(2).loads(&[(0, 0), (0, 0)]).at(3.0);
        for (e, used) in f.engine.iter_mut().zip([500, 100]) {
            let e = e.as_mut().unwrap();
            e.kv_used_blocks = used;
            e.kv_total_blocks = 1000;
        }
        let mut s = SentSinceScrape::default();
        let l = kv_headroom_loads(&f.view(), &mut s).unwrap();
        assert!(l[1] < l[0]);
        s.record(1, SimTimeAt::secs(1.0));
        let l2 = kv_headroom_loads(&f.view(), &mut s).unwrap();
        assert_eq!(l2[1], l[1] + 1);
    }

    #[test]
    fn least_slots_validates_its_list() {
        let fleet = Fleet {
            block_size_tokens: 16,
            kv_blocks: 1000,
            chars_per_token: 4,
            max_num_seqs: vec![6, 2],
        };
        let p = |m: Option<Vec<i64>>| Params {
            max_num_seqs: m,
            signal: "local".into(),
            tie: "first".into(),
        };
        assert_eq!(Kind::validate(p(None), &fleet).unwrap().max_num_seqs, vec![6, 2]);
        assert_eq!(
            Kind::validate(p(Some(vec![3, 3])), &fleet).unwrap().max_num_seqs,
            vec![3, 3]
        );
        let e = Kind::validate(p(Some(vec![3])), &fleet).unwrap_err();
        assert_eq!(e.key, "max_num_seqs");
        let e = Kind::validate(p(Some(vec![3, 0])), &fleet).unwrap_err();
        assert_eq!(e.key, "max_num_seqs[1]");
        let mut pol = Kind::build(&Kind::validate(p(None), &fleet).unwrap());
        let f = ViewFixture::new(2).in_flight(&[Some(3), Some(0)]);
        // (3 + 1) / 6 = 0.67 against (0 + 1) / 2 = 0.5.
        assert_eq!(pol.route(&req(None, &[]), &f.view(), &mut stream(0, "t", 0)).pos, 1);
    }
}
