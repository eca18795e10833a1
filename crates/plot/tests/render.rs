//! Renders whole charts and checks the PNGs by decoding them again.

use std::io::Cursor;

use allot_plot::{Chart, PALETTE, Series};

/// A decoded 8-bit RGB image.
struct Image {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Image {
    fn decode(png: &[u8]) -> Image {
        let reader = png::Decoder::new(Cursor::new(png));
        let mut reader = reader.read_info().expect("a valid PNG header");
        let mut rgb = vec![0; reader.output_buffer_size().expect("a sane size")];
        let info = reader.next_frame(&mut rgb).expect("valid PNG data");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        rgb.truncate(info.buffer_size());
        Image {
            width: info.width,
            height: info.height,
            rgb,
        }
    }

    fn at(&self, x: u32, y: u32) -> [u8; 3] {
        let i = (y * self.width + x) as usize * 3;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    /// How many pixels have exactly colour `c`.
    fn count(&self, c: [u8; 3]) -> usize {
        self.rgb.chunks(3).filter(|p| *p == c).count()
    }

    /// Whether the band of rows `y0..y1`, columns `x0..x1`, has any dark (text) pixel.
    fn has_ink(&self, (x0, x1): (u32, u32), (y0, y1): (u32, u32)) -> bool {
        (y0..y1).any(|y| (x0..x1).any(|x| self.at(x, y).iter().all(|v| *v < 80)))
    }
}

fn render(chart: &Chart) -> Image {
    let png = chart.render_png();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    Image::decode(&png)
}

fn line(name: &str, points: &[(f64, f64)]) -> Series {
    Series::Line {
        name: name.into(),
        points: points.to_vec(),
        err: None,
    }
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// The band where the title of a default-size chart is drawn.
const TITLE_BAND: ((u32, u32), (u32, u32)) = ((200, 600), (0, 40));

#[test]
fn line_with_error_bars() {
    let points = vec![(0.0, 1.0), (1.0, 1.2), (2.0, 1.4), (3.0, 1.5)];
    let plain = Chart::new("Speed-up", "co-tenants", "speed-up (×)")
        .categories(names(&["1", "2", "4", "8"]))
        .hline(1.0, "1.0 = no change");
    let with_err = plain.clone().series(Series::Line {
        name: "allot".into(),
        points: points.clone(),
        err: Some(vec![(0.9, 1.1), (1.0, 1.5), (1.1, 1.8), (1.2, 1.9)]),
    });
    let without = plain.series(line("allot", &points));

    let img = render(&with_err);
    assert_eq!((img.width, img.height), (800, 500));
    let (xs, ys) = TITLE_BAND;
    assert!(img.has_ink(xs, ys), "title missing");
    let blue = img.count(PALETTE[0]);
    assert!(blue > 500, "series colour barely present: {blue}");
    assert!(
        blue > render(&without).count(PALETTE[0]) + 200,
        "no error bars drawn"
    );
}

#[test]
fn grouped_bars_three_series_four_categories() {
    let chart = Chart::new("Makespan", "level", "seconds")
        .categories(names(&["1", "2", "4", "8"]))
        .series(Series::Bars {
            name: "OS".into(),
            values: vec![10.0, 20.0, 40.0, 80.0],
        })
        .series(Series::Bars {
            name: "static".into(),
            values: vec![5.0, 10.0, 20.0, 40.0],
        })
        .series(Series::Bars {
            name: "allot".into(),
            values: vec![1.0, 2.0, 4.0, 8.0],
        });
    let img = render(&chart);
    let counts: Vec<usize> = PALETTE[..3].iter().map(|c| img.count(*c)).collect();
    assert!(counts.iter().all(|n| *n > 0), "{counts:?}");
    // Bar area follows the values: each series is half or a tenth of the first.
    assert!(counts[0] > counts[1] && counts[1] > counts[2], "{counts:?}");
    assert_eq!(img.count(PALETTE[3]), 0);
}

#[test]
fn empty_chart_is_a_valid_blank_plot() {
    let img = render(&Chart::new("Nothing yet", "x", "y"));
    assert_eq!((img.width, img.height), (800, 500));
    let (xs, ys) = TITLE_BAND;
    assert!(img.has_ink(xs, ys));
    assert!(PALETTE.iter().all(|c| img.count(*c) == 0));

    let untitled = render(&Chart::new("", "", ""));
    assert!(!untitled.has_ink(xs, (0, 20)));
}

#[test]
fn non_finite_values_are_skipped() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let chart = Chart::new("Bad data", "x", "y")
        .hline(nan, "nan line")
        .hline(inf, "inf line")
        .y_range(nan, 3.0)
        .series(Series::Line {
            name: "holes".into(),
            points: vec![(0.0, 1.0), (1.0, nan), (inf, 2.0), (3.0, -inf), (4.0, 2.0)],
            err: Some(vec![(nan, 1.0), (0.0, 1.0), (0.5, inf), (1.0, 2.0)]),
        })
        // Unnamed, so not even a legend swatch shows its colour.
        .series(line("", &[(nan, nan), (inf, -inf)]));
    let img = render(&chart);
    assert!(img.count(PALETTE[0]) > 0);
    assert_eq!(img.count(PALETTE[1]), 0);

    let bars = Chart::new("Bad bars", "", "")
        .series(Series::Bars {
            name: "b".into(),
            values: vec![1.0, nan, inf, -inf, 2.0],
        })
        .render_png();
    assert!(Image::decode(&bars).count(PALETTE[0]) > 0);
}

#[test]
fn single_point_and_all_equal_values() {
    let one = render(&Chart::new("One", "x", "y").series(line("p", &[(5.0, 5.0)])));
    assert!(one.count(PALETTE[0]) > 0, "marker missing");

    let flat = render(
        &Chart::new("Flat", "x", "y")
            .series(line("flat", &[(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]))
            .series(line("zero", &[(1.0, 0.0), (1.0, 0.0)])),
    );
    assert!(flat.count(PALETTE[0]) > 0 && flat.count(PALETTE[1]) > 0);

    let zero_bars = render(&Chart::new("Zero", "x", "y").series(Series::Bars {
        name: "z".into(),
        values: vec![0.0, 0.0],
    }));
    assert_eq!((zero_bars.width, zero_bars.height), (800, 500));
}

#[test]
fn output_is_deterministic() {
    let chart = || {
        Chart::new("Same", "x", "y")
            .series(line("a", &[(1.0, 2.0), (2.0, 1.0), (3.0, 4.0)]))
            .hline(2.5, "ref")
    };
    assert_eq!(chart().render_png(), chart().render_png());
}

#[test]
fn size_is_honoured_and_clamped() {
    let img = render(
        &Chart::new("Small", "x", "y")
            .size(300, 200)
            .series(line("a", &[(0.0, 1.0), (1.0, 2.0)])),
    );
    assert_eq!((img.width, img.height), (300, 200));
    assert!(img.count(PALETTE[0]) > 0);
    let tiny =
        render(&Chart::new("A long title for a tiny chart", "x label", "y label").size(0, 1));
    assert_eq!((tiny.width, tiny.height), (64, 64));
}

#[test]
fn log_x_skips_non_positive_x() {
    let chart = Chart::new("Latency", "req/s", "µs").log_x().series(line(
        "p99",
        &[(-1.0, 5.0), (0.0, 5.0), (10.0, 5.0), (1e4, 50.0)],
    ));
    assert!(render(&chart).count(PALETTE[0]) > 0);
    let nothing = Chart::new("Latency", "req/s", "µs")
        .log_x()
        .series(line("", &[(0.0, 1.0)]));
    assert_eq!(render(&nothing).count(PALETTE[0]), 0);
}

#[test]
fn fixed_range_clips_wild_values_quickly() {
    let chart = Chart::new("Clipped", "x", "y")
        .y_range(0.0, 2.0)
        .hline(1e300, "off the chart")
        .series(Series::Line {
            name: "wild".into(),
            points: vec![(0.0, -1e300), (1.0, 1.0), (2.0, 1e300), (1e308, 1.0)],
            err: Some(vec![(-1e308, 1e308); 4]),
        })
        .series(Series::Bars {
            name: "tall".into(),
            values: vec![1e300, -1e300],
        });
    let img = render(&chart);
    assert!(img.count(PALETTE[0]) > 0 && img.count(PALETTE[1]) > 0);
}

#[test]
fn many_series_long_names_and_save() {
    let mut chart = Chart::new(&"very long title ".repeat(20), "x", "y").categories(names(&[
        "a category name far too long for its slot",
        "b",
        "c",
    ]));
    for i in 0..10 {
        let name = format!("series number {i} with a long name");
        chart = chart.series(line(&name, &[(0.0, i as f64), (2.0, 1.0)]));
    }
    let img = render(&chart);
    assert!(PALETTE.iter().all(|c| img.count(*c) > 0));

    let path = std::env::temp_dir().join(format!("allot-plot-test-{}.png", std::process::id()));
    chart.save(&path).unwrap();
    let saved = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(saved, chart.render_png());
}

#[test]
fn svg_names_title_labels_and_series_colours() {
    let chart = Chart::new("Speed-up <&> ratio", "co-tenants", "speed-up")
        .categories(names(&["1", "2"]))
        .hline(1.0, "no change")
        .series(line("allot", &[(0.0, 1.1), (1.0, 1.3)]))
        .series(Series::Bars {
            name: "static".into(),
            values: vec![1.0, 1.2],
        });
    let svg = chart.render_svg();
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    // Text is escaped, not dropped.
    assert!(
        svg.contains("Speed-up &lt;&amp;&gt; ratio"),
        "title missing"
    );
    for text in ["co-tenants", "speed-up", "no change", "allot", "static"] {
        assert!(svg.contains(text), "{text} missing");
    }
    let hex = |[r, g, b]: [u8; 3]| format!("#{r:02X}{g:02X}{b:02X}");
    assert!(svg.contains(&hex(PALETTE[0])) && svg.contains(&hex(PALETTE[1])));
    assert!(!svg.contains(&hex(PALETTE[2])));
    assert_eq!(svg, chart.render_svg(), "SVG output must be deterministic");
}

#[test]
fn save_picks_the_format_by_extension_and_reports_bad_paths() {
    let chart = Chart::new("Saved", "x", "y").series(line("a", &[(0.0, 1.0), (1.0, 2.0)]));
    let dir = std::env::temp_dir().join(format!("allot-plot-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (png, svg, upper) = (dir.join("c.png"), dir.join("c.svg"), dir.join("C.SVG"));
    chart.save(&png).unwrap();
    chart.save(&svg).unwrap();
    chart.save(&upper).unwrap();
    assert_eq!(std::fs::read(&png).unwrap(), chart.render_png());
    assert_eq!(std::fs::read_to_string(&svg).unwrap(), chart.render_svg());
    assert_eq!(std::fs::read_to_string(&upper).unwrap(), chart.render_svg());
    // The smallest chart still lays out (save reports a failed layout).
    let tiny = Chart::new("A long title for a tiny chart", "x label", "y label")
        .size(64, 64)
        .series(line("a", &[(0.0, 1.0), (1.0, 2.0)]));
    tiny.save(&dir.join("tiny.png")).unwrap();
    tiny.save(&dir.join("tiny.svg")).unwrap();
    let missing = dir.join("no-such-dir").join("c.svg");
    assert!(chart.save(&missing).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
