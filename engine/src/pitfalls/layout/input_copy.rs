//! The `input-copy` card ([`INPUT_COPY`]): Time the copy to the device, not only the model

use super::*;

pub const P50_COPIED_FROM_PAGEABLE: FigureName = FigureName::new("p50 copied from pageable", Unit::Ms);
pub const P50_INPUT_ON_THE_DEVICE: FigureName = FigureName::new("p50 input on the device", Unit::Ms);
pub const PAGEABLE_OVER_ON_DEVICE_CI_LOW: FigureName = FigureName::new("pageable / on device, 95% interval low", Unit::Ratio);
pub const INPUT_BYTES: FigureName = FigureName::new("input bytes", Unit::Bytes);
pub const PEAK_ABOVE_BASELINE_INPUT_ON_THE_DEVICE: FigureName = FigureName::new("peak above baseline, input on the device", Unit::Bytes);
pub const P50_COPIED_FROM_PINNED: FigureName = FigureName::new("p50 copied from pinned", Unit::Ms);
pub const PIN_MEMORY_A_NEW_BUFFER: FigureName = FigureName::new("pin_memory(): a new buffer", Unit::Bool);
pub const PEAK_ABOVE_BASELINE_COPIED_FROM_PAGEABLE: FigureName = FigureName::new("peak above baseline, copied from pageable", Unit::Bytes);
pub const PAGEABLE_OVER_ON_DEVICE_CI_HIGH: FigureName = FigureName::new("pageable / on device, 95% interval high", Unit::Ratio);
pub const P50_PER_ITERATION_COPY_INCLUDED_MS: FigureName = FigureName::new("p50 per iteration, copy included (ms)", Unit::Ms);
pub const P50_PIN_MEMORY_OF_ONE_BATCH: FigureName = FigureName::new("p50 pin_memory() of one batch", Unit::Ms);

pub const INPUT_COPY: Card = Card {
    id: "input-copy",
    title: "Time the copy to the device, not only the model",
    asks: "What does including the input's copy to the device, from pageable or pinned host memory, do to a timed forward pass?",
    labels: ["batch copied to the device before the clock starts", "batch in a reused pinned buffer, copied inside the timer with non_blocking=True"],
    setup: input_copy_setup,
    needs: Needs::Cuda("On a CPU the model reads the input where it already is: there is no host-to-device copy, and no pinned memory."),
    claim: "When each batch starts in host memory, every iteration pays for copying it to the device: timing only model(x) leaves that out. From pageable memory the copy makes the host wait for the stream; from pinned (page-locked) memory with non_blocking=True it is only queued. x.pin_memory() itself copies the batch into a new page-locked buffer, so pinning each batch just before sending it adds a host copy: the gain needs a pinned buffer allocated once and filled where the batch is made.",
    statements: &[
        Said::run("Copying the batch inside each timed pass adds the copy's time to every pass: this run's p50 with the input copied from pageable memory, against the input already on the device.", &[P50_COPIED_FROM_PAGEABLE, P50_INPUT_ON_THE_DEVICE, PAGEABLE_OVER_ON_DEVICE_CI_LOW, PAGEABLE_OVER_ON_DEVICE_CI_HIGH]),
        Said::run("Each copy allocates the batch on the device: the pass's peak rises by exactly the input's bytes.", &[INPUT_BYTES, PEAK_ABOVE_BASELINE_INPUT_ON_THE_DEVICE, PEAK_ABOVE_BASELINE_COPIED_FROM_PAGEABLE]),
        Said::source("A host-to-device copy with non_blocking=False, as from pageable memory here, returns only when the stream has finished: PyTorch queues cudaMemcpyAsync, then calls cudaStreamSynchronize.", "aten/src/ATen/native/cuda/Copy.cu", "copy_kernel_cuda", "more-cards"),
        Said::source("With non_blocking=True PyTorch only queues cudaMemcpyAsync and records an event on the pinned host block, so the block is not reused before the copy ends; the host goes on at once.", "aten/src/ATen/native/cuda/Copy.cu", "copy_kernel_cuda", "more-cards"),
        Said::run("From a pinned buffer the timed pass is faster than from pageable memory on this GPU: this run's two p50s.", &[P50_COPIED_FROM_PINNED, P50_COPIED_FROM_PAGEABLE]),
        Said::source("x.pin_memory() allocates a new page-locked buffer and copies x into it; it returns x itself only when x is already pinned.", "aten/src/ATen/native/Memory.cpp", "pin_memory, _pin_memory", "more-cards"),
        Said::run("So pinning a pageable batch costs a host copy of all its bytes each time: this run times pin_memory() on one batch and checks that it returns a new buffer.", &[PIN_MEMORY_A_NEW_BUFFER, P50_PIN_MEMORY_OF_ONE_BATCH]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers",
    pitfall: "x = batch.to(\"cuda\")  # outside the timer\nt0 = time.time(); y = model(x); torch.cuda.synchronize()",
    fix: "pinned = torch.empty(32, 3, 224, 224).pin_memory()  # page-locked, allocated once, reused\n# each batch is written into `pinned` where it is made (decoded, resized)\nt0 = time.time(); x = pinned.to(\"cuda\", non_blocking=True); y = model(x); torch.cuda.synchronize()",
    threshold: "On every device each copy must add exactly the input's bytes to the pass's peak above the baseline (refuted otherwise). CUDA: confirmed when the 95% bootstrap interval of the p50 ratio (input copied from pageable memory / input on the device, 20 timed iterations each) lies wholly above 1, refuted when it lies wholly below 1.05, inconclusive otherwise; the copy from a pinned buffer (allocated once, reused every iteration) is reported beside it, and so is pin_memory() on one pageable batch (whether it returns a new buffer, and its p50 over 20 calls), not judged. On a CPU not applicable: there is no host-to-device copy (the pageable case is a memcpy, measured and reported) and no pinned memory",
    question: super::super::ratio("ResNet-18, the input copied from pageable host memory inside each timed pass: its p50 as a multiple of the p50 with the input already on the device?", P50_COPIED_FROM_PAGEABLE, P50_INPUT_ON_THE_DEVICE, super::super::SAME_TIME),
    experiment: input_copy,
};

/// What input-copy runs, its warm-up and timed iterations per source, and the line its
/// report is measured on.
pub(super) fn input_copy_plan(ctx: &Ctx) -> (Setup, u32, u32, String) {
    let setup = Setup::new(ctx, ModelId::Resnet18, (4, 32), GradMode::NoGrad);
    let (warmup, iters) = (2, 20);
    let line = format!("{}, {iters} timed iterations per source", setup.describe());
    (setup, warmup, iters, line)
}

/// The bytes of one batch of input (fp32 images).
pub(super) fn input_bytes(setup: &Setup) -> u64 {
    let element = 4u64; // fp32
    setup.batch as u64 * 3 * setup.size as u64 * setup.size as u64 * element
}

pub(super) fn input_copy_setup(ctx: &Ctx) -> Vec<String> {
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

pub(super) fn input_copy(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig(INPUT_BYTES, input_bytes as f64),
        fig(PEAK_ABOVE_BASELINE_INPUT_ON_THE_DEVICE, base as f64),
        fig(PEAK_ABOVE_BASELINE_COPIED_FROM_PAGEABLE, pageable.memory.peak_above_baseline_bytes as f64),
        fig(P50_INPUT_ON_THE_DEVICE, on_device.latency_ms.p50),
        fig(P50_COPIED_FROM_PAGEABLE, pageable.latency_ms.p50),
        fig(PAGEABLE_OVER_ON_DEVICE_CI_LOW, shift.bounds().0),
        fig(PAGEABLE_OVER_ON_DEVICE_CI_HIGH, shift.bounds().1),
    ];
    // The question's arms, in its order: pageable over on the device.
    figures.extend(super::super::kit::interval_figures(&INPUT_COPY.question, &shift));
    let mut labels = vec!["on the device".to_string(), "from pageable".to_string()];
    let mut p50s = vec![on_device.latency_ms.p50, pageable.latency_ms.p50];
    if let Some(r) = &pinned {
        figures.push(fig(P50_COPIED_FROM_PINNED, r.latency_ms.p50));
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
        .series(vec![series(P50_PER_ITERATION_COPY_INCLUDED_MS, labels, p50s)]))
}

/// What `batch.pin_memory()` does to one pageable batch of input-copy's shape, on CUDA:
/// whether it returns a new (page-locked) buffer rather than the batch itself, and its p50
/// over [`PIN_ROUNDS`] calls: the host copy that pinning each batch adds.
pub(super) fn pin_each_batch(ctx: &Ctx, setup: &Setup) -> Result<Vec<protocol::Figure>, RunFailure> {
    let device = tch_device(ctx.device);
    let (b, s) = (i64::from(setup.batch), i64::from(setup.size));
    let host = catch_torch(|| Tensor::randn([b, 3, s, s], (Kind::Float, Device::Cpu)))?;
    let new_buffer = catch_torch(|| {
        let pinned = host.pin_memory(device);
        pinned.data_ptr() != host.data_ptr() && pinned.is_pinned(device) && !host.is_pinned(device)
    })?;
    let times = time_passes(ctx, PIN_ROUNDS, 1, |_, _| catch_torch(|| host.pin_memory(device)))?;
    Ok(vec![
        fig(PIN_MEMORY_A_NEW_BUFFER, f64::from(u8::from(new_buffer))),
        fig(P50_PIN_MEMORY_OF_ONE_BATCH, p(&times[0], 50.0)),
    ])
}

/// The calls of `pin_memory()` input-copy times.
pub(super) const PIN_ROUNDS: usize = 20;
