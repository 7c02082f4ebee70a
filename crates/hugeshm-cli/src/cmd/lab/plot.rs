//! SVG plots of the lab's data with `plotters` (SVG backend only: text is
//! written as `<text>` for the viewer to draw, so no font library is
//! needed): lines over a numeric axis, grouped bars over categories.

use super::model::{Plot, PlotKind};
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

/// The y axis's top: room above the highest point for the legend box
/// (one 16 px row per series and its padding, in a plot area of about
/// `HEIGHT - 110` px), so that no bar or line ends behind it.
fn y_top(plot: &Plot) -> f64 {
    let top = plot
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    if top <= 0.0 {
        return 1.0;
    }
    let area = f64::from(HEIGHT).max(220.0) - 110.0;
    let legend = (16.0 * plot.series.len() as f64 + 24.0) / area;
    top * 1.04 / (1.0 - legend.min(0.6))
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
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(lo..hi, 0.0..y_top(plot))
        .map_err(err(plot))?;
    chart
        .configure_mesh()
        .x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .y_label_formatter(&|v: &f64| short_number(*v))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(err(plot))?;
    for (i, s) in plot.series.iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
            .map_err(err(plot))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(err(plot))?;
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
    for (si, s) in plot.series.iter().enumerate() {
        let c = colour(si);
        let left = -group / 2.0 + si as f64 * w;
        chart
            .draw_series(s.points.iter().map(|&(x, y)| {
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
    use crate::cmd::lab::model::Series;

    fn plot(kind: PlotKind) -> Plot {
        Plot {
            id: "t".into(),
            title: "Start-up <time> & size".into(),
            kind,
            x_label: "GiB".into(),
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

    #[test]
    fn an_empty_plot_still_draws() {
        let mut p = plot(PlotKind::Lines);
        p.series.clear();
        assert!(svg(&p).unwrap().contains("</svg>"));
    }
}
