//! A run's traced forward pass in the forms people take away: a Chrome trace (trace-event
//! JSON: one span per module laid end to end, a memory counter event after each; it opens
//! in Perfetto and chrome://tracing), a CSV of its own, and the compact table
//! `gradless measure --trace` prints. The page's download, `gradless runs export --format
//! trace` and the API all call these through `export::export`.

use std::fmt::Write;

use protocol::{added_bytes, format_bytes, Report, TracePoint};

/// The trace-event JSON of `r`'s traced pass. Spans (`"ph": "X"`) carry the module's shape,
/// bytes and FLOPs; counters (`"ph": "C"`) the allocated bytes above the baseline.
pub fn chrome_trace(r: &Report) -> serde_json::Value {
    let title = format!(
        "Gradless: {} · {} · batch {} on {}",
        r.spec.model.as_str(),
        r.spec.label(),
        r.spec.batch,
        r.env.device_name
    );
    let mut events = vec![serde_json::json!({
        "name": "process_name", "ph": "M", "pid": 1, "tid": 1,
        "args": {"name": title},
    })];
    let mut ts = 0.0f64;
    events.push(counter(ts, 0));
    for p in &r.trace {
        let dur = p.time_ms * 1000.0;
        events.push(serde_json::json!({
            "name": p.module, "cat": "module", "ph": "X", "pid": 1, "tid": 1,
            "ts": ts, "dur": dur,
            "args": {
                "output_shape": p.output_shape,
                "output_bytes": p.output_bytes,
                "flops": p.flops,
                "allocated_above_baseline_bytes": p.allocated_above_baseline_bytes,
                "peak_above_baseline_bytes": p.peak_above_baseline_bytes,
            },
        }));
        ts += dur;
        events.push(counter(ts, p.allocated_above_baseline_bytes));
    }
    serde_json::json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "memory_source": r.memory.source.describe(),
            "baseline_bytes": r.memory.baseline_bytes,
            "measured_at": r.env.measured_at,
        },
    })
}

fn counter(ts: f64, bytes: u64) -> serde_json::Value {
    serde_json::json!({
        "name": "allocated above baseline", "ph": "C", "pid": 1, "ts": ts,
        "args": {"bytes": bytes},
    })
}

/// One row per module of the traced pass.
pub fn trace_csv(trace: &[TracePoint]) -> String {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    // Writing to a Vec cannot fail; a failed row would only drop that row.
    let _ = w.write_record([
        "index",
        "module",
        "output_shape",
        "output_bytes",
        "allocated_above_baseline_bytes",
        "peak_above_baseline_bytes",
        "time_ms",
        "flops",
    ]);
    for (i, p) in trace.iter().enumerate() {
        let shape: Vec<String> = p.output_shape.iter().map(|d| d.to_string()).collect();
        let _ = w.write_record([
            i.to_string(),
            p.module.clone(),
            shape.join("x"),
            p.output_bytes.to_string(),
            p.allocated_above_baseline_bytes.to_string(),
            p.peak_above_baseline_bytes.to_string(),
            format!("{:.6}", p.time_ms),
            p.flops.to_string(),
        ]);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The compact table of `gradless measure --trace`.
pub fn trace_table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "traced pass   one extra forward pass after the timed ones (not in the statistics)"
    );
    let _ = writeln!(
        out,
        "  {:<28} {:<18} {:>11} {:>11} {:>10} {:>9} {:>10}",
        "module", "output shape", "held", "added", "peak in it", "ms", "MFLOPs"
    );
    for (p, added) in r.trace.iter().zip(added_bytes(&r.trace)) {
        let shape: Vec<String> = p.output_shape.iter().map(|d| d.to_string()).collect();
        let sign = if added < 0 { "-" } else { "+" };
        let _ = writeln!(
            out,
            "  {:<28} {:<18} {:>11} {:>11} {:>10} {:>9.3} {:>10.1}",
            p.module,
            shape.join("x"),
            format_bytes(p.allocated_above_baseline_bytes),
            format!("{sign}{}", format_bytes(added.unsigned_abs())),
            format_bytes(p.peak_above_baseline_bytes),
            p.time_ms,
            p.flops as f64 / 1e6
        );
    }
    out
}

/// The compute lines every report prints: FLOPs, achieved TFLOP/s and % of peak.
pub fn compute_lines(r: &Report) -> String {
    let mut out = String::new();
    let Some(flops) = r.flops else {
        return out;
    };
    let _ = writeln!(
        out,
        "compute       {:.3} GFLOPs per pass (from shapes; multiply-add = 2 FLOPs), {:.4} TFLOP/s at p50{}",
        flops as f64 / 1e9,
        r.achieved_tflops.unwrap_or(0.0),
        r.percent_of_peak
            .map(|p| format!(", {p:.2}% of peak"))
            .unwrap_or_default()
    );
    if let Some(source) = &r.peak_source {
        let roof = r
            .roofline
            .as_ref()
            .map(|l| format!("{:.3} TFLOP/s", l.peak_tflops))
            .unwrap_or_default();
        let _ = writeln!(out, "  peak {roof}: {source}");
    }
    if let Some(l) = &r.roofline {
        let _ = writeln!(
            out,
            "  arithmetic intensity ≈ {:.1} FLOPs/byte (estimate: weights + input + each output written and read once)",
            l.intensity_flops_per_byte
        );
    }
    if let Some(b) = &r.memory_breakdown {
        let _ = writeln!(
            out,
            "memory held   {} {}",
            format_bytes(b.total_bytes),
            b.total_label
        );
        for p in &b.parts {
            let _ = writeln!(
                out,
                "  {:>10}  {}  [{}]",
                format_bytes(p.bytes),
                p.label,
                p.read_by
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let point = |m: &str, held: u64| protocol::testing::point(m, 2, held, held + 10, 0.25, 512);
        protocol::testing::report("enabled", 2, vec![point("conv1", 100), point("layer1.0,add", 300)])
    }

    #[test]
    fn the_chrome_trace_has_a_span_per_module_end_to_end_and_a_counter_after_each() {
        let v = chrome_trace(&report());
        let events = v["traceEvents"].as_array().unwrap();
        let spans: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        let counters: Vec<_> = events.iter().filter(|e| e["ph"] == "C").collect();
        assert_eq!(spans.len(), 2);
        assert_eq!(counters.len(), 3, "one at the start and one after each module");
        let end0 = spans[0]["ts"].as_f64().unwrap() + spans[0]["dur"].as_f64().unwrap();
        assert_eq!(spans[1]["ts"].as_f64().unwrap(), end0);
        assert_eq!(counters[2]["args"]["bytes"], 300);
        // Re-parses as JSON text, as Perfetto reads it.
        let text = serde_json::to_string(&v).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
    }

    #[test]
    fn the_trace_csv_quotes_names_and_the_table_shows_what_each_module_added() {
        let r = report();
        let csv = trace_csv(&r.trace);
        assert_eq!(csv.lines().count(), 3);
        assert!(csv.contains("\"layer1.0,add\""), "{csv}");
        let table = trace_table(&r);
        assert!(table.contains("+200 B"), "{table}");
        assert!(compute_lines(&r).contains("0.000 GFLOPs"));
    }
}
