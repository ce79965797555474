//! Plots (plotters), each written as SVG and PNG with the same layout.
//!
//! The font (DejaVu Sans, `assets/fonts/`) is compiled into the binary and registered with
//! plotters' `ab_glyph` backend, so text is measured and rasterized identically on every
//! machine and a fresh machine with no fonts installed draws the same pictures. The SVGs
//! carry the text as the same font's glyph outlines (`glyphs.rs`), so they too render the
//! same without the font installed. Plot files
//! are deterministic: the same data gives byte-identical SVG and PNG.
//!
//! Plot code sees only result data (sweep aggregates, run time series), never the simulator.
//!
//! Owns: figure layout and rendering. May not see: the simulation; only summaries, series
//! and sweep tables. Invariant: the same data gives the same bytes (fixed font, no clock).

pub mod glyphs;
pub mod scaled;
pub mod series;

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Result, anyhow};
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The embedded font's family name.
pub const FONT: &str = "sans-serif";

static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// The embedded font, parsed once.
pub(crate) fn embedded_font() -> &'static ab_glyph::FontRef<'static> {
    static PARSED: std::sync::OnceLock<ab_glyph::FontRef<'static>> = std::sync::OnceLock::new();
    PARSED.get_or_init(|| {
        ab_glyph::FontRef::try_from_slice(FONT_BYTES)
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font is valid"))
    })
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES)
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font is valid"));
    });
}

/// Okabe and Ito's colour-blind-safe palette (blue, orange, bluish green, vermillion,
/// reddish purple, sky blue, yellow, black): every pair stays apart under protanopia,
/// deuteranopia and tritanopia. Series beyond eight also change marker ([`MARKERS`]).
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
];

/// Marker shapes, cycled with the colours so that series that share a colour (the ninth
/// and the first) or sit on top of each other stay distinguishable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// A filled circle.
    Circle,
    /// A filled square.
    Square,
    /// A filled triangle.
    Triangle,
    /// A diagonal cross.
    Cross,
    /// A filled diamond.
    Diamond,
}

/// The marker sequence: series `s` gets `MARKERS[s % 5]` and `PALETTE[s % 8]`, so the first
/// 40 series differ in colour or shape.
pub const MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
    Marker::Cross,
];

/// Series `s`'s colour and marker.
pub fn series_style(s: usize) -> (RGBColor, Marker) {
    (PALETTE[s % PALETTE.len()], MARKERS[s % MARKERS.len()])
}

/// A chart with two real-valued axes (the sweep, series and Pareto plots').
pub type Chart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

/// Draws marker `m` of radius `r` pixels at data point `at` on a chart.
pub fn draw_marker<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    m: Marker,
    at: (f64, f64),
    r: i32,
    c: RGBColor,
) -> Result<()> {
    let fill = c.filled();
    let e = EmptyElement::at(at);
    match m {
        Marker::Circle => chart.draw_series(std::iter::once(e + Circle::new((0, 0), r, fill))),
        Marker::Square => chart.draw_series(std::iter::once(e + Rectangle::new([(-r, -r), (r, r)], fill))),
        Marker::Triangle => chart.draw_series(std::iter::once(
            e + Polygon::new(vec![(0, -r - 1), (r + 1, r), (-r - 1, r)], fill),
        )),
        Marker::Diamond => chart.draw_series(std::iter::once(
            e + Polygon::new(vec![(0, -r - 1), (r + 1, 0), (0, r + 1), (-r - 1, 0)], fill),
        )),
        Marker::Cross => chart.draw_series(std::iter::once(
            e + PathElement::new(vec![(-r, -r), (r, r)], c.stroke_width(2))
                + PathElement::new(vec![(-r, r), (r, -r)], c.stroke_width(2)),
        )),
    }
    .map_err(pe)?;
    Ok(())
}

/// A metric's name for people, with its unit once: `ttft_p99_s` -> `TTFT p99 (s)`,
/// `idle_while_queued_s` -> `idle while queued (s)`, `prefix_cache_hit_rate` -> `prefix
/// cache hit rate (fraction)`, `latched_sessions` -> `latched sessions (count)`,
/// `gpu_seconds` -> `GPU seconds (GPU-s)`, `cost_usd` -> `cost (USD)`.
pub fn human_metric(metric: &str) -> String {
    let (stem, unit) = crate::metrics::split_unit(metric);
    let unit = match unit {
        "_s" => "s",
        "_rps" => "requests/s",
        "_per_s" => "per s",
        _ if metric.ends_with("_rate") || metric.ends_with("attainment") => "fraction",
        // Money and capacity-time: a count would misread them.
        _ if stem.split('_').any(|w| w == "usd") => "USD",
        _ if stem.starts_with("gpu_seconds") => "GPU-s",
        _ if stem.starts_with("replica_seconds") => "replica-s",
        _ => "count",
    };
    let stem = stem.strip_suffix("_usd").unwrap_or(stem);
    format!("{} ({unit})", human_words(stem))
}

/// Underscores to spaces, with the acronyms people write in capitals.
fn human_words(stem: &str) -> String {
    stem.split('_')
        .filter(|w| !w.is_empty())
        .map(|w| match w {
            "ttft" | "tpot" | "itl" | "kv" | "qps" | "cv" | "gpu" | "usd" | "slo" => w.to_uppercase(),
            _ => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The unit a time axis spanning `span_s` seconds reads best in, and its length in seconds:
/// seconds up to 10 minutes, minutes up to 3 hours, hours up to 3 days, then days.
pub fn time_unit(span_s: f64) -> (&'static str, f64) {
    if span_s <= 600.0 {
        ("s", 1.0)
    } else if span_s <= 3.0 * 3600.0 {
        ("min", 60.0)
    } else if span_s <= 3.0 * 86_400.0 {
        ("h", 3600.0)
    } else {
        ("d", 86_400.0)
    }
}

/// The PNG resolution drawn when `--dpi` is not given: twice the figures' own pixels.
pub const DEFAULT_DPI: u32 = 2 * scaled::BASE_DPI;

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

/// Writes `<stem>.svg` and `<stem>.png` (at `dpi`); returns both paths.
pub fn save(fig: &impl Figure, stem: &Path, dpi: u32) -> Result<Vec<PathBuf>> {
    register_font();
    let size = fig.size();
    let svg_path = stem.with_extension("svg");
    let mut svg = String::new();
    paint(fig, SVGBackend::with_string(&mut svg, size))?;
    let svg = glyphs::outline_text(&svg, embedded_font());
    crate::atomic::write_atomic(&svg_path, |b| {
        b.extend_from_slice(svg.as_bytes());
        Ok(())
    })?;
    let png_path = stem.with_extension("png");
    let k = f64::from(dpi) / f64::from(scaled::BASE_DPI);
    let px = scaled::scaled_size(size, k);
    let mut rgb = vec![0u8; px.0 as usize * px.1 as usize * 3];
    let bitmap = BitMapBackend::with_buffer(&mut rgb, px);
    // Always through `Scaled` (k = 1 at 96 dpi): it also sets the text (glyphs at their
    // side bearings, which plotters' own text drawing leaves out).
    paint(fig, scaled::Scaled::new(bitmap, size, k))?;
    crate::atomic::write_atomic(&png_path, |b| encode_png(b, &rgb, px, dpi))?;
    Ok(vec![svg_path, png_path])
}

fn paint<DB: DrawingBackend>(fig: &impl Figure, backend: DB) -> Result<()> {
    let root = backend.into_drawing_area();
    root.fill(&WHITE).map_err(pe)?;
    fig.draw(&root)?;
    root.present().map_err(pe)
}

/// The plot options of every command that draws (`sim run`, `sim sweep`, `sim merge`,
/// `sim tune`).
#[derive(clap::Args, Debug, Clone)]
pub struct PlotArgs {
    /// PNG resolution in dots per inch: 192 (the default) draws each figure at twice its
    /// own pixel size, sharp on high-DPI screens and slides; 96 draws it at its pixel size,
    /// 300 is print. The picture is the same (redrawn, not upscaled) and the PNG records
    /// its resolution; SVGs are not affected.
    #[arg(long, value_name = "DPI", default_value_t = DEFAULT_DPI,
          value_parser = clap::value_parser!(u32).range(24..=1200))]
    pub dpi: u32,
}

impl PlotArgs {
    /// The PNG resolution to draw at, unless `no_plots` (the command's `--no-plots`).
    pub fn dpi(&self, no_plots: bool) -> Option<u32> {
        (!no_plots).then_some(self.dpi)
    }
}

fn encode_png(out: &mut Vec<u8>, rgb: &[u8], (w, h): (u32, u32), dpi: u32) -> Result<()> {
    let mut enc = png::Encoder::new(out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    if dpi != scaled::BASE_DPI {
        // pHYs, so a document or slide places the picture at its figure size, not at
        // `dpi / 96` times it. (96 dpi, the figure's own pixels, writes none.)
        let ppm = (f64::from(dpi) / 0.0254).round() as u32;
        enc.set_pixel_dims(Some(png::PixelDimensions {
            xppu: ppm,
            yppu: ppm,
            unit: png::Unit::Meter,
        }));
    }
    let mut wr = enc.write_header()?;
    wr.write_image_data(rgb)?;
    wr.finish()?;
    Ok(())
}

/// Draws a chart's series legend inside its plotting area at `pos` (for charts whose data
/// leave a corner free, such as the Pareto scatter).
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

/// A chart's mesh in the house style: 11-pixel tick labels, 12-pixel axis titles, no fine
/// grid, a light grey main grid. The caller adds its ticks, formatters and titles, then
/// draws.
pub fn mesh<'a, 'b, DB, X, Y, XT, YT>(
    chart: &'b mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> MeshStyle<'a, 'b, X, Y, DB>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = XT> + ValueFormatter<XT>,
    Y: Ranged<ValueType = YT> + ValueFormatter<YT>,
{
    let mut mesh = chart.configure_mesh();
    mesh.label_style(font(11.0))
        .axis_desc_style(font(12.0))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225));
    mesh
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

/// An axis title for a metric: [`human_metric`].
pub fn metric_label(metric: &str) -> String {
    human_metric(metric)
}

/// A sweep axis title in words with its unit when its name carries one:
/// `router.engine_stats_interval_s` -> `engine stats interval (s)`; axes of case labels
/// (`fallback`, `setup`) and unitless values (`router.policy.band`) keep their last name.
pub fn axis_label(name: &str) -> String {
    let last = name.rsplit('.').next().unwrap_or(name);
    let (stem, unit) = crate::metrics::split_unit(last);
    let unit = match unit {
        "_s" => " (s)",
        "_per_s" => " (per s)",
        "_rps" => " (requests/s)",
        _ => "",
    };
    format!("{}{unit}", human_words(stem))
}

/// A sweep axis at one value, in words, its unit after the value:
/// `router.engine_stats_interval_s` at `10` -> `engine stats interval = 10 s`, `fallback` at
/// `qps` -> `fallback = qps`.
pub fn axis_value(name: &str, value: &str) -> String {
    let last = name.rsplit('.').next().unwrap_or(name);
    let (stem, unit) = crate::metrics::split_unit(last);
    let unit = match unit {
        "_s" if value.parse::<f64>().is_ok() => " s",
        "_per_s" if value.parse::<f64>().is_ok() => " per s",
        _ => "",
    };
    format!("{} = {value}{unit}", human_words(stem))
}

/// The values a metric can take: every fleetsim metric is >= 0 (times, counts, rates),
/// and rates (`*_rate`) are at most 1. Confidence intervals are clipped to these bounds.
pub fn natural_bounds(metric: &str) -> (f64, f64) {
    (0.0, if metric.ends_with("_rate") { 1.0 } else { f64::INFINITY })
}

/// A readable label for an axis value: an inline table (`{ kind = "leastinflight", band =
/// 0 }`, a policy axis) becomes its kind followed by its other keys (`leastinflight
/// band=0`); a quoted string loses its quotes; anything else is kept.
pub fn readable_label(label: &str) -> String {
    let t = label.trim();
    if t.starts_with('{')
        && let Ok(v) = toml::from_str::<toml::Table>(&format!("v = {t}"))
        && let Some(toml::Value::Table(tab)) = v.get("v")
    {
        let show = |v: &toml::Value| match v {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let mut parts: Vec<String> = tab.get("kind").map(show).into_iter().collect();
        parts.extend(
            tab.iter()
                .filter(|(k, _)| *k != "kind")
                .map(|(k, v)| format!("{k}={}", show(v))),
        );
        return parts.join(" ");
    }
    t.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(t)
        .to_string()
}

/// How a legend entry is drawn.
#[derive(Clone, Copy, Debug)]
pub enum Swatch {
    /// A line.
    Line(RGBColor, u32),
    /// A dashed line (as a `DashedLineSeries` of 6 on, 4 off draws it).
    Dashed(RGBColor, u32),
    /// A filled dot.
    Dot(RGBColor),
    /// A filled box (an area).
    Area(RGBAColor),
    /// A line through a marker (a series of a line or dot plot).
    Series(RGBColor, Marker),
}

fn swatch<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, s: Swatch, (x, y): (i32, i32)) -> Result<()> {
    match s {
        Swatch::Line(c, w) => area.draw(&PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(w))),
        Swatch::Dashed(c, w) => area
            .draw(&PathElement::new(vec![(x, y), (x + 6, y)], c.stroke_width(w)))
            .and_then(|_| area.draw(&PathElement::new(vec![(x + 10, y), (x + 16, y)], c.stroke_width(w)))),
        Swatch::Dot(c) => area.draw(&Circle::new((x + 9, y), 4, c.filled())),
        Swatch::Area(c) => area.draw(&Rectangle::new([(x, y - 5), (x + 18, y + 5)], c.filled())),
        Swatch::Series(c, m) => {
            area.draw(&PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)))
                .map_err(pe)?;
            let (cx, r) = (x + 9, 4);
            let f = c.filled();
            match m {
                Marker::Circle => area.draw(&Circle::new((cx, y), r, f)),
                Marker::Square => area.draw(&Rectangle::new([(cx - r, y - r), (cx + r, y + r)], f)),
                Marker::Triangle => area.draw(&Polygon::new(
                    vec![(cx, y - r - 1), (cx + r + 1, y + r), (cx - r - 1, y + r)],
                    f,
                )),
                Marker::Diamond => area.draw(&Polygon::new(
                    vec![(cx, y - r - 1), (cx + r + 1, y), (cx, y + r + 1), (cx - r - 1, y)],
                    f,
                )),
                Marker::Cross => area
                    .draw(&PathElement::new(
                        vec![(cx - r, y - r), (cx + r, y + r)],
                        c.stroke_width(2),
                    ))
                    .and_then(|_| {
                        area.draw(&PathElement::new(
                            vec![(cx - r, y + r), (cx + r, y - r)],
                            c.stroke_width(2),
                        ))
                    }),
            }
        }
    }
    .map_err(pe)
}

/// Width in pixels a legend of `labels` needs when stacked vertically.
pub fn legend_width<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, labels: &[String]) -> Result<u32> {
    let mut w = 0;
    for l in labels {
        w = w.max(area.estimate_text_size(l, &font(11.0)).map_err(pe)?.0);
    }
    Ok(w + 40)
}

/// Draws one legend for a whole figure outside the data: stacked downwards from `(x, y)`,
/// or in a row leftwards ending at `x` when `row` is set (for a title strip).
pub fn draw_legend_outside<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, Swatch)],
    (x, y): (i32, i32),
    row: bool,
) -> Result<()> {
    let f = font(11.0).pos(Pos::new(HPos::Left, VPos::Center));
    if row {
        let mut right = x;
        for (label, s) in entries.iter().rev() {
            let tw = area.estimate_text_size(label, &font(11.0)).map_err(pe)?.0 as i32;
            let left = right - tw - 24;
            swatch(area, *s, (left, y))?;
            area.draw(&Text::new(label.clone(), (left + 22, y), f.clone()))
                .map_err(pe)?;
            right = left - 16;
        }
        return Ok(());
    }
    for (i, (label, s)) in entries.iter().enumerate() {
        let yy = y + 18 * i as i32;
        swatch(area, *s, (x, yy))?;
        area.draw(&Text::new(label.clone(), (x + 24, yy), f.clone()))
            .map_err(pe)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_readable_and_carry_units() {
        assert_eq!(
            readable_label(r#"{ kind = "leastinflight", band = 0 }"#),
            "leastinflight band=0"
        );
        assert_eq!(readable_label(r#"{ kind = "roundrobin" }"#), "roundrobin");
        assert_eq!(readable_label(r#""qps""#), "qps");
        assert_eq!(readable_label("0.5"), "0.5");
        // One unit each, in words: no "ttft_p99_s (s)".
        assert_eq!(metric_label("ttft_p99_s"), "TTFT p99 (s)");
        assert_eq!(metric_label("idle_while_queued_s"), "idle while queued (s)");
        assert_eq!(
            metric_label("prefix_cache_hit_rate"),
            "prefix cache hit rate (fraction)"
        );
        assert_eq!(metric_label("latched_sessions"), "latched sessions (count)");
        assert_eq!(
            metric_label("gpu_seconds_idle_while_queued"),
            "GPU seconds idle while queued (GPU-s)"
        );
        assert_eq!(metric_label("cost_per_1k_requests_usd"), "cost per 1k requests (USD)");
        assert_eq!(metric_label("slo_attainment"), "SLO attainment (fraction)");
        assert_eq!(
            axis_label("router.engine_stats_interval_s"),
            "engine stats interval (s)"
        );
        assert_eq!(axis_label("router.policy.band"), "band");
        assert_eq!(
            axis_value("router.engine_stats_interval_s", "10"),
            "engine stats interval = 10 s"
        );
        assert_eq!(axis_value("fallback", "qps (main)"), "fallback = qps (main)");
        assert_eq!(axis_label("fallback"), "fallback");
        assert_eq!(natural_bounds("prefix_cache_hit_rate"), (0.0, 1.0));
        assert_eq!(natural_bounds("idle_while_queued_s").0, 0.0);
    }

    #[test]
    fn time_axes_pick_a_unit_for_their_span() {
        assert_eq!(time_unit(252.0).0, "s");
        assert_eq!(time_unit(1200.0).0, "min");
        assert_eq!(time_unit(7200.0).0, "min");
        assert_eq!(time_unit(425_000.0).0, "d");
        assert_eq!(time_unit(36_000.0), ("h", 3600.0));
    }

    #[test]
    fn palette_is_okabe_ito_and_markers_cycle() {
        assert_eq!(PALETTE[0], RGBColor(0, 114, 178));
        assert_eq!(PALETTE[1], RGBColor(230, 159, 0));
        // The ninth series shares the first's colour but not its marker.
        assert_eq!(series_style(8).0, series_style(0).0);
        assert_ne!(series_style(8).1, series_style(0).1);
    }

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
