//! The lab's charts as ECharts options (built with charming), from measured samples only.
//! The builders are pure so they are tested natively; drawing happens in the browser
//! (`render`, hydrate builds only).
//!
//! Every chart is accessible: ECharts' `aria` is on with a sentence generated from the
//! figures ("p50 5.3 ms, p95 8.8 ms over 20 iterations"), bars carry decal patterns and
//! lines differ in dash and symbol, so no series is told apart by colour alone.

use charming::component::{Axis, Grid, Legend, LegendType, Title};
use charming::datatype::DataPoint;
use charming::element::{
    AxisType, ItemStyle, Label, LabelPosition, LineStyle, LineStyleType, MarkArea, MarkAreaData,
    MarkLine, MarkLineData, MarkLineVariant, Symbol, TextStyle, Tooltip, Trigger,
};
use charming::series::{Bar, Line};
use charming::Chart;
use protocol::{format_bytes, ChartKind, PitfallReport, Report, Sample};
use serde::Serialize;

const MIB: f64 = 1024.0 * 1024.0;

/// The colour of the previous run drawn behind the current one: a grey that reads on the
/// light and the dark background alike, kept faint by its opacity.
const PREVIOUS_COLOUR: &str = "#8a8f98";

/// A chart ready to draw: ECharts' option as JSON, with its accessible description.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ChartOption(pub serde_json::Value);

impl ChartOption {
    /// The sentence a screen reader reads for this chart.
    pub fn description(&self) -> Option<&str> {
        self.0["aria"]["label"]["description"].as_str()
    }
}

/// `chart` with ECharts' aria on: `description` is what a screen reader reads, and bars
/// get decal patterns.
fn accessible(chart: Chart, description: String) -> ChartOption {
    let mut json = serde_json::to_value(&chart).unwrap_or_default();
    json["aria"] = serde_json::json!({
        "enabled": true,
        "label": { "enabled": true, "description": description },
        "decal": { "show": true },
    });
    ChartOption(json)
}

/// What a run drawn faintly behind the current one brings: its samples and baseline.
#[derive(Clone, Copy, Debug)]
pub struct Previous<'a> {
    pub warmup: &'a [Sample],
    pub samples: &'a [Sample],
    pub baseline: Option<u64>,
}

impl<'a> Previous<'a> {
    pub fn of(r: &'a Report) -> Previous<'a> {
        Previous {
            warmup: &r.warmup,
            samples: &r.samples,
            baseline: Some(r.memory.baseline_bytes),
        }
    }
}

/// Category labels: `w1..wN` for warm-up iterations, `1..M` for timed ones.
fn labels(warmup: usize, samples: usize) -> Vec<String> {
    (1..=warmup)
        .map(|i| format!("w{i}"))
        .chain((1..=samples).map(|i| i.to_string()))
        .collect()
}

/// `warmup` then `samples` mapped by `f`, the warm-up padded with gaps to `warmup_slots`
/// so that timed iteration 1 of two runs with different warm-ups share a column.
fn aligned(
    warmup: &[Sample],
    samples: &[Sample],
    warmup_slots: usize,
    f: impl Fn(&Sample) -> f64,
) -> Vec<DataPoint> {
    let gap = warmup_slots.saturating_sub(warmup.len());
    warmup
        .iter()
        .map(|s| DataPoint::from(round3(f(s))))
        .chain((0..gap).map(|_| DataPoint::from("-")))
        .chain(samples.iter().map(|s| DataPoint::from(round3(f(s)))))
        .collect()
}

/// A value axis that starts at zero unless zero would flatten what the chart shows: when
/// `may_zoom` and every plotted value lies in the upper half of the range from zero, the
/// axis starts near the data (ECharts' `scale`). The flag says whether it did, so the
/// chart can say so in words.
fn value_axis(name: &str, values: &[f64], may_zoom: bool) -> (Axis, bool) {
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let zoomed = may_zoom && lo.is_finite() && lo > 0.0 && lo > hi / 2.0;
    let axis = Axis::new().type_(AxisType::Value).name(name);
    (if zoomed { axis.scale(true) } else { axis }, zoomed)
}

/// What the subtitle adds when the value axis does not start at zero.
const NOT_FROM_ZERO: &str = "axis not from 0";

fn title(text: &str, subtext: Option<String>) -> Title {
    let t = Title::new()
        .text(text)
        .left("center")
        .text_style(TextStyle::new().font_size(14));
    match subtext {
        Some(s) => t.subtext(s).subtext_style(TextStyle::new().font_size(12)),
        None => t,
    }
}

/// The reading against the previous run, written on the chart itself, above the plot.
fn reading_title(reading: &str) -> Title {
    Title::new()
        .text(reading)
        .right(12)
        .top(46)
        .text_style(TextStyle::new().font_size(12).font_weight("bold"))
}

fn base(
    t: Title,
    reading: Option<&str>,
    x_name: &str,
    y_axis: Axis,
    categories: Vec<String>,
) -> Chart {
    // Room above the plot for the title, its subtitle, the reading and the axis's unit.
    let top = if reading.is_some() { 92 } else { 64 };
    let mut chart = Chart::new().title(t);
    if let Some(r) = reading {
        chart = chart.title(reading_title(r));
    }
    chart
        .tooltip(Tooltip::new().trigger(Trigger::Axis))
        // One line that scrolls, never two that run into the axis name on a phone.
        .legend(Legend::new().type_(LegendType::Scroll).bottom(0))
        .grid(Grid::new().left(64).right(100).top(top).bottom(56))
        .background_color("transparent")
        .animation(false)
        .x_axis(
            Axis::new()
                .type_(AxisType::Category)
                .name(x_name)
                .name_location(charming::element::NameLocation::Middle)
                .name_gap(26)
                .data(categories),
        )
        .y_axis(y_axis)
}

/// The previous run's series: grey, thin, dotted and behind the current one.
fn previous_line(name: &str, data: Vec<DataPoint>) -> Line {
    Line::new()
        .name(name)
        .symbol(Symbol::None)
        .z(1)
        .item_style(ItemStyle::new().color(PREVIOUS_COLOUR).opacity(0.6))
        .line_style(
            LineStyle::new()
                .color(PREVIOUS_COLOUR)
                .width(2)
                .opacity(0.6)
                .type_(LineStyleType::Dotted),
        )
        .data(data)
}

/// Per-iteration latency, the warm-up shaded and left out of the p50/p95 lines.
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
                .label(
                    Label::new()
                        .position(LabelPosition::InsideTop)
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
    for (name, value) in [("p50", p50), ("p95", p95)] {
        if let Some(p) = value {
            plotted.push(p);
            marks.push(MarkLineVariant::Simple(
                MarkLineData::new()
                    .name(name)
                    .y_axis(round3(p))
                    .label(Label::new().formatter(format!("{name} {{c}}").as_str())),
            ));
        }
    }
    if !marks.is_empty() {
        line = line.mark_line(MarkLine::new().data(marks));
    }
    let description = latency_description(warmup.len(), samples, p50, p95, reading);
    let (y_axis, zoomed) = value_axis("ms", &plotted, true);
    let mut chart = base(
        title(
            "Latency per iteration",
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

fn latency_description(
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

fn memory_description(
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
                    .line_style(LineStyle::new().type_(dashes[i % dashes.len()].clone()))
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

/// A figure for a sentence: three significant digits at most.
fn short_number(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Draws `chart` into the element `id` at the next animation frame. Samples can arrive
/// faster than ECharts redraws (a tiny model streams 50 in a few milliseconds); drawing
/// each one would block the page, so bursts collapse into one redraw per frame, always
/// with the newest data.
///
/// Drawing never panics and never leaves state borrowed: every call into ECharts goes
/// through `Reflect::apply`, which turns a JavaScript exception into an `Err` (an exception
/// escaping through wasm would skip Rust's unwinding and leave a `RefCell` borrowed for
/// the rest of the page's life). A chart ECharts refuses is replaced by a sentence saying
/// why, and the next render of that element starts afresh.
#[cfg(feature = "hydrate")]
pub fn render(id: impl Into<String>, chart: ChartOption) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    PENDING.with(|p| p.borrow_mut().insert(id.into(), chart));
    if !SCHEDULED.with(|s| s.replace(true)) {
        let flush = Closure::once_into_js(flush);
        let asked = web_sys::window()
            .map(|w| w.request_animation_frame(flush.unchecked_ref()).is_ok())
            .unwrap_or(false);
        if !asked {
            SCHEDULED.with(|s| s.set(false));
        }
    }
}

#[cfg(feature = "hydrate")]
thread_local! {
    /// The newest chart per element, waiting for the next frame.
    static PENDING: std::cell::RefCell<std::collections::HashMap<String, ChartOption>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// The chart last drawn in each element: drawn again when the colour scheme changes.
    static DRAWN: std::cell::RefCell<std::collections::HashMap<String, ChartOption>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// Whether a frame callback is already asked for.
    static SCHEDULED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether the resize and colour-scheme listeners are installed.
    static WATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keeps drawn charts in step with the window: a canvas keeps the width it was drawn at,
/// so a narrower window would scroll sideways unless every chart is resized; and a change
/// of the system's light/dark setting redraws every chart in the matching theme.
#[cfg(feature = "hydrate")]
fn watch_window() {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    if WATCHING.with(|w| w.replace(true)) {
        return;
    }
    let Some(window) = web_sys::window() else {
        return;
    };
    let on_resize = Closure::<dyn FnMut()>::new(|| {
        let ids: Vec<String> = DRAWN.with(|d| d.borrow().keys().cloned().collect());
        let Some(window) = web_sys::window() else {
            return;
        };
        let Ok(echarts) = js_sys::Reflect::get(&window, &"echarts".into()) else {
            return;
        };
        for id in ids {
            let Some(el) = window.document().and_then(|d| d.get_element_by_id(&id)) else {
                continue;
            };
            let el: wasm_bindgen::JsValue = el.into();
            if let Ok(chart) = js_call(&echarts, "getInstanceByDom", &[&el]) {
                if !(chart.is_undefined() || chart.is_null()) {
                    let _ = js_call(&chart, "resize", &[]);
                }
            }
        }
    });
    let _ = window.add_event_listener_with_callback("resize", on_resize.as_ref().unchecked_ref());
    on_resize.forget();
    if let Ok(Some(query)) = window.match_media("(prefers-color-scheme: dark)") {
        let on_scheme = Closure::<dyn FnMut()>::new(|| {
            let all: Vec<(String, ChartOption)> = DRAWN.with(|d| {
                d.borrow()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            });
            for (id, chart) in all {
                render(id, chart);
            }
        });
        let _ =
            query.add_event_listener_with_callback("change", on_scheme.as_ref().unchecked_ref());
        on_scheme.forget();
    }
}

#[cfg(feature = "hydrate")]
fn flush() {
    SCHEDULED.with(|s| s.set(false));
    watch_window();
    // Take the work out first: nothing stays borrowed while JavaScript runs.
    let pending: Vec<(String, ChartOption)> = PENDING.with(|p| p.borrow_mut().drain().collect());
    for (id, chart) in pending {
        DRAWN.with(|d| d.borrow_mut().insert(id.clone(), chart.clone()));
        if let Err(message) = draw(&id, &chart) {
            leptos::logging::warn!("could not draw chart {id}: {message}");
            say_not_drawn(&id, &message);
        }
    }
}

/// Calls `target[name](...args)`, with a JavaScript exception as `Err`.
#[cfg(feature = "hydrate")]
fn js_call(
    target: &wasm_bindgen::JsValue,
    name: &str,
    args: &[&wasm_bindgen::JsValue],
) -> Result<wasm_bindgen::JsValue, String> {
    use wasm_bindgen::JsCast;
    let f = js_sys::Reflect::get(target, &name.into())
        .map_err(js_message)?
        .dyn_into::<js_sys::Function>()
        .map_err(|_| format!("{name} is not a function"))?;
    let list = js_sys::Array::new();
    for a in args {
        list.push(a);
    }
    js_sys::Reflect::apply(&f, target, &list).map_err(js_message)
}

#[cfg(feature = "hydrate")]
fn js_message(e: wasm_bindgen::JsValue) -> String {
    use wasm_bindgen::JsCast;
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "an unknown JavaScript error".into())
}

#[cfg(feature = "hydrate")]
fn draw(id: &str, chart: &ChartOption) -> Result<(), String> {
    use wasm_bindgen::JsValue;
    let window = web_sys::window().ok_or("no window")?;
    // A page change may have removed the element: nothing to draw then.
    let Some(element) = window.document().and_then(|d| d.get_element_by_id(id)) else {
        return Ok(());
    };
    let echarts = js_sys::Reflect::get(&window, &"echarts".into()).map_err(js_message)?;
    if echarts.is_undefined() {
        return Err("the chart library (ECharts) did not load".into());
    }
    let json = serde_json::to_string(chart).map_err(|e| e.to_string())?;
    let option = js_sys::JSON::parse(&json).map_err(js_message)?;
    // The theme follows the system's light or dark setting; a chart drawn before the
    // setting changed is made afresh in the new one.
    let dark = window
        .match_media("(prefers-color-scheme: dark)")
        .ok()
        .flatten()
        .is_some_and(|m| m.matches());
    let theme_name = if dark { "dark" } else { "light" };
    let drawn_in = element.get_attribute("data-chart-theme");
    let element: JsValue = element.into();
    let mut existing = js_call(&echarts, "getInstanceByDom", &[&element])?;
    if !(existing.is_undefined() || existing.is_null()) && drawn_in.as_deref() != Some(theme_name) {
        js_call(&echarts, "dispose", &[&element])?;
        existing = JsValue::UNDEFINED;
    }
    let instance = if existing.is_undefined() || existing.is_null() {
        if let Some(el) = wasm_bindgen::JsCast::dyn_ref::<web_sys::Element>(&element) {
            // The sentence a previous failure left there.
            el.set_inner_html("");
            let _ = el.class_list().remove_1("chart-error");
            let _ = el.set_attribute("data-chart-theme", theme_name);
        }
        let theme = if dark {
            JsValue::from("dark")
        } else {
            JsValue::NULL
        };
        js_call(&echarts, "init", &[&element, &theme])?
    } else {
        existing
    };
    // Not merged into the previous option: a series that is gone must not linger.
    let settings = js_sys::Object::new();
    js_sys::Reflect::set(&settings, &"notMerge".into(), &JsValue::TRUE).map_err(js_message)?;
    js_call(&instance, "setOption", &[&option, &settings])
        .map(|_| ())
        .inspect_err(|_| {
            // Half-drawn state is worse than none: start afresh next time.
            let _ = js_call(&echarts, "dispose", &[&element]);
        })
}

/// Puts a sentence where a chart could not be drawn, so the reader is not left with a
/// blank box.
#[cfg(feature = "hydrate")]
fn say_not_drawn(id: &str, message: &str) {
    if let Some(el) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
    {
        let _ = el.class_list().add_1("chart-error");
        el.set_text_content(Some(&format!("This chart could not be drawn: {message}")));
    }
}

/// Saves the chart drawn in element `id` as a PNG (ECharts renders it at twice the
/// screen's resolution, on the page's background).
#[cfg(feature = "hydrate")]
pub fn download_png(id: &str, filename: &str) {
    use js_sys::{Function, Object, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    let url = (|| -> Option<String> {
        let window = web_sys::window()?;
        let document = window.document()?;
        let element = document.get_element_by_id(id)?;
        let echarts = Reflect::get(&window, &"echarts".into()).ok()?;
        let get = Reflect::get(&echarts, &"getInstanceByDom".into())
            .ok()?
            .dyn_into::<Function>()
            .ok()?;
        let chart = get
            .call1(&echarts, &element)
            .ok()
            .filter(|c| !c.is_undefined())?;
        let to_url = Reflect::get(&chart, &"getDataURL".into())
            .ok()?
            .dyn_into::<Function>()
            .ok()?;
        let dark = window
            .match_media("(prefers-color-scheme: dark)")
            .ok()
            .flatten()
            .is_some_and(|m| m.matches());
        let options = Object::new();
        Reflect::set(&options, &"type".into(), &"png".into()).ok()?;
        Reflect::set(&options, &"pixelRatio".into(), &JsValue::from(2)).ok()?;
        Reflect::set(
            &options,
            &"backgroundColor".into(),
            &(if dark { "#1c1f24" } else { "#ffffff" }).into(),
        )
        .ok()?;
        to_url.call1(&chart, &options).ok()?.as_string()
    })();
    let Some(url) = url else {
        leptos::logging::warn!("chart {id} is not drawn yet: nothing to save");
        return;
    };
    let link = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.create_element("a").ok())
        .and_then(|a| a.dyn_into::<web_sys::HtmlElement>().ok());
    if let Some(a) = link {
        let _ = a.set_attribute("href", &url);
        let _ = a.set_attribute("download", filename);
        a.click();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u32, ms: f64, bytes: u64) -> Sample {
        Sample {
            iteration: i,
            latency_ms: ms,
            allocated_bytes: bytes,
            peak_bytes: 2 * bytes,
            reserved_bytes: None,
        }
    }

    #[test]
    fn latency_chart_carries_every_measured_point_and_shades_warmup() {
        let warm = [sample(0, 9.0, 1), sample(1, 5.0, 1)];
        let timed = [sample(0, 1.5, 1), sample(1, 1.25, 1)];
        let json = serde_json::to_value(latency_chart(&warm, &timed, Some(1.375), None)).unwrap();
        let data = &json["series"][0]["data"];
        assert_eq!(data.as_array().unwrap().len(), 4);
        let x_axis = if json["xAxis"].is_array() {
            &json["xAxis"][0]
        } else {
            &json["xAxis"]
        };
        assert_eq!(x_axis["data"][0], "w1");
        assert_eq!(x_axis["data"][2], "1");
        assert_eq!(json["series"][0]["markArea"]["data"][0][1]["xAxis"], "w2");
        assert!(json.to_string().contains("1.375"));
    }

    #[test]
    fn memory_chart_has_reserved_only_where_measured() {
        let timed = [sample(0, 1.0, 3 << 20)];
        let cpu = serde_json::to_value(memory_chart(&[], &timed, Some(1 << 20))).unwrap();
        assert_eq!(cpu["series"].as_array().unwrap().len(), 2);
        assert_eq!(
            cpu["series"][0]["data"][0], 5.0,
            "peak during the pass, in MiB above the 1 MiB baseline"
        );
        let mut gpu_sample = sample(0, 1.0, 3 << 20);
        gpu_sample.reserved_bytes = Some(8 << 20);
        let gpu = serde_json::to_value(memory_chart(&[], &[gpu_sample], None)).unwrap();
        assert_eq!(gpu["series"].as_array().unwrap().len(), 3);
        assert_eq!(gpu["series"][2]["data"][0], 8.0);
    }

    fn pitfall(series: Vec<protocol::Series>) -> PitfallReport {
        PitfallReport {
            id: "x".into(),
            claim: "c".into(),
            verdict: protocol::Verdict::NotApplicable,
            reason: "r".into(),
            threshold: "t".into(),
            figures: vec![],
            chart: ChartKind::Bar,
            series,
            notes: vec![],
            table: None,
            env: protocol::EnvStamp {
                device: protocol::DeviceKind::Cpu,
                device_name: "cpu".into(),
                device_total_memory_bytes: None,
                driver_version: None,
                cuda_version: None,
                cudnn_version: None,
                libtorch_version: "2.11.0".into(),
                cpu_model: "cpu".into(),
                threads: 1,
                measured_at: "2026-11-30T00:00:00Z".into(),
                gradless_version: "0".into(),
            },
            record_id: None,
        }
    }

    #[test]
    fn nothing_measured_draws_no_chart_instead_of_an_axisless_one() {
        // A "not applicable" card measures nothing: no series at all.
        assert!(pitfall_chart(&pitfall(vec![])).is_none());
        // A series whose every point is missing or not finite is nothing to draw either.
        let empty = protocol::Series {
            name: "a".into(),
            unit: "ms".into(),
            x: vec!["1".into(), "2".into()],
            y: vec![None, Some(f64::NAN)],
        };
        assert!(pitfall_chart(&pitfall(vec![empty])).is_none());
    }

    #[test]
    fn every_series_has_a_value_axis_to_stand_on() {
        let s = |name: &str, unit: &str| protocol::Series {
            name: name.into(),
            unit: unit.into(),
            x: vec!["1".into(), "2".into()],
            y: vec![Some(1.0), None],
        };
        let series = vec![s("a", "ms"), s("b", "MiB"), s("c", "x")];
        let json = serde_json::to_value(pitfall_chart(&pitfall(series)).unwrap()).unwrap();
        let axes = json["yAxis"].as_array().map(|a| a.len()).unwrap_or(1);
        assert_eq!(
            axes, 2,
            "two units get an axis each, the third shares the first"
        );
        for s in json["series"].as_array().unwrap() {
            let index = s["yAxisIndex"].as_f64().unwrap_or(0.0) as usize;
            assert!(
                index < axes,
                "series {} points at a missing axis",
                s["name"]
            );
        }
        assert_eq!(
            json["series"][0]["data"][1], "-",
            "a missing point is a gap"
        );
    }

    fn titles(json: &serde_json::Value) -> Vec<String> {
        match &json["title"] {
            serde_json::Value::Array(a) => a.iter().map(|t| t.to_string()).collect(),
            t => vec![t.to_string()],
        }
    }

    fn y_axis(json: &serde_json::Value) -> &serde_json::Value {
        if json["yAxis"].is_array() {
            &json["yAxis"][0]
        } else {
            &json["yAxis"]
        }
    }

    #[test]
    fn memory_is_plotted_above_the_baseline_by_default_and_absolute_on_request() {
        // A 40 MiB baseline and passes peaking 2 MiB above it: the lesson is the 2 MiB.
        let base = 40u64 << 20;
        let timed: Vec<Sample> = (0..4)
            .map(|i| Sample {
                iteration: i,
                latency_ms: 1.0,
                allocated_bytes: base,
                peak_bytes: base + (2 << 20),
                reserved_bytes: None,
            })
            .collect();
        let above = serde_json::to_value(memory_chart(&[], &timed, Some(base))).unwrap();
        assert_eq!(above["series"][0]["data"][0], 2.0);
        assert_eq!(above["series"][1]["data"][0], 0.0, "back at the baseline");
        assert!(
            titles(&above)[0].contains("baseline of 40.0 MiB"),
            "the subtitle states the baseline: {:?}",
            titles(&above)
        );
        assert_ne!(y_axis(&above)["scale"], true, "from zero: nothing hidden");
        let absolute = serde_json::to_value(memory_chart_with(
            &[],
            &timed,
            Some(base),
            MemoryScale::Absolute,
            None,
            None,
        ))
        .unwrap();
        assert_eq!(absolute["series"][0]["data"][0], 42.0);
        assert!(absolute.to_string().contains("baseline {c}"));
        // From zero, 40 → 42 MiB would be a flat line: the axis starts near the data.
        assert_eq!(y_axis(&absolute)["scale"], true);
        assert!(titles(&absolute)[0].contains("not from 0"));
        // Above the baseline the axis starts at zero even where the values sit high: zero
        // is the baseline, and zooming would make noise look like an effect.
        let high: Vec<Sample> = timed
            .iter()
            .map(|s| Sample {
                allocated_bytes: base + (70 << 20),
                peak_bytes: base + (71 << 20),
                ..s.clone()
            })
            .collect();
        let above_high = serde_json::to_value(memory_chart(&[], &high, Some(base))).unwrap();
        assert_ne!(y_axis(&above_high)["scale"], true);
    }

    #[test]
    fn the_previous_run_is_drawn_faintly_behind_and_the_reading_is_on_the_chart() {
        let warm = [sample(0, 9.0, 1 << 20)];
        let now = [sample(0, 1.0, 1 << 20), sample(1, 1.0, 1 << 20)];
        let prev_warm = [sample(0, 9.0, 4 << 20), sample(1, 9.0, 4 << 20)];
        let prev = [sample(0, 4.0, 4 << 20), sample(1, 4.0, 4 << 20)];
        let previous = Previous {
            warmup: &prev_warm,
            samples: &prev,
            baseline: Some(1 << 20),
        };
        let reading = "peak 4.0× lower than the previous run";
        let json = serde_json::to_value(memory_chart_with(
            &warm,
            &now,
            Some(1 << 20),
            MemoryScale::AboveBaseline,
            Some(previous),
            Some(reading),
        ))
        .unwrap();
        let series = json["series"].as_array().unwrap();
        let current = &series[0];
        let behind = series.last().unwrap();
        assert!(behind["name"].as_str().unwrap().contains("previous"));
        assert!(behind["z"].as_f64() < current["z"].as_f64(), "drawn behind");
        assert!(behind["lineStyle"]["opacity"].as_f64().unwrap() < 1.0);
        // Timed iteration 1 shares a column although the warm-ups differ (1 against 2).
        assert_eq!(current["data"][1], "-");
        assert_eq!(current["data"][2], 1.0);
        assert_eq!(behind["data"][2], 7.0);
        assert!(titles(&json).iter().any(|t| t.contains(reading)));
        assert!(ChartOption(json.clone())
            .description()
            .unwrap()
            .contains(reading));
    }

    #[test]
    fn every_chart_describes_itself_in_words() {
        let timed: Vec<Sample> = (0..20).map(|i| sample(i, 5.0, 1 << 20)).collect();
        let latency = latency_chart(&[], &timed, Some(5.3), Some(8.8));
        assert_eq!(latency.0["aria"]["enabled"], true);
        assert_eq!(
            latency.description(),
            Some("Latency per iteration: p50 5.3 ms, p95 8.8 ms over 20 iterations.")
        );
        let memory = memory_chart(&[], &timed, Some(1 << 20));
        assert!(memory
            .description()
            .unwrap()
            .contains("peak 1.0 MiB above the baseline of 1.0 MiB"));
        let empty = memory_chart(&[], &[], None);
        assert!(empty.description().unwrap().contains("nothing measured"));
        let s = |name: &str| protocol::Series {
            name: name.into(),
            unit: "ms".into(),
            x: vec!["1".into(), "2".into()],
            y: vec![Some(1.5), None],
        };
        let card = pitfall_chart(&pitfall(vec![s("a"), s("b")])).unwrap();
        let said = card.description().unwrap();
        assert!(said.contains("a: 1 1.50 ms, 2 not measured"), "{said}");
        // Bars carry patterns, not colour alone.
        assert_eq!(card.0["aria"]["decal"]["show"], true);
    }
}
