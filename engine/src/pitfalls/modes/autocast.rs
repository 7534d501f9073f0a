//! autocast: torch.autocast runs eligible ops in 16 bits and leaves the weights in fp32.

use protocol::{Autocast, ChartKind, DeviceKind, FailureKind, GradMode, ModelId, RunFailure, RunSpec};
use tch::{Kind, Tensor};

use super::super::kit::{fig, fig_of, measure, mib, series, Ctx, Decision, Outcome, Setup, Shift};
use super::super::{Card, Needs, Said};
use super::max_abs_diff;
use crate::lab::{forward, Lab};
use crate::models::Model;
use crate::torch_call::{catch_torch, failure, tch_device, torch_failure};
use crate::torch_ext::{AutocastGuard, LowPrecision};
use crate::pitfalls::figures::{P50_LATENCY_MS, PEAK_ABOVE_BASELINE_MIB};
use crate::pitfalls::kit::{INTERVAL_HIGH, INTERVAL_LOW};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const EACH_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("{} peak above baseline", Unit::Bytes);
pub const FP32_P50: FigureName = FigureName::new("fp32 p50", Unit::Ms);
pub const FP32_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("fp32 peak above baseline", Unit::Bytes);
pub const EACH_P50: FigureName = FigureName::new("{} p50", Unit::Ms);
pub const EACH_MAX_OUTPUT_FP32_OUTPUT: FigureName = FigureName::new("{} max |output - fp32 output|", Unit::Abs);
pub const EACH_LINEAR_LAYER_OUTPUT_IS: FigureName = FigureName::new("{} linear layer output is {}", Unit::Bool);
pub const EACH_LAYER_NORM_OUTPUT_IS_FP32: FigureName = FigureName::new("{} layer_norm output is fp32", Unit::Bool);
pub const EACH_SOFTMAX_OUTPUT_IS_FP32: FigureName = FigureName::new("{} softmax output is fp32", Unit::Bool);
pub const EACH_LATENCY_VS_FP32: FigureName = FigureName::new("{} latency vs fp32", Unit::Ratio);
pub const WEIGHTS_STILL_FLOAT32: FigureName = FigureName::new("weights still float32", Unit::Bool);
pub const FP32_OUTPUT_MAX_VALUE: FigureName = FigureName::new("fp32 output max |value|", Unit::Abs);
pub const FP16_MAX_OUTPUT_FP32_OUTPUT: FigureName = EACH_MAX_OUTPUT_FP32_OUTPUT.instance("fp16 max |output - fp32 output|");
pub const FP16_P50: FigureName = EACH_P50.instance("fp16 p50");
pub const FP16_P50_OVER_FP32_P50_CI_LOW: FigureName = INTERVAL_LOW.instance("fp16 p50 / fp32 p50, 95% interval low");
pub const FP16_LINEAR_LAYER_OUTPUT_IS_FP16: FigureName = EACH_LINEAR_LAYER_OUTPUT_IS.instance("fp16 linear layer output is fp16");
pub const FP16_P50_OVER_FP32_P50_CI_HIGH: FigureName = INTERVAL_HIGH.instance("fp16 p50 / fp32 p50, 95% interval high");

pub const AUTOCAST: Card = Card {
    id: "autocast",
    title: "autocast lowers the math, not the weights",
    asks: "What does running a model under torch.autocast change, compared with plain fp32: the weights, the math, the output, the latency?",
    labels: ["model.half()", "fp32 model, forward pass inside torch.autocast(fp16)"],
    setup: autocast_setup,
    needs: Needs::Any,
    claim: "Autocast runs convolutions and matmuls (linear layers included) in fp16 or bf16 and leaves the weights in fp32, casting them as those ops run; the output differs a little from fp32, and whether it is faster depends on the hardware.",
    statements: &[
        Said::torch("Inside torch.autocast, convolutions and linear layers with fp32 weights return the low-precision dtype, and the weights stay fp32.", "test_grad_modes.py::test_autocast_runs_convolutions_and_linear_layers_low_and_keeps_fp32_weights"),
        Said::run("Here a linear layer of the model returned fp16 inside the fp16 region.", &[FP16_LINEAR_LAYER_OUTPUT_IS_FP16]),
        Said::run("Here the weights were still float32 after the passes.", &[WEIGHTS_STILL_FLOAT32]),
        Said::torch("With autograd on and under torch.no_grad(), autocast casts each weight that requires grad once and keeps the copy until the region ends.", "test_autocast.py::test_weights_are_cast_once_with_grad_and_under_no_grad"),
        Said::torch("Under torch.inference_mode() it casts the weights again at every call.", "test_autocast.py::test_inference_mode_skips_the_cast_cache"),
        Said::source("On CUDA, autocast runs layer_norm and group_norm in fp32 whatever the region's dtype.", "aten/src/ATen/autocast_mode.h", "AT_FORALL_FP32", "more-cards"),
        Said::source("On CUDA, it runs softmax, log_softmax and sum in fp32 too.", "aten/src/ATen/autocast_mode.h", "AT_FORALL_FP32_SET_OPT_DTYPE", "more-cards"),
        Said::torch("A CPU's autocast has no such rule for them: BatchNorm, LayerNorm, softmax and sum keep a low-precision input's dtype there.", "test_grad_modes.py::test_cpu_autocast_leaves_batchnorm_layer_norm_and_softmax_in_the_input_dtype"),
        Said::torch("An fp32 tensor plus a low-precision one is fp32 by type promotion, so a residual sum, and a model ending in one, can return fp32 under autocast.", "test_grad_modes.py::test_a_residual_sum_of_fp32_and_low_precision_is_fp32"),
        Said::torch("16-bit floats keep fewer mantissa bits, so the output differs from fp32 by a little, never by nothing.", "test_grad_modes.py::test_autocast_output_differs_a_little_from_fp32"),
        Said::run("Here the model's output under fp16 autocast differed from the fp32 output by a non-zero amount below 10% of its largest magnitude.", &[FP16_MAX_OUTPUT_FP32_OUTPUT, FP32_OUTPUT_MAX_VALUE]),
        Said::run("Whether autocast is faster depends on the hardware's 16-bit arithmetic: this run's fp16 / fp32 p50 ratio and its 95% interval say it for this device.", &[FP16_P50, FP32_P50, FP16_P50_OVER_FP32_P50_CI_LOW, FP16_P50_OVER_FP32_P50_CI_HIGH]),
    ],
    source: "https://pytorch.org/docs/stable/amp.html",
    pitfall: "model.half()  # casts the stored weights to fp16",
    fix: "with torch.autocast(device_type=\"cuda\", dtype=torch.float16):\n    y = model(x)",
    threshold: "confirmed when, for every low precision the device runs, a linear layer of the model (its own fp32 weight, inside the same autocast region) yields the low-precision dtype, the weights are still float32 afterwards, and the model's output differs from fp32 by a non-zero amount below 10% of the fp32 output's largest magnitude. The model's own output dtype is reported but does not decide: an output that comes from a residual sum or, on CUDA, from a norm is fp32 under autocast (the transformer's is: its residual sums add fp32 to the low-precision branch, and on CUDA autocast runs its LayerNorm in fp32). Regime: any; dtypes and differences do not depend on scale. Latency is reported, not judged: it depends on the device's 16-bit arithmetic (tensor cores on a GPU; on a CPU, fp16 or bf16 units, without which the 16-bit kernels are slower)",
    question: super::super::ratio("ResNet-18 on this device: its p50 latency inside torch.autocast(fp16) as a multiple of its p50 in plain fp32?", FP16_P50, FP32_P50, super::super::SAME_TIME),
    experiment: autocast,
};

/// The first (by name) 2-D weight of the model: a linear layer's, which autocast must run in
/// low precision.
fn a_linear_weight(model: &Model) -> Option<(String, Tensor)> {
    let mut weights: Vec<(String, Tensor)> = model
        .vs
        .variables()
        .into_iter()
        .filter(|(n, t)| n.ends_with("weight") && t.dim() == 2)
        .collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    weights.into_iter().next()
}

/// The dtypes ops return inside one autocast region.
struct Dtypes {
    /// `weight` applied as a linear layer to an fp32 input.
    linear: Kind,
    /// layer_norm of that (low-precision) output.
    layer_norm: Kind,
    /// softmax of it.
    softmax: Kind,
}

/// The dtype of `weight` applied as a linear layer inside an autocast region, and of a
/// layer_norm and a softmax of its output in the same region (fp32 on CUDA, whose autocast
/// lists them; the input's dtype on a CPU, whose autocast does not).
fn dtypes_under(
    device: DeviceKind,
    autocast: Autocast,
    weight: &Tensor,
    batch: i64,
) -> Result<Dtypes, RunFailure> {
    let precision = match autocast {
        Autocast::Fp16 => LowPrecision::Fp16,
        _ => LowPrecision::Bf16,
    };
    let _region = AutocastGuard::enter(device, precision).map_err(torch_failure)?;
    let _no_grad = tch::no_grad_guard();
    catch_torch(|| {
        let probe = Tensor::randn([batch, weight.size()[1]], (Kind::Float, weight.device()));
        let out = probe.linear(weight, None::<Tensor>);
        let width = out.size()[1];
        Dtypes {
            linear: out.kind(),
            layer_norm: out.layer_norm([width], None::<Tensor>, None::<Tensor>, 1e-5, true).kind(),
            softmax: out.softmax(-1, None::<Kind>).kind(),
        }
    })
}

/// What the autocast card runs: the model, batch and base (fp32, no_grad) spec.
fn autocast_plan(ctx: &Ctx) -> Setup {
    Setup::new(ctx, ModelId::Resnet18, (4, 64), GradMode::NoGrad)
}

fn autocast_setup(ctx: &Ctx) -> Vec<String> {
    let s = autocast_plan(ctx);
    vec![
        s.describe(),
        "Measured: fp32 weights and input with autocast off; then the same model inside torch.autocast in fp16, and in bf16, each where this device runs it (the torch.autocast variant; the model.half() variant is not run here)".into(),
        format!(
            "eval() and torch.no_grad(); each arm is one run of {}; also read: the dtype a linear layer's output has inside the region (and a layer_norm's and a softmax's of it), the weights' dtype afterwards, and the largest difference from the fp32 output",
            super::super::memory::iterations(&s.spec)
        ),
        "Each pass under autocast also casts the weights and the activations fed to its convolutions and linear layers from fp32 to 16 bits".into(),
        sixteen_bit_arithmetic(ctx.device),
    ]
}

/// The device facts a guess at autocast's speed needs: the CPU's 16-bit arithmetic units
/// (from its flags), or the GPU's math for each precision.
fn sixteen_bit_arithmetic(device: DeviceKind) -> String {
    match device {
        DeviceKind::Cpu => {
            static FLAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
            let flags = FLAGS.get_or_init(|| {
                let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
                info.lines()
                    .find(|l| l.starts_with("flags"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.split_whitespace().map(String::from).collect())
                    .unwrap_or_default()
            });
            let has = |names: [&str; 2]| {
                if names.iter().any(|n| flags.iter().any(|f| f == n)) { "present" } else { "none" }
            };
            format!(
                "This CPU's fp16 arithmetic units (AVX512-FP16 or AMX-FP16): {}; its bf16 units (AVX512-BF16 or AMX-BF16): {}; fp32 runs on its vector units",
                has(["avx512_fp16", "amx_fp16"]),
                has(["avx512_bf16", "amx_bf16"])
            )
        }
        DeviceKind::Cuda => "On this GPU, fp16 convolutions and matmuls run on tensor cores (Volta and newer); fp32 ones run without TF32 here (both TF32 switches off)".into(),
    }
}

fn autocast(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let setup = autocast_plan(ctx);
    let (model_id, b, size) = (setup.model, setup.batch, setup.size);
    let base = setup.spec.clone();
    let fp32 = measure(lab, ctx, base.clone())?;
    // Output comparison on one fixed input through the cached model.
    let i = lab.model_index(model_id, ctx.device, size)?;
    let model = lab.model(i);
    tch::manual_seed(1);
    let x = catch_torch(|| model.input(b, size, tch_device(ctx.device)))?;
    let reference = forward(model, &x, &base, ctx.device)?;
    let scale = catch_torch(|| reference.abs().max().double_value(&[]))?;
    let (weight_name, weight) = a_linear_weight(model)
        .ok_or_else(|| failure(FailureKind::Internal, "the model has no linear layer"))?;
    let mut figures = vec![
        fig(FP32_P50, fp32.latency_ms.p50),
        fig(
            FP32_PEAK_ABOVE_BASELINE,
            fp32.memory.peak_above_baseline_bytes as f64,
        ),
    ];
    let mut labels = vec!["fp32".to_string()];
    let (mut p50, mut peak) = (
        vec![fp32.latency_ms.p50],
        vec![mib(fp32.memory.peak_above_baseline_bytes)],
    );
    let mut notes = vec![];
    let mut ok = true;
    for autocast in [Autocast::Fp16, Autocast::Bf16] {
        let support = lab
            .machine()
            .autocast_support(ctx.device)
            .into_iter()
            .find(|s| s.autocast == autocast);
        if let Some(s) = support.as_ref().filter(|s| !s.supported) {
            notes.push(format!("{} skipped: {}", autocast.as_str(), s.note));
            continue;
        }
        if let Some(s) = support.filter(|s| !s.note.is_empty()) {
            notes.push(format!("{}: {}", autocast.as_str(), s.note));
        }
        let spec = RunSpec {
            autocast,
            ..base.clone()
        };
        let model = lab.model(i);
        let out = forward(model, &x, &spec, ctx.device)?;
        let diff = catch_torch(|| max_abs_diff(&out, &reference))?;
        let low = if autocast == Autocast::Fp16 {
            Kind::Half
        } else {
            Kind::BFloat16
        };
        let dtypes = dtypes_under(ctx.device, autocast, &weight, b as i64)?;
        let linear = dtypes.linear;
        ok &= linear == low && diff > 0.0 && diff < 0.1 * scale;
        notes.push(format!(
            "{} linear layer ({weight_name}) output dtype: {linear:?}",
            autocast.as_str()
        ));
        notes.push(format!(
            "{}: layer_norm of that output: {:?}; softmax of it: {:?}",
            autocast.as_str(),
            dtypes.layer_norm,
            dtypes.softmax
        ));
        notes.push(format!(
            "{} output dtype: {:?}",
            autocast.as_str(),
            out.kind()
        ));
        drop(out);
        let r = measure(lab, ctx, spec)?;
        let name = autocast.as_str();
        if autocast == Autocast::Fp16 {
            // The question's arms, in its order: fp16 over fp32.
            figures.extend(super::super::kit::interval_figures(
                &AUTOCAST.question,
                &Shift::of(&r.latencies(), &fp32.latencies()),
            ));
        }
        figures.push(fig_of(EACH_P50, &[&name], r.latency_ms.p50));
        figures.push(fig_of(
            EACH_PEAK_ABOVE_BASELINE, &[&name],
            r.memory.peak_above_baseline_bytes as f64,
        ));
        figures.push(fig_of(
            EACH_MAX_OUTPUT_FP32_OUTPUT, &[&name],
            diff,
        ));
        figures.push(fig_of(
            EACH_LINEAR_LAYER_OUTPUT_IS, &[&name, &name],
            f64::from(u8::from(linear == low)),
        ));
        figures.push(fig_of(
            EACH_LAYER_NORM_OUTPUT_IS_FP32, &[&name],
            f64::from(u8::from(dtypes.layer_norm == Kind::Float)),
        ));
        figures.push(fig_of(
            EACH_SOFTMAX_OUTPUT_IS_FP32, &[&name],
            f64::from(u8::from(dtypes.softmax == Kind::Float)),
        ));
        figures.push(fig_of(
            EACH_LATENCY_VS_FP32, &[&name],
            r.latency_ms.p50 / fp32.latency_ms.p50,
        ));
        labels.push(name.into());
        p50.push(r.latency_ms.p50);
        peak.push(mib(r.memory.peak_above_baseline_bytes));
    }
    let weights_fp32 = lab
        .model(i)
        .vs
        .trainable_variables()
        .iter()
        .all(|t| t.kind() == Kind::Float);
    ok &= weights_fp32;
    figures.push(fig(
        WEIGHTS_STILL_FLOAT32,
        f64::from(u8::from(weights_fp32)),
    ));
    figures.push(fig(FP32_OUTPUT_MAX_VALUE, scale));
    let decision = if labels.len() == 1 {
        Decision::not_applicable("This device runs neither fp16 nor bf16 autocast.")
    } else {
        Decision::rule(
            ok,
            "Inside autocast a linear layer ran in low precision, the output differed slightly from fp32, and the weights stayed float32. Latency depends on the hardware: see the figures.",
            "A linear layer under autocast had an unexpected dtype, the output difference was zero or too large, or the weights changed dtype.",
        )
    };
    Ok(
        Outcome::new(decision, setup.describe(), ChartKind::Bar)
            .figures(figures)
            .series(vec![
                series(P50_LATENCY_MS, labels.clone(), p50),
                series(PEAK_ABOVE_BASELINE_MIB, labels, peak),
            ])
            .notes(notes),
    )
}
