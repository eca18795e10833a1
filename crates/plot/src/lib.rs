//! Line and grouped-bar charts rendered to PNG, for allot's benchmark reports.
//!
//! A [`Chart`] is built with chained calls and rendered with
//! [`Chart::render_png`] or [`Chart::save`]:
//!
//! ```
//! use allot_plot::{Chart, Series};
//!
//! let png = Chart::new("Speed-up under co-tenancy", "co-tenants", "speed-up (×)")
//!     .categories(vec!["1".into(), "2".into(), "4".into()])
//!     .hline(1.0, "1.0 = no change")
//!     .series(Series::Line {
//!         name: "allot".into(),
//!         points: vec![(0.0, 1.00), (1.0, 1.21), (2.0, 1.35)],
//!         err: Some(vec![(0.97, 1.02), (1.10, 1.30), (1.18, 1.52)]),
//!     })
//!     .render_png();
//! assert_eq!(&png[1..4], b"PNG");
//! ```
//!
//! Everything is drawn by this crate: text uses a built-in 5×9 bitmap font
//! (printable ASCII plus `× µ ±`; other characters draw as a box), lines are
//! Bresenham without anti-aliasing, and the only dependency is the `png`
//! encoder. Output is deterministic: the same chart gives the same bytes.
//!
//! Values that are NaN or infinite are skipped wherever they appear (a line
//! joins the finite points on either side); so are non-positive x values on a
//! log axis. Nothing in rendering panics on bad data.

mod canvas;
mod font;
mod layout;
mod render;
mod ticks;

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

    /// Sets the image size in pixels, clamped to [`SIZE_LIMITS`]. Text is
    /// drawn at twice the font size from 640×400 up, at the font size below.
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
        render::render(self).to_png()
    }

    /// Renders the chart and writes the PNG to `path`.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.render_png())
    }
}
