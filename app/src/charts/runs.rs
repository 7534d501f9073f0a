//! One run's charts: latency and memory per iteration, with the previous run behind.

use super::*;

pub fn latency_chart(
    warmup: &[Sample],
    samples: &[Sample],
    p50: Option<f64>,
    p95: Option<f64>,
) -> ChartOption {
    latency_chart_with(warmup, samples, p50, p95, None, None)
}

/// [`latency_chart`] with the previous run drawn faintly behind and the reading against
/// it written on the chart.
pub fn latency_chart_with(
    warmup: &[Sample],
    samples: &[Sample],
    p50: Option<f64>,
    p95: Option<f64>,
    previous: Option<Previous>,
    reading: Option<&str>,
) -> ChartOption {
    let warmup_slots = previous
        .map(|p| p.warmup.len())
        .unwrap_or(0)
        .max(warmup.len());
    let timed_slots = previous
        .map(|p| p.samples.len())
        .unwrap_or(0)
        .max(samples.len());
    let cats = labels(warmup_slots, timed_slots);
    let ms = |s: &Sample| s.latency_ms;
    let mut plotted: Vec<f64> = warmup.iter().chain(samples).map(ms).collect();
    if let Some(p) = previous {
        plotted.extend(p.warmup.iter().chain(p.samples).map(ms));
    }
    let mut line = Line::new()
        .name("latency (ms)")
        .show_symbol(true)
        .z(3)
        .data(aligned(warmup, samples, warmup_slots, ms));
    if warmup_slots > 0 {
        line = line.mark_area(
            MarkArea::new()
                .item_style(ItemStyle::new().color("rgba(160, 160, 160, 0.18)"))
                // Above the band, outside the plot: no point can sit on it (the first
                // warm-up iterations are the slow ones, at the band's top). The unit is
                // in the title, so the axis name does not take that place.
                .label(
                    Label::new()
                        .position(LabelPosition::Top)
                        .formatter("warm-up"),
                )
                .data(vec![(
                    MarkAreaData::new()
                        .name("warm-up (not in the statistics)")
                        .x_axis("w1"),
                    MarkAreaData::new().x_axis(format!("w{warmup_slots}")),
                )]),
        );
    }
    let mut marks: Vec<MarkLineVariant> = vec![];
    // Each label above its own line, p50's at the left end and p95's at the right: they
    // never overlap, however close the two values are (the usual case), and neither hangs
    // below the plot when p50 is near zero (end2end/tests/chart-labels.spec.ts measures
    // the boxes).
    for (name, value, position) in [
        ("p50", p50, LabelPosition::InsideStartTop),
        ("p95", p95, LabelPosition::InsideEndTop),
    ] {
        if let Some(p) = value {
            plotted.push(p);
            marks.push(MarkLineVariant::Simple(
                MarkLineData::new()
                    .name(name)
                    .y_axis(round3(p))
                    .label(
                        Label::new()
                            .position(position)
                            // The text is written here, from the figure itself: ECharts'
                            // `{c}` would round the already rounded line value a second time
                            // (3.3447 → 3.345 → "3.35").
                            .formatter(format!("{name} {}", mark_text(p)).as_str()),
                    ),
            ));
        }
    }
    if !marks.is_empty() {
        line = line.mark_line(MarkLine::new().data(marks));
    }
    let description = latency_description(warmup.len(), samples, p50, p95, reading);
    let (y_axis, zoomed) = value_axis("", &plotted, true);
    let mut chart = base(
        title(
            "Latency per iteration (ms)",
            zoomed.then(|| NOT_FROM_ZERO.to_string()),
        ),
        reading,
        "iteration",
        y_axis,
        cats,
    )
    .series(line);
    if let Some(p) = previous {
        chart = chart.series(previous_line(
            "previous run (ms)",
            aligned(p.warmup, p.samples, warmup_slots, ms),
        ));
    }
    accessible(chart, description)
}

pub(super) fn latency_description(
    warmup: usize,
    samples: &[Sample],
    p50: Option<f64>,
    p95: Option<f64>,
    reading: Option<&str>,
) -> String {
    let mut s = match (p50, p95) {
        (Some(p50), Some(p95)) => format!(
            "Latency per iteration: p50 {p50:.1} ms, p95 {p95:.1} ms over {} iterations",
            samples.len()
        ),
        _ if samples.is_empty() && warmup == 0 => {
            "Latency per iteration: nothing measured yet".to_string()
        }
        _ => format!(
            "Latency per iteration: {} timed iterations measured so far{}",
            samples.len(),
            samples
                .last()
                .map(|s| format!(", the latest {:.1} ms", s.latency_ms))
                .unwrap_or_default()
        ),
    };
    if warmup > 0 {
        s.push_str(&format!(
            ", after {warmup} warm-up iterations (shaded, not in the statistics)"
        ));
    }
    s.push('.');
    if let Some(r) = reading {
        s.push_str(&format!(" Against the previous run: {r}."));
    }
    s
}

/// How the memory chart plots bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryScale {
    /// Above the run's baseline (what was held before the pass): the default, since the
    /// difference between grad modes is a difference above the weights and input.
    #[default]
    AboveBaseline,
    /// Everything the measuring thread holds, the baseline marked.
    Absolute,
}

/// Peak memory during each forward pass and allocated memory after it (and, on CUDA,
/// reserved), above the baseline.
pub fn memory_chart(warmup: &[Sample], samples: &[Sample], baseline: Option<u64>) -> ChartOption {
    memory_chart_with(
        warmup,
        samples,
        baseline,
        MemoryScale::AboveBaseline,
        None,
        None,
    )
}

/// [`memory_chart`] in either scale, with the previous run drawn faintly behind and the
/// reading against it written on the chart.
pub fn memory_chart_with(
    warmup: &[Sample],
    samples: &[Sample],
    baseline: Option<u64>,
    scale: MemoryScale,
    previous: Option<Previous>,
    reading: Option<&str>,
) -> ChartOption {
    let warmup_slots = previous
        .map(|p| p.warmup.len())
        .unwrap_or(0)
        .max(warmup.len());
    let timed_slots = previous
        .map(|p| p.samples.len())
        .unwrap_or(0)
        .max(samples.len());
    let cats = labels(warmup_slots, timed_slots);
    // Above the baseline needs the baseline: without it (not started yet) plot absolute.
    let scale = if baseline.is_none() {
        MemoryScale::Absolute
    } else {
        scale
    };
    let shift = |b: Option<u64>| match scale {
        MemoryScale::AboveBaseline => b.unwrap_or(0) as f64,
        MemoryScale::Absolute => 0.0,
    };
    let own = shift(baseline);
    let mib = move |bytes: u64, by: f64| ((bytes as f64 - by).max(0.0)) / MIB;
    let all: Vec<&Sample> = warmup.iter().chain(samples).collect();
    let mut plotted: Vec<f64> = all.iter().map(|s| mib(s.peak_bytes, own)).collect();
    plotted.extend(all.iter().map(|s| mib(s.allocated_bytes, own)));
    let (peak_name, alloc_name) = match scale {
        MemoryScale::AboveBaseline => ("peak during the pass", "allocated after it"),
        MemoryScale::Absolute => ("peak during the pass (MiB)", "allocated after it (MiB)"),
    };
    let mut peak = Line::new()
        .name(peak_name)
        .z(3)
        .symbol(Symbol::Circle)
        .data(aligned(warmup, samples, warmup_slots, |s| {
            mib(s.peak_bytes, own)
        }));
    if let (MemoryScale::Absolute, Some(b)) = (scale, baseline) {
        plotted.push(b as f64 / MIB);
        peak = peak.mark_line(MarkLine::new().data(vec![MarkLineVariant::Simple(
            MarkLineData::new()
                .name("baseline: weights + input")
                .y_axis(round3(b as f64 / MIB))
                .label(Label::new().formatter("baseline {c}")),
        )]));
    }
    let allocated = Line::new()
        .name(alloc_name)
        .z(2)
        .symbol(Symbol::Triangle)
        .line_style(LineStyle::new().type_(LineStyleType::Dashed))
        .data(aligned(warmup, samples, warmup_slots, |s| {
            mib(s.allocated_bytes, own)
        }));

    let reserved: Option<Vec<DataPoint>> =
        all.iter().any(|s| s.reserved_bytes.is_some()).then(|| {
            plotted.extend(
                all.iter()
                    .filter_map(|s| s.reserved_bytes)
                    .map(|r| mib(r, own)),
            );
            aligned(warmup, samples, warmup_slots, |s| {
                mib(s.reserved_bytes.unwrap_or(0), own)
            })
        });
    let previous_data = previous.map(|p| {
        let by = shift(p.baseline);
        plotted.extend(
            p.warmup
                .iter()
                .chain(p.samples)
                .map(|s| mib(s.peak_bytes, by)),
        );
        aligned(p.warmup, p.samples, warmup_slots, |s| mib(s.peak_bytes, by))
    });
    let description = memory_description(samples, baseline, scale, reading);
    // Above the baseline, zero is the baseline itself: the axis always starts there.
    let (y_axis, zoomed) = value_axis("MiB", &plotted, scale == MemoryScale::Absolute);
    let subtext = baseline.map(|b| match scale {
        MemoryScale::AboveBaseline => {
            format!(
                "MiB above the baseline of {} (weights + input)",
                format_bytes(b)
            )
        }
        MemoryScale::Absolute => format!(
            "absolute; baseline {} marked{}",
            format_bytes(b),
            if zoomed {
                format!("; {NOT_FROM_ZERO}")
            } else {
                String::new()
            }
        ),
    });
    let mut chart = base(
        title("Memory per forward pass", subtext),
        reading,
        "iteration",
        y_axis,
        cats,
    )
    .series(peak)
    .series(allocated);
    if let Some(data) = reserved {
        chart = chart.series(
            Line::new()
                .name("reserved by the caching allocator")
                .z(2)
                .symbol(Symbol::Rect)
                .line_style(LineStyle::new().type_(LineStyleType::Dotted))
                .data(data),
        );
    }
    if let Some(data) = previous_data {
        chart = chart.series(previous_line("previous run: peak", data));
    }
    accessible(chart, description)
}

pub(super) fn memory_description(
    samples: &[Sample],
    baseline: Option<u64>,
    scale: MemoryScale,
    reading: Option<&str>,
) -> String {
    let Some(b) = baseline else {
        return "Memory per forward pass: nothing measured yet.".into();
    };
    let peak = samples.iter().map(|s| s.peak_bytes).max().unwrap_or(b);
    let after = samples.last().map(|s| s.allocated_bytes).unwrap_or(b);
    let mut s = format!(
        "Memory per forward pass over {} timed iterations: peak {} above the baseline of {}; after each pass {} above it",
        samples.len(),
        format_bytes(peak.saturating_sub(b)),
        format_bytes(b),
        format_bytes(after.saturating_sub(b)),
    );
    if scale == MemoryScale::Absolute {
        s.push_str(" (plotted absolute)");
    }
    s.push('.');
    if let Some(r) = reading {
        s.push_str(&format!(" Against the previous run: {r}."));
    }
    s
}

/// A mark line's figure in milliseconds, to two decimals (three below 0.1 ms, where two
/// would read 0.00), rounded once, from the measured value.
fn mark_text(ms: f64) -> String {
    if ms < 0.1 { format!("{ms:.3}") } else { format!("{ms:.2}") }
}
