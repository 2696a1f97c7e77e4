//! The chart at the top of BENCHMARKS.md: lock+unlock pairs/s against tasks for
//! distlock and rslock on both runtimes, with the server's two ceilings measured by
//! redis-benchmark in the same run, drawn as SVG.

use plotters::prelude::*;

use super::median_of;
use crate::error::BoxError;
use crate::reference::Load;
use crate::runtime::Flavor;
use crate::server::Protocol;
use crate::throughput::{Sample, ThroughputResults};

/// One line of the chart.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
    dashed: bool,
    /// The first point stands apart (a ceiling at one task is another load).
    first_apart: bool,
}

const DISTLOCK: RGBColor = RGBColor(31, 119, 180);
const RSLOCK: RGBColor = RGBColor(214, 96, 39);
const CEILING_SCRIPTS: RGBColor = RGBColor(44, 150, 44);
const CEILING_COMMANDS: RGBColor = RGBColor(120, 120, 120);

/// The lines: each client on each runtime at every task count measured, and each
/// ceiling at the same task counts (`-c 1` at one task, pipelined above).
fn lines(t: &ThroughputResults) -> Vec<Line> {
    let mut tasks: Vec<usize> = t.cells.iter().map(|c| c.tasks).collect();
    tasks.sort_unstable();
    tasks.dedup();
    let mut lines = Vec::new();
    for (flavor, dashed) in [(Flavor::MultiThread, false), (Flavor::CurrentThread, true)] {
        let of = |peer: bool| -> Vec<(f64, f64)> {
            tasks
                .iter()
                .filter_map(|&n| t.cell(n, flavor).map(|c| (n, c)))
                .map(|(n, c)| (n, if peer { &c.peer } else { &c.distlock }))
                .filter(|(_, samples)| !samples.is_empty())
                .map(|(n, samples)| (n as f64, median_of(samples, Sample::rate)))
                .collect()
        };
        lines.push(Line {
            label: format!(
                "distlock, {flavor}{}",
                if dashed { " (dashed)" } else { "" }
            ),
            points: of(false),
            color: DISTLOCK,
            dashed,
            first_apart: false,
        });
        lines.push(Line {
            label: format!("rslock, {flavor}{}", if dashed { " (dashed)" } else { "" }),
            points: of(true),
            color: RSLOCK,
            dashed,
            first_apart: false,
        });
    }
    for (protocol, label, color) in [
        (
            Protocol::Distlock,
            "ceiling: distlock's scripts (redis-benchmark -c 1 · -P 16 -c 8)",
            CEILING_SCRIPTS,
        ),
        (
            Protocol::Minimal,
            "ceiling: rslock's commands (redis-benchmark -c 1 · -P 16 -c 8)",
            CEILING_COMMANDS,
        ),
    ] {
        let reference = t.reference(protocol);
        let points = tasks
            .iter()
            .map(|&n| {
                let load = if n <= 1 { Load::C1 } else { Load::Pipelined };
                (n as f64, reference.at(load).pairs())
            })
            .collect();
        lines.push(Line {
            label: label.to_owned(),
            points,
            color,
            dashed: false,
            first_apart: tasks.first() == Some(&1),
        });
    }
    lines.retain(|line| !line.points.is_empty() && line.points.iter().all(|p| p.1 > 0.0));
    lines
}

/// The task counts marked on the x axis: the powers of 4 up to `x_max`.
fn x_keys(x_max: f64) -> Vec<f64> {
    std::iter::successors(Some(1.0), |x| Some(x * 4.0))
        .take_while(|x| *x <= x_max)
        .collect()
}

/// The chart as an SVG document.
pub(crate) fn svg(t: &ThroughputResults) -> Result<String, BoxError> {
    let lines = lines(t);
    let all = lines.iter().flat_map(|l| l.points.iter());
    let x_max = all.clone().map(|p| p.0).fold(1.0, f64::max).max(2.0);
    let y_min = all.clone().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let y_max = all.map(|p| p.1).fold(0.0, f64::max);
    if lines.is_empty() || !y_min.is_finite() {
        return Err("no throughput was measured: nothing to draw".into());
    }
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (960, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Lock+unlock pairs/s against tasks (one Redis server, same run)",
                ("sans-serif", 22),
            )
            .margin(18)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (0.9..x_max * 1.15)
                    .log_scale()
                    .with_key_points(x_keys(x_max)),
                // Room below the lowest line for the legend.
                (y_min / 5.0..y_max * 1.6).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("tasks, each on names of its own (log scale)")
            .y_desc("pairs/s (log scale)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| {
                if *y >= 1000.0 {
                    format!("{:.0}k", y / 1000.0)
                } else {
                    format!("{y:.0}")
                }
            })
            .label_style(("sans-serif", 15))
            .draw()?;
        for line in &lines {
            let style = ShapeStyle {
                color: line.color.to_rgba(),
                filled: true,
                stroke_width: 2,
            };
            let joined = line.points[usize::from(line.first_apart)..].to_vec();
            let drawn = if line.dashed {
                chart.draw_series(DashedLineSeries::new(joined, 7, 5, style))?
            } else {
                chart.draw_series(LineSeries::new(joined, style))?
            };
            drawn
                .label(line.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
            chart.draw_series(
                line.points
                    .iter()
                    .map(|&point| Circle::new(point, 3, style.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(text)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::reference::Rates;
    use crate::throughput::{Cell, RunReference};

    fn sample(pairs: usize) -> Sample {
        Sample {
            pairs,
            secs: 1.0,
            ..Sample::default()
        }
    }

    /// Two task counts on both runtimes, and one run's references.
    pub(crate) fn measured() -> ThroughputResults {
        let mut t = ThroughputResults::default();
        for tasks in [1, 4] {
            for flavor in [Flavor::MultiThread, Flavor::CurrentThread] {
                t.cells.push(Cell {
                    tasks,
                    flavor,
                    distlock: vec![sample(1000 * tasks)],
                    peer: vec![sample(2000 * tasks)],
                });
            }
        }
        let rates = |per_second: f64| Rates {
            acquire: per_second,
            release: per_second,
            ..Rates::default()
        };
        let mut reference = RunReference::default();
        for r in [
            &mut reference.distlock,
            &mut reference.minimal,
            &mut reference.bare,
        ] {
            r.c1 = rates(9000.0);
            r.pipelined = rates(90000.0);
        }
        t.references.push(reference);
        t
    }

    #[test]
    fn the_chart_draws_every_client_and_both_ceilings() {
        let svg = svg(&measured()).expect("a chart");
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        for label in [
            "distlock, multi-thread",
            "distlock, current-thread (dashed)",
            "rslock, multi-thread",
            "rslock, current-thread (dashed)",
            "ceiling: distlock",
            "ceiling: rslock",
        ] {
            assert!(svg.contains(label), "no {label:?} in the chart");
        }
    }

    #[test]
    fn nothing_measured_is_an_error_not_an_empty_chart() {
        let err = svg(&ThroughputResults::default()).expect_err("nothing to draw");
        assert!(err.to_string().contains("nothing to draw"), "{err}");
    }
}
