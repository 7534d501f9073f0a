//! The generation card about fp16's range (`fp16-and-bf16-range`): one untimed forward pass of a
//! decoder per dtype (fp32, fp16 and bf16 weights and activations), every layer's output
//! read by a values probe for its largest |value| and its inf and NaN count.

use protocol::{ChartKind, RunFailure, Table, WeightsDtype};
use tch::{Kind, Tensor};

use super::super::kit::{fig, series, Ctx, Decision, Outcome};
use super::super::{value, Ask, Card, Needs, Said};
use super::{decoder, shape};
use crate::lab::Lab;
use crate::models::decoder::{KvCache, Logits};
use crate::models::Model;
use crate::torch_call::{catch_torch, failure, tch_device};
use crate::trace::{Probe, ValuePoint};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const FP32_LARGEST_ACTIVATION: FigureName = FigureName::new("fp32: largest |activation|", Unit::Magnitude);
pub const FP16_NON_FINITE_VALUES: FigureName = FigureName::new("fp16: non-finite values", Unit::Count);
pub const BF16_NON_FINITE_VALUES: FigureName = FigureName::new("bf16: non-finite values", Unit::Count);
pub const FP16_ANY_INF_OR_NAN: FigureName = FigureName::new("fp16: any inf or NaN", Unit::Bool);
pub const FP32_NON_FINITE_VALUES: FigureName = FigureName::new("fp32: non-finite values", Unit::Count);
pub const FP16_NON_FINITE_VALUES_IN_THE_LOGITS: FigureName = FigureName::new("fp16: non-finite values in the logits", Unit::Count);
pub const BF16_NON_FINITE_VALUES_IN_THE_LOGITS: FigureName = FigureName::new("bf16: non-finite values in the logits", Unit::Count);
pub const FP32_LOG10_1_LARGEST_X: FigureName = FigureName::new("fp32: log10(1 + largest |x|)", Unit::Log10);
pub const BF16_LOG10_1_LARGEST_X: FigureName = FigureName::new("bf16: log10(1 + largest |x|)", Unit::Log10);

/// The rules, as pure functions of the figures.
pub mod rules {
    /// `fp16-and-bf16-range`: the fp32 pass reached past fp16's largest finite value (65504)
    /// with every value finite, fp16 produced non-finite values, and bf16 none.
    pub fn fp16_overflows_where_bf16_does_not(fp32_max: f64, fp32_non_finite: u64, fp16_non_finite: u64, bf16_non_finite: u64) -> bool {
        fp32_max > FP16_MAX && fp32_non_finite == 0 && fp16_non_finite > 0 && bf16_non_finite == 0
    }

    /// fp16's largest finite value.
    pub const FP16_MAX: f64 = 65504.0;

    /// How far a preset's scaled activations reach in the fp32 pass (at least): a round
    /// figure the setup states, well past fp16's range.
    pub const REACH: f64 = 250_000.0;
}

pub const FP16_AND_BF16_RANGE: Card = Card {
    id: "fp16-and-bf16-range",
    title: "fp16 overflows where bf16 does not",
    asks: "What happens to a decoder's forward pass in fp16 and in bf16 when one of its activations grows very large?",
    labels: ["weights in fp16 (model.half())", "weights in bf16, each layer's output checked by a forward hook"],
    setup: fp16_and_bf16_range_setup,
    needs: Needs::Any,
    claim: "A decoder whose activations pass 65504, fp16's largest finite value, produces inf and then NaN once its weights and activations are cast to fp16 (model.half()), and stays finite in bf16, whose range is nearly fp32's. fp16 autocast is not the same: it keeps the weights in fp32 and leaves the residual adds to type promotion, so the residual stream stays fp32, while what runs in fp16 overflows where its own output passes 65504: an op autocast casts down (a linear, a matmul) and the ops on its fp16 outputs that autocast leaves in their inputs' dtype (an MLP's SiLU(gate) * up).",
    statements: &[
        Said::torch("fp16's largest finite value is 65504: a value, or a sum, past it is inf.", "test_quant_attention.py::test_fp16_ends_at_65504"),
        Said::torch("bf16 keeps fp32's 8 exponent bits (to about 3.4e38) and pays in precision: 8 significant bits against fp16's 11.", "test_quant_attention.py::test_bf16_keeps_fp32s_range_with_fewer_bits"),
        Said::run("The fp32 pass reached past 65504 with every value finite.", &[FP32_LARGEST_ACTIVATION, FP32_NON_FINITE_VALUES]),
        Said::torch("After model.half() every tensor of the pass is fp16, the residual stream included: a residual sum past 65504 is inf.", "test_quant_attention.py::test_after_half_the_residual_stream_is_fp16"),
        Said::run("The fp16 pass produced inf or NaN, and they reached the logits.", &[FP16_NON_FINITE_VALUES, FP16_NON_FINITE_VALUES_IN_THE_LOGITS]),
        Said::torch("An inf turns to NaN at the next RMSNorm: its row's root mean square is inf, and the inf times its inverse, 0, is NaN.", "test_quant_attention.py::test_an_inf_through_rms_norm_is_nan"),
        Said::run("The bf16 pass produced none.", &[BF16_NON_FINITE_VALUES, BF16_NON_FINITE_VALUES_IN_THE_LOGITS]),
        Said::torch("Under fp16 autocast the weights stay fp32 and a linear layer runs in fp16: its output is inf where it passes 65504.", "test_quant_attention.py::test_a_linear_under_fp16_autocast_overflows_in_its_output"),
        Said::torch("An op autocast does not list runs in its inputs' dtype, so the elementwise ops on fp16 linear outputs run in fp16 too: an MLP's SiLU(gate) * up is inf where the product passes 65504, though neither factor does.", "test_quant_attention.py::test_an_elementwise_op_on_fp16_autocast_outputs_overflows_too"),
        Said::torch("Autocast leaves an add to type promotion: an fp32 residual plus a 16-bit output is fp32, so under autocast the residual stream stays fp32 and may pass 65504 unharmed.", "test_quant_attention.py::test_autocast_leaves_the_residual_add_to_type_promotion"),
    ],
    source: "https://pytorch.org/docs/stable/amp.html",
    pitfall: "model = model.half()\nlogits = model(ids).logits",
    fix: "model = model.to(torch.bfloat16)\n# per layer: its output's count of non-finite values, by forward hooks\nfor name, m in model.model.layers.named_children():\n    m.register_forward_hook(lambda m, i, o, n=name: print(n, (~torch.isfinite(o[0])).sum().item()))",
    threshold: "one untimed forward pass over the same prompt with the model cast to fp32, fp16 and bf16 (weights and activations alike, as model.half() and .to(torch.bfloat16) cast them), each layer's output read by a probe; confirmed when the fp32 pass's largest |activation| passes 65504 with every value finite, the fp16 pass has non-finite values and the bf16 pass none. A team checkpoint is run as it is; a preset's weights are random, and the first layer's MLP (up and down projections) is scaled until the fp32 pass's largest |activation| passes 250,000 (stated in the result). fp16 autocast is not run: its statements rest on PyTorch's own tests. Regime: any device",
    question: value("The setup's decoder and prompt with the model cast to fp16 (model.half()): does the forward pass produce any inf or NaN? (A knowledge check.)", FP16_ANY_INF_OR_NAN, Ask::YesNo),
    experiment: fp16_and_bf16_range,
};

/// Builds the card's decoder in `weights`, the preset's first MLP scaled by `scale` (split
/// between the up and down projections: neither weight itself leaves fp16's range).
fn overflow_model(lab: &Lab, ctx: &Ctx, model: protocol::ModelId, weights: WeightsDtype, scale: f64) -> Result<Model, RunFailure> {
    tch::manual_seed(lab.config().seed);
    let mut m = catch_torch(|| Model::build(model, tch_device(ctx.device), 0))?;
    if scale != 1.0 {
        let vars = m.vs.variables();
        for name in ["model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"] {
            let mut w = vars.get(name).map(|w| w.shallow_clone()).ok_or_else(|| failure(protocol::FailureKind::Internal, format!("no {name}")))?;
            catch_torch(|| tch::no_grad(|| w.f_mul_scalar_(scale.sqrt()).map(drop)))?
                .map_err(|e| failure(protocol::FailureKind::Internal, e.to_string()))?;
        }
    }
    crate::lab::convert_model(&mut m, weights, protocol::MemoryFormat::Contiguous)?;
    Ok(m)
}

/// One untimed pass over `ids`, every layer's output (and the logits) read.
fn probe_values(m: &Model, ids: &Tensor) -> Result<Vec<ValuePoint>, RunFailure> {
    let d = m.net.as_decoder().ok_or_else(|| failure(protocol::FailureKind::Invalid, format!("{} is not a decoder", m.id)))?;
    catch_torch(|| {
        let _guard = tch::no_grad_guard();
        let mut probe = Probe::values();
        let mut cache = KvCache::new(protocol::KvCacheKind::Off, d.config().num_hidden_layers as usize, 0);
        // The decoder marks its LM head last: that point is the logits.
        drop(d.forward(ids, 0, &mut cache, false, Logits::All, &mut probe));
        probe.finish_values()
    })
}

/// What fp16-and-bf16-range runs: the decoder, whether it is a preset (random weights, scaled)
/// and the prompt's length.
fn fp16_and_bf16_range_plan(ctx: &Ctx) -> (protocol::ModelId, bool, i64) {
    let model = decoder(ctx, protocol::decoder::CPU_PRESET, "llama_3_2_1b");
    let preset = model.decoder().is_some_and(|d| matches!(d.source, protocol::decoder::DecoderSource::Preset { .. }));
    (model, preset, if ctx.cuda() { 128 } else { 32 })
}

/// 250000 as "250,000".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "Tiny Llama ..., batch 1, a prompt of 32 tokens, one pass, no_grad".
fn fp16_and_bf16_range_describe(model: protocol::ModelId, tokens: i64) -> String {
    format!("{}, batch 1, a prompt of {tokens} tokens, one pass, no_grad", model.display_name())
}

fn fp16_and_bf16_range_setup(ctx: &Ctx) -> Vec<String> {
    let (model, preset, tokens) = fp16_and_bf16_range_plan(ctx);
    vec![
        fp16_and_bf16_range_describe(model, tokens),
        "The same pass, the same random prompt, with the model in fp32, cast to fp16 and cast to bf16, weights and activations alike; every layer's output and the logits read for their largest |value| and their inf and NaN count".into(),
        shape(model),
        if preset {
            format!(
                "Its weights are random: before the three passes, its first layer's MLP (up and down projections) is scaled until the fp32 pass's largest |activation| passes {}, standing in for the few massive activations a trained model's residual stream carries",
                thousands(rules::REACH as u64)
            )
        } else {
            "A team checkpoint: its trained weights, as they are".into()
        },
    ]
}

fn fp16_and_bf16_range(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (model, preset, tokens) = fp16_and_bf16_range_plan(ctx);
    let config = model.decoder().map(|d| d.config.clone()).ok_or_else(|| failure(protocol::FailureKind::Invalid, format!("{model} is not a decoder")))?;
    tch::manual_seed(lab.config().seed);
    let ids = catch_torch(|| Tensor::randint(config.vocab_size as i64, [1, tokens], (Kind::Int64, tch_device(ctx.device))))?;
    let largest = |points: &[ValuePoint]| points.iter().map(|p| p.max_abs).fold(0.0, f64::max);
    let non_finite = |points: &[ValuePoint]| points.iter().map(|p| p.non_finite).sum::<u64>();
    // A preset's random weights stay far inside fp16's range: scale its first MLP until
    // the fp32 pass passes the setup's figure, measured, not assumed.
    let mut scale = 1.0;
    let mut fp32 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Fp32, scale)?, &ids)?;
    if preset {
        for _ in 0..4 {
            let reach = largest(&fp32);
            if reach > rules::REACH {
                break;
            }
            scale *= (2.0 * rules::REACH / reach.max(1e-6)).max(2.0);
            ctx.check()?;
            fp32 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Fp32, scale)?, &ids)?;
        }
    }
    ctx.check()?;
    let fp16 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Fp16, scale)?, &ids)?;
    ctx.check()?;
    let bf16 = probe_values(&overflow_model(lab, ctx, model, WeightsDtype::Bf16, scale)?, &ids)?;
    let logits_bad = |points: &[ValuePoint]| points.last().map_or(0, |p| p.non_finite);
    let holds = rules::fp16_overflows_where_bf16_does_not(largest(&fp32), non_finite(&fp32), non_finite(&fp16), non_finite(&bf16));
    let first_bad = fp16.iter().find(|p| p.non_finite > 0).map(|p| p.module.clone());
    let rows: Vec<Vec<String>> = fp32
        .iter()
        .zip(&fp16)
        .zip(&bf16)
        .map(|((a, b), c)| {
            vec![a.module.clone(), format!("{:.4e}", a.max_abs), format!("{} of {}", b.non_finite, b.elements), format!("{} of {}", c.non_finite, c.elements)]
        })
        .collect();
    let scaled = if preset && scale != 1.0 {
        format!("; its random weights, the first layer's MLP scaled by {scale:.3e} so that the fp32 pass's activations pass {}, as a trained model's massive activations do", thousands(rules::REACH as u64))
    } else {
        String::new()
    };
    let reason = format!(
        "the fp32 pass reached |x| = {:.4e} with {} non-finite values (fp16's largest value: 65504); fp16 produced {} non-finite values{}, {} of {} logits; bf16 produced {}",
        largest(&fp32),
        non_finite(&fp32),
        non_finite(&fp16),
        first_bad.as_ref().map_or(String::new(), |m| format!(", first in {m}")),
        logits_bad(&fp16),
        fp16.last().map_or(0, |p| p.elements),
        non_finite(&bf16),
    );
    let decision = if !preset && largest(&fp32) <= rules::FP16_MAX {
        Decision::rule(false, "", format!("{reason}: this checkpoint's activations stay inside fp16's range on this prompt, so fp16 is safe for it here."))
    } else {
        Decision::rule(holds, format!("{reason}: the range, not the precision, failed."), format!("{reason}."))
    };
    let x: Vec<String> = fp32.iter().map(|p| p.module.clone()).collect();
    let log = |points: &[ValuePoint]| points.iter().map(|p| (1.0 + p.max_abs).log10()).collect::<Vec<_>>();
    Ok(Outcome::new(decision, format!("{}{scaled}", fp16_and_bf16_range_describe(model, tokens)), ChartKind::Line)
        .figures(vec![
            fig(FP32_LARGEST_ACTIVATION, largest(&fp32)),
            fig(FP32_NON_FINITE_VALUES, non_finite(&fp32) as f64),
            fig(FP16_ANY_INF_OR_NAN, f64::from(u8::from(non_finite(&fp16) > 0))),
            fig(FP16_NON_FINITE_VALUES, non_finite(&fp16) as f64),
            fig(BF16_NON_FINITE_VALUES, non_finite(&bf16) as f64),
            fig(FP16_NON_FINITE_VALUES_IN_THE_LOGITS, logits_bad(&fp16) as f64),
            fig(BF16_NON_FINITE_VALUES_IN_THE_LOGITS, logits_bad(&bf16) as f64),
        ])
        .series(vec![
            series(FP32_LOG10_1_LARGEST_X, x.clone(), log(&fp32)),
            series(BF16_LOG10_1_LARGEST_X, x.clone(), log(&bf16)),
            series(FP16_NON_FINITE_VALUES, x, fp16.iter().map(|p| p.non_finite as f64).collect()),
        ])
        .table(Table { columns: vec!["output of".into(), "fp32: largest |x|".into(), "fp16: non-finite".into(), "bf16: non-finite".into()], rows }))
}

#[cfg(test)]
mod tests {
    use super::rules::*;

    #[test]
    fn overflow_needs_the_range_reached_and_bf16_clean() {
        assert!(fp16_overflows_where_bf16_does_not(3e5, 0, 12, 0));
        assert!(!fp16_overflows_where_bf16_does_not(3e4, 0, 12, 0), "never left fp16's range");
        assert!(!fp16_overflows_where_bf16_does_not(3e5, 0, 0, 0), "fp16 stayed finite");
        assert!(!fp16_overflows_where_bf16_does_not(3e5, 0, 12, 1), "bf16 overflowed too");
        assert!(!fp16_overflows_where_bf16_does_not(3e5, 4, 12, 0), "fp32 itself was not finite");
    }

    #[test]
    fn the_setups_reach_is_a_round_figure_past_the_range() {
        // Not a multiple of fp16's largest value, which would give that value away.
        assert!(REACH > 2.0 * FP16_MAX && (REACH / FP16_MAX).fract() != 0.0);
        assert_eq!(super::thousands(REACH as u64), "250,000");
    }
}
