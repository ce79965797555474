//! `sim run`'s per-backend plot: running and waiting requests over time, one panel per
//! backend, waiting stacked on running against the slot line, so the picture of burst8
//! (one backend idle while the other runs 4 and queues 4) reads at a glance: the running
//! area fills up to the slot line and the queue stands above it. The stretches of idle
//! while queued (some backend had a free slot while another queued) are shaded in every
//! panel. A run longer than [`ZOOM_FROM_S`] also gets its busiest hour drawn beside the
//! whole run at its own scale: on one scale a multi-day replay's busy hour is a spike a few
//! pixels wide.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Figure, PALETTE, Swatch, draw_legend_outside, font, pe, time_unit};
use crate::metrics::{Summary, TsRow};
use crate::sweep::table::fmt_stat;
use crate::time::ns_to_secs;

/// Backends drawn at most (the title says when more exist).
const MAX_BACKENDS: usize = 16;
/// Above this many changes per backend, the series is reduced to per-bin maxima.
const MAX_POINTS: usize = 4000;
const BINS: usize = 2000;

/// One backend's step series: `(t_s, running, waiting)` at each change.
type Steps = Vec<(f64, u32, u32)>;

/// One panel's data: the backend's name, its slot limit and its `(t_s, running, waiting)`
/// samples in time order.
pub type Panel = (String, u32, Vec<(f64, u32, u32)>);

/// Running/waiting per backend over time.
pub struct BackendSeries {
    title: String,
    end_s: f64,
    /// What the x axis measures, without its unit (`simulated time`).
    x_desc: String,
    /// Per panel, the backend's profile or group (empty for a plain `[backends]` table).
    captions: Vec<String>,
    panels: Vec<(String, u32, Steps)>,
    /// Stretches of idle while queued, seconds from the start, in time order (shaded).
    stranded: Vec<(f64, f64)>,
    /// A long run's busiest hour, drawn beside the whole run.
    zoom: Option<Zoom>,
    /// An autoscaled run's `(t_s, replicas, ready)` at each change (empty otherwise): drawn
    /// as a panel above the backends'.
    replicas: Steps,
}

/// Runs longer than this get a zoom column on their busiest hour.
pub const ZOOM_FROM_S: f64 = 6.0 * 3600.0;
/// The zoom column's window: an hour.
const ZOOM_S: f64 = 3600.0;

/// A window of a long run drawn at its own scale.
struct Zoom {
    from_s: f64,
    until_s: f64,
    /// Per panel, the changes inside the window (times from `from_s`), reduced.
    panels: Vec<Steps>,
}

impl Zoom {
    /// The busiest [`ZOOM_S`] of a run of `end_s` whose panels changed as `full` (exact
    /// changes or an envelope's bins), or None for a run short enough to read at one scale.
    fn of(full: &[Steps], end_s: f64) -> Option<Zoom> {
        if end_s <= ZOOM_FROM_S {
            return None;
        }
        let from_s = busiest(full, end_s, ZOOM_S);
        let until_s = from_s + ZOOM_S;
        Some(Zoom {
            from_s,
            until_s,
            panels: full.iter().map(|s| window(s, from_s, until_s)).collect(),
        })
    }
}

/// The start of the window of `width` seconds in `[0, end_s]` with the most requests in the
/// fleet (running + waiting, integrated over time); the earliest of equals. An optimal
/// window has an edge at a change, so only those are tried.
fn busiest(full: &[Steps], end_s: f64, width: f64) -> f64 {
    let mut deltas: Vec<(f64, i64)> = Vec::new();
    for steps in full {
        let mut prev = 0i64;
        for &(t, r, w) in steps {
            let v = i64::from(r) + i64::from(w);
            if v != prev {
                deltas.push((t, v - prev));
                prev = v;
            }
        }
    }
    deltas.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The fleet's level from each change on, and its integral up to each change.
    let mut level: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    let mut sum = 0i64;
    for (t, d) in deltas {
        sum += d;
        match level.last_mut() {
            Some(last) if last.0 == t => last.1 = sum as f64,
            _ => level.push((t, sum as f64)),
        }
    }
    let mut area = vec![0.0; level.len()];
    for i in 1..level.len() {
        area[i] = area[i - 1] + level[i - 1].1 * (level[i].0 - level[i - 1].0);
    }
    let upto = |x: f64| {
        let i = level.partition_point(|p| p.0 <= x).saturating_sub(1);
        area[i] + level[i].1 * (x - level[i].0)
    };
    let last_start = (end_s - width).max(0.0);
    let mut best = (f64::NEG_INFINITY, 0.0);
    let mut starts: Vec<f64> = level
        .iter()
        .flat_map(|p| [p.0, p.0 - width])
        .map(|a| a.clamp(0.0, last_start))
        .collect();
    starts.sort_by(f64::total_cmp);
    for a in starts {
        let v = upto(a + width) - upto(a);
        if v > best.0 {
            best = (v, a);
        }
    }
    best.1
}

/// The changes of `steps` within `[from_s, until_s]`, times from `from_s`, starting with the
/// value carried in, reduced for drawing.
fn window(steps: &Steps, from_s: f64, until_s: f64) -> Steps {
    let mut carried = (0u32, 0u32);
    let mut out: Steps = Vec::new();
    for &(t, r, w) in steps {
        if t <= from_s {
            carried = (r, w);
        } else if t <= until_s {
            if out.is_empty() {
                out.push((0.0, carried.0, carried.1));
            }
            out.push((t - from_s, r, w));
        } else {
            break;
        }
    }
    if out.is_empty() {
        out.push((0.0, carried.0, carried.1));
    }
    reduce(out, until_s - from_s)
}

/// The stretches of idle while queued in samples taken at `t_s` (`sim observe`): as
/// `sim observe` counts them, from one sample to the next while some backend with no queue
/// had a free slot and the fleet had a queue.
fn stranded_in_samples(panels: &[Panel]) -> Vec<(f64, f64)> {
    let Some(first) = panels.first() else {
        return Vec::new();
    };
    let mut out: Vec<(f64, f64)> = Vec::new();
    for k in 0..first.2.len().saturating_sub(1) {
        let at = |p: &Panel| p.2.get(k).map_or((0, 0), |s| (s.1, s.2));
        let queued = panels.iter().any(|p| at(p).1 > 0);
        let free = panels.iter().any(|p| at(p).1 == 0 && at(p).0 < p.1);
        if queued && free {
            let (a, b) = (first.2[k].0, first.2[k + 1].0);
            match out.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => out.push((a, b)),
            }
        }
    }
    out
}

/// Reduces a step series to at most [`BINS`] bins keeping each bin's maxima, so peaks
/// (the thing to see) survive.
fn reduce(steps: Steps, end_s: f64) -> Steps {
    if steps.len() <= MAX_POINTS || end_s <= 0.0 {
        return steps;
    }
    let width = end_s / BINS as f64;
    let mut out: Steps = Vec::with_capacity(BINS + 1);
    let (mut cur_r, mut cur_w) = (0u32, 0u32);
    let mut it = steps.into_iter().peekable();
    for b in 0..BINS {
        let (lo, hi) = (b as f64 * width, (b + 1) as f64 * width);
        let (mut mr, mut mw) = (cur_r, cur_w);
        while let Some(&(t, r, w)) = it.peek() {
            if t >= hi {
                break;
            }
            (cur_r, cur_w) = (r, w);
            mr = mr.max(r);
            mw = mw.max(w);
            it.next();
        }
        if b + 1 == BINS {
            // Samples at or after the last edge (the run's final changes) belong to the last bin.
            for (_, r, w) in it.by_ref() {
                (cur_r, cur_w) = (r, w);
                mr = mr.max(r);
                mw = mw.max(w);
            }
        }
        out.push((lo, mr, mw));
    }
    out.push((end_s, cur_r, cur_w));
    out
}

/// Changes of one backend the plot keeps exactly (16 bytes each); past them it keeps an
/// [`Envelope`] instead, so a plot of any run holds at most about 1 MB per panel. Far above
/// any committed run (burst8: 200 rows per backend).
const EXACT_POINTS: usize = 1 << 16;
/// Bins of an [`Envelope`]: at least 2 per bin of the drawn reduction ([`BINS`]) and at most 4.
const ENVELOPE_BINS: u64 = 4 * BINS as u64;

/// One bin of an [`Envelope`]: the highest running and waiting counts reached in it and the
/// last values set in it (`None`: no change fell in it).
#[derive(Clone, Copy, Default)]
struct Bin {
    max: (u32, u32),
    last: Option<(u32, u32)>,
}

impl Bin {
    fn merge(self, later: Bin) -> Bin {
        match (self.last, later.last) {
            (None, _) => later,
            (_, None) => self,
            (Some(_), Some(_)) => Bin {
                max: (self.max.0.max(later.max.0), self.max.1.max(later.max.1)),
                last: later.last,
            },
        }
    }
}

/// A backend's changes as per-bin maxima over equal bins of `width_ns` (a power of two,
/// doubled, merging neighbours, whenever a change falls past the last bin), so what it holds
/// stays [`ENVELOPE_BINS`] bins whatever the run's length.
struct Envelope {
    width_ns: u64,
    bins: Vec<Bin>,
}

impl Envelope {
    fn new(first_t_ns: u64) -> Envelope {
        let mut width_ns = 1;
        while first_t_ns / width_ns >= ENVELOPE_BINS {
            width_ns *= 2;
        }
        Envelope {
            width_ns,
            bins: vec![Bin::default(); ENVELOPE_BINS as usize],
        }
    }

    fn push(&mut self, t_ns: u64, running: u32, waiting: u32) {
        while t_ns / self.width_ns >= ENVELOPE_BINS {
            let merged: Vec<Bin> = self.bins.chunks(2).map(|p| p[0].merge(p[1])).collect();
            self.bins = merged;
            self.bins.resize(ENVELOPE_BINS as usize, Bin::default());
            self.width_ns *= 2;
        }
        let b = &mut self.bins[(t_ns / self.width_ns) as usize];
        *b = b.merge(Bin {
            max: (running, waiting),
            last: Some((running, waiting)),
        });
    }

    /// The envelope as steps: each bin with a change at its start, at its maxima, then the
    /// last value (what the zoom column reads of a run past [`EXACT_POINTS`]).
    fn steps(&self) -> Steps {
        let mut out: Steps = vec![(0.0, 0, 0)];
        for (j, b) in self.bins.iter().enumerate() {
            if let Some(last) = b.last {
                let t = ns_to_secs(j as u64 * self.width_ns);
                out.push((t, b.max.0, b.max.1));
                out.push((ns_to_secs((j as u64 + 1) * self.width_ns), last.0, last.1));
            }
        }
        out
    }

    /// The drawn reduction, as [`reduce`] draws exact changes: [`BINS`] bins of the run, each
    /// with the maxima of the envelope bins starting in it and of the value carried in. An
    /// envelope bin straddling a drawn bin's edge counts wholly in the one it starts in, so
    /// a peak may show up to one envelope bin (at most half a drawn bin) early.
    fn reduce(&self, end_s: f64) -> Steps {
        let mut cur = (0u32, 0u32);
        if end_s <= 0.0 {
            for b in &self.bins {
                cur = b.last.unwrap_or(cur);
            }
            return vec![(0.0, cur.0, cur.1)];
        }
        let width = end_s / BINS as f64;
        let mut out: Steps = Vec::with_capacity(BINS + 1);
        let mut it = self
            .bins
            .iter()
            .enumerate()
            .filter(|(_, b)| b.last.is_some())
            .map(|(j, b)| (ns_to_secs(j as u64 * self.width_ns), b))
            .peekable();
        for k in 0..BINS {
            let hi = (k + 1) as f64 * width;
            let mut m = cur;
            while let Some(&(t, b)) = it.peek() {
                if t >= hi && k + 1 < BINS {
                    break;
                }
                cur = b.last.unwrap_or(cur);
                m = (m.0.max(b.max.0), m.1.max(b.max.1));
                it.next();
            }
            out.push((k as f64 * width, m.0, m.1));
        }
        out.push((end_s, cur.0, cur.1));
        out
    }
}

/// One backend's changes as a plot keeps them: exactly, or past [`EXACT_POINTS`] as an
/// [`Envelope`].
enum Changes {
    Exact(Vec<(u64, u32, u32)>),
    Envelope(Envelope),
}

/// The changes the time-series plot needs, taken from rows in time order as a run hands
/// them out (or all at once from a kept series): the first 16 backends' changes, exactly
/// up to 65,536 each, as per-bin maxima beyond (at most about 1 MB a panel).
pub struct SeriesPoints {
    per: Vec<Changes>,
}

impl SeriesPoints {
    /// Nothing yet, for a fleet of `n_backends`.
    pub fn new(n_backends: usize) -> SeriesPoints {
        SeriesPoints {
            per: (0..n_backends.min(MAX_BACKENDS))
                .map(|_| Changes::Exact(vec![(0, 0, 0)]))
                .collect(),
        }
    }

    /// Takes rows (after every row taken before).
    pub fn add(&mut self, rows: &[TsRow]) {
        for r in rows {
            let Some(c) = self.per.get_mut(r.backend.index()) else {
                continue;
            };
            match c {
                Changes::Exact(v) if v.len() < EXACT_POINTS => v.push((r.t.0, r.running, r.waiting)),
                Changes::Exact(v) => {
                    let mut e = Envelope::new(v.last().map_or(0, |p| p.0));
                    for &(t, run, wait) in v.iter() {
                        e.push(t, run, wait);
                    }
                    e.push(r.t.0, r.running, r.waiting);
                    *c = Changes::Envelope(e);
                }
                Changes::Envelope(e) => e.push(r.t.0, r.running, r.waiting),
            }
        }
    }
}

impl BackendSeries {
    /// From a run's summary and time series (rows in time order).
    pub fn new(summary: &Summary, rows: &[TsRow]) -> BackendSeries {
        let mut p = SeriesPoints::new(summary.backends.len());
        p.add(rows);
        BackendSeries::of_points(summary, p)
    }

    /// From a run's summary and the [`SeriesPoints`] of its time series.
    pub fn of_points(summary: &Summary, points: SeriesPoints) -> BackendSeries {
        let end_s = summary.sim_time_s;
        let n = summary.backends.len();
        let more = if n > MAX_BACKENDS {
            format!(" (first {MAX_BACKENDS} of {n} backends)")
        } else {
            String::new()
        };
        BackendSeries {
            title: format!(
                "{}: {}, seed {}{more}",
                summary.scenario,
                super::clip(&summary.policy, 96),
                summary.seed
            ),
            end_s,
            x_desc: "simulated time".into(),
            // A grouped or profiled backend's panel says what it is.
            captions: summary
                .backends
                .iter()
                .take(MAX_BACKENDS)
                .map(|b| match (b.group.is_empty(), b.profile.is_empty()) {
                    (_, false) => b.profile.clone(),
                    (false, true) => format!("group {}", b.group),
                    (true, true) => String::new(),
                })
                .collect(),
            panels: Vec::new(),
            stranded: Vec::new(),
            zoom: None,
            replicas: summary.autoscale.as_ref().map_or_else(Vec::new, |a| {
                a.replica_timeline
                    .iter()
                    .map(|p| (p.t_s, p.replicas, p.ready))
                    .collect()
            }),
        }
        .with_panels(
            points
                .per
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let b = &summary.backends[i];
                    let (drawn, full) = match c {
                        Changes::Exact(v) => {
                            let full: Steps = v.into_iter().map(|(t, r, w)| (ns_to_secs(t), r, w)).collect();
                            (reduce(full.clone(), end_s), full)
                        }
                        Changes::Envelope(e) => (e.reduce(end_s), e.steps()),
                    };
                    (b.name.clone(), b.slots, drawn, full)
                })
                .collect(),
        )
    }

    /// The panels, each as drawn over the whole run and as its whole changes (from which a
    /// long run's zoom column takes its window).
    fn with_panels(mut self, panels: Vec<(String, u32, Steps, Steps)>) -> BackendSeries {
        let full: Vec<Steps> = panels.iter().map(|p| p.3.clone()).collect();
        self.zoom = Zoom::of(&full, self.end_s);
        self.panels = panels.into_iter().map(|(n, s, drawn, _)| (n, s, drawn)).collect();
        self
    }

    /// Shades these stretches of idle while queued (a run's stranding episodes).
    pub fn with_stranded(mut self, episodes: &[crate::metrics::Episode]) -> BackendSeries {
        self.stranded = episodes
            .iter()
            .map(|e| (ns_to_secs(e.start.0), ns_to_secs(e.end.0)))
            .collect();
        self
    }
}

impl BackendSeries {
    /// From observed series (`sim observe`): per backend its name, slot limit and
    /// `(t_s, running, waiting)` samples in time order, `t_s` from the first sample, which
    /// `x_desc` names (`time since 2026-01-05 10:00:00 UTC`).
    pub fn observed(title: String, x_desc: String, end_s: f64, backends: Vec<Panel>) -> BackendSeries {
        let n = backends.len();
        let more = if n > MAX_BACKENDS {
            format!(" (first {MAX_BACKENDS} of {n} backends)")
        } else {
            String::new()
        };
        let stranded = stranded_in_samples(&backends);
        BackendSeries {
            title: format!("{title}{more}"),
            end_s,
            x_desc,
            captions: vec![],
            panels: Vec::new(),
            stranded,
            zoom: None,
            replicas: Vec::new(),
        }
        .with_panels(
            backends
                .into_iter()
                .take(MAX_BACKENDS)
                .map(|(name, slots, s)| (name, slots, reduce(s.clone(), end_s), s))
                .collect(),
        )
    }
}

const PANEL_H: u32 = 150;
const TOP: u32 = 48;
const WIDTH: u32 = 1000;
/// The zoom column's width, when there is one.
const ZOOM_W: u32 = 440;

impl BackendSeries {
    /// The y range every panel shares: the highest running + waiting of any backend, or the
    /// slot line when it is within twice that (so a full backend shows where its queue
    /// starts); a slot limit far above the data (1,024 slots, 3 in use) is left off the
    /// scale, not drawn as a flat line at zero, and the panel says so.
    fn y_top(&self) -> f64 {
        let peak = self
            .panels
            .iter()
            .flat_map(|p| p.2.iter().map(|s| s.1 + s.2))
            .max()
            .unwrap_or(0)
            .max(1);
        let slots_in_view = self
            .panels
            .iter()
            .map(|p| p.1)
            .filter(|&s| s <= 2 * peak)
            .max()
            .unwrap_or(0);
        f64::from(peak.max(slots_in_view))
    }
}

/// The colour idle-while-queued stretches are shaded in (Okabe-Ito yellow, light).
fn shade_colour() -> RGBAColor {
    PALETTE[6].mix(0.35)
}

/// `c` at opacity `a` over white, as an opaque colour: the areas hide the shading behind
/// them instead of turning green over it.
fn on_white(c: RGBColor, a: f64) -> RGBColor {
    let m = |v: u8| (f64::from(v) * a + 255.0 * (1.0 - a)).round() as u8;
    RGBColor(m(c.0), m(c.1), m(c.2))
}

/// The running area's colour.
fn running_colour() -> RGBColor {
    on_white(PALETTE[0], 0.55)
}

/// The waiting area's colour.
fn waiting_colour() -> RGBColor {
    on_white(PALETTE[3], 0.75)
}

/// One chart of the figure: a backend's steps over a stretch of time.
struct View<'a> {
    steps: &'a Steps,
    /// Seconds of the run at the chart's left edge.
    from_s: f64,
    /// Seconds the chart spans.
    span_s: f64,
    /// The x axis's title (with its unit).
    x_desc: String,
    /// A window of the run outlined on the chart (the zoom column's).
    mark: Option<(f64, f64)>,
    /// The y axis's title (the whole-run column only).
    y_desc: Option<String>,
    /// Text in the chart's top left corner.
    caption: String,
    /// The bottom chart of its column (it prints the time labels).
    last: bool,
}

impl BackendSeries {
    /// The title strip: the title, what the panels show and the one legend.
    fn draw_title<DB: DrawingBackend>(&self, title: &DrawingArea<DB, Shift>) -> Result<()> {
        title
            .draw(&Text::new(super::clip(&self.title, 124), (10, 6), font(15.0)))
            .map_err(pe)?;
        let mut legend = vec![
            ("running".to_string(), Swatch::Area(running_colour().to_rgba())),
            (
                "waiting (stacked)".to_string(),
                Swatch::Area(waiting_colour().to_rgba()),
            ),
            ("slots".to_string(), Swatch::Dashed(BLACK, 1)),
            ("idle while queued".to_string(), Swatch::Area(shade_colour())),
        ];
        if self.zoom.is_some() {
            legend.push((
                "busiest hour (right)".to_string(),
                Swatch::Line(RGBColor(90, 90, 90), 2),
            ));
        }
        let (w, _) = title.dim_in_pixel();
        draw_legend_outside(title, &legend, (w as i32 - 12, 36), true)?;
        let left = plotters::style::text_anchor::Pos::new(
            plotters::style::text_anchor::HPos::Left,
            plotters::style::text_anchor::VPos::Center,
        );
        title
            .draw(&Text::new(
                "requests per backend over time".to_string(),
                (10, 36),
                font(11.0).pos(left),
            ))
            .map_err(pe)?;
        Ok(())
    }

    /// Panel `k`'s caption: its profile or group, and a slot limit above the scale.
    fn caption(&self, k: usize) -> String {
        let mut caption: Vec<String> = self
            .captions
            .get(k)
            .filter(|c| !c.is_empty())
            .cloned()
            .into_iter()
            .collect();
        let slots = self.panels[k].1;
        if f64::from(slots) > self.y_top() {
            caption.push(format!("slot limit {slots}, above the scale"));
        }
        caption.join("; ")
    }

    /// One backend's chart: the idle-while-queued shading, the running area, the waiting
    /// area stacked on it and the dashed slot line.
    fn draw_view<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, slots: u32, v: &View) -> Result<()> {
        let top = self.y_top();
        let (_, per) = time_unit(v.span_s);
        let end_u = (v.span_s / per).max(1e-9);
        let mut chart = ChartBuilder::on(area)
            .margin(4)
            .margin_right(12)
            .x_label_area_size(if v.last { 34 } else { 4 })
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..end_u, 0f64..top * 1.12)
            .map_err(pe)?;
        let mut mesh = super::mesh(&mut chart);
        // The same grid in every panel; only the last one prints the time labels.
        mesh.y_labels(5).x_labels(10).y_label_formatter(&whole_counts);
        if let Some(d) = &v.y_desc {
            mesh.y_desc(d.clone());
        }
        if v.last {
            mesh.x_desc(v.x_desc.clone()).x_label_formatter(&|x| fmt_stat(*x));
        } else {
            mesh.x_label_formatter(&|_| String::new());
        }
        mesh.draw().map_err(pe)?;
        let u = |t: f64| ((t - v.from_s) / per).clamp(0.0, end_u);
        // Stretches closer than a pixel are shaded as one.
        let px_s = v.span_s / f64::from(area.dim_in_pixel().0.max(1));
        let mut shaded: Vec<(f64, f64)> = Vec::new();
        for &(a, b) in self
            .stranded
            .iter()
            .filter(|s| s.1 > v.from_s && s.0 < v.from_s + v.span_s)
        {
            match shaded.last_mut() {
                Some(last) if a - last.1 <= px_s => last.1 = last.1.max(b),
                _ => shaded.push((a, b)),
            }
        }
        chart
            .draw_series(
                shaded
                    .into_iter()
                    .map(|(a, b)| Rectangle::new([(u(a), 0.0), (u(b), top * 1.12)], shade_colour().filled())),
            )
            .map_err(pe)?;
        if !v.caption.is_empty() {
            chart
                .plotting_area()
                .strip_coord_spec()
                .draw(&Text::new(v.caption.clone(), (6, 3), font(11.0)))
                .map_err(pe)?;
        }
        draw_steps(&mut chart, v.steps, v.span_s, per)?;
        if f64::from(slots) <= top {
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, f64::from(slots)), (end_u, f64::from(slots))],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(pe)?;
        }
        if let Some((a, b)) = v.mark {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(u(a), 0.0), (u(b), top * 1.12)],
                    RGBColor(90, 90, 90).stroke_width(2),
                )))
                .map_err(pe)?;
        }
        Ok(())
    }
}

/// Running as an area from 0, waiting as an area stacked on it: 4 running + 4 waiting fills
/// to the slot line and doubles it, with no line drawn on another. `per` seconds per x unit.
fn draw_steps<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    steps: &Steps,
    span_s: f64,
    per: f64,
) -> Result<()> {
    let (run_c, wait_c) = (PALETTE[0], waiting_colour());
    let to_u = |pts: Vec<(f64, f64)>| -> Vec<(f64, f64)> { pts.into_iter().map(|(t, v)| (t / per, v)).collect() };
    let running = to_u(step_path(steps, |p| p.1, span_s));
    let total = to_u(step_path(steps, |p| p.1 + p.2, span_s));
    let band: Vec<(f64, f64)> = total.iter().copied().chain(running.iter().rev().copied()).collect();
    if steps.iter().any(|p| p.2 > 0) {
        chart
            .draw_series(std::iter::once(Polygon::new(band, wait_c.filled())))
            .map_err(pe)?;
    }
    chart
        .draw_series(AreaSeries::new(running.clone(), 0.0, running_colour()))
        .map_err(pe)?;
    let x_px = |t: f64| chart.backend_coord(&(t, 0.0)).0;
    let edge = split_close_verticals(&running, x_px, 3);
    chart
        .draw_series(
            edge.into_iter()
                .map(|piece| PathElement::new(piece, run_c.stroke_width(1))),
        )
        .map_err(pe)?;
    Ok(())
}

impl Figure for BackendSeries {
    fn size(&self) -> (u32, u32) {
        let zoom = if self.zoom.is_some() { ZOOM_W } else { 0 };
        let replicas = if self.replicas.is_empty() { 0 } else { PANEL_H };
        (
            WIDTH + zoom,
            PANEL_H * self.panels.len().max(1) as u32 + TOP + 30 + replicas,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let (title, body) = root.split_vertically(TOP);
        self.draw_title(&title)?;
        let (whole, zoomed) = match self.zoom {
            Some(_) => {
                let (a, b) = body.split_horizontally(WIDTH);
                (a, Some(b))
            }
            None => (body, None),
        };
        // An autoscaled run's replicas above the backends, on the whole run's time axis.
        let (whole, zoomed) = if self.replicas.is_empty() {
            (whole, zoomed)
        } else {
            let (head, rest) = whole.split_vertically(PANEL_H);
            self.draw_replicas(&head)?;
            (rest, zoomed.map(|z| z.split_vertically(PANEL_H).1))
        };
        let rows = self.panels.len().max(1);
        let last = self.panels.len().saturating_sub(1);
        let (unit, _) = time_unit(self.end_s);
        for (k, area) in whole.split_evenly((rows, 1)).iter().enumerate().take(self.panels.len()) {
            let (name, slots, steps) = &self.panels[k];
            let v = View {
                steps,
                from_s: 0.0,
                span_s: self.end_s,
                x_desc: format!("{} ({unit})", self.x_desc),
                mark: self.zoom.as_ref().map(|z| (z.from_s, z.until_s)),
                y_desc: Some(format!("{} (requests)", super::clip(name, 16))),
                caption: self.caption(k),
                last: k == last,
            };
            self.draw_view(area, *slots, &v)?;
        }
        if let (Some(z), Some(zoomed)) = (&self.zoom, zoomed) {
            let (zunit, _) = time_unit(ZOOM_S);
            for (k, area) in zoomed
                .split_evenly((rows, 1))
                .iter()
                .enumerate()
                .take(self.panels.len())
            {
                let v = View {
                    steps: &z.panels[k],
                    from_s: z.from_s,
                    span_s: z.until_s - z.from_s,
                    x_desc: format!("busiest hour, from {} ({zunit})", fmt_at(z.from_s)),
                    mark: None,
                    y_desc: None,
                    caption: String::new(),
                    last: k == last,
                };
                self.draw_view(area, self.panels[k].1, &v)?;
            }
        }
        Ok(())
    }
}

impl BackendSeries {
    /// The autoscaler's panel: replicas (pods created, loading or Ready) and Ready replicas
    /// over time, on the whole run's time axis.
    fn draw_replicas<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let (_, per) = time_unit(self.end_s);
        let end_u = (self.end_s / per).max(1e-9);
        let top = self.replicas.iter().map(|p| p.1.max(p.2)).max().unwrap_or(1).max(1);
        let mut chart = ChartBuilder::on(area)
            .margin(4)
            .margin_right(12)
            .x_label_area_size(4)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..end_u, 0f64..f64::from(top) * 1.25)
            .map_err(pe)?;
        super::mesh(&mut chart)
            .y_labels(5)
            .x_labels(10)
            .y_label_formatter(&whole_counts)
            .x_label_formatter(&|_| String::new())
            .y_desc("replicas")
            .draw()
            .map_err(pe)?;
        let to_u = |pts: Vec<(f64, f64)>| -> Vec<(f64, f64)> { pts.into_iter().map(|(t, v)| (t / per, v)).collect() };
        let (spec_c, ready_c) = (PALETTE[7], PALETTE[2]);
        let spec = to_u(step_path(&self.replicas, |p| p.1, self.end_s));
        let ready = to_u(step_path(&self.replicas, |p| p.2, self.end_s));
        chart
            .draw_series(std::iter::once(PathElement::new(spec, spec_c.stroke_width(2))))
            .map_err(pe)?;
        // Dashed as its legend swatch draws it (6 on, 4 off).
        chart
            .draw_series(DashedLineSeries::new(ready, 6, 4, ready_c.stroke_width(2)))
            .map_err(pe)?;
        let legend = [
            ("replicas (created)".to_string(), Swatch::Line(spec_c, 2)),
            ("Ready".to_string(), Swatch::Dashed(ready_c, 2)),
        ];
        let (w, _) = area.dim_in_pixel();
        draw_legend_outside(area, &legend, (w as i32 - 16, 14), true)?;
        Ok(())
    }
}

/// A count axis's label: whole numbers only (requests and replicas come in ones).
fn whole_counts(v: &f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

/// A time of a long run for an axis title: `t = 76.5 h`, or `t = 3 d 04:30` past a day.
fn fmt_at(t_s: f64) -> String {
    if t_s < 86_400.0 {
        return format!("t = {} h", fmt_stat((t_s / 360.0).round() / 10.0));
    }
    let m = (t_s / 60.0).round() as u64;
    format!("t = {} d {:02}:{:02}", m / 1440, m / 60 % 24, m % 60)
}

/// The corners of a step line through `steps` (value by `pick`) up to `end_s`. Several
/// changes at one instant keep only the last value, and a value that does not change adds
/// no corner: back-and-forth segments of zero length rasterize as stray dots.
fn step_path(steps: &Steps, pick: fn(&(f64, u32, u32)) -> u32, end_s: f64) -> Vec<(f64, f64)> {
    let mut levels: Vec<(f64, u32)> = Vec::with_capacity(steps.len());
    for p in steps {
        match levels.last_mut() {
            Some(last) if last.0 == p.0 => last.1 = pick(p),
            _ => levels.push((p.0, pick(p))),
        }
    }
    levels.dedup_by(|b, a| a.1 == b.1);
    let mut pts = Vec::with_capacity(levels.len() * 2 + 1);
    for (i, &(t, v)) in levels.iter().enumerate() {
        if i > 0 {
            pts.push((t, f64::from(levels[i - 1].1)));
        }
        pts.push((t, f64::from(v)));
    }
    pts.push((end_s, levels.last().map_or(0.0, |l| f64::from(l.1))));
    pts
}

/// Splits a step path where a vertical segment would be drawn within `gap_px` pixels
/// (`x_px` maps time to pixels) of the previous vertical one. Plotters fills a thick line
/// as one polygon, and parts of one polygon that overlap cancel out: a waiting spike
/// shorter than the line is wide (3 -> 4 -> 3 in a few ms) left a stray dot instead of a
/// bar. Separate pieces are filled separately, so the spike stays a bar.
fn split_close_verticals(pts: &[(f64, f64)], x_px: impl Fn(f64) -> i32, gap_px: i32) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    let mut cur: Vec<(f64, f64)> = Vec::new();
    let mut last_vertical: Option<i32> = None;
    for &p in pts {
        if let Some(&q) = cur.last()
            && q.0 == p.0
            && q.1 != p.1
        {
            let x = x_px(p.0);
            if last_vertical.is_some_and(|lx| (x - lx).abs() <= gap_px) {
                out.push(std::mem::replace(&mut cur, vec![q]));
            }
            last_vertical = Some(x);
        }
        cur.push(p);
    }
    if cur.len() > 1 {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_paths_have_no_zero_length_detours() {
        // At t = 2 the value goes 1 -> 3 -> 1 within the instant; at t = 3 it stays 1.
        let s: Steps = vec![
            (0.0, 0, 0),
            (1.0, 1, 0),
            (2.0, 3, 0),
            (2.0, 1, 0),
            (3.0, 1, 0),
            (4.0, 2, 0),
        ];
        assert_eq!(
            step_path(&s, |p| p.1, 5.0),
            vec![(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (4.0, 1.0), (4.0, 2.0), (5.0, 2.0)]
        );
    }

    #[test]
    fn close_spikes_are_drawn_as_separate_pieces() {
        // 3 -> 4 at t = 10, back to 3 at t = 10.001 (the same pixel), up again at t = 50.
        let pts = vec![
            (0.0, 3.0),
            (10.0, 3.0),
            (10.0, 4.0),
            (10.001, 4.0),
            (10.001, 3.0),
            (50.0, 3.0),
            (50.0, 4.0),
            (60.0, 4.0),
        ];
        let px = |t: f64| (t * 10.0).round() as i32;
        let pieces = split_close_verticals(&pts, px, 3);
        assert_eq!(
            pieces,
            vec![pts[..4].to_vec(), pts[3..].to_vec()],
            "the second vertical starts a new piece"
        );
        // Far-apart verticals stay one path, and every corner is drawn exactly once.
        assert_eq!(split_close_verticals(&pts, |t| (t * 1e6) as i32, 3), vec![pts.clone()]);
    }

    #[test]
    fn reduction_keeps_peaks() {
        let mut s: Steps = vec![(0.0, 0, 0)];
        for i in 0..10_000 {
            let t = i as f64 * 0.01;
            s.push((t, if i == 5_000 { 9 } else { 1 }, 0));
        }
        let r = reduce(s, 100.0);
        assert!(r.len() <= BINS + 1);
        assert_eq!(r.iter().map(|p| p.1).max(), Some(9), "the one-sample spike survives");
        assert_eq!(r.last().unwrap().1, 1);
        // A final change at the very end of the run is kept.
        let mut s: Steps = (0..5000).map(|i| (i as f64 * 0.01, 3, 0)).collect();
        s.push((100.0, 0, 0));
        assert_eq!(reduce(s, 100.0).last().unwrap().1, 0);
    }

    /// Past [`EXACT_POINTS`] a backend's changes are kept as an envelope: what it draws is
    /// [`reduce`]'s drawing with each peak at most one drawn bin early, the final value and
    /// the highest value exact, and it holds [`ENVELOPE_BINS`] bins however long the run.
    #[test]
    fn the_envelope_draws_what_the_exact_reduction_draws_within_a_bin() {
        use crate::ids::BackendId;
        use crate::time::SimTime;
        let n = 3 * EXACT_POINTS + 17;
        let end_ns = 3_600_000_000_000u64;
        let mut rows = Vec::with_capacity(n);
        let mut x = 12345u64;
        for i in 0..n as u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            rows.push(TsRow {
                t: SimTime(i * (end_ns / n as u64)),
                backend: BackendId(0),
                running: ((x >> 33) % 64) as u32 + if i == n as u64 / 3 { 1000 } else { 0 },
                waiting: ((x >> 40) % 8) as u32,
                kv_used_blocks: 0,
            });
        }
        let mut p = SeriesPoints::new(1);
        p.add(&rows);
        let Changes::Envelope(e) = &p.per[0] else {
            panic!("kept exactly past EXACT_POINTS")
        };
        assert_eq!(e.bins.len() as u64, ENVELOPE_BINS);
        let end_s = ns_to_secs(end_ns);
        let drawn = e.reduce(end_s);
        let exact = reduce(
            std::iter::once((0.0, 0, 0))
                .chain(rows.iter().map(|r| (ns_to_secs(r.t.0), r.running, r.waiting)))
                .collect(),
            end_s,
        );
        assert_eq!(drawn.len(), exact.len());
        assert_eq!(drawn.last(), exact.last(), "the final value");
        let top = |s: &Steps| s.iter().map(|p| p.1).max();
        assert_eq!(top(&drawn), top(&exact), "the highest value");
        for k in 0..BINS {
            let near = |s: &Steps, f: fn(&(f64, u32, u32)) -> u32| {
                s[k.saturating_sub(1)..=(k + 1).min(BINS - 1)]
                    .iter()
                    .map(f)
                    .max()
                    .unwrap()
            };
            assert!(
                drawn[k].1 <= near(&exact, |p| p.1) && exact[k].1 <= near(&drawn, |p| p.1),
                "bin {k}"
            );
            assert!(
                drawn[k].2 <= near(&exact, |p| p.2) && exact[k].2 <= near(&drawn, |p| p.2),
                "bin {k}"
            );
        }
    }
}
