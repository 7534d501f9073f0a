//! The `channels-last` card ([`CHANNELS_LAST`]): channels_last changes the strides, not the values

use super::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const INPUT_HAS_NHWC_STRIDES: FigureName = FigureName::new("input has NHWC strides", Unit::Bool);
pub const CONV_WEIGHTS_WITH_NHWC_STRIDES: FigureName = FigureName::new("conv weights with NHWC strides", Unit::Count);
pub const P50_NCHW: FigureName = FigureName::new("p50 NCHW", Unit::Ms);
pub const P50_CHANNELS_LAST: FigureName = FigureName::new("p50 channels_last", Unit::Ms);
pub const NCHW_OVER_CHANNELS_LAST_CI_LOW: FigureName = FigureName::new("NCHW / channels_last, 95% interval low", Unit::Ratio);
pub const CONV_WEIGHTS: FigureName = FigureName::new("conv weights", Unit::Count);
pub const NCHW_OVER_CHANNELS_LAST_CI_HIGH: FigureName = FigureName::new("NCHW / channels_last, 95% interval high", Unit::Ratio);

pub const CHANNELS_LAST: Card = Card {
    id: "channels-last",
    title: "channels_last changes the strides, not the values",
    asks: "What does moving a convolution model and its input to channels_last change: the output, the memory layout, the latency?",
    labels: ["model and input in the default NCHW layout", "model and input in channels_last"],
    setup: channels_last_setup,
    needs: Needs::Any,
    claim: "model.to(memory_format=torch.channels_last) and x.to(memory_format=torch.channels_last) store the convolutions' weights and the input as NHWC: same shapes, same values, other strides, and the output is the same up to float rounding. Whether it is faster depends on the device, the dtype and the shapes, so measure it.",
    statements: &[
        Said::torch("model.to(memory_format=torch.channels_last) gives every 4-D weight, the convolutions', NHWC strides (channels innermost), and x.to(memory_format=torch.channels_last) does the same to the input: shapes and values are unchanged.", "test_layout.py::test_channels_last_changes_strides_not_shapes_or_values"),
        Said::run("In this run the input and every convolution weight have NHWC strides.", &[INPUT_HAS_NHWC_STRIDES, CONV_WEIGHTS_WITH_NHWC_STRIDES, CONV_WEIGHTS]),
        Said::torch("A convolution on channels_last input and weights returns a channels_last output, so the next layer receives NHWC too (observed on a CPU, where oneDNN runs it).", "test_layout.py::test_a_convolution_on_channels_last_returns_channels_last"),
        Said::source("On a GPU, cuDNN's convolution takes channels_last when the input or the weight is channels_last, and returns its output in it.", "aten/src/ATen/native/ConvUtils.h", "cudnn_conv_suggest_memory_format", "more-cards"),
        Said::run("The output equals the NCHW model's up to float rounding: the kernels add the same products in another order.", &[LARGEST_OUTPUT_DIFFERENCE]),
        Said::run("Which layout is faster is the device's answer for this dtype and these shapes: this run's two p50s and the 95% interval of their ratio.", &[P50_NCHW, P50_CHANNELS_LAST, NCHW_OVER_CHANNELS_LAST_CI_LOW, NCHW_OVER_CHANNELS_LAST_CI_HIGH]),
    ],
    source: "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html",
    pitfall: "y = model(x)  # model and x in the default NCHW layout",
    fix: "model = model.to(memory_format=torch.channels_last)\nx = x.to(memory_format=torch.channels_last)\ny = model(x)",
    threshold: "confirmed when the input and every 4-D convolution weight have NHWC strides and the output differs from the NCHW model's by at most 1e-3 of its largest magnitude (float rounding: the kernels sum in another order). The latency ratio (NCHW / NHWC, 10 alternating passes each on a CPU, 20 on a GPU) is reported with its 95% bootstrap interval as faster, slower or no difference, and does not decide: it is the device's answer, not the lesson's. Regime: a convolution model (ResNet-18 by default)",
    question: super::super::ratio("ResNet-18 with its weights and input in channels_last: its p50 latency as a multiple of the same model and input in the default NCHW layout?", P50_CHANNELS_LAST, P50_NCHW, super::super::SAME_TIME),
    experiment: channels_last,
};

/// What channels-last runs, and its alternating passes per layout.
pub(super) fn channels_last_plan(ctx: &Ctx) -> (Setup, usize) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    (setup, if ctx.cuda() { 20 } else { 10 })
}

/// The line channels-last's report is measured on.
pub(super) fn channels_last_line(setup: &Setup, rounds: usize) -> String {
    format!("{}, {rounds} passes each, alternating", setup.describe())
}

pub(super) fn channels_last_setup(ctx: &Ctx) -> Vec<String> {
    let (setup, rounds) = channels_last_plan(ctx);
    vec![
        channels_last_line(&setup, rounds),
        crate::pitfalls::kit::arms_after("Timed, eval(), torch.no_grad(), fp32: ", "the model and input in the default NCHW layout", "the model and input both in channels_last"),
        "Also read: whether the input and every 4-D convolution weight have NHWC strides, and the largest difference between the two outputs".into(),
        format!(
            "A judgment about this device's convolution kernels ({}): whether their fp32 NHWC kernels beat their NCHW ones at these shapes",
            if ctx.cuda() { "cuDNN" } else { "oneDNN" }
        ),
    ]
}

pub(super) fn channels_last(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (setup, rounds) = channels_last_plan(ctx);
    if !setup.model.is_conv() {
        return Ok(Outcome::new(
            Decision::not_applicable(format!("{} has no convolutions: channels_last does not apply.", setup.model.display_name())),
            channels_last_line(&setup, rounds),
            ChartKind::Bar,
        ));
    }
    let nhwc = Advanced {
        memory_format: MemoryFormat::ChannelsLast,
        ..Advanced::default()
    };
    let i_nchw = lab.model_index(setup.model, ctx.device, setup.size)?;
    tch::manual_seed(1);
    let x_nchw = make_input(lab.model(i_nchw), setup.batch, setup.size, &Advanced::default(), ctx.device)?;
    let reference = forward(lab.model(i_nchw), &x_nchw, &setup.spec, ctx.device)?;
    let i_nhwc = lab.model_index_as(setup.model, ctx.device, setup.size, &nhwc)?;
    let x_nhwc = catch_torch(|| x_nchw.map(crate::lab::to_channels_last))?;
    let spec_nhwc = RunSpec { advanced: nhwc, ..setup.spec.clone() };
    let out = forward(lab.model(i_nhwc), &x_nhwc, &spec_nhwc, ctx.device)?;
    let (diff, scale) = catch_torch(|| {
        ((&out - &reference).abs().max().double_value(&[]), reference.abs().max().double_value(&[]))
    })?;
    drop((out, reference));
    let weights: Vec<_> = lab.model(i_nhwc).vs.variables().into_values().filter(|t| t.dim() == 4).collect();
    let weights_nhwc = weights.iter().filter(|t| is_channels_last(t)).count();
    let input_nhwc = is_channels_last(x_nhwc.first());
    let (m_nchw, m_nhwc) = (lab.model(i_nchw), lab.model(i_nhwc));
    let times = time_passes(ctx, rounds, 2, |variant, _| {
        if variant == 0 {
            forward(m_nchw, &x_nchw, &setup.spec, ctx.device)
        } else {
            forward(m_nhwc, &x_nhwc, &spec_nhwc, ctx.device)
        }
    })?;
    let shift = Shift::of(&times[0], &times[1]);
    let reading = protocol::stats::RatioCi::of(&times[1], &times[0])
        .map(|c| c.latency_reading())
        .unwrap_or_default();
    let holds = input_nhwc && weights_nhwc == weights.len() && diff <= 1e-3 * scale.max(1e-12);
    let text = format!(
        "Input NHWC: {input_nhwc}; {weights_nhwc} of {} convolution weights NHWC; largest output difference {diff:.3e} at an output scale of {scale:.3e}. channels_last against NCHW: {reading}.",
        weights.len()
    );
    Ok(Outcome::new(Decision::rule(holds, text.clone(), text), channels_last_line(&setup, rounds), ChartKind::Bar)
        .figures(vec![
            fig(INPUT_HAS_NHWC_STRIDES, f64::from(u8::from(input_nhwc))),
            fig(CONV_WEIGHTS_WITH_NHWC_STRIDES, weights_nhwc as f64),
            fig(CONV_WEIGHTS, weights.len() as f64),
            fig(LARGEST_OUTPUT_DIFFERENCE, diff),
            fig(P50_NCHW, p(&times[0], 50.0)),
            fig(P50_CHANNELS_LAST, p(&times[1], 50.0)),
            fig(NCHW_OVER_CHANNELS_LAST_CI_LOW, shift.bounds().0),
            fig(NCHW_OVER_CHANNELS_LAST_CI_HIGH, shift.bounds().1),
        ]
        .into_iter()
        // The question's arms, in its order: channels_last over NCHW.
        .chain(super::super::kit::interval_figures(&CHANNELS_LAST.question, &Shift::of(&times[1], &times[0])))
        .collect())
        .series(vec![series(P50_MS, vec!["NCHW".into(), "channels_last".into()], vec![p(&times[0], 50.0), p(&times[1], 50.0)])]))
}
