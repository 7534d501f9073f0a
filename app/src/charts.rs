//! The lab's charts as charming (ECharts) options, built from measured samples only. The
//! builders are pure so they are tested natively; drawing happens in the browser
//! (`render`, hydrate builds only).

use charming::component::{Axis, Grid, Legend, Title};
use charming::datatype::DataPoint;
use charming::element::{
    AxisType, ItemStyle, Label, LabelPosition, MarkArea, MarkAreaData, MarkLine, MarkLineData,
    MarkLineVariant, Tooltip, Trigger,
};
use charming::series::{Bar, Line};
use charming::Chart;
use protocol::{ChartKind, PitfallReport, Report, Sample};

const MIB: f64 = 1024.0 * 1024.0;

/// Category labels: `w1..wN` for warm-up iterations, `1..M` for timed ones.
fn labels(warmup: &[Sample], samples: &[Sample]) -> Vec<String> {
    (1..=warmup.len())
        .map(|i| format!("w{i}"))
        .chain((1..=samples.len()).map(|i| i.to_string()))
        .collect()
}

fn base(title: &str, x_name: &str, y_name: &str, categories: Vec<String>) -> Chart {
    Chart::new()
        .title(
            Title::new()
                .text(title)
                .left("center")
                .text_style(charming::element::TextStyle::new().font_size(14)),
        )
        .tooltip(Tooltip::new().trigger(Trigger::Axis))
        .legend(Legend::new().bottom(0))
        .grid(Grid::new().left(64).right(100).top(48).bottom(56))
        .background_color("transparent")
        .x_axis(
            Axis::new()
                .type_(AxisType::Category)
                .name(x_name)
                .name_location(charming::element::NameLocation::Middle)
                .name_gap(26)
                .data(categories),
        )
        .y_axis(Axis::new().type_(AxisType::Value).name(y_name))
}

/// Per-iteration latency, the warm-up shaded and left out of the p50/p95 lines.
pub fn latency_chart(
    warmup: &[Sample],
    samples: &[Sample],
    p50: Option<f64>,
    p95: Option<f64>,
) -> Chart {
    let cats = labels(warmup, samples);
    let values: Vec<f64> = warmup
        .iter()
        .chain(samples)
        .map(|s| round3(s.latency_ms))
        .collect();
    let mut line = Line::new()
        .name("latency (ms)")
        .show_symbol(true)
        .data(values);
    if !warmup.is_empty() {
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
                    MarkAreaData::new().x_axis(format!("w{}", warmup.len())),
                )]),
        );
    }
    let mut marks: Vec<MarkLineVariant> = vec![];
    if let Some(p) = p50 {
        marks.push(MarkLineVariant::Simple(
            MarkLineData::new()
                .name("p50")
                .y_axis(round3(p))
                .label(Label::new().formatter("p50 {c}")),
        ));
    }
    if let Some(p) = p95 {
        marks.push(MarkLineVariant::Simple(
            MarkLineData::new()
                .name("p95")
                .y_axis(round3(p))
                .label(Label::new().formatter("p95 {c}")),
        ));
    }
    if !marks.is_empty() {
        line = line.mark_line(MarkLine::new().data(marks));
    }
    base("Latency per iteration", "iteration", "ms", cats)
        .animation(false)
        .series(line)
}

/// Peak memory during each forward pass and allocated memory after it (and, on CUDA,
/// reserved), with the baseline marked.
pub fn memory_chart(warmup: &[Sample], samples: &[Sample], baseline: Option<u64>) -> Chart {
    let cats = labels(warmup, samples);
    let all: Vec<&Sample> = warmup.iter().chain(samples).collect();
    let peak: Vec<f64> = all
        .iter()
        .map(|s| round3(s.peak_bytes as f64 / MIB))
        .collect();
    let allocated: Vec<f64> = all
        .iter()
        .map(|s| round3(s.allocated_bytes as f64 / MIB))
        .collect();
    let mut line = Line::new().name("peak during the pass (MiB)").data(peak);
    if let Some(b) = baseline {
        line = line.mark_line(MarkLine::new().data(vec![MarkLineVariant::Simple(
                MarkLineData::new()
                    .name("baseline: weights + input")
                    .y_axis(round3(b as f64 / MIB))
                    .label(Label::new().formatter("baseline {c}")),
            )]));
    }
    let mut chart = base("Memory per forward pass", "iteration", "MiB", cats)
        .animation(false)
        .series(line)
        .series(Line::new().name("allocated after it (MiB)").data(allocated));
    if all.iter().any(|s| s.reserved_bytes.is_some()) {
        let reserved: Vec<f64> = all
            .iter()
            .map(|s| round3(s.reserved_bytes.unwrap_or(0) as f64 / MIB))
            .collect();
        chart = chart.series(
            Line::new()
                .name("reserved by the caching allocator (MiB)")
                .data(reserved),
        );
    }
    chart
}

/// Runs side by side: peak memory above baseline and p50/p95.
pub fn comparison_chart(title: &str, runs: &[Report]) -> Chart {
    // Short labels, tilted so they never overlap; the batch only when runs differ in it.
    let same_batch = runs.windows(2).all(|w| w[0].spec.batch == w[1].spec.batch);
    let cats: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let label = r.spec.label();
            let label = if same_batch {
                label
                    .rsplit_once(" · batch")
                    .map(|(a, _)| a.to_string())
                    .unwrap_or(label)
            } else {
                label
            };
            format!("#{} {}", i + 1, label)
        })
        .collect();
    let peak: Vec<f64> = runs
        .iter()
        .map(|r| round3(r.memory.peak_above_baseline_bytes as f64 / MIB))
        .collect();
    let p50: Vec<f64> = runs.iter().map(|r| round3(r.latency_ms.p50)).collect();
    let p95: Vec<f64> = runs.iter().map(|r| round3(r.latency_ms.p95)).collect();
    Chart::new()
        .title(
            Title::new()
                .text(title)
                .left("center")
                .text_style(charming::element::TextStyle::new().font_size(14)),
        )
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
        )
}

/// A pitfall experiment's series: one category axis, a value axis per unit (at most two).
pub fn pitfall_chart(report: &PitfallReport) -> Chart {
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
    for u in &units {
        chart = chart.y_axis(Axis::new().type_(AxisType::Value).name(*u));
    }
    for s in &report.series {
        // Missing points ("-") leave a gap, e.g. where a batch sweep stopped at the budget.
        let data: Vec<DataPoint> =
            s.y.iter()
                .map(|v| {
                    v.map(|v| DataPoint::from(round3(v)))
                        .unwrap_or_else(|| DataPoint::from("-"))
                })
                .collect();
        let axis = units.iter().position(|u| *u == s.unit).unwrap_or(0) as f64;
        chart = match report.chart {
            ChartKind::Line => chart.series(
                Line::new()
                    .name(s.name.clone())
                    .y_axis_index(axis)
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
    chart
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Draws `chart` into the element `id` at the next animation frame. Samples can arrive
/// faster than ECharts redraws (a tiny model streams 50 in a few milliseconds); drawing
/// each one would block the page, so bursts collapse into one redraw per frame, always
/// with the newest data.
#[cfg(feature = "hydrate")]
pub fn render(id: impl Into<String>, chart: Chart) {
    let id = id.into();
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let schedule = DRAWING.with(|d| {
        let mut d = d.borrow_mut();
        d.pending.insert(id, chart);
        !std::mem::replace(&mut d.scheduled, true)
    });
    if schedule {
        let flush = Closure::once_into_js(flush);
        if let Some(w) = web_sys::window() {
            let _ = w.request_animation_frame(flush.unchecked_ref());
        }
    }
}

#[cfg(feature = "hydrate")]
#[derive(Default)]
struct Drawing {
    pending: std::collections::HashMap<String, Chart>,
    scheduled: bool,
    instances: std::collections::HashMap<String, charming::Echarts>,
}

#[cfg(feature = "hydrate")]
thread_local! {
    static DRAWING: std::cell::RefCell<Drawing> = std::cell::RefCell::new(Drawing::default());
}

#[cfg(feature = "hydrate")]
fn flush() {
    use charming::WasmRenderer;
    DRAWING.with(|d| {
        let mut d = d.borrow_mut();
        d.scheduled = false;
        let pending: Vec<_> = d.pending.drain().collect();
        for (id, chart) in pending {
            // A page change may have replaced the element: then the old instance is stale.
            let element = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|doc| doc.get_element_by_id(&id));
            let Some(element) = element else { continue };
            if element.has_attribute("_echarts_instance_") {
                if let Some(existing) = d.instances.get(&id) {
                    WasmRenderer::update(existing, &chart);
                    continue;
                }
            }
            d.instances.remove(&id);
            let dark = web_sys::window()
                .and_then(|w| w.match_media("(prefers-color-scheme: dark)").ok().flatten())
                .is_some_and(|m| m.matches());
            let renderer = WasmRenderer::new_opt(None, None);
            let renderer = if dark {
                renderer.theme(charming::theme::Theme::Dark)
            } else {
                renderer
            };
            match renderer.render(&id, &chart) {
                Ok(instance) => {
                    d.instances.insert(id, instance);
                }
                Err(e) => leptos::logging::warn!("could not draw chart {id}: {e:?}"),
            }
        }
    });
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
            cpu["series"][0]["data"][0], 6.0,
            "peak during the pass, in MiB"
        );
        let mut gpu_sample = sample(0, 1.0, 3 << 20);
        gpu_sample.reserved_bytes = Some(8 << 20);
        let gpu = serde_json::to_value(memory_chart(&[], &[gpu_sample], None)).unwrap();
        assert_eq!(gpu["series"].as_array().unwrap().len(), 3);
        assert_eq!(gpu["series"][2]["data"][0], 8.0);
    }
}
