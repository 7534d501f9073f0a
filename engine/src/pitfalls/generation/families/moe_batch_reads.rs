//! The `moe-batch-reads` card ([`MOE_BATCH_READS`]): A batch reads more experts per decode step: the active-parameters bandwidth estimate holds at batch 1 only

use super::*;

pub const DISTINCT_EXPERTS_PER_LAYER_PER_STEP_LARGEST_BATCH: FigureName = FigureName::new("distinct experts per layer per step, largest batch", Unit::Count);
pub const EXPERT_BYTES_READ_PER_STEP_BATCH_1: FigureName = FigureName::new("expert bytes read per step, batch 1", Unit::Bytes);
pub const EXPERT_BYTES_READ_PER_STEP_LARGEST_BATCH: FigureName = FigureName::new("expert bytes read per step, largest batch", Unit::Bytes);
pub const DISTINCT_EXPERTS_PER_LAYER_PER_STEP_BATCH_1: FigureName = FigureName::new("distinct experts per layer per step, batch 1", Unit::Count);
pub const EXPERTS_PER_LAYER: FigureName = FigureName::new("experts per layer", Unit::Count);
pub const DISTINCT_EXPERTS_PER_LAYER_PER_STEP_LARGEST_BATCH_UNIFORM_RANDOM_PICKS: FigureName = FigureName::new("distinct experts per layer per step, largest batch, uniform random picks", Unit::Count);
pub const DECODE_STEP_BATCH_1: FigureName = FigureName::new("decode step, batch 1", Unit::Ms);
pub const DECODE_STEP_LARGEST_BATCH: FigureName = FigureName::new("decode step, largest batch", Unit::Ms);
pub const DISTINCT_EXPERTS_PER_LAYER_PER_STEP: FigureName = FigureName::new("distinct experts per layer per step", Unit::Count);
pub const EXPERT_BYTES_READ_PER_STEP: FigureName = FigureName::new("expert bytes read per step", Unit::Kib);

pub const MOE_BATCH_READS: Card = Card {
    id: "moe-batch-reads",
    title: "A batch reads more experts per decode step: the active-parameters bandwidth estimate holds at batch 1 only",
    asks: "As the batch grows, how many distinct experts does each decode step of a mixture of experts read per layer, and how many bytes of expert weights?",
    labels: ["bytes per step from one token's top-k experts", "bytes per step from the distinct experts the batch's tokens chose"],
    setup: moe_batch_setup,
    needs: Needs::Any,
    claim: "At batch 1 a decode step runs only the top-k experts of each layer; a batch routes its tokens to more and more distinct experts, so a step reads more expert bytes as the batch grows, towards every expert: an estimate from the active parameters' bytes holds at batch 1 only.",
    statements: &[
        Said::run("At batch 1 a decode step ran exactly the router's top-k experts in each MoE layer.", &[DISTINCT_EXPERTS_PER_LAYER_PER_STEP_BATCH_1]),
        Said::run("Each token of a batch picks its own top-k and the step runs every expert any of them picked: at the largest batch a step ran several times as many distinct experts per layer, out of the layer's experts.", &[DISTINCT_EXPERTS_PER_LAYER_PER_STEP_LARGEST_BATCH, EXPERTS_PER_LAYER]),
        Said::run("Were the picks uniformly random, the largest batch would touch experts × (1 − (1 − k / experts)^batch) of them per layer: the measured count is reported beside it.", &[DISTINCT_EXPERTS_PER_LAYER_PER_STEP_LARGEST_BATCH_UNIFORM_RANDOM_PICKS]),
        Said::run("So the expert bytes a step reads grew with the batch, towards every expert's bytes: an estimate from the active parameters' bytes holds at batch 1 only.", &[EXPERT_BYTES_READ_PER_STEP_BATCH_1, EXPERT_BYTES_READ_PER_STEP_LARGEST_BATCH]),
    ],
    source: "https://arxiv.org/abs/2401.04088",
    pitfall: "bytes_per_step = active_params * bytes_per_param\ntok_s = bandwidth / bytes_per_step * batch",
    fix: "experts = distinct_experts_per_layer(batch)\nbytes_per_step = (dense_params + experts * expert_params * moe_layers) * bytes_per_param\ntok_s = bandwidth / bytes_per_step * batch",
    threshold: "confirmed when a decode step at batch 1 reads exactly top-k experts per layer, and at the largest batch more than twice as many distinct experts and expert bytes (counted from the router's choices, the bytes measured from the experts' tensors). Step time is reported, not judged: at this size a step is mostly per-op cost on any device. Regime: any device",
    question: crate::pitfalls::ratio(
        "The setup's mixture of experts: the expert bytes a decode step reads at the largest batch, as a multiple of batch 1's?",
        EXPERT_BYTES_READ_PER_STEP_LARGEST_BATCH,
        EXPERT_BYTES_READ_PER_STEP_BATCH_1,
        Ask::LogScale { min: 0.5, max: 100.0, within: 1.5 },
    ),
    experiment: moe_batch,
};

/// The batches moe-batch-reads sweeps.
pub(super) const MOE_BATCHES: [u32; 5] = [1, 2, 4, 8, 16];

/// What moe-batch-reads runs: the tiny Qwen3-MoE at five batches (prompt 8 + 9 new
/// tokens, dynamic cache, no_grad).
pub(super) fn moe_batch_plan(ctx: &Ctx) -> Vec<RunSpec> {
    let model = decoder(ctx, "qwen3_moe_tiny", "qwen3_moe_tiny");
    MOE_BATCHES
        .into_iter()
        .map(|b| gen_spec(ctx, model, b, 8, 9, KvCacheKind::Dynamic, GradMode::NoGrad))
        .collect()
}

pub(super) fn moe_batch_describe(specs: &[RunSpec]) -> String {
    let model = specs.first().map_or_else(|| "?".to_string(), |s| s.model.display_name());
    let batches: Vec<String> = specs.iter().map(|s| s.batch.to_string()).collect();
    format!("{model}, batches {}, prompt 8 + 9 new tokens, dynamic cache, no_grad", batches.join(", "))
}

pub(super) fn moe_batch_setup(ctx: &Ctx) -> Vec<String> {
    let specs = moe_batch_plan(ctx);
    let mut lines = vec![moe_batch_describe(&specs)];
    if let Some(s) = specs.first() {
        lines.push(super::super::shape(s.model));
        if let Some(d) = s.model.decoder() {
            lines.push(moe_line(&d.config));
        }
        lines.push(dtypes(s));
    }
    lines.push("Measured per decode step: the distinct experts the batch's tokens were routed to in each layer (from the router's choices), their bytes (from the experts' tensors), and the step's time".into());
    lines
}

pub(super) fn moe_batch(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let specs = moe_batch_plan(ctx);
    let c = config_of(specs[0].model)?;
    let top_k = c.moe.as_ref().map_or(0, |m| m.num_experts_per_tok);
    let experts = c.moe.as_ref().map_or(0, |m| m.num_experts);
    let (mut rows, mut distinct, mut bytes, mut ms) = (vec![], vec![], vec![], vec![]);
    for spec in &specs {
        ctx.check()?;
        let (_, g): (_, GenerationReport) = generate(lab, ctx, spec.clone())?;
        let m = g
            .moe
            .clone()
            .ok_or_else(|| failure(protocol::FailureKind::Internal, "a mixture of experts without its figures"))?;
        let step_ms = rules::median(&super::super::decode_ms(&g));
        rows.push(vec![
            spec.batch.to_string(),
            format!("{:.2}", m.distinct_experts_mean),
            m.distinct_experts_max.to_string(),
            protocol::format_bytes(m.expert_bytes_read_mean as u64),
            format!("{step_ms:.2}"),
        ]);
        distinct.push(m.distinct_experts_mean);
        bytes.push(m.expert_bytes_read_mean);
        ms.push(step_ms);
    }
    let last = distinct.len() - 1;
    let at_one = (distinct[0] - top_k as f64).abs() < 1e-9;
    let grows = distinct[last] > 2.0 * distinct[0] && bytes[last] > 2.0 * bytes[0];
    let decision = Decision::rule(
        at_one && grows,
        format!(
            "At batch 1 each step read exactly {top_k} experts per layer ({}); at batch {} it read {:.1} of {experts} on average ({}), ×{:.1} the bytes.",
            protocol::format_bytes(bytes[0] as u64),
            MOE_BATCHES[last],
            distinct[last],
            protocol::format_bytes(bytes[last] as u64),
            bytes[last] / bytes[0].max(1.0)
        ),
        format!("Distinct experts per layer per step {distinct:?} over batches {MOE_BATCHES:?}, expected {top_k} at batch 1 and more than twice that at the largest."),
    );
    let x: Vec<String> = MOE_BATCHES.iter().map(|b| b.to_string()).collect();
    let kib: Vec<f64> = bytes.iter().map(|b| b / 1024.0).collect();
    let mut figures = vec![
        fig(EXPERT_BYTES_READ_PER_STEP_BATCH_1, bytes[0]),
        fig(EXPERT_BYTES_READ_PER_STEP_LARGEST_BATCH, bytes[last]),
        fig(DISTINCT_EXPERTS_PER_LAYER_PER_STEP_BATCH_1, distinct[0]),
        fig(DISTINCT_EXPERTS_PER_LAYER_PER_STEP_LARGEST_BATCH, distinct[last]),
        fig(EXPERTS_PER_LAYER, experts as f64),
    ];
    let largest = MOE_BATCHES[last] as f64;
    let uniform = experts as f64 * (1.0 - (1.0 - top_k as f64 / experts.max(1) as f64).powf(largest));
    figures.push(fig(DISTINCT_EXPERTS_PER_LAYER_PER_STEP_LARGEST_BATCH_UNIFORM_RANDOM_PICKS, uniform));
    figures.push(fig(DECODE_STEP_BATCH_1, ms[0]));
    figures.push(fig(DECODE_STEP_LARGEST_BATCH, ms[last]));
    Ok(Outcome::new(decision, moe_batch_describe(&specs), ChartKind::Line)
        .figures(figures)
        .series(vec![
            series(DISTINCT_EXPERTS_PER_LAYER_PER_STEP, x.clone(), distinct.clone()),
            series(EXPERT_BYTES_READ_PER_STEP, x, kib),
        ])
        .table(Table {
            columns: vec![
                "batch".into(),
                "distinct experts per layer (mean)".into(),
                "max in a layer".into(),
                "expert bytes read per step".into(),
                "decode step (ms, median)".into(),
            ],
            rows,
        })
        .notes(vec![format!(
            "Step time is the device's to decide: where a step is bound by reading its weights (a GPU at a real shape) its time follows its bytes; at this size a step is mostly per-op cost on any device, so its time moves less ({:.2} ms at batch 1, {:.2} ms at batch {}).",
            ms[0],
            ms[last],
            MOE_BATCHES[last]
        )]))
}
