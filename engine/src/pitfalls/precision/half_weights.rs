//! The `half-weights` card ([`HALF_WEIGHTS`]): Cast the weights once, or autocast them every call

use super::*;

pub const FP32_PARAMETERS: FigureName = FigureName::new("fp32 parameters", Unit::Bytes);
pub const EACH_AUTOCAST_PARAMETERS: FigureName = FigureName::new("{} autocast parameters", Unit::Bytes);
pub const EACH_WEIGHTS_PARAMETERS: FigureName = FigureName::new("{} weights parameters", Unit::Bytes);
pub const EACH_AUTOCAST_LARGEST_OUTPUT_DIFFERENCE: FigureName = FigureName::new("{} autocast: largest output difference", Unit::Abs);
pub const EACH_WEIGHTS_LARGEST_OUTPUT_DIFFERENCE: FigureName = FigureName::new("{} weights: largest output difference", Unit::Abs);
pub const EACH_P50: FigureName = FigureName::new("{}, {}: p50", Unit::Ms);
pub const ANY_AUTOCAST_LARGEST_OUTPUT_DIFFERENCE: FigureName = EACH_AUTOCAST_LARGEST_OUTPUT_DIFFERENCE.ending("* autocast: largest output difference");
pub const ANY_AUTOCAST_PARAMETERS: FigureName = EACH_AUTOCAST_PARAMETERS.ending("* autocast parameters");
pub const ANY_WEIGHTS_LARGEST_OUTPUT_DIFFERENCE: FigureName = EACH_WEIGHTS_LARGEST_OUTPUT_DIFFERENCE.ending("* weights: largest output difference");
pub const ANY_WEIGHTS_PARAMETERS: FigureName = EACH_WEIGHTS_PARAMETERS.ending("* weights parameters");

pub const HALF_WEIGHTS: Card = Card {
    id: "half-weights",
    title: "Cast the weights once, or autocast them every call",
    asks: "What do torch.autocast and model.half() each do to the bytes the weights take, and to the output?",
    labels: ["the model as loaded, forward pass inside torch.autocast(fp16)", "model.half() before the pass, input cast too"],
    setup: half_weights_setup,
    needs: Needs::Any,
    claim: "model.half() / model.to(torch.bfloat16) stores the weights in 16 bits: half the parameter bytes of fp32. Autocast saves no weight memory: it keeps the fp32 weights and casts them when an op runs, holding the cast copies for the rest of the region with autograd on and under no_grad (not under inference_mode).",
    statements: &[
        Said::run("Casting the model once (model.half(), or .to(torch.bfloat16)) stores its parameters in 16 bits: exactly half the fp32 model's parameter bytes.", &[FP32_PARAMETERS, ANY_WEIGHTS_PARAMETERS]),
        Said::run("Autocast leaves the parameters as they are: after a pass under autocast they are still float32 and take the fp32 bytes.", &[FP32_PARAMETERS, ANY_AUTOCAST_PARAMETERS]),
        Said::torch("Autocast casts an eligible op's inputs, the weights included, to 16 bits when the op runs; the parameters stay fp32.", "test_autocast.py::test_matmuls_run_low_and_the_parameters_stay_fp32"),
        Said::torch("With autograd on and under torch.no_grad(), autocast caches each weight's 16-bit copy, so a weight is cast once however many calls use it, and the copies are held until the autocast region ends.", "test_autocast.py::test_weights_are_cast_once_with_grad_and_under_no_grad"),
        Said::torch("The cache is emptied when the region ends: the next region casts the weights again.", "test_autocast.py::test_the_cache_is_emptied_when_the_region_ends"),
        Said::torch("Under torch.inference_mode() autocast skips the cache: every call casts the weights again, and no copy is held between calls.", "test_autocast.py::test_inference_mode_skips_the_cast_cache"),
        Said::torch("A model cast once refuses an fp32 input: the input must be cast too.", "test_autocast.py::test_a_model_cast_once_refuses_an_fp32_input"),
        Said::run("Both 16-bit variants differ from the fp32 output by a little, never by nothing: 16-bit floats keep fewer mantissa bits.", &[ANY_AUTOCAST_LARGEST_OUTPUT_DIFFERENCE, ANY_WEIGHTS_LARGEST_OUTPUT_DIFFERENCE]),
    ],
    source: "https://pytorch.org/docs/stable/amp.html",
    pitfall: "with torch.autocast(device_type=\"cuda\", dtype=torch.float16), torch.inference_mode():\n    y = model(x)  # model as loaded (fp32)",
    fix: "model = model.half()  # cast once; the input too: x = x.half()\nwith torch.inference_mode():\n    y = model(x)",
    threshold: "confirmed when the cast model's parameters take exactly half the bytes of the fp32 model's, the fp32 weights used under autocast are still float32 after the call, and both low-precision outputs (autocast, cast weights) differ from fp32 by a non-zero amount below 10% of the fp32 output's largest magnitude. Peaks and latencies under grad, no_grad and inference_mode are reported (latency as a ratio with its 95% bootstrap interval), not judged: they depend on whether the device has 16-bit units. Regime: any; byte counts are exact. The low precision is fp16 on a GPU, bf16 on a CPU (where fp16 has no arithmetic units)",
    question: super::super::ratio("ResNet-18 loaded in fp32, its forward pass run inside 16-bit autocast (fp16 on a GPU, bf16 on a CPU): the bytes its parameters take after the pass, against the same model never run under autocast? (fp32 is 4 bytes an element, fp16 and bf16 are 2.)", ANY_AUTOCAST_PARAMETERS, FP32_PARAMETERS, super::super::SAME_BYTES),
    experiment: half_weights,
};

/// What half-weights runs: the model and batch (its spec is fp32 under no_grad), and the
/// 16-bit precision this device uses (fp16 on a GPU, bf16 on a CPU, where fp16 has no
/// arithmetic units).
pub(super) fn half_plan(ctx: &Ctx) -> (Setup, Autocast, WeightsDtype) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    if ctx.cuda() {
        (setup, Autocast::Fp16, WeightsDtype::Fp16)
    } else {
        (setup, Autocast::Bf16, WeightsDtype::Bf16)
    }
}

pub(super) fn half_weights_setup(ctx: &Ctx) -> Vec<String> {
    let (s, _, weights) = half_plan(ctx);
    let low = weights.as_str();
    vec![
        s.describe(),
        crate::pitfalls::kit::arms(format!("the fp32 model, forward pass inside torch.autocast({low})"), format!("the weights cast once to {low} (the input cast too)")),
        "The reference: the fp32 model without autocast".into(),
        format!("Bytes per parameter element: 4 in fp32, 2 in {low}; the parameter bytes are read after the passes"),
        format!("Also measured: each variant's peak memory and latency with autograd on, under no_grad and under inference_mode, one run of {} each", super::super::memory::iterations(&s.spec)),
    ]
}

pub(super) fn half_weights(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
    let (autocast_band, compared) = super::super::kit::bytes_compared(autocast_bytes as f64, fp32_bytes as f64);
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
        fig(FP32_PARAMETERS, fp32_bytes as f64),
        fig_of(EACH_AUTOCAST_PARAMETERS, &[&low], autocast_bytes as f64),
        fig_of(EACH_WEIGHTS_PARAMETERS, &[&low], cast_bytes as f64),
        fig_of(EACH_AUTOCAST_LARGEST_OUTPUT_DIFFERENCE, &[&low], d_auto),
        fig_of(EACH_WEIGHTS_LARGEST_OUTPUT_DIFFERENCE, &[&low], d_cast),
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
            figures.push(fig_of(EACH_PEAK_ABOVE_BASELINE, &[&name, &grad.as_str()], r.memory.peak_above_baseline_bytes as f64));
            figures.push(fig_of(EACH_P50, &[&name, &grad.as_str()], r.latency_ms.p50));
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
        out_series.push(series_of(
            PEAK_ABOVE_BASELINE_MIB, &[&grad.as_str()],
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
