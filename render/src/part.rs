//! One chart of a recorded run alone (`/runs/{id}.svg?chart=NAME&width=W&height=H`), at the
//! size of the element it stands in for: what the Lab and the Generate page show in their
//! charts' places on a first view of a recorded run, so a visit that only looks needs no
//! chart library (the app fetches ECharts when the visitor acts, and the interactive chart
//! replaces the picture). The same series as the page's chart, from the same record; on a
//! transparent background, so the page's panel shows through as under ECharts.

use protocol::{format_bytes, GenPhase, Report};

use crate::chart::{Axis, Chart, Kind, Rect, Series};
use crate::picture::{latency_chart, memory_chart};
use crate::svg::{Palette, Svg};
use crate::{ImageOptions, Part};

/// Drawing units per CSS px: the charts' fonts (17 px ticks) were sized for a 1200-unit
/// drawing; at 1.4 units per px they read at about the page's 12 px.
const UNITS_PER_PX: f64 = 1.4;

const KIB: f64 = 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

/// Chart `part` of run `r` alone, `o.width`×`o.height()` px; `Err` says why the run has no
/// such chart (a forward run has no decode steps; a generation no iterations).
pub fn run_chart_svg(r: &Report, part: Part, o: &ImageOptions) -> Result<String, String> {
    let pal = Palette::of(o.theme);
    let chart = match part {
        Part::Latency | Part::Memory if r.generation.is_some() || r.samples.is_empty() => {
            return Err(format!(
                "chart `{}` draws a forward run's iterations, and this record {}",
                part.as_str(),
                if r.generation.is_some() { "is a generation (its charts: step-latency, step-memory, prefill-decode)" } else { "has none" }
            ))
        }
        Part::Latency => latency_chart(r, &pal),
        Part::Memory => memory_chart(r, &pal),
        Part::StepLatency | Part::StepMemory | Part::PrefillDecode => {
            generation_chart(r, part, &pal).ok_or_else(|| {
                format!(
                    "chart `{}` draws a generation's steps, and this record is not a generation",
                    part.as_str()
                )
            })?
        }
    };
    let (w, h) = (
        f64::from(o.width) * UNITS_PER_PX,
        f64::from(o.height()) * UNITS_PER_PX,
    );
    let desc = format!("{}: {}", chart.title, crate::picture::run_title(r));
    let mut svg = Svg::new(o.width, o.height(), (w, h), &chart.title, &desc, "none");
    chart.draw(
        &mut svg,
        Rect {
            x: 12.0,
            y: 8.0,
            w: w - 24.0,
            h: h - 16.0,
        },
        &pal,
    );
    Ok(svg.finish())
}

/// A generation's charts, as the Generate page draws them (app/src/charts/generate.rs):
/// positions as categories, one run.
fn generation_chart(r: &Report, part: Part, pal: &Palette) -> Option<Chart> {
    let g = r.generation.as_ref()?;
    let decode: Vec<_> = g
        .steps
        .iter()
        .filter(|s| s.phase == GenPhase::Decode)
        .collect();
    let line = |name: &str, values: Vec<Option<f64>>, color, dash, markers| Series {
        name: name.into(),
        values,
        axis: 0,
        color,
        dash,
        markers,
    };
    Some(match part {
        Part::StepLatency => Chart {
            title: "Latency per decode step".into(),
            kind: Kind::Line,
            categories: decode.iter().map(|s| s.position.to_string()).collect(),
            axes: vec![Axis {
                unit: "ms".into(),
                may_zoom: true,
            }],
            series: vec![line(
                "latency (ms)",
                decode.iter().map(|s| Some(s.latency_ms)).collect(),
                pal.series[0],
                None,
                decode.len() <= 64,
            )],
            marks: vec![],
            shade: None,
            legend: false,
        },
        Part::StepMemory => {
            let base = r.memory.baseline_bytes;
            let above = |b: u64| b.saturating_sub(base);
            let largest = g
                .steps
                .iter()
                .map(|s| above(s.allocated_bytes).max(s.kv_cache_bytes))
                .max()
                .unwrap_or(0);
            // The unit follows the size, as on the page: a cache of kilobytes in KiB.
            let (unit, scale) = if largest >= 4 << 20 {
                ("MiB", MIB)
            } else {
                ("KiB", KIB)
            };
            Chart {
                title: "Memory beyond weights + prompt, after each step".into(),
                kind: Kind::Line,
                categories: g.steps.iter().map(|s| s.position.to_string()).collect(),
                axes: vec![Axis {
                    unit: format!("{unit} · {}", r.memory.source.short()),
                    may_zoom: false,
                }],
                series: vec![
                    line(
                        "held",
                        g.steps
                            .iter()
                            .map(|s| Some(above(s.allocated_bytes) as f64 / scale))
                            .collect(),
                        pal.series[0],
                        None,
                        g.steps.len() <= 64,
                    ),
                    line(
                        "KV cache",
                        g.steps
                            .iter()
                            .map(|s| Some(s.kv_cache_bytes as f64 / scale))
                            .collect(),
                        pal.series[1],
                        Some("9 6"),
                        false,
                    ),
                ],
                marks: vec![],
                shade: None,
                legend: true,
            }
        }
        _ => Chart {
            title: "Prefill and decode".into(),
            kind: Kind::Bar,
            categories: vec![format!(
                "{} · {}",
                g.cache.as_str(),
                format_bytes(g.kv_cache_bytes)
            )],
            axes: vec![Axis {
                unit: "ms".into(),
                may_zoom: false,
            }],
            series: vec![
                line(
                    "prefill (time to first token)",
                    vec![Some(g.prefill_ms)],
                    pal.series[0],
                    None,
                    false,
                ),
                line(
                    "all decode steps",
                    vec![Some(decode.iter().map(|s| s.latency_ms).sum())],
                    pal.series[1],
                    None,
                    false,
                ),
            ],
            marks: vec![],
            shade: None,
            legend: true,
        },
    })
}
