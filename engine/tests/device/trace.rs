//! The traced pass's physics, per device (see `common`): with grad the memory climbs like a
//! staircase (every saved activation stays), without it stays low (each activation freed
//! once the next module has used it), and the trace's peak is the run's peak. Plus the FLOP
//! count's invariants and the trace's place outside the statistics.

use crate::common;

use engine::Worker;
use protocol::{trace_peak, DeviceKind, GradMode, ModelId, Report, RunSpec};

fn on(
    device: DeviceKind,
    model: ModelId,
    batch: u32,
    grad: GradMode,
    size: Option<u32>,
) -> RunSpec {
    let run = common::small_run(device, model, batch, grad);
    RunSpec {
        input_size: size.or(run.input_size),
        ..run
    }
}

fn measure(w: &Worker, s: RunSpec) -> Report {
    w.measure(s, |_| {}).expect("run succeeds")
}

use crate::common::worker;

/// `a` and `b` within 2% of the larger.
fn within_2_percent(a: u64, b: u64) -> bool {
    a.abs_diff(b) as f64 <= 0.02 * a.max(b) as f64
}

per_device! {
fn with_grad_the_trace_climbs_and_ends_near_its_peak(device) {
    let w = worker();
    // At ImageNet's size: on small images the transient copies of the largest convolutions'
    // weights (CPU kernels reorder them on every call) rival the activations themselves.
    let r = measure(&w, on(device, ModelId::Resnet18, 4, GradMode::Enabled, Some(224)));
    let t = &r.trace;
    assert!((20..=80).contains(&t.len()), "{} points", t.len());
    let peak = trace_peak(t);
    let last = t.last().unwrap().allocated_above_baseline_bytes;
    assert!(
        last as f64 >= 0.8 * peak as f64,
        "after the last module {last} of a pass peak {peak}: saved activations must stay"
    );
    // Over the convolutional stages every saved activation stays: nothing is freed.
    let stages: Vec<_> = t.iter().filter(|p| p.module.starts_with("layer")).collect();
    assert!(stages.len() >= 16);
    for pair in stages.windows(2) {
        assert!(
            pair[1].allocated_above_baseline_bytes >= pair[0].allocated_above_baseline_bytes,
            "{} ({}) after {} ({})",
            pair[1].module,
            pair[1].allocated_above_baseline_bytes,
            pair[0].module,
            pair[0].allocated_above_baseline_bytes
        );
    }
    assert!(
        within_2_percent(peak, r.memory.peak_above_baseline_bytes),
        "trace peak {peak} vs the run's {}",
        r.memory.peak_above_baseline_bytes
    );
}
}

per_device! {
fn without_grad_the_trace_holds_at_most_two_activations(device) {
    let w = worker();
    for grad in [GradMode::NoGrad, GradMode::InferenceMode] {
        let r = measure(&w, on(device, ModelId::Resnet18, 4, grad, None));
        let t = &r.trace;
        let largest = t.iter().map(|p| p.output_bytes).max().unwrap();
        for p in t {
            assert!(
                p.allocated_above_baseline_bytes <= 2 * largest,
                "{grad:?}: {} holds {} with the largest activation {largest}",
                p.module,
                p.allocated_above_baseline_bytes
            );
        }
        let peak = trace_peak(t);
        assert!(
            within_2_percent(peak, r.memory.peak_above_baseline_bytes),
            "{grad:?}: trace peak {peak} vs the run's {}",
            r.memory.peak_above_baseline_bytes
        );
    }
}
}

per_device! {
fn grad_holds_more_than_no_grad_at_the_end_of_the_pass(device) {
    let w = worker();
    let grad = measure(&w, on(device, ModelId::MobilenetV2, 2, GradMode::Enabled, None));
    let no_grad = measure(&w, on(device, ModelId::MobilenetV2, 2, GradMode::NoGrad, None));
    let end = |r: &Report| r.trace.last().unwrap().allocated_above_baseline_bytes;
    // Without grad only the logits are left; with grad every saved activation is.
    assert!(end(&grad) > 10 * end(&no_grad), "{} vs {}", end(&grad), end(&no_grad));
    assert_eq!(
        grad.trace.iter().map(|p| &p.module).collect::<Vec<_>>(),
        no_grad.trace.iter().map(|p| &p.module).collect::<Vec<_>>(),
        "the same modules in the same order"
    );
}
}

per_device! {
fn every_model_has_a_readable_trace_and_counted_flops(device) {
    let w = worker();
    for model in ModelId::ALL {
        let r = measure(&w, on(device, model, 2, GradMode::NoGrad, None));
        let t = &r.trace;
        // The MLP has nine operations in all; the others are charted at 20–80 points.
        let least = if model == ModelId::TinyMlp { 9 } else { 20 };
        assert!((least..=80).contains(&t.len()), "{model}: {} points", t.len());
        assert!(t.iter().all(|p| p.time_ms >= 0.0 && p.output_bytes > 0), "{model}");
        let total: u64 = t.iter().map(|p| p.flops).sum();
        assert!(total > 0);
        assert_eq!(r.flops, Some(total), "{model}: flops is the trace's sum");
        let achieved = r.achieved_tflops.unwrap();
        let expected = total as f64 / (r.latency_ms.p50 / 1000.0) / 1e12;
        assert!((achieved - expected).abs() <= 1e-9 * expected.max(1.0), "{model}");
        assert!(r.peak_source.is_some() && r.percent_of_peak.is_some(), "{model}");
        // The traced pass is extra: the statistics count the timed iterations only.
        assert_eq!((r.warmup.len(), r.samples.len()), (1, 3));
        let b = r.memory_breakdown.as_ref().expect("a memory breakdown");
        assert_eq!(b.parts.iter().map(|p| p.bytes).sum::<u64>(), b.total_bytes);
    }
}
}

per_device! {
fn flops_are_linear_in_the_batch_and_independent_of_the_grad_mode(device) {
    let w = worker();
    let one = measure(&w, on(device, ModelId::Transformer, 1, GradMode::NoGrad, None));
    let three = measure(&w, on(device, ModelId::Transformer, 3, GradMode::Enabled, None));
    assert_eq!(three.flops.unwrap(), 3 * one.flops.unwrap());
    for (a, b) in one.trace.iter().zip(&three.trace) {
        assert_eq!(3 * a.flops, b.flops, "{}", a.module);
    }
}
}

#[test]
fn resnet18_at_224_counts_torchvisions_published_operations() {
    let _one_at_a_time = crate::common::cpu_lock();
    // torchvision's model card gives ResNet-18 1.81 GFLOPS, counting a multiply-add as one:
    // twice that in Gradless's convention, to the card's three digits.
    let w = worker();
    let r = measure(
        &w,
        RunSpec {
            iters: 1,
            warmup: 0,
            ..on(
                DeviceKind::Cpu,
                ModelId::Resnet18,
                1,
                GradMode::NoGrad,
                Some(224),
            )
        },
    );
    let gmacs = r.flops.unwrap() as f64 / 2.0 / 1e9;
    assert!((gmacs - 1.81).abs() < 0.01, "{gmacs} GMACs");
}
