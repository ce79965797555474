//! SVG text in the embedded font: every `<text>` plotters writes is drawn again as the
//! embedded DejaVu Sans's glyph outlines, placed exactly where the PNG's rasterizer puts
//! them, so an SVG renders the same on a machine without the font. Each glyph's outline is
//! written once (`<defs>`, in font units) and placed with `<use>`; the `<text>` stays,
//! transparent, so the labels can still be searched and selected.
//!
//! The placement is the PNG's ([`layout`]): plotters' text box (advances and kerning) and
//! anchor offsets in whole pixels, then each glyph's origin at its pen position, so a
//! glyph keeps its side bearings (plotters' own rasterizer drops them, drawing "TTFT" as
//! "TTF T"); rotations by quarter turns.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ab_glyph::{Font, FontRef, GlyphId, OutlineCurve, ScaleFont};

/// The family name the transparent text names (the font the outlines come from).
pub const FAMILY: &str = "DejaVu Sans";

/// One `<text>` element as plotters wrote it.
struct Text<'a> {
    x: f64,
    y: f64,
    /// `0.76em` (top), `0.5ex` (centre) or `-0.5ex` (bottom).
    dy: &'a str,
    anchor: &'a str,
    /// plotters' font size (the attribute is this / 1.24).
    size: f64,
    opacity: &'a str,
    fill: &'a str,
    /// Degrees, about (x, y).
    rotate: i32,
    text: String,
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let i = tag.find(&key)? + key.len();
    let j = tag[i..].find('"')? + i;
    Some(&tag[i..j])
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

fn parse<'a>(tag: &'a str, body: &str) -> Option<Text<'a>> {
    let rotate = match attr(tag, "transform") {
        Some(t) => t.strip_prefix("rotate(")?.split(',').next()?.trim().parse().ok()?,
        None => 0,
    };
    Some(Text {
        x: attr(tag, "x")?.parse().ok()?,
        y: attr(tag, "y")?.parse().ok()?,
        dy: attr(tag, "dy")?,
        anchor: attr(tag, "text-anchor")?,
        size: attr(tag, "font-size")?.parse::<f64>().ok()? * 1.24,
        opacity: attr(tag, "opacity").unwrap_or("1"),
        fill: attr(tag, "fill").unwrap_or("#000000"),
        rotate,
        text: unescape(body),
    })
}

/// Rewrites plotters' SVG so that its text is drawn in `font`'s outlines.
pub fn outline_text(svg: &str, font: &FontRef<'_>) -> String {
    let mut body = String::with_capacity(svg.len() * 2);
    let mut used: BTreeMap<u16, ()> = BTreeMap::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text ") {
        body.push_str(&rest[..i]);
        let after = &rest[i..];
        let (Some(open_end), Some(close)) = (after.find('>'), after.find("</text>")) else {
            break;
        };
        let tag = &after[..open_end];
        let inner = after[open_end + 1..close].trim_matches('\n');
        let end = close + "</text>".len();
        match parse(tag, inner) {
            Some(t) => {
                place(&t, font, &mut body, &mut used);
                // The text stays for search and selection, transparent.
                let tag = tag
                    .replacen(&format!(" opacity=\"{}\"", t.opacity), " opacity=\"0\"", 1)
                    .replacen(
                        " font-family=\"sans-serif\"",
                        &format!(" font-family=\"{FAMILY}, sans-serif\""),
                        1,
                    );
                body.push_str(&tag);
                body.push_str(&after[open_end..end]);
            }
            None => body.push_str(&after[..end]),
        }
        rest = &after[end..];
    }
    body.push_str(rest);
    let mut defs = String::from("<defs>\n");
    for id in used.keys() {
        if let Some(d) = outline(font, GlyphId(*id)) {
            let _ = writeln!(defs, "<path id=\"g{id}\" d=\"{d}\"/>");
        }
    }
    defs.push_str("</defs>\n");
    // The defs go right after the opening <svg ...> tag; <use> needs the xlink namespace
    // for SVG 1.1 renderers.
    match body.find('>') {
        Some(i) if body.starts_with("<svg") => {
            let open = body[..i].replacen("<svg ", "<svg xmlns:xlink=\"http://www.w3.org/1999/xlink\" ", 1);
            format!("{open}>\n{defs}{}", body[i + 1..].trim_start_matches('\n'))
        }
        _ => body,
    }
}

/// A glyph's outline in font units (y up), as path data.
fn outline(font: &FontRef<'_>, id: GlyphId) -> Option<String> {
    let o = font.outline(id)?;
    let mut d = String::new();
    let mut at: Option<ab_glyph::Point> = None;
    let p = |d: &mut String, q: ab_glyph::Point| {
        let _ = write!(d, "{} {}", q.x, q.y);
    };
    for c in &o.curves {
        let (start, end) = match c {
            OutlineCurve::Line(a, b) => (*a, *b),
            OutlineCurve::Quad(a, _, c) => (*a, *c),
            OutlineCurve::Cubic(a, _, _, d) => (*a, *d),
        };
        if at != Some(start) {
            if at.is_some() {
                d.push('Z');
            }
            d.push('M');
            p(&mut d, start);
        }
        match c {
            OutlineCurve::Line(_, b) => {
                d.push('L');
                p(&mut d, *b);
            }
            OutlineCurve::Quad(_, b, c) => {
                d.push('Q');
                p(&mut d, *b);
                d.push(' ');
                p(&mut d, *c);
            }
            OutlineCurve::Cubic(_, b, c, e) => {
                d.push('C');
                p(&mut d, *b);
                d.push(' ');
                p(&mut d, *c);
                d.push(' ');
                p(&mut d, *e);
            }
        }
        at = Some(end);
    }
    if at.is_some() {
        d.push('Z');
    }
    Some(d)
}

/// A line of text in the embedded font at `size` (plotters' font size): the width of its
/// box as plotters measures it (advances and kerning, truncated to whole pixels) and each
/// glyph with its pen position (its origin, from which its outline keeps its side bearing).
/// The PNG ([`super::scaled`]) and the SVG place glyphs by this one layout.
pub fn layout(font: &FontRef<'_>, size: f64, text: &str) -> (i32, Vec<(GlyphId, f32)>) {
    let scaled = font.as_scaled(size as f32);
    let (mut pen, mut prev) = (0f32, None);
    let mut glyphs = Vec::with_capacity(text.len());
    for c in text.chars() {
        let g = scaled.glyph_id(c);
        if let Some(p) = prev {
            pen += scaled.kern(p, g);
        }
        glyphs.push((g, pen));
        pen += scaled.h_advance(g);
        prev = Some(g);
    }
    (pen as i32, glyphs)
}

/// The baseline's distance below the top of a text box of plotters' font `size` (where
/// plotters' own rasterizer puts it, so boxes and anchors keep their places).
pub fn baseline(size: f64) -> f32 {
    size as f32 / 2.0
}

/// Writes one `<use>` per visible glyph of `t`, where the PNG's rasterizer draws it: the
/// glyph's origin at its pen position on the baseline.
fn place(t: &Text<'_>, font: &FontRef<'_>, out: &mut String, used: &mut BTreeMap<u16, ()>) {
    let size = t.size;
    let scaled = font.as_scaled(size as f32);
    let (w, glyphs) = layout(font, size, &t.text);
    let h = (size / 1.24) as i32;
    let dx = match t.anchor {
        "end" => -w,
        "middle" => -w / 2,
        _ => 0,
    };
    let dy = match t.dy {
        "0.5ex" => -h / 2,
        "-0.5ex" => -h,
        _ => 0,
    };
    let (hs, vs) = (scaled.h_scale_factor(), scaled.v_scale_factor());
    let ty = dy as f32 + baseline(size);
    for (id, pen) in glyphs {
        if font.outline(id).is_none() {
            continue;
        }
        used.insert(id.0, ());
        let tx = dx as f32 + pen;
        let rot = if t.rotate == 0 {
            String::new()
        } else {
            format!(" rotate({})", t.rotate)
        };
        let _ = writeln!(
            out,
            "<use xlink:href=\"#g{}\" transform=\"translate({} {}){rot} translate({tx:.3} {ty:.3}) scale({hs:.6} {:.6})\" fill=\"{}\" opacity=\"{}\"/>",
            id.0, t.x, t.y, -vs, t.fill, t.opacity
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_becomes_placed_outlines_and_stays_searchable() {
        let font = FontRef::try_from_slice(super::super::FONT_BYTES).unwrap();
        let svg = "<svg width=\"10\" height=\"10\" viewBox=\"0 0 10 10\" xmlns=\"http://www.w3.org/2000/svg\">\n<text x=\"5\" y=\"6\" dy=\"0.5ex\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"8\" opacity=\"1\" fill=\"#000000\" transform=\"rotate(270, 5, 6)\">\nA&amp;A\n</text>\n</svg>\n";
        let out = outline_text(svg, &font);
        let a = font.glyph_id('A').0;
        assert_eq!(out.matches(&format!("<path id=\"g{a}\"")).count(), 1, "{out}");
        assert_eq!(out.matches(&format!("xlink:href=\"#g{a}\"")).count(), 2, "{out}");
        assert!(out.contains("rotate(270)"), "{out}");
        assert!(
            out.contains(">\nA&amp;A\n</text>") && out.contains("opacity=\"0\""),
            "{out}"
        );
        assert!(out.contains("font-family=\"DejaVu Sans, sans-serif\""), "{out}");
    }
}
