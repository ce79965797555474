//! Plot options from the command line: `--dpi` redraws PNGs at a resolution (and records
//! it), leaves SVGs and the default PNGs alone, and refuses nonsense in one line.

use std::path::Path;

use crate::common::sim;
use predicates::prelude::*;

fn run_into(dir: &Path, extra: &[&str]) {
    sim()
        .args(["run", "scenarios/burst8.toml", "--quiet", "--out"])
        .arg(dir)
        .args(extra)
        .assert()
        .success();
}

/// Width, height, pixels per metre (if recorded) and the RGB bytes of a PNG.
fn png(p: &Path) -> (u32, u32, Option<u32>, Vec<u8>) {
    let dec = png::Decoder::new(std::fs::File::open(p).unwrap());
    let mut r = dec.read_info().unwrap();
    let ppm = r.info().pixel_dims.map(|d| {
        assert_eq!(d.unit, png::Unit::Meter);
        assert_eq!(d.xppu, d.yppu);
        d.xppu
    });
    let mut buf = vec![0; r.output_buffer_size()];
    let f = r.next_frame(&mut buf).unwrap();
    buf.truncate(f.buffer_size());
    (f.width, f.height, ppm, buf)
}

/// Share of pixels that are not white.
fn ink(rgb: &[u8]) -> f64 {
    let px = rgb.chunks(3);
    let n = px.len() as f64;
    px.filter(|p| p != &[255, 255, 255]).count() as f64 / n
}

#[test]
fn dpi_redraws_pngs_and_leaves_svgs_and_defaults_alone() {
    let t = tempfile::tempdir().unwrap();
    let (base, hi) = (t.path().join("base"), t.path().join("hi"));
    run_into(&base, &["--dpi", "96"]);
    run_into(&hi, &[]);
    let (w, h, ppm, rgb) = png(&base.join("timeseries.png"));
    assert_eq!(
        ppm, None,
        "a 96-dpi PNG (the figure's own pixels) records no resolution"
    );
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/burst8/timeseries.png");
    assert_eq!(
        std::fs::read(hi.join("timeseries.png")).unwrap(),
        std::fs::read(committed).unwrap(),
        "the default (192 dpi, twice the pixels) is the committed picture"
    );
    let (w2, h2, ppm2, rgb2) = png(&hi.join("timeseries.png"));
    assert_eq!((w2, h2), (2 * w, 2 * h));
    assert_eq!(ppm2, Some(7559), "192 dpi (the default) = 7559 pixels per metre");
    // The same picture redrawn: text, lines and areas cover the same share of the canvas
    // (a blank or mis-scaled drawing would not), within 10% for line-width rounding.
    let (a, b) = (ink(&rgb), ink(&rgb2));
    assert!((b - a).abs() < 0.1 * a, "ink share {a:.4} at 96 dpi, {b:.4} at 192 dpi");
    assert_eq!(
        std::fs::read(base.join("timeseries.svg")).unwrap(),
        std::fs::read(hi.join("timeseries.svg")).unwrap(),
        "SVGs do not depend on --dpi"
    );
}

#[test]
fn bad_dpi_is_one_line_exit_2() {
    for v in ["10", "0", "high"] {
        sim()
            .args(["run", "scenarios/burst8.toml", "--no-files", "--dpi", v])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--dpi").and(predicate::str::contains("panicked").not()))
            .stderr(predicate::function(|s: &str| s.trim_end().lines().count() == 1));
    }
}

/// The compare-replicas heatmap has five policies whose names are wider than a cell: all
/// five are drawn (alternating rows), none skipped.
#[test]
fn heatmap_keeps_every_column_label() {
    let t = tempfile::tempdir().unwrap();
    sim()
        .args([
            "sweep",
            "scenarios/compare-replicas.toml",
            "--seeds",
            "1",
            "--quiet",
            "--out",
        ])
        .arg(t.path())
        .assert()
        .success();
    let svg = std::fs::read_to_string(t.path().join("heatmap_idle_while_queued_s.svg")).unwrap();
    for policy in ["least_request", "p2c-local", "loadaware", "dynamo", "prefixaware+qps"] {
        assert!(
            svg.contains(&format!(">\n{policy}\n</text>")),
            "{policy} missing from the heatmap"
        );
    }
}

/// The SVGs carry their text in the embedded font (DejaVu Sans, as the PNGs): each glyph's
/// outline once, placed per character, and the text itself transparent for search, so a
/// machine without the font renders the SVG as the PNG.
#[test]
fn svg_text_is_drawn_in_the_embedded_font() {
    let t = tempfile::tempdir().unwrap();
    run_into(t.path(), &[]);
    let svg = std::fs::read_to_string(t.path().join("timeseries.svg")).unwrap();
    let texts = svg.matches("<text ").count();
    assert!(texts > 10, "{texts} labels");
    assert_eq!(svg.matches("font-family=\"DejaVu Sans, sans-serif\"").count(), texts);
    assert_eq!(
        svg.matches("<text ").count(),
        svg.matches(" opacity=\"0\" fill").count()
    );
    // "backend-0 (requests)" is drawn rotated: its glyphs are there, in the font's outline.
    let glyphs = svg.matches("<path id=\"g").count();
    assert!((20..100).contains(&glyphs), "{glyphs} distinct glyphs");
    let uses = svg.matches("<use xlink:href=\"#g").count();
    assert!(uses > 150, "{uses} glyphs placed");
    assert!(svg.contains(" rotate(270) "), "the rotated axis labels");
    assert!(svg.starts_with("<svg xmlns:xlink=\"http://www.w3.org/1999/xlink\" "));
}

/// The time series a design doc can use: the title names the scenario, the policy and the
/// seed; waiting is stacked on running (an area, not a line over the running area), so 4
/// running + 4 waiting stands above the slot line; every panel has the same grid; the y axis
/// follows the data, not a slot limit far above it; time is in the unit its span needs.
#[test]
fn time_series_reads_at_a_glance() {
    let t = tempfile::tempdir().unwrap();
    run_into(t.path(), &[]);
    let svg = std::fs::read_to_string(t.path().join("timeseries.svg")).unwrap();
    assert!(
        svg.contains("burst8: prefixaware (prefix_min_match_length = 16384, fallback = qps), seed 1"),
        "title with scenario, policy and seed"
    );
    assert!(svg.contains("waiting (stacked)"));
    // The waiting band is a filled polygon in its own colour (Okabe-Ito vermillion at 75 %
    // over white, opaque, so the idle-while-queued shading behind it does not show through).
    assert!(
        svg.contains("<polygon") && svg.contains("#E08640"),
        "waiting drawn as a stacked area"
    );
    // The y axis reaches 8 (4 running + 4 waiting), which a slot-scaled axis (4) would not.
    assert!(svg.contains(">\n8\n</text>"), "y scaled to running + waiting");
    assert!(svg.contains("simulated time (s)"));
    // Vertical grid lines in both panels: the 50 s tick's line is drawn once per panel.
    let grid = svg.matches(r##"stroke="#E1E1E1""##).count();
    assert!(grid >= 2 * 10, "grid in every panel ({grid} grid lines)");
    // A replay-like fleet with 1,024 slots and a handful of requests: the axis follows the
    // data and the panel says where the slot limit went.
    let t2 = tempfile::tempdir().unwrap();
    run_into(t2.path(), &["--set", "backends.max_num_seqs=1024"]);
    let svg = std::fs::read_to_string(t2.path().join("timeseries.svg")).unwrap();
    assert!(svg.contains("slot limit 1024, above the scale"));
    assert!(!svg.contains(">\n1000\n</text>"), "no tick near 1,024");
}

fn sweep_into(dir: &Path, scenario: &str) {
    sim()
        .args(["sweep", scenario, "--seeds", "2", "--quiet", "--out"])
        .arg(dir)
        .assert()
        .success();
}

/// Sweep line plots: labels in words with one unit; five series drawn with error bars and
/// distinct markers, not five overlapping CI bands; a policy axis drawn as categories; a
/// metric spanning decades on a log scale.
#[test]
fn sweep_plots_tell_series_apart_and_label_once() {
    let t = tempfile::tempdir().unwrap();
    sweep_into(t.path(), "scenarios/compare-replicas.toml");
    let svg = std::fs::read_to_string(t.path().join("line_idle_while_queued_s.svg")).unwrap();
    assert!(svg.contains("idle while queued (s)"), "human label");
    assert!(!svg.contains("idle_while_queued_s (s)"), "no doubled unit");
    assert!(svg.contains("policy = least_request"), "legend in words");
    assert!(!svg.contains(r#"opacity="0.15""#), "five series: error bars, no bands");
    // Markers other than circles: triangles and diamonds are polygons.
    assert!(svg.matches("<polygon").count() >= 8, "distinct marker shapes");
    let t2 = tempfile::tempdir().unwrap();
    sweep_into(t2.path(), "scenarios/compare-agent-burst.toml");
    let svg = std::fs::read_to_string(t2.path().join("line_idle_while_queued_s.svg")).unwrap();
    // 3 s to 400 s idle while queued: two decades, so a log axis with decade ticks.
    assert!(svg.contains("log scale"), "values spanning decades on a log scale");
    assert!(svg.contains(">\n100\n</text>") && svg.contains(">\n10\n</text>"));
    // Policies as categories: one label per policy, no line joining them.
    assert!(svg.contains(">\nleast_request\n</text>"));
    // Series lines are CI bars of two points each: nothing joins one policy to the next.
    for line in svg
        .split("<polyline")
        .skip(1)
        .filter(|l| l.contains(r##"stroke="#0072B2""##))
    {
        let pts = line.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        assert_eq!(pts.split_whitespace().count(), 2, "categories are not joined: {pts}");
    }
}
