//! Line and grouped-bar charts rendered to PNG or SVG, for allot's
//! benchmark reports.
//!
//! A [`Chart`] is built with chained calls and rendered with
//! [`Chart::render_png`], [`Chart::render_svg`] or [`Chart::save`] (the
//! format follows the file's extension):
//!
//! ```
//! use allot_plot::{Chart, Series};
//!
//! let chart = Chart::new("Speed-up under co-tenancy", "co-tenants", "speed-up (×)")
//!     .categories(vec!["1".into(), "2".into(), "4".into()])
//!     .hline(1.0, "1.0 = no change")
//!     .series(Series::Line {
//!         name: "allot".into(),
//!         points: vec![(0.0, 1.00), (1.0, 1.21), (2.0, 1.35)],
//!         err: Some(vec![(0.97, 1.02), (1.10, 1.30), (1.18, 1.52)]),
//!     });
//! assert_eq!(&chart.render_png()[1..4], b"PNG");
//! assert!(chart.render_svg().starts_with("<svg"));
//! ```
//!
//! Drawing is done by [plotters](https://docs.rs/plotters) with pure-Rust
//! text and an embedded DejaVu Sans, so output is the same on every machine
//! and needs no system fonts or C libraries. This crate decides what the
//! axes span and what is visible (`frame`, pure functions) and maps that to
//! plotters elements (`draw`). Output is deterministic: the same chart gives
//! the same bytes.
//!
//! Values that are NaN or infinite are skipped wherever they appear (a line
//! joins the finite points on either side); so are non-positive x values on a
//! log axis. Lines are clipped to the frame before drawing, so wild values
//! cost nothing. Nothing in rendering panics on bad data.

mod draw;
mod frame;

use std::path::Path;

/// Series colours, in the order series are added (the Okabe–Ito palette,
/// which stays distinguishable under the common colour-vision deficiencies).
/// Series `i` is drawn in `PALETTE[i % PALETTE.len()]`.
pub const PALETTE: [[u8; 3]; 8] = [
    [0, 114, 178],   // blue
    [230, 159, 0],   // orange
    [0, 158, 115],   // bluish green
    [213, 94, 0],    // vermillion
    [204, 121, 167], // reddish purple
    [86, 180, 233],  // sky blue
    [0, 0, 0],       // black
    [240, 228, 66],  // yellow
];

/// Image size used unless [`Chart::size`] is called.
pub const DEFAULT_SIZE: (u32, u32) = (800, 500);
/// Smallest and largest accepted width or height; [`Chart::size`] clamps to these.
pub const SIZE_LIMITS: (u32, u32) = (64, 8192);

/// One set of data on a chart.
#[derive(Debug, Clone, PartialEq)]
pub enum Series {
    /// A polyline through `points` with a marker on each point.
    ///
    /// On a chart with [`Chart::categories`] (or with any bar series) the x
    /// value is a category index: `0.0` is the first category.
    Line {
        /// Legend entry; an empty name is left out of the legend.
        name: String,
        /// `(x, y)` pairs, joined in the order given.
        points: Vec<(f64, f64)>,
        /// Optional vertical error bars: for each point, the `(low, high)`
        /// y values where its bar ends (absolute values, e.g. min and max,
        /// not distances from the point). Missing entries draw no bar.
        err: Option<Vec<(f64, f64)>>,
    },
    /// One bar per category, `values[i]` for category `i`, grouped side by
    /// side with the other bar series.
    Bars {
        /// Legend entry; an empty name is left out of the legend.
        name: String,
        /// Bar heights, measured from 0.
        values: Vec<f64>,
    },
}

impl Series {
    /// The series' legend name.
    pub fn name(&self) -> &str {
        match self {
            Series::Line { name, .. } | Series::Bars { name, .. } => name,
        }
    }
}

/// A chart: title, axis labels, size, axis options and series.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) categories: Option<Vec<String>>,
    pub(crate) y_range: Option<(f64, f64)>,
    pub(crate) hlines: Vec<(f64, String)>,
    pub(crate) log_x: bool,
    pub(crate) series: Vec<Series>,
}

impl Chart {
    /// An empty chart of [`DEFAULT_SIZE`]; empty strings leave a label out.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Chart {
        Chart {
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            width: DEFAULT_SIZE.0,
            height: DEFAULT_SIZE.1,
            categories: None,
            y_range: None,
            hlines: Vec::new(),
            log_x: false,
            series: Vec::new(),
        }
    }

    /// Sets the image size in pixels, clamped to [`SIZE_LIMITS`]. Text,
    /// margins and line widths scale with the smaller side.
    pub fn size(mut self, w: u32, h: u32) -> Chart {
        let (lo, hi) = SIZE_LIMITS;
        self.width = w.clamp(lo, hi);
        self.height = h.clamp(lo, hi);
        self
    }

    /// Makes the x axis categorical, one slot per name, labelled with the
    /// names. Bar series always use a categorical axis; without names their
    /// slots are labelled `0, 1, 2, …`.
    pub fn categories(mut self, names: Vec<String>) -> Chart {
        self.categories = Some(names);
        self
    }

    /// Fixes the y axis to `lo..=hi`; data outside is clipped at the frame.
    /// Ignored unless both ends are finite and `lo < hi`. Without it the
    /// range covers all data, error bars and reference lines (and 0 when
    /// there are bars), widened to nice tick values.
    pub fn y_range(mut self, lo: f64, hi: f64) -> Chart {
        self.y_range = (lo.is_finite() && hi.is_finite() && lo < hi).then_some((lo, hi));
        self
    }

    /// Adds a dashed horizontal reference line at `y`, labelled at its right
    /// end (e.g. `hline(1.0, "1.0 = no change")`).
    pub fn hline(mut self, y: f64, label: &str) -> Chart {
        self.hlines.push((y, label.to_string()));
        self
    }

    /// Makes a numeric x axis logarithmic (base 10); points with x ≤ 0 are
    /// skipped. Has no effect on a categorical axis.
    pub fn log_x(mut self) -> Chart {
        self.log_x = true;
        self
    }

    /// Adds a series; it takes the next colour of [`PALETTE`].
    pub fn series(mut self, s: Series) -> Chart {
        self.series.push(s);
        self
    }

    /// Renders the chart as an 8-bit RGB PNG.
    pub fn render_png(&self) -> Vec<u8> {
        self.png().0
    }

    /// Renders the chart as an SVG document.
    pub fn render_svg(&self) -> String {
        self.svg().0
    }

    /// Renders the chart and writes it to `path`: SVG when the file name
    /// ends in `.svg` (any case), PNG otherwise. A chart that could not be
    /// laid out is an error here (the `render_*` calls return a blank image).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let svg = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        let (bytes, failed) = if svg {
            let (s, failed) = self.svg();
            (s.into_bytes(), failed)
        } else {
            self.png()
        };
        if let Some(why) = failed {
            return Err(std::io::Error::other(format!(
                "cannot draw chart {:?}: {why}",
                self.title
            )));
        }
        std::fs::write(path, bytes)
    }

    /// The PNG and, if drawing failed, why (the image is then blank).
    fn png(&self) -> (Vec<u8>, Option<String>) {
        let (w, h) = (self.width, self.height);
        let mut rgb = vec![255u8; w as usize * h as usize * 3];
        let failed = {
            use plotters::prelude::*;
            let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
            draw::draw(self, &root).err()
        };
        if failed.is_some() {
            rgb.fill(255);
        }
        (encode_png(w, h, &rgb), failed)
    }

    /// The SVG and, if drawing failed, why (the image is then blank).
    fn svg(&self) -> (String, Option<String>) {
        use plotters::prelude::*;
        let mut out = String::new();
        let failed = {
            let root =
                SVGBackend::with_string(&mut out, (self.width, self.height)).into_drawing_area();
            draw::draw(self, &root).err()
        };
        if failed.is_some() {
            out.clear();
            let root =
                SVGBackend::with_string(&mut out, (self.width, self.height)).into_drawing_area();
            // Filling a fresh in-memory SVG with one colour cannot fail.
            let _ = root.fill(&WHITE).and_then(|()| root.present());
        }
        (out, failed)
    }
}

/// Encodes 8-bit RGB pixels as PNG. Writing to memory cannot fail for a
/// buffer of the stated size.
fn encode_png(w: u32, h: u32, rgb: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().expect("PNG header to memory");
    writer.write_image_data(rgb).expect("PNG data to memory");
    drop(writer);
    out
}
