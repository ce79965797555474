//! Plots (plotters), each written as SVG and PNG with the same layout.
//!
//! The font (DejaVu Sans, `assets/fonts/`) is compiled into the binary and registered with
//! plotters' `ab_glyph` backend, so text is measured and rasterized identically on every
//! machine and a fresh machine with no fonts installed draws the same pictures. Plot files
//! are deterministic: the same data gives byte-identical SVG and PNG.
//!
//! Plot code sees only result data (sweep aggregates, run time series), never the simulator.

pub mod pareto;
pub mod series;
pub mod sweep;

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The embedded font's family name.
pub const FONT: &str = "sans-serif";

static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES)
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font is valid"));
    });
}

/// Tableau 10: distinguishable series colours.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// A picture that can be drawn on any plotters backend.
pub trait Figure {
    /// Pixel size.
    fn size(&self) -> (u32, u32);
    /// Draws onto `root` (already filled white).
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>;
}

/// Maps a plotters error (whose type depends on the backend) into anyhow.
pub fn pe<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing failed: {e:?}")
}

/// Writes `<stem>.svg` and `<stem>.png`; returns both paths.
pub fn save(fig: &impl Figure, stem: &Path) -> Result<Vec<PathBuf>> {
    register_font();
    let size = fig.size();
    let svg_path = stem.with_extension("svg");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(pe)?;
        fig.draw(&root)?;
        root.present().map_err(pe)?;
    }
    crate::sweep::table::write_atomic(&svg_path, |b| {
        b.extend_from_slice(svg.as_bytes());
        Ok(())
    })?;
    let png_path = stem.with_extension("png");
    let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        root.fill(&WHITE).map_err(pe)?;
        fig.draw(&root)?;
        root.present().map_err(pe)?;
    }
    crate::sweep::table::write_atomic(&png_path, |b| encode_png(b, &rgb, size))?;
    Ok(vec![svg_path, png_path])
}

fn encode_png(out: &mut Vec<u8>, rgb: &[u8], (w, h): (u32, u32)) -> Result<()> {
    let mut enc = png::Encoder::new(out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut wr = enc.write_header()?;
    wr.write_image_data(rgb)?;
    wr.finish()?;
    Ok(())
}

/// Draws the chart's series legend in the house style at `pos`.
pub fn draw_legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    pos: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(font(11.0))
        .position(pos)
        .draw()
        .map_err(pe)
}

/// A text style in the embedded font.
pub fn font(size: f64) -> TextStyle<'static> {
    (FONT, size).into_font().color(&BLACK)
}

/// Rows and columns for `n` panels, close to square and wider than tall.
pub fn grid_shape(n: usize) -> (usize, usize) {
    let cols = (n as f64).sqrt().ceil().max(1.0) as usize;
    let rows = n.div_ceil(cols).max(1);
    (rows, cols)
}

/// Shortens a label to `max` characters with an ellipsis.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panel_grids_are_near_square() {
        assert_eq!(grid_shape(1), (1, 1));
        assert_eq!(grid_shape(2), (1, 2));
        assert_eq!(grid_shape(4), (2, 2));
        assert_eq!(grid_shape(5), (2, 3));
        assert_eq!(grid_shape(8), (3, 3));
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
