//! A generation's charts, as ECharts options built from the measured steps: latency per
//! step against the position (flat with a cache, rising without), memory against the
//! position (the KV cache's straight line; with grad, the graph above it) and the prefill
//! against the decode. Several runs overlay (Compare cache modes, Compare grad modes).

use protocol::{GenPhase, GenStep};
use serde_json::{json, Value};

use super::{ChartOption, MIB};

/// One run's steps with the name its series carry.
#[derive(Clone, Copy, Debug)]
pub struct GenRun<'a> {
    pub name: &'a str,
    pub steps: &'a [GenStep],
    /// Weights + prompt (the memory chart's floor), when known.
    pub baseline: Option<u64>,
}

/// Dash patterns and symbols, so runs differ by more than their colour.
const DASHES: [&str; 4] = ["solid", "dashed", "dotted", "solid"];
const SYMBOLS: [&str; 4] = ["circle", "triangle", "rect", "diamond"];

fn base(title: &str, x: &str, y: &str, description: String, series: Vec<Value>, legend: bool) -> ChartOption {
    ChartOption(json!({
        "title": { "text": title, "left": "center", "textStyle": { "fontSize": 14 } },
        "animation": false,
        // The panel's own colour shows through, as under the Lab's charts (ECharts' dark
        // theme would paint its navy otherwise).
        "backgroundColor": "transparent",
        "tooltip": { "trigger": "axis" },
        "legend": { "show": legend, "top": 24 },
        "grid": { "left": 64, "right": 24, "top": if legend { 64 } else { 40 }, "bottom": 48 },
        "xAxis": { "type": "value", "name": x, "nameLocation": "middle", "nameGap": 28, "scale": true },
        "yAxis": { "type": "value", "name": y },
        "series": series,
        "aria": {
            "enabled": true,
            "label": { "enabled": true, "description": description },
            "decal": { "show": true },
        },
    }))
}

fn line(name: String, points: Vec<[f64; 2]>, i: usize, extra: Value) -> Value {
    let mut s = json!({
        "type": "line",
        "name": name,
        "data": points,
        "showSymbol": points.len() <= 64,
        "symbol": SYMBOLS[i % SYMBOLS.len()],
        "lineStyle": { "type": DASHES[i % DASHES.len()], "width": 2 },
    });
    if let (Some(obj), Some(more)) = (s.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            obj.insert(k.clone(), v.clone());
        }
    }
    s
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Decode steps' latency against their position.
pub fn step_latency_chart(runs: &[GenRun<'_>]) -> ChartOption {
    let series: Vec<Value> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let points = r
                .steps
                .iter()
                .filter(|s| s.phase == GenPhase::Decode)
                .map(|s| [s.position as f64, round3(s.latency_ms)])
                .collect();
            line(r.name.to_string(), points, i, json!({}))
        })
        .collect();
    let description = runs
        .iter()
        .map(|r| {
            let decode: Vec<f64> = r.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.latency_ms).collect();
            match (decode.first(), decode.last()) {
                (Some(a), Some(b)) => format!("{}: decode steps from {a:.2} ms to {b:.2} ms over {} steps", r.name, decode.len()),
                _ => format!("{}: no decode steps", r.name),
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    base("Latency per decode step", "position", "ms", description, series, runs.len() > 1)
}

/// What each step leaves allocated beyond the weights and the prompt, against the position:
/// the KV cache (dashed, measured from its tensors) and everything held (solid: the cache,
/// the tokens, and with grad the graph above them). Drawn above the baseline, since a
/// cache of kilobytes would vanish beside megabytes of weights; the unit follows the size.
pub fn step_memory_chart(runs: &[GenRun<'_>]) -> ChartOption {
    let above = |r: &GenRun<'_>, b: u64| b.saturating_sub(r.baseline.unwrap_or(0));
    let largest = runs
        .iter()
        .flat_map(|r| r.steps.iter().map(move |s| above(r, s.allocated_bytes).max(s.kv_cache_bytes)))
        .max()
        .unwrap_or(0);
    let (unit, scale) = if largest >= 4 << 20 { ("MiB", MIB) } else { ("KiB", 1024.0) };
    let mut series = vec![];
    for (i, r) in runs.iter().enumerate() {
        let prefix = if runs.len() > 1 { format!("{}: ", r.name) } else { String::new() };
        let held = r
            .steps
            .iter()
            .map(|s| [s.position as f64, round3(above(r, s.allocated_bytes) as f64 / scale)])
            .collect();
        series.push(line(format!("{prefix}held"), held, i, json!({})));
        let kv = r
            .steps
            .iter()
            .map(|s| [s.position as f64, round3(s.kv_cache_bytes as f64 / scale)])
            .collect();
        series.push(line(
            format!("{prefix}KV cache"),
            kv,
            i,
            json!({ "lineStyle": { "type": "dashed", "width": 1 }, "symbol": "none" }),
        ));
    }
    let description = runs
        .iter()
        .filter_map(|r| {
            let last = r.steps.last()?;
            Some(format!(
                "{}: {:.1} {unit} held beyond the weights and prompt after the last step, KV cache {:.1} {unit}, graph {:.1} {unit}",
                r.name,
                above(r, last.allocated_bytes) as f64 / scale,
                last.kv_cache_bytes as f64 / scale,
                last.graph_bytes as f64 / scale
            ))
        })
        .collect::<Vec<_>>()
        .join("; ");
    base("Memory beyond weights + prompt, after each step", "position", unit, description, series, true)
}

/// Time to first token (the prefill) beside the decode's total and per-token time, per run.
pub fn prefill_decode_chart(runs: &[GenRun<'_>]) -> ChartOption {
    let names: Vec<&str> = runs.iter().map(|r| r.name).collect();
    let prefill: Vec<f64> = runs
        .iter()
        .map(|r| r.steps.iter().find(|s| s.phase == GenPhase::Prefill).map_or(0.0, |s| round3(s.latency_ms)))
        .collect();
    let decode: Vec<f64> = runs
        .iter()
        .map(|r| round3(r.steps.iter().filter(|s| s.phase == GenPhase::Decode).map(|s| s.latency_ms).sum()))
        .collect();
    let description = runs
        .iter()
        .zip(prefill.iter().zip(&decode))
        .map(|(r, (p, d))| format!("{}: prefill {p:.2} ms, all decode steps {d:.2} ms", r.name))
        .collect::<Vec<_>>()
        .join("; ");
    ChartOption(json!({
        "title": { "text": "Prefill and decode", "left": "center", "textStyle": { "fontSize": 14 } },
        "animation": false,
        "backgroundColor": "transparent",
        "tooltip": { "trigger": "axis" },
        "legend": { "top": 24 },
        "grid": { "left": 64, "right": 24, "top": 64, "bottom": 48, "containLabel": true },
        "xAxis": { "type": "category", "data": names },
        "yAxis": { "type": "value", "name": "ms" },
        "series": [
            { "type": "bar", "name": "prefill (time to first token)", "data": prefill },
            { "type": "bar", "name": "all decode steps", "data": decode },
        ],
        "aria": { "enabled": true, "label": { "enabled": true, "description": description }, "decal": { "show": true } },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: u32, position: u32, ms: f64, kv: u64) -> GenStep {
        GenStep {
            step,
            phase: if step == 0 { GenPhase::Prefill } else { GenPhase::Decode },
            position,
            tokens_in: 1,
            latency_ms: ms,
            allocated_bytes: 1 << 20,
            peak_bytes: 2 << 20,
            kv_cache_bytes: kv,
            graph_bytes: 0,
            token: None,
            text: None,
        }
    }

    #[test]
    fn the_page_background_shows_under_every_generation_chart() {
        // ECharts' dark theme paints its own navy unless a chart says otherwise.
        let steps = vec![step(0, 7, 9.0, 100), step(1, 8, 1.5, 120)];
        let run = GenRun { name: "dynamic", steps: &steps, baseline: None };
        for chart in [step_latency_chart(&[run]), step_memory_chart(&[run]), prefill_decode_chart(&[run])] {
            assert_eq!(chart.0["backgroundColor"], "transparent", "{}", chart.0["title"]);
        }
    }

    #[test]
    fn charts_plot_the_measured_steps_only() {
        let steps = vec![step(0, 7, 9.0, 100), step(1, 8, 1.5, 120), step(2, 9, 1.25, 140)];
        let run = GenRun { name: "dynamic", steps: &steps, baseline: Some(1 << 19) };
        let latency = step_latency_chart(&[run]);
        // The prefill is not a decode step: two points, at positions 8 and 9.
        assert_eq!(latency.0["series"][0]["data"], json!([[8.0, 1.5], [9.0, 1.25]]));
        assert!(latency.description().unwrap().contains("1.50 ms to 1.25 ms"));
        let memory = step_memory_chart(&[run]);
        assert_eq!(memory.0["series"].as_array().unwrap().len(), 2);
        // 1 MiB allocated over a 0.5 MiB baseline: 512 KiB held; the cache in KiB too.
        assert_eq!(memory.0["series"][0]["data"][0], json!([7.0, 512.0]));
        assert_eq!(memory.0["series"][1]["data"][2], json!([9.0, 0.137]));
        let bars = prefill_decode_chart(&[run]);
        assert_eq!(bars.0["series"][0]["data"], json!([9.0]));
        assert_eq!(bars.0["series"][1]["data"], json!([2.75]));
    }
}
