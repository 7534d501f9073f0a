//! The physical invariants of the advanced settings (see `common` for the per-device
//! macro): half and bf16 weights hold exactly half of fp32's parameter bytes;
//! channels_last gives the input and every convolution weight NHWC strides and leaves the
//! output's values as they were; an input copied from host memory adds exactly its own
//! bytes to the pass's peak; pinned memory is pinned on CUDA and refused, with the reason,
//! on a CPU.

use crate::common;

use engine::lab::{convert_model, is_channels_last, make_input, parameter_bytes, LabConfig};
use engine::{MeasureError, Worker};
use engine::models::Model;
use engine::torch_call::tch_device;
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

use crate::common::worker;

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
    // statistics, the input): it halves, to the byte on the CPU; on CUDA each tensor is
    // rounded to the allocator's blocks on both sides (small BatchNorm vectors round alike
    // in either dtype), so within that slack (`common::Bytes`), and strictly smaller.
    let sizes = |w: WeightsDtype| -> Vec<u64> {
        let m = built(ModelId::Resnet18, device, w, MemoryFormat::Contiguous);
        let mut v: Vec<u64> = m.vs.variables().values().map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64).collect();
        v.push(2 * 3 * 64 * 64 * if w == WeightsDtype::Fp32 { 4 } else { 2 });
        v
    };
    let bytes = common::bytes(device);
    let slack = bytes.slack(sizes(WeightsDtype::Fp32)) + 2 * bytes.slack(sizes(WeightsDtype::Bf16));
    bytes.assert_eq(2 * half.memory.baseline_bytes, fp32.memory.baseline_bytes, slack, "2 × the bf16 baseline against the fp32 baseline");
    assert!(half.memory.baseline_bytes < fp32.memory.baseline_bytes, "{:?} vs {:?}", half.memory, fp32.memory);
    assert_eq!(half.memory.leaked_bytes, 0);
    assert!(half.spec.label().contains("bf16 weights"));
}
}

per_device! {
fn channels_last_gives_the_input_and_conv_weights_nhwc_strides_and_the_same_output(device) {
    let adv = Advanced { memory_format: MemoryFormat::ChannelsLast, ..Advanced::default() };
    // One model, converted in place: two separately built models would only share weights
    // if no other test drew from the global RNG between their seed and their build.
    let mut model = built(ModelId::Resnet18, device, WeightsDtype::Fp32, MemoryFormat::Contiguous);
    let plain = make_input(&model, 2, 64, &Advanced::default(), device).unwrap();
    assert!(!is_channels_last(plain.first()));
    let x = make_input(&model, 2, 64, &adv, device).unwrap().first().shallow_clone();
    assert!(is_channels_last(&x) && !x.is_contiguous(), "input strides {:?}", x.stride());
    // The same values in the default layout, through the NCHW weights.
    let x_nchw = x.contiguous();
    let b = tch::no_grad(|| model.net.forward_t(&x_nchw, false));
    convert_model(&mut model, WeightsDtype::Fp32, MemoryFormat::ChannelsLast).expect("conversion");
    let convs: Vec<_> = model.vs.variables().into_iter().filter(|(_, t)| t.dim() == 4).collect();
    assert!(convs.len() >= 20, "ResNet-18 has 20 convolutions");
    for (name, t) in &convs {
        assert!(is_channels_last(t), "{name}: strides {:?}", t.stride());
    }
    // Same values, another layout: the outputs agree to float rounding.
    let a = tch::no_grad(|| model.net.forward_t(&x, false));
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
    // Two runs' peaks: on CUDA within the copy's rounding and one large block's remainder
    // (a cuDNN workspace live at the peak may be handed a larger cached block).
    let bytes = common::bytes(device);
    bytes.assert_eq(p, d + input_bytes, bytes.slack([input_bytes, common::CUDA_SMALL + 1]), format!("pageable peak {p} vs on-device {d}"));
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
            let x = make_input(&m, 2, 64, &adv, device).unwrap().first().shallow_clone();
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

/// The CUDA math switches' invariants, asserted on a GPU by scripts/gpu-check.sh (which
/// runs this binary's ignored tests there).
mod cuda_math {
    use engine::lab::forward;
    use engine::Machine;
    use engine::torch_call::tch_device;
    use engine::torch_ext::{BackendFlags, BackendFlagsGuard};
    use protocol::{Advanced, DeviceKind, GradMode, ModelId, RunSpec};
    use tch::{Kind, Tensor};

    fn flags(tf32: bool, benchmark: bool) -> BackendFlags {
        BackendFlags { tf32_matmul: tf32, tf32_cudnn: tf32, cudnn_benchmark: benchmark }
    }

    #[test]
    #[ignore = "needs a CUDA device: scripts/gpu-check.sh runs it on one"]
    fn tf32_changes_an_fp32_matmul_by_a_bounded_amount() {
        let _one = crate::common::cuda_lock();
        crate::common::require(DeviceKind::Cuda);
        let cc = Machine::probe().compute_capability().unwrap_or(0);
        assert!(cc >= 80, "TF32 needs compute capability 8.0; this GPU has {cc}");
        let dev = tch_device(DeviceKind::Cuda);
        tch::manual_seed(1);
        let a = Tensor::randn([2048, 2048], (Kind::Float, dev));
        let b = Tensor::randn([2048, 2048], (Kind::Float, dev));
        let off = { let _g = BackendFlagsGuard::enter(flags(false, false)).unwrap(); a.matmul(&b) };
        let on = { let _g = BackendFlagsGuard::enter(flags(true, false)).unwrap(); a.matmul(&b) };
        let diff = (&on - &off).abs().max().double_value(&[]);
        let scale = off.abs().max().double_value(&[]);
        // TF32 keeps 10 mantissa bits: products change at about 1e-3 relative, sums of
        // 2048 of them stay far below 1% of the largest output.
        assert!(diff > 0.0, "TF32 on gave the identical result: no TF32 kernel ran");
        assert!(diff < 0.01 * scale, "difference {diff} at scale {scale}");
    }

    #[test]
    #[ignore = "needs a CUDA device: scripts/gpu-check.sh runs it on one"]
    fn cudnn_benchmark_pays_at_the_first_pass_of_a_new_shape() {
        let _one = crate::common::cuda_lock();
        crate::common::require(DeviceKind::Cuda);
        let w = engine::Worker::start(engine::WorkerConfig::default()).unwrap();
        let bench = Advanced { cudnn_benchmark: true, ..Advanced::default() };
        // Shapes this process has not seen: the autotuner runs on their first pass.
        for batch in [77u32, 78] {
            let spec = RunSpec {
                model: ModelId::Resnet18,
                device: protocol::DeviceChoice::Cuda,
                batch,
                grad: GradMode::NoGrad,
                advanced: bench,
                ..RunSpec::default()
            };
            let times = w
                .call(move |lab| {
                    let i = lab.model_index(ModelId::Resnet18, DeviceKind::Cuda, 224)?;
                    let m = lab.model(i);
                    let x = engine::torch_call::catch_torch(|| m.input(batch, 224, tch_device(DeviceKind::Cuda)))?;
                    let mut t = vec![];
                    for _ in 0..8 {
                        engine::torch_call::synchronize(DeviceKind::Cuda)?;
                        let start = std::time::Instant::now();
                        drop(forward(m, &x, &spec, DeviceKind::Cuda)?);
                        engine::torch_call::synchronize(DeviceKind::Cuda)?;
                        t.push(start.elapsed().as_secs_f64());
                    }
                    Ok::<_, protocol::RunFailure>(t)
                })
                .unwrap()
                .unwrap();
            let mut steady = times[2..].to_vec();
            steady.sort_by(f64::total_cmp);
            let median = steady[steady.len() / 2];
            assert!(times[0] > 1.5 * median, "batch {batch}: first {:.4} s vs steady {median:.4} s", times[0]);
        }
    }

    /// Replaying a captured pass gives eager's output; a run with graph replay is measured
    /// like any other (every sample, memory back to the baseline) and allocates no more at
    /// its peak than eager, the graph's buffers living in its own pool; with grad enabled it
    /// is refused with the reason.
    #[test]
    #[ignore = "needs a CUDA device: scripts/gpu-check.sh runs it on one"]
    fn cuda_graph_replay_matches_eager_and_its_run_is_measured() {
        let _one = crate::common::cuda_lock();
        crate::common::require(DeviceKind::Cuda);
        engine::torch_ext::cuda_graphs_built().expect("this build captures CUDA graphs");
        let w = engine::Worker::start(engine::WorkerConfig::default()).unwrap();
        let graph = Advanced { cuda_graph: true, ..Advanced::default() };
        let spec = RunSpec {
            model: ModelId::Resnet18,
            device: protocol::DeviceChoice::Cuda,
            batch: 4,
            grad: GradMode::InferenceMode,
            warmup: 2,
            iters: 10,
            advanced: graph,
            ..RunSpec::default()
        };
        let s = spec.clone();
        let (diff, scale) = w
            .call(move |lab| {
                let i = lab.model_index(ModelId::Resnet18, DeviceKind::Cuda, 224)?;
                let m = lab.model(i);
                let x = engine::torch_call::catch_torch(|| m.input(4, 224, tch_device(DeviceKind::Cuda)))?;
                let eager = forward(m, &x, &RunSpec { advanced: Advanced::default(), ..s.clone() }, DeviceKind::Cuda)?;
                let captured = engine::lab::cuda_graph::capture(m, &x, &s, DeviceKind::Cuda)?;
                let replayed = captured.replay()?;
                engine::torch_call::synchronize(DeviceKind::Cuda)?;
                let diff = (&replayed - &eager).abs().max().double_value(&[]);
                let scale = eager.abs().max().double_value(&[]);
                Ok::<_, protocol::RunFailure>((diff, scale))
            })
            .unwrap()
            .unwrap();
        assert!(diff <= 1e-3 * scale, "replay differs from eager by {diff} at scale {scale}");

        let replay = w.measure(spec.clone(), |_| {}).expect("graph run");
        let eager = w
            .measure(RunSpec { advanced: Advanced::default(), ..spec.clone() }, |_| {})
            .expect("eager run");
        assert_eq!(replay.samples.len(), 10);
        assert_eq!(replay.memory.leaked_bytes, 0, "the graph's pool was released");
        assert!(
            replay.memory.peak_above_baseline_bytes <= eager.memory.peak_above_baseline_bytes,
            "replay peak {} above eager's {}",
            replay.memory.peak_above_baseline_bytes,
            eager.memory.peak_above_baseline_bytes
        );
        let refused = w
            .check(RunSpec { grad: GradMode::Enabled, ..spec })
            .unwrap_err()
            .to_string();
        assert!(refused.contains("no_grad"), "{refused}");
    }
}
