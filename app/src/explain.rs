//! What each setting does, in words that sit next to its control, and the one-line reading
//! of a result against the previous run. The facts follow the PyTorch documentation
//! (nn.Module.eval, torch.no_grad, torch.inference_mode, torch.autocast).

use protocol::noise::Comparison;
use protocol::{format_bytes, Autocast, GradMode, ModelId, Report};

/// What `model.eval()` / `model.train()` changes for this model.
pub fn eval_text(eval: bool, model: ModelId) -> String {
    // What each mode-dependent layer of this model does in the chosen mode.
    let (dropout, batchnorm) = if eval {
        (
            "Dropout becomes the identity",
            "BatchNorm normalises with its running statistics, so a sample's output no longer depends on its batch-mates",
        )
    } else {
        (
            "Dropout zeroes random activations and scales the rest by 1/(1-p), so the same input gives different outputs",
            "BatchNorm normalises with the batch's statistics and updates its running statistics — even under no_grad",
        )
    };
    let effects: Vec<&str> = [
        (model.has_dropout(), dropout),
        (model.has_batchnorm(), batchnorm),
    ]
    .into_iter()
    .filter_map(|(present, text)| present.then_some(text))
    .collect();
    // A TorchScript file hides its layers: say what was measured when it was loaded.
    let effects = if let Some(team) = model.team() {
        team.training.describe().to_string()
    } else if effects.is_empty() {
        "nothing changes in this model".to_string()
    } else {
        effects.join("; ")
    };
    if eval {
        format!(
            "model.eval() flips the `training` flag on every module. In this model: {effects}. It does NOT \
             switch autograd off: memory and speed are the grad mode's business."
        )
    } else {
        format!("model.train() (the default after construction): layers behave as in training. In this model: {effects}.")
    }
}

pub fn grad_text(grad: GradMode) -> &'static str {
    match grad {
        GradMode::Enabled => {
            "Autograd on (PyTorch's default). Every op on a tensor that requires grad — the weights do — \
             records a graph node and keeps the activations backward would need, until the output is freed. \
             Fine for training; pure waste for inference."
        }
        GradMode::NoGrad => {
            "torch.no_grad(): no graph is recorded, so activations are freed as soon as the next layer has \
             used them. Peak memory drops to roughly one layer's activations. It does not change Dropout \
             or BatchNorm: that is eval()'s job."
        }
        GradMode::InferenceMode => {
            "torch.inference_mode(): no_grad plus no version counters and no view tracking on the tensors it \
             creates. The gain is CPU overhead per op, noticeable on small models; memory is the same as \
             no_grad. Its outputs are inference tensors: they cannot be saved for backward later (clone() \
             outside the mode if you must)."
        }
    }
}

pub fn autocast_text(autocast: Autocast) -> &'static str {
    match autocast {
        Autocast::Off => "Autocast off: every op runs in the weights' dtype (float32).",
        Autocast::Fp16 => {
            "torch.autocast(dtype=float16): matmuls, convolutions and linear layers run in fp16; reductions, \
             softmax and norms stay in fp32. Weights stay fp32; their fp16 copies are cached while the \
             outermost autocast region is open and dropped when it closes."
        }
        Autocast::Bf16 => {
            "torch.autocast(dtype=bfloat16): like fp16 with fp32's exponent range, so no overflow worries. \
             Fast on GPUs from Ampere on and on CPUs with bf16 units; elsewhere it is emulated and slower \
             than fp32."
        }
    }
}

pub fn batch_text() -> &'static str {
    "Activation memory grows linearly with the batch; per-sample latency falls as the device fills up, \
     then flattens. With grad enabled, the same memory runs out at a much smaller batch."
}

fn change(new: f64, old: f64) -> Option<f64> {
    (old > 0.0).then(|| (new - old) / old * 100.0)
}

/// A percentage as small as a byte count can make it: whole numbers from 10% on.
fn percent(pct: f64) -> String {
    let a = pct.abs();
    if a >= 10.0 {
        format!("{a:.0}%")
    } else if a >= 0.1 {
        format!("{a:.1}%")
    } else {
        "under 0.1%".to_string()
    }
}

/// Peak memory against the previous run's. Memory figures are exact bytes (libtorch's
/// allocation reporting on the CPU, the caching allocator's counters on CUDA), the same for
/// the same settings every time: no noise floor applies, and any difference is real.
fn memory_change(new: u64, old: u64) -> String {
    if new == old {
        return "peak memory the same, to the byte".to_string();
    }
    match change(new as f64, old as f64) {
        Some(pct) if pct < 0.0 => format!("peak memory {} lower", percent(pct)),
        Some(pct) => format!("peak memory {} higher", percent(pct)),
        None => format!("peak memory {} above baseline, from none", format_bytes(new)),
    }
}

/// The run named as people say it: the model, then its settings ("ResNet-18 · eval ·
/// no_grad · batch 4").
pub fn run_name(r: &Report) -> String {
    format!("{} · {}", r.spec.model.display_name(), r.spec.label())
}

/// What differs between two runs beyond the settings being taught (model, device, input
/// size, threads): a percentage across those is not a lesson about a setting.
pub fn incomparable(a: &Report, b: &Report) -> Vec<&'static str> {
    let mut out = vec![];
    if a.spec.model != b.spec.model {
        out.push("model");
    }
    if a.env.device != b.env.device || a.env.device_name != b.env.device_name {
        out.push("device");
    }
    if a.spec.input_size != b.spec.input_size {
        out.push("input size");
    }
    if a.env.threads != b.env.threads {
        out.push("CPU threads");
    }
    out
}

/// The noise warning of a run's latencies (IQR over median above 10%: noisy; above 25%:
/// very noisy, rerun), as torch.utils.benchmark warns; `None` when quiet.
pub fn noise(r: &Report) -> Option<String> {
    r.noise_warning()
}

/// The interquartile range as people read it: "0.120 ms (4% of the median)", with the
/// noise warning when there is one; `None` with fewer than 4 timed iterations.
pub fn spread(r: &Report) -> Option<String> {
    let rel = r.relative_iqr()?;
    let iqr = rel * r.latency_ms.p50;
    let base = format!("{iqr:.3} ms ({:.0}% of the median)", rel * 100.0);
    Some(match noise(r) {
        Some(w) => format!("{base} — {w}"),
        None => base,
    })
}

/// The latency of `new` against `old`, two runs measured apart: "1.31× faster
/// (1.22–1.40), beyond this server's run-to-run noise (two runs of the same settings here land up to 6% apart; ...)", or "no difference
/// beyond run-to-run noise: ..." ([`Comparison::of_runs`]).
pub fn latency_change(new: &Report, old: &Report) -> Option<String> {
    Comparison::of_runs(new, old).map(|c| c.latency_reading())
}

/// The caveat that travels with a run's figures (see [`Report::caveat`]).
pub fn caveat(r: &Report) -> Option<String> {
    r.caveat()
}

/// The reading line under the charts: the latest run, and what changed against the
/// previous one — only where the two differ in the settings being taught, and with
/// latency changes inside the runs' own noise said to be noise.
pub fn reading(latest: &Report, previous: Option<&Report>) -> String {
    let peak = latest.memory.peak_above_baseline_bytes;
    let p50 = latest.latency_ms.p50;
    let caveat = caveat(latest).map(|c| format!(" {c}")).unwrap_or_default();
    let Some(prev) = previous else {
        return format!(
            "{} needed {} above the weights and input at its peak, with a median of {:.2} ms per batch of {}.{caveat}",
            run_name(latest),
            format_bytes(peak),
            p50,
            latest.spec.batch
        );
    };
    let figures = format!(
        "{} → {} above baseline; p50 {:.2} → {:.2} ms",
        format_bytes(prev.memory.peak_above_baseline_bytes),
        format_bytes(peak),
        prev.latency_ms.p50,
        p50
    );
    let differs = incomparable(latest, prev);
    if !differs.is_empty() {
        return format!(
            "{} and the previous run ({}) differ in {}: {figures}. Across a different {} the change is not the effect of a setting: change one setting at a time to see what it does.{caveat}",
            run_name(latest),
            run_name(prev),
            differs.join(", "),
            differs.join(" and "),
        );
    }
    let mem = memory_change(peak, prev.memory.peak_above_baseline_bytes);
    let lat = latency_change(latest, prev).map(|l| format!("median latency: {l}"));
    let parts: Vec<String> = [Some(mem), lat]
        .into_iter()
        .flatten()
        .collect();
    let warning = noise(latest)
        .map(|w| format!(" This run is {w}."))
        .unwrap_or_default();
    format!(
        "{} against the previous run ({}): {} ({figures}).{warning}{caveat}",
        run_name(latest),
        prev.spec.label(),
        parts.join("; "),
    )
}

/// `new` bytes against `old` as a factor people read at a glance: "4.0× lower", "2.5×
/// higher", and within 5% the exact percentage ("1.2% higher"): bytes are exact, so a small
/// difference is still one. `None` when either is zero (no factor exists).
fn factor(new: u64, old: u64) -> Option<String> {
    if new == 0 || old == 0 {
        return None;
    }
    let ratio = new as f64 / old as f64;
    Some(if new == old {
        "the same as".to_string()
    } else if (ratio - 1.0).abs() < 0.05 {
        let pct = (ratio - 1.0) * 100.0;
        format!("{} {} than", percent(pct), if pct < 0.0 { "lower" } else { "higher" })
    } else if ratio < 1.0 {
        format!("{:.1}× lower than", 1.0 / ratio)
    } else {
        format!("{ratio:.1}× higher than")
    })
}

/// The readings written on the charts themselves (memory, latency) for `latest` against
/// `previous`, which is drawn faintly behind it: short, so they fit above the plot. Runs
/// that differ beyond the settings being taught get no factor, only what differs.
pub fn chart_readings(latest: &Report, previous: &Report) -> (String, String) {
    let differs = incomparable(latest, previous);
    if !differs.is_empty() {
        let what = format!(
            "behind: the previous run, another {}",
            differs.join(" and ")
        );
        return (what.clone(), what);
    }
    let (new, old) = (
        latest.memory.peak_above_baseline_bytes,
        previous.memory.peak_above_baseline_bytes,
    );
    let memory = match factor(new, old) {
        Some(f) => format!("peak {f} the previous run"),
        None if new == old => "peak the same as the previous run".to_string(),
        None => format!(
            "peak {} above baseline; the previous run {}",
            format_bytes(new),
            format_bytes(old)
        ),
    };
    let latency = Comparison::of_runs(latest, previous)
        .map(|c| c.chart_reading("the previous run"))
        .unwrap_or_else(|| "p50 against the previous run: not comparable".to_string());
    (memory, latency)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn changes_read_as_people_say_them() {
        assert_eq!(memory_change(28, 100), "peak memory 72% lower");
        assert_eq!(memory_change(112, 100), "peak memory 12% higher");
        // Bytes are exact: a small difference is still one, and only equal bytes are "the same".
        assert_eq!(memory_change(1010, 1000), "peak memory 1.0% higher");
        assert_eq!(memory_change(100_001, 100_000), "peak memory under 0.1% higher");
        assert_eq!(memory_change(7, 7), "peak memory the same, to the byte");
        assert_eq!(change(28.0, 100.0), Some(-72.0));
        assert_eq!(change(1.0, 0.0), None);
    }

    #[test]
    fn eval_text_names_the_layers_that_change() {
        assert!(eval_text(true, ModelId::Resnet18).contains("BatchNorm"));
        assert!(eval_text(false, ModelId::Transformer).contains("Dropout"));
        assert!(
            !eval_text(true, ModelId::Resnet18).contains("Dropout"),
            "ResNet has no Dropout"
        );
        assert!(
            !eval_text(false, ModelId::Transformer).contains("BatchNorm"),
            "the transformer has no BatchNorm"
        );
    }

    /// A report for tests: `model` at `batch`, `peak` bytes above baseline, these latencies.
    pub(crate) fn report(model: &str, batch: u32, peak: u64, latencies: &[f64]) -> Report {
        let samples: Vec<serde_json::Value> = latencies
            .iter()
            .enumerate()
            .map(|(i, ms)| serde_json::json!({"iteration": i, "latency_ms": ms, "allocated_bytes": 0, "peak_bytes": peak, "reserved_bytes": null}))
            .collect();
        let mut sorted = latencies.to_vec();
        sorted.sort_by(f64::total_cmp);
        let p50 = sorted[sorted.len() / 2];
        serde_json::from_value(serde_json::json!({
            "spec": {"model": model, "device": "cpu", "batch": batch, "input_size": null, "eval": true,
                     "grad": "no_grad", "autocast": "off", "warmup": 1, "iters": latencies.len(), "threads": 1},
            "env": {"device": "cpu", "device_name": "cpu", "device_total_memory_bytes": null, "driver_version": null,
                    "cuda_version": null, "cudnn_version": null, "libtorch_version": "2.11.0", "cpu_model": "test cpu",
                    "threads": 1, "measured_at": "2026-11-30T00:00:00Z", "gradless_version": "0"},
            "latency_ms": {"mean": p50, "p50": p50, "p95": p50, "p99": p50, "min": p50, "max": p50, "stddev": 0.0},
            "throughput_per_s": 1.0,
            "memory": {"source": "cpu_tensor_memory", "baseline_bytes": 1, "peak_allocated_bytes": peak + 1,
                       "peak_above_baseline_bytes": peak, "peak_reserved_bytes": null, "after_release_bytes": 1,
                       "leaked_bytes": 0, "device_used_bytes": null},
            "output": {"dtype": "Float", "shape": [batch, 10], "is_inference": false, "requires_grad": false},
            "warmup": [],
            "samples": samples
        }))
        .unwrap()
    }

    #[test]
    fn runs_of_different_models_are_named_and_not_turned_into_a_percentage() {
        let mlp = report("tiny_mlp", 4, 1 << 20, &[1.0, 1.0, 1.0, 1.0]);
        let resnet = report("resnet18", 1, 400 << 20, &[30.0, 30.0, 30.0, 30.0]);
        let text = reading(&resnet, Some(&mlp));
        assert!(
            text.contains("ResNet-18") && text.contains("Tiny MLP"),
            "{text}"
        );
        assert!(text.contains("differ in model"), "{text}");
        assert!(!text.contains('%'), "no percentage across models: {text}");
    }

    #[test]
    fn a_latency_change_inside_the_runs_spread_is_called_noise() {
        let noisy = [10.0, 7.0, 13.0, 9.0, 11.0, 14.0, 6.0, 10.0];
        let a = report("resnet18", 4, 100 << 20, &noisy);
        let b_lat: Vec<f64> = noisy.iter().map(|x| x * 1.1).collect();
        let b = report("resnet18", 4, 25 << 20, &b_lat);
        let text = reading(&b, Some(&a));
        // The runs' own drift between blocks is wide: it decides nothing, and says so once,
        // with what to do (never "no difference" beside a factor).
        assert!(text.contains("median latency: not decided: the medians say 1.10× slower, but two runs of the same settings here differ by up to "), "{text}");
        assert!(text.contains("rerun on a quieter machine, or with more iterations"), "{text}");
        assert!(!text.contains("no difference"), "{text}");
        assert!(text.contains("peak memory 75% lower"), "{text}");
        // The spread is 30% of the median: the run is flagged.
        assert!(text.contains("very noisy, rerun"), "{text}");
        // A change far beyond the spread is reported as a factor with its interval.
        let c_lat: Vec<f64> = noisy.iter().map(|x| x * 3.0).collect();
        let c = report("resnet18", 4, 25 << 20, &c_lat);
        let text = reading(&c, Some(&a));
        assert!(text.contains("median latency: 3.00× slower ("), "{text}");
        let text = reading(&a, Some(&c));
        assert!(text.contains("median latency: 3.00× faster ("), "{text}");
        let (_, latency) = chart_readings(&c, &a);
        assert!(latency.starts_with("p50 3.00× higher"), "{latency}");
        assert!(spread(&a).unwrap().contains("very noisy"));
        assert!(spread(&report("resnet18", 4, 1, &[1.0; 4])).unwrap().starts_with("0.000 ms (0%"));
    }

    #[test]
    fn autocast_on_a_cpu_carries_its_caveat() {
        let mut r = report("resnet18", 4, 1, &[1.0; 4]);
        assert!(caveat(&r).is_none());
        r.spec.autocast = Autocast::Bf16;
        assert!(caveat(&r).unwrap().contains("emulated"));
        assert!(reading(&r, None).contains("emulated"));
    }

    #[test]
    fn the_chart_reading_is_a_factor_against_the_previous_run() {
        let grad = report("resnet18", 4, 400 << 20, &[30.0; 4]);
        let nograd = report("resnet18", 4, 100 << 20, &[30.0; 4]);
        let (memory, latency) = chart_readings(&nograd, &grad);
        assert_eq!(memory, "peak 4.0× lower than the previous run");
        assert!(latency.contains("p50"), "{latency}");
        let (memory, _) = chart_readings(&grad, &nograd);
        assert_eq!(memory, "peak 4.0× higher than the previous run");
        let (same, latency) = chart_readings(&grad, &grad);
        assert_eq!(same, "peak the same as the previous run");
        assert!(!latency.contains('×'), "four iterations decide nothing: {latency}");
        // Bytes are exact: 1% more is reported, not rounded to "the same".
        let bit_more = report("resnet18", 4, (400 << 20) + (4 << 20), &[30.0; 4]);
        let (memory, _) = chart_readings(&bit_more, &grad);
        assert_eq!(memory, "peak 1.0% higher than the previous run");
        // Another model: no factor, only what differs.
        let mlp = report("tiny_mlp", 4, 1 << 20, &[1.0; 4]);
        let (memory, latency) = chart_readings(&mlp, &grad);
        assert!(
            memory.contains("another model") && !memory.contains('×'),
            "{memory}"
        );
        assert!(!latency.contains('×'));
        // Nothing above the baseline in one run: no factor out of a zero.
        let zero = report("resnet18", 4, 0, &[30.0; 4]);
        let (memory, _) = chart_readings(&zero, &grad);
        assert!(!memory.contains('×') && memory.contains("0 B"), "{memory}");
    }
}
