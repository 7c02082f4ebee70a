//! The lab's plots as a person sees them: each SVG rendered to PNG by
//! headless Chromium and read back pixel by pixel, once whole and once
//! without its legend (the legend is drawn last, from its white box on),
//! so that a series whose colour shows only in the legend is found out.

use std::path::Path;
use std::process::{Command, Output};

/// An RGB colour.
pub type Rgb = [u8; 3];

/// Headless Chromium with `args` on `file`, which must succeed.
pub fn chromium(args: &[&str], file: &Path) -> Output {
    let profile = std::env::temp_dir().join(format!("hugeshm-lab-chromium-{}", std::process::id()));
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `file` (an SVG) rendered by headless Chromium at the plots' size, as
/// RGB pixels; the PNG is left at `png`.
pub fn render(file: &Path, png: &Path) -> Vec<Rgb> {
    let shot = format!("--screenshot={}", png.display());
    chromium(&["--hide-scrollbars", "--window-size=760,400", &shot], file);
    let decoder = png::Decoder::new(std::fs::File::open(png).expect("the screenshot"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("its pixels");
    let step = match info.color_type {
        png::ColorType::Rgba => 4,
        png::ColorType::Rgb => 3,
        other => panic!("{}: a {other:?} PNG", png.display()),
    };
    assert_eq!(info.bit_depth, png::BitDepth::Eight, "{}", png.display());
    buf[..info.buffer_size()]
        .chunks_exact(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

/// The pixels within 24 of `c` in each channel (antialiased edges apart).
pub fn count(pixels: &[Rgb], c: Rgb) -> usize {
    pixels
        .iter()
        .filter(|p| p.iter().zip(c).all(|(a, b)| a.abs_diff(b) <= 24))
        .count()
}

/// Where the legend starts: its white box, drawn after every series.
fn legend_at(svg: &str) -> usize {
    svg.match_indices("<rect")
        .map(|(i, _)| i)
        .find(|&i| {
            svg[i..]
                .lines()
                .next()
                .is_some_and(|l| l.contains("opacity=\"0.85\""))
        })
        .expect("a legend box")
}

/// The plot without its legend.
pub fn without_legend(svg: &str) -> String {
    format!("{}</svg>\n", &svg[..legend_at(svg)])
}

/// Each series' colour, from its swatch in the legend, in order.
pub fn legend_colours(svg: &str) -> Vec<Rgb> {
    let hex = |s: &str| -> Option<Rgb> {
        let v = u32::from_str_radix(s.get(..6)?, 16).ok()?;
        Some([(v >> 16) as u8, (v >> 8) as u8, v as u8])
    };
    svg[legend_at(svg)..]
        .lines()
        .filter(|l| l.starts_with("<polyline") || l.starts_with("<rect"))
        .filter_map(|l| {
            let at = l
                .find("stroke=\"#")
                .map(|i| i + 9)
                .or_else(|| l.find("fill=\"#").map(|i| i + 7))?;
            hex(&l[at..])
        })
        .filter(|c| *c != [0, 0, 0] && *c != [255, 255, 255])
        .collect()
}
