//! The charts of one forward pass from the inside, from the traced pass the engine
//! measured: memory through the pass (several runs overlaid), what the device's memory
//! holds (one stacked bar), and the run under the device's roofs.
//!
//! Built as ECharts JSON directly: the hover of the memory chart lists each point's
//! module, output shape and bytes added through `encode.tooltip`, which needs dimensions
//! per data item (no JavaScript formatter survives the trip through JSON).

use protocol::{added_bytes, format_bytes, MemoryBreakdown, NamedTrace, Report, TracePoint};
use serde_json::{json, Value};

use super::{round3, ChartOption, MIB};

/// Line styles that tell overlaid runs apart without colour.
const DASHES: [&str; 3] = ["solid", "dashed", "dotted"];
const SYMBOLS: [&str; 5] = ["circle", "rect", "triangle", "diamond", "pin"];

fn with_aria(mut option: Value, description: String) -> ChartOption {
    option["aria"] = json!({
        "enabled": true,
        "label": { "enabled": true, "description": description },
        "decal": { "show": true },
    });
    ChartOption(option)
}

fn title(text: &str, sub: &str) -> Value {
    json!({
        "text": text, "subtext": sub, "left": "center",
        "textStyle": {"fontSize": 14}, "subtextStyle": {"fontSize": 12},
    })
}

/// Memory through one forward pass: x = modules in order, y = allocated above the
/// baseline right after each. One line per run (`label`, report); runs of another model
/// than the first are left out (their modules differ).
pub fn trace_chart(runs: &[(String, &Report)]) -> ChartOption {
    let Some((_, first)) = runs.iter().find(|(_, r)| !r.trace.is_empty()) else {
        return traces_chart(&[], "");
    };
    let model = first.spec.model;
    let lines: Vec<(String, &[TracePoint])> = runs
        .iter()
        .filter(|(_, r)| r.spec.model == model && !r.trace.is_empty())
        .map(|(l, r)| (l.clone(), r.trace.as_slice()))
        .collect();
    traces_chart(
        &lines,
        &format!(
            "{} · after each module, in execution order · {}",
            model.display_name(),
            first.memory.source.short()
        ),
    )
}

/// A pitfall card's rows' traced passes, overlaid.
pub fn named_traces_chart(traces: &[NamedTrace]) -> Option<ChartOption> {
    let lines: Vec<(String, &[TracePoint])> = traces
        .iter()
        .filter(|t| !t.trace.is_empty())
        .map(|t| (t.label.clone(), t.trace.as_slice()))
        .collect();
    (!lines.is_empty()).then(|| {
        traces_chart(
            &lines,
            "each row's traced pass: allocated above baseline after each module, in order",
        )
    })
}

/// Overlaid traces of the same model: the x axis is the longest one's modules.
fn traces_chart(lines: &[(String, &[TracePoint])], subtitle: &str) -> ChartOption {
    if lines.is_empty() {
        return with_aria(
            json!({"title": title("Memory through one forward pass", "no traced pass in this run")}),
            "Memory through one forward pass: this run has no traced pass.".into(),
        );
    }
    let longest = lines
        .iter()
        .map(|(_, t)| *t)
        .max_by_key(|t| t.len())
        .unwrap_or(&[]);
    let modules: Vec<&str> = longest.iter().map(|p| p.module.as_str()).collect();
    let mut series = vec![];
    let mut sentences = vec![];
    for (i, (label, trace)) in lines.iter().enumerate() {
        let data: Vec<Value> = trace
            .iter()
            .zip(added_bytes(trace))
            .enumerate()
            .map(|(x, (p, added))| {
                let shape: Vec<String> = p.output_shape.iter().map(|d| d.to_string()).collect();
                let sign = if added < 0 { "−" } else { "+" };
                json!([
                    x,
                    round3(p.allocated_above_baseline_bytes as f64 / MIB),
                    p.module,
                    shape.join("×"),
                    format!("{sign}{}", format_bytes(added.unsigned_abs())),
                ])
            })
            .collect();
        series.push(json!({
            "type": "line",
            "name": label,
            "data": data,
            "dimensions": [
                {"name": "index"},
                {"name": "MiB held above baseline"},
                {"name": "module", "type": "ordinal"},
                {"name": "output shape", "type": "ordinal"},
                {"name": "added", "type": "ordinal"},
            ],
            "encode": {"x": 0, "y": 1, "tooltip": [2, 3, 1, 4], "itemName": 2},
            "symbol": SYMBOLS[i % SYMBOLS.len()],
            "symbolSize": 5,
            "lineStyle": {"width": 2, "type": DASHES[i % DASHES.len()]},
        }));
        let peak = protocol::trace_peak(trace);
        let end = trace.last().map(|p| p.allocated_above_baseline_bytes).unwrap_or(0);
        sentences.push(format!(
            "{label}: {} at its highest, {} held after the last module",
            format_bytes(peak),
            format_bytes(end)
        ));
    }
    // The line is what stays after each module; inside one (an op's temporaries, the
    // output being written) memory goes higher, and the run's peak counts that too.
    let after = lines
        .iter()
        .flat_map(|(_, t)| t.iter().map(|p| p.allocated_above_baseline_bytes))
        .max()
        .unwrap_or(0);
    let inside = lines.iter().map(|(_, t)| protocol::trace_peak(t)).max().unwrap_or(0);
    let subtitle = if inside > after + after / 20 {
        format!("{subtitle} · highest inside a module: {} (the line is what stays after each; a run's peak counts the inside)", format_bytes(inside))
    } else {
        subtitle.to_string()
    };
    let option = json!({
        "title": title("Memory through one forward pass", &subtitle),
        "tooltip": {"trigger": "item"},
        "legend": {"bottom": 0},
        "grid": {"left": 56, "right": 16, "top": 64, "bottom": 112},
        "backgroundColor": "transparent",
        "animation": false,
        // The axis is named in the subtitle: a name under rotated labels would overlap them.
        // A ResNet's 70 modules' names side by side cannot be read: every n-th is written
        // (at most MODULE_LABELS), the tooltip names each point's module.
        "xAxis": {
            "type": "category", "data": modules,
            "axisLabel": {"rotate": 40, "fontSize": 10, "interval": label_interval(modules.len()), "hideOverlap": true},
        },
        "yAxis": {"type": "value", "name": "MiB above baseline"},
        "series": series,
    });
    with_aria(
        option,
        format!(
            "Memory through one forward pass ({} modules): {}.",
            modules.len(),
            sentences.join("; ")
        ),
    )
}

/// How many module names the trace's axis writes at most.
const MODULE_LABELS: usize = 16;

/// ECharts' category `interval` (labels skipped between two written ones) that writes at
/// most [`MODULE_LABELS`] of `n` names.
pub(super) fn label_interval(n: usize) -> usize {
    n.div_ceil(MODULE_LABELS).saturating_sub(1)
}

/// Whether a breakdown part is the run's own (its weights and input; on CUDA also the
/// pool where its activations were), as opposed to the process around it.
fn is_the_runs(label: &str) -> bool {
    let has = |w: &[u8]| label.as_bytes().windows(w.len()).any(|x| x == w);
    has(b"this run") || has(b"the run's")
}

/// A part's name in the legend: its label up to the first parenthesis (the tooltip has it
/// all), so a wrapped legend stays a few short lines.
fn legend_name(label: &str) -> &str {
    label.split(" (").next().unwrap_or(label).trim()
}

/// The memory breakdown as two horizontal stacked bars: the run's own part, and the rest
/// of the process it ran in (code, shared libraries, other tensors: there before the run
/// and after it), so a process's hundreds of MiB never read as the run's. Each part's
/// tooltip names the call that reads it.
pub fn breakdown_chart(b: &MemoryBreakdown) -> ChartOption {
    const ROWS: [&str; 2] = ["this run", "the process around it"];
    let series: Vec<Value> = b
        .parts
        .iter()
        .map(|p| {
            let value = json!({"value": round3(p.bytes as f64 / MIB), "name": p.read_by});
            let data = if is_the_runs(&p.label) { json!([value, "-"]) } else { json!(["-", value]) };
            json!({
                "type": "bar", "stack": "total", "name": legend_name(&p.label),
                "data": data,
                "barWidth": 28,
                "tooltip": {"formatter": format!("{}<br/>{} · read by {}", p.label, format_bytes(p.bytes), p.read_by)},
            })
        })
        .collect();
    let run: u64 = b.parts.iter().filter(|p| is_the_runs(&p.label)).map(|p| p.bytes).sum();
    let each: Vec<String> = b
        .parts
        .iter()
        .map(|p| format!("{} {}", p.label, format_bytes(p.bytes)))
        .collect();
    let option = json!({
        "title": title(
            "What the memory holds (MiB)",
            &format!("{} {}, of which this run's {}; the rest is the process, not the run", format_bytes(b.total_bytes), b.total_label, format_bytes(run)),
        ),
        "tooltip": {"trigger": "item"},
        "legend": {"bottom": 0},
        "grid": {"left": 24, "right": 32, "top": 64, "bottom": 48, "containLabel": true},
        "backgroundColor": "transparent",
        "animation": false,
        "xAxis": {"type": "value"},
        "yAxis": {"type": "category", "data": ROWS, "inverse": true},
        "series": series,
    });
    with_aria(
        option,
        format!(
            "What the memory holds: {} {}, of which this run's {}: {}.",
            format_bytes(b.total_bytes),
            b.total_label,
            format_bytes(run),
            each.join("; ")
        ),
    )
}

/// The runs under the device's roofs on log–log axes: the compute roof (peak TFLOP/s),
/// the memory roof (bandwidth × intensity) where the bandwidth is known, and each run at
/// its estimated arithmetic intensity and achieved TFLOP/s.
pub fn roofline_chart(runs: &[(String, &Report)]) -> Option<ChartOption> {
    let (_, first) = runs.iter().find(|(_, r)| r.roofline.is_some())?;
    let roof = first.roofline.as_ref()?;
    let device = first.env.device;
    let points: Vec<(&String, &protocol::Roofline)> = runs
        .iter()
        .filter(|(_, r)| r.env.device == device)
        .filter_map(|(l, r)| r.roofline.as_ref().map(|x| (l, x)))
        .collect();
    let lo = points
        .iter()
        .map(|(_, p)| p.intensity_flops_per_byte)
        .fold(f64::INFINITY, f64::min)
        .min(1.0);
    let hi = points
        .iter()
        .map(|(_, p)| p.intensity_flops_per_byte)
        .fold(0.0, f64::max)
        .max(1000.0);
    let roof_at = |i: f64| match roof.bandwidth_gb_s {
        Some(bw) => (bw * i / 1000.0).min(roof.peak_tflops),
        None => roof.peak_tflops,
    };
    let mut line = vec![];
    let mut x = lo / 2.0;
    while x <= hi * 2.0 {
        line.push(json!([x, roof_at(x)]));
        x *= 1.25;
    }
    let mut series = vec![json!({
        "type": "line", "name": "device roofs", "data": line, "symbol": "none",
        "lineStyle": {"width": 2, "type": "dashed"},
    })];
    for (i, (label, p)) in points.iter().enumerate() {
        series.push(json!({
            // A one-point line: the page's ECharts bundle has no scatter series.
            "type": "line", "name": label,
            "data": [[p.intensity_flops_per_byte, p.achieved_tflops.max(1e-6)]],
            "symbol": SYMBOLS[i % SYMBOLS.len()], "symbolSize": 12, "showSymbol": true,
        }));
    }
    let option = json!({
        "title": title(
            "Under the roofline",
            "x is an estimate: FLOPs / (weights + input + outputs × 2)",
        ),
        "tooltip": {"trigger": "item"},
        "legend": {"bottom": 0},
        "grid": {"left": 64, "right": 24, "top": 64, "bottom": 64},
        "backgroundColor": "transparent",
        "animation": false,
        "xAxis": {"type": "log", "name": "FLOPs per byte (estimate)", "nameLocation": "middle", "nameGap": 28},
        "yAxis": {"type": "log", "name": "TFLOP/s"},
        "series": series,
    });
    let each: Vec<String> = points
        .iter()
        .map(|(l, p)| {
            format!(
                "{l}: {:.1} FLOPs per byte, {:.4} TFLOP/s",
                p.intensity_flops_per_byte, p.achieved_tflops
            )
        })
        .collect();
    Some(with_aria(
        option,
        format!(
            "Under the roofline: peak {:.3} TFLOP/s{}; {}.",
            roof.peak_tflops,
            roof.bandwidth_gb_s
                .map(|b| format!(", bandwidth {b:.0} GB/s"))
                .unwrap_or_default(),
            each.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::MemoryPart;

    #[test]
    fn the_process_is_drawn_apart_from_the_run() {
        let part = |label: &str, mib: u64| MemoryPart { label: label.into(), bytes: mib << 20, read_by: "r".into() };
        let b = MemoryBreakdown {
            total_bytes: 1034 << 20,
            total_label: "process resident memory after the run".into(),
            parts: vec![
                part("this run's tensors (weights + input)", 74),
                part("other tensors the worker keeps (cached models)", 10),
                part("not tensors: code, shared libraries (libtorch itself), thread stacks, allocator slack", 950),
            ],
        };
        let c = breakdown_chart(&b);
        let s = c.0["series"].as_array().unwrap();
        // The run's part on the first bar, the process's on the second.
        assert_eq!(s[0]["data"][1], "-");
        assert_eq!(s[2]["data"][0], "-");
        assert_eq!(s[2]["name"], "not tensors: code, shared libraries");
        assert!(c.0["title"]["subtext"].as_str().unwrap().contains("of which this run's 74.0 MiB"));
    }
}
