//! Charts of several results: runs side by side, and a pitfall experiment's series.

use super::*;

/// Runs side by side: peak memory above baseline and p50/p95.
pub fn comparison_chart(title_text: &str, runs: &[Report]) -> ChartOption {
    // Short labels, tilted so they never overlap; the batch only when runs differ in it.
    let same_batch = runs.windows(2).all(|w| w[0].spec.batch == w[1].spec.batch);
    let short = |r: &Report| {
        let label = r.spec.label();
        if same_batch {
            label
                .rsplit_once(" · batch")
                .map(|(a, _)| a.to_string())
                .unwrap_or(label)
        } else {
            label
        }
    };
    let cats: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| format!("#{} {}", i + 1, short(r)))
        .collect();
    let peak: Vec<f64> = runs
        .iter()
        .map(|r| round3(r.memory.peak_above_baseline_bytes as f64 / MIB))
        .collect();
    let p50: Vec<f64> = runs.iter().map(|r| round3(r.latency_ms.p50)).collect();
    let p95: Vec<f64> = runs.iter().map(|r| round3(r.latency_ms.p95)).collect();
    let description = if runs.is_empty() {
        format!("{title_text}: no finished run yet.")
    } else {
        let each: Vec<String> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                format!(
                    "#{} {} {}: peak {} above baseline, p50 {:.1} ms, p95 {:.1} ms",
                    i + 1,
                    r.spec.model.display_name(),
                    short(r),
                    format_bytes(r.memory.peak_above_baseline_bytes),
                    r.latency_ms.p50,
                    r.latency_ms.p95
                )
            })
            .collect();
        format!("{title_text}: {}.", each.join("; "))
    };
    let chart = Chart::new()
        .title(title(title_text, None))
        .tooltip(Tooltip::new().trigger(Trigger::Axis))
        .legend(Legend::new().bottom(0))
        .grid(Grid::new().left(64).right(64).top(40).bottom(120))
        .background_color("transparent")
        .x_axis(
            Axis::new()
                .type_(AxisType::Category)
                .data(cats)
                .axis_label(charming::element::AxisLabel::new().interval(0).rotate(24)),
        )
        .y_axis(
            Axis::new()
                .type_(AxisType::Value)
                .name("MiB above baseline"),
        )
        .y_axis(Axis::new().type_(AxisType::Value).name("ms"))
        .series(
            Bar::new()
                .name("peak memory above baseline (MiB)")
                .data(peak),
        )
        .series(
            Bar::new()
                .name("p50 latency (ms)")
                .y_axis_index(1)
                .data(p50),
        )
        .series(
            Bar::new()
                .name("p95 latency (ms)")
                .y_axis_index(1)
                .data(p95),
        );
    accessible(chart, description)
}

/// A pitfall experiment's series: one category axis, a value axis per unit (at most two).
/// `None` when there is nothing to draw (a "not applicable" result measures nothing, or
/// every point is missing): the card then says so in words instead of drawing an empty,
/// axis-less chart, which ECharts cannot lay out.
pub fn pitfall_chart(report: &PitfallReport) -> Option<ChartOption> {
    let drawable = report
        .series
        .iter()
        .any(|s| s.y.iter().any(|v| v.is_some_and(f64::is_finite)));
    if !drawable {
        return None;
    }
    let cats = report
        .series
        .first()
        .map(|s| s.x.clone())
        .unwrap_or_default();
    let mut units: Vec<&str> = vec![];
    for s in &report.series {
        if !units.contains(&s.unit.as_str()) && units.len() < 2 {
            units.push(&s.unit);
        }
    }
    let mut chart = Chart::new()
        .tooltip(Tooltip::new().trigger(Trigger::Axis))
        .legend(Legend::new().bottom(0))
        .grid(Grid::new().left(64).right(64).top(36).bottom(64))
        .background_color("transparent")
        .x_axis(Axis::new().type_(AxisType::Category).data(cats));
    // `drawable` guarantees a series, hence at least one unit and one value axis.
    for u in &units {
        chart = chart.y_axis(Axis::new().type_(AxisType::Value).name(*u));
    }
    let dashes = [
        LineStyleType::Solid,
        LineStyleType::Dashed,
        LineStyleType::Dotted,
    ];
    let symbols = [
        Symbol::Circle,
        Symbol::Triangle,
        Symbol::Rect,
        Symbol::Diamond,
    ];
    let mut said = vec![];
    for (i, s) in report.series.iter().enumerate() {
        // Missing points ("-") leave a gap, e.g. where a batch sweep stopped at the budget;
        // so do non-finite ones, which JSON cannot carry anyway.
        let data: Vec<DataPoint> =
            s.y.iter()
                .map(|v| match v {
                    Some(v) if v.is_finite() => DataPoint::from(round3(*v)),
                    _ => DataPoint::from("-"),
                })
                .collect();
        let points: Vec<String> =
            s.x.iter()
                .zip(&s.y)
                .map(|(x, y)| match y {
                    Some(v) if v.is_finite() => format!("{x} {} {}", short_number(*v), s.unit),
                    _ => format!("{x} not measured"),
                })
                .collect();
        said.push(format!("{}: {}", s.name, points.join(", ")));
        let axis = units.iter().position(|u| *u == s.unit).unwrap_or(0) as f64;
        chart = match report.chart {
            ChartKind::Line => chart.series(
                Line::new()
                    .name(s.name.clone())
                    .y_axis_index(axis)
                    .symbol(symbols[i % symbols.len()].clone())
                    .line_style(LineStyle::new().type_(dashes[i % dashes.len()]))
                    .data(data),
            ),
            ChartKind::Bar => chart.series(
                Bar::new()
                    .name(s.name.clone())
                    .y_axis_index(axis)
                    .data(data),
            ),
        };
    }
    Some(accessible(chart, format!("{}.", said.join("; "))))
}
