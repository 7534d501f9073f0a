//! Precision lessons beyond autocast: casting the weights once (`model.half()` /
//! `.to(torch.bfloat16)`) against autocast, which keeps fp32 weights and casts them inside
//! every call; and TF32, the CUDA math mode that silently lowers fp32 matmuls and
//! convolutions.

use protocol::{
    Advanced, Autocast, ChartKind, GradMode, ModelId, RunFailure, RunSpec,
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
    pitfall: "with torch.autocast(device_type=\"cuda\", dtype=torch.float16), torch.inference_mode():\n    y = model(x)  # model as loaded (fp32)",
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

    // The question's comparison, by the rule that grades it: autocast's parameters against
    // the plain model's.
    let (autocast_band, compared) = super::kit::bytes_compared(autocast_bytes as f64, fp32_bytes as f64);
    let holds = 2 * cast_bytes == fp32_bytes
        && still_fp32
        && autocast_band == protocol::Choice::Same
        && [d_auto, d_cast].iter().all(|d| *d > 0.0 && *d < 0.1 * scale);
    let text = format!(
        "Parameters under {low} autocast against the plain fp32 model's: {compared}. Parameters: fp32 {} B, under {low} autocast {} B (still float32: {still_fp32}), {low} weights {} B ({:.3}× fp32). Largest output difference from fp32: autocast {d_auto:.3e}, {low} weights {d_cast:.3e}, against an output scale of {scale:.3e}.",
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
    labels: ["fp32 matmul with TF32 not allowed", "the same matmul with TF32 allowed"],
    setup: tf32_setup,
    needs: Needs::Cuda("The switches this card turns (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) reach only cuBLAS and cuDNN: TF32 runs on NVIDIA GPUs' tensor cores, from Ampere on."),
    claim: "On NVIDIA GPUs from Ampere on, allowing TF32 runs fp32 matmuls on tensor cores with their inputs rounded to a 10-bit mantissa: faster, with a small change in the result. PyTorch leaves it off for matmuls and on for cuDNN convolutions. allow_tf32 and the newer fp32_precision settings are two spellings of one switch, and mixing them can leave a state the old one cannot read.",
    statements: &[
        Said::torch("By default PyTorch leaves TF32 off for matmuls, torch.backends.cuda.matmul.allow_tf32 False (torch.get_float32_matmul_precision() \"highest\"), and on for cuDNN convolutions, torch.backends.cudnn.allow_tf32 True.", "test_precision.py::test_tf32_is_off_for_matmuls_and_on_for_convolutions_by_default"),
        Said::torch("PyTorch 2.11 also spells these switches torch.backends.cuda.matmul.fp32_precision and torch.backends.cudnn.conv.fp32_precision: by default \"none\" (it defers to its parent settings, none of which allows TF32) and \"tf32\".", "test_precision.py::test_tf32_is_off_for_matmuls_and_on_for_convolutions_by_default"),
        Said::torch("The two spellings share one state (aten/src/ATen/Context.cpp): allow_tf32 = True writes \"tf32\", False writes \"ieee\" for matmuls and \"none\" for cuDNN, and torch.set_float32_matmul_precision(\"high\") writes \"tf32\" for CUDA's matmuls and for oneDNN's.", "test_precision.py::test_the_old_switches_write_the_new_settings"),
        Said::torch("Mixing them can leave a state the old spelling cannot report: after torch.backends.cuda.matmul.fp32_precision = \"tf32\" alone, or the cuDNN conv and rnn settings set alone, reading allow_tf32 raises a RuntimeError.", "test_precision.py::test_mixing_the_two_spellings_can_raise"),
        Said::source("With TF32 allowed for CUDA matmuls, PyTorch sets cuBLAS's handle to its TF32 tensor-op math mode (CUBLAS_TF32_TENSOR_OP_MATH) for fp32 matmuls, which on GPUs from Ampere on rounds the inputs to TF32's 10-bit mantissa and sums the products in fp32.", "aten/src/ATen/cuda/CublasHandlePool.cpp", "getCurrentCUDABlasHandle", "cards"),
        Said::run("The result changes by a small, non-zero amount: this run's largest difference between the two products, against the product's largest magnitude.", &["largest output difference", "output scale"]),
        Said::run("On this GPU the TF32 product is faster than strict fp32: this run's two p50s and the 95% interval of their ratio.", &["p50 TF32 off", "p50 TF32 on", "off / on, 95% interval low", "off / on, 95% interval high"]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    pitfall: "torch.backends.cuda.matmul.allow_tf32 = False  # new spelling: torch.backends.cuda.matmul.fp32_precision = \"ieee\"\ntorch.backends.cudnn.allow_tf32 = False\ny = a @ b  # a, b: 4096×4096 float32 on the GPU",
    fix: "torch.backends.cuda.matmul.allow_tf32 = True  # new spelling: torch.backends.cuda.matmul.fp32_precision = \"tf32\"\ntorch.backends.cudnn.allow_tf32 = True\ny = a @ b",
    threshold: "CUDA with compute capability 8.0 or newer: a 4096×4096 fp32 matmul with TF32 not allowed and allowed (torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 both False, then both True; 20 alternating passes each). Confirmed when the outputs differ by a non-zero amount below 1% of the output's largest magnitude and the 95% bootstrap interval of the p50 ratio (off / on) lies wholly above 1; refuted when the outputs are identical (no TF32 kernel ran), differ by 1% or more, or the interval lies wholly below 1.05; inconclusive otherwise. Not applicable on a CPU (the switches reach only cuBLAS and cuDNN) or a GPU older than Ampere",
    question: super::ratio("A 4096×4096 fp32 matmul on a GPU: its p50 with TF32 allowed, as a multiple of its p50 with TF32 not allowed?", "p50 TF32 on", "p50 TF32 off", super::SAME_TIME),
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
        "Two random fp32 matrices; the same product with TF32 not allowed (torch.backends.cuda.matmul.allow_tf32 = False, and the cuDNN switch off) and allowed (both switches on)".into(),
        "The two settings alternate; also read: the largest difference between the two results, against the result's largest magnitude".into(),
        format!("A judgment of what dominates: the product is 2·{TF32_N}³ ≈ 1.4e11 floating-point operations on 192 MiB of operands and result; strict fp32 runs on the GPU's fp32 (CUDA-core) units, TF32 on its tensor cores"),
        "Needs compute capability 8.0 (Ampere) or newer".into(),
    ]
}

fn tf32(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    if !ctx.cuda() {
        return Ok(Outcome::new(
            Decision::not_applicable("Not on a CPU: the switches this card turns reach only cuBLAS and cuDNN, NVIDIA's GPU libraries."),
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
