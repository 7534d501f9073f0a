//! A run's picture: its headline figures, latency and memory per iteration.

use protocol::{format_bytes, Report};

use super::{canvas, figure, footer, kicker, provenance, title, MARGIN, MIB, W};
use crate::chart::{Axis, Chart, Kind, Mark, Rect, Series};
use crate::svg::{Font, Palette};
use crate::{format_ms, text, ImageOptions};

/// The run's title: model and settings, as its page heads it.
pub fn run_title(r: &Report) -> String {
    format!("{} · {}", r.spec.model.display_name(), r.spec.label())
}

/// The sentence a screen reader reads for a run's picture.
pub fn run_description(r: &Report) -> String {
    format!(
        "{}: p50 latency {}, peak {} above the baseline of {}, {:.1} samples/s over {} timed iterations. {}.",
        run_title(r),
        format_ms(r.latency_ms.p50),
        format_bytes(r.memory.peak_above_baseline_bytes),
        format_bytes(r.memory.baseline_bytes),
        r.throughput_per_s,
        r.samples.len(),
        provenance(&r.env)
    )
}

/// A recorded run: headline figures, then latency and memory per iteration (warm-up
/// shaded), then where and when it was measured.
pub fn run_svg(r: &Report, o: &ImageOptions) -> String {
    let pal = Palette::of(o.theme);
    let mut svg = canvas(o, &pal, &run_title(r), &run_description(r));
    kicker(&mut svg, &pal, "GRADLESS · RECORDED RUN");
    title(&mut svg, &pal, &run_title(r), 96.0);
    let col = (W - 2.0 * MARGIN) / 3.0;
    figure(
        &mut svg,
        &pal,
        MARGIN,
        col - 24.0,
        "p50 latency",
        &format_ms(r.latency_ms.p50),
    );
    figure(
        &mut svg,
        &pal,
        MARGIN + col,
        col - 24.0,
        "peak above baseline",
        &format_bytes(r.memory.peak_above_baseline_bytes),
    );
    figure(
        &mut svg,
        &pal,
        MARGIN + 2.0 * col,
        col - 24.0,
        "throughput",
        &format!("{:.1} samples/s", r.throughput_per_s),
    );

    // A caveat travels with the figures (fp16 on a CPU); so does a leak.
    let mut notes = vec![];
    if let Some(c) = r.caveat() {
        notes.push(c);
    }
    if r.memory.leaked_bytes > 0 {
        notes.push(format!(
            "{} was not given back after the run.",
            format_bytes(r.memory.leaked_bytes)
        ));
    }
    let note_lines: Vec<String> = notes
        .iter()
        .flat_map(|n| text::wrap(n, 16.0, false, W - 2.0 * MARGIN, 2))
        .take(2)
        .collect();
    let bottom = 572.0 - 22.0 * note_lines.len() as f64;
    for (i, l) in note_lines.iter().enumerate() {
        svg.text(
            MARGIN,
            bottom + 20.0 + 22.0 * i as f64,
            Font::new(16.0, pal.note),
            l,
        );
    }

    let latency = latency_chart(r, &pal);
    let memory = memory_chart(r, &pal);
    let half = (W - 2.0 * MARGIN - 48.0) / 2.0;
    let top = 232.0;
    latency.draw(
        &mut svg,
        Rect {
            x: MARGIN,
            y: top,
            w: half,
            h: bottom - top,
        },
        &pal,
    );
    memory.draw(
        &mut svg,
        Rect {
            x: MARGIN + half + 48.0,
            y: top,
            w: half,
            h: bottom - top,
        },
        &pal,
    );
    footer(&mut svg, &pal, &provenance(&r.env));
    svg.finish()
}

/// A run's iterations as the page names them (`w1`.. for the warm-up, then 1..), and the
/// warm-up band.
fn iterations(r: &Report) -> (Vec<String>, Option<(usize, usize, String)>, Vec<&protocol::Sample>) {
    let warm = r.warmup.len();
    let categories: Vec<String> = (1..=warm)
        .map(|i| format!("w{i}"))
        .chain((1..=r.samples.len()).map(|i| i.to_string()))
        .collect();
    let shade = (warm > 0).then(|| (0, warm - 1, "warm-up".to_string()));
    let all: Vec<&protocol::Sample> = r.warmup.iter().chain(&r.samples).collect();
    (categories, shade, all)
}

/// Latency per iteration, warm-up shaded, p50 marked.
pub(crate) fn latency_chart(r: &Report, pal: &Palette) -> Chart {
    let (categories, shade, all) = iterations(r);
    Chart {
        title: "Latency per iteration".into(),
        kind: Kind::Line,
        categories,
        axes: vec![Axis {
            unit: "ms".into(),
            may_zoom: true,
        }],
        series: vec![Series {
            name: "latency (ms)".into(),
            values: all.iter().map(|s| Some(s.latency_ms)).collect(),
            axis: 0,
            color: pal.series[0],
            dash: None,
            markers: true,
        }],
        marks: vec![Mark {
            label: format!("p50 {}", format_ms(r.latency_ms.p50)),
            value: r.latency_ms.p50,
            color: pal.accent,
        }],
        shade,
        legend: false,
    }
}

/// Memory above the baseline per iteration: the pass's peak, what it left allocated and
/// (a caching allocator's) reserved.
pub(crate) fn memory_chart(r: &Report, pal: &Palette) -> Chart {
    let (categories, shade, all) = iterations(r);
    let base = r.memory.baseline_bytes as f64;
    let above = |b: u64| ((b as f64 - base).max(0.0)) / MIB;
    let mut memory_series = vec![
        Series {
            name: "peak during the pass".into(),
            values: all.iter().map(|s| Some(above(s.peak_bytes))).collect(),
            axis: 0,
            color: pal.series[1],
            dash: None,
            markers: true,
        },
        Series {
            name: "allocated after it".into(),
            values: all.iter().map(|s| Some(above(s.allocated_bytes))).collect(),
            axis: 0,
            color: pal.series[2],
            dash: Some("9 6"),
            markers: false,
        },
    ];
    if all.iter().any(|s| s.reserved_bytes.is_some()) {
        memory_series.push(Series {
            name: "reserved".into(),
            values: all.iter().map(|s| s.reserved_bytes.map(above)).collect(),
            axis: 0,
            color: pal.series[3],
            dash: Some("2 5"),
            markers: false,
        });
    }
    Chart {
        title: format!(
            "Memory above the {} baseline",
            format_bytes(r.memory.baseline_bytes)
        ),
        kind: Kind::Line,
        categories,
        axes: vec![Axis {
            unit: format!("MiB · {}", r.memory.source.short()),
            may_zoom: false,
        }],
        series: memory_series,
        marks: vec![],
        shade,
        legend: true,
    }
}
