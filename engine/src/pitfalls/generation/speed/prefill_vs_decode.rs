//! The `prefill-vs-decode` card ([`PREFILL_VS_DECODE`]): Prefill keeps the arithmetic busy; decode, at a FLOP or less per byte, cannot

use super::*;

pub const PREFILL: FigureName = FigureName::new("prefill", Unit::GflopPerS);
pub const DECODE: FigureName = FigureName::new("decode", Unit::GflopPerS);
pub const DECODE_ARITHMETIC_INTENSITY: FigureName = FigureName::new("decode arithmetic intensity", Unit::FlopPerByte);
pub const DECODE_BANDWIDTH: FigureName = FigureName::new("decode bandwidth", Unit::GbPerS);
pub const ACHIEVED: FigureName = FigureName::new("achieved", Unit::GflopPerS);

pub const PREFILL_VS_DECODE: Card = Card {
    id: "prefill-vs-decode",
    title: "Prefill keeps the arithmetic busy; decode, at a FLOP or less per byte, cannot",
    asks: "What FLOP/s do a generation's prefill (the whole prompt in one pass) and its decode steps (one token each) reach?",
    labels: ["decode speed estimated from the device's peak FLOP/s", "decode speed estimated from its memory bandwidth"],
    setup: prefill_vs_decode_setup,
    needs: Needs::Any,
    claim: "The prefill multiplies every weight by the whole prompt at once and reaches several times decode's FLOP/s. A decode step at batch 1 does about 2 FLOPs per weight it reads: about 0.5 FLOP per byte in fp32, as here (1 in fp16 or bf16), far too few to keep a device's arithmetic busy, so its time is set by reading the weights and the cache, or for a model this small by each op's fixed cost.",
    statements: &[
        Said::torch("A matmul does 2 FLOPs per weight per row it multiplies: the prefill multiplies every weight by all the prompt's tokens at once, a decode step by one token per sequence.", "test_generation.py::test_a_matmul_does_two_flops_per_weight_per_row"),
        Said::run("So a decode step at batch 1 does about 2 FLOPs per weight it reads: here, in fp32 (4 bytes per weight), about 0.5 FLOP per byte of weights and cache read.", &[DECODE_ARITHMETIC_INTENSITY]),
        Said::run("Here the prefill reached more than 4× decode's FLOP/s.", &[PREFILL, DECODE]),
        Said::run("At so few FLOPs per byte a decode step is bound by moving its bytes, or by per-op overhead, not by arithmetic: the bandwidth it achieved is reported, against the device's in the verdict.", &[DECODE_BANDWIDTH]),
    ],
    source: "https://arxiv.org/abs/2402.16363",
    pitfall: "# tokens per second from the device's peak FLOP/s\ntokens_per_s = peak_flops / (2 * n_params)",
    fix: "# tokens per second from the bytes each step reads, at batch b\ntokens_per_s = b * bandwidth / (weights_bytes + kv_bytes)",
    threshold: "confirmed when the prefill's achieved FLOP/s is more than 4× the decode steps' and decode's arithmetic intensity (FLOPs per step / weights + KV bytes read) is under 4 FLOPs per byte. Both are placed against the device's peak (datasheet on a known GPU, measured on a CPU). Regime: any device; batch 1",
    question: crate::pitfalls::ratio("The setup's decoder at batch 1: the decode steps' achieved FLOP/s as a multiple of the prefill's? (A judgment: the FLOPs each phase does per byte it reads, against what this device computes and moves per second.)", DECODE, PREFILL, crate::pitfalls::Ask::LogScale { min: 0.0001, max: 10.0, within: 2.0 }),
    experiment: prefill_vs_decode,
};

/// What prefill-vs-decode runs: one generation.
pub(super) fn prefill_vs_decode_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let (prompt, n) = if ctx.cuda() { (1024, 64) } else { (128, 24) };
    gen_spec(ctx, model, 1, prompt, n, KvCacheKind::Dynamic, GradMode::NoGrad)
}

pub(super) fn prefill_vs_decode_setup(ctx: &Ctx) -> Vec<String> {
    let spec = prefill_vs_decode_plan(ctx);
    let mut lines = vec![setup(&spec), shape(spec.model), format!("{}, no_grad", dtypes(&spec))];
    if let Some(d) = spec.model.decoder() {
        let (c, b) = (&d.config, spec.batch as u64);
        let prompt = spec.resolved_input_size() as u64;
        let n = spec.generate.as_ref().map_or(0, |g| g.new_tokens) as u64;
        let gflop = |f: u64| f as f64 / 1e9;
        lines.push(format!(
            "Work: the prefill is one pass over the {prompt} prompt tokens, {:.3} GFLOP (2 per weight per token, plus attention); each decode step one token, {:.4} GFLOP at the middle of the {n} new tokens",
            gflop(c.forward_flops(b, prompt, prompt, 1)),
            gflop(c.forward_flops(b, 1, prompt + n / 2, 1)),
        ));
    }
    if let Some(d) = spec.model.decoder() {
        let (_, elt) = super::super::weights_dtype(&spec);
        let held = d.config.parameters() * elt;
        let read = protocol::decode_weight_bytes(&d.config, held, spec.batch as u64, elt);
        lines.push(format!(
            "Bytes: the weights hold {}; a decode step reads about {} of them (every matrix, one embedding row per sequence) and the cache",
            protocol::format_bytes(held),
            protocol::format_bytes(read)
        ));
    }
    lines.push("FLOP/s: each phase's FLOPs over its measured time (decode: the median step)".into());
    lines
}

pub(super) fn prefill_vs_decode(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let spec = prefill_vs_decode_plan(ctx);
    let (_, g) = generate(lab, ctx, spec.clone())?;
    let decode_mean = rules::median(&decode_ms(&g));
    let decode_tflops = g.decode_flops_per_step as f64 / (decode_mean.max(1e-9) * 1e9);
    let holds = rules::phases_differ(g.prefill_tflops, decode_tflops, g.decode_intensity_flops_per_byte);
    let reason = format!(
        "prefill {:.3} TFLOP/s{}, decode {:.4} TFLOP/s at {:.2} FLOP/byte, reading {}",
        g.prefill_tflops,
        g.prefill_percent_of_peak.map(|p| format!(" ({p:.1}% of peak)")).unwrap_or_default(),
        decode_tflops,
        g.decode_intensity_flops_per_byte,
        g.decode_bandwidth_gb_s
            .map(|b| format!("{b:.1} GB/s{}", g.decode_bandwidth_percent.map(|p| format!(" ({p:.1}% of the device's)")).unwrap_or_default()))
            .unwrap_or_default()
    );
    let decision = Decision::rule(holds, format!("{reason}."), format!("{reason}."));
    let mut notes = vec![];
    if let Some(src) = &g.bandwidth_source {
        notes.push(format!("Peaks: {src}."));
    }
    Ok(Outcome::new(decision, setup(&spec), ChartKind::Bar)
        .figures(vec![
            fig(PREFILL, g.prefill_tflops * 1000.0),
            fig(DECODE, decode_tflops * 1000.0),
            fig(DECODE_ARITHMETIC_INTENSITY, g.decode_intensity_flops_per_byte),
            fig(DECODE_BANDWIDTH, g.decode_bandwidth_gb_s.unwrap_or(0.0)),
        ])
        .series(vec![series(ACHIEVED, vec!["prefill".into(), "decode".into()], vec![g.prefill_tflops * 1000.0, decode_tflops * 1000.0])])
        .notes(notes))
}
