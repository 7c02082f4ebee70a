//! SVG plots of the lab's data with `plotters` (SVG backend only: text is
//! written as `<text>` for the viewer to draw, so no font library is
//! needed): lines over a numeric axis, grouped bars over categories.

use super::model::{Plot, PlotKind, Series};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 400;

/// Colours of the series, in order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn err<E: std::fmt::Debug>(plot: &Plot) -> impl Fn(E) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("drawing the plot {}: {e:?}", plot.id)
}

/// The plot as an SVG document.
pub fn svg(plot: &Plot) -> anyhow::Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err(plot))?;
        match plot.kind {
            PlotKind::Lines => lines(plot, &root)?,
            PlotKind::Bars => bars(plot, &root)?,
        }
        root.present().map_err(err(plot))?;
    }
    Ok(text)
}

/// Pixels of the plot area's height, about (the caption, the x labels and
/// the margins take the rest).
const AREA_PX: f64 = HEIGHT as f64 - 110.0;

/// The y axis's top: room above the highest point for the legend box
/// (one 16 px row per series and its padding), so that no bar or line
/// ends behind it.
fn y_top(plot: &Plot) -> f64 {
    let top = plot
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    if top <= 0.0 {
        return 1.0;
    }
    let legend = (16.0 * plot.series.len() as f64 + 24.0) / AREA_PX.max(110.0);
    top * 1.04 / (1.0 - legend.min(0.6))
}

/// For each series, the earlier series it lies on (same x values, every y
/// within `tol`), if any: drawn over it, it would hide it.
fn lies_on(series: &[Series], tol: f64) -> Vec<Option<usize>> {
    let same = |a: &Series, b: &Series| {
        a.points.len() == b.points.len()
            && a.points.iter().zip(&b.points).all(|(p, q)| {
                (p.0 - q.0).abs() <= 1e-9 * p.0.abs().max(1.0) && (p.1 - q.1).abs() <= tol
            })
    };
    series
        .iter()
        .enumerate()
        .map(|(j, s)| (0..j).find(|&i| !series[i].points.is_empty() && same(&series[i], s)))
        .collect()
}

/// How each series is drawn: its legend text and how much wider than
/// the plain line (and larger its markers) it is. Series that lie on one
/// another are drawn widest first, each later one narrower on top, so a
/// band of every colour stays visible; the legend says which equals which.
fn line_styles(series: &[Series], tol: f64) -> Vec<(String, u32)> {
    let on = lies_on(series, tol);
    // The first series of each group of equal ones.
    let base: Vec<usize> = (0..series.len())
        .map(|j| on[j].map_or(j, |i| on[i].unwrap_or(i)))
        .collect();
    (0..series.len())
        .map(|j| {
            let later = (j + 1..series.len())
                .filter(|&k| base[k] == base[j])
                .count();
            let mut name = series[j].name.clone();
            if base[j] != j {
                let b = &series[base[j]];
                let exact = b.points == series[j].points;
                name.push_str(&format!(" ({} {})", if exact { "=" } else { "≈" }, b.name));
            }
            (name, later as u32)
        })
        .collect()
}

/// Draws the markers of one series: a circle, square, triangle or cross by
/// its place (`i`), `grow` pixels larger than plain.
fn markers<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    points: &[(f64, f64)],
    i: usize,
    c: RGBColor,
    grow: i32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let r = 3 + grow;
    let pts = points.iter().copied();
    match i % 4 {
        0 => chart.draw_series(pts.map(|p| Circle::new(p, r, c.filled())))?,
        1 => chart.draw_series(
            pts.map(|p| EmptyElement::at(p) + Rectangle::new([(-r, -r), (r, r)], c.filled())),
        )?,
        2 => chart.draw_series(pts.map(|p| TriangleMarker::new(p, r + 1, c.filled())))?,
        _ => chart.draw_series(pts.map(|p| Cross::new(p, r, c.stroke_width(2))))?,
    };
    Ok(())
}

/// Tick labels of a count axis: whole numbers only.
fn whole(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        String::new()
    }
}

fn lines(
    plot: &Plot,
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> anyhow::Result<()> {
    let xs = plot
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo.min(0.0), hi * 1.02)
    } else {
        (0.0, 1.0)
    };
    let top = y_top(plot);
    // 5 px below 0, so that a line along 0 is not cut in half by the axis.
    let bottom = -top * 5.0 / AREA_PX;
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(lo..hi, bottom..top)
        .map_err(err(plot))?;
    let mut mesh = chart.configure_mesh();
    if plot.x_counts {
        // At most one label per whole number: 0, 1, 2 … or 0, 50, 100 ….
        let labels = ((hi - lo).floor() as usize + 1).clamp(2, 10);
        mesh.x_labels(labels).x_label_formatter(&whole);
    }
    mesh.x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .y_label_formatter(&|v: &f64| short_number(*v))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err(plot))?;
    // Two series within 2.5 px of each other everywhere lie on each other.
    let styles = line_styles(&plot.series, top * 2.5 / AREA_PX);
    for (i, (s, (name, grow))) in plot.series.iter().zip(styles).enumerate() {
        let c = colour(i);
        let width = 2 + 3 * grow;
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                c.stroke_width(width),
            ))
            .map_err(err(plot))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        // Earlier series' markers a little larger: where two series meet
        // at a point, the one drawn first still shows around the other.
        let larger = (plot.series.len() - 1 - i).min(3) as i32;
        markers(&mut chart, &s.points, i, c, larger + 2 * grow as i32).map_err(err(plot))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(err(plot))?;
    Ok(())
}

fn bars(
    plot: &Plot,
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> anyhow::Result<()> {
    let n = plot.categories.len().max(1);
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..y_top(plot))
        .map_err(err(plot))?;
    let cats = &plot.categories;
    let name_of = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            cats.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&name_of)
        .x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .y_label_formatter(&|v: &f64| short_number(*v))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err(plot))?;
    let k = plot.series.len().max(1) as f64;
    let group = 0.8;
    let w = group / k;
    // A value above 0 is at least 2 px high: a bar that rounds to nothing
    // would leave its series out of the picture.
    let least = y_top(plot) * 2.0 / AREA_PX;
    for (si, s) in plot.series.iter().enumerate() {
        let c = colour(si);
        let left = -group / 2.0 + si as f64 * w;
        chart
            .draw_series(s.points.iter().map(|&(x, y)| {
                let y = if y > 0.0 { y.max(least) } else { y };
                Rectangle::new([(x + left, 0.0), (x + left + w * 0.92, y)], c.filled())
            }))
            .map_err(err(plot))?
            .label(s.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(err(plot))?;
    Ok(())
}

/// An axis label: `8M`, `1.5k`, `40`, `0.25` (not `8000000.0`).
fn short_number(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    let a = v.abs();
    if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        trim(format!("{v:.2}"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn axis_labels_are_short() {
        let f = super::short_number;
        assert_eq!(f(8_000_000.0), "8M");
        assert_eq!(f(1_500_000.0), "1.5M");
        assert_eq!(f(25_000.0), "25k");
        assert_eq!(f(40.0), "40");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(0.25), "0.25");
        assert_eq!(f(2.5e9), "2.5G");
    }

    use super::*;

    fn plot(kind: PlotKind) -> Plot {
        Plot {
            id: "t".into(),
            title: "Start-up <time> & size".into(),
            kind,
            x_label: "GiB".into(),
            x_counts: false,
            y_label: "s".into(),
            categories: if kind == PlotKind::Bars {
                vec!["4k local".into(), "2M local".into()]
            } else {
                Vec::new()
            },
            series: vec![
                Series {
                    name: "one".into(),
                    points: vec![(0.0, 1.0), (1.0, 2.5)],
                },
                Series {
                    name: "two".into(),
                    points: vec![(0.0, 0.5), (1.0, 4.0)],
                },
            ],
        }
    }

    #[test]
    fn lines_and_bars_are_svg_with_every_series() {
        for kind in [PlotKind::Lines, PlotKind::Bars] {
            let s = svg(&plot(kind)).unwrap();
            assert!(s.starts_with("<svg"), "{kind:?}");
            assert!(
                s.contains("\none\n</text>") && s.contains("\ntwo\n</text>"),
                "{kind:?}: legend"
            );
            // Text is escaped for XML.
            assert!(s.contains("&lt;time&gt; &amp; size"), "{kind:?}");
        }
        let bars = svg(&plot(PlotKind::Bars)).unwrap();
        assert!(bars.contains("\n4k local\n") && bars.contains("\n2M local\n"));
        assert!(
            bars.matches("<rect").count() >= 5,
            "4 bars and the background"
        );
    }

    /// The stroke widths of the SVG's coloured polylines (the series,
    /// then the legend's swatches), in order.
    fn widths(svg: &str) -> Vec<u32> {
        svg.lines()
            .filter(|l| l.starts_with("<polyline") && !l.contains("#000000"))
            .filter_map(|l| {
                let w = &l[l.find("stroke-width=\"")? + 14..];
                w[..w.find('"')?].parse().ok()
            })
            .collect()
    }

    #[test]
    fn series_that_lie_on_one_another_stay_visible_and_say_so() {
        let mut p = plot(PlotKind::Lines);
        p.series = ["4k", "4k again", "2M", "2M again", "2M once more"]
            .iter()
            .enumerate()
            .map(|(i, name)| Series {
                name: (*name).into(),
                points: if i < 2 {
                    vec![(1.0, 4.0), (2.0, 8.0)]
                } else {
                    vec![(1.0, 0.0), (2.0, 0.0)]
                },
            })
            .collect();
        let s = svg(&p).unwrap();
        // Widest first, each later one narrower on top: a band of every
        // colour shows.
        assert_eq!(widths(&s)[..5], [5, 2, 8, 5, 2], "{s}");
        assert!(s.contains("4k again (= 4k)"), "{s}");
        assert!(s.contains("2M again (= 2M)") && s.contains("2M once more (= 2M)"));
        // Apart: plain lines, no note.
        p.series[1].points[1].1 = 6.0;
        let s = svg(&p).unwrap();
        assert_eq!(widths(&s)[..2], [2, 2]);
        assert!(!s.contains("(= 4k)"));
        // Within 2.5 px but not equal: said to be about equal.
        p.series[1].points[1].1 = 8.01;
        assert!(svg(&p).unwrap().contains("4k again (≈ 4k)"));
    }

    #[test]
    fn a_count_axis_has_whole_numbers_only() {
        let mut p = plot(PlotKind::Lines);
        p.x_counts = true;
        for s in &mut p.series {
            s.points = vec![(1.0, 1.0), (2.0, 2.0), (4.0, 3.0)];
        }
        let ticks = |s: &str| -> Vec<String> {
            // The x axis's labels sit under it, centred on their tick.
            s.split("<text")
                .filter(|t| t.contains("text-anchor=\"middle\"") && t.contains("y=\"35"))
                .filter_map(|t| t.split('\n').nth(1).map(str::to_owned))
                .collect()
        };
        let counted = ticks(&svg(&p).unwrap());
        assert_eq!(counted, ["0", "1", "2", "3", "4"], "{counted:?}");
        p.x_counts = false;
        let plain = ticks(&svg(&p).unwrap());
        assert!(plain.iter().any(|t| t.contains('.')), "{plain:?}");
    }

    #[test]
    fn a_small_bar_is_still_seen() {
        let mut p = plot(PlotKind::Bars);
        p.series[0].points = vec![(0.0, 0.001), (1.0, 0.0)];
        let s = svg(&p).unwrap();
        let heights: Vec<u32> = s
            .lines()
            .filter(|l| l.starts_with("<rect") && l.contains("#1F77B4"))
            .filter_map(|l| {
                let h = &l[l.find("height=\"")? + 8..];
                h[..h.find('"')?].parse().ok()
            })
            .collect();
        // The small value 2 px high; 0 stays 0; then the legend's swatch.
        assert_eq!(heights, [2, 0, 10], "{s}");
    }

    #[test]
    fn an_empty_plot_still_draws() {
        let mut p = plot(PlotKind::Lines);
        p.series.clear();
        assert!(svg(&p).unwrap().contains("</svg>"));
    }
}
