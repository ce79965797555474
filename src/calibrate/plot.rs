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
                    &format!("{}: measured vs simulated, profile {}", self.v.source, self.v.profile),
                    120,
                ),
                (20, 20),
                font(20.0),
            ))
            .map_err(pe)?;
        // One legend for every panel, in the title row: inside a panel it would cover the
        // curves' tails, where measurement and model part.
        let (w, _) = title_area.dim_in_pixel();
        let x0 = w as i32 - 290;
        for (k, (color, label)) in [(PALETTE[0], "measured"), (PALETTE[1], "simulated")]
            .into_iter()
            .enumerate()
        {
            let x = x0 + 140 * k as i32;
            title_area
                .draw(&PathElement::new(vec![(x, 31), (x + 28, 31)], color.stroke_width(3)))
                .map_err(pe)?;
            title_area
                .draw(&Text::new(label, (x + 36, 22), font(16.0)))
                .map_err(pe)?;
        }
        let rows = panels.len().div_ceil(3).max(1);
        let areas = body.split_evenly((rows, 3));
        for (p, area) in panels.iter().zip(areas.iter()) {
            draw_panel(p, area)?;
        }
        Ok(())
    }
}

/// A tick label without a fraction the value does not have (`50`, not `50.0`).
fn tick(v: f64) -> String {
    let r = (v * 1e6).round() / 1e6;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        let s = format!("{r:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn draw_panel<DB: DrawingBackend>(p: &Panel, area: &DrawingArea<DB, Shift>) -> Result<()> {
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
    crate::plot::mesh(&mut chart)
        .x_desc(p.x_label)
        .y_desc(p.y_label)
        .label_style(font(13.0))
        .axis_desc_style(font(14.0))
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .draw()
        .map_err(pe)?;
    for (series, color) in [(&p.measured, PALETTE[0]), (&p.simulated, PALETTE[1])] {
        chart
            .draw_series(LineSeries::new(series.iter().copied(), color.stroke_width(2)))
            .map_err(pe)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_show_only_the_fraction_they_have() {
        assert_eq!(super::tick(50.0), "50");
        assert_eq!(super::tick(0.0), "0");
        assert_eq!(super::tick(0.2), "0.2");
        assert_eq!(super::tick(0.30000000000000004), "0.3");
        assert_eq!(super::tick(-2.5), "-2.5");
    }
}
