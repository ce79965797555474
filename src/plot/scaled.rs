//! PNGs at a chosen resolution (`--dpi`): a drawing backend that multiplies every
//! coordinate, stroke width, radius and font size by one factor before handing it to the
//! real backend. Figures keep laying themselves out in their own pixels (96 per inch), so a
//! 192-dpi PNG is the same picture with twice the pixels, not a blurred upscale, and no
//! second renderer is involved. Text in the embedded font is set here (`set_text`), at
//! every resolution, with each glyph's side bearings.

use plotters::style::{FontDesc, TextStyle};
use plotters_backend::text_anchor::{HPos, Pos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind, FontTransform,
};

/// The resolution figures are laid out at: one figure pixel per PNG pixel.
pub const BASE_DPI: u32 = 96;

/// `inner`, seen through the figure's own (unscaled) pixel grid.
pub struct Scaled<DB> {
    inner: DB,
    k: f64,
    size: (u32, u32),
}

/// The PNG size of a figure of `size` at scale `k`.
pub fn scaled_size((w, h): (u32, u32), k: f64) -> (u32, u32) {
    ((f64::from(w) * k).round() as u32, (f64::from(h) * k).round() as u32)
}

impl<DB: DrawingBackend> Scaled<DB> {
    /// `inner` must be [`scaled_size`]`(size, k)` pixels.
    pub fn new(inner: DB, size: (u32, u32), k: f64) -> Scaled<DB> {
        Scaled { inner, k, size }
    }

    fn at(&self, (x, y): BackendCoord) -> BackendCoord {
        (
            (f64::from(x) * self.k).round() as i32,
            (f64::from(y) * self.k).round() as i32,
        )
    }

    fn len(&self, v: u32) -> u32 {
        ((f64::from(v) * self.k).round() as u32).max(1)
    }

    fn stroke<S: BackendStyle>(&self, s: &S) -> Stroke {
        Stroke(s.color(), self.len(s.stroke_width()))
    }

    fn text<'a, T: BackendTextStyle>(&self, s: &'a T) -> TextStyle<'a> {
        TextStyle {
            font: FontDesc::new(s.family(), s.size() * self.k, s.style()).transform(s.transform()),
            color: s.color(),
            pos: s.anchor(),
        }
    }
}

/// Rasterizes `text` in the embedded font at plotters' font `size` (backend pixels):
/// plotters' text box and anchor (so layouts do not move), then each glyph with its origin
/// at its pen position on the baseline, at sub-pixel precision. plotters' own drawing puts
/// each glyph's ink box at the pen, dropping the left side bearing: a glyph with a wide
/// bearing (`F`, `i`) shifts left and the gap after it opens ("TTF T", "pref ix").
/// `put` gets each pixel relative to the anchor point, rotated, with its coverage.
fn set_text(text: &str, size: f64, anchor: Pos, rotation: FontTransform, mut put: impl FnMut((i32, i32), f32)) {
    use ab_glyph::Font;
    let font = super::embedded_font();
    let (w, glyphs) = super::glyphs::layout(font, size, text);
    let h = (size / 1.24) as i32;
    let dx = match anchor.h_pos {
        HPos::Left => 0,
        HPos::Right => -w,
        HPos::Center => -w / 2,
    };
    let dy = match anchor.v_pos {
        VPos::Top => 0,
        VPos::Center => -h / 2,
        VPos::Bottom => -h,
    };
    let base = super::glyphs::baseline(size);
    for (id, pen) in glyphs {
        let g = id.with_scale_and_position(size as f32, ab_glyph::point(pen, base));
        let Some(outline) = font.outline_glyph(g) else {
            continue;
        };
        let b = outline.px_bounds();
        let (x0, y0) = (b.min.x as i32 + dx, b.min.y as i32 + dy);
        outline.draw(|x, y, coverage| {
            if coverage > 0.0 {
                put(rotation.transform(x0 + x as i32, y0 + y as i32), coverage);
            }
        });
    }
}

struct Stroke(BackendColor, u32);

impl BackendStyle for Stroke {
    fn color(&self) -> BackendColor {
        self.0
    }
    fn stroke_width(&self) -> u32 {
        self.1
    }
}

type Res<DB> = Result<(), DrawingErrorKind<<DB as DrawingBackend>::ErrorType>>;

impl<DB: DrawingBackend> DrawingBackend for Scaled<DB> {
    type ErrorType = DB::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.size
    }

    fn ensure_prepared(&mut self) -> Res<DB> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Res<DB> {
        self.inner.present()
    }

    fn draw_pixel(&mut self, p: BackendCoord, color: BackendColor) -> Res<DB> {
        // One figure pixel is the block up to the next pixel's scaled corner.
        let (a, b) = (self.at(p), self.at((p.0 + 1, p.1 + 1)));
        self.inner.draw_rect(a, (b.0 - 1, b.1 - 1), &Stroke(color, 1), true)
    }

    fn draw_line<S: BackendStyle>(&mut self, from: BackendCoord, to: BackendCoord, style: &S) -> Res<DB> {
        let s = self.stroke(style);
        self.inner.draw_line(self.at(from), self.at(to), &s)
    }

    fn draw_rect<S: BackendStyle>(&mut self, ul: BackendCoord, br: BackendCoord, style: &S, fill: bool) -> Res<DB> {
        let s = self.stroke(style);
        // A filled rectangle covers its last row and column too, so adjacent cells tile.
        let br = if fill {
            let e = self.at((br.0 + 1, br.1 + 1));
            (e.0 - 1, e.1 - 1)
        } else {
            self.at(br)
        };
        self.inner.draw_rect(self.at(ul), br, &s, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(&mut self, path: I, style: &S) -> Res<DB> {
        let s = self.stroke(style);
        let pts: Vec<BackendCoord> = path.into_iter().map(|p| self.at(p)).collect();
        self.inner.draw_path(pts, &s)
    }

    fn draw_circle<S: BackendStyle>(&mut self, c: BackendCoord, r: u32, style: &S, fill: bool) -> Res<DB> {
        let s = self.stroke(style);
        self.inner.draw_circle(self.at(c), self.len(r), &s, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(&mut self, vert: I, style: &S) -> Res<DB> {
        let s = self.stroke(style);
        let pts: Vec<BackendCoord> = vert.into_iter().map(|p| self.at(p)).collect();
        self.inner.fill_polygon(pts, &s)
    }

    fn draw_text<T: BackendTextStyle>(&mut self, text: &str, style: &T, pos: BackendCoord) -> Res<DB> {
        if style.family().as_str() != super::FONT {
            let t = self.text(style);
            return self.inner.draw_text(text, &t, self.at(pos));
        }
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let size = style.size() * self.k;
        let at = self.at(pos);
        let limit = self.inner.get_size();
        let mut pixels = Vec::new();
        set_text(text, size, style.anchor(), style.transform(), |(x, y), coverage| {
            let (x, y) = (at.0 + x, at.1 + y);
            if x >= 0 && y >= 0 && (x as u32) < limit.0 && (y as u32) < limit.1 {
                pixels.push(((x, y), coverage));
            }
        });
        for (p, coverage) in pixels {
            let c = BackendColor {
                alpha: color.alpha * f64::from(coverage.min(1.0)),
                rgb: color.rgb,
            };
            self.inner.draw_pixel(p, c)?;
        }
        Ok(())
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        // Measured at the scaled size and brought back to figure pixels, so layouts that fit
        // text at 96 dpi fit it at any resolution.
        let (w, h) = self.inner.estimate_text_size(text, &self.text(style))?;
        Ok((
            (f64::from(w) / self.k).ceil() as u32,
            (f64::from(h) / self.k).ceil() as u32,
        ))
    }
}
