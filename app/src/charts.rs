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
/// `None` when there is nothing to draw (a "not applicable" result measures nothing, or
/// every point is missing): the card then says so in words instead of drawing an empty,
/// axis-less chart, which ECharts cannot lay out.
pub fn pitfall_chart(report: &PitfallReport) -> Option<Chart> {
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
    for s in &report.series {
        // Missing points ("-") leave a gap, e.g. where a batch sweep stopped at the budget;
        // so do non-finite ones, which JSON cannot carry anyway.
        let data: Vec<DataPoint> =
            s.y.iter()
                .map(|v| match v {
                    Some(v) if v.is_finite() => DataPoint::from(round3(*v)),
                    _ => DataPoint::from("-"),
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
    Some(chart)
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
pub fn render(id: impl Into<String>, chart: Chart) {
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
    static PENDING: std::cell::RefCell<std::collections::HashMap<String, Chart>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// Whether a frame callback is already asked for.
    static SCHEDULED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(feature = "hydrate")]
fn flush() {
    SCHEDULED.with(|s| s.set(false));
    // Take the work out first: nothing stays borrowed while JavaScript runs.
    let pending: Vec<(String, Chart)> = PENDING.with(|p| p.borrow_mut().drain().collect());
    for (id, chart) in pending {
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
fn draw(id: &str, chart: &Chart) -> Result<(), String> {
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
    let element: JsValue = element.into();
    let existing = js_call(&echarts, "getInstanceByDom", &[&element])?;
    let instance = if existing.is_undefined() || existing.is_null() {
        if let Some(el) = wasm_bindgen::JsCast::dyn_ref::<web_sys::Element>(&element) {
            // The sentence a previous failure left there.
            el.set_inner_html("");
            let _ = el.class_list().remove_1("chart-error");
        }
        let dark = window
            .match_media("(prefers-color-scheme: dark)")
            .ok()
            .flatten()
            .is_some_and(|m| m.matches());
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
            cpu["series"][0]["data"][0], 6.0,
            "peak during the pass, in MiB"
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
}
