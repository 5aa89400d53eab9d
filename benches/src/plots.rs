//! Plots of `bench all`: SVG drawn with `plotters` (throughput per workload per system as
//! grouped bars on a linear axis, one bar chart per 8 KiB workload with its targets as
//! lines, latency CDFs, the extras' bars and lines), and a PNG copy
//! of each rendered from the SVG by `rsvg-convert` ([`png_copies`]).

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// A grouped bar chart: one group per workload, one bar per system (`value(system,
/// workload)`, `None` for a missing row), linear y from 0. Each series is `(name, colour
/// index)`, so a system has the same colour in every plot.
///
/// # Errors
/// When the file cannot be written.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    groups: &[&str],
    series: &[(String, usize)],
    value: impl Fn(&str, &str) -> Option<f64>,
) -> anyhow::Result<()> {
    let values: Vec<f64> = series
        .iter()
        .flat_map(|(s, _)| groups.iter().filter_map(|g| value(s, g)))
        .filter(|v| *v > 0.0)
        .collect();
    let hi = values.iter().copied().fold(0.0, f64::max);
    if values.is_empty() {
        return Ok(());
    }
    // Room above the tallest bar for the legend.
    let (lo, hi) = (0.0, hi * 1.3);
    let root = SVGBackend::new(path, (1280, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n - 0.5, lo..hi)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len())
        .x_label_formatter(&|x| group_label(groups, *x))
        .y_desc(y_desc)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let width = 0.84 / series.len().max(1) as f64;
    for (j, (s, c)) in series.iter().enumerate() {
        let color = Palette99::pick(*c).to_rgba();
        let bars: Vec<Rectangle<(f64, f64)>> = groups
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                let v = value(s, g).filter(|v| *v > 0.0)?;
                let x0 = i as f64 - 0.42 + j as f64 * width;
                Some(Rectangle::new(
                    [(x0, lo), (x0 + width * 0.9, v)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| anyhow!("{e:?}"))?
            .label(s.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperLeft)
}

/// One workload's bar chart: a bar per system `(name, colour index, ops/s)`, linear y from
/// 0, and each target as a dashed horizontal line `(label, ops/s)`: the height the bar its
/// label names must reach.
///
/// # Errors
/// When the file cannot be written.
pub fn workload_bars(
    path: &Path,
    title: &str,
    bars: &[(String, usize, f64)],
    targets: &[(String, f64)],
) -> anyhow::Result<()> {
    let hi = bars
        .iter()
        .map(|b| b.2)
        .chain(targets.iter().map(|t| t.1))
        .fold(0.0, f64::max);
    if bars.is_empty() || hi <= 0.0 {
        return Ok(());
    }
    // Room above the tallest bar or line for the legend.
    let hi = hi * 1.6;
    let root = SVGBackend::new(path, (1280, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = bars.len() as f64;
    let names: Vec<&str> = bars.iter().map(|b| b.0.as_str()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..hi)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len())
        .x_label_formatter(&|x| group_label(&names, *x))
        .x_label_style(("sans-serif", 10))
        .y_desc("ops/s")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (i, (name, c, v)) in bars.iter().enumerate() {
        let color = Palette99::pick(*c).to_rgba();
        let x0 = i as f64 - 0.4;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, 0.0), (x0 + 0.8, *v)],
                color.filled(),
            )))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    for (k, (label, y)) in targets.iter().enumerate() {
        // Dark, saturated colours, apart from the bars' lighter palette.
        const LINES: [RGBColor; 5] = [
            RGBColor(0, 0, 0),
            RGBColor(200, 0, 0),
            RGBColor(0, 0, 190),
            RGBColor(0, 120, 0),
            RGBColor(140, 0, 140),
        ];
        let color = LINES[k % LINES.len()];
        chart
            .draw_series(DashedLineSeries::new(
                [(-0.5, *y), (n - 0.5, *y)],
                8,
                6,
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2))
            });
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperRight)
}

/// Latency CDFs, one line per series `(name, colour index, [µs, fraction] points)`,
/// log-scale x.
///
/// # Errors
/// When the file cannot be written.
pub fn cdfs(
    path: &Path,
    title: &str,
    series: &[(String, usize, Vec<[f64; 2]>)],
) -> anyhow::Result<()> {
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|q| q[0]))
        .filter(|x| *x > 0.0)
        .collect();
    if xs.is_empty() {
        return Ok(());
    }
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min) / 1.5;
    let hi = xs.iter().copied().fold(0.0, f64::max) * 1.5;
    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1.0)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("latency of a batch, µs (log)")
        .y_desc("fraction of batches")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (name, c, points) in series {
        let color = Palette99::pick(*c).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().filter(|p| p[0] > 0.0).map(|p| (p[0], p[1])),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight)
}

/// Horizontal-stacked bars, one bar per `(label, parts)` with the parts stacked in the order
/// of `part_names` (linear y from 0).
///
/// # Errors
/// When the file cannot be written.
pub fn stacked_bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    part_names: &[&str],
    bars: &[(String, Vec<f64>)],
) -> anyhow::Result<()> {
    let hi = bars
        .iter()
        .map(|(_, p)| p.iter().map(|v| v.max(0.0)).sum::<f64>())
        .fold(0.0, f64::max);
    if bars.is_empty() || hi <= 0.0 {
        return Ok(());
    }
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = bars.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..hi * 1.35)
        .map_err(|e| anyhow!("{e:?}"))?;
    let labels: Vec<String> = bars.iter().map(|(l, _)| l.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len())
        .x_label_formatter(&|x| group_label(&labels, *x))
        .y_desc(y_desc)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (j, name) in part_names.iter().enumerate() {
        let color = Palette99::pick(j).to_rgba();
        let rects: Vec<Rectangle<(f64, f64)>> = bars
            .iter()
            .enumerate()
            .map(|(i, (_, parts))| {
                let below: f64 = parts.iter().take(j).map(|v| v.max(0.0)).sum();
                let v = parts.get(j).copied().unwrap_or(0.0).max(0.0);
                Rectangle::new(
                    [(i as f64 - 0.3, below), (i as f64 + 0.3, below + v)],
                    color.filled(),
                )
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| anyhow!("{e:?}"))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperLeft)
}

/// Grouped bars on a linear y from 0 with a dashed line at `reference` (e.g. 1.0 for
/// ratios): one group per entry of `groups`, one bar per series (`value(series, group)`).
///
/// # Errors
/// When the file cannot be written.
pub fn grouped_bars_linear(
    path: &Path,
    title: &str,
    y_desc: &str,
    groups: &[&str],
    series: &[String],
    reference: Option<f64>,
    value: impl Fn(&str, &str) -> Option<f64>,
) -> anyhow::Result<()> {
    let hi = series
        .iter()
        .flat_map(|s| groups.iter().filter_map(|g| value(s, g)))
        .chain(reference)
        .fold(0.0, f64::max);
    if hi <= 0.0 {
        return Ok(());
    }
    let root = SVGBackend::new(path, (1100, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n - 0.5, 0f64..hi * 1.4)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len())
        .x_label_formatter(&|x| group_label(groups, *x))
        .y_desc(y_desc)
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let width = 0.84 / series.len().max(1) as f64;
    for (j, s) in series.iter().enumerate() {
        let color = Palette99::pick(j).to_rgba();
        let rects: Vec<Rectangle<(f64, f64)>> = groups
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                let v = value(s, g)?;
                let x0 = i as f64 - 0.42 + j as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.9, v)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(|e| anyhow!("{e:?}"))?
            .label(s.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    if let Some(r) = reference {
        chart
            .draw_series(DashedLineSeries::new(
                [(-0.5, r), (n - 0.5, r)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|e| anyhow!("{e:?}"))?;
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperLeft)
}

/// Lines over a linear x and y from 0, one per series `(name, [x, y] points)`, with an
/// optional dashed horizontal line `(y, label)` (a target).
///
/// # Errors
/// When the file cannot be written.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<[f64; 2]>)],
    target: Option<(f64, &str)>,
) -> anyhow::Result<()> {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (xhi, yhi) = pts.fold((0.0f64, 0.0f64), |(x, y), p| (x.max(p[0]), y.max(p[1])));
    let yhi = yhi.max(target.map_or(0.0, |t| t.0));
    if xhi <= 0.0 || yhi <= 0.0 {
        return Ok(());
    }
    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xhi * 1.02, 0f64..yhi * 1.25)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (j, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(j).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p[0], p[1])),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    if let Some((y, label)) = target {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, y), (xhi * 1.02, y)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.stroke_width(1)));
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight)
}

/// The program that renders the PNG copies (Debian `librsvg2-bin`).
const SVG_TO_PNG: &str = "rsvg-convert";

/// A PNG copy of each SVG plot beside it (same name, `.png`), rendered by `rsvg-convert`
/// (an image a reader can open anywhere; the SVG stays the exact one).
///
/// # Errors
/// Why there are no PNG copies: `rsvg-convert` is not installed (`cargo xtask bench all`
/// installs it), or it failed on a plot.
pub fn png_copies(svgs: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>, String> {
    let mut pngs = Vec::new();
    for svg in svgs
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
    {
        let png = svg.with_extension("png");
        let out = std::process::Command::new(SVG_TO_PNG)
            .args(["--background-color", "white", "-o"])
            .arg(&png)
            .arg(svg)
            .output();
        match out {
            Ok(o) if o.status.success() => pngs.push(png),
            Ok(o) => {
                return Err(format!(
                    "{SVG_TO_PNG} failed on {}: {}",
                    svg.display(),
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "{SVG_TO_PNG} is not installed (Debian librsvg2-bin; `cargo xtask bench \
                     all` installs it): no PNG copies of the plots"
                ))
            }
            Err(e) => return Err(format!("running {SVG_TO_PNG}: {e}")),
        }
    }
    Ok(pngs)
}

/// The label under a bar group: the group's name at its integer x position, nothing between.
fn group_label<S: AsRef<str>>(groups: &[S], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 {
        groups
            .get(i as usize)
            .map_or_else(String::new, |g| g.as_ref().to_string())
    } else {
        String::new()
    }
}

/// Draws the legend at `at` and writes the file.
fn finish<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    root: &DrawingArea<DB, plotters::coord::Shift>,
    at: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workload's chart holds a bar per system and a line per target, each named in the
    /// legend, on a y axis tall enough for the highest target.
    #[test]
    fn a_workload_chart_draws_every_bar_and_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.svg");
        let bars = vec![
            ("lightstore-local/plp".to_string(), 1, 20_000.0),
            ("rocksdb-leveled/no-wal".to_string(), 2, 10_000.0),
        ];
        let targets = vec![("plp >= 0.8x device".to_string(), 150_000.0)];
        workload_bars(&path, "R-SET", &bars, &targets).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for name in [
            "lightstore-local/plp",
            "rocksdb-leveled/no-wal",
            "plp &gt;= 0.8x device",
        ] {
            assert!(svg.contains(name), "{name} missing from the chart");
        }
        // The axis reaches past the target line (labels of 150000 and above).
        assert!(svg.contains("150000") || svg.contains("200000"));
        // Nothing to draw: no file.
        let empty = dir.path().join("e.svg");
        workload_bars(&empty, "none", &[], &targets).unwrap();
        assert!(!empty.exists());
    }
}
