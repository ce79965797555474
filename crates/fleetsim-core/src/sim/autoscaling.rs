//! The autoscaler in the loop (`[autoscaler]`): Prometheus scrapes, the HPA's reconciles and
//! KEDA's polls as events, and the pods they create and delete as membership changes. The
//! arithmetic is [`crate::autoscale`]'s; this file only wires it to the run.
//!
//! Order at one instant: the three loops are first scheduled at time zero in the order
//! scrape, poll, sync and each reschedules itself when it runs, so at a shared instant the
//! scrape runs first, then KEDA's poll, then the HPA (the order the worked sequences
//! assume).

use super::{Event, Simulation};
use crate::autoscale::hpa::{Counts, Hpa, MetricTarget};
use crate::autoscale::keda::{Keda, trigger_value};
use crate::autoscale::query::QueryResult;
use crate::autoscale::{
    AutoscaleSummary, AutoscalerConfig, BackendCost, Discovery, Kind, Phase, Pods, Prometheus, ReplicaPoint, Sample,
    ScaleEvent,
};
use crate::fleet::{FleetEventKind, Membership};
use crate::ids::BackendId;
use crate::metrics::round6;
use crate::time::{SimDuration, SimTime};

/// The autoscaler's state in a run.
pub(super) struct Scaler {
    cfg: AutoscalerConfig,
    prom: Prometheus,
    hpa: Hpa,
    keda: Option<Keda>,
    pub(super) pods: Pods,
    events: Vec<ScaleEvent>,
    timeline: Vec<ReplicaPoint>,
    peak: u32,
}

impl Scaler {
    /// The autoscaler over a pool of `backends`, its first `initial_replicas` running.
    pub(super) fn new(cfg: AutoscalerConfig, backends: &[(String, String)]) -> Scaler {
        let prom = Prometheus::new(cfg.labels(backends), cfg.lookback);
        let keda = match &cfg.kind {
            Kind::Keda(spec) => Some(Keda::new(spec.clone(), SimTime::ZERO)),
            Kind::Hpa => None,
        };
        Scaler {
            prom,
            hpa: Hpa::new(cfg.hpa.clone()),
            keda,
            pods: Pods::new(backends.len(), cfg.initial_replicas),
            events: Vec::new(),
            timeline: vec![ReplicaPoint {
                t_s: 0.0,
                replicas: cfg.initial_replicas,
                ready: cfg.initial_replicas,
            }],
            peak: cfg.initial_replicas,
            cfg,
        }
    }

    /// The loops' first events, at time zero: scrape, poll, sync.
    pub(super) fn first_events(&self) -> Vec<Event> {
        let mut v = vec![Event::PromScrape];
        if self.keda.is_some() {
            v.push(Event::KedaPoll);
        }
        v.push(Event::HpaSync);
        v
    }

    /// Notes the replica counts at `now` (one point per instant: the last one wins).
    fn note(&mut self, now: SimTime) {
        let p = ReplicaPoint {
            t_s: round6(now.as_secs_f64()),
            replicas: self.pods.replicas(),
            ready: self.pods.ready(),
        };
        match self.timeline.last_mut() {
            Some(last) if last.t_s == p.t_s => *last = p,
            Some(last) if last.replicas == p.replicas && last.ready == p.ready => {}
            _ => self.timeline.push(p),
        }
    }

    /// The value the HPA is handed at `now`, or `None` when its fetch fails.
    fn hpa_metric(&mut self, now: SimTime, ready: u32) -> Option<f64> {
        let q = &self.cfg.query;
        let (target, kind) = (self.cfg.hpa.target, self.cfg.hpa.metric_target);
        match &mut self.keda {
            Some(k) => {
                let ignore = matches!(&self.cfg.kind, Kind::Keda(s) if s.ignore_null_values);
                let v = trigger_value(&self.prom.query(q, now), ignore);
                k.hpa_fetch(v, |n| match kind {
                    MetricTarget::AverageValue => target * f64::from(n),
                    MetricTarget::Value => target * f64::from(n) / f64::from(ready.max(1)),
                })
            }
            // prometheus-adapter: an aggregate's one value, else the sum of the series
            // (External metrics add up what they are given); nothing is an error.
            None if q.agg.is_some() => match self.prom.query(q, now) {
                QueryResult::One(v) => Some(v),
                _ => None,
            },
            None => self.prom.total(q, now),
        }
    }
}

impl Simulation<'_> {
    fn scaler(&mut self) -> &mut Scaler {
        self.scaler.as_mut().expect("autoscaler events only with [autoscaler]")
    }

    /// Prometheus scrapes every Ready pod (its gauges as `/metrics` serves them).
    pub(super) fn on_prom_scrape(&mut self, now: SimTime) {
        let n = self.nodes.len();
        for i in 0..n {
            let b = BackendId::from_index(i);
            if self.scaler().pods.pods[i].phase != Phase::Ready {
                continue;
            }
            self.catch_up(b);
            let lag = self.cfg.gauge_lag.0;
            let g = if lag > 0 {
                self.nodes[i].gauges.at(SimTime(now.0.saturating_sub(lag)))
            } else {
                self.engines.get(b).gauges()
            };
            let s = Sample {
                waiting: f64::from(g.waiting),
                running: f64::from(g.running),
                kv_usage: g.kv_usage(),
            };
            self.scaler().prom.scrape(b, now, s);
        }
        let every = self.scaler().cfg.scrape_interval;
        self.schedule(now, every, Event::PromScrape);
    }

    /// The HPA's reconcile.
    pub(super) fn on_hpa_sync(&mut self, now: SimTime) {
        let sc = self.scaler();
        let c = Counts {
            spec: sc.pods.replicas(),
            status: sc.pods.replicas(),
            ready: sc.pods.ready(),
        };
        let metric = sc.hpa_metric(now, c.ready);
        let d = sc.hpa.sync(now, c, metric);
        let every = sc.cfg.sync_period;
        if d.desired != c.spec {
            self.scale(now, d.desired, "hpa", metric, d.reason);
        }
        self.schedule(now, every, Event::HpaSync);
    }

    /// KEDA's poll (0 <-> 1, cooldown).
    pub(super) fn on_keda_poll(&mut self, now: SimTime) {
        let sc = self.scaler();
        let ignore = matches!(&sc.cfg.kind, Kind::Keda(s) if s.ignore_null_values);
        let v = trigger_value(&sc.prom.query(&sc.cfg.query, now), ignore);
        let current = sc.pods.replicas();
        let keda = sc.keda.as_mut().expect("KEDA polls only for kind = keda");
        let out = keda.poll(now, current, v);
        let every = sc.cfg.polling_interval;
        if let Some(n) = out.scale_to
            && n != current
        {
            self.scale(now, n, "keda", v.ok(), out.reason);
        }
        self.schedule(now, every, Event::KedaPoll);
    }

    /// Writes `spec.replicas = n`: pods created in the first free slots, or deleted in the
    /// ReplicaSet's order.
    fn scale(&mut self, now: SimTime, n: u32, by: &str, metric: Option<f64>, reason: &str) {
        let sc = self.scaler();
        let from = sc.pods.replicas();
        sc.events.push(ScaleEvent {
            t_s: round6(now.as_secs_f64()),
            by: by.to_string(),
            from,
            to: n,
            metric: metric.map(round6),
            reason: reason.to_string(),
        });
        sc.peak = sc.peak.max(n);
        while self.scaler().pods.replicas() < n {
            let Some(b) = self.scaler().pods.free_slot() else {
                break;
            };
            self.create_pod(now, b);
        }
        while self.scaler().pods.replicas() > n {
            let Some(b) = self.scaler().pods.victim() else {
                break;
            };
            self.delete_pod(now, b);
        }
        self.scaler().note(now);
    }

    fn create_pod(&mut self, now: SimTime, b: BackendId) {
        let routed = self.nodes[b.index()].routed;
        let sc = self.scaler();
        let p = &mut sc.pods.pods[b.index()];
        p.phase = Phase::Starting;
        p.generation += 1;
        p.created = now;
        p.ready_at = None;
        p.served_before = routed;
        p.added = true;
        let ev = Event::PodReady {
            backend: b,
            generation: p.generation,
        };
        let startup = sc.cfg.startup;
        self.schedule(now, startup, ev);
    }

    /// A new pod is Ready: Prometheus will scrape it, and Kubernetes discovery lists it.
    pub(super) fn on_pod_ready(&mut self, now: SimTime, b: BackendId, generation: u32) {
        let sc = self.scaler();
        let p = &mut sc.pods.pods[b.index()];
        if p.generation != generation || p.phase != Phase::Starting {
            return;
        }
        p.phase = Phase::Ready;
        p.ready_at = Some(now);
        sc.note(now);
        let listed = sc.cfg.discovery == Discovery::Kubernetes;
        self.fleet.set_pod_up(now, b, true);
        if listed {
            self.on_fleet_event(now, b, FleetEventKind::Join);
        }
    }

    /// A scale-down deletes pod `b`: a loading pod goes at once; a Ready one is unlisted,
    /// drops out of Prometheus, and is killed after its drain (`drain_s`, at most the
    /// grace period).
    fn delete_pod(&mut self, now: SimTime, b: BackendId) {
        let sc = self.scaler();
        let drain = sc.cfg.drain.min(sc.cfg.grace);
        let p = &mut sc.pods.pods[b.index()];
        p.generation += 1;
        let generation = p.generation;
        if p.phase == Phase::Starting {
            self.retire_pod(now, b);
            return;
        }
        p.phase = Phase::Terminating;
        sc.prom.stale(b);
        self.fleet.set_pod_up(now, b, false);
        if drain == SimDuration::ZERO {
            self.on_pod_kill(now, b, generation);
        } else {
            self.on_fleet_event(now, b, FleetEventKind::Drain);
            self.schedule(now, drain, Event::PodKill { backend: b, generation });
        }
    }

    /// SIGKILL (or the end of vLLM's shutdown timeout): what the pod still holds is cut.
    pub(super) fn on_pod_kill(&mut self, now: SimTime, b: BackendId, generation: u32) {
        let p = &self.scaler().pods.pods[b.index()];
        if p.generation != generation || p.phase != Phase::Terminating {
            return;
        }
        if self.nodes[b.index()].membership != Membership::Absent {
            let held = self
                .log
                .requests
                .held_ids()
                .filter(|&k| {
                    let r = &self.log.requests[k];
                    r.backend == b && r.t_engine.is_some() && r.t_finish_engine.is_none() && r.t_failed.is_none()
                })
                .count() as u64;
            self.scaler().pods.cut_requests += held;
            self.on_fleet_event(now, b, FleetEventKind::Leave);
        }
        self.retire_pod(now, b);
    }

    /// Pod `b` is gone: its seconds are closed, and whether it served is counted.
    fn retire_pod(&mut self, now: SimTime, b: BackendId) {
        let routed = self.nodes[b.index()].routed;
        let pods = &mut self.scaler().pods;
        let ns = pods.pod_ns(b, now);
        let p = &mut pods.pods[b.index()];
        if p.added && routed == p.served_before {
            pods.never_served += 1;
        }
        let p = &mut pods.pods[b.index()];
        p.past_ns = ns;
        p.phase = Phase::Off;
    }

    /// The autoscaler's summary block and per-backend costs at the end of the run.
    pub(super) fn autoscale_summary(
        &self,
        end: SimTime,
        finished: u64,
    ) -> Option<(AutoscaleSummary, Vec<BackendCost>)> {
        let sc = self.scaler.as_ref()?;
        let mut never = sc.pods.never_served;
        let mut costs = Vec::new();
        let (mut pod_ns, mut idle_ns) = (0u128, 0u128);
        for (i, p) in sc.pods.pods.iter().enumerate() {
            let b = BackendId::from_index(i);
            if p.phase != Phase::Off && p.added && self.nodes[i].routed == p.served_before {
                never += 1;
            }
            let ns = sc.pods.pod_ns(b, end);
            let idle = self.fleet.idle_while_queued_ns(b);
            pod_ns += ns;
            idle_ns += idle;
            costs.push(BackendCost {
                replica_seconds: round6(ns as f64 / 1e9),
                replica_seconds_idle_while_queued: round6(idle as f64 / 1e9),
            });
        }
        let gpus = f64::from(sc.cfg.gpus_per_replica);
        let gpu_s = pod_ns as f64 / 1e9 * gpus;
        let cost = gpu_s / 3600.0 * sc.cfg.price.usd_per_gpu_hour;
        let s = AutoscaleSummary {
            autoscaler: match sc.cfg.kind {
                Kind::Hpa => "hpa".into(),
                Kind::Keda(_) => "keda".into(),
            },
            autoscaler_query: sc.cfg.query.text.clone(),
            replica_seconds: round6(pod_ns as f64 / 1e9),
            replica_seconds_idle_while_queued: round6(idle_ns as f64 / 1e9),
            gpu_seconds: round6(gpu_s),
            gpu_seconds_idle_while_queued: round6(idle_ns as f64 / 1e9 * gpus),
            gpus_per_replica: sc.cfg.gpus_per_replica,
            usd_per_gpu_hour: sc.cfg.price.usd_per_gpu_hour,
            price_source: sc.cfg.price.source.clone(),
            cost_usd: round6(cost),
            cost_per_1k_requests_usd: if finished == 0 {
                0.0
            } else {
                round6(cost / finished as f64 * 1000.0)
            },
            scale_ups: sc.events.iter().filter(|e| e.to > e.from).count() as u64,
            scale_downs: sc.events.iter().filter(|e| e.to < e.from).count() as u64,
            replicas_never_served: never,
            peak_replicas: sc.peak,
            requests_cut_by_scale_down: sc.pods.cut_requests,
            scale_events: sc.events.clone(),
            replica_timeline: sc.timeline.clone(),
        };
        Some((s, costs))
    }
}
