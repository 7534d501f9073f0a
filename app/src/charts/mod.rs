//! The lab's charts as ECharts options (built with charming's components), from measured
//! samples only.
//! The builders are pure so they are tested natively; drawing happens in the browser
//! (`render`, hydrate builds only).
//!
//! Every chart is accessible: ECharts' `aria` is on with a sentence generated from the
//! figures ("p50 5.3 ms, p95 8.8 ms over 20 iterations"), bars carry decal patterns and
//! lines differ in dash and symbol, so no series is told apart by colour alone.

use charming::component::{Axis, Grid, Legend, Title};
use charming::datatype::DataPoint;
use charming::element::{
    AxisType, ItemStyle, Label, LabelPosition, LineStyle, LineStyleType, MarkArea, MarkAreaData,
    MarkLine, MarkLineData, MarkLineVariant, Symbol, TextStyle, Tooltip, Trigger,
};
use charming::series::{Bar, Line};
use option::Chart;
use protocol::{format_bytes, ChartKind, PitfallReport, Report, Sample};
use serde::Serialize;

mod compare;
mod generate;
mod option;
#[cfg(feature = "hydrate")]
mod draw;
mod fit;
mod runs;
#[cfg(test)]
mod tests;
mod trace;

pub use compare::*;
pub use generate::*;
#[cfg(feature = "hydrate")]
pub use draw::{bring_into_view, defer_until_wanted, download_png, render, show_pictures, want_echarts};
pub use runs::*;
pub use trace::*;

const MIB: f64 = 1024.0 * 1024.0;

/// The colour of the previous run drawn behind the current one: a grey that reads on the
/// light and the dark background alike, kept faint by its opacity.
const PREVIOUS_COLOUR: &str = "#8a8f98";

/// A chart ready to draw: ECharts' option as JSON, with its accessible description.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ChartOption(pub serde_json::Value);

impl ChartOption {
    /// The widths a chart drawn without the app (an embedded recorded run,
    /// `app/js/record-embed.js`) is laid out for: the page picks the widest that is no wider
    /// than its element, so a legend or subtitle never has less room than it was fitted to.
    pub const FIT_WIDTHS: [u32; 9] = [280, 340, 400, 480, 560, 640, 760, 900, 1100];

    /// This chart fitted to each of [`Self::FIT_WIDTHS`] (`fit::fit_to_width`, as the app
    /// fits it at drawing time), narrowest first, a width left out where it lays out as the
    /// narrower one before it.
    pub fn fitted_by_width(&self) -> Vec<(u32, serde_json::Value)> {
        let mut out: Vec<(u32, serde_json::Value)> = Vec::new();
        for width in Self::FIT_WIDTHS {
            let fitted = fit::fit_to_width(&self.0, f64::from(width));
            if out.last().is_none_or(|(_, last)| *last != fitted) {
                out.push((width, fitted));
            }
        }
        out
    }

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
        // A plain legend: where its names need more than one line, fit.rs makes the room.
        .legend(Legend::new().bottom(0))
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
