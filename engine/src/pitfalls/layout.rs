//! Layout and transfer lessons: channels_last changes strides, not values; the copy of
//! the input to the device belongs in the timing; and `cudnn.benchmark` pays for its
//! autotuning on the first pass at every new shape.

use protocol::{
    cpu_reason, Advanced, ChartKind, GradMode, InputSource, MemoryFormat, ModelId, RunFailure,
    RunSpec,
};

use super::kit::{fig, measure, numbered, p, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::timing::warm_up_rule;
use super::{Card, Needs, Said};
use crate::lab::{forward, is_channels_last, make_input, Lab};
use crate::torch_call::{catch_torch, tch_device};
use tch::{Device, Kind, Tensor};

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
        Said::run("In this run the input and every convolution weight have NHWC strides.", &["input has NHWC strides", "conv weights with NHWC strides", "conv weights"]),
        Said::torch("A convolution on channels_last input and weights returns a channels_last output, so the next layer receives NHWC too (observed on a CPU, where oneDNN runs it).", "test_layout.py::test_a_convolution_on_channels_last_returns_channels_last"),
        Said::source("On a GPU, cuDNN's convolution takes channels_last when the input or the weight is channels_last, and returns its output in it.", "aten/src/ATen/native/ConvUtils.h", "cudnn_conv_suggest_memory_format", "more-cards"),
        Said::run("The output equals the NCHW model's up to float rounding: the kernels add the same products in another order.", &["largest output difference"]),
        Said::run("Which layout is faster is the device's answer for this dtype and these shapes: this run's two p50s and the 95% interval of their ratio.", &["p50 NCHW", "p50 channels_last", "NCHW / channels_last, 95% interval low", "NCHW / channels_last, 95% interval high"]),
    ],
    source: "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html",
    pitfall: "y = model(x)  # model and x in the default NCHW layout",
    fix: "model = model.to(memory_format=torch.channels_last)\nx = x.to(memory_format=torch.channels_last)\ny = model(x)",
    threshold: "confirmed when the input and every 4-D convolution weight have NHWC strides and the output differs from the NCHW model's by at most 1e-3 of its largest magnitude (float rounding: the kernels sum in another order). The latency ratio (NCHW / NHWC, 10 alternating passes each on a CPU, 20 on a GPU) is reported with its 95% bootstrap interval as faster, slower or no difference, and does not decide: it is the device's answer, not the lesson's. Regime: a convolution model (ResNet-18 by default)",
    question: super::ratio("ResNet-18 with its weights and input in channels_last (as in B): its p50 latency as a multiple of the same model and input in the default NCHW layout (A)?", "p50 channels_last", "p50 NCHW", super::SAME_TIME),
    experiment: channels_last,
};

/// What channels-last runs, and its alternating passes per layout.
fn channels_last_plan(ctx: &Ctx) -> (Setup, usize) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    (setup, if ctx.cuda() { 20 } else { 10 })
}

/// The line channels-last's report is measured on.
fn channels_last_line(setup: &Setup, rounds: usize) -> String {
    format!("{}, {rounds} passes each, alternating", setup.describe())
}

fn channels_last_setup(ctx: &Ctx) -> Vec<String> {
    let (setup, rounds) = channels_last_plan(ctx);
    vec![
        channels_last_line(&setup, rounds),
        "Timed: the model and input in the default NCHW layout (A), against the model and input both in channels_last (B); eval(), torch.no_grad(), fp32".into(),
        "Also read: whether the input and every 4-D convolution weight have NHWC strides, and the largest difference between the two outputs".into(),
        format!(
            "A judgment about this device's convolution kernels ({}): whether their fp32 NHWC kernels beat their NCHW ones at these shapes",
            if ctx.cuda() { "cuDNN" } else { "oneDNN" }
        ),
    ]
}

fn channels_last(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
            fig("input has NHWC strides", f64::from(u8::from(input_nhwc)), "bool"),
            fig("conv weights with NHWC strides", weights_nhwc as f64, "count"),
            fig("conv weights", weights.len() as f64, "count"),
            fig("largest output difference", diff, "abs"),
            fig("p50 NCHW", p(&times[0], 50.0), "ms"),
            fig("p50 channels_last", p(&times[1], 50.0), "ms"),
            fig("NCHW / channels_last, 95% interval low", shift.bounds().0, "ratio"),
            fig("NCHW / channels_last, 95% interval high", shift.bounds().1, "ratio"),
        ]
        .into_iter()
        // The question's arms, in its order: channels_last over NCHW.
        .chain(super::kit::interval_figures(&CHANNELS_LAST.question, &Shift::of(&times[1], &times[0])))
        .collect())
        .series(vec![series("p50 (ms)", "ms", vec!["NCHW".into(), "channels_last".into()], vec![p(&times[0], 50.0), p(&times[1], 50.0)])]))
}

pub const INPUT_COPY: Card = Card {
    id: "input-copy",
    title: "Time the copy to the device, not only the model",
    asks: "What does including the input's copy to the device, from pageable or pinned host memory, do to a timed forward pass?",
    labels: ["batch copied to the device before the clock starts", "batch in a reused pinned buffer, copied inside the timer with non_blocking=True"],
    setup: input_copy_setup,
    needs: Needs::Cuda("On a CPU the model reads the input where it already is: there is no host-to-device copy, and no pinned memory."),
    claim: "When each batch starts in host memory, every iteration pays for copying it to the device: timing only model(x) leaves that out. From pageable memory the copy makes the host wait for the stream; from pinned (page-locked) memory with non_blocking=True it is only queued. x.pin_memory() itself copies the batch into a new page-locked buffer, so pinning each batch just before sending it adds a host copy: the gain needs a pinned buffer allocated once and filled where the batch is made.",
    statements: &[
        Said::run("Copying the batch inside each timed pass adds the copy's time to every pass: this run's p50 with the input copied from pageable memory, against the input already on the device.", &["p50 copied from pageable", "p50 input on the device", "pageable / on device, 95% interval low", "pageable / on device, 95% interval high"]),
        Said::run("Each copy allocates the batch on the device: the pass's peak rises by exactly the input's bytes.", &["input bytes", "peak above baseline, input on the device", "peak above baseline, copied from pageable"]),
        Said::source("A host-to-device copy with non_blocking=False, as from pageable memory here, returns only when the stream has finished: PyTorch queues cudaMemcpyAsync, then calls cudaStreamSynchronize.", "aten/src/ATen/native/cuda/Copy.cu", "copy_kernel_cuda", "more-cards"),
        Said::source("With non_blocking=True PyTorch only queues cudaMemcpyAsync and records an event on the pinned host block, so the block is not reused before the copy ends; the host goes on at once.", "aten/src/ATen/native/cuda/Copy.cu", "copy_kernel_cuda", "more-cards"),
        Said::run("From a pinned buffer the timed pass is faster than from pageable memory on this GPU: this run's two p50s.", &["p50 copied from pinned", "p50 copied from pageable"]),
        Said::source("x.pin_memory() allocates a new page-locked buffer and copies x into it; it returns x itself only when x is already pinned.", "aten/src/ATen/native/Memory.cpp", "pin_memory, _pin_memory", "more-cards"),
        Said::run("So pinning a pageable batch costs a host copy of all its bytes each time: this run times pin_memory() on one batch and checks that it returns a new buffer.", &["pin_memory(): a new buffer", "p50 pin_memory() of one batch"]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",
    pitfall: "x = batch.to(\"cuda\")  # outside the timer\nt0 = time.time(); y = model(x); torch.cuda.synchronize()",
    fix: "pinned = torch.empty(32, 3, 224, 224).pin_memory()  # page-locked, allocated once, reused\n# each batch is written into `pinned` where it is made (decoded, resized)\nt0 = time.time(); x = pinned.to(\"cuda\", non_blocking=True); y = model(x); torch.cuda.synchronize()",
    threshold: "On every device each copy must add exactly the input's bytes to the pass's peak above the baseline (refuted otherwise). CUDA: confirmed when the 95% bootstrap interval of the p50 ratio (input copied from pageable memory / input on the device, 20 timed iterations each) lies wholly above 1, refuted when it lies wholly below 1.05, inconclusive otherwise; the copy from a pinned buffer (allocated once, reused every iteration) is reported beside it, and so is pin_memory() on one pageable batch (whether it returns a new buffer, and its p50 over 20 calls), not judged. On a CPU not applicable: there is no host-to-device copy (the pageable case is a memcpy, measured and reported) and no pinned memory",
    question: super::ratio("ResNet-18, the input copied from pageable host memory inside each timed pass: its p50 as a multiple of the p50 with the input already on the device?", "p50 copied from pageable", "p50 input on the device", super::SAME_TIME),
    experiment: input_copy,
};

/// What input-copy runs, its warm-up and timed iterations per source, and the line its
/// report is measured on.
fn input_copy_plan(ctx: &Ctx) -> (Setup, u32, u32, String) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    let (warmup, iters) = (2, 20);
    let line = format!("{}, {iters} timed iterations per source", setup.describe());
    (setup, warmup, iters, line)
}

/// The bytes of one batch of input (fp32 images).
fn input_bytes(setup: &Setup) -> u64 {
    let element = 4u64; // fp32
    setup.batch as u64 * 3 * setup.size as u64 * setup.size as u64 * element
}

fn input_copy_setup(ctx: &Ctx) -> Vec<String> {
    let (setup, warmup, iters, line) = input_copy_plan(ctx);
    vec![
        line,
        format!("Each source is one run of {warmup} warm-up and {iters} timed iterations (eval(), torch.no_grad()): the input already on the device; copied from pageable host memory inside each iteration; copied from pinned memory with non_blocking=True inside each iteration (GPU only)"),
        format!(
            "The input: {}×3×{}×{} fp32 values, 4 bytes each = {} bytes per batch",
            setup.batch,
            setup.size,
            setup.size,
            input_bytes(&setup)
        ),
        "A judgment of what dominates: those bytes crossing the host link (a PCIe 4.0 or 5.0 x16 link carries at most about 32 or 64 GB/s each way) against ResNet-18's forward pass on the device".into(),
        "The pinned buffer is allocated once and reused every iteration; also timed (GPU only): pin_memory() on one pageable batch".into(),
    ]
}

fn input_copy(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let (setup, warmup, iters, measured_on) = input_copy_plan(ctx);
    let with = |source| RunSpec {
        iters,
        warmup,
        advanced: Advanced { input_source: source, ..Advanced::default() },
        ..setup.spec.clone()
    };
    let on_device = measure(lab, ctx, with(InputSource::Device))?;
    let pageable = measure(lab, ctx, with(InputSource::Pageable))?;
    let pinned = if ctx.cuda() { Some(measure(lab, ctx, with(InputSource::Pinned))?) } else { None };
    let input_bytes = input_bytes(&setup);
    let base = on_device.memory.peak_above_baseline_bytes;
    let adds_input = |r: &protocol::Report| r.memory.peak_above_baseline_bytes == base + input_bytes;
    let exact = adds_input(&pageable) && pinned.as_ref().is_none_or(adds_input);
    let shift = Shift::of(&pageable.latencies(), &on_device.latencies());
    let mut figures = vec![
        fig("input bytes", input_bytes as f64, "bytes"),
        fig("peak above baseline, input on the device", base as f64, "bytes"),
        fig("peak above baseline, copied from pageable", pageable.memory.peak_above_baseline_bytes as f64, "bytes"),
        fig("p50 input on the device", on_device.latency_ms.p50, "ms"),
        fig("p50 copied from pageable", pageable.latency_ms.p50, "ms"),
        fig("pageable / on device, 95% interval low", shift.bounds().0, "ratio"),
        fig("pageable / on device, 95% interval high", shift.bounds().1, "ratio"),
    ];
    // The question's arms, in its order: pageable over on the device.
    figures.extend(super::kit::interval_figures(&INPUT_COPY.question, &shift));
    let mut labels = vec!["on the device".to_string(), "from pageable".to_string()];
    let mut p50s = vec![on_device.latency_ms.p50, pageable.latency_ms.p50];
    if let Some(r) = &pinned {
        figures.push(fig("p50 copied from pinned", r.latency_ms.p50, "ms"));
        labels.push("from pinned".into());
        p50s.push(r.latency_ms.p50);
    }
    if ctx.cuda() {
        figures.extend(pin_each_batch(ctx, &setup)?);
    }
    let text = format!(
        "Each copy added {} B to the pass's peak (the input is {input_bytes} B); pageable / on-device latency {}.",
        pageable.memory.peak_above_baseline_bytes.saturating_sub(base),
        shift.describe()
    );
    let decision = if !exact {
        Decision::rule(false, "", text)
    } else if !ctx.cuda() {
        Decision::not_applicable(format!("{text} On a CPU there is no host-to-device copy to leave out of a timer: the model reads the input where it is, and the pageable case is a memcpy. Pinned memory: {}.", cpu_reason(protocol::settings::SettingId::InputSource)))
    } else {
        Decision::latency(&shift, 1.0, 1.05, text.clone(), text)
    };
    Ok(Outcome::new(decision, measured_on, ChartKind::Bar)
        .figures(figures)
        .series(vec![series("p50 per iteration, copy included (ms)", "ms", labels, p50s)]))
}

/// What `batch.pin_memory()` does to one pageable batch of input-copy's shape, on CUDA:
/// whether it returns a new (page-locked) buffer rather than the batch itself, and its p50
/// over [`PIN_ROUNDS`] calls: the host copy that pinning each batch adds.
fn pin_each_batch(ctx: &Ctx, setup: &Setup) -> Result<Vec<protocol::Figure>, RunFailure> {
    let device = tch_device(ctx.device);
    let (b, s) = (i64::from(setup.batch), i64::from(setup.size));
    let host = catch_torch(|| Tensor::randn([b, 3, s, s], (Kind::Float, Device::Cpu)))?;
    let new_buffer = catch_torch(|| {
        let pinned = host.pin_memory(device);
        pinned.data_ptr() != host.data_ptr() && pinned.is_pinned(device) && !host.is_pinned(device)
    })?;
    let times = time_passes(ctx, PIN_ROUNDS, 1, |_, _| catch_torch(|| host.pin_memory(device)))?;
    Ok(vec![
        fig("pin_memory(): a new buffer", f64::from(u8::from(new_buffer)), "bool"),
        fig("p50 pin_memory() of one batch", p(&times[0], 50.0), "ms"),
    ])
}

/// The calls of `pin_memory()` input-copy times.
const PIN_ROUNDS: usize = 20;

pub const CUDNN_BENCHMARK: Card = Card {
    id: "cudnn-benchmark",
    title: "cudnn.benchmark: slow first passes, at every new shape",
    asks: "With torch.backends.cudnn.benchmark = True, how do pass times behave when the input shape changes?",
    labels: ["benchmark on, the batch size changes after 10 passes", "benchmark on, every pass at one batch size"],
    setup: cudnn_benchmark_setup,
    needs: Needs::Cuda("cudnn.benchmark chooses among cuDNN's GPU convolution algorithms; a CPU does not use cuDNN."),
    claim: "With torch.backends.cudnn.benchmark = True, the first pass at an input shape new to the process times candidate algorithms (up to torch.backends.cudnn.benchmark_limit, 10 by default) for each convolution configuration it has not run, and is slow; the fastest is cached per configuration, so later passes at that shape skip the search. Every new shape pays it again.",
    statements: &[
        Said::torch("cudnn.benchmark is off by default, and torch.backends.cudnn.benchmark_limit, the most candidate algorithms it times for one convolution configuration, is 10.", "test_layout.py::test_cudnn_benchmark_is_off_and_times_at_most_ten_candidates_by_default"),
        Said::source("With benchmark on, the first call of a convolution configuration (input and weight sizes and strides, dtype, layout, padding, stride, dilation, groups) that the thread has not run builds cuDNN's candidate plans and times up to benchmark_limit of them on the real tensors.", "aten/src/ATen/native/cudnn/Conv_v8.cpp", "get_plans_from_find", "cards"),
        Said::source("The fastest plan is cached per configuration: a later call with the same configuration runs it without a search, and a new batch size is a new configuration, searched again.", "aten/src/ATen/native/cudnn/Conv_v8.cpp", "run_single_conv", "cards"),
        Said::run("In this run the first pass at each new batch size is far slower than the steady passes at the first.", &["first pass, first shape", "first pass, second shape", "steady p50"]),
    ],
    source: "https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark",
    pitfall: "torch.backends.cudnn.benchmark = True\nfor x in [x_a] * 10 + [x_b] * 10:  # x_b: one image more than x_a\n    y = model(x)",
    fix: "torch.backends.cudnn.benchmark = True\nfor x in [x_a] * 10:  # one batch size for every pass (batches padded or bucketed to it)\n    y = model(x)",
    threshold: "CUDA: with benchmark on, ResNet-18 runs 10 passes at a batch this process has not seen, then 10 at another new batch (a shape change midway). Confirmed when, at both shapes, the first pass is above 1.5× the steady passes' median even at their own spread (the warm-up rule); refuted when it is below 1.5× at their spread at both; inconclusive otherwise. Not applicable on a CPU (no cuDNN)",
    question: super::ratio("ResNet-18 with cudnn.benchmark on, after a change of batch size: the first pass at the new size as a multiple of the p50 of passes 3–10 at the first size?", "first pass, second shape", "steady p50", super::Ask::LogScale { min: 0.5, max: 1000.0, within: 2.0 }),
    experiment: cudnn_benchmark,
};

/// The first batch size cudnn-benchmark may use, how many pairs of new sizes it cycles
/// through (one pair per call), and its passes per size.
const BENCH_FIRST: u32 = 100;
const BENCH_PAIRS: u32 = 50;
const BENCH_PASSES: usize = 10;

/// The line cudnn-benchmark's report is measured on: its model and the range its two batch
/// sizes are drawn from (the sizes follow it).
fn cudnn_benchmark_line(ctx: &Ctx) -> String {
    let model = ctx.model(ModelId::Resnet18);
    let size = Setup::with_batch(ctx, model, BENCH_FIRST, GradMode::NoGrad).size;
    let range = format!(
        "{BENCH_FIRST}–{} (two sizes new to this process, one after the other)",
        BENCH_FIRST + 2 * BENCH_PAIRS - 1
    );
    super::kit::describe(model, range, size)
}

fn cudnn_benchmark_setup(ctx: &Ctx) -> Vec<String> {
    let mut lines = vec![
        cudnn_benchmark_line(ctx),
        format!("torch.backends.cudnn.benchmark = True; {BENCH_PASSES} forward passes at the first size, then {BENCH_PASSES} at the next, each timed on its own (eval(), torch.no_grad(), fp32)"),
    ];
    if ctx.model(ModelId::Resnet18) == ModelId::Resnet18 {
        lines.push("ResNet-18 has 20 convolutions in 11 distinct configurations (kernel, stride, channels, image size); a new batch size makes all 11 new".into());
    }
    lines.push("A judgment of what dominates the first pass at a new size: the search (cuDNN's candidate plans built, and up to torch.backends.cudnn.benchmark_limit = 10 of them timed, per configuration) against one steady pass".into());
    lines
}

fn cudnn_benchmark(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    if !ctx.cuda() {
        return Ok(Outcome::new(
            Decision::not_applicable(format!("Not on a CPU: {}.", cpu_reason(protocol::settings::SettingId::CudnnBenchmark))),
            String::new(),
            ChartKind::Line,
        ));
    }
    use std::sync::atomic::{AtomicU32, Ordering};
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let offset = BENCH_FIRST + 2 * (CALLS.fetch_add(1, Ordering::Relaxed) % BENCH_PAIRS);
    let bench = Advanced { cudnn_benchmark: true, ..Advanced::default() };
    let mut all = vec![];
    let mut decisions = vec![];
    let mut texts = vec![];
    let model_id = ctx.model(ModelId::Resnet18);
    for batch in [offset, offset + 1] {
        let setup = Setup::with_batch(ctx, model_id, batch, GradMode::NoGrad);
        let spec = RunSpec { advanced: bench, ..setup.spec.clone() };
        let i = setup.cached(lab, ctx)?;
        let model = lab.model(i);
        let x = setup.input(model, ctx)?;
        let times = time_passes(ctx, BENCH_PASSES, 1, |_, _| forward(model, &x, &spec, ctx.device))?.remove(0);
        let d = warm_up_rule(times[0], &times[2..]);
        texts.push(format!("batch {batch}: {}", d.reason));
        decisions.push(d.verdict);
        all.extend(times);
    }
    use protocol::Verdict::*;
    let text = texts.join(" ");
    let decision = if decisions.iter().all(|v| *v == Confirmed) {
        Decision::rule(true, text, "")
    } else if decisions.iter().all(|v| *v == Refuted) {
        Decision::rule(false, "", text)
    } else {
        Decision::inconclusive(text)
    };
    let measured_on = format!("{}: batches {offset} then {} this time, benchmark on", cudnn_benchmark_line(ctx), offset + 1);
    Ok(Outcome::new(decision, measured_on, ChartKind::Line)
        .figures(vec![
            fig("first pass, first shape", all[0], "ms"),
            fig("first pass, second shape", all[BENCH_PASSES], "ms"),
            fig("steady p50", p(&all[2..BENCH_PASSES], 50.0), "ms"),
        ])
        .series(vec![series("latency per pass (ms)", "ms", numbered(all.len()), all)]))
}
