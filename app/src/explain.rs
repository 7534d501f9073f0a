//! What each setting does, in words that sit next to its control, and the one-line reading
//! of a result against the previous run. The facts follow the PyTorch documentation
//! (nn.Module.eval, torch.no_grad, torch.inference_mode, torch.autocast).

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
    let effects = if effects.is_empty() {
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

fn describe_change(what: &str, pct: f64) -> String {
    if pct.abs() < 3.0 {
        format!("{what} about the same")
    } else if pct < 0.0 {
        format!("{what} {:.0}% lower", -pct)
    } else {
        format!("{what} {:.0}% higher", pct)
    }
}

/// One line that reads the latest result against the previous run.
pub fn reading(latest: &Report, previous: Option<&Report>) -> String {
    let peak = latest.memory.peak_above_baseline_bytes;
    let p50 = latest.latency_ms.p50;
    let Some(prev) = previous else {
        return format!(
            "{} needed {} above the weights and input at its peak, with a median of {:.2} ms per batch of {}.",
            latest.spec.label(),
            format_bytes(peak),
            p50,
            latest.spec.batch
        );
    };
    let mem = change(peak as f64, prev.memory.peak_above_baseline_bytes as f64);
    let lat = change(p50, prev.latency_ms.p50);
    let parts: Vec<String> = [
        mem.map(|m| describe_change("peak memory", m)),
        lat.map(|l| describe_change("p50 latency", l)),
    ]
    .into_iter()
    .flatten()
    .collect();
    format!(
        "{} against the previous run ({}): {} ({} → {} above baseline; p50 {:.2} → {:.2} ms).",
        latest.spec.label(),
        prev.spec.label(),
        parts.join(", "),
        format_bytes(prev.memory.peak_above_baseline_bytes),
        format_bytes(peak),
        prev.latency_ms.p50,
        p50
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_read_as_people_say_them() {
        assert_eq!(
            describe_change("peak memory", -72.4),
            "peak memory 72% lower"
        );
        assert_eq!(
            describe_change("p50 latency", 12.0),
            "p50 latency 12% higher"
        );
        assert_eq!(
            describe_change("p50 latency", 1.0),
            "p50 latency about the same"
        );
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
}
