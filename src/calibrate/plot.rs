//! `sim validate`'s figure: the measured and simulated CDFs of TTFT, TPOT and E2E, and the
//! running, waiting and cumulative generation-token series over time.

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::validate::Validation;
use crate::plot::{Figure, PALETTE, font, pe};

/// The validation figure.
pub struct ValidationFigure<'a> {
    /// What it draws.
    pub v: &'a Validation,
}

/// One panel: a title, axis labels and two curves (measured, simulated).
struct Panel {
    title: String,
    x_label: &'static str,
    y_label: &'static str,
    measured: Vec<(f64, f64)>,
    simulated: Vec<(f64, f64)>,
}

fn cdf(xs: impl Iterator<Item = f64>) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = xs.collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter().enumerate().map(|(i, x)| (*x, (i + 1) as f64 / n)).collect()
}

impl ValidationFigure<'_> {
    fn panels(&self) -> Vec<Panel> {
        let mut out = Vec::new();
        for l in &self.v.latencies {
            let k = if l.name == "tpot" { 1e3 } else { 1.0 };
            out.push(Panel {
                title: format!("{} CDF", l.name.to_uppercase()),
                x_label: if l.name == "tpot" { "ms" } else { "s" },
                y_label: "share of requests",
                measured: cdf(l.pairs.iter().map(|p| p.0 * k)),
                simulated: cdf(l.pairs.iter().map(|p| p.1 * k)),
            });
        }
        for g in &self.v.gauges {
            out.push(Panel {
                title: format!("{} over time", g.name),
                x_label: "t (s)",
                y_label: "requests",
                measured: g.points.iter().map(|p| (p.0, p.1)).collect(),
                simulated: g.points.iter().map(|p| (p.0, p.2)).collect(),
            });
        }
        if !self.v.cum_gen.is_empty() {
            out.push(Panel {
                title: "generation tokens (cumulative)".into(),
                x_label: "t (s)",
                y_label: "thousand tokens",
                measured: self.v.cum_gen.iter().map(|p| (p.0, p.1 / 1e3)).collect(),
                simulated: self.v.cum_gen.iter().map(|p| (p.0, p.2 / 1e3)).collect(),
            });
        }
        out
    }
}

impl Figure for ValidationFigure<'_> {
    fn size(&self) -> (u32, u32) {
        let rows = self.panels().len().div_ceil(3) as u32;
        (1500, 80 + 380 * rows.max(1))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let panels = self.panels();
        let (title_area, body) = root.split_vertically(60);
        title_area
            .draw(&Text::new(
                crate::plot::clip(
                    &format!(
                        "{}: measured (blue) vs simulated (orange), profile {}",
                        self.v.source, self.v.profile
                    ),
                    150,
                ),
                (20, 20),
                font(20.0),
            ))
            .map_err(pe)?;
        let rows = panels.len().div_ceil(3).max(1);
        let areas = body.split_evenly((rows, 3));
        for (p, area) in panels.iter().zip(areas.iter()) {
            let pts = p.measured.iter().chain(&p.simulated);
            let x_max = pts.clone().map(|q| q.0).fold(0.0f64, f64::max).max(1e-9) * 1.02;
            let x_min = pts.clone().map(|q| q.0).fold(f64::INFINITY, f64::min).min(0.0);
            let y_max = pts.map(|q| q.1).fold(0.0f64, f64::max).max(1e-9) * 1.05;
            let mut chart = ChartBuilder::on(area)
                .caption(&p.title, font(18.0))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(x_min..x_max, 0.0..y_max)
                .map_err(pe)?;
            chart
                .configure_mesh()
                .x_desc(p.x_label)
                .y_desc(p.y_label)
                .label_style(font(13.0))
                .axis_desc_style(font(14.0))
                .x_labels(6)
                .y_labels(6)
                .draw()
                .map_err(pe)?;
            for (series, color, label) in [
                (&p.measured, PALETTE[0], "measured"),
                (&p.simulated, PALETTE[1], "simulated"),
            ] {
                chart
                    .draw_series(LineSeries::new(series.iter().copied(), color.stroke_width(2)))
                    .map_err(pe)?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
            }
            chart
                .configure_series_labels()
                .label_font(font(13.0))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .position(SeriesLabelPosition::LowerRight)
                .draw()
                .map_err(pe)?;
        }
        Ok(())
    }
}
