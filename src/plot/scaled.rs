//! PNGs at a chosen resolution (`--dpi`): a drawing backend that multiplies every
//! coordinate, stroke width, radius and font size by one factor before handing it to the
//! real backend. Figures keep laying themselves out in their own pixels (96 per inch), so a
//! 192-dpi PNG is the same picture with twice the pixels, not a blurred upscale, and no
//! second renderer is involved.

use plotters::style::{FontDesc, TextStyle};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind};

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
        let t = self.text(style);
        self.inner.draw_text(text, &t, self.at(pos))
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
