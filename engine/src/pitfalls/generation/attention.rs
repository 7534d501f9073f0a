//! The generation card about which attention kernel runs (`sdpa-backend`):
//! scaled_dot_product_attention on one long prompt's query, key and value, called with
//! is_causal, with an explicit boolean mask and with only the math kernel enabled; each
//! call's kernel as libtorch names it, its peak above the inputs and its time.

use protocol::{ChartKind, DeviceKind, RunFailure, SdpBackend, Table};
use tch::{Kind, Tensor};

use super::super::kit::{fig, mib, series, time_passes, Ctx, Decision, Outcome, Shift};
use super::super::{ratio, Ask, Card, Needs, Said};
use crate::lab::Lab;
use crate::torch_call::{catch_torch, failure, synchronize, tch_device, torch_failure};
use crate::torch_ext::{sdp_choice, SdpFlags, SdpFlagsGuard};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const MATH_ONLY_PEAK_ABOVE_THE_INPUTS: FigureName = FigureName::new("math only: peak above the inputs", Unit::Bytes);
pub const PEAK_ABOVE_THE_INPUTS: FigureName = FigureName::new("peak above the inputs", Unit::Mib);
pub const IS_CAUSAL_PEAK_ABOVE_THE_INPUTS: FigureName = FigureName::new("is_causal: peak above the inputs", Unit::Bytes);
pub const EXPLICIT_MASK_PEAK_ABOVE_THE_INPUTS: FigureName = FigureName::new("explicit mask: peak above the inputs", Unit::Bytes);
pub const SCORE_MATRIX: FigureName = FigureName::new("score matrix", Unit::Bytes);
pub const IS_CAUSAL_P50: FigureName = FigureName::new("is_causal: p50", Unit::Ms);
pub const P50: FigureName = FigureName::new("p50", Unit::Ms);
pub const EXPLICIT_MASK_P50: FigureName = FigureName::new("explicit mask: p50", Unit::Ms);
pub const MATH_ONLY_P50: FigureName = FigureName::new("math only: p50", Unit::Ms);

/// The rules, as pure functions of the figures.
pub mod rules {
    /// `sdpa-backend`: the math kernel held at least the score matrix above its inputs
    /// (it materialises `[batch, heads, queries, keys]`), the default kernel under a
    /// quarter of it (fused: no score matrix).
    pub fn math_materialises_the_scores(math_peak: u64, default_peak: u64, scores: u64) -> bool {
        math_peak >= scores && 4 * default_peak < scores
    }
}

pub const SDPA_BACKEND: Card = Card {
    id: "sdpa-backend",
    title: "Which attention kernel ran, and what the math kernel costs",
    asks: "Which kernel does scaled_dot_product_attention run on a long causal prompt, and what does each kernel hold in memory?",
    labels: ["an explicit boolean causal mask", "is_causal=True, then the kernel pinned to FlashAttention"],
    setup: sdpa_backend_setup,
    needs: Needs::Any,
    claim: "scaled_dot_product_attention runs the first kernel in libtorch's priority order that accepts the call's tensors, flags and mask, and does not say which: with is_causal a fused kernel runs that never holds the score matrix, while the math kernel materialises batch × heads × tokens² scores. Which fused kernel runs, and whether a mask changes it, depends on the device: a CPU's flash kernel and cuDNN attention (libtorch's first choice on Hopper GPUs) take a mask, FlashAttention on CUDA takes none, so where FlashAttention would run, a mask silently selects another kernel.",
    statements: &[
        Said::torch("libtorch 2.11's default priority order is FlashAttention, the memory-efficient kernel, math, then cuDNN attention.", "test_quant_attention.py::test_the_default_priority_order"),
        Said::source("On Hopper GPUs (compute capability 9.0), with the cuDNN PyTorch 2.11's CUDA 13 wheels ship, the first CUDA call puts cuDNN attention first, unless TORCH_CUDNN_SDPA_DEPRIORITIZED=1 is set.", "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp", "check_prefer_cudnn_attention", "cards"),
        Said::source("On CUDA, FlashAttention takes no attention mask, and select_sdp_backend moves on to the next kernel in the order without a warning; cuDNN attention and the memory-efficient kernel take a mask.", "aten/src/ATen/native/transformers/cuda/sdp_utils.cpp", "select_sdp_backend", "cards"),
        Said::torch("On a CPU, libtorch runs its flash kernel for is_causal and for a boolean mask alike.", "test_quant_attention.py::test_the_cpu_runs_its_flash_kernel_for_is_causal_and_for_a_boolean_mask"),
        Said::torch("With only the math kernel enabled, the call runs math.", "test_quant_attention.py::test_the_math_kernel_runs_when_it_is_the_only_one_enabled"),
        Said::torch("On 16-bit inputs the math kernel casts the query, key and value to fp32 first (unless torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) is set), so its score matrix and the softmax of it are fp32: 4 bytes an element, twice a bf16 matrix.", "test_quant_attention.py::test_the_math_kernel_computes_the_scores_of_16_bit_inputs_in_fp32"),
        Said::run("The math kernel held at least the score matrix (batch × heads × tokens² elements at the inputs' element size) above its inputs.", &[MATH_ONLY_PEAK_ABOVE_THE_INPUTS, SCORE_MATRIX]),
        Said::run("libtorch's own choice for is_causal held under a quarter of it: it never materialised the scores.", &[IS_CAUSAL_PEAK_ABOVE_THE_INPUTS, SCORE_MATRIX]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html",
    pitfall: "mask = torch.ones(t, t, dtype=torch.bool).tril()\nout = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
    fix: "out = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n# check which kernel runs:\nwith torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):\n    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # FlashAttention only",
    threshold: "on one long prompt's query, key and value (CPU: 8 heads × 1,024 tokens × 64, fp32; CUDA: 32 heads × 4,096 × 128, bf16), three calls — is_causal (libtorch's default choice), an explicit boolean causal mask, and the math kernel alone — each with the backend libtorch names for it (at::_fused_sdp_choice, the op the call itself consults), its peak above the inputs and its time over interleaved rounds; confirmed when the math kernel's peak is at least the score matrix's bytes (batch × heads × tokens² × element size) and the default's under a quarter of it. The kernels are reported as they ran, and the times with their noise; neither decides. Regime: any device",
    question: ratio("The setup's query, key and value: the peak above the inputs of the call restricted to the math kernel, as a multiple of the is_causal call's (libtorch's own choice of kernel)?", MATH_ONLY_PEAK_ABOVE_THE_INPUTS, IS_CAUSAL_PEAK_ABOVE_THE_INPUTS, Ask::LogScale { min: 0.1, max: 10_000.0, within: 2.0 }),
    experiment: sdpa_backend,
};

/// What sdpa-backend runs: heads, tokens, head dim, dtype and the timed rounds.
fn sdpa_plan(ctx: &Ctx) -> (i64, i64, i64, Kind, usize) {
    if ctx.cuda() {
        (32, 4096, 128, Kind::BFloat16, 20)
    } else {
        (8, 1024, 64, Kind::Float, 8)
    }
}

fn sdpa_describe(ctx: &Ctx) -> String {
    let (heads, tokens, dim, kind, rounds) = sdpa_plan(ctx);
    let fmt = if kind == Kind::BFloat16 { "bf16" } else { "fp32" };
    format!("batch 1, {heads} heads × {tokens} tokens × {dim}, {fmt}, no_grad, {rounds} rounds interleaved")
}

fn sdpa_backend_setup(ctx: &Ctx) -> Vec<String> {
    let (heads, tokens, dim, kind, _) = sdpa_plan(ctx);
    let elt = kind.elt_size_in_bytes() as u64;
    vec![
        sdpa_describe(ctx),
        "Three calls of scaled_dot_product_attention on the same query, key and value: is_causal=True with libtorch's default choice of kernel; an explicit boolean causal mask; is_causal=True with only the math kernel enabled".into(),
        format!(
            "{elt} bytes per element: query, key, value and the output {} each; the boolean mask {}; a [batch, heads, tokens, tokens] score matrix in this dtype: {}{}",
            protocol::format_bytes((heads * tokens * dim) as u64 * elt),
            protocol::format_bytes((tokens * tokens) as u64),
            protocol::format_bytes((heads * tokens * tokens) as u64 * elt),
            if elt < 4 {
                format!(", or {} in fp32, the dtype the math kernel computes it in", protocol::format_bytes((heads * tokens * tokens) as u64 * 4))
            } else {
                String::new()
            },
        ),
        "Measured per call: the kernel libtorch names for it, the peak allocated memory above the inputs (after one unmeasured call), and the time over interleaved rounds".into(),
    ]
}

/// What the explicit mask did to the kernel, in the words of the kernels that ran.
fn mask_note(device: DeviceKind, causal: Option<SdpBackend>, masked: Option<SdpBackend>, mask_bytes: u64) -> String {
    let label = |b: Option<SdpBackend>| b.map_or("none (the call would fail)".to_string(), |b| b.label(device).to_string());
    if causal != masked {
        return format!("The explicit mask changed the kernel from {} to {}, with no warning.", label(causal), label(masked));
    }
    let same = format!(
        "On this device the kernel that ran for is_causal also takes a mask ({}): the mask cost its own {} and the time above, not a kernel switch.",
        label(masked),
        protocol::format_bytes(mask_bytes)
    );
    match (device, masked) {
        (DeviceKind::Cpu, _) => format!("{same} On CUDA, FlashAttention takes no mask: where it is libtorch's first choice, the same call runs another kernel."),
        (DeviceKind::Cuda, Some(SdpBackend::Cudnn)) => format!("{same} FlashAttention takes no mask: where it comes first (before Hopper, or with TORCH_CUDNN_SDPA_DEPRIORITIZED=1), the same call runs another kernel."),
        _ => same,
    }
}

fn sdpa_backend(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (heads, tokens, dim, kind, rounds) = sdpa_plan(ctx);
    let dev = tch_device(ctx.device);
    tch::manual_seed(lab.config().seed);
    let (q, k, v, mask) = catch_torch(|| {
        let make = || Tensor::randn([1, heads, tokens, dim], (kind, dev));
        (make(), make(), make(), Tensor::ones([tokens, tokens], (Kind::Bool, dev)).tril(0))
    })?;
    let flags = SdpFlags::read().map_err(|e| failure(protocol::FailureKind::Internal, e.0))?;
    let math_only = SdpFlags { flash: false, mem_efficient: false, cudnn: false, math: true };
    let names = ["is_causal", "explicit mask", "math only"];
    let attend = |i: usize| -> Result<(Tensor, Option<SdpBackend>), RunFailure> {
        // Variant i: (mask, causal, switches).
        let (m, causal, switches) = match i {
            0 => (None, true, flags),
            1 => (Some(&mask), false, flags),
            _ => (None, true, math_only),
        };
        let _g = SdpFlagsGuard::enter(switches).map_err(|e| failure(protocol::FailureKind::Internal, e.0))?;
        let backend = sdp_choice(&q, &k, &v, m, 0.0, causal, false).map_err(|e| failure(protocol::FailureKind::Internal, e.0))?;
        let out = catch_torch(|| tch::no_grad(|| Tensor::scaled_dot_product_attention(&q, &k, &v, m, 0.0, causal, None, false)))?;
        Ok((out, backend))
    };
    let meter = lab.meter(ctx.device);
    let mut peaks = vec![];
    let mut backends = vec![];
    for i in 0..3 {
        ctx.check()?;
        drop(attend(i)?); // once unmeasured: one-time workspaces out of the way
        synchronize(ctx.device)?;
        let before = meter.read().map_err(torch_failure)?.allocated;
        meter.reset_peak().map_err(torch_failure)?;
        let (out, backend) = attend(i)?;
        synchronize(ctx.device)?;
        let r = meter.read().map_err(torch_failure)?;
        drop(out);
        peaks.push(r.peak_allocated.max(r.allocated).saturating_sub(before));
        backends.push(backend);
    }
    let times = time_passes(ctx, rounds, 3, |i, _| attend(i).map(|(out, _)| out))?;
    let scores = (heads * tokens * tokens) as u64 * kind.elt_size_in_bytes() as u64;
    let holds = rules::math_materialises_the_scores(peaks[2], peaks[0], scores);
    let label = |b: Option<SdpBackend>| b.map_or("none (the call would fail)".to_string(), |b| b.label(ctx.device).to_string());
    let rows: Vec<Vec<String>> = (0..3)
        .map(|i| vec![names[i].to_string(), label(backends[i]), protocol::format_bytes(peaks[i]), format!("{:.3} ms", super::rules::median(&times[i]))])
        .collect();
    let math_time = Shift::of(&times[2], &times[0]);
    let mask_time = Shift::of(&times[1], &times[0]);
    let reason = format!(
        "is_causal ran {} and held {} above its inputs; the explicit mask ran {} ({}); the math kernel held {} against a score matrix of {} and took {} the time of is_causal's kernel; the mask {}",
        label(backends[0]),
        protocol::format_bytes(peaks[0]),
        label(backends[1]),
        protocol::format_bytes(peaks[1]),
        protocol::format_bytes(peaks[2]),
        protocol::format_bytes(scores),
        math_time.describe(),
        mask_time.describe(),
    );
    let notes = vec![mask_note(ctx.device, backends[0], backends[1], mask.numel() as u64)];
    let verdict = match backends[0] {
        Some(b) if !b.materialises_scores() => format!("{reason}: {} never materialised the scores.", label(Some(b))),
        _ => format!("{reason}."),
    };
    let decision = Decision::rule(holds, verdict, format!("{reason}."));
    let x: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    Ok(Outcome::new(decision, sdpa_describe(ctx), ChartKind::Bar)
        .figures(vec![
            fig(IS_CAUSAL_PEAK_ABOVE_THE_INPUTS, peaks[0] as f64),
            fig(EXPLICIT_MASK_PEAK_ABOVE_THE_INPUTS, peaks[1] as f64),
            fig(MATH_ONLY_PEAK_ABOVE_THE_INPUTS, peaks[2] as f64),
            fig(SCORE_MATRIX, scores as f64),
            fig(IS_CAUSAL_P50, super::rules::median(&times[0])),
            fig(EXPLICIT_MASK_P50, super::rules::median(&times[1])),
            fig(MATH_ONLY_P50, super::rules::median(&times[2])),
        ])
        .series(vec![
            series(PEAK_ABOVE_THE_INPUTS, x.clone(), peaks.iter().map(|&b| mib(b)).collect()),
            series(P50, x, times.iter().map(|t| super::rules::median(t)).collect()),
        ])
        .table(Table { columns: vec!["call".into(), "kernel".into(), "peak above the inputs".into(), "p50".into()], rows })
        .notes(notes))
}

#[cfg(test)]
mod tests {
    use super::rules::*;
    use super::*;

    #[test]
    fn the_math_kernel_must_hold_the_scores() {
        let scores = 32 << 20;
        assert!(math_materialises_the_scores(2 * scores, 1 << 20, scores));
        assert!(!math_materialises_the_scores(scores / 2, 1 << 20, scores));
        assert!(!math_materialises_the_scores(2 * scores, scores / 2, scores), "the default held scores too");
    }

    #[test]
    fn the_mask_note_is_worded_from_the_kernels_that_ran() {
        let switched = mask_note(DeviceKind::Cuda, Some(SdpBackend::Flash), Some(SdpBackend::MemoryEfficient), 1 << 20);
        assert!(switched.contains("from FlashAttention to memory-efficient"), "{switched}");
        // Hopper: cuDNN attention for both calls, so no switch is claimed.
        let hopper = mask_note(DeviceKind::Cuda, Some(SdpBackend::Cudnn), Some(SdpBackend::Cudnn), 1 << 20);
        assert!(hopper.contains("takes a mask (cuDNN attention)") && !hopper.contains("changed"), "{hopper}");
        let cpu = mask_note(DeviceKind::Cpu, Some(SdpBackend::Flash), Some(SdpBackend::Flash), 1 << 20);
        assert!(cpu.contains("the CPU flash kernel") && cpu.contains("On CUDA"), "{cpu}");
    }
}
