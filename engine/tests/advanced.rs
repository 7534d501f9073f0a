//! The physical invariants of the advanced settings (see `common` for the per-device
//! macro): half and bf16 weights hold exactly half of fp32's parameter bytes;
//! channels_last gives the input and every convolution weight NHWC strides and leaves the
//! output's values as they were; an input copied from host memory adds exactly its own
//! bytes to the pass's peak; pinned memory is pinned on CUDA and refused, with the reason,
//! on a CPU.

#[macro_use]
mod common;

use engine::lab::{
    convert_model, is_channels_last, make_input, parameter_bytes, tch_device, LabConfig,
};
use engine::models::Model;
use engine::{MeasureError, Worker, WorkerConfig};
use protocol::{
    Advanced, DeviceKind, GradMode, InputSource, MemoryFormat, ModelId, Report, RunSpec,
    WeightsDtype,
};

fn spec(device: DeviceKind, model: ModelId, advanced: Advanced) -> RunSpec {
    RunSpec {
        model,
        device: common::choice(device),
        batch: 2,
        input_size: Some(64),
        grad: GradMode::NoGrad,
        warmup: 1,
        iters: 3,
        threads: Some(1),
        advanced,
        ..RunSpec::default()
    }
}

fn worker() -> Worker {
    Worker::start(WorkerConfig::default()).expect("worker starts")
}

fn measure(w: &Worker, s: RunSpec) -> Report {
    w.measure(s, |_| {}).expect("run succeeds")
}

fn built(id: ModelId, device: DeviceKind, weights: WeightsDtype, format: MemoryFormat) -> Model {
    tch::manual_seed(LabConfig::default().seed);
    let mut m = Model::build(id, tch_device(device), 64);
    convert_model(&mut m, weights, format).expect("conversion");
    m
}

per_device! {
fn half_and_bf16_weights_hold_exactly_half_of_fp32s_parameter_bytes(device) {
    for id in [ModelId::TinyMlp, ModelId::Resnet18, ModelId::Transformer] {
        let fp32 = parameter_bytes(&built(id, device, WeightsDtype::Fp32, MemoryFormat::Contiguous));
        for w in [WeightsDtype::Fp16, WeightsDtype::Bf16] {
            let m = built(id, device, w, MemoryFormat::Contiguous);
            assert_eq!(2 * parameter_bytes(&m), fp32, "{id:?} {w:?}");
            assert_eq!(m.parameters(), built(id, device, WeightsDtype::Fp32, MemoryFormat::Contiguous).parameters());
        }
    }
}
}

per_device! {
fn a_run_with_half_weights_reports_a_half_precision_output_and_a_smaller_baseline(device) {
    let w = worker();
    let fp32 = measure(&w, spec(device, ModelId::Resnet18, Advanced::default()));
    let half = measure(&w, spec(device, ModelId::Resnet18, Advanced { weights: WeightsDtype::Bf16, ..Advanced::default() }));
    assert_eq!(half.output.dtype, "BFloat16");
    assert_eq!(fp32.output.dtype, "Float");
    // Everything in the baseline is floating point (weights, BatchNorm's running
    // statistics, the input): it halves exactly.
    assert_eq!(2 * half.memory.baseline_bytes, fp32.memory.baseline_bytes);
    assert_eq!(half.memory.leaked_bytes, 0);
    assert!(half.spec.label().contains("bf16 weights"));
}
}

per_device! {
fn channels_last_gives_the_input_and_conv_weights_nhwc_strides_and_the_same_output(device) {
    let adv = Advanced { memory_format: MemoryFormat::ChannelsLast, ..Advanced::default() };
    let nhwc = built(ModelId::Resnet18, device, WeightsDtype::Fp32, MemoryFormat::ChannelsLast);
    let nchw = built(ModelId::Resnet18, device, WeightsDtype::Fp32, MemoryFormat::Contiguous);
    let convs: Vec<_> = nhwc.vs.variables().into_iter().filter(|(_, t)| t.dim() == 4).collect();
    assert!(convs.len() >= 20, "ResNet-18 has 20 convolutions");
    for (name, t) in &convs {
        assert!(is_channels_last(t), "{name}: strides {:?}", t.stride());
    }
    tch::manual_seed(1);
    let x = make_input(&nhwc, 2, 64, &adv, device).unwrap();
    assert!(is_channels_last(&x) && !x.is_contiguous(), "input strides {:?}", x.stride());
    tch::manual_seed(1);
    let x_nchw = make_input(&nchw, 2, 64, &Advanced::default(), device).unwrap();
    assert!(!is_channels_last(&x_nchw));
    // Same values, another layout: the outputs agree to float rounding.
    let (a, b) = tch::no_grad(|| (nhwc.net.forward_t(&x, false), nchw.net.forward_t(&x_nchw, false)));
    let diff = (a - &b).abs().max().double_value(&[]);
    let scale = b.abs().max().double_value(&[]);
    assert!(diff <= 1e-3 * scale.max(1.0), "max difference {diff} at scale {scale}");
    // And the Lab refuses it where it means nothing.
    let err = worker().check(spec(device, ModelId::TinyMlp, adv)).unwrap_err();
    assert!(err.to_string().contains("channels_last"), "{err}");
}
}

per_device! {
fn an_input_copied_from_host_memory_adds_exactly_its_bytes_to_each_pass(device) {
    let w = worker();
    let on_device = measure(&w, spec(device, ModelId::Resnet18, Advanced::default()));
    let pageable = measure(&w, spec(device, ModelId::Resnet18, Advanced { input_source: InputSource::Pageable, ..Advanced::default() }));
    let input_bytes = 2 * 3 * 64 * 64 * 4;
    let (d, p) = (on_device.memory.peak_above_baseline_bytes, pageable.memory.peak_above_baseline_bytes);
    assert_eq!(p, d + input_bytes, "pageable peak {p} vs on-device {d}");
    assert_eq!(pageable.memory.leaked_bytes, 0);
}
}

per_device! {
fn pinned_memory_is_pinned_on_cuda_and_refused_with_its_reason_on_a_cpu(device) {
    let adv = Advanced { input_source: InputSource::Pinned, ..Advanced::default() };
    match device {
        DeviceKind::Cpu => {
            let err = worker().check(spec(device, ModelId::Resnet18, adv)).unwrap_err();
            let text = err.to_string();
            assert!(text.contains("page-locked") && text.contains("input_source"), "{text}");
            let run = worker().measure(spec(device, ModelId::Resnet18, adv), |_| {});
            assert!(matches!(run, Err(MeasureError::Rejected(_))));
        }
        DeviceKind::Cuda => {
            let m = built(ModelId::Resnet18, device, WeightsDtype::Fp32, MemoryFormat::Contiguous);
            let x = make_input(&m, 2, 64, &adv, device).unwrap();
            assert!(x.is_pinned(tch_device(device)), "the host input is page-locked");
            assert_eq!(x.device(), tch::Device::Cpu);
            let r = measure(&worker(), spec(device, ModelId::Resnet18, adv));
            assert_eq!(r.memory.leaked_bytes, 0);
        }
    }
}
}

per_device! {
fn cuda_math_switches_are_refused_on_a_cpu_with_their_reason(device) {
    if device != DeviceKind::Cpu {
        return;
    }
    for (adv, word) in [
        (Advanced { tf32: true, ..Advanced::default() }, "TF32"),
        (Advanced { cudnn_benchmark: true, ..Advanced::default() }, "cuDNN"),
        (Advanced { cuda_graph: true, ..Advanced::default() }, "CUDA graph"),
    ] {
        let text = worker().check(spec(device, ModelId::Resnet18, adv)).unwrap_err().to_string();
        assert!(text.contains(word), "{text}");
    }
}
}
