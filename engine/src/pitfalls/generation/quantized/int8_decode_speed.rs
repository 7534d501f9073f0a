//! The `int8-decode-speed` card ([`INT8_DECODE_SPEED`]): int8 weights read fewer bytes; the kernel decides whether decoding gets faster

use super::*;

pub const INT8_WEIGHTS_READ_PER_STEP: FigureName = FigureName::new("int8: weights read per step", Unit::Bytes);
pub const INT8_PER_TOKEN_P50: FigureName = FigureName::new("int8: per-token p50", Unit::Ms);
pub const UNQUANTIZED_PER_TOKEN_P50: FigureName = FigureName::new("unquantized: per-token p50", Unit::Ms);
pub const UNQUANTIZED_WEIGHTS_READ_PER_STEP: FigureName = FigureName::new("unquantized: weights read per step", Unit::Bytes);
pub const EACH_DECODE_STEP: FigureName = FigureName::new("{}: decode step", Unit::Ms);
pub const INT8_DECODE_STEP: FigureName = FigureName::new("int8: decode step", Unit::Ms);
pub const INT8_PER_TOKEN_P50_OVER_UNQUANTIZED_PER_TOKEN_P50_CI_LOW: FigureName = INTERVAL_LOW.instance("int8: per-token p50 / unquantized: per-token p50, 95% interval low");
pub const INT8_PER_TOKEN_P50_OVER_UNQUANTIZED_PER_TOKEN_P50_CI_HIGH: FigureName = INTERVAL_HIGH.instance("int8: per-token p50 / unquantized: per-token p50, 95% interval high");

/// "1.2 MiB in the linear layers, 8.0 MiB in the rest (embedding, norms, LM head)", by the
/// formula, for `spec`'s quantization.
pub(in crate::pitfalls::generation) fn weights_split(spec: &RunSpec) -> String {
    let Some(d) = spec.model.decoder() else { return String::new() };
    let act = super::super::weights_dtype(spec).1;
    let w = protocol::weights_formula(&d.config, spec.generate.as_ref().map_or(protocol::LinearQuant::NONE, |g| g.quant()), act);
    format!("{} in the linear layers, {} in the rest (embedding, norms, LM head)", protocol::format_bytes(w.linear_bytes), protocol::format_bytes(w.other_bytes))
}

pub const INT8_DECODE_SPEED: Card = Card {
    id: "int8-decode-speed",
    title: "int8 weights read fewer bytes; the kernel decides whether decoding gets faster",
    asks: "What does weight-only int8 quantization do to a decoder's per-token decode time?",
    labels: ["int8 weights, timed on one device", "int8 weights, timed against the unquantized weights on the serving device"],
    setup: int8_decode_speed_setup,
    needs: Needs::Any,
    claim: "Weight-only int8 reads fewer bytes per decode step than the weights it replaces (one byte a weight, against bf16's two and fp32's four), but a step's time follows the kernel that reads them, not the bytes: with PyTorch 2.11's own int8 matmul (torch._weight_int8pack_mm), whose CUDA kernel is one thread per output element in fp32, a decode step can be slower than with the unquantized weights. Time int8 against the unquantized weights on the serving device, with the kernel that will serve.",
    statements: &[
        Said::run("The int8 layers hold one byte per weight and a scale per output channel, so an int8 step read fewer weight bytes than an unquantized one.", &[INT8_WEIGHTS_READ_PER_STEP, UNQUANTIZED_WEIGHTS_READ_PER_STEP]),
        Said::torch("torch._weight_int8pack_mm dequantizes inside the matmul, by one scale per output channel, and returns the activations' dtype.", "test_quant_attention.py::test_the_int8_matmul_dequantizes_inside_and_returns_the_activations_dtype"),
        Said::source("On CUDA, PyTorch 2.11's torch._weight_int8pack_mm casts the activations and the scales to fp32 and runs one thread per output element, each walking its weight row one byte at a time: a simple kernel, not one built to read the weights at the GPU's bandwidth.", "aten/src/ATen/native/cuda/int8mm.cu", "_weight_int8pack_mm_cuda", "cards"),
        Said::run("On this device the int8 step took longer than the unquantized step, though it read fewer bytes: the time followed the kernel, not the bytes.", &[INT8_PER_TOKEN_P50, UNQUANTIZED_PER_TOKEN_P50, INT8_PER_TOKEN_P50_OVER_UNQUANTIZED_PER_TOKEN_P50_CI_LOW, INT8_PER_TOKEN_P50_OVER_UNQUANTIZED_PER_TOKEN_P50_CI_HIGH]),
    ],
    source: "https://github.com/pytorch-labs/gpt-fast",
    pitfall: "model = quantize_int8(model)\n# per-token time measured on a laptop, or on another GPU than the serving one",
    fix: "# per-token decode time on the serving device, interleaved with the unquantized weights\nfor variant in (bf16_model, int8_model):\n    p50 = median(step_times(variant, new_tokens=64))",
    threshold: "per-token decode p50 over interleaved rounds of both (unquantized: fp32 on a CPU, bf16 on CUDA), as the ratio int8 / unquantized with its 95% bootstrap interval: confirmed when the interval lies wholly above 1 (int8 slower though it reads fewer bytes), refuted when it lies wholly below 1 (int8 faster), inconclusive otherwise. The reason gives the bytes each step read and the bandwidth achieved. Regime: batch 1, PyTorch 2.11's own int8 kernel (torch._weight_int8pack_mm) on either device; a fused int8 kernel (torch.compile's, torchao's) is another kernel and may give another answer",
    question: ratio("The setup's decoder on this device: the int8 run's per-token decode p50 against the unquantized run's? (A judgment about the kernels: both runs use PyTorch's own matmuls, int8's being torch._weight_int8pack_mm.)", INT8_PER_TOKEN_P50, UNQUANTIZED_PER_TOKEN_P50, SAME_TIME),
    experiment: int8_decode_speed,
};

/// What int8-decode-speed runs: the unquantized and the int8 generation, and the rounds
/// of both.
pub(super) fn int8_plan(ctx: &Ctx) -> ([RunSpec; 2], usize) {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n, rounds) = if ctx.cuda() { (128, 48, 3) } else { (16, 24, 3) };
    let dtype = activations(ctx);
    let base = gen_spec(ctx, model, 1, prompt, n, protocol::KvCacheKind::Dynamic, protocol::GradMode::InferenceMode);
    ([with(base.clone(), dtype, |_| {}), with(base, dtype, |g| g.weights = WeightQuant::Int8)], rounds)
}

/// "Tiny Llama ..., fp32 activations, 3 rounds interleaved".
pub(super) fn int8_describe(specs: &[RunSpec; 2], rounds: usize) -> String {
    format!("{}, {rounds} rounds interleaved", with_activations(&specs[0]))
}

pub(super) fn int8_decode_speed_setup(ctx: &Ctx) -> Vec<String> {
    let (specs, rounds) = int8_plan(ctx);
    let act = specs[0].advanced.weights.as_str();
    vec![
        int8_describe(&specs, rounds),
        format!(
            "Two runs: unquantized {act} weights ({}); weight-only int8 linear layers, one scale per output channel, dequantized inside each matmul ({})",
            weights_split(&specs[0]),
            weights_split(&specs[1])
        ),
        format!(
            "The int8 layers run torch._weight_int8pack_mm with {act} activations; the unquantized ones a dense {act} matmul ({})",
            if ctx.cuda() { "cuBLAS" } else { "BLAS" }
        ),
        shape(specs[0].model),
        format!("inference_mode, batch {}; each round generates once with each, alternating which goes first", specs[0].batch),
        "Per-token time: the median of every decode step of all rounds (the prompt's pass excluded); the ratio's 95% interval from the same steps".into(),
    ]
}

pub(super) fn int8_decode_speed(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (specs, rounds) = int8_plan(ctx);
    let dtype = specs[0].advanced.weights;
    let (mut times, mut last): ([Vec<f64>; 2], [Option<GenerationReport>; 2]) = Default::default();
    for round in 0..rounds {
        // Alternate which goes first, so neither always runs on a warmer machine.
        for i in [round % 2, 1 - round % 2] {
            ctx.check()?;
            let (_, g) = generate(lab, ctx, specs[i].clone())?;
            times[i].extend(decode_ms(&g));
            last[i] = Some(g);
        }
    }
    let (Some(plain), Some(int8)) = (last[0].take(), last[1].take()) else {
        return Err(failure(protocol::FailureKind::Internal, "no generation measured"));
    };
    let bound = |g: &GenerationReport| {
        let bw = g.decode_bandwidth_gb_s.map_or("?".to_string(), |b| format!("{b:.1} GB/s"));
        // A CPU's small model sits in its caches: a share of DRAM's bandwidth says nothing.
        let pct = match g.decode_bandwidth_percent {
            Some(p) if ctx.cuda() => format!(", {p:.0}% of the device's"),
            _ => String::new(),
        };
        format!("{} of weights per step at {bw}{pct}", protocol::format_bytes(g.weights_bytes))
    };
    let reads = format!("unquantized read {}; int8 {}", bound(&plain), bound(&int8));
    let (device, name) = (if ctx.cuda() { "CUDA device" } else { "CPU" }, dtype.as_str());
    // The question's ratio, int8 over unquantized.
    let shift = Shift::of(&times[1], &times[0]);
    let decision = Decision::latency(
        &shift,
        1.0,
        1.0,
        format!("on this {device} int8 decoded slower than {name}: int8 / {name} = {} ({reads}): the int8 kernel cost more than the bytes it saved.", shift.describe()),
        format!("on this {device} int8 decoded faster than {name}: int8 / {name} = {} ({reads}): here the int8 kernel paid the bytes back.", shift.describe()),
    );
    let mut notes = vec![];
    if ctx.cuda() {
        notes.push("PyTorch 2.11's CUDA torch._weight_int8pack_mm casts the activations and the scales to fp32, runs one thread per output element over its whole weight row, and casts the output back (aten/src/ATen/native/cuda/int8mm.cu).".into());
    } else if cfg!(target_arch = "x86_64") && dtype == WeightsDtype::Fp32 {
        notes.push("On an x86 CPU, torch._weight_int8pack_mm has vectorised kernels for bf16 activations only (aten/src/ATen/native/cpu/int8mm_kernel.cpp); fp32 activations, as here, take its scalar loop.".into());
    }
    let p50 = |v: &[f64]| super::super::rules::median(v);
    let x: Vec<String> = (1..=times[0].len().min(times[1].len())).map(|i| i.to_string()).collect();
    Ok(Outcome::new(decision, int8_describe(&specs, rounds), ChartKind::Line)
        .figures(
            [
                vec![
                    fig(UNQUANTIZED_PER_TOKEN_P50, p50(&times[0])),
                    fig(INT8_PER_TOKEN_P50, p50(&times[1])),
                    fig(UNQUANTIZED_WEIGHTS_READ_PER_STEP, plain.weights_bytes as f64),
                    fig(INT8_WEIGHTS_READ_PER_STEP, int8.weights_bytes as f64),
                ],
                // The question's ratio, int8 over unquantized, with its 95% interval.
                interval_figures(&INT8_DECODE_SPEED.question, &shift),
            ]
            .concat(),
        )
        .series(vec![
            series_of(EACH_DECODE_STEP, &[&dtype.as_str()], x.clone(), times[0].clone()),
            series(INT8_DECODE_STEP, x, times[1].clone()),
        ])
        .notes(notes))
}
