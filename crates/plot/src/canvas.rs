//! An RGB pixel buffer with the few primitives a chart needs.
//!
//! Coordinates are `i64` pixels, x to the right and y down, and may lie far
//! outside the image: every write goes through [`Canvas::put`], which drops
//! pixels outside the current clip rectangle. Lines given in `f64` (data
//! mapped to pixels, possibly huge) are clipped to the clip rectangle before
//! they are rasterised, so drawing cost is bounded by the image size.
//!
//! Nothing is anti-aliased; lines are Bresenham, thick lines stamp a square
//! brush along the path. The same calls always produce the same pixels.

use crate::font::{self, ADVANCE, GLYPH_W};

/// An sRGB colour.
pub type Color = [u8; 3];

/// A half-open pixel rectangle `[x0, x1) × [y0, y1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    pub x0: i64,
    pub y0: i64,
    pub x1: i64,
    pub y1: i64,
}

impl Rect {
    /// The rectangle with top-left `(x, y)` and the given size.
    pub fn at(x: i64, y: i64, w: i64, h: i64) -> Rect {
        Rect {
            x0: x,
            y0: y,
            x1: x + w,
            y1: y + h,
        }
    }

    /// This rectangle grown by `d` pixels on every side.
    pub fn grow(self, d: i64) -> Rect {
        Rect {
            x0: self.x0 - d,
            y0: self.y0 - d,
            x1: self.x1 + d,
            y1: self.y1 + d,
        }
    }

    pub fn width(&self) -> i64 {
        self.x1 - self.x0
    }

    pub fn height(&self) -> i64 {
        self.y1 - self.y0
    }

    pub fn contains(&self, x: i64, y: i64) -> bool {
        (self.x0..self.x1).contains(&x) && (self.y0..self.y1).contains(&y)
    }

    fn intersect(self, o: Rect) -> Rect {
        Rect {
            x0: self.x0.max(o.x0),
            y0: self.y0.max(o.y0),
            x1: self.x1.min(o.x1),
            y1: self.y1.min(o.y1),
        }
    }
}

/// Filled shapes for data points; series cycle through them so that points
/// stay distinguishable without colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Diamond,
    Triangle,
}

/// An RGB image being drawn.
#[derive(Debug, Clone)]
pub struct Canvas {
    width: u32,
    height: u32,
    /// Row-major RGB triples.
    pixels: Vec<u8>,
    /// Writes outside this rectangle are dropped; always inside the image.
    clip: Rect,
}

impl Canvas {
    /// A `width × height` image filled with `background`.
    pub fn new(width: u32, height: u32, background: Color) -> Canvas {
        let pixels = background.repeat(width as usize * height as usize);
        Canvas {
            width,
            height,
            pixels,
            clip: Self::full(width, height),
        }
    }

    fn full(width: u32, height: u32) -> Rect {
        Rect::at(0, 0, i64::from(width), i64::from(height))
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// Restricts drawing to `r` (within the image); `None` allows the whole image.
    pub fn set_clip(&mut self, r: Option<Rect>) {
        let full = Self::full(self.width, self.height);
        self.clip = r.map_or(full, |r| r.intersect(full));
    }

    /// The colour at `(x, y)`; panics outside the image.
    pub fn pixel(&self, x: u32, y: u32) -> Color {
        let i = (y as usize * self.width as usize + x as usize) * 3;
        [self.pixels[i], self.pixels[i + 1], self.pixels[i + 2]]
    }

    /// Sets one pixel, if it is inside the clip rectangle.
    pub fn put(&mut self, x: i64, y: i64, c: Color) {
        if self.clip.contains(x, y) {
            let i = (y as usize * self.width as usize + x as usize) * 3;
            self.pixels[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Fills `r`.
    pub fn fill(&mut self, r: Rect, c: Color) {
        let r = r.intersect(self.clip);
        for y in r.y0..r.y1 {
            for x in r.x0..r.x1 {
                self.put(x, y, c);
            }
        }
    }

    /// Draws the one-pixel border just inside `r`.
    pub fn outline(&mut self, r: Rect, c: Color) {
        self.fill(Rect::at(r.x0, r.y0, r.width(), 1), c);
        self.fill(Rect::at(r.x0, r.y1 - 1, r.width(), 1), c);
        self.fill(Rect::at(r.x0, r.y0, 1, r.height()), c);
        self.fill(Rect::at(r.x1 - 1, r.y0, 1, r.height()), c);
    }

    /// A solid line `thick` pixels wide between two pixel centres.
    pub fn line(&mut self, a: (i64, i64), b: (i64, i64), c: Color, thick: u32) {
        self.dashed_line(a, b, c, thick, 1, 0);
    }

    /// A line drawn `dash` pixels on, `gap` pixels off, starting with a dash.
    pub fn dashed_line(
        &mut self,
        (x0, y0): (i64, i64),
        (x1, y1): (i64, i64),
        c: Color,
        thick: u32,
        dash: u32,
        gap: u32,
    ) {
        let period = i64::from(dash + gap).max(1);
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        let mut n = 0i64;
        loop {
            if n % period < i64::from(dash) {
                self.brush(x, y, c, thick);
            }
            n += 1;
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// A square brush of side `thick` centred (rounding up-left) on `(x, y)`.
    fn brush(&mut self, x: i64, y: i64, c: Color, thick: u32) {
        let t = i64::from(thick.max(1));
        let o = t / 2;
        for yy in y - o..y - o + t {
            for xx in x - o..x - o + t {
                self.put(xx, yy, c);
            }
        }
    }

    /// A line between two points in (fractional, possibly far off-image)
    /// pixel coordinates, clipped to the clip rectangle before rasterising.
    pub fn segment(&mut self, a: (f64, f64), b: (f64, f64), c: Color, thick: u32) {
        let r = self.clip.grow(i64::from(thick));
        if let Some((a, b)) = clip_segment(a, b, r) {
            self.line(round(a), round(b), c, thick);
        }
    }

    /// A filled marker of radius `r` at `(x, y)` with a one-pixel ring of `ring`.
    pub fn marker(&mut self, shape: Marker, (x, y): (i64, i64), r: i64, c: Color, ring: Color) {
        self.shape(shape, x, y, r + 1, ring);
        self.shape(shape, x, y, r, c);
    }

    fn shape(&mut self, shape: Marker, x: i64, y: i64, r: i64, c: Color) {
        for dy in -r..=r {
            for dx in -r..=r {
                let inside = match shape {
                    Marker::Circle => dx * dx + dy * dy <= r * r + r / 2,
                    Marker::Square => dx.abs() < r && dy.abs() < r,
                    Marker::Diamond => dx.abs() + dy.abs() <= r + 1,
                    Marker::Triangle => 2 * dx.abs() <= dy + r,
                };
                if inside {
                    self.put(x + dx, y + dy, c);
                }
            }
        }
    }

    /// Draws `text` left to right with its cell's top-left corner at `(x, y)`.
    pub fn text(&mut self, x: i64, y: i64, text: &str, scale: u32, c: Color) {
        self.glyphs(text, scale, c, |tx, ty| (x + tx, y + ty));
    }

    /// Draws `text` rotated a quarter turn anticlockwise (reading upwards),
    /// starting at `(x, y)`, the bottom-left corner of its rotated cell.
    pub fn text_up(&mut self, x: i64, y: i64, text: &str, scale: u32, c: Color) {
        self.glyphs(text, scale, c, |tx, ty| (x + ty, y - 1 - tx));
    }

    /// Rasterises `text` in text space (x along the line, y down the cell)
    /// and places each pixel with `place`.
    fn glyphs(&mut self, text: &str, scale: u32, c: Color, place: impl Fn(i64, i64) -> (i64, i64)) {
        let s = i64::from(scale.max(1));
        for (i, ch) in text.chars().enumerate() {
            let left = i as i64 * i64::from(ADVANCE) * s;
            for (row, bits) in font::glyph(ch).iter().enumerate() {
                for col in 0..GLYPH_W {
                    if bits & (1 << (GLYPH_W - 1 - col)) == 0 {
                        continue;
                    }
                    for py in 0..s {
                        for px in 0..s {
                            let tx = left + i64::from(col) * s + px;
                            let ty = row as i64 * s + py;
                            let (x, y) = place(tx, ty);
                            self.put(x, y, c);
                        }
                    }
                }
            }
        }
    }

    /// The image as PNG bytes (8-bit RGB, no metadata, so identical images
    /// give identical bytes).
    pub fn to_png(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, self.width, self.height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // The writer is a Vec (cannot fail) and the chart clamps its size to
        // a non-zero range whose buffer length matches, so encoding cannot fail.
        let mut writer = enc.write_header().expect("PNG header for a valid size");
        writer
            .write_image_data(&self.pixels)
            .expect("PNG data of the declared size");
        writer.finish().expect("PNG trailer into a Vec");
        out
    }
}

fn round((x, y): (f64, f64)) -> (i64, i64) {
    (x.round() as i64, y.round() as i64)
}

/// Cohen–Sutherland: the part of segment `a`–`b` inside `r` (pixel centres),
/// or `None`. Each step moves an outside end exactly onto an edge, so lines
/// parallel to an axis stay exact even when their ends are astronomically far.
fn clip_segment(a: (f64, f64), b: (f64, f64), r: Rect) -> Option<((f64, f64), (f64, f64))> {
    let (xmin, xmax) = (r.x0 as f64, (r.x1 - 1) as f64);
    let (ymin, ymax) = (r.y0 as f64, (r.y1 - 1) as f64);
    let code = |p: (f64, f64)| -> u8 {
        u8::from(p.0 < xmin)
            | u8::from(p.0 > xmax) << 1
            | u8::from(p.1 < ymin) << 2
            | u8::from(p.1 > ymax) << 3
    };
    let finite = |p: (f64, f64)| p.0.is_finite() && p.1.is_finite();
    let (mut a, mut b) = (a, b);
    // Each pass fixes one coordinate of one end; four passes always suffice.
    for _ in 0..4 {
        if !(finite(a) && finite(b)) {
            return None;
        }
        let (ca, cb) = (code(a), code(b));
        if ca | cb == 0 {
            return Some((a, b));
        }
        if ca & cb != 0 {
            return None;
        }
        let (out, p, q) = if ca != 0 { (ca, a, b) } else { (cb, b, a) };
        let (dx, dy) = (q.0 - p.0, q.1 - p.1);
        // The other end is not beyond this edge, so the divisor is non-zero,
        // and the ratio lies in [0, 1], so nothing overflows.
        let moved = if out & 1 != 0 {
            (xmin, p.1 + dy * ((xmin - p.0) / dx))
        } else if out & 2 != 0 {
            (xmax, p.1 + dy * ((xmax - p.0) / dx))
        } else if out & 4 != 0 {
            (p.0 + dx * ((ymin - p.1) / dy), ymin)
        } else {
            (p.0 + dx * ((ymax - p.1) / dy), ymax)
        };
        if ca != 0 {
            a = moved;
        } else {
            b = moved;
        }
    }
    (finite(a) && finite(b) && code(a) | code(b) == 0).then_some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Color = [255, 255, 255];
    const K: Color = [0, 0, 0];

    fn inked(c: &Canvas) -> usize {
        c.pixels.chunks(3).filter(|p| *p != W).count()
    }

    #[test]
    fn lines_hit_both_ends_and_stay_connected() {
        let mut c = Canvas::new(20, 20, W);
        c.line((2, 3), (15, 9), K, 1);
        assert_eq!(c.pixel(2, 3), K);
        assert_eq!(c.pixel(15, 9), K);
        assert_eq!(inked(&c), 14); // one pixel per column of an x-major line
    }

    #[test]
    fn dashes_leave_gaps() {
        let mut c = Canvas::new(30, 3, W);
        c.dashed_line((0, 1), (29, 1), K, 1, 4, 3);
        assert_eq!(c.pixel(0, 1), K);
        assert_eq!(c.pixel(4, 1), W);
        assert_eq!(c.pixel(7, 1), K);
        assert_eq!(inked(&c), 18);
    }

    #[test]
    fn far_segments_are_clipped_not_walked() {
        let mut c = Canvas::new(10, 10, W);
        c.segment((-1e300, 5.0), (1e300, 5.0), K, 2);
        c.segment((f64::NAN, 0.0), (3.0, 3.0), K, 1);
        assert_eq!(c.pixel(0, 5), K);
        assert_eq!(c.pixel(9, 5), K);
        c.set_clip(Some(Rect::at(2, 2, 3, 3)));
        c.fill(Rect::at(-100, -100, 1000, 1000), [1, 2, 3]);
        assert_eq!(c.pixel(1, 1), W);
        assert_eq!(c.pixel(3, 3), [1, 2, 3]);
    }

    #[test]
    fn clip_segment_keeps_inner_part() {
        let r = Rect::at(0, 0, 11, 11);
        let (a, b) = clip_segment((-10.0, 5.0), (20.0, 5.0), r).unwrap();
        assert_eq!((a, b), ((0.0, 5.0), (10.0, 5.0)));
        assert!(clip_segment((-10.0, -1.0), (20.0, -1.0), r).is_none());
        assert!(clip_segment((-5.0, 0.0), (0.0, -5.0), Rect::at(1, 1, 5, 5)).is_none());
    }

    #[test]
    fn upright_and_rotated_text_have_the_same_ink() {
        let mut a = Canvas::new(40, 40, W);
        let mut b = Canvas::new(40, 40, W);
        a.text(1, 1, "A1", 2, K);
        b.text_up(1, 30, "A1", 2, K);
        assert!(inked(&a) > 0);
        assert_eq!(inked(&a), inked(&b));
        // Rotated text reads upwards: its first glyph is at the bottom.
        assert_eq!(a.pixel(1, 7), K); // 'A' left edge, row 3
        assert_eq!(b.pixel(7, 29), K);
    }

    #[test]
    fn png_is_deterministic() {
        let mut c = Canvas::new(7, 5, W);
        c.marker(Marker::Diamond, (3, 2), 2, K, W);
        assert_eq!(c.to_png(), c.clone().to_png());
        assert_eq!(&c.to_png()[1..4], b"PNG");
    }
}
