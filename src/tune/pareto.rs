//! The `sim tune` Pareto plot: every candidate's mean over the screening seeds on the first
//! two Pareto metrics, the non-dominated ones joined and labelled, the winner and the
//! scenario's own configuration marked.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plot::{Figure, PALETTE, clip, draw_legend, font, pe};
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
    winner: String,
}

impl ParetoPlot {
    /// From a finished report.
    pub fn new(r: &Report) -> ParetoPlot {
        let p = &r.pareto;
        let points = p
            .points
            .iter()
            .enumerate()
            .filter(|(_, (_, v))| v[0].is_finite() && v[1].is_finite())
            .map(|(i, (l, v))| (l.clone(), v[0], v[1], p.front.contains(&i)))
            .collect();
        let third = p
            .metrics
            .get(2)
            .map_or(String::new(), |m| format!(" (front also over {m})"));
        ParetoPlot {
            title: format!(
                "{}: {} candidates, means over {} screening seeds{third}",
                r.scenario,
                p.points.len(),
                p.seeds.len()
            ),
            x_name: p.metrics[0].clone(),
            y_name: p.metrics[1].clone(),
            points,
            winner: r.winner.clone(),
        }
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

impl Figure for ParetoPlot {
    fn size(&self) -> (u32, u32) {
        (900, 640)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let (x0, x1) = range(self.points.iter().map(|p| p.1));
        let (y0, y1) = range(self.points.iter().map(|p| p.2));
        let mut chart = ChartBuilder::on(root)
            .caption(clip(&self.title, 100), font(15.0))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .x_desc(format!("{} (mean, lower is better unless a rate)", self.x_name))
            .y_desc(self.y_name.clone())
            .x_label_formatter(&|v| fmt_stat(*v))
            .y_label_formatter(&|v| fmt_stat(*v))
            .label_style(font(11.0))
            .axis_desc_style(font(12.0))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(pe)?;
        let grey = RGBColor(150, 150, 150);
        chart
            .draw_series(
                self.points
                    .iter()
                    .filter(|p| !p.3)
                    .map(|p| Circle::new((p.1, p.2), 3, grey.filled())),
            )
            .map_err(pe)?
            .label("dominated")
            .legend(move |(x, y)| Circle::new((x, y), 3, grey.filled()));
        let mut front: Vec<&(String, f64, f64, bool)> = self.points.iter().filter(|p| p.3).collect();
        front.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)));
        let blue = PALETTE[0];
        chart
            .draw_series(LineSeries::new(front.iter().map(|p| (p.1, p.2)), blue.stroke_width(1)))
            .map_err(pe)?;
        chart
            .draw_series(front.iter().map(|p| Circle::new((p.1, p.2), 5, blue.filled())))
            .map_err(pe)?
            .label("Pareto front")
            .legend(move |(x, y)| Circle::new((x, y), 5, blue.filled()));
        // Label at most 12 front points (the first ones along x), each position once with
        // a count of the candidates that share it, to keep the plot legible.
        let mut labelled: Vec<(f64, f64)> = Vec::new();
        for p in &front {
            if labelled.len() == 12 || labelled.contains(&(p.1, p.2)) {
                continue;
            }
            labelled.push((p.1, p.2));
            let same = front.iter().filter(|q| (q.1, q.2) == (p.1, p.2)).count();
            let text = if same > 1 {
                format!("{} (+{} at the same point)", clip(&p.0, 40), same - 1)
            } else {
                clip(&p.0, 44)
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (p.1, p.2),
                    font(10.0).pos(plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Left,
                        plotters::style::text_anchor::VPos::Bottom,
                    )),
                )))
                .map_err(pe)?;
        }
        let red = PALETTE[3];
        let green = PALETTE[2];
        for (label, colour, name) in [
            (&self.winner, red, "winner"),
            (&OWN.to_string(), green, "scenario's own"),
        ] {
            if let Some(p) = self.points.iter().find(|p| p.0 == *label) {
                let name = if name == "winner" {
                    format!("winner: {}", clip(&p.0, 50))
                } else {
                    name.to_string()
                };
                chart
                    .draw_series(std::iter::once(TriangleMarker::new((p.1, p.2), 9, colour.filled())))
                    .map_err(pe)?
                    .label(name)
                    .legend(move |(x, y)| TriangleMarker::new((x, y), 6, colour.filled()));
            }
        }
        // Lower right: with two metrics to minimize, the front is lower left and the worst
        // candidates upper right.
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
    }
}
