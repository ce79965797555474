//! The `sim tune` Pareto plot: every candidate's means over the seeds it ran (the ranked
//! table's numbers) on the first two Pareto metrics, with 95 % CI bars, hollow where the
//! search stopped a candidate before its last round (fewer seeds, wider bars); the
//! non-dominated ones joined as a staircase (two metrics) and labelled where a label fits
//! without overlapping another, the winner and the scenario's own configuration marked by
//! shape as well as colour (Okabe-Ito). An axis whose values span two decades or more is
//! drawn on a log scale, so a crowd near zero spreads out.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::plot::{Chart, Figure, PALETTE, clip, draw_legend, font, human_metric, mesh, pe};
use crate::sweep::table::fmt_stat;
use crate::tune::report::Report;
use crate::tune::space::OWN;

/// The plot's data.
pub struct ParetoPlot {
    title: String,
    x_name: String,
    y_name: String,
    /// `(label, x, y, on front)`.
    points: Vec<(String, f64, f64, bool)>,
    /// Per point: seeds run, and the x and y CI half-widths.
    spread: Vec<(usize, f64, f64)>,
    /// Metrics the front is over (a third one makes the 2-D picture partial).
    front_metrics: usize,
    winner: String,
}

impl ParetoPlot {
    /// From a finished report.
    pub fn new(r: &Report) -> ParetoPlot {
        let p = &r.pareto;
        let keep: Vec<usize> = (0..p.points.len())
            .filter(|&i| p.points[i].1[0].is_finite() && p.points[i].1[1].is_finite())
            .collect();
        let points = keep
            .iter()
            .map(|&i| {
                let (l, v) = &p.points[i];
                (l.clone(), v[0], v[1], p.front.contains(&i))
            })
            .collect();
        let spread = keep
            .iter()
            .map(|&i| {
                p.spread
                    .get(i)
                    .map_or((0, f64::NAN, f64::NAN), |(n, ci)| (*n, ci[0], ci[1]))
            })
            .collect::<Vec<_>>();
        let (lo, hi) = spread.iter().fold((usize::MAX, 0), |(a, b), s: &(usize, f64, f64)| {
            (a.min(s.0), b.max(s.0))
        });
        let seeds = if lo == hi {
            format!("{hi} seeds")
        } else {
            format!("{lo} to {hi} seeds")
        };
        let third = p
            .metrics
            .get(2)
            .map_or(String::new(), |m| format!("; front also over {m}"));
        ParetoPlot {
            title: format!(
                "{}: {} candidates, mean and 95% CI over each one's seeds ({seeds}){third}",
                r.scenario,
                p.points.len(),
            ),
            x_name: p.metrics[0].clone(),
            y_name: p.metrics[1].clone(),
            points,
            spread,
            front_metrics: p.metrics.len(),
            winner: r.winner.clone(),
        }
    }

    /// Error bars: each point's CI on both axes (on a log axis, cut at the axis' lower end).
    fn bars(&self, sc: Scales, floor: (f64, f64)) -> Vec<PathElement<(f64, f64)>> {
        let grey = RGBColor(170, 170, 170);
        let (lx, ly) = (sc.log_x, sc.log_y);
        let mut out = Vec::new();
        for (p, &(_, cx, cy)) in self.points.iter().zip(&self.spread) {
            let (x, y) = sc.at(p);
            let lo = |v: f64, c: f64, log: bool, f: f64| if log && v - c <= 0.0 { f } else { axis(v - c, log) };
            if cx.is_finite() && cx > 0.0 {
                let seg = vec![(lo(p.1, cx, lx, floor.0), y), (axis(p.1 + cx, lx), y)];
                out.push(PathElement::new(seg, grey.stroke_width(1)));
            }
            if cy.is_finite() && cy > 0.0 {
                let seg = vec![(x, lo(p.2, cy, ly, floor.1)), (x, axis(p.2 + cy, ly))];
                out.push(PathElement::new(seg, grey.stroke_width(1)));
            }
        }
        out
    }
}

/// A log axis when every value is positive and they span [`crate::sweep::plot::LOG_SPAN`].
fn is_log(xs: impl Iterator<Item = f64> + Clone) -> bool {
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(f64::NEG_INFINITY, f64::max);
    lo > 0.0 && hi / lo >= crate::sweep::plot::LOG_SPAN
}

fn axis(v: f64, log: bool) -> f64 {
    if log { v.log10() } else { v }
}

fn tick(v: f64, log: bool) -> String {
    if !log {
        return fmt_stat(v);
    }
    // Decades and their 2x and 5x marks.
    let p = 10f64.powf(v);
    let m = p / 10f64.powf(v.floor());
    match [1.0, 2.0, 5.0, 10.0].iter().find(|k| (m - *k).abs() < 0.03 * *k) {
        Some(k) => fmt_stat(k * 10f64.powf(v.floor())),
        None => String::new(),
    }
}

fn range(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.02).max(1e-9);
    (lo - pad, hi + pad)
}

/// A candidate's point: `(label, x, y, on front)`.
type Point = (String, f64, f64, bool);

/// A box on the canvas, pixels: `(left, top, right, bottom)`.
type PixelBox = (i32, i32, i32, i32);

/// Which axes are drawn on a log scale: where a point goes.
#[derive(Clone, Copy)]
struct Scales {
    log_x: bool,
    log_y: bool,
}

impl Scales {
    /// The chart coordinates of `p` (a log axis holds log10 of the value).
    fn at(self, p: &Point) -> (f64, f64) {
        (axis(p.1, self.log_x), axis(p.2, self.log_y))
    }
}

impl Figure for ParetoPlot {
    fn size(&self) -> (u32, u32) {
        (900, 640)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let sc = Scales {
            log_x: is_log(self.points.iter().map(|p| p.1)),
            log_y: is_log(self.points.iter().map(|p| p.2)),
        };
        let (x0, x1) = range(self.points.iter().map(|p| sc.at(p).0));
        let (y0, y1) = range(self.points.iter().map(|p| sc.at(p).1));
        let scale = |name: &str, log: bool| {
            if log {
                format!("{}, log scale", human_metric(name))
            } else {
                human_metric(name)
            }
        };
        let mut chart = ChartBuilder::on(root)
            .caption(clip(&self.title, 100), font(15.0))
            .margin(12)
            .margin_right(24)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(pe)?;
        mesh(&mut chart)
            .x_desc(format!("{}, mean", scale(&self.x_name, sc.log_x)))
            .y_desc(format!("{}, mean", scale(&self.y_name, sc.log_y)))
            .x_labels(if sc.log_x { 40 } else { 10 })
            .y_labels(if sc.log_y { 40 } else { 10 })
            .x_label_formatter(&|v| tick(*v, sc.log_x))
            .y_label_formatter(&|v| tick(*v, sc.log_y))
            .draw()
            .map_err(pe)?;
        chart.draw_series(self.bars(sc, (x0, y0))).map_err(pe)?;
        let mut front: Vec<&Point> = self.points.iter().filter(|p| p.3).collect();
        front.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)));
        self.draw_points(&mut chart, &front, sc)?;
        self.draw_labels(&chart, &front, sc)?;
        // Lower right: with two metrics to minimize, the front is lower left and the worst
        // candidates upper right.
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}

impl ParetoPlot {
    /// The dominated candidates in grey, the front joined in blue, the winner a triangle and
    /// the scenario's own configuration a square.
    fn draw_points<DB: DrawingBackend>(&self, chart: &mut Chart<DB>, front: &[&Point], sc: Scales) -> Result<()> {
        self.draw_dominated(chart, sc)?;
        let blue = PALETTE[0];
        // Two metrics: the front is the staircase through its points (what it dominates
        // lies above and right of it). Over a third metric its points need not form one.
        if self.front_metrics == 2 && front.len() > 1 {
            // The corner keeps the y of the point whose x is worse.
            let x_max = crate::tune::objective::maximize(&self.x_name);
            let mut stairs = Vec::new();
            for w in front.windows(2) {
                let (a, b) = (sc.at(w[0]), sc.at(w[1]));
                stairs.extend([a, if x_max { (a.0, b.1) } else { (b.0, a.1) }]);
            }
            stairs.push(sc.at(front[front.len() - 1]));
            chart
                .draw_series(std::iter::once(PathElement::new(stairs, blue.stroke_width(1))))
                .map_err(pe)?;
        }
        let front_label = match (self.front_metrics, front.len()) {
            (2, 1) => "Pareto front: one candidate, better on both".to_string(),
            (2, _) => "Pareto front".to_string(),
            (n, _) => format!("non-dominated over the {n} metrics"),
        };
        chart
            .draw_series(front.iter().map(|p| Circle::new(sc.at(p), 5, blue.filled())))
            .map_err(pe)?
            .label(front_label)
            .legend(move |(x, y)| Circle::new((x, y), 5, blue.filled()));
        let (winner_c, own_c) = (PALETTE[3], RGBColor(0, 0, 0));
        if let Some(p) = self.points.iter().find(|p| p.0 == self.winner) {
            chart
                .draw_series(std::iter::once(TriangleMarker::new(sc.at(p), 10, winner_c.filled())))
                .map_err(pe)?
                .label(format!("winner: {}", clip(&p.0, 50)))
                .legend(move |(x, y)| TriangleMarker::new((x, y), 6, winner_c.filled()));
        }
        if let Some(p) = self.points.iter().find(|p| p.0 == OWN) {
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at(sc.at(p)) + Rectangle::new([(-6, -6), (6, 6)], own_c.filled()),
                ))
                .map_err(pe)?
                .label("scenario's own")
                .legend(move |(x, y)| Rectangle::new([(x - 5, y - 5), (x + 5, y + 5)], own_c.filled()));
        }
        Ok(())
    }

    /// The dominated candidates in grey: filled where they ran every seed of the last
    /// round, hollow where the search stopped them early (fewer seeds, wider bars).
    fn draw_dominated<DB: DrawingBackend>(&self, chart: &mut Chart<DB>, sc: Scales) -> Result<()> {
        let grey = RGBColor(150, 150, 150);
        let most = self.spread.iter().map(|s| s.0).max().unwrap_or(0);
        let full = |i: usize| self.spread.get(i).is_none_or(|s| s.0 == most);
        let dominated: Vec<(usize, &Point)> = self.points.iter().enumerate().filter(|(_, p)| !p.3).collect();
        chart
            .draw_series(
                dominated
                    .iter()
                    .filter(|(i, _)| full(*i))
                    .map(|(_, p)| Circle::new(sc.at(p), 3, grey.filled())),
            )
            .map_err(pe)?
            .label(format!("dominated ({most} seeds)"))
            .legend(move |(x, y)| Circle::new((x, y), 3, grey.filled()));
        if dominated.iter().any(|(i, _)| !full(*i)) {
            chart
                .draw_series(
                    dominated
                        .iter()
                        .filter(|(i, _)| !full(*i))
                        .map(|(_, p)| Circle::new(sc.at(p), 3, grey.stroke_width(1))),
                )
                .map_err(pe)?
                .label("dominated, stopped early (fewer seeds)")
                .legend(move |(x, y)| Circle::new((x, y), 3, grey.stroke_width(1)));
        }
        Ok(())
    }

    /// The labels wanted: the front's points (at most 12, each position once with a count
    /// of the candidates sharing it), then the winner's and the scenario's.
    fn labels_wanted(&self, front: &[&Point], sc: Scales) -> Vec<(String, (f64, f64))> {
        let mut wanted: Vec<(String, (f64, f64))> = Vec::new();
        let mut seen: Vec<(f64, f64)> = Vec::new();
        for p in front {
            if seen.len() == 12 || seen.contains(&(p.1, p.2)) {
                continue;
            }
            seen.push((p.1, p.2));
            let same = front.iter().filter(|q| (q.1, q.2) == (p.1, p.2)).count();
            let text = if same > 1 {
                format!("{} (+{} here)", clip(&p.0, 36), same - 1)
            } else {
                clip(&p.0, 44)
            };
            wanted.push((text, sc.at(p)));
        }
        for name in [&self.winner, &OWN.to_string()] {
            if let Some(p) = self.points.iter().find(|p| p.0 == *name && !p.3) {
                wanted.push((clip(&p.0, 44), sc.at(p)));
            }
        }
        wanted
    }

    /// Each wanted label at the first of four corners around its point where it overlaps
    /// no marker (of the front, the winner, the scenario's own) and no earlier label; left
    /// out where none is free.
    fn draw_labels<DB: DrawingBackend>(&self, chart: &Chart<DB>, front: &[&Point], sc: Scales) -> Result<()> {
        let mut taken: Vec<PixelBox> = self
            .points
            .iter()
            .filter(|p| p.3 || p.0 == self.winner || p.0 == OWN)
            .map(|p| {
                let (x, y) = chart.backend_coord(&sc.at(p));
                (x - 6, y - 6, x + 6, y + 6)
            })
            .collect();
        let area = chart.plotting_area().strip_coord_spec();
        let (aw, ah) = area.dim_in_pixel();
        let (ox, oy) = chart.plotting_area().get_base_pixel();
        let f = font(10.0);
        for (text, at) in self.labels_wanted(front, sc) {
            let (px, py) = chart.backend_coord(&at);
            let (tw, th) = area.estimate_text_size(&text, &f).map_err(pe)?;
            let (tw, th) = (tw as i32, th as i32);
            let boxes = [
                (px + 7, py - 7 - th),
                (px + 7, py + 7),
                (px - 7 - tw, py - 7 - th),
                (px - 7 - tw, py + 7),
            ];
            let free = boxes.into_iter().find(|&(x, y)| {
                let b = (x, y, x + tw, y + th);
                let inside = b.0 >= ox && b.1 >= oy && b.2 <= ox + aw as i32 && b.3 <= oy + ah as i32;
                inside && !taken.iter().any(|t| b.0 < t.2 && t.0 < b.2 && b.1 < t.3 && t.1 < b.3)
            });
            if let Some((x, y)) = free {
                taken.push((x, y, x + tw, y + th));
                area.draw(&Text::new(
                    text,
                    (x - ox, y - oy),
                    f.clone().pos(Pos::new(HPos::Left, VPos::Top)),
                ))
                .map_err(pe)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axes_for_values_spanning_decades() {
        assert!(is_log([3.0, 12.0, 660.0].into_iter()));
        assert!(!is_log([0.0, 12.0, 660.0].into_iter()), "a zero forbids a log axis");
        assert!(!is_log([1.2, 6.3].into_iter()));
        assert_eq!(tick(2.0, true), "100");
        assert_eq!(tick(2f64.log10() + 1.0, true), "20");
        assert_eq!(tick(0.15, true), "");
    }
}
