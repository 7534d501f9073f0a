//! The classic table: the Lab's classic rows side by side, which setting saves what.

use protocol::{Autocast, ChartKind, FailureKind, GradMode, ModelId, RunFailure, RunSpec, Table};

use super::kit::{bytes_compared, describe, fig_of, measure, mib, named, series, Ctx, Decision, Outcome};
use super::{Card, Needs, Said};
use crate::lab::Lab;
use crate::torch_call::failure;
use crate::pitfalls::figures::{EACH_PEAK_ABOVE_BASELINE, EVAL_NO_GRAD_PEAK_ABOVE_BASELINE, EVAL_ONLY_PEAK_ABOVE_BASELINE, P50_LATENCY_MS, PEAK_ABOVE_BASELINE_MIB, TRAIN_PEAK_ABOVE_BASELINE};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const EACH_P50: FigureName = FigureName::new("{}: p50", Unit::Ms);
pub const EACH_MEMORY_VS_TRAIN: FigureName = FigureName::new("{}: memory vs train", Unit::Ratio);
pub const EACH_LATENCY_VS_TRAIN: FigureName = FigureName::new("{}: latency vs train", Unit::Ratio);
pub const NO_GRAD_ONLY_PEAK_ABOVE_BASELINE: FigureName = EACH_PEAK_ABOVE_BASELINE.instance("no_grad only: peak above baseline");
pub const ANY_F_16_PEAK_ABOVE_BASELINE: FigureName = EACH_PEAK_ABOVE_BASELINE.ending("*16: peak above baseline");

pub const SEED_TABLE: Card = Card {
    id: "seed-table",
    title: "The classic table: which setting saves what",
    asks: "What do train(), eval(), torch.no_grad() and autocast each change in a forward pass's memory and latency?",
    labels: ["model.eval() only", "model.eval() with torch.no_grad() and 16-bit autocast"],
    setup: seed_table_setup,
    needs: Needs::Any,
    claim: "train, eval only, no_grad only, eval + no_grad and eval + no_grad + 16-bit autocast for ResNet-50: with autograd on, eval() alone leaves the forward pass's peak memory where train() has it (within 1%); no_grad removes most of it, the activations autograd keeps for a backward pass. Autocast on top lowers the peak further only where the 16-bit copies of the weights it holds during the pass cost less than the activation bytes it halves.",
    statements: &[
        Said::torch("eval() switches the layers that behave differently in training (here batch norm; a ResNet has no dropout) and does not turn autograd off: the output still has a grad_fn.", "test_table.py::test_eval_leaves_autograd_on"),
        Said::torch("Batch norm in eval() normalises with its running statistics; in train() with the batch's own, and it updates the running ones.", "test_table.py::test_eval_changes_batch_norm_to_its_running_statistics"),
        Said::torch("With autograd on, a forward pass saves the activations a backward pass would read, in train() and in eval() alike: the two differ only by batch norm's per-channel statistics, a few bytes per channel.", "test_table.py::test_train_and_eval_save_the_same_activations_for_backward"),
        Said::run("So eval() alone leaves the forward pass's peak within 1% of train()'s.", &[EVAL_ONLY_PEAK_ABOVE_BASELINE, TRAIN_PEAK_ABOVE_BASELINE]),
        Said::torch("Under torch.no_grad() nothing is saved for backward, in train() or in eval(), and the output has no grad_fn.", "test_table.py::test_no_grad_saves_nothing_for_backward"),
        Said::run("So no_grad, with eval() or without, removes most of the peak: below half of train()'s.", &[EVAL_NO_GRAD_PEAK_ABOVE_BASELINE, NO_GRAD_ONLY_PEAK_ABOVE_BASELINE, TRAIN_PEAK_ABOVE_BASELINE]),
        Said::torch("Autocast's 16-bit type is fp16 by default on CUDA and bf16 on a CPU, the two this table uses.", "test_table.py::test_autocast_defaults_to_bf16_on_a_cpu_and_fp16_on_cuda"),
        Said::torch("Under no_grad autocast keeps the fp32 weights and caches a 16-bit copy of each weight it casts until the autocast region ends, so the pass holds both.", "test_autocast.py::test_weights_are_cast_once_with_grad_and_under_no_grad"),
        Said::run("Whether the 16-bit row's peak is below eval + no_grad's depends on which is larger, those copies or the activation bytes the 16-bit type halves; this run's two peaks say which it was here.", &[ANY_F_16_PEAK_ABOVE_BASELINE, EVAL_NO_GRAD_PEAK_ABOVE_BASELINE]),
    ],
    source: "https://pytorch.org/docs/stable/notes/autograd.html#inference-mode",
    pitfall: "model.eval()\ny = model(x)",
    fix: "model.eval()\nwith torch.no_grad(), torch.autocast(\"cuda\", dtype=torch.float16):  # on a CPU: \"cpu\", torch.bfloat16\n    y = model(x)",
    threshold: "confirmed when eval-only's peak is within 1% of train's (the byte rule the question is graded by) and eval + no_grad's is below half of train's; the 16-bit row is judged in the notes, not in the verdict. The rows are the Lab's classic rows (the ones `gradless compare` runs) without inference_mode, with the device's 16-bit autocast (fp16 on a GPU, bf16 on a CPU). Regime: any; on a GPU (ResNet-50, batch 32, 224²) train keeps every activation (GBs) while eval + no_grad holds a few layers' worth",
    question: super::ratio("ResNet-50: the peak memory above baseline of a forward pass in eval() with autograd on, against the same pass in train() with autograd on?", EVAL_ONLY_PEAK_ABOVE_BASELINE, TRAIN_PEAK_ABOVE_BASELINE, super::SAME_BYTES),
    experiment: seed_table,
};

/// The seed table's rows: the classic rows ([`RunSpec::classic_modes`], which `gradless
/// compare` and the Lab's "Compare all modes" run) without inference_mode, with one autocast.
fn seed_rows(base: &RunSpec, low: Autocast) -> Vec<RunSpec> {
    base.classic_modes()
        .into_iter()
        .filter(|s| {
            s.grad != GradMode::InferenceMode && (s.autocast == Autocast::Off || s.autocast == low)
        })
        .collect()
}

/// The seed table's name for a classic row.
fn row_label(spec: &RunSpec) -> String {
    match (spec.eval, spec.grad, spec.autocast) {
        (false, GradMode::Enabled, Autocast::Off) => "train".into(),
        (true, GradMode::Enabled, Autocast::Off) => "eval only".into(),
        (false, GradMode::NoGrad, Autocast::Off) => "no_grad only".into(),
        (eval, grad, autocast) => {
            let mut parts = vec![if eval { "eval" } else { "train" }];
            if grad != GradMode::Enabled {
                parts.push(grad.as_str());
            }
            if autocast != Autocast::Off {
                parts.push(autocast.as_str());
            }
            parts.join(" + ")
        }
    }
}

/// What the seed table runs: its model and batch, and its rows.
fn seed_plan(ctx: &Ctx) -> (ModelId, u32, Vec<RunSpec>) {
    let model = ctx.model(ModelId::Resnet50);
    let b = ctx.batch(4, 32);
    let low = if ctx.cuda() {
        Autocast::Fp16
    } else {
        Autocast::Bf16
    };
    let mut rows = seed_rows(&ctx.spec(model, b, true, GradMode::Enabled), low);
    if !ctx.cuda() {
        rows.iter_mut().for_each(|s| s.iters = 2);
    }
    (model, b, rows)
}

fn seed_table_setup(ctx: &Ctx) -> Vec<String> {
    let (model, b, rows) = seed_plan(ctx);
    let size = rows.first().map_or(0, |s| s.resolved_input_size());
    let mut lines = vec![
        describe(model, b, size),
        format!(
            "{} runs, one per row: {}",
            rows.len(),
            rows.iter().map(row_label).collect::<Vec<_>>().join("; ")
        ),
    ];
    if let Some(s) = rows.first() {
        lines.push(format!(
            "fp32 weights and input; each row is one run of {}; memory: the peak allocated above the baseline (the weights and the input)",
            super::memory::iterations(s)
        ));
    }
    let low = if ctx.cuda() { "fp16" } else { "bf16" };
    lines.push(format!("The 16-bit row: torch.autocast with {low}, inside torch.no_grad(), around each forward pass"));
    if matches!(model, ModelId::Resnet18 | ModelId::Resnet50) {
        lines.push(format!("{}: a batch norm after every convolution, no dropout", model.display_name()));
    }
    lines
}

fn seed_table(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (model, b, rows) = seed_plan(ctx);
    let mut reports = vec![];
    for spec in &rows {
        reports.push(measure(lab, ctx, spec.clone())?);
    }
    let labels: Vec<String> = rows.iter().map(row_label).collect();
    let traces: Vec<_> = labels
        .iter()
        .zip(&reports)
        .map(|(label, r)| named(label, r))
        .collect();
    let find = |eval: bool, grad: GradMode| {
        rows.iter()
            .position(|s| s.eval == eval && s.grad == grad && s.autocast == Autocast::Off)
            .map(|i| reports[i].memory.peak_above_baseline_bytes as f64)
            .ok_or_else(|| failure(FailureKind::Internal, "a classic row is missing"))
    };
    let first_peak = find(false, GradMode::Enabled)?;
    let eval_only = find(true, GradMode::Enabled)?;
    let eval_nograd = find(true, GradMode::NoGrad)?;
    let first_p50 = reports[0].latency_ms.p50;
    let mut figures = vec![];
    for (label, r) in labels.iter().zip(&reports) {
        let peak = r.memory.peak_above_baseline_bytes as f64;
        figures.push(fig_of(EACH_PEAK_ABOVE_BASELINE, &[&label], peak));
        figures.push(fig_of(EACH_P50, &[&label], r.latency_ms.p50));
        figures.push(fig_of(
            EACH_MEMORY_VS_TRAIN, &[&label],
            peak / first_peak,
        ));
        figures.push(fig_of(
            EACH_LATENCY_VS_TRAIN, &[&label],
            r.latency_ms.p50 / first_p50,
        ));
    }
    let change = |x: f64, first: f64| format!("{:+.0}%", 100.0 * (x - first) / first);
    // Every row the table prints is judged against its own claim, in words.
    let params = lab
        .parameters(model)
        .unwrap_or(0);
    let judged: Vec<String> = rows
        .iter()
        .zip(&reports)
        .map(|(spec, r)| {
            let peak = r.memory.peak_above_baseline_bytes as f64;
            let mb = |b: f64| protocol::format_bytes(b.max(0.0) as u64);
            let held = |ok: bool| if ok { "held" } else { "did not hold here" };
            match (spec.eval, spec.grad, spec.autocast) {
                (false, GradMode::Enabled, Autocast::Off) => format!("train: the reference, {}", mb(peak)),
                (true, GradMode::Enabled, Autocast::Off) => {
                    let (band, words) = bytes_compared(peak, first_peak);
                    format!("eval only leaves train's peak: {} (eval only's {words})", held(band == protocol::Choice::Same))
                }
                (_, GradMode::NoGrad, Autocast::Off) => {
                    let ok = peak < 0.5 * first_peak;
                    format!("{} saves most of it: {} ({}, {} of train's)", row_label(spec), held(ok), mb(peak), change(peak, first_peak))
                }
                (_, _, low) => {
                    let ok = peak < eval_nograd;
                    let why = if ok {
                        String::new()
                    } else {
                        format!(
                            "; under no_grad autocast keeps the fp32 weights and caches a 16-bit copy of each weight it casts until the pass's autocast region ends (at most {} parameters × 2 bytes = {}), which can outweigh the activation bytes it halves at this size",
                            params,
                            mb(params as f64 * 2.0)
                        )
                    };
                    format!(
                        "{} lowers memory further: {} ({} against eval + no_grad's {}){why}",
                        low.as_str(),
                        held(ok),
                        mb(peak),
                        mb(eval_nograd)
                    )
                }
            }
        })
        .collect();
    let table = Table {
        columns: [
            "setting",
            "peak above baseline",
            "vs train",
            "p50",
            "vs train",
            "output",
        ]
        .map(String::from)
        .to_vec(),
        rows: labels
            .iter()
            .zip(&reports)
            .map(|(label, r)| {
                let peak = r.memory.peak_above_baseline_bytes as f64;
                vec![
                    label.clone(),
                    protocol::format_bytes(r.memory.peak_above_baseline_bytes),
                    change(peak, first_peak),
                    format!("{:.2} ms", r.latency_ms.p50),
                    change(r.latency_ms.p50, first_p50),
                    r.output.dtype.clone(),
                ]
            })
            .collect(),
    };
    let mut notes = judged.clone();
    if !ctx.cuda() {
        notes.push("On a CPU the 16-bit row uses bf16 (autocast's CPU default); its latency depends on whether the CPU has bf16 instructions (AVX512-BF16, AMX).".into());
    }
    // The question's comparison, by the rule that grades it (within 1%: the same).
    let (band, words) = bytes_compared(eval_only, first_peak);
    let figures_text = format!(
        "Peak above baseline, eval only against train: {words}; eval + no_grad: {:.0}% of train's. Row by row: {}.",
        100.0 * eval_nograd / first_peak,
        judged[1..].join("; ")
    );
    Ok(Outcome::new(
        Decision::rule(
            band == protocol::Choice::Same && eval_nograd < 0.5 * first_peak,
            figures_text.clone(),
            figures_text,
        ),
        format!(
            "{} on {}",
            describe(model, b, rows[0].resolved_input_size()),
            reports[0].env.device_name
        ),
        ChartKind::Bar,
    )
    .table(table)
    .figures(figures)
    .series(vec![
        series(
            PEAK_ABOVE_BASELINE_MIB,
            labels.clone(),
            reports
                .iter()
                .map(|r| mib(r.memory.peak_above_baseline_bytes))
                .collect(),
        ),
        series(
            P50_LATENCY_MS,
            labels,
            reports.iter().map(|r| r.latency_ms.p50).collect(),
        ),
    ])
    .notes(notes)
    .traces(traces))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_table_takes_five_of_the_classic_rows_with_their_names() {
        let labels: Vec<String> = seed_rows(&RunSpec::default(), Autocast::Fp16)
            .iter()
            .map(row_label)
            .collect();
        assert_eq!(
            labels,
            [
                "train",
                "eval only",
                "no_grad only",
                "eval + no_grad",
                "eval + no_grad + fp16"
            ]
        );
    }
}
