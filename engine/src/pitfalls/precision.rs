//! Precision lessons beyond autocast: casting the weights once (`model.half()` /
//! `.to(torch.bfloat16)`) against autocast, which keeps fp32 weights and casts them inside
//! every call; and TF32, the CUDA math mode that silently lowers fp32 matmuls and
//! convolutions.

use protocol::{
    cpu_reason, Advanced, Autocast, ChartKind, GradMode, ModelId, RunFailure, RunSpec,
    WeightsDtype,
};
use tch::{Kind, Tensor};

use super::kit::{fig, measure, mib, p, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::{Card, Needs, Said};
use crate::lab::{forward, parameter_bytes, Lab};
use crate::torch_call::{catch_torch, tch_device, torch_failure};
use crate::torch_ext::{BackendFlags, BackendFlagsGuard};

pub const HALF_WEIGHTS: Card = Card {
    id: "half-weights",
    title: "Cast the weights once, or autocast them every call",
    asks: "What do torch.autocast and model.half() each do to the bytes the weights take, and to the output?",
    labels: ["the model as loaded, forward pass inside torch.autocast(fp16)", "model.half() before the pass, input cast too"],
    setup: half_weights_setup,
    needs: Needs::Any,
    claim: "model.half() / model.to(torch.bfloat16) stores the weights in 16 bits: half the parameter bytes of fp32. Autocast saves no weight memory: it keeps the fp32 weights and casts them when an op runs, holding the cast copies for the rest of the region with autograd on and under no_grad (not under inference_mode).",
    why: "Autocast casts an eligible op's inputs, weights included, when the op runs; the cast copies are cached only while grad is enabled and the region is open. Casting the model once changes the stored parameters themselves; the input must then be cast too.",
    statements: &[
        Said::run("Casting the model once (model.half(), or .to(torch.bfloat16)) stores its parameters in 16 bits: exactly half the fp32 model's parameter bytes.", &["fp32 parameters", "* weights parameters"]),
        Said::run("Autocast leaves the parameters as they are: after a pass under autocast they are still float32 and take the fp32 bytes.", &["fp32 parameters", "* autocast parameters"]),
        Said::torch("Autocast casts an eligible op's inputs, the weights included, to 16 bits when the op runs; the parameters stay fp32.", "test_autocast.py::test_matmuls_run_low_and_the_parameters_stay_fp32"),
        Said::torch("With autograd on and under torch.no_grad(), autocast caches each weight's 16-bit copy, so a weight is cast once however many calls use it, and the copies are held until the autocast region ends.", "test_autocast.py::test_weights_are_cast_once_with_grad_and_under_no_grad"),
        Said::torch("The cache is emptied when the region ends: the next region casts the weights again.", "test_autocast.py::test_the_cache_is_emptied_when_the_region_ends"),
        Said::torch("Under torch.inference_mode() autocast skips the cache: every call casts the weights again, and no copy is held between calls.", "test_autocast.py::test_inference_mode_skips_the_cast_cache"),
        Said::torch("A model cast once refuses an fp32 input: the input must be cast too.", "test_autocast.py::test_a_model_cast_once_refuses_an_fp32_input"),
        Said::run("Both 16-bit variants differ from the fp32 output by a little, never by nothing: 16-bit floats keep fewer mantissa bits.", &["* autocast: largest output difference", "* weights: largest output difference"]),
    ],
    source: "https://pytorch.org/docs/stable/amp.html",
    pitfall: "with torch.autocast(device_type=\"cuda\", dtype=torch.float16), torch.inference_mode():\n    y = model(x)  # the model's weights are fp32",
    fix: "model = model.half()  # cast once; the input too: x = x.half()\nwith torch.inference_mode():\n    y = model(x)",
    threshold: "confirmed when the cast model's parameters take exactly half the bytes of the fp32 model's, the fp32 weights used under autocast are still float32 after the call, and both low-precision outputs (autocast, cast weights) differ from fp32 by a non-zero amount below 10% of the fp32 output's largest magnitude. Peaks and latencies under grad, no_grad and inference_mode are reported (latency as a ratio with its 95% bootstrap interval), not judged: they depend on whether the device has 16-bit units. Regime: any; byte counts are exact. The low precision is fp16 on a GPU, bf16 on a CPU (where fp16 has no arithmetic units)",
    question: super::ratio("ResNet-18 loaded in fp32 and run as in A (forward pass inside 16-bit autocast: fp16 on a GPU, bf16 on a CPU): the bytes its parameters take after the pass, against the same model never run under autocast? (fp32 is 4 bytes an element, fp16 and bf16 are 2.)", "* autocast parameters", "fp32 parameters", super::SAME_BYTES),
    experiment: half_weights,
};

pub(super) fn max_rel_diff(out: &Tensor, reference: &Tensor) -> Result<(f64, f64), RunFailure> {
    catch_torch(|| {
        let diff = (out.to_kind(Kind::Float) - reference.to_kind(Kind::Float))
            .abs()
            .max()
            .double_value(&[]);
        let scale = reference.abs().max().double_value(&[]);
        (diff, scale)
    })
}

/// What half-weights runs: the model and batch (its spec is fp32 under no_grad), and the
/// 16-bit precision this device uses (fp16 on a GPU, bf16 on a CPU, where fp16 has no
/// arithmetic units).
fn half_plan(ctx: &Ctx) -> (Setup, Autocast, WeightsDtype) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    if ctx.cuda() {
        (setup, Autocast::Fp16, WeightsDtype::Fp16)
    } else {
        (setup, Autocast::Bf16, WeightsDtype::Bf16)
    }
}

fn half_weights_setup(ctx: &Ctx) -> Vec<String> {
    let (s, _, weights) = half_plan(ctx);
    let low = weights.as_str();
    vec![
        s.describe(),
        format!("A: the fp32 model, forward pass inside torch.autocast({low}); B: the weights cast once to {low} (the input cast too); the fp32 model without autocast as the reference"),
        format!("Bytes per parameter element: 4 in fp32, 2 in {low}; the parameter bytes are read after the passes"),
        format!("Also measured: each variant's peak memory and latency with autograd on, under no_grad and under inference_mode, one run of {} each", super::memory::iterations(&s.spec)),
    ]
}

fn half_weights(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (setup, autocast, weights) = half_plan(ctx);
    let (model_id, b, size) = (setup.model, setup.batch, setup.size);
    let low = weights.as_str();
    let base = setup.spec.clone();
    let cast = Advanced {
        weights,
        ..Advanced::default()
    };
    // Parameter bytes and outputs on one fixed input.
    let i32_ = lab.model_index(model_id, ctx.device, size)?;
    let fp32_bytes = parameter_bytes(lab.model(i32_));
    tch::manual_seed(1);
    let x = catch_torch(|| lab.model(i32_).input(b, size, tch_device(ctx.device)))?;
    let reference = forward(lab.model(i32_), &x, &base, ctx.device)?;
    let with_autocast = RunSpec {
        autocast,
        ..base.clone()
    };
    let out_autocast = forward(lab.model(i32_), &x, &with_autocast, ctx.device)?;
    let still_fp32 = lab
        .model(i32_)
        .vs
        .trainable_variables()
        .iter()
        .all(|t| t.kind() == Kind::Float);
    let autocast_bytes = parameter_bytes(lab.model(i32_));
    let ic = lab.model_index_as(model_id, ctx.device, size, &cast)?;
    let cast_bytes = parameter_bytes(lab.model(ic));
    let x_low = catch_torch(|| x.cast_floats(crate::lab::kind_of(weights)))?;
    let cast_spec = RunSpec {
        advanced: cast,
        ..base.clone()
    };
    let out_cast = forward(lab.model(ic), &x_low, &cast_spec, ctx.device)?;
    let (d_auto, scale) = max_rel_diff(&out_autocast, &reference)?;
    let (d_cast, _) = max_rel_diff(&out_cast, &reference)?;
    drop((reference, out_autocast, out_cast, x, x_low));

    let holds = 2 * cast_bytes == fp32_bytes
        && still_fp32
        && autocast_bytes == fp32_bytes
        && [d_auto, d_cast].iter().all(|d| *d > 0.0 && *d < 0.1 * scale);
    let text = format!(
        "Parameters: fp32 {} B, under {low} autocast {} B (still float32: {still_fp32}), {low} weights {} B ({:.3}× fp32). Largest output difference from fp32: autocast {d_auto:.3e}, {low} weights {d_cast:.3e}, against an output scale of {scale:.3e}.",
        fp32_bytes,
        autocast_bytes,
        cast_bytes,
        cast_bytes as f64 / fp32_bytes.max(1) as f64
    );
    let mut figures = vec![
        fig("fp32 parameters", fp32_bytes as f64, "bytes"),
        fig(&format!("{low} autocast parameters"), autocast_bytes as f64, "bytes"),
        fig(&format!("{low} weights parameters"), cast_bytes as f64, "bytes"),
        fig(&format!("{low} autocast: largest output difference"), d_auto, "abs"),
        fig(&format!("{low} weights: largest output difference"), d_cast, "abs"),
    ];
    let rows = [
        ("fp32".to_string(), base.clone()),
        (format!("{low} autocast"), with_autocast),
        (format!("{low} weights"), cast_spec),
    ];
    let mut out_series = vec![];
    let mut notes = vec![];
    for grad in GradMode::ALL {
        let mut peaks = vec![];
        let mut lat = vec![];
        for (name, spec) in &rows {
            let r = measure(lab, ctx, RunSpec { grad, ..spec.clone() })?;
            figures.push(fig(&format!("{name}, {}: peak above baseline", grad.as_str()), r.memory.peak_above_baseline_bytes as f64, "bytes"));
            figures.push(fig(&format!("{name}, {}: p50", grad.as_str()), r.latency_ms.p50, "ms"));
            peaks.push(mib(r.memory.peak_above_baseline_bytes));
            lat.push(r.latencies());
        }
        let shift = Shift::of(&lat[1], &lat[2]);
        notes.push(format!(
            "{}: autocast / cast-weights latency {} ({} iterations each).",
            grad.as_str(),
            shift.describe(),
            lat[2].len()
        ));
        out_series.push(series(
            &format!("peak above baseline, {} (MiB)", grad.as_str()),
            "MiB",
            rows.iter().map(|(n, _)| n.clone()).collect(),
            peaks,
        ));
    }
    Ok(Outcome::new(
        Decision::rule(holds, text.clone(), text),
        setup.describe(),
        ChartKind::Bar,
    )
    .figures(figures)
    .series(out_series)
    .notes(notes))
}

pub const TF32: Card = Card {
    id: "tf32",
    title: "TF32: fp32 matmuls that are not quite fp32",
    asks: "What does allowing TF32 do to an fp32 matmul's result and its latency?",
    labels: ["the convolutions' TF32 switch at its default", "float32 matmul precision set to \"high\""],
    setup: tf32_setup,
    needs: Needs::Cuda("TF32 is a mode of NVIDIA GPUs' tensor cores (Ampere and newer); a CPU has no TF32 mode to turn on."),
    claim: "On GPUs from Ampere on, TF32 runs fp32 matmuls and convolutions on tensor cores with a 10-bit mantissa: faster, with a small, bounded change in the result. PyTorch leaves it off for matmuls and on for cuDNN convolutions.",
    why: "torch.backends.cuda.matmul.allow_tf32 (default False) and torch.backends.cudnn.allow_tf32 (default True) choose tensor-core TF32 kernels for fp32 inputs; the inputs' mantissas are rounded to 10 bits, the accumulation stays fp32.",
    statements: &[],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    pitfall: "torch.backends.cudnn.allow_tf32  # the switch for convolutions",
    fix: "torch.set_float32_matmul_precision(\"high\")  # \"high\": TF32 allowed; \"highest\": strict fp32",
    threshold: "CUDA with compute capability 8.0 or newer: a 4096×4096 fp32 matmul with TF32 off and on (20 alternating passes each). Confirmed when the outputs differ by a non-zero amount below 1% of the output's largest magnitude and the 95% bootstrap interval of the p50 ratio (off / on) lies wholly above 1; refuted when the outputs are identical (no TF32 kernel ran) or the interval lies wholly below 1.05; inconclusive otherwise. Not applicable on a CPU (no TF32 mode) or an older GPU",
    question: super::ratio("A 4096×4096 fp32 matmul on a GPU: its p50 with TF32 on, as a multiple of its p50 with TF32 off?", "p50 TF32 on", "p50 TF32 off", super::SAME_TIME),
    experiment: tf32,
};

/// The side of tf32's square matrices, and its passes per setting.
const TF32_N: i64 = 4096;
const TF32_ROUNDS: usize = 20;

/// The line tf32's report is measured on.
fn tf32_line() -> String {
    format!("a {TF32_N}×{TF32_N} fp32 matmul, {TF32_ROUNDS} passes each")
}

fn tf32_setup(_: &Ctx) -> Vec<String> {
    vec![
        tf32_line(),
        "Two random fp32 matrices; the same product with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, and the cuDNN switch off) and on (both switches on)".into(),
        "The two settings alternate; also read: the largest difference between the two results, against the result's largest magnitude".into(),
        "Needs compute capability 8.0 (Ampere) or newer".into(),
    ]
}

fn tf32(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    if !ctx.cuda() {
        return Ok(Outcome::new(
            Decision::not_applicable(format!("Not on a CPU: {}.", cpu_reason("tf32"))),
            String::new(),
            ChartKind::Bar,
        ));
    }
    if let Some(cc) = lab.machine().compute_capability().filter(|cc| *cc < 80) {
        return Ok(Outcome::new(
            Decision::not_applicable(format!("TF32 needs compute capability 8.0 (Ampere) or newer; this GPU has {}.{}.", cc / 10, cc % 10)),
            String::new(),
            ChartKind::Bar,
        ));
    }
    let device = tch_device(ctx.device);
    tch::manual_seed(1);
    let (a, b) = catch_torch(|| {
        (
            Tensor::randn([TF32_N, TF32_N], (Kind::Float, device)),
            Tensor::randn([TF32_N, TF32_N], (Kind::Float, device)),
        )
    })?;
    let flags = |on: bool| BackendFlags {
        tf32_matmul: on,
        tf32_cudnn: on,
        cudnn_benchmark: false,
    };
    let matmul = |on: bool| -> Result<Tensor, RunFailure> {
        let _g = BackendFlagsGuard::enter(flags(on)).map_err(torch_failure)?;
        catch_torch(|| a.matmul(&b))
    };
    let (off, on) = (matmul(false)?, matmul(true)?);
    let (diff, scale) = max_rel_diff(&on, &off)?;
    drop((off, on));
    let times = time_passes(ctx, TF32_ROUNDS, 2, |variant, _| matmul(variant == 1))?;
    let shift = Shift::of(&times[0], &times[1]);
    let text = format!(
        "TF32 changed the output by at most {diff:.3e} (output scale {scale:.3e}, {:.2e} relative); fp32 / TF32 latency {}.",
        diff / scale.max(f64::MIN_POSITIVE),
        shift.describe()
    );
    let decision = if diff == 0.0 || diff >= 0.01 * scale {
        Decision::rule(false, "", text)
    } else {
        Decision::latency(&shift, 1.0, 1.05, text.clone(), text)
    };
    Ok(Outcome::new(decision, tf32_line(), ChartKind::Bar)
        .figures(vec![
            fig("largest output difference", diff, "abs"),
            fig("output scale", scale, "abs"),
            fig("p50 TF32 off", p(&times[0], 50.0), "ms"),
            fig("p50 TF32 on", p(&times[1], 50.0), "ms"),
            fig("off / on, 95% interval low", shift.bounds().0, "ratio"),
            fig("off / on, 95% interval high", shift.bounds().1, "ratio"),
        ]
        .into_iter()
        // The question's arms, in its order: on over off.
        .chain(super::kit::interval_figures(&TF32.question, &Shift::of(&times[1], &times[0])))
        .collect())
        .series(vec![series(
            "p50 (ms)",
            "ms",
            vec!["fp32 (TF32 off)".into(), "TF32 on".into()],
            vec![p(&times[0], 50.0), p(&times[1], 50.0)],
        )]))
}
