//! The generation card about what quantization costs a model that has learned something
//! (`int4-on-a-trained-model`): the trained byte-level model's bits per byte on held-out text
//! with int4 linear layers against fp32, beside the greedy agreement int4 leaves on it and
//! on a random-weights preset of the same family.

use protocol::{ChartKind, GenerationReport, GradMode, KvCacheKind, LinearQuant, RunFailure, RunSpec, WeightQuant, WeightsDtype};

use super::super::kit::{fig, series, Ctx, Decision, Outcome};
use super::super::{Ask, Card, Needs, Said};
use super::{gen_spec, generate};
use crate::lab::Lab;
use crate::torch_call::failure;
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const FP32_BITS_PER_BYTE: FigureName = FigureName::new("fp32: bits per byte", Unit::BitsPerByte);
pub const INT4_BITS_PER_BYTE: FigureName = FigureName::new("int4: bits per byte", Unit::BitsPerByte);
pub const RANDOM_LOW_MARGIN_SHARE: FigureName = FigureName::new("random: low-margin share", Unit::Share);
pub const GZIP_9_BITS_PER_BYTE: FigureName = FigureName::new("gzip -9: bits per byte", Unit::BitsPerByte);
pub const TRAINED_GREEDY_AGREEMENT: FigureName = FigureName::new("trained: greedy agreement", Unit::Share);
pub const RANDOM_GREEDY_AGREEMENT: FigureName = FigureName::new("random: greedy agreement", Unit::Share);
pub const GREEDY_PICKS_INT4_LEAVES_AS_THEY_WERE: FigureName = FigureName::new("greedy picks int4 leaves as they were", Unit::Percent);
pub const TRAINED_LOW_MARGIN_SHARE: FigureName = FigureName::new("trained: low-margin share", Unit::Share);

/// int4's group size here: the smallest, the closest to the weights.
const GROUP: u32 = 32;

/// The prompt the trained model continues.
const PROMPT: &str = "def forward(self, x):";

pub const INT4_ON_A_TRAINED_MODEL: Card = Card {
    id: "int4-on-a-trained-model",
    title: "int4 costs a trained model little; random weights make it look ruinous",
    asks: "What does weight-only int4 do to a model that has learned real text, measured on text it never saw?",
    labels: ["int4 judged by greedy agreement on a random-weights model", "int4 judged by bits per byte of a trained model on held-out text"],
    setup: int4_on_a_trained_model_setup,
    needs: Needs::Any,
    claim: "Weight-only int4 (groups of 32) raises a trained model's bits per byte on held-out text by under 5% and leaves most of its greedy picks as they were; on random weights, whose top-1 margins are tiny, the same quantization flips most greedy picks. Judge a quantization on a trained model, by a quality figure on real text.",
    statements: &[
        Said::run("In fp32 the trained model needs fewer bits per byte than gzip -9 on the held-out text: it has learned the text's kind.", &[FP32_BITS_PER_BYTE, GZIP_9_BITS_PER_BYTE]),
        Said::run("int4 in groups of 32 raised its bits per byte by under 5%.", &[INT4_BITS_PER_BYTE, FP32_BITS_PER_BYTE]),
        Said::source("On CUDA int4's kernel (torch._weight_int4pack_mm) takes bf16 activations only, so there the int4 figures are int4 with bf16 activations.", "aten/src/ATen/native/cuda/int4mm.cu", "_weight_int4pack_mm_cuda", "more-cards"),
        Said::run("int4 left most of the trained model's greedy picks as they were.", &[TRAINED_GREEDY_AGREEMENT]),
        Said::run("The same int4 flipped most greedy picks of the random-weights preset.", &[RANDOM_GREEDY_AGREEMENT]),
        Said::run("A greedy pick can flip only where its top-1 margin is small against the change int4 makes to the logits: far more of the random weights' positions had a margin below int4's largest change of a logit than the trained model's.", &[RANDOM_LOW_MARGIN_SHARE, TRAINED_LOW_MARGIN_SHARE]),
    ],
    source: "https://github.com/pytorch-labs/gpt-fast#int4-weight-only-quantization",
    pitfall: "agree = (quantized.generate(ids).sequences == model.generate(ids).sequences).float().mean()",
    fix: "bits = sum(-log_softmax(model(x).logits, -1).gather(-1, y[..., None]).sum() for x, y in held_out) / n_bytes / math.log(2)",
    threshold: "confirmed when the trained model's bits per byte with int4 (groups of 32) linear layers is at most 1.05× its fp32 figure on the held-out text, and int4 leaves it a higher greedy agreement with its unquantized self than it leaves the random-weights preset. Regime: any device (on CUDA int4 runs with bf16 activations, the only dtype its kernel takes); the bits per byte repeat to the last digits",
    question: crate::pitfalls::ratio(
        "The trained model on its held-out text: its bits per byte with int4 linear layers (groups of 32, in the activations the int4 kernel takes on this device), as a multiple of its bits per byte in fp32?",
        INT4_BITS_PER_BYTE,
        FP32_BITS_PER_BYTE,
        Ask::LogScale { min: 0.5, max: 8.0, within: 1.05 },
    ),
    experiment: int4_on_a_trained_model,
};

/// What the card runs: the trained model's quality in fp32 and with int4, a generation of it
/// with int4 (its drift), and the same generation on the random-weights Llama preset.
fn plan(ctx: &Ctx) -> (RunSpec, RunSpec) {
    // In the dtype int4 runs in on the device (CUDA's kernel takes bf16 only).
    let int4 = |spec: RunSpec| crate::lab::quantized(spec, LinearQuant::Int4 { group_size: GROUP }, ctx.device);
    // The trained model and the preset it is set against, whatever model the card's
    // options name: the lesson is the pair.
    let trained_model: protocol::ModelId = protocol::decoder::TRAINED_PRESET.parse().unwrap_or(protocol::ModelId::TinyMlp);
    let mut trained = int4(gen_spec(ctx, trained_model, 1, 1, 64, KvCacheKind::Dynamic, GradMode::NoGrad));
    trained.input_size = None;
    if let Some(g) = trained.generate.as_mut() {
        g.prompt_text = Some(PROMPT.into());
    }
    let random_model: protocol::ModelId = protocol::decoder::CPU_PRESET.parse().unwrap_or(protocol::ModelId::TinyMlp);
    let random = int4(gen_spec(ctx, random_model, 1, trained.resolved_input_size(), 64, KvCacheKind::Dynamic, GradMode::NoGrad));
    (trained, random)
}

fn describe(trained: &RunSpec) -> String {
    let act = match trained.advanced.weights {
        WeightsDtype::Fp32 => String::new(),
        w => format!(", int4 in {} (the only dtype CUDA's int4 kernel takes)", w.as_str()),
    };
    format!(
        "{}, fp32 weights, linear layers in fp32 and in int4 (groups of {GROUP}){act}, no_grad, eval",
        trained.model.display_name()
    )
}

fn int4_on_a_trained_model_setup(ctx: &Ctx) -> Vec<String> {
    let (trained, random) = plan(ctx);
    vec![
        describe(&trained),
        super::shape(trained.model),
        format!(
            "Quality: bits per byte on the model's held-out text (64 KiB of torch/fx it never saw), in chunks of its {}-byte context, for fp32 and for int4",
            trained.model.decoder().map_or(0, |d| d.config.max_position_embeddings)
        ),
        format!(
            "Agreement: a greedy generation of 64 tokens with int4 from the prompt {PROMPT:?}, and one of {} with int4 from {} random token ids, each against its unquantized model on the same tokens",
            random.model.display_name(),
            random.resolved_input_size()
        ),
        "Measured: bits per byte in both settings; each generation's greedy agreement, max |Δ logit| at the prefill and the share of positions whose top-1 margin is below it".into(),
    ]
}

fn drift_of(g: &GenerationReport) -> Result<protocol::Drift, RunFailure> {
    g.drift.clone().ok_or_else(|| failure(protocol::FailureKind::Internal, "an int4 generation without its drift"))
}

fn int4_on_a_trained_model(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (trained, random) = plan(ctx);
    let quant = LinearQuant::Int4 { group_size: GROUP };
    let q = lab.quality(&trained, ctx.device, ctx.control, Some(&[LinearQuant::NONE, quant]))?;
    let bits = |w: WeightQuant| {
        q.rows
            .iter()
            .find(|r| r.quant == w && r.weights == crate::spec::weights_for(ctx.device, w, WeightsDtype::Fp32))
            .map(|r| r.bits_per_byte)
            .ok_or_else(|| failure(protocol::FailureKind::Internal, "a quality row is missing"))
    };
    let (fp32, int4) = (bits(WeightQuant::None)?, bits(WeightQuant::Int4)?);
    ctx.check()?;
    let (_, g_trained) = generate(lab, ctx, trained.clone())?;
    ctx.check()?;
    let (_, g_random) = generate(lab, ctx, random.clone())?;
    let (dt, dr) = (drift_of(&g_trained)?, drift_of(&g_random)?);
    let ratio = int4 / fp32;
    let holds = ratio <= 1.05 && dt.greedy_agreement > dr.greedy_agreement;
    let low = |d: &protocol::Drift| d.low_margin_share.map_or("—".into(), |s| format!("{:.0}%", 100.0 * s));
    let reason = format!(
        "{}: int4 took the trained model from {fp32:.4} to {int4:.4} bits per byte on held-out text (×{ratio:.4}; gzip -9 gives {:.4}); its greedy agreement with its unquantized self was {:.0}% (max |Δ logit| {:.3}, {} of positions with a smaller top-1 margin), against {:.0}% on {} (max |Δ logit| {:.3}, {})",
        describe(&trained),
        q.gzip_bits_per_byte,
        100.0 * dt.greedy_agreement,
        dt.max_abs_logit_delta,
        low(&dt),
        100.0 * dr.greedy_agreement,
        random.model.display_name(),
        dr.max_abs_logit_delta,
        low(&dr),
    );
    let decision = Decision::rule(
        holds,
        format!("{reason}: the trained model barely moved."),
        format!("{reason}."),
    );
    let notes = vec![
        format!("The trained text: {:?}", g_trained.text.as_ref().and_then(|t| t.generated.first().cloned()).unwrap_or_default()),
        match q.rows.iter().find_map(|r| r.kernel_max_abs_logit_delta) {
            Some(d) => format!("int4's bits per byte come from the int4 values, dequantized, through a dense matmul (PyTorch's packed int4 kernel takes tens of times longer on a long slice on a CPU); on the slice's first chunk the two differ by at most {d:.2e} in a logit."),
            None => "int4's bits per byte come from the int4 values, dequantized, through a dense matmul.".into(),
        },
    ];
    let agreement = vec!["trained model".to_string(), "random weights".into()];
    let mut figures = vec![
        fig(FP32_BITS_PER_BYTE, fp32),
        fig(INT4_BITS_PER_BYTE, int4),
        fig(GZIP_9_BITS_PER_BYTE, q.gzip_bits_per_byte),
        fig(TRAINED_GREEDY_AGREEMENT, dt.greedy_agreement),
        fig(RANDOM_GREEDY_AGREEMENT, dr.greedy_agreement),
    ];
    for (name, d) in [(TRAINED_LOW_MARGIN_SHARE, &dt), (RANDOM_LOW_MARGIN_SHARE, &dr)] {
        if let Some(s) = d.low_margin_share {
            figures.push(fig(name, s));
        }
    }
    Ok(Outcome::new(decision, describe(&trained), ChartKind::Bar)
        .figures(figures)
        .series(vec![series(
            GREEDY_PICKS_INT4_LEAVES_AS_THEY_WERE,
            agreement,
            vec![100.0 * dt.greedy_agreement, 100.0 * dr.greedy_agreement],
        )])
        .notes(notes))
}
