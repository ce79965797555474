//! `power_of_d`: sample `d` distinct endpoints uniformly, send to the least loaded of them;
//! ties go to the first sampled (SGLang `power_of_two` and AIBrix `power-of-two` compare with
//! `<=`). With `d = 2` and `load = "sglang_monitor"` this is SGLang's classic
//! `power_of_two`: its LoadMonitor polls `GET /get_load` every
//! `worker_load_check_interval` (10 s), which vLLM workers do not serve, so every load reads
//! -1, every pair ties, and the policy is uniform random (sgl-project/sglang
//! `sgl-router/src/policies/power_of_two.rs`, `sgl-router/src/core/worker_manager.rs`).

use super::kind::{Doc, Fleet, PolicyKind, param};
use super::leastrequest::local_loads;
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
}

impl LoadSource {
    /// Name as written in scenarios.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadSource::Local => "local",
            LoadSource::Scraped => "scraped",
            LoadSource::SglangMonitor => "sglang_monitor",
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
    }
}

/// The policy.
pub struct PowerOfD {
    /// Endpoints sampled per decision (capped at the fleet size).
    pub d: u32,
    /// Load signal.
    pub load: LoadSource,
}

impl RoutingPolicy for PowerOfD {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let n = view.endpoints.len();
        let l = loads(view, self.load);
        let picks = sample(rng, n, (self.d as usize).min(n));
        let mut best = picks.index(0);
        for i in picks.iter().skip(1) {
            if l[i] < l[best] {
                best = i;
            }
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
                  router.engine_stats_interval_s), or \"sglang_monitor\" (GET /get_load every 10 s, which vLLM \
                  does not serve: -1 everywhere, so uniform random)",
        params: &[
            param("d", "2", "endpoints sampled per decision"),
            param("load", "\"local\"", "\"local\", \"scraped\" or \"sglang_monitor\""),
        ],
    };
    type Params = Params;
    type Config = Config;
    fn validate(p: Params, _: &Fleet) -> Result<Config, ParamError> {
        let load = match p.load.as_str() {
            "local" => LoadSource::Local,
            "scraped" => LoadSource::Scraped,
            "sglang_monitor" => LoadSource::SglangMonitor,
            other => {
                return Err(ParamError::new(
                    "load",
                    format!("unknown load `{other}`; expected `local`, `scraped` or `sglang_monitor`"),
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
        Box::new(PowerOfD { d: c.d, load: c.load })
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
        let mut p = PowerOfD {
            d: 2,
            load: LoadSource::Local,
        };
        let mut rng = stream(1, "t", 0);
        for _ in 0..200 {
            assert_ne!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 2);
        }
        // d = n is the strict argmin.
        let mut p = PowerOfD {
            d: 3,
            load: LoadSource::Local,
        };
        let f = ViewFixture::new(3).in_flight(&[Some(4), Some(2), Some(3)]);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 1);
    }

    #[test]
    fn scraped_load_and_the_sglang_monitor_failure() {
        let f = ViewFixture::new(2).loads(&[(4, 4), (0, 0)]);
        let mut p = PowerOfD {
            d: 2,
            load: LoadSource::Scraped,
        };
        let mut rng = stream(2, "t", 0);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 1);
        // Every load -1: the first sampled wins, which is uniform over endpoints.
        let mut p = PowerOfD {
            d: 2,
            load: LoadSource::SglangMonitor,
        };
        let mut counts = [0u32; 2];
        for _ in 0..2000 {
            counts[p.route(&req(None, &[]), &f.view(), &mut rng).pos] += 1;
        }
        assert!(
            (900..=1100).contains(&counts[0]),
            "{counts:?}: the loaded backend gets half"
        );
    }
}
