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
//! in-flight)`, each request priced at 1,024 mean prefill tokens over smg's default 2,000
//! tokens/s (vLLM's `/metrics` reports no generation throughput), plus
//! `kv_pressure_weight_s * k / (1 - k)` for the scraped KV usage `k`
//! (`worker/expected_wait.rs`; smg's `--least-load-kv-pressure-weight` is 0.15 s, the
//! model's default 0 leaves the term out), from `/metrics` polled every
//! `--load-monitor-interval` (10 s, `router.engine_stats_interval_s` here); a worker whose
//! last poll showed 8 or more waiting, or KV usage of 0.8 or more, is vetoed (unless all
//! are); scores within a microsecond are drawn at random. With `d` at least the fleet size it
//! is smg's `least_load`.

use super::kind::{Doc, Fleet, PolicyKind, Upstream, param};
use super::leastrequest::local_loads;
use super::load_since_scrape::SentSinceScrape;
use super::params::{ParamError, count, finite_non_negative};
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
/// smg's `--worker-overload-token-usage` default: a worker whose last poll showed this KV
/// usage is not routed to.
pub const SMG_OVERLOAD_KV_USAGE: f64 = 0.8;
/// smg's expected wait of one request, seconds: `--least-load-mean-prefill-tokens` (1,024)
/// over `--least-load-default-throughput` (2,000 tokens/s).
const SMG_SECONDS_PER_REQUEST: f64 = 1024.0 / 2000.0;
/// smg's tie width, seconds (`least_load.rs`: scores this close are one tie).
const SMG_TIE_S: f64 = 1e-6;

/// KV usage of a scraped entry, in `[0, 1]` (0 when the total is unknown).
pub fn kv_usage(e: &crate::view::EngineStatsEntry) -> f64 {
    if e.kv_total_blocks == 0 {
        return 0.0;
    }
    (f64::from(e.kv_used_blocks) / f64::from(e.kv_total_blocks)).clamp(0.0, 1.0)
}

/// True if smg's overload guard vetoes a worker whose last poll was `e`
/// (`worker/overload.rs`: waiting >= 8 or KV usage >= 0.8).
pub fn smg_vetoed(e: &crate::view::EngineStatsEntry) -> bool {
    e.waiting >= SMG_OVERLOAD_WAITING || kv_usage(e) >= SMG_OVERLOAD_KV_USAGE
}

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
    /// smg's KV-pressure weight, seconds (`load = "smg"`; 0: no KV term).
    kv_weight_s: f64,
}

impl PowerOfD {
    /// The policy with no dispatch history.
    pub fn new(d: u32, load: LoadSource) -> Self {
        PowerOfD {
            d,
            load,
            sent: SentSinceScrape::default(),
            kv_weight_s: 0.0,
        }
    }

    /// With smg's KV-pressure weight (seconds).
    pub fn with_kv_weight(mut self, kv_weight_s: f64) -> Self {
        self.kv_weight_s = kv_weight_s;
        self
    }

    /// smg's expected wait per endpoint, and who the overload veto leaves (all if none).
    fn smg_loads(&mut self, view: &RouterView) -> (Vec<f64>, Vec<usize>) {
        smg_scores(view, &mut self.sent, self.kv_weight_s)
    }
}

/// smg's expected wait per endpoint, seconds (module doc), from the last poll and `sent`,
/// this router's dispatches since it; and who the overload veto leaves (all if none).
pub fn smg_scores(view: &RouterView, sent: &mut SentSinceScrape, kv_weight_s: f64) -> (Vec<f64>, Vec<usize>) {
    let local = local_loads(view);
    let n = view.endpoints.len();
    let mut l = Vec::with_capacity(n);
    let mut ok = Vec::with_capacity(n);
    for (i, e) in view.engine_stats.iter().enumerate() {
        // Without a poll yet, smg scores by in-flight alone (join-shortest-queue).
        let score = match e {
            Some(e) => {
                let since = sent.since(view.endpoints[i].backend.index(), e.read_at);
                let requests = (u64::from(e.running) + u64::from(e.waiting) + since).max(local[i]);
                let k = kv_usage(e).min(0.999);
                requests as f64 * SMG_SECONDS_PER_REQUEST + kv_weight_s * k / (1.0 - k)
            }
            None => local[i] as f64 * SMG_SECONDS_PER_REQUEST,
        };
        l.push(score);
        if e.is_none_or(|e| !smg_vetoed(&e)) {
            ok.push(i);
        }
    }
    if ok.is_empty() {
        ok = (0..n).collect();
    }
    (l, ok)
}

/// smg's pick among `cands` by `scores`: the least, scores within a microsecond drawn
/// uniformly (its reservoir).
pub fn smg_argmin(cands: &[usize], scores: &[f64], rng: &mut SimRng) -> usize {
    let min = cands.iter().map(|&i| scores[i]).fold(f64::INFINITY, f64::min);
    let tied: Vec<usize> = cands
        .iter()
        .copied()
        .filter(|&i| scores[i] - min <= SMG_TIE_S)
        .collect();
    tied[crate::dist::uniform_index(rng, tied.len())]
}

impl RoutingPolicy for PowerOfD {
    fn route(&mut self, _req: &RequestInfo, view: &RouterView, rng: &mut SimRng) -> Decision {
        let n = view.endpoints.len();
        let (l, eligible, tie_width) = match self.load {
            LoadSource::Smg => {
                let (l, ok) = self.smg_loads(view);
                (l, ok, SMG_TIE_S)
            }
            other => (
                loads(view, other).into_iter().map(|x| x as f64).collect(),
                (0..n).collect(),
                0.0,
            ),
        };
        let picks = sample(rng, eligible.len(), (self.d as usize).min(eligible.len()));
        let mut best = eligible[picks.index(0)];
        let mut tied = 1u32;
        for i in picks.iter().skip(1).map(|k| eligible[k]) {
            if l[i] < l[best] - tie_width {
                (best, tied) = (i, 1);
            } else if self.load == LoadSource::Smg && (l[i] - l[best]).abs() <= tie_width {
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
    #[serde(default)]
    kv_pressure_weight_s: f64,
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
    /// smg's KV-pressure weight, seconds (`load = "smg"` only; 0: no KV term).
    pub kv_pressure_weight_s: f64,
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
            param(
                "kv_pressure_weight_s",
                "0",
                "load = \"smg\": seconds added per k / (1 - k) of scraped KV usage k (smg's --least-load-kv-pressure-weight is 0.15)",
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
        let kv_pressure_weight_s = finite_non_negative(p.kv_pressure_weight_s, "kv_pressure_weight_s")?;
        if kv_pressure_weight_s > 0.0 && load != LoadSource::Smg {
            return Err(ParamError::new(
                "kv_pressure_weight_s",
                "applies only to load = \"smg\"",
            ));
        }
        Ok(Config {
            d: count(p.d, "d", 1)?,
            load,
            kv_pressure_weight_s,
        })
    }
    fn describe(c: &Config) -> String {
        let kv = if c.kv_pressure_weight_s > 0.0 {
            format!(", kv_pressure_weight_s = {}", c.kv_pressure_weight_s)
        } else {
            String::new()
        };
        format!("d = {}, load = {}{kv}", c.d, c.load.as_str())
    }
    fn build(c: &Config) -> Box<dyn RoutingPolicy> {
        Box::new(PowerOfD::new(c.d, c.load).with_kv_weight(c.kv_pressure_weight_s))
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

    #[test]
    fn smg_kv_pressure_breaks_equal_counts_and_kv_vetoes() {
        // Both at 1 request; backend 0 at KV 0.5 (0.15 s), backend 1 at 0.2 (0.0375 s).
        let mut f = ViewFixture::new(3).loads(&[(1, 0), (1, 0), (0, 0)]).at(5.0);
        for (e, used) in f.engine.iter_mut().zip([50, 20, 90]) {
            let e = e.as_mut().unwrap();
            (e.kv_used_blocks, e.kv_total_blocks) = (used, 100);
        }
        // Backend 2 is idle but at KV 0.9: vetoed.
        let mut p = PowerOfD::new(3, LoadSource::Smg).with_kv_weight(0.15);
        let mut rng = stream(4, "t", 0);
        assert_eq!(p.route(&req(None, &[]), &f.view(), &mut rng).pos, 1);
        // Without the weight the two tie and either may win, never backend 2.
        let mut seen = [0u32; 3];
        for _ in 0..20 {
            let mut p = PowerOfD::new(3, LoadSource::Smg);
            seen[p.route(&req(None, &[]), &f.view(), &mut rng).pos] += 1;
        }
        assert!(seen[0] > 0 && seen[1] > 0 && seen[2] == 0, "{seen:?}");
    }
}
