//! Autoscalers in the loop: Kubernetes' HPA ([`hpa`]) and KEDA's ScaledObject ([`keda`])
//! reading vLLM's series as Prometheus scraped them ([`query`], [`Prometheus`]), and the
//! pods they create and delete ([`Pods`]): a new replica costs GPU time from its creation,
//! serves only after its start-up, and is listed by the router only if its discovery
//! would list it; a replica scaled down is unlisted at once and killed after its drain.
//!
//! Owns: the controllers' arithmetic, the scraped samples, the pods' lifecycle and their
//! cost. May not see: the router, policies or engines (the simulation hands it gauges and
//! applies its decisions as membership changes). Invariant: every decision is taken in an
//! event on the `(time, seq)` queue from values scraped at earlier or equal instants, so a
//! run with an autoscaler is as deterministic as one without.

pub mod hpa;
pub mod keda;
pub mod query;

use serde::Serialize;

use crate::ids::BackendId;
use crate::time::{SimDuration, SimTime};
use hpa::HpaSpec;
use keda::KedaSpec;
use query::{Gauge, Query, QueryResult, SeriesValue};

/// Which controller.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A HorizontalPodAutoscaler on an External or Object metric (prometheus-adapter).
    Hpa,
    /// A KEDA ScaledObject with one Prometheus trigger (its poll loop and its HPA).
    Keda(KedaSpec),
}

/// How the router learns of pods (production-stack's `--service-discovery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// `k8s` (pod IP): a pod is listed once Ready, unlisted once terminating.
    Kubernetes,
    /// `static`: the `--static-backends` list, never a new pod.
    Static,
}

/// A price per GPU-hour and where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Price {
    /// The GPU (`h100`, ...).
    pub gpu: String,
    /// Dollars per GPU-hour.
    pub usd_per_gpu_hour: f64,
    /// Where the price comes from.
    pub source: String,
}

/// A validated `[autoscaler]`.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscalerConfig {
    /// HPA or KEDA.
    pub kind: Kind,
    /// The trigger's query.
    pub query: Query,
    /// The HPA (KEDA's, for a ScaledObject).
    pub hpa: HpaSpec,
    /// Replicas at time zero (the first backends; the rest of the pool starts absent).
    pub initial_replicas: u32,
    /// kube-controller-manager's `--horizontal-pod-autoscaler-sync-period` (15 s).
    pub sync_period: SimDuration,
    /// KEDA's `pollingInterval` (30 s).
    pub polling_interval: SimDuration,
    /// Prometheus' scrape interval (production-stack's ServiceMonitor: 30 s).
    pub scrape_interval: SimDuration,
    /// Prometheus' lookback delta (5 min).
    pub lookback: SimDuration,
    /// Pod creation to Ready: scheduling, image, weights, engine start, probes.
    pub startup: SimDuration,
    /// `terminationGracePeriodSeconds` (30 s).
    pub grace: SimDuration,
    /// vLLM `--shutdown-timeout` (0: in-flight requests are cut at SIGTERM).
    pub drain: SimDuration,
    /// The router's discovery.
    pub discovery: Discovery,
    /// The series' `model_name` label.
    pub model_name: String,
    /// GPUs per replica (tensor parallelism).
    pub gpus_per_replica: u32,
    /// The GPU's price.
    pub price: Price,
}

impl AutoscalerConfig {
    /// Backend names as the series' `pod` label carries them, for `labels`.
    pub fn labels(&self, pods: &[(String, String)]) -> Vec<Vec<(String, String)>> {
        pods.iter()
            .map(|(name, _)| {
                vec![
                    ("model_name".to_string(), self.model_name.clone()),
                    ("engine".to_string(), "0".to_string()),
                    ("pod".to_string(), name.clone()),
                ]
            })
            .collect()
    }
}

/// The gauges one scrape of one pod took.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// `vllm:num_requests_waiting`.
    pub waiting: f64,
    /// `vllm:num_requests_running`.
    pub running: f64,
    /// `vllm:kv_cache_usage_perc`.
    pub kv_usage: f64,
}

/// Prometheus' latest sample per pod.
#[derive(Clone, Debug)]
pub struct Prometheus {
    latest: Vec<Option<(SimTime, Sample)>>,
    labels: Vec<Vec<(String, String)>>,
    lookback: SimDuration,
}

impl Prometheus {
    /// No samples yet, for pods with these labels.
    pub fn new(labels: Vec<Vec<(String, String)>>, lookback: SimDuration) -> Prometheus {
        Prometheus {
            latest: vec![None; labels.len()],
            labels,
            lookback,
        }
    }

    /// A scrape of pod `b` at `t`.
    pub fn scrape(&mut self, b: BackendId, t: SimTime, s: Sample) {
        self.latest[b.index()] = Some((t, s));
    }

    /// Pod `b` went away: its staleness marker drops the series at once.
    pub fn stale(&mut self, b: BackendId) {
        self.latest[b.index()] = None;
    }

    /// The instant query `q` at `now`.
    pub fn query(&self, q: &Query, now: SimTime) -> QueryResult {
        q.eval(&self.series(q.gauge, now))
    }

    /// The sum of every series `q` selects (an External `Value` metric through
    /// prometheus-adapter sums what it is given), or `None` when none is.
    pub fn total(&self, q: &Query, now: SimTime) -> Option<f64> {
        let s = self.series(q.gauge, now);
        let vals: Vec<f64> = s.iter().filter(|x| q.selects(x.labels)).map(|x| x.value).collect();
        (!vals.is_empty()).then(|| vals.iter().sum())
    }

    fn series(&self, g: Gauge, now: SimTime) -> Vec<SeriesValue<'_>> {
        self.latest
            .iter()
            .zip(&self.labels)
            .filter_map(|(s, labels)| {
                let (t, s) = (*s)?;
                if t > now || now.0.saturating_sub(t.0) > self.lookback.0 {
                    return None;
                }
                let value = match g {
                    Gauge::Waiting => s.waiting,
                    Gauge::Running => s.running,
                    Gauge::KvUsage => s.kv_usage,
                };
                Some(SeriesValue { labels, value })
            })
            .collect()
    }
}

/// A pod's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No pod.
    Off,
    /// Created, not Ready yet.
    Starting,
    /// Ready (serving if listed).
    Ready,
    /// Deleted: unlisted, draining until killed.
    Terminating,
}

/// One backend slot's pod.
#[derive(Clone, Debug)]
pub struct Pod {
    /// Phase.
    pub phase: Phase,
    /// Bumped at every creation and deletion: events of an older one are stale.
    pub generation: u32,
    /// Created at.
    pub created: SimTime,
    /// Ready at.
    pub ready_at: Option<SimTime>,
    /// Requests routed to the backend when this pod was created (to tell if it served).
    pub served_before: u64,
    /// Created by a scale-up (not one of the initial replicas).
    pub added: bool,
    /// Pod-seconds of earlier pods on this slot, ns.
    pub past_ns: u128,
}

/// The pool's pods, by backend, and what they cost.
#[derive(Clone, Debug)]
pub struct Pods {
    /// By backend.
    pub pods: Vec<Pod>,
    /// Pods added by scale-ups that served no request before they went (or by the end).
    pub never_served: u64,
    /// Requests cut by scale-downs.
    pub cut_requests: u64,
}

impl Pods {
    /// `initial` Ready pods, the rest of `n` absent.
    pub fn new(n: usize, initial: u32) -> Pods {
        Pods {
            pods: (0..n)
                .map(|i| Pod {
                    phase: if (i as u32) < initial { Phase::Ready } else { Phase::Off },
                    generation: 0,
                    created: SimTime::ZERO,
                    ready_at: ((i as u32) < initial).then_some(SimTime::ZERO),
                    served_before: 0,
                    added: false,
                    past_ns: 0,
                })
                .collect(),
            never_served: 0,
            cut_requests: 0,
        }
    }

    /// `spec.replicas` as written: pods not terminating.
    pub fn replicas(&self) -> u32 {
        self.pods
            .iter()
            .filter(|p| matches!(p.phase, Phase::Starting | Phase::Ready))
            .count() as u32
    }

    /// Ready pods.
    pub fn ready(&self) -> u32 {
        self.pods.iter().filter(|p| p.phase == Phase::Ready).count() as u32
    }

    /// The slot a new pod takes: the first with no pod.
    pub fn free_slot(&self) -> Option<BackendId> {
        self.pods
            .iter()
            .position(|p| p.phase == Phase::Off)
            .map(BackendId::from_index)
    }

    /// The pod a scale-down deletes (`ActivePodsWithRanks`): not-ready before ready, then
    /// the most recently ready, then the newest (the highest slot on ties).
    pub fn victim(&self) -> Option<BackendId> {
        let rank = |p: &Pod| match p.phase {
            Phase::Starting => Some((0u8, u64::MAX - p.created.0)),
            Phase::Ready => Some((1, u64::MAX - p.ready_at.unwrap_or(SimTime::ZERO).0)),
            _ => None,
        };
        self.pods
            .iter()
            .enumerate()
            .filter_map(|(i, p)| rank(p).map(|r| (r, std::cmp::Reverse(i))))
            .min()
            .map(|(_, std::cmp::Reverse(i))| BackendId::from_index(i))
    }

    /// Pod-seconds of slot `b` up to `now`, ns.
    pub fn pod_ns(&self, b: BackendId, now: SimTime) -> u128 {
        let p = &self.pods[b.index()];
        let open = match p.phase {
            Phase::Off => 0,
            _ => u128::from(now.0.saturating_sub(p.created.0)),
        };
        p.past_ns + open
    }
}

/// One scale decision, with its cause.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ScaleEvent {
    /// When, seconds.
    pub t_s: f64,
    /// `hpa` or `keda`.
    pub by: String,
    /// Replicas before.
    pub from: u32,
    /// Replicas after.
    pub to: u32,
    /// The metric value the decision read, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<f64>,
    /// The controller's reason (`DesiredWithinRange`, `ScaleUpLimit`, ... or KEDA's).
    pub reason: String,
}

/// The replica counts after a change.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ReplicaPoint {
    /// When, seconds.
    pub t_s: f64,
    /// Pods not terminating (`spec.replicas`).
    pub replicas: u32,
    /// Of those, Ready.
    pub ready: u32,
}

/// Per backend: what its pods cost.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct BackendCost {
    /// Pod-seconds (creation to deletion).
    pub replica_seconds: f64,
    /// Of those, seconds Ready with nothing running or waiting while another backend
    /// queued.
    pub replica_seconds_idle_while_queued: f64,
}

/// The autoscaler's share of `summary.json` (present only with `[autoscaler]`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct AutoscaleSummary {
    /// `hpa` or `keda`.
    pub autoscaler: String,
    /// The trigger's query.
    pub autoscaler_query: String,
    /// Pod-seconds over the run, all pods (creation to deletion or the end).
    pub replica_seconds: f64,
    /// Pod-seconds Ready and idle while another backend queued.
    pub replica_seconds_idle_while_queued: f64,
    /// `replica_seconds x gpus_per_replica`.
    pub gpu_seconds: f64,
    /// `replica_seconds_idle_while_queued x gpus_per_replica`.
    pub gpu_seconds_idle_while_queued: f64,
    /// GPUs per replica.
    pub gpus_per_replica: u32,
    /// The price per GPU-hour used.
    pub usd_per_gpu_hour: f64,
    /// Where the price comes from.
    pub price_source: String,
    /// `gpu_seconds / 3600 x usd_per_gpu_hour`.
    pub cost_usd: f64,
    /// `cost_usd` per 1,000 finished requests (0 when none finished).
    pub cost_per_1k_requests_usd: f64,
    /// Scale-ups (decisions that raised the count).
    pub scale_ups: u64,
    /// Scale-downs.
    pub scale_downs: u64,
    /// Pods added by scale-ups that served no request.
    pub replicas_never_served: u64,
    /// Most replicas at once (`spec.replicas`).
    pub peak_replicas: u32,
    /// Requests in flight on a pod when a scale-down killed it.
    pub requests_cut_by_scale_down: u64,
    /// Every scale decision, in time order.
    pub scale_events: Vec<ScaleEvent>,
    /// Replicas and Ready replicas over time (from time zero, one point per change).
    pub replica_timeline: Vec<ReplicaPoint>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_victim_is_a_loading_pod_then_the_most_recently_ready() {
        let mut p = Pods::new(4, 2);
        assert_eq!((p.replicas(), p.ready(), p.free_slot()), (2, 2, Some(BackendId(2))));
        p.pods[2].phase = Phase::Ready;
        p.pods[2].ready_at = Some(SimTime(50));
        p.pods[3].phase = Phase::Starting;
        p.pods[3].created = SimTime(60);
        assert_eq!(p.victim(), Some(BackendId(3)), "not ready first");
        p.pods[3].phase = Phase::Off;
        assert_eq!(p.victim(), Some(BackendId(2)), "then the most recently ready");
        p.pods[2].phase = Phase::Off;
        assert_eq!(p.victim(), Some(BackendId(1)), "ties: the highest slot");
    }

    #[test]
    fn prometheus_drops_stale_and_old_samples() {
        let labels = vec![
            vec![("pod".to_string(), "a".to_string())],
            vec![("pod".to_string(), "b".to_string())],
        ];
        let mut p = Prometheus::new(labels, SimDuration(100));
        let q = Query::parse("sum(vllm:num_requests_waiting)").unwrap();
        assert_eq!(p.query(&q, SimTime(0)), QueryResult::Empty);
        let s = |w| Sample {
            waiting: w,
            ..Sample::default()
        };
        p.scrape(BackendId(0), SimTime(10), s(3.0));
        p.scrape(BackendId(1), SimTime(20), s(4.0));
        assert_eq!(p.query(&q, SimTime(20)), QueryResult::One(7.0));
        assert_eq!(
            p.query(&q, SimTime(115)),
            QueryResult::One(4.0),
            "a's sample is past the lookback"
        );
        p.stale(BackendId(1));
        assert_eq!(p.query(&q, SimTime(30)), QueryResult::One(3.0));
        let bare = Query::parse("vllm:num_requests_waiting").unwrap();
        p.scrape(BackendId(1), SimTime(40), s(1.0));
        assert_eq!(p.query(&bare, SimTime(40)), QueryResult::Many(2));
        assert_eq!(p.total(&bare, SimTime(40)), Some(4.0));
    }
}
