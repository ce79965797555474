//! `regret.png`: each candidate's regret on every member, one row per candidate, one panel
//! per metric, log scale; equal-hardware members blue, mixed orange, the median a black bar.

use std::path::{Path, PathBuf};

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Family, METRICS, quantile};
use crate::plot::{Figure, PALETTE, font, pe, save};

struct RegretPlot<'a> {
    f: &'a Family,
    regs: Vec<Vec<Vec<f64>>>,
}

const PANEL_W: u32 = 360;
const LABEL_W: u32 = 230;
const ROW_H: u32 = 24;

impl Figure for RegretPlot<'_> {
    fn size(&self) -> (u32, u32) {
        (LABEL_W + PANEL_W * 3, 90 + ROW_H * self.f.candidates.len() as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let f = self.f;
        let title = format!(
            "Regret against each member's best candidate: {} members ({} mixed), seeds 1-{}, family seed {}",
            f.setups.len(),
            f.members(Some(true)).len(),
            f.seeds,
            f.seed
        );
        let (top, body) = root.split_vertically(34);
        top.draw_text(&title, &font(14.0), (10, 10)).map_err(pe)?;
        let (labels, panels) = body.split_horizontally(LABEL_W);
        let n = f.candidates.len();
        let names = ["idle-while-queued", "TTFT p99", "prefix hit rate"];
        let areas = panels.split_evenly((1, 3));
        for (m, area) in areas.iter().enumerate() {
            let max = self.regs[m].iter().flatten().copied().fold(1.0, f64::max);
            let hi = (max * 1.3).max(2.0);
            let mut chart = ChartBuilder::on(area)
                .margin_right(12)
                .x_label_area_size(36)
                .caption(format!("{} ({})", names[m], METRICS[m]), font(12.0))
                .build_cartesian_2d((1.0f64..hi).log_scale(), -0.5f64..(n as f64 - 0.5))
                .map_err(pe)?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(0)
                .x_labels(6)
                .x_label_formatter(&|v| {
                    format!("{v:.3}")
                        .trim_end_matches('0')
                        .trim_end_matches('.')
                        .to_string()
                })
                .x_desc("regret (1 = best; log scale)")
                .label_style(font(10.0))
                .axis_desc_style(font(11.0))
                .draw()
                .map_err(pe)?;
            // The 2x line of the p90 target.
            chart
                .draw_series(LineSeries::new(
                    [(2.0, -0.5), (2.0, n as f64 - 0.5)],
                    RGBColor(200, 200, 200).stroke_width(1),
                ))
                .map_err(pe)?;
            for c in 0..n {
                let y = (n - 1 - c) as f64;
                let pts = f.setups.iter().enumerate().map(|(s, setup)| {
                    // Deterministic vertical spread so members do not hide each other.
                    let dy = ((s % 7) as f64 - 3.0) * 0.07;
                    let colour = if setup.mixed { PALETTE[1] } else { PALETTE[0] };
                    Circle::new((self.regs[m][c][s].max(1.0), y + dy), 2, colour.mix(0.6).filled())
                });
                chart.draw_series(pts).map_err(pe)?;
                let med = quantile(&self.regs[m][c], 0.5).max(1.0);
                chart
                    .draw_series(LineSeries::new([(med, y - 0.4), (med, y + 0.4)], BLACK.stroke_width(2)))
                    .map_err(pe)?;
            }
        }
        // Candidate labels, aligned with the rows of the panels' plotting areas.
        let plot_h = body.dim_in_pixel().1 as f64 - 36.0 - 22.0;
        for (c, cand) in f.candidates.iter().enumerate() {
            let y = 22.0 + plot_h * (c as f64 + 0.5) / n as f64;
            labels
                .draw_text(&cand.label, &font(11.0), (8, y as i32 - 6))
                .map_err(pe)?;
        }
        labels
            .draw_text("blue: equal, orange: mixed", &font(10.0), (8, plot_h as i32 + 30))
            .map_err(pe)?;
        Ok(())
    }
}

/// Writes `regret.svg` and `regret.png` into `dir`.
pub fn write(dir: &Path, f: &Family, dpi: u32) -> Result<Vec<PathBuf>> {
    let fig = RegretPlot {
        f,
        regs: (0..3).map(|m| f.regrets(m)).collect(),
    };
    save(&fig, &dir.join("regret"), dpi)
}
