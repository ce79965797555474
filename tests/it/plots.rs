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
    run_into(&base, &[]);
    run_into(&hi, &["--dpi", "192"]);
    let (w, h, ppm, rgb) = png(&base.join("timeseries.png"));
    assert_eq!(ppm, None, "the default PNG records no resolution");
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/burst8/timeseries.png");
    assert_eq!(
        std::fs::read(base.join("timeseries.png")).unwrap(),
        std::fs::read(committed).unwrap(),
        "the default is the committed picture"
    );
    let (w2, h2, ppm2, rgb2) = png(&hi.join("timeseries.png"));
    assert_eq!((w2, h2), (2 * w, 2 * h));
    assert_eq!(ppm2, Some(7559), "192 dpi = 7559 pixels per metre");
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
