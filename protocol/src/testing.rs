//! Reports for the tests of the crates that draw, compare or export them: well-formed,
//! with the spec and forward-pass trace a test chooses, and measured by nothing (every
//! figure outside the trace is a placeholder). Nothing outside tests calls it.

use crate::settings::{self, Setting, SettingId, SETTINGS};
use crate::{Report, TracePoint};

/// A trace point of module `module` with output `[batch, 4]` (float32), holding `held`
/// bytes above the baseline after it returned and reaching `peak` while it ran.
pub fn point(module: &str, batch: i64, held: u64, peak: u64, time_ms: f64, flops: u64) -> TracePoint {
    TracePoint {
        module: module.to_string(),
        output_shape: vec![batch, 4],
        output_bytes: batch as u64 * 16,
        allocated_above_baseline_bytes: held,
        peak_above_baseline_bytes: peak,
        time_ms,
        flops,
    }
}

/// A CPU resnet18 report at `batch` with grad mode `grad` (its wire name: `"enabled"`,
/// `"no_grad"`, `"inference_mode"`) and the given trace; its FLOPs are the trace's sum.
pub fn report(grad: &str, batch: u32, trace: Vec<TracePoint>) -> Report {
    let flops: u64 = trace.iter().map(|p| p.flops).sum();
    let mut report: Report = serde_json::from_value(serde_json::json!({
        "spec": {"model": "resnet18", "device": "cpu", "batch": batch, "input_size": 64, "eval": true,
                 "grad": grad, "autocast": "off", "warmup": 1, "iters": 2, "threads": 1},
        "env": {"device": "cpu", "device_name": "cpu", "device_total_memory_bytes": null, "driver_version": null,
                "cuda_version": null, "cudnn_version": null, "libtorch_version": "2.11.0", "cpu_model": "test cpu",
                "threads": 1, "measured_at": "2026-11-30T00:00:00Z", "gradless_version": "0"},
        "latency_ms": {"mean": 1.0, "p50": 1.0, "p95": 1.0, "p99": 1.0, "min": 1.0, "max": 1.0, "stddev": 0.0},
        "throughput_per_s": 1.0,
        "memory": {"source": "cpu_tensor_memory", "baseline_bytes": 1, "peak_allocated_bytes": 2,
                   "peak_above_baseline_bytes": 1, "peak_reserved_bytes": null, "after_release_bytes": 1,
                   "leaked_bytes": 0, "device_used_bytes": null},
        "output": {"dtype": "Float", "shape": [batch, 10], "is_inference": grad == "inference_mode",
                   "requires_grad": grad == "enabled"},
        "warmup": [], "samples": []
    }))
    .expect("the test report is a valid Report");
    report.trace = trace;
    report.flops = Some(flops);
    report
}

/// `r` with these timed latencies (in order), its median and IQR recomputed from them: a
/// run whose noise a test chooses.
pub fn with_latencies(mut r: Report, latencies_ms: &[f64]) -> Report {
    r.samples = latencies_ms
        .iter()
        .enumerate()
        .map(|(i, &ms)| crate::Sample {
            iteration: i as u32,
            latency_ms: ms,
            allocated_bytes: 0,
            peak_bytes: 0,
            reserved_bytes: None,
        })
        .collect();
    r.spec.iters = latencies_ms.len() as u32;
    if let Some(m) = crate::stats::median(latencies_ms) {
        r.latency_ms.p50 = m;
    }
    r.latency_ms.iqr = crate::stats::iqr(latencies_ms);
    r
}

/// The settings table with one more row: `generate.prefill_logits` (a command-line setting
/// only, until now) on the Generate page as `logits`, read and written through its field: what docs/ARCHITECTURE.md's "Adding a
/// setting" adds. The tests of each part that reads the table run it on this one.
pub fn settings_with_a_new_row() -> &'static [Setting] {
    static TABLE: std::sync::OnceLock<Vec<Setting>> = std::sync::OnceLock::new();
    TABLE.get_or_init(table_with_a_new_row)
}

fn table_with_a_new_row() -> Vec<Setting> {
    let mut table: Vec<Setting> = SETTINGS.iter().filter(|s| s.key != "prefill_logits").copied().collect();
    table.push(Setting {
        id: SettingId::PrefillLogits,
        access: settings::Access::Bool {
            get: |s| s.generate.as_ref().map(|g| g.prefill_logits),
            set: |s, on| s.generate.get_or_insert_with(Default::default).prefill_logits = on,
        },
        key: "logits",
        flag: "logits",
        label: "Prefill logits",
        help: "Report the prefill's last-position logits.",
        pages: settings::GEN,
        controls: settings::GEN,
        runs: settings::GENERATION,
        quiet: true,
        said: settings::Said::NotDefault("prefill logits"),
        ..settings::ROW
    });
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{command_args, command_line, label, on_page, query, read_query, Page};
    use crate::{GenerateSpec, GradMode, RunSpec};

    fn generation() -> RunSpec {
        RunSpec {
            model: "llama_tiny".parse().unwrap(),
            batch: 1,
            input_size: Some(32),
            grad: GradMode::NoGrad,
            generate: Some(GenerateSpec::default()),
            ..RunSpec::default()
        }
    }

    #[test]
    fn a_row_added_to_the_table_is_in_the_address_the_controls_the_command_line_and_the_snippet() {
        let table = settings_with_a_new_row();
        let row = table.iter().find(|s| s.key == "logits").unwrap();
        let mut spec = generation();
        row.set(&mut spec, "1").unwrap();
        assert!(spec.generate.as_ref().unwrap().prefill_logits);
        // The address, both ways.
        let q = query(table, Page::Generate, &spec);
        assert!(q.ends_with("&logits=1"), "{q}");
        let mut back = generation();
        let pairs: Vec<(&str, &str)> = q.split('&').filter_map(|kv| kv.split_once('=')).collect();
        read_query(table, Page::Generate, &mut back, &|k| pairs.iter().rfind(|(key, _)| *key == k).map(|(_, v)| v.to_string()), &crate::Catalog::built_in());
        assert_eq!(back, spec);
        // The Generate page draws a control for each row it iterates here.
        assert!(on_page(table, Page::Generate).any(|s| s.has_control(Page::Generate) && s.key == "logits"));
        // The command line (and so the snippets' first line), and the label.
        assert!(command_args(table, &spec, &[]).contains(&"--logits".to_string()));
        assert!(command_line(table, &spec).starts_with("gradless generate ") && command_line(table, &spec).ends_with(" --logits"));
        assert!(label(table, &spec).ends_with(" · prefill logits"), "{}", label(table, &spec));
    }
}
