//! The `tf32` card ([`TF32`]): TF32: fp32 matmuls that are not quite fp32

use super::*;

pub const P50_TF32_OFF: FigureName = FigureName::new("p50 TF32 off", Unit::Ms);
pub const P50_TF32_ON: FigureName = FigureName::new("p50 TF32 on", Unit::Ms);
pub const OFF_OVER_ON_CI_LOW: FigureName = FigureName::new("off / on, 95% interval low", Unit::Ratio);
pub const OUTPUT_SCALE: FigureName = FigureName::new("output scale", Unit::Abs);
pub const OFF_OVER_ON_CI_HIGH: FigureName = FigureName::new("off / on, 95% interval high", Unit::Ratio);

pub const TF32: Card = Card {
    id: "tf32",
    title: "TF32: fp32 matmuls that are not quite fp32",
    asks: "What does allowing TF32 do to an fp32 matmul's result and its latency?",
    labels: ["fp32 matmul with TF32 not allowed", "fp32 matmul with TF32 allowed"],
    setup: tf32_setup,
    needs: Needs::Cuda("The switches this card turns (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) reach only cuBLAS and cuDNN: TF32 runs on NVIDIA GPUs' tensor cores, from Ampere on."),
    claim: "On NVIDIA GPUs from Ampere on, allowing TF32 runs fp32 matmuls on tensor cores with their inputs rounded to a 10-bit mantissa: faster, with a small change in the result. PyTorch leaves it off for matmuls and on for cuDNN convolutions. allow_tf32 and the newer fp32_precision settings are two spellings of one switch, and mixing them can leave a state the old one cannot read.",
    statements: &[
        Said::torch("By default PyTorch leaves TF32 off for matmuls, torch.backends.cuda.matmul.allow_tf32 False (torch.get_float32_matmul_precision() \"highest\"), and on for cuDNN convolutions, torch.backends.cudnn.allow_tf32 True.", "test_precision.py::test_tf32_is_off_for_matmuls_and_on_for_convolutions_by_default"),
        Said::torch("PyTorch 2.11 also spells these switches torch.backends.cuda.matmul.fp32_precision and torch.backends.cudnn.conv.fp32_precision: by default \"none\" (it defers to its parent settings, none of which allows TF32) and \"tf32\".", "test_precision.py::test_tf32_is_off_for_matmuls_and_on_for_convolutions_by_default"),
        Said::torch("The two spellings share one state (aten/src/ATen/Context.cpp): allow_tf32 = True writes \"tf32\", False writes \"ieee\" for matmuls and \"none\" for cuDNN, and torch.set_float32_matmul_precision(\"high\") writes \"tf32\" for CUDA's matmuls and for oneDNN's.", "test_precision.py::test_the_old_switches_write_the_new_settings"),
        Said::torch("Mixing them can leave a state the old spelling cannot report: after torch.backends.cuda.matmul.fp32_precision = \"tf32\" alone, or the cuDNN conv and rnn settings set alone, reading allow_tf32 raises a RuntimeError.", "test_precision.py::test_mixing_the_two_spellings_can_raise"),
        Said::source("With TF32 allowed for CUDA matmuls, PyTorch sets cuBLAS's handle to its TF32 tensor-op math mode (CUBLAS_TF32_TENSOR_OP_MATH) for fp32 matmuls, which on GPUs from Ampere on rounds the inputs to TF32's 10-bit mantissa and sums the products in fp32.", "aten/src/ATen/cuda/CublasHandlePool.cpp", "getCurrentCUDABlasHandle", "cards"),
        Said::run("The result changes by a small, non-zero amount: this run's largest difference between the two products, against the product's largest magnitude.", &[LARGEST_OUTPUT_DIFFERENCE, OUTPUT_SCALE]),
        Said::run("On this GPU the TF32 product is faster than strict fp32: this run's two p50s and the 95% interval of their ratio.", &[P50_TF32_OFF, P50_TF32_ON, OFF_OVER_ON_CI_LOW, OFF_OVER_ON_CI_HIGH]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    pitfall: "torch.backends.cuda.matmul.allow_tf32 = False  # new spelling: torch.backends.cuda.matmul.fp32_precision = \"ieee\"\ntorch.backends.cudnn.allow_tf32 = False\ny = a @ b  # a, b: 4096×4096 float32 on the GPU",
    fix: "torch.backends.cuda.matmul.allow_tf32 = True  # new spelling: torch.backends.cuda.matmul.fp32_precision = \"tf32\"\ntorch.backends.cudnn.allow_tf32 = True\ny = a @ b",
    threshold: "CUDA with compute capability 8.0 or newer: a 4096×4096 fp32 matmul with TF32 not allowed and allowed (torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 both False, then both True; 20 alternating passes each). Confirmed when the outputs differ by a non-zero amount below 1% of the output's largest magnitude and the 95% bootstrap interval of the p50 ratio (off / on) lies wholly above 1; refuted when the outputs are identical (no TF32 kernel ran), differ by 1% or more, or the interval lies wholly below 1.05; inconclusive otherwise. Not applicable on a CPU (the switches reach only cuBLAS and cuDNN) or a GPU older than Ampere",
    question: super::super::ratio("A 4096×4096 fp32 matmul on a GPU: its p50 with TF32 allowed, as a multiple of its p50 with TF32 not allowed?", P50_TF32_ON, P50_TF32_OFF, super::super::SAME_TIME),
    experiment: tf32,
};

/// The side of tf32's square matrices, and its passes per setting.
pub(super) const TF32_N: i64 = 4096;
pub(super) const TF32_ROUNDS: usize = 20;

/// The line tf32's report is measured on.
pub(super) fn tf32_line() -> String {
    format!("a {TF32_N}×{TF32_N} fp32 matmul, {TF32_ROUNDS} passes each")
}

pub(super) fn tf32_setup(_: &Ctx) -> Vec<String> {
    vec![
        tf32_line(),
        "Two random fp32 matrices; the same product with TF32 not allowed (torch.backends.cuda.matmul.allow_tf32 = False, and the cuDNN switch off) and allowed (both switches on)".into(),
        "The two settings alternate; also read: the largest difference between the two results, against the result's largest magnitude".into(),
        format!("A judgment of what dominates: the product is 2·{TF32_N}³ ≈ 1.4e11 floating-point operations on 192 MiB of operands and result; strict fp32 runs on the GPU's fp32 (CUDA-core) units, TF32 on its tensor cores"),
        "Needs compute capability 8.0 (Ampere) or newer".into(),
    ]
}

pub(super) fn tf32(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
            fig(LARGEST_OUTPUT_DIFFERENCE, diff),
            fig(OUTPUT_SCALE, scale),
            fig(P50_TF32_OFF, p(&times[0], 50.0)),
            fig(P50_TF32_ON, p(&times[1], 50.0)),
            fig(OFF_OVER_ON_CI_LOW, shift.bounds().0),
            fig(OFF_OVER_ON_CI_HIGH, shift.bounds().1),
        ]
        .into_iter()
        // The question's arms, in its order: on over off.
        .chain(super::super::kit::interval_figures(&TF32.question, &Shift::of(&times[1], &times[0])))
        .collect())
        .series(vec![series(
            P50_MS,
            vec!["fp32 (TF32 off)".into(), "TF32 on".into()],
            vec![p(&times[0], 50.0), p(&times[1], 50.0)],
        )]))
}
