//! Sweep plots: a heatmap of a metric over two axes and a line plot over one axis with one
//! line per level of a series axis and its 95% CIs. Axes not on the plot become panels
//! (small multiples) sharing one colour scale or y range, so panels compare at a glance.
//! Axis values are placed at equal spacing in the order they were swept (ordinal axes);
//! an axis of names (policies, fleets) is drawn as categories, never joined by lines.
//! Series differ in colour (Okabe-Ito) and marker and are dodged sideways, so identical
//! series stay visible; up to [`MAX_BANDS`] series get CI bands, more get error bars. A
//! metric whose values span [`LOG_SPAN`] or more (all positive) is drawn on a log scale.

use std::path::{Path, PathBuf};

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::plot::{
    Chart, Figure, Swatch, axis_label, axis_value, clip, draw_legend_outside, draw_marker, font, grid_shape,
    human_metric, legend_width, mesh, metric_label, natural_bounds, pe, readable_label, save, series_style,
};
use crate::sweep::spec::Plan;
use crate::sweep::table::{Aggregate, Meta, Stat, fmt_stat};

/// At most this many panels per figure; the rest are left out and the title says so.
const MAX_PANELS: usize = 36;
/// Above this many series a line plot draws error bars, not CI bands (nine overlapping
/// bands are unreadable).
pub const MAX_BANDS: usize = 3;
/// The ratio of the largest to the smallest value from which a metric is drawn on a log
/// scale (two decades).
pub const LOG_SPAN: f64 = 100.0;

/// Panels: for every combination of the axes not in `used`, in grid order, its caption and
/// a function from the used axes' level indices to a point.
fn facets(plan: &Plan, used: &[usize]) -> Vec<(String, Vec<usize>)> {
    let others: Vec<usize> = (0..plan.axes.len()).filter(|i| !used.contains(i)).collect();
    let total: usize = others.iter().map(|&i| plan.axes[i].levels.len()).product();
    (0..total)
        .map(|mut k| {
            let mut coords = vec![0usize; plan.axes.len()];
            for &i in others.iter().rev() {
                let n = plan.axes[i].levels.len();
                coords[i] = k % n;
                k /= n;
            }
            let caption = others
                .iter()
                .map(|&i| {
                    axis_value(
                        &plan.axes[i].name,
                        &readable_label(&plan.axes[i].levels[coords[i]].label),
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            (caption, coords)
        })
        .collect()
}

fn point_of(plan: &Plan, coords: &[usize]) -> u64 {
    coords
        .iter()
        .zip(&plan.axes)
        .fold(0u64, |acc, (c, a)| acc * a.levels.len() as u64 + *c as u64)
}

/// Stats of `metric` by point (None where no run reported it).
fn by_point(meta: &Meta, agg: &Aggregate, metric: &str) -> Option<Vec<Option<Stat>>> {
    let col = agg.columns.iter().position(|c| c == metric)?;
    let mut out = vec![None; meta.points as usize];
    for (p, stats) in &agg.points {
        if stats[col].n > 0 {
            out[*p as usize] = Some(stats[col]);
        }
    }
    Some(out)
}

/// An axis's value labels as shown in plots (inline tables as their policy kind).
fn labels(plan: &Plan, axis: usize) -> Vec<String> {
    plan.axes[axis]
        .levels
        .iter()
        .map(|l| readable_label(&l.label))
        .collect()
}

/// `scenario: metric, what over N seeds` then `note` (the scale, clipping).
fn title_of(meta: &Meta, metric: &str, what: &str, note: &str, shown: usize, total: usize) -> String {
    let more = if shown < total {
        format!(" (first {shown} of {total} panels)")
    } else {
        String::new()
    };
    format!(
        "{}: {}, {what} over {} seeds{note}{more}",
        meta.scenario,
        human_metric(metric),
        meta.plan.seeds.len()
    )
}

/// A heatmap of one metric's mean over two axes.
pub struct Heatmap {
    title: String,
    metric: String,
    x_name: String,
    y_name: String,
    x_labels: Vec<String>,
    y_labels: Vec<String>,
    /// Caption and cells `[y][x]`.
    panels: Vec<(String, Vec<Vec<Option<f64>>>)>,
    range: (f64, f64),
}

const HM_PANEL: (u32, u32) = (400, 320);
const HM_TOP: u32 = 40;
const HM_BAR: u32 = 110;

impl Heatmap {
    /// The heatmap of `metric` over axes `x` and `y`; None if the metric is unknown.
    pub fn new(meta: &Meta, agg: &Aggregate, metric: &str, x: usize, y: usize) -> Option<Heatmap> {
        let plan = &meta.plan;
        let stats = by_point(meta, agg, metric)?;
        let all = facets(plan, &[x, y]);
        let total = all.len();
        let mut panels = Vec::new();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (caption, mut coords) in all.into_iter().take(MAX_PANELS) {
            let mut cells = Vec::new();
            for j in 0..plan.axes[y].levels.len() {
                let mut row = Vec::new();
                for i in 0..plan.axes[x].levels.len() {
                    coords[x] = i;
                    coords[y] = j;
                    let v = stats[point_of(plan, &coords) as usize].map(|s| s.mean);
                    if let Some(v) = v {
                        lo = lo.min(v);
                        hi = hi.max(v);
                    }
                    row.push(v);
                }
                cells.push(row);
            }
            panels.push((caption, cells));
        }
        let shown = panels.len();
        Some(Heatmap {
            title: title_of(meta, metric, "mean", "", shown, total),
            metric: metric.to_string(),
            x_name: axis_label(&plan.axes[x].name),
            y_name: axis_label(&plan.axes[y].name),
            x_labels: labels(plan, x),
            y_labels: labels(plan, y),
            panels,
            range: if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) },
        })
    }

    fn colour(&self, v: f64) -> RGBColor {
        let (lo, hi) = self.range;
        if hi > lo {
            ViridisRGB::get_color_normalized(v, lo, hi)
        } else {
            ViridisRGB::get_color_normalized(0.5, 0.0, 1.0)
        }
    }

    /// One panel: its caption, the coloured cells with their values, the axis labels and
    /// the axis titles.
    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        caption: &str,
        cells: &[Vec<Option<f64>>],
    ) -> Result<()> {
        let g = self.grid(area)?;
        let centre = Pos::new(HPos::Center, VPos::Center);
        area.draw(&Text::new(
            clip(caption, 60),
            (g.left + g.cw * g.nx / 2, 12),
            font(13.0).pos(centre),
        ))
        .map_err(pe)?;
        self.draw_cells(area, &g, cells)?;
        self.draw_tick_labels(area, &g)?;
        area.draw(&Text::new(
            self.x_name.clone(),
            (g.left + g.cw * g.nx / 2, g.top + g.ch * g.ny + 26 + g.drop),
            font(12.0).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(pe)?;
        area.draw(&Text::new(
            clip(&self.y_name, 40),
            (g.title_w / 2, g.top + g.ch * g.ny / 2),
            font(12.0)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Center, VPos::Center)),
        ))
        .map_err(pe)?;
        Ok(())
    }

    /// A panel's layout in `area`: margins wide enough for the longest labels, cells
    /// sharing the rest.
    fn grid<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<Grid> {
        let (w, h) = area.dim_in_pixel();
        // The y axis title runs up the left edge (rotated), clear of the caption row.
        let title_w = 18i32;
        let mut left = 40i32;
        for l in &self.y_labels {
            left = left.max(area.estimate_text_size(&clip(l, 24), &font(11.0)).map_err(pe)?.0 as i32 + 14);
        }
        let left = left + title_w;
        let mut x_label_w = 20i32;
        for l in &self.x_labels {
            x_label_w = x_label_w.max(area.estimate_text_size(&clip(l, 24), &font(11.0)).map_err(pe)?.0 as i32 + 8);
        }
        let (right, top) = (10i32, 26i32);
        let nx = self.x_labels.len() as i32;
        let ny = self.y_labels.len() as i32;
        let cw = ((w as i32 - left - right) / nx).max(1);
        // Labels wider than a cell but not than two alternate between two rows, so every
        // column keeps its label (policy names under five policies); wider still, every
        // k-th label is shown (long numeric axes).
        let stagger = x_label_w > cw && x_label_w <= 2 * cw;
        let drop = if stagger { 14 } else { 0 };
        let bottom = 46 + drop;
        let ch = ((h as i32 - top - bottom) / ny).max(1);
        Ok(Grid {
            w: w as i32,
            h: h as i32,
            title_w,
            left,
            right,
            top,
            bottom,
            nx,
            ny,
            cw,
            ch,
            x_label_w,
            stagger,
            drop,
        })
    }

    /// The cells, coloured by value and labelled with it (a grey `-` where no run finished).
    fn draw_cells<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        g: &Grid,
        cells: &[Vec<Option<f64>>],
    ) -> Result<()> {
        let centre = Pos::new(HPos::Center, VPos::Center);
        let (cw, ch) = (g.cw, g.ch);
        let cell_font = if cw < 44 { 9.0 } else { 12.0 };
        for (j, row) in cells.iter().enumerate() {
            // Row 0 of the y axis at the bottom.
            let y0 = g.top + ch * (g.ny - 1 - j as i32);
            for (i, v) in row.iter().enumerate() {
                let x0 = g.left + cw * i as i32;
                let (fill, text, ink) = match v {
                    Some(v) => {
                        let c = self.colour(*v);
                        let lum = 0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64;
                        (c, short(*v), if lum < 128.0 { WHITE } else { BLACK })
                    }
                    None => (RGBColor(225, 225, 225), "-".to_string(), BLACK),
                };
                area.draw(&Rectangle::new([(x0, y0), (x0 + cw, y0 + ch)], fill.filled()))
                    .map_err(pe)?;
                area.draw(&Rectangle::new([(x0, y0), (x0 + cw, y0 + ch)], WHITE.stroke_width(1)))
                    .map_err(pe)?;
                area.draw(&Text::new(
                    text,
                    (x0 + cw / 2, y0 + ch / 2),
                    font(cell_font).color(&ink).pos(centre),
                ))
                .map_err(pe)?;
            }
        }
        Ok(())
    }

    /// The axes' value labels: every column's (staggered over two rows when they are a
    /// little wider than a cell) or every k-th, and every k-th row's that fits.
    fn draw_tick_labels<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, g: &Grid) -> Result<()> {
        let (left, top, cw, ch, nx, ny) = (g.left, g.top, g.cw, g.ch, g.nx, g.ny);
        let every_x = if g.stagger {
            1
        } else {
            (nx as usize)
                .div_ceil(((g.w - left - g.right) / g.x_label_w).max(1) as usize)
                .max(1)
        };
        for (i, l) in self.x_labels.iter().enumerate() {
            if i % every_x == 0 {
                let pos = Pos::new(HPos::Center, VPos::Top);
                let row = if g.stagger { (i % 2) as i32 } else { 0 };
                area.draw(&Text::new(
                    clip(l, 24),
                    (left + cw * i as i32 + cw / 2, top + ch * ny + 4 + g.drop * row),
                    font(11.0).pos(pos),
                ))
                .map_err(pe)?;
            }
        }
        let every_y = (ny as usize)
            .div_ceil(((g.h - top - g.bottom) / 14).max(1) as usize)
            .max(1);
        for (j, l) in self.y_labels.iter().enumerate() {
            if j % every_y == 0 {
                let pos = Pos::new(HPos::Right, VPos::Center);
                area.draw(&Text::new(
                    clip(l, 24),
                    (left - 6, top + ch * (ny - 1 - j as i32) + ch / 2),
                    font(11.0).pos(pos),
                ))
                .map_err(pe)?;
            }
        }
        Ok(())
    }
}

/// A heatmap panel's layout, pixels: the area, margins, cell counts and sizes, and how the
/// x labels are placed.
struct Grid {
    w: i32,
    h: i32,
    /// The rotated y title's column at the left edge.
    title_w: i32,
    left: i32,
    right: i32,
    top: i32,
    bottom: i32,
    nx: i32,
    ny: i32,
    /// One cell's width and height.
    cw: i32,
    ch: i32,
    /// The widest x label, with its margin.
    x_label_w: i32,
    /// The x labels alternate between two rows.
    stagger: bool,
    /// How far the second row of x labels (and the x title) sits lower.
    drop: i32,
}

/// A value in at most 4 significant digits, for cells.
fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

impl Figure for Heatmap {
    fn size(&self) -> (u32, u32) {
        let (rows, cols) = grid_shape(self.panels.len());
        (HM_PANEL.0 * cols as u32 + HM_BAR, HM_PANEL.1 * rows as u32 + HM_TOP)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let (w, h) = self.size();
        let (title, body) = root.split_vertically(HM_TOP);
        title
            .draw(&Text::new(
                clip(&self.title, 110),
                (10, HM_TOP as i32 / 2),
                font(16.0).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(pe)?;
        let (grid, bar) = body.split_horizontally(w - HM_BAR);
        let (rows, cols) = grid_shape(self.panels.len());
        let areas = grid.split_evenly((rows, cols));
        for ((caption, cells), area) in self.panels.iter().zip(&areas) {
            self.draw_panel(area, caption, cells)?;
        }
        // Colour bar.
        let (lo, hi) = self.range;
        let (top, bottom) = (30i32, (h - HM_TOP) as i32 - 50);
        let steps = 100;
        for s in 0..steps {
            let f = s as f64 / (steps - 1) as f64;
            let y1 = bottom - (bottom - top) * s / steps;
            let y0 = bottom - (bottom - top) * (s + 1) / steps;
            bar.draw(&Rectangle::new(
                [(10, y0), (30, y1)],
                self.colour(lo + (hi - lo) * f).filled(),
            ))
            .map_err(pe)?;
        }
        let lab = Pos::new(HPos::Left, VPos::Center);
        for (v, y) in [(hi, top), ((lo + hi) / 2.0, (top + bottom) / 2), (lo, bottom)] {
            bar.draw(&Text::new(short(v), (34, y), font(11.0).pos(lab)))
                .map_err(pe)?;
        }
        // The colour bar's label: what the colours measure, with its unit.
        bar.draw(&Text::new(
            format!("mean {}", metric_label(&self.metric)),
            (HM_BAR as i32 - 16, (top + bottom) / 2),
            font(12.0)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Center, VPos::Center)),
        ))
        .map_err(pe)?;
        Ok(())
    }
}

/// A metric against one axis, one line per level of a series axis, with 95% CI bands.
pub struct Lines {
    title: String,
    bounds: (f64, f64),
    metric: String,
    x_name: String,
    x_labels: Vec<String>,
    series_labels: Vec<String>,
    /// Caption and stats `[series][x]`.
    panels: Vec<(String, Vec<Vec<Option<Stat>>>)>,
    /// The value axis range, in log10 units when `log`.
    range: (f64, f64),
    /// Values span [`LOG_SPAN`] or more, all positive: the value axis is log10.
    log: bool,
}

const LN_PANEL: (u32, u32) = (440, 320);
const LN_TOP: u32 = 40;

impl Lines {
    /// The line plot of `metric` over axis `x`, with lines by `series` (or one line).
    pub fn new(meta: &Meta, agg: &Aggregate, metric: &str, x: usize, series: Option<usize>) -> Option<Lines> {
        let plan = &meta.plan;
        let stats = by_point(meta, agg, metric)?;
        let used: Vec<usize> = std::iter::once(x).chain(series).collect();
        let all = facets(plan, &used);
        let total = all.len();
        let bounds = natural_bounds(metric);
        let mut ext = Extent {
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
            mean_lo: f64::INFINITY,
            clipped: false,
        };
        let panels: Vec<_> = all
            .into_iter()
            .take(MAX_PANELS)
            .map(|(caption, mut coords)| {
                let lines = panel_lines(plan, &stats, &mut coords, x, series, bounds, &mut ext);
                (caption, lines)
            })
            .collect();
        let shown = panels.len();
        if !ext.lo.is_finite() {
            (ext.lo, ext.hi) = (0.0, 1.0);
        }
        // On the means: an interval reaching 0 is cut at the axis's lowest decade.
        let log = ext.mean_lo > 0.0 && ext.hi / ext.mean_lo >= LOG_SPAN;
        let axis_lo = 10f64.powf(ext.mean_lo.log10().floor());
        // What the title adds after the seeds. On a log axis nothing reaches 0: an interval
        // running below the axis ends in an arrow at its edge.
        let note = if log && ext.lo < axis_lo {
            format!(", log scale (◀ = below {})", fmt_stat(axis_lo))
        } else if log {
            ", log scale".to_string()
        } else if ext.clipped {
            format!(" (clipped {})", bounds_text(bounds))
        } else {
            String::new()
        };
        Some(Lines {
            title: title_of(meta, metric, "mean ± 95% CI", &note, shown, total),
            bounds,
            metric: metric.to_string(),
            x_name: axis_label(&plan.axes[x].name),
            x_labels: labels(plan, x),
            series_labels: series.map_or_else(
                || vec![metric.to_string()],
                |s| {
                    labels(plan, s)
                        .into_iter()
                        .map(|l| axis_value(&plan.axes[s].name, &l))
                        .collect()
                },
            ),
            panels,
            range: ext.range(log, bounds),
            log,
        })
    }

    /// A value in axis units (log10 on a log axis, where values below the axis sit on it).
    fn at(&self, v: f64) -> f64 {
        if self.log {
            if v > 0.0 {
                v.log10().max(self.range.0)
            } else {
                self.range.0
            }
        } else {
            v
        }
    }

    /// Whether `st`'s interval runs below a log axis (an arrow marks it, not a bar).
    fn below_axis(&self, st: &Stat) -> bool {
        self.log && st.mean - ci_of(st) < 10f64.powf(self.range.0)
    }

    /// The clipped ends to mark with a bar: those within the axis (a log axis marks an end
    /// below it with an arrow instead).
    fn bars(&self, st: &Stat) -> Vec<f64> {
        clipped_ends(st, self.bounds)
            .filter(|b| !(self.log && *b <= 10f64.powf(self.range.0)))
            .collect()
    }

    /// An axis tick's label: the value, or on a log axis the power of ten at whole decades
    /// (and nothing between them).
    fn tick(&self, v: f64) -> String {
        if !self.log {
            return fmt_stat(v);
        }
        if (v - v.round()).abs() < 1e-9 {
            fmt_stat(10f64.powi(v.round() as i32))
        } else {
            String::new()
        }
    }

    /// Sideways offset of series `s` of `k` sharing a position, in category units: the
    /// series of one position spread over at most 0.4 of the gap to the next.
    fn dodge(s: usize, k: usize) -> f64 {
        if k < 2 {
            return 0.0;
        }
        (s as f64 - (k as f64 - 1.0) / 2.0) * (0.4 / k as f64).min(0.08)
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        caption: &str,
        lines: &[Vec<Option<Stat>>],
    ) -> Result<()> {
        let n = self.x_labels.len();
        let labels = self.x_labels.clone();
        let mut chart = ChartBuilder::on(area)
            .caption(clip(caption, 60), font(13.0))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), self.range.0..self.range.1)
            .map_err(pe)?;
        mesh(&mut chart)
            .x_labels(n.min(10))
            .x_label_formatter(&|v| {
                let r = v.round();
                if (v - r).abs() < 1e-6 && r >= 0.0 && (r as usize) < labels.len() {
                    clip(&labels[r as usize], 18)
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| self.tick(*v))
            .y_desc(metric_label(&self.metric))
            .x_desc(self.x_name.clone())
            .draw()
            .map_err(pe)?;
        let k = lines.len();
        for (s, line) in lines.iter().enumerate() {
            self.draw_line(&mut chart, s, k, line)?;
        }
        Ok(())
    }

    /// Series `s` of `k`: its points dodged sideways, its CI as a band (or as whiskers when
    /// bands would crowd), its line and markers, and a bar at each clipped interval end.
    fn draw_line<'a, DB: DrawingBackend + 'a>(
        &self,
        chart: &mut Chart<'a, DB>,
        s: usize,
        k: usize,
        line: &[Option<Stat>],
    ) -> Result<()> {
        let (colour, marker) = series_style(s);
        let dx = Self::dodge(s, k);
        let pts: Vec<(f64, Stat)> = line
            .iter()
            .enumerate()
            .filter_map(|(i, st)| st.map(|st| (i as f64 + dx, st)))
            .collect();
        let ends = |st: &Stat| {
            let (a, b) = ci_ends(st, self.bounds);
            (self.at(a), self.at(b))
        };
        if k <= MAX_BANDS {
            // CI band: one polygon through every point that has data.
            let band: Vec<(f64, f64)> = pts
                .iter()
                .map(|(x, st)| (*x, ends(st).1))
                .chain(pts.iter().rev().map(|(x, st)| (*x, ends(st).0)))
                .collect();
            if band.len() >= 4 {
                chart
                    .draw_series(std::iter::once(Polygon::new(band, colour.mix(0.15).filled())))
                    .map_err(pe)?;
            }
        } else {
            // Error bars: one whisker per point, dodged with its marker.
            chart
                .draw_series(pts.iter().map(|(x, st)| {
                    let (a, b) = ends(st);
                    PathElement::new(vec![(*x, a), (*x, b)], colour.mix(0.8).stroke_width(1))
                }))
                .map_err(pe)?;
        }
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|(x, st)| (*x, self.at(st.mean))),
                colour.stroke_width(if k <= MAX_BANDS { 2 } else { 1 }),
            ))
            .map_err(pe)?;
        for (x, st) in &pts {
            draw_marker(chart, marker, (*x, self.at(st.mean)), 4, colour)?;
        }
        // A clipped interval end is marked with a short bar at the bound, one below a log
        // axis with an arrow at its edge.
        chart
            .draw_series(
                pts.iter()
                    .flat_map(|(x, st)| self.bars(st).into_iter().map(move |b| (*x, b)))
                    .map(|(x, b)| {
                        PathElement::new(
                            vec![(x - 0.06, self.at(b)), (x + 0.06, self.at(b))],
                            colour.stroke_width(2),
                        )
                    }),
            )
            .map_err(pe)?;
        chart
            .draw_series(pts.iter().filter(|(_, st)| self.below_axis(st)).map(|(x, _)| {
                EmptyElement::at((*x, self.range.0)) + Polygon::new(vec![(-5, -8), (5, -8), (0, 0)], colour.filled())
            }))
            .map_err(pe)?;
        Ok(())
    }
}

/// What the lines of a plot span: the lowest and highest interval ends drawn, the lowest
/// mean, and whether an interval was clipped at a natural bound.
struct Extent {
    lo: f64,
    hi: f64,
    mean_lo: f64,
    clipped: bool,
}

impl Extent {
    /// The value axis range: whole decades around the data on a log axis (ticks 1, 10,
    /// 100, ...), else the data padded by 8% and kept within `bounds`.
    fn range(&self, log: bool, bounds: (f64, f64)) -> (f64, f64) {
        let (lo, hi) = (self.lo, self.hi);
        if log {
            return (self.mean_lo.log10().floor(), hi.log10().ceil());
        }
        let pad = ((hi - lo) * 0.08).max(1e-9);
        (
            (lo - pad).min(if lo >= 0.0 { 0.0 } else { lo - pad }).max(bounds.0),
            (hi + pad).min(if bounds.1.is_finite() {
                bounds.1 + pad
            } else {
                f64::INFINITY
            }),
        )
    }
}

/// One panel's stats `[series][x]` at the facet `coords` (its x and series coordinates
/// overwritten), widening `ext` by each interval drawn.
fn panel_lines(
    plan: &Plan,
    stats: &[Option<Stat>],
    coords: &mut [usize],
    x: usize,
    series: Option<usize>,
    bounds: (f64, f64),
    ext: &mut Extent,
) -> Vec<Vec<Option<Stat>>> {
    let n_series = series.map_or(1, |s| plan.axes[s].levels.len());
    let mut lines = Vec::new();
    for s in 0..n_series {
        let mut line = Vec::new();
        for i in 0..plan.axes[x].levels.len() {
            coords[x] = i;
            if let Some(sa) = series {
                coords[sa] = s;
            }
            let st = stats[point_of(plan, coords) as usize];
            if let Some(st) = st {
                let (a, b) = ci_ends(&st, bounds);
                ext.clipped |= a > st.mean - ci_of(&st) || b < st.mean + ci_of(&st);
                ext.lo = ext.lo.min(a);
                ext.hi = ext.hi.max(b);
                ext.mean_lo = ext.mean_lo.min(st.mean);
            }
            line.push(st);
        }
        lines.push(line);
    }
    lines
}

impl Lines {
    /// Whether the x axis holds numbers (joined by lines) rather than names (policies,
    /// fleets: a line between names means nothing, so they get a horizontal dot plot).
    fn numeric(&self) -> bool {
        self.x_labels.iter().all(|l| l.parse::<f64>().is_ok())
    }

    /// Names down the y axis, the metric across, a dot per series with its CI as a bar.
    fn draw_dots<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        caption: &str,
        lines: &[Vec<Option<Stat>>],
    ) -> Result<()> {
        let n = self.x_labels.len();
        let labels = self.x_labels.clone();
        let mut name_width = 40;
        for l in &labels {
            name_width = name_width.max(area.estimate_text_size(&clip(l, 40), &font(11.0)).map_err(pe)?.0 + 16);
        }
        // The value axis's last tick label is centred on the plot's right edge: leave it room.
        let last_tick = area
            .estimate_text_size(&self.tick(self.range.1), &font(11.0))
            .map_err(pe)?
            .0;
        let mut chart = ChartBuilder::on(area)
            .caption(clip(caption, 60), font(13.0))
            .margin(8)
            .margin_right((last_tick / 2 + 6).max(8))
            .x_label_area_size(40)
            .y_label_area_size(name_width)
            .build_cartesian_2d(self.range.0..self.range.1, (n as f64 - 0.5)..-0.5f64)
            .map_err(pe)?;
        mesh(&mut chart)
            .y_labels(n)
            .y_label_formatter(&|v| {
                let r = v.round();
                if (v - r).abs() < 1e-6 && r >= 0.0 && (r as usize) < labels.len() {
                    clip(&labels[r as usize], 40)
                } else {
                    String::new()
                }
            })
            .x_label_formatter(&|v| self.tick(*v))
            .x_desc(metric_label(&self.metric))
            .draw()
            .map_err(pe)?;
        let k = lines.len().max(1) as f64;
        for (s, line) in lines.iter().enumerate() {
            let (colour, marker) = series_style(s);
            // Several series share a row, offset slightly so they do not hide each other.
            let dy = if k > 1.0 {
                (s as f64 - (k - 1.0) / 2.0) * 0.6 / k
            } else {
                0.0
            };
            let pts: Vec<(f64, Stat)> = line
                .iter()
                .enumerate()
                .filter_map(|(i, st)| st.map(|st| (i as f64 + dy, st)))
                .collect();
            chart
                .draw_series(pts.iter().map(|(y, st)| {
                    let (a, b) = ci_ends(st, self.bounds);
                    PathElement::new(vec![(self.at(a), *y), (self.at(b), *y)], colour.stroke_width(2))
                }))
                .map_err(pe)?;
            chart
                .draw_series(
                    pts.iter()
                        .flat_map(|(y, st)| self.bars(st).into_iter().map(move |b| (*y, b)))
                        .map(|(y, b)| {
                            PathElement::new(
                                vec![(self.at(b), y - 0.12), (self.at(b), y + 0.12)],
                                colour.stroke_width(2),
                            )
                        }),
                )
                .map_err(pe)?;
            chart
                .draw_series(pts.iter().filter(|(_, st)| self.below_axis(st)).map(|(y, _)| {
                    EmptyElement::at((self.range.0, *y)) + Polygon::new(vec![(0, 0), (8, -5), (8, 5)], colour.filled())
                }))
                .map_err(pe)?;
            for (y, st) in &pts {
                draw_marker(&mut chart, marker, (self.at(st.mean), *y), 4, colour)?;
            }
        }
        Ok(())
    }
}

impl Lines {
    /// The figure's one legend: a swatch per series (none for a single unnamed line).
    fn legend(&self) -> Vec<(String, Swatch)> {
        if self.series_labels.len() < 2 {
            return Vec::new();
        }
        self.series_labels
            .iter()
            .enumerate()
            .map(|(s, l)| {
                let (c, m) = series_style(s);
                (clip(l, 40), Swatch::Series(c, m))
            })
            .collect()
    }

    /// Width of the legend strip right of the panels.
    fn legend_px(&self) -> u32 {
        let longest = self.legend().iter().map(|(l, _)| l.chars().count()).max();
        longest.map_or(0, |c| c as u32 * 7 + 48)
    }
}

impl Figure for Lines {
    fn size(&self) -> (u32, u32) {
        let (rows, cols) = grid_shape(self.panels.len());
        let legend = self.legend_px();
        if self.numeric() {
            // At least 640 wide so the title fits over a single panel.
            (
                (LN_PANEL.0 * cols as u32 + legend).max(640),
                LN_PANEL.1 * rows as u32 + LN_TOP,
            )
        } else {
            let h = (self.x_labels.len() as u32 * 26 + 90).max(LN_PANEL.1);
            ((LN_PANEL.0 + 200) * cols as u32 + legend, h * rows as u32 + LN_TOP)
        }
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let (title, body) = root.split_vertically(LN_TOP);
        // The title at 15 px, smaller (down to 11 px) where it would run off the figure.
        let text = clip(&self.title, 140);
        let room = title.dim_in_pixel().0.saturating_sub(20);
        let mut size = 15.0;
        while size > 11.0 && title.estimate_text_size(&text, &font(size)).map_err(pe)?.0 > room {
            size -= 1.0;
        }
        title
            .draw(&Text::new(
                text,
                (10, LN_TOP as i32 / 2),
                font(size).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(pe)?;
        let entries = self.legend();
        let (w, _) = body.dim_in_pixel();
        let strip = if entries.is_empty() {
            0
        } else {
            legend_width(&body, &entries.iter().map(|e| e.0.clone()).collect::<Vec<_>>())?.max(self.legend_px())
        };
        let (grid, legend) = body.split_horizontally(w.saturating_sub(strip));
        if !entries.is_empty() {
            draw_legend_outside(&legend, &entries, (6, 30), false)?;
        }
        let (rows, cols) = grid_shape(self.panels.len());
        let areas = grid.split_evenly((rows, cols));
        for ((caption, lines), area) in self.panels.iter().zip(&areas) {
            if self.numeric() {
                self.draw_panel(area, caption, lines)?;
            } else {
                self.draw_dots(area, caption, lines)?;
            }
        }
        Ok(())
    }
}

fn ci_of(st: &Stat) -> f64 {
    if st.ci95.is_nan() { 0.0 } else { st.ci95 }
}

/// The CI's ends clipped to the metric's natural bounds.
fn ci_ends(st: &Stat, (lo, hi): (f64, f64)) -> (f64, f64) {
    ((st.mean - ci_of(st)).max(lo), (st.mean + ci_of(st)).min(hi))
}

/// The bounds at which `st`'s CI was clipped (to be marked).
fn clipped_ends(st: &Stat, (lo, hi): (f64, f64)) -> impl Iterator<Item = f64> {
    let (a, b) = (st.mean - ci_of(st), st.mean + ci_of(st));
    [(a < lo).then_some(lo), (b > hi).then_some(hi)].into_iter().flatten()
}

fn bounds_text((lo, hi): (f64, f64)) -> String {
    if hi.is_finite() {
        format!("to [{}, {}]", fmt_stat(lo), fmt_stat(hi))
    } else {
        format!("at {}", fmt_stat(lo))
    }
}

/// A metric name as a file-name part (`backends[1].busy_s` -> `backends_1__busy_s`).
pub fn file_part(metric: &str) -> String {
    metric
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes every configured plot for a sweep; returns the paths written.
pub fn write_sweep_plots(dir: &Path, meta: &Meta, agg: &Aggregate, dpi: u32) -> Result<Vec<PathBuf>> {
    let plan = &meta.plan;
    let idx = |name: &str| plan.axes.iter().position(|a| a.name == name);
    // Defaults: the axis with the most values across, the one with the next most (heatmap
    // rows) or the fewest (line series); ties go to the earlier axis.
    let mut by_size: Vec<usize> = (0..plan.axes.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(plan.axes[i].levels.len()));
    let heat_axes = match &plan.plot.heatmap {
        Some(v) => Some((idx(&v[0]).expect("validated"), idx(&v[1]).expect("validated"))),
        None if by_size.len() >= 2 => Some((by_size[0], by_size[1])),
        None => None,
    };
    let line_axes = match &plan.plot.line {
        Some(v) => Some((
            idx(&v[0]).expect("validated"),
            v.get(1).map(|s| idx(s).expect("validated")),
        )),
        None => by_size.first().map(|&x| {
            let series = (0..plan.axes.len())
                .filter(|&i| i != x)
                .min_by_key(|&i| plan.axes[i].levels.len());
            (x, series)
        }),
    };
    let mut out = Vec::new();
    for metric in plan.plot_metrics() {
        let part = file_part(metric);
        if let Some((x, y)) = heat_axes
            && let Some(h) = Heatmap::new(meta, agg, metric, x, y)
        {
            out.extend(save(&h, &dir.join(format!("heatmap_{part}")), dpi)?);
        }
        if let Some((x, s)) = line_axes
            && let Some(l) = Lines::new(meta, agg, metric, x, s)
        {
            out.extend(save(&l, &dir.join(format!("line_{part}")), dpi)?);
        }
    }
    Ok(out)
}
