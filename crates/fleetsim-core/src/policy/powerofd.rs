//! `power_of_d`: sample `d` distinct endpoints uniformly, send to the least loaded of them;
//! ties go to the first sampled (SGLang `power_of_two` and AIBrix `power-of-two` compare with
//! `<=`). With `d = 2` and `load = "sglang_monitor"` this is SGLang's classic
//! `power_of_two`: its LoadMonitor polls `GET /get_load` every
//! `--worker-startup-check-interval` (30 s in sglang-router 0.3.2, `app_context.rs`), which
//! vLLM workers do not serve, so every load reads -1, every pair ties, and the policy is
//! uniform random; before the first poll its own counter reads 0 everywhere, since it moves
//! only for `cache_aware` and `manual` (sgl-project/sglang `sgl-model-gateway/src/policies/power_of_two.rs`,
//! `src/core/worker_manager.rs`, `src/routers/http/router.rs`, in sglang-router 0.3.2's sdist).
//!
//! `load = "smg"` is smg 1.13.0's default `power_of_two` (sdist
//! `model_gateway/src/policies/power_of_two.rs`, `policies/least_load.rs`,
//! `worker/monitor.rs`): the expected wait of each worker, in request units
//! `max(scraped running + waiting + this router's dispatches since the scrape, its own
//! in-flight)` (the KV-pressure term, 0.29 requests at half-full KV, is left out), from
//! `/metrics` polled every `--load-monitor-interval` (10 s, `router.engine_stats_interval_s`
//! here); a worker whose last poll showed 8 or more waiting is vetoed (unless all are);
//! ties are drawn at random. With `d` at least the fleet size it is smg's `least_load`.

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::leastrequest::local_loads;
use super::load_since_scrape::SentSinceScrape;
use super::params::{ParamError, count};
use super::{Branch, Decision, RequestInfo, RouterView, RoutingPolicy};
use crate::rng::SimRng;
use rand::seq::index::sample;

/// Where the load comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadSource {
    /// Router-local in-flight requests (zero staleness).
    Local,
    /// Scraped `num_requests_running + num_requests_waiting` (missing stats = 0).
    Scraped,
    /// SGLang's LoadMonitor against vLLM: `/get_load` fails, load = -1 everywhere.
    SglangMonitor,
    /// smg's expected wait: max(scrape + own dispatches since, own in-flight), overload veto.
    Smg,
}

/// smg's `--worker-overload-waiting-requests` default: a worker whose last poll showed this
/// many waiting requests is not routed to.
pub const SMG_OVERLOAD_WAITING: u32 = 8;

impl LoadSource {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadSource::Local => "local",
            LoadSource::Scraped => "scraped",
            LoadSource::SglangMonitor => "sglang_monitor",
            LoadSource::Smg => "smg",
        }
    }
}

/// Loads under `source` (signed: the monitor's failure value is -1).
pub fn loads(view: &RouterView, source: LoadSource) -> Vec<i64> {
    match source {
        LoadSource::Local => local_loads(view).into_iter().map(|l| l as i64).collect(),
        LoadSource::Scraped => view
            .engine_stats
            .iter()
            .map(|e| e.map_or(0, |e| i64::from(e.running) + i64::from(e.waiting)))
            .collect(),
        LoadSource::SglangMonitor => vec![-1; view.endpoints.len()],
        LoadSource::Smg => local_loads(view).into_iter().map(|l| l as i64).collect(),
    }
}

/// The policy.
pub struct PowerOfD {
    /// Endpoints sampled per decision (capped at the fleet size).
    pub d: u32,
    /// Load signal.
    pub load: LoadSource,
    /// This router's dispatches since each scrape (`load = "smg"`).
    sent: SentSinceScrape,
}

impl PowerOfD {
    /// The policy with no dispatch history.
    pub fn new(d: u32, load: LoadSource) -> Self {
        PowerOfD {
            d,
            load,
            sent: SentSinceScrape::default(),
        }
    }

    /// smg's expected wait per endpoint, and who the overload veto leaves (all if none).
    fn smg_loads(&mut self, view: &RouterView) -> (Vec<i64>, Vec<usize>) {
        let local = local_loads(view);
        let n = view.endpoints.len();
        let mut l = Vec::with_capacity(n);
        let mut ok = Vec::with_capacity(n);
        for (i, e) in view.engine_stats.iter().enumerate() {
            // Without a poll yet, smg scores by in-flight alone (join-shortest-queue).
            let score = match e {
                Some(e) => {
                    let since = self.sent.since(view.endpoints[i].backend.index(), e.read_at);
                    (u64::from(e.running) + u64::from(e.waiting) + since).max(local[i])
                }
                None => local[i],
            };
            l.push(score as i64);
            if e.is_none_or(|e| e.waiting < SMG_OVERLOAD_WAITING) {
                ok.push(i);
            }
        }
        if ok.is_empty() {
            ok = (0..n).collect();
        }
        (l, ok)
    }
}

impl RoutingPolicy for PowerOfD {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let n = view.endpoints.len();
        let (l, eligible) = match self.load {
            LoadSource::Smg => self.smg_loads(view),
            other => (loads(view, other), (0..n).collect()),
        };
        let picks = sample(rng, eligible.len(), (self.d as usize).min(eligible.len()));
        let mut best = eligible[picks.index(0)];
        let mut tied = 1u32;
        for i in picks.iter().skip(1).map(|k| eligible[k]) {
            if l[i] < l[best] {
                (best, tied) = (i, 1);
            } else if l[i] == l[best] && self.load == LoadSource::Smg {
                // smg draws among equal scores (reservoir): keep the new one with 1/(k+1).
                tied += 1;
                if crate::dist::uniform_index(rng, tied as usize) == 0 {
                    best = i;
                }
            }
        }
        if self.load == LoadSource::Smg {
            self.sent.record(view.endpoints[best].backend.index(), view.now);
        }
        Decision {
            pos: best,
            branch: Branch::PowerOfD,
            match_chars: 0,
        }
    }
}

/// This policy's registry entry ([`super::registry`]).
pub struct Kind;

/// `[router.policy]` of this policy.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default = "default_d")]
    d: i64,
    #[serde(default = "default_load")]
    load: String,
}

fn default_d() -> i64 {
    2
}

fn default_load() -> String {
    "local".into()
}

/// The validated configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Sample size.
    pub d: u32,
    /// Load signal.
    pub load: LoadSource,
}

impl PolicyKind for Kind {
    const KIND: &'static str = "power_of_d";
    const DOC: Doc = Doc {
        source: "SGLang power_of_two / AIBrix power-of-two generalised to d samples (tie -> first sampled)",
        decision: "the less loaded of d endpoints drawn at random; ties: the first drawn",
        signals: "load = \"local\" (router in-flight, fresh), \"scraped\" (running + waiting, \
                  router.engine_stats_interval_s), or \"sglang_monitor\" (GET /get_load every 30 s, which vLLM \
                  does not serve: -1 everywhere, so uniform random), or \"smg\" (smg's expected wait: max(scrape + own \
                  dispatches since, own in-flight), workers with 8 waiting at the last scrape vetoed, random ties)",
        params: &[
            param("d", "2", "endpoints sampled per decision"),
            param(
                "load",
                "\"local\"",
                "\"local\", \"scraped\", \"sglang_monitor\" or \"smg\"",
            ),
        ],
    };
    type Params = Params;
    type Config = Config;
    fn validate(p: Params, _: &Fleet) -> Result<Config, ParamError> {
        let load = match p.load.as_str() {
            "local" => LoadSource::Local,
            "scraped" => LoadSource::Scraped,
            "sglang_monitor" => LoadSource::SglangMonitor,
            "smg" => LoadSource::Smg,
            other => {
                return Err(ParamError::new(
                    "load",
                    format!("unknown load `{other}`; expected `local`, `scraped`, `sglang_monitor` or `smg`"),
                ));
            }
        };
        Ok(Config {
            d: count(p.d, "d", 1)?,
            load,
        })
    }
    fn describe(c: &Config) -> String {
        format!("d = {}, load = {}", c.d, c.load.as_str())
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        Box::new(PowerOfD::new(c.d, c.load))
    }
    fn upstream(c: &Config, _: &[&str]) -> Option<Upstream> {
        match (c.d, c.load) {
            (2, LoadSource::SglangMonitor) => Upstream::new("SGLang router", "--policy power_of_two"),
            (2, LoadSource::Local) => Upstream::new("AIBrix gateway", "routing-strategy power-of-two"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{ViewFixture, req};
    use crate::rng::stream;

    #[test]
    fn never_picks_the_most_loaded_of_two() {
        // Endpoint 2 is the most loaded: with d = 2 it can only win against itself, which
        // distinct sampling rules out.
        let f = ViewFixture::new(3).in_flight(&[Some(1), Some(1), Some(9)]);
        let mut p = PowerOfD::new(2, LoadSource::Local);
        let mut rng = stream(1, "t", 0);
        for _ in 0..200 {
            assert_ne!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 2);
        }
        // d = n is the strict argmin.
        let mut p = PowerOfD::new(3, LoadSource::Local);
        let f = ViewFixture::new(3).in_flight(&[Some(4), Some(2), Some(3)]);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 1);
    }

    #[test]
    fn scraped_load_and_the_sglang_monitor_failure() {
        let f = ViewFixture::new(2).loads(&[(4, 4), (0, 0)]);
        let mut p = PowerOfD::new(2, LoadSource::Scraped);
        let mut rng = stream(2, "t", 0);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 1);
        // Every load -1: the first sampled wins, which is uniform over endpoints.
        let mut p = PowerOfD::new(2, LoadSource::SglangMonitor);
        let mut counts = [0u32; 2];
        for _ in 0..2000 {
            counts[p.route(&req(None, &[]), &f.view(), &mut rng).pos] += 1;
        }
        assert!(
            (900..=1100).contains(&counts[0]),
            "{counts:?}: the loaded backend gets half"
        );
    }

    #[test]
    fn smg_counts_its_own_dispatches_since_the_scrape_and_vetoes_the_overloaded() {
        // d = n: smg's least_load. Scraped 0 and 1 running; nothing in flight of its own.
        let f = ViewFixture::new(3).loads(&[(0, 0), (1, 0), (0, 9)]).at(5.0);
        let mut p = PowerOfD::new(3, LoadSource::Smg);
        let mut rng = stream(3, "t", 0);
        // Backend 2 has 9 waiting: vetoed, though its scrape is not the highest score.
        // First pick: backend 0 (0 < 1); it then counts 1, ties with backend 1, and the
        // next picks alternate by the tie draw but never go to backend 2.
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 0);
        let mut seen = [0u32; 3];
        for _ in 0..40 {
            seen[p.route(&req(None, &[]), &f.view(), &mut rng).pos] += 1;
        }
        assert_eq!(seen[2], 0, "{seen:?}");
        assert!(
            seen[0].abs_diff(seen[1]) <= 2,
            "{seen:?}: dispatches since the scrape balance them"
        );
        // Its own in-flight count is a floor under a stale scrape.
        let f = ViewFixture::new(2)
            .loads(&[(0, 0), (0, 0)])
            .in_flight(&[Some(5), Some(0)]);
        let mut p = PowerOfD::new(2, LoadSource::Smg);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 1);
    }
}
