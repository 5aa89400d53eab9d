//! SVG plots of `bench all` (`plotters`): throughput per workload per system (grouped bars,
//! log scale) and latency CDFs.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// A grouped bar chart: one group per workload, one bar per system (`value(system,
/// workload)`, `None` for a missing row), log-scale y. Each series is `(name, colour index)`,
/// so a system has the same colour in every plot.
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
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    if values.is_empty() {
        return Ok(());
    }
    let (lo, hi) = (lo / 2.0, hi * 40.0);
    let root = SVGBackend::new(path, (1280, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n - 0.5, (lo..hi).log_scale())
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                groups
                    .get(i as usize)
                    .map_or_else(String::new, |g| (*g).to_string())
            } else {
                String::new()
            }
        })
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}
