//! The `moe-memory` card ([`MOE_MEMORY`]): A mixture of experts holds every expert: its memory follows the total parameters, not the active ones

use super::*;

pub const WEIGHTS_IN_MEMORY: FigureName = FigureName::new("weights in memory", Unit::Bytes);
pub const EVERY_PARAMETERS_BYTES: FigureName = FigureName::new("every parameter's bytes", Unit::Bytes);
pub const BYTES: FigureName = FigureName::new("bytes", Unit::Mib);
pub const ACTIVE_PARAMETERS: FigureName = FigureName::new("active parameters", Unit::Count);
pub const PARAMETERS: FigureName = FigureName::new("parameters", Unit::Count);
pub const ACTIVE_PARAMETERS_BYTES: FigureName = FigureName::new("active parameters' bytes", Unit::Bytes);
pub const EACH_PARAMETERS: FigureName = FigureName::new("{}: parameters", Unit::Count);
pub const EACH_ACTIVE_PARAMETERS: FigureName = FigureName::new("{}: active parameters", Unit::Count);
pub const EVERY_EXPERTS_BYTES: FigureName = FigureName::new("every expert's bytes", Unit::Bytes);
pub const ONE_TOKENS_EXPERTS_BYTES: FigureName = FigureName::new("one token's experts' bytes", Unit::Bytes);
pub const QWEN3_30B_A3B_SHAPE_PARAMETERS: FigureName = EACH_PARAMETERS.instance("Qwen3-30B-A3B shape: parameters");
pub const MIXTRAL_8X7B_SHAPE_PARAMETERS: FigureName = EACH_PARAMETERS.instance("Mixtral-8x7B shape: parameters");
pub const MIXTRAL_8X7B_SHAPE_ACTIVE_PARAMETERS: FigureName = EACH_ACTIVE_PARAMETERS.instance("Mixtral-8x7B shape: active parameters");
pub const QWEN3_30B_A3B_SHAPE_ACTIVE_PARAMETERS: FigureName = EACH_ACTIVE_PARAMETERS.instance("Qwen3-30B-A3B shape: active parameters");

pub const MOE_MEMORY: Card = Card {
    id: "moe-memory",
    title: "A mixture of experts holds every expert: its memory follows the total parameters, not the active ones",
    asks: "How many bytes does a mixture-of-experts decoder's weights take in memory, against the bytes of the parameters one token uses (its active parameters)?",
    labels: ["memory from the active parameters' bytes", "memory from every parameter's bytes"],
    setup: moe_memory_setup,
    needs: Needs::Any,
    claim: "A mixture of experts keeps every expert's weights in memory whatever the router picks: its weights take its total parameters' bytes, several times its active parameters' (the Qwen3-30B-A3B shape: 30.5 B parameters held for 3.35 B active per token).",
    statements: &[
        Said::run("Every expert of every layer is held in memory: the weights measured from the model's tensors equal every parameter's bytes, to the byte.", &[WEIGHTS_IN_MEMORY, EVERY_PARAMETERS_BYTES, EVERY_EXPERTS_BYTES]),
        Said::run("A token uses only the router's top-k experts in each MoE layer besides the dense parts: its active parameters.", &[ACTIVE_PARAMETERS, ONE_TOKENS_EXPERTS_BYTES]),
        Said::run("So the weights take several times the active parameters' bytes: memory follows the total parameters, the work per token the active ones.", &[WEIGHTS_IN_MEMORY, ACTIVE_PARAMETERS_BYTES]),
        Said::run("For the Qwen3-30B-A3B shape (computed from its config): about 30.5 B parameters held for about 3.35 B active per token.", &[QWEN3_30B_A3B_SHAPE_PARAMETERS, QWEN3_30B_A3B_SHAPE_ACTIVE_PARAMETERS]),
        Said::run("For the Mixtral-8x7B shape: about 46.7 B held for about 12.9 B active.", &[MIXTRAL_8X7B_SHAPE_PARAMETERS, MIXTRAL_8X7B_SHAPE_ACTIVE_PARAMETERS]),
    ],
    source: "https://arxiv.org/abs/2401.04088",
    pitfall: "params = cfg_active_params\nneed_bytes = params * bytes_per_param",
    fix: "params = sum(p.numel() for p in model.parameters())\nneed_bytes = params * bytes_per_param",
    threshold: "confirmed when the weights measured in memory equal every parameter's bytes to the byte (every expert held) and exceed the active parameters' bytes by more than 1.5×. Regime: any device",
    question: crate::pitfalls::ratio(
        "The setup's mixture of experts: the bytes its weights take in memory, as a multiple of the bytes of its active parameters (the parameters one token uses)?",
        WEIGHTS_IN_MEMORY,
        ACTIVE_PARAMETERS_BYTES,
        Ask::LogScale { min: 0.1, max: 100.0, within: 1.5 },
    ),
    experiment: moe_memory,
};

/// What moe-memory runs: one generation on the tiny Qwen3-MoE (batch 1, prompt 16
/// + 9 new tokens, dynamic cache, no_grad).
pub(super) fn moe_memory_plan(ctx: &Ctx) -> RunSpec {
    let model = decoder(ctx, "qwen3_moe_tiny", "qwen3_moe_tiny");
    gen_spec(ctx, model, 1, 16, 9, KvCacheKind::Dynamic, GradMode::NoGrad)
}

pub(super) fn moe_memory_setup(ctx: &Ctx) -> Vec<String> {
    let s = moe_memory_plan(ctx);
    let mut lines = vec![super::super::setup(&s), super::super::shape(s.model)];
    if let Some(d) = s.model.decoder() {
        lines.push(moe_line(&d.config));
    }
    lines.push(format!(
        "{}; measured: the weights' bytes in memory, from the model's tensors, beside the parameters one token uses",
        dtypes(&s)
    ));
    lines
}

pub(super) fn moe_memory(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let spec = moe_memory_plan(ctx);
    let (_, elt) = weights_dtype(&spec);
    let (_, g) = generate(lab, ctx, spec.clone())?;
    let m = g
        .moe
        .clone()
        .ok_or_else(|| failure(protocol::FailureKind::Internal, "a mixture of experts without its figures"))?;
    // Measured from the model's tensors (the report's `weights_bytes` is what a decode step
    // reads: one embedding row per token, not the table).
    let held = g.weights_breakdown.map_or(0, |w| w.linear_bytes + w.other_bytes);
    let total = m.total_parameters * elt;
    let active = m.active_parameters * elt;
    let ratio = held as f64 / active.max(1) as f64;
    let decision = Decision::rule(
        held == total && ratio > 1.5,
        format!(
            "Its weights take {} in memory, every parameter's bytes to the byte ({} parameters), ×{ratio:.2} the {} of the {} parameters one token uses: all {} experts of every layer are held, {} of them.",
            protocol::format_bytes(held),
            count(m.total_parameters),
            protocol::format_bytes(active),
            count(m.active_parameters),
            m.num_experts,
            protocol::format_bytes(m.experts_bytes)
        ),
        format!(
            "Weights in memory {} against every parameter's {} and the active parameters' {}.",
            protocol::format_bytes(held),
            protocol::format_bytes(total),
            protocol::format_bytes(active)
        ),
    );
    let mut notes = vec![format!(
        "Each token reads {} of expert weights (its top {} in each of {} layers) of the {} held.",
        protocol::format_bytes(m.active_expert_bytes),
        m.num_experts_per_tok,
        m.moe_layers,
        protocol::format_bytes(m.experts_bytes)
    )];
    let mut shapes = vec![];
    for (name, label) in [("qwen3_30b_a3b", "Qwen3-30B-A3B shape"), ("mixtral_8x7b", "Mixtral-8x7B shape")] {
        if let Some(d) = protocol::decoder::preset(name) {
            let p = &d.config;
            shapes.push(fig_of(EACH_PARAMETERS, &[&label], p.parameters() as f64));
            shapes.push(fig_of(EACH_ACTIVE_PARAMETERS, &[&label], p.active_parameters() as f64));
            notes.push(format!(
                "{} (computed from its config, bf16): {} parameters held, {}; {} active per token, {} — ×{:.1}.",
                d.display_name,
                count(p.parameters()),
                protocol::format_bytes(p.parameters() * 2),
                count(p.active_parameters()),
                protocol::format_bytes(p.active_parameters() * 2),
                p.parameters() as f64 / p.active_parameters() as f64
            ));
        }
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut figures = vec![
        fig(WEIGHTS_IN_MEMORY, held as f64),
        fig(ACTIVE_PARAMETERS_BYTES, active as f64),
        fig(EVERY_PARAMETERS_BYTES, total as f64),
        fig(EVERY_EXPERTS_BYTES, m.experts_bytes as f64),
        fig(ONE_TOKENS_EXPERTS_BYTES, m.active_expert_bytes as f64),
        fig(PARAMETERS, m.total_parameters as f64),
        fig(ACTIVE_PARAMETERS, m.active_parameters as f64),
    ];
    figures.extend(shapes);
    Ok(Outcome::new(decision, super::super::setup(&spec), ChartKind::Bar)
        .figures(figures)
        .series(vec![series(
            BYTES,
            vec!["weights in memory".into(), "active parameters".into(), "every expert".into(), "one token's experts".into()],
            vec![mib(held), mib(active), mib(m.experts_bytes), mib(m.active_expert_bytes)],
        )])
        .notes(notes))
}
