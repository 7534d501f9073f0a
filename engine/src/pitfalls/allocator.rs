//! Memory budgets and the CUDA caching allocator: how the batch meets a budget, why
//! reserved is not leaked, and what empty_cache() costs.

use protocol::{
    ChartKind, FailureKind, GradMode, ModelId, RunFailure, DEFAULT_CPU_BUDGET_BYTES,
    DEFAULT_CUDA_BUDGET_BYTES,
};

use super::kit::{
    describe, element_cap, fig, linear_fit, measure, mib, numbered, p, series, time_passes, Ctx,
    Decision, Outcome, Setup, Shift,
};
use super::{Card, Needs, Said};
use crate::lab::{forward, Lab};
use crate::torch_call::torch_failure;
use crate::torch_ext;

pub const BATCH_SCALING: Card = Card {
    id: "batch-scaling",
    title: "Memory grows with the batch; grad mode moves the ceiling",
    asks: "How does memory grow with the batch, and how large a batch fits a memory budget, with autograd on and under torch.no_grad()?",
    labels: ["forward pass with autograd on", "forward pass under torch.no_grad()"],
    setup: batch_scaling_setup,
    needs: Needs::Any,
    claim: "Activation memory grows linearly with the batch in both modes, and each sample costs more with autograd on, which keeps the activations backward would need until the output is freed: within the same memory budget, torch.no_grad() fits a larger batch.",
    statements: &[
        Said::run("The peak above the baseline grows linearly with the batch, with autograd on and under torch.no_grad() alike.", &["grad enabled: linearity R²", "no_grad: linearity R²"]),
        Said::torch("With autograd on, the forward pass saves for backward the activations of every sample: doubling the batch doubles their bytes exactly.", "test_runtime.py::test_with_grad_the_saved_activations_double_with_the_batch"),
        Said::torch("They stay alive as long as the output does: every convolution's output is still held when the pass returns, and all are freed with the output.", "test_runtime.py::test_with_grad_activations_live_as_long_as_the_output"),
        Said::torch("Under torch.no_grad() nothing is saved and no convolution's output outlives the pass: each is freed once the layers after it have used it.", "test_runtime.py::test_under_no_grad_no_activation_outlives_the_pass"),
        Said::run("So each sample costs more memory with autograd on than under torch.no_grad(): compare the slopes of the two lines.", &["grad enabled: memory per sample (slope)", "no_grad: memory per sample (slope)"]),
        Said::run("Within the same budget, the largest batch that fits is larger under torch.no_grad().", &["memory budget", "grad enabled: largest batch within budget", "no_grad: largest batch within budget"]),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
    pitfall: "y = model(big_batch)  # autograd on",
    fix: "with torch.no_grad():\n    y = model(big_batch)",
    threshold: "confirmed when the peak above baseline is linear in the batch for both modes (R² > 0.95 over the measured powers of two) and the largest batch within the budget is larger under no_grad than with grad. Each sweep doubles the batch until the peak allocated (weights and input included) passes the budget, the device fails (out of memory or any other error, once one batch has run: the reason says which), or the next batch would pass the sweep's largest: 256 on a CPU (to answer in seconds), on a GPU 4096 or the largest batch whose biggest tensor stays below 2³¹ elements, whichever is smaller. Regime: the budget, not the device, must end the sweep: on a GPU it is 16 GiB unless chosen (not the free memory: an H200's 139 GB would let both modes reach the largest batch and tie), on a CPU 160 MiB. By PyTorch's own profiler on a CPU, ResNet-18's peak grows by about 20 MiB per sample with grad and about 6 MiB under no_grad at 224² (about 3.8 and 1.1 MiB at the CPU's 96²), so with grad several hundred samples fit in 16 GiB, and under no_grad the stem output's 2³¹-element cap (batch 2048 at 224²) may end the sweep first. The latency per sample is plotted, not judged",
    question: super::ratio("ResNet-18 in eval(), the same memory budget for both, the batch doubled from 1: the largest batch that fits under torch.no_grad() (B) as a multiple of the largest that fits with autograd on (A)? (Both are powers of two; a judgment of what one sample costs in each mode.)", "no_grad: largest batch within budget", "grad enabled: largest batch within budget", super::Ask::LogScale { min: 0.1, max: 100.0, within: 2.0 }),
    experiment: batch_scaling,
};

/// Why one sweep stopped, in words.
fn ended(name: &str, b: u32, why: &str) -> String {
    format!("{name}: stopped at batch {b}: {why}")
}

/// What batch-scaling sweeps: the model, the memory budget, the largest batch tried, and
/// the line its report is measured on.
struct BatchPlan {
    model: ModelId,
    budget: u64,
    max_batch: u32,
    line: String,
}

/// Each batch of the sweep is one run of this many warm-up and timed iterations.
const SWEEP_WARMUP: u32 = 1;
const SWEEP_ITERS: u32 = 2;

fn batch_plan(ctx: &Ctx) -> BatchPlan {
    let model = ctx.model(ModelId::Resnet18);
    let budget = ctx.opts.budget_bytes.unwrap_or(if ctx.cuda() {
        DEFAULT_CUDA_BUDGET_BYTES
    } else {
        DEFAULT_CPU_BUDGET_BYTES
    });
    let size = ctx
        .spec(model, 1, true, GradMode::NoGrad)
        .resolved_input_size();
    let max_batch = (if ctx.cuda() { 4096 } else { 256 }).min(element_cap(model, size));
    let line = describe(model, format!("1 to {max_batch} (powers of two)"), size);
    BatchPlan { model, budget, max_batch, line }
}

/// Why the sweep's largest batch is what it is on this device, in words.
fn sweep_limit(ctx: &Ctx, model: ModelId, max_batch: u32) -> &'static str {
    let size = ctx.spec(model, 1, true, GradMode::NoGrad).resolved_input_size();
    if max_batch == element_cap(model, size) {
        "the largest batch whose biggest tensor stays below 2³¹ elements"
    } else if ctx.cuda() {
        "the sweep's largest on a GPU"
    } else {
        "the sweep's largest on a CPU, which keeps the card to seconds"
    }
}

fn batch_scaling_setup(ctx: &Ctx) -> Vec<String> {
    let plan = batch_plan(ctx);
    let weights = if plan.model == ModelId::Resnet18 {
        "ResNet-18's weights: 11.7 million parameters, about 45 MiB in fp32, held throughout and counted in the budget".to_string()
    } else {
        format!("{}'s weights are held throughout and counted in the budget", plan.model.display_name())
    };
    let size = ctx.spec(plan.model, 1, true, GradMode::NoGrad).resolved_input_size();
    let mut lines = vec![
        plan.line.clone(),
        "A: forward passes with autograd on; B: the same under torch.no_grad(); both in eval(), fp32 (4 bytes an element)".into(),
        weights,
        format!(
            "Memory budget: {} ({} bytes) of peak allocated memory, weights and input included",
            protocol::format_bytes(plan.budget),
            plan.budget
        ),
        format!("Each sweep doubles the batch from 1 until the peak passes the budget, the device fails, or the next batch would pass {} ({}); each batch is one run of {SWEEP_WARMUP} warm-up and {SWEEP_ITERS} timed iterations", plan.max_batch, sweep_limit(ctx, plan.model, plan.max_batch)),
    ];
    lines.extend(super::memory::architecture(plan.model, size));
    lines
}

fn batch_scaling(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let BatchPlan { model, budget, max_batch, line } = batch_plan(ctx);
    let mut labels: Vec<String> = vec![];
    let mut series_out = vec![];
    let mut figures = vec![fig("memory budget", budget as f64, "bytes")];
    let mut fits = vec![];
    let mut linear = true;
    let mut notes = vec![];
    for (name, grad) in [
        ("grad enabled", GradMode::Enabled),
        ("no_grad", GradMode::NoGrad),
    ] {
        let (mut xs, mut peaks, mut totals, mut per_sample) = (vec![], vec![], vec![], vec![]);
        let mut largest = 0u32;
        let mut b = 1u32;
        let mut end = None;
        while b <= max_batch {
            let mut spec = ctx.spec(model, b, true, grad);
            spec.iters = SWEEP_ITERS;
            spec.warmup = SWEEP_WARMUP;
            match measure(lab, ctx, spec) {
                Ok(r) => {
                    let total = r.memory.peak_allocated_bytes;
                    xs.push(b as f64);
                    peaks.push(r.memory.peak_above_baseline_bytes as f64);
                    totals.push(mib(total));
                    per_sample.push(r.latency_ms.p50 / b as f64);
                    if total > budget {
                        let why = format!("needs {:.1} MiB, above the budget", mib(total));
                        end = Some(ended(name, b, &why));
                        break;
                    }
                    largest = b;
                }
                // Stopping the experiment is never a data point.
                Err(f) if matches!(f.kind, FailureKind::Cancelled | FailureKind::Timeout) => {
                    return Err(f)
                }
                // Not even batch 1 ran: nothing was measured, the card fails.
                Err(f) if xs.is_empty() => return Err(f),
                Err(f) => {
                    let why = match f.kind {
                        FailureKind::OutOfMemory => {
                            format!("out of memory — a data point, not a crash ({})", f.message)
                        }
                        _ => format!("the device failed ({}) — the sweep ends there", f.message),
                    };
                    end = Some(ended(name, b, &why));
                    break;
                }
            }
            b *= 2;
        }
        notes.push(end.unwrap_or_else(|| {
            format!("{name}: stopped after batch {largest}: the next power of two is above the sweep's largest batch on this device ({max_batch}: {})", sweep_limit(ctx, model, max_batch))
        }));
        let (slope, r2) = linear_fit(&xs, &peaks);
        linear &= r2 > 0.95;
        fits.push(largest);
        figures.push(fig(
            &format!("{name}: largest batch within budget"),
            largest as f64,
            "count",
        ));
        figures.push(fig(
            &format!("{name}: memory per sample (slope)"),
            slope,
            "bytes",
        ));
        figures.push(fig(&format!("{name}: linearity R²"), r2, "ratio"));
        if xs.len() > labels.len() {
            labels = xs.iter().map(|x| format!("{x}")).collect();
        }
        // Total allocated, so that it compares with the budget line.
        series_out.push(series(
            &format!("{name}: peak allocated (MiB)"),
            "MiB",
            vec![],
            totals,
        ));
        series_out.push(series(
            &format!("{name}: ms per sample"),
            "ms",
            vec![],
            per_sample,
        ));
    }
    series_out.push(series(
        "memory budget (MiB)",
        "MiB",
        vec![],
        vec![mib(budget); labels.len()],
    ));
    for s in &mut series_out {
        s.x = labels.clone();
        s.y.resize(labels.len(), None);
    }
    let figures_text = format!(
        "Largest batch within {:.0} MiB: {} with grad, {} with no_grad; memory {} linear in the batch.",
        mib(budget),
        fits[0],
        fits[1],
        if linear { "is" } else { "is not" }
    );
    Ok(Outcome::new(
        Decision::rule(
            linear && fits[1] > fits[0],
            figures_text.clone(),
            figures_text,
        ),
        line,
        ChartKind::Line,
    )
    .figures(figures)
    .series(series_out)
    .notes(notes))
}

/// The cards about the caching allocator apply where the device's meter reports a reserved
/// pool (CUDA); elsewhere this is their not-applicable decision, saying why.
pub fn no_pool(reserved: Option<u64>, why: &str) -> Option<Decision> {
    reserved.is_none().then(|| {
        Decision::not_applicable(format!(
            "{why} This device reports no reserved pool. Run this card on a server with a GPU to see the effect."
        ))
    })
}

pub const ALLOCATED_VS_RESERVED: Card = Card {
    id: "allocated-vs-reserved",
    title: "Reserved is not leaked",
    asks: "After a forward pass's tensors are freed, what do torch.cuda.memory_allocated() and torch.cuda.memory_reserved() report?",
    labels: ["print memory_reserved()", "print memory_allocated()"],
    setup: reserved_setup,
    needs: Needs::Cuda("A CPU's allocator keeps no pool of its own: freed tensors go straight back, so there is no reserved figure to compare with allocated."),
    claim: "On CUDA, memory_reserved() includes the caching allocator's pool: after a run's tensors are freed, memory_allocated() returns to the baseline while memory_reserved() stays at the pool the run grew. That memory is cached for reuse, not leaked.",
    statements: &[
        Said::run("Once the output is freed, memory_allocated() is back at the run's baseline, the weights and the input: nothing leaked.", &["allocated at the run's baseline (weights and input)", "allocated once the output was freed (weights and input)"]),
        Said::run("memory_reserved() stays above what is still allocated, at the pool the run grew.", &["reserved after release", "allocated after release", "peak reserved during the run"]),
        Said::source("A freed block goes back to the caching allocator's pool, not to the driver: memory_allocated() drops by its size, memory_reserved() does not change.", "c10/cuda/CUDACachingAllocator.cpp", "free_block", "cards"),
        Said::source("Reserved memory goes back to the driver (cudaFree) only when empty_cache() is called, when a cudaMalloc fails and the allocator frees its unused segments to retry, or past a garbage-collection threshold set in PYTORCH_CUDA_ALLOC_CONF.", "c10/cuda/CUDACachingAllocator.cpp", "release_cached_blocks", "cards"),
        Said::source("memory_allocated() counts the blocks handed out, not the tensors' exact bytes: each request is rounded up to a multiple of 512 bytes.", "c10/cuda/CUDACachingAllocator.cpp", "round_size", "cards"),
        Said::source("A request above 1 MiB can also get a whole block up to 1 MiB larger than itself, counted whole: by default the allocator splits a free block of its large pool, cached or just allocated, only when more than 1 MiB would remain (kSmallSize).", "c10/cuda/CUDACachingAllocator.cpp", "should_split", "cards"),
        Said::source("memory_reserved() counts whole segments from cudaMalloc: 2 MiB for requests up to 1 MiB (shared by small blocks), 20 MiB for requests up to 10 MiB, otherwise the request rounded up to 2 MiB, so reserved can exceed allocated even while every tensor is alive.", "c10/cuda/CUDACachingAllocator.cpp", "get_allocation_size", "cards"),
        Said::run("The driver's count of used memory, which nvidia-smi shows, is higher still.", &["device used (driver, includes the CUDA context)", "reserved after release"]),
        Said::source("It also counts what the caching allocator does not: the CUDA context, memory the libraries took from the driver directly, and other processes.", "c10/cuda/CUDACachingAllocator.cpp", "malloc", "cards"),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
    pitfall: "print(torch.cuda.memory_reserved())",
    fix: "print(torch.cuda.memory_allocated())  # bytes held by live tensors",
    threshold: "CUDA only (a device whose allocator keeps a reserved pool). Confirmed when, after the output is freed, allocated equals the run's baseline (weights and input) and reserved exceeds allocated. Every card starts with the cached models dropped, the cache emptied and the peak counters reset, so the pool read here is this run's own, not what earlier cards of a tour left. Regime: any GPU; ResNet-50 with grad at batch 64, 224², reserves several GB for its activations, which stay cached after they are freed",
    question: super::ratio("ResNet-50 after one run with autograd on (batch 64, 224², fp32), its output and input freed: memory_reserved() (A) as a multiple of memory_allocated() (B)?", "reserved after release", "allocated after release", super::Ask::LogScale { min: 0.5, max: 1000.0, within: 2.0 }),
    experiment: allocated_vs_reserved,
};

/// The allocated-vs-reserved rule over the readings after the run's output was freed.
pub fn reserved_rule(after_release: u64, baseline: u64, reserved: u64) -> Decision {
    let figures = format!(
        "After the output was freed: allocated {:.1} MiB (baseline {:.1} MiB), reserved {:.1} MiB.",
        mib(after_release),
        mib(baseline),
        mib(reserved)
    );
    Decision::rule(
        after_release == baseline && reserved > after_release,
        figures.clone(),
        figures,
    )
}

/// What allocated-vs-reserved runs, and the line its report is measured on.
fn reserved_plan(ctx: &Ctx) -> (Setup, String) {
    let setup = Setup::new(ctx, ModelId::Resnet50, (8, 64), GradMode::Enabled);
    let line = format!("{}, grad enabled", setup.describe());
    (setup, line)
}

fn reserved_setup(ctx: &Ctx) -> Vec<String> {
    let (s, line) = reserved_plan(ctx);
    let weights = if s.model == ModelId::Resnet50 {
        "ResNet-50's weights (25.6 million fp32 parameters, about 98 MiB)".to_string()
    } else {
        format!("{}'s weights", s.model.display_name())
    };
    vec![
        line,
        format!(
            "One run of {} in eval(), autograd on, fp32; then, with its output and input freed, both readings are taken",
            super::memory::iterations(&s.spec)
        ),
        format!("A: torch.cuda.memory_reserved(), the allocator's pool; B: torch.cuda.memory_allocated(), the blocks of the tensors still alive: {weights} and the cuBLAS workspaces this worker made at start"),
        "Before the card runs, the worker drops its cached models, empties the CUDA cache and resets the peak counters".into(),
    ]
}

fn allocated_vs_reserved(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let reading = lab.meter(ctx.device).read().map_err(torch_failure)?;
    if let Some(na) = no_pool(
        reading.reserved,
        "The CPU allocator keeps no cache of its own: freed tensors go straight back, so there is no reserved figure to compare.",
    ) {
        return Ok(Outcome::new(na, String::new(), ChartKind::Bar));
    }
    let (setup, measured_on) = reserved_plan(ctx);
    let r = measure(lab, ctx, setup.spec.clone())?;
    let reading = lab.meter(ctx.device).read().map_err(torch_failure)?;
    let reserved = reading.reserved.unwrap_or(0);
    let used = lab.meter(ctx.device).device_used().unwrap_or(0);
    let labels = vec![
        "allocated".to_string(),
        "reserved".into(),
        "device used (driver)".into(),
    ];
    Ok(Outcome::new(
        reserved_rule(
            r.memory.after_release_bytes,
            r.memory.baseline_bytes,
            reserved,
        ),
        measured_on,
        ChartKind::Bar,
    )
    .figures(vec![
        fig("allocated at the run's baseline (weights and input)", r.memory.baseline_bytes as f64, "bytes"),
        fig("allocated once the output was freed (weights and input)", r.memory.after_release_bytes as f64, "bytes"),
        fig("allocated after release", reading.allocated as f64, "bytes"),
        fig("reserved after release", reserved as f64, "bytes"),
        fig(
            "peak reserved during the run",
            r.memory.peak_reserved_bytes.unwrap_or(0) as f64,
            "bytes",
        ),
        fig(
            "device used (driver, includes the CUDA context)",
            used as f64,
            "bytes",
        ),
    ])
    .series(vec![series(
        "after the run (MiB)",
        "MiB",
        labels,
        vec![mib(reading.allocated), mib(reserved), mib(used)],
    )]))
}

pub const EMPTY_CACHE: Card = Card {
    id: "empty-cache",
    title: "empty_cache() frees nothing you hold, and costs time",
    asks: "What does calling torch.cuda.empty_cache() after every request do to memory and latency?",
    labels: ["empty_cache() after every request", "no empty_cache() call"],
    setup: empty_cache_setup,
    needs: Needs::Cuda("empty_cache() acts on the CUDA caching allocator's pool; a CPU has no such pool."),
    claim: "torch.cuda.empty_cache() frees no tensor you still hold: it gives the pool's wholly unused segments back to the driver, so the next request must get them again with cudaMalloc, and a request that ends with it takes longer than one that does not.",
    statements: &[
        Said::run("Emptying the cache left the allocated bytes unchanged: the model and the input it held were not freed.", &["allocated change from empty_cache"]),
        Said::source("empty_cache() returns to the driver, with cudaFree, only the cached segments that hold no live block; a segment holding any live tensor stays reserved.", "c10/cuda/CUDACachingAllocator.cpp", "release_cached_blocks", "cards"),
        Said::source("It first waits on the events of blocks still in use by other streams, so that it frees nothing the GPU is still reading.", "c10/cuda/CUDACachingAllocator.cpp", "synchronize_and_free_events", "cards"),
        Said::source("The next request finds the pool empty: every block it needs comes from a new cudaMalloc instead of the pool.", "c10/cuda/CUDACachingAllocator.cpp", "alloc_block", "cards"),
        Said::run("Requests that end with empty_cache() took longer than requests on a warm cache: a higher p50 and p90.", &["p50 with empty_cache", "p50 without empty_cache", "p90 with empty_cache", "p90 without empty_cache", "p50 ratio with / without, 95% interval low", "p50 ratio with / without, 95% interval high"]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html",
    pitfall: "y = model(x)\ntorch.cuda.empty_cache()  # after every request",
    fix: "y = model(x)  # no empty_cache() call",
    threshold: "CUDA only (a device whose allocator keeps a reserved pool). 100 requests of each kind, alternating, after a synchronised warm-up: a request without starts from a warm cache; a request with starts from an emptied cache (as after the previous request's empty_cache()) and ends with its own empty_cache(), which is timed with it. Confirmed when emptying the cache leaves allocated memory unchanged, and the requests with it are slower: a higher p90 (over 100 requests, at least 10 must move it: one slow request cannot decide) and the 95% bootstrap interval of the p50 ratio (with / without) wholly above 1; refuted when allocated memory changes, the p90 is not higher, or the interval lies wholly below 1.05 (any cost under 5%); inconclusive otherwise. Regime: any GPU; ResNet-50 at batch 32, 224², under no_grad, holds hundreds of MB of activation blocks at its peak, which a request after empty_cache() must get again with cudaMalloc and which empty_cache() gives back with cudaFree, on every request",
    question: super::ratio("ResNet-50 under torch.no_grad() (batch 32, 224²): the p50 latency of a request with empty_cache() (A) as a multiple of one without (B)? (A judgment, against the noise of 100 requests of each kind.)", "p50 with empty_cache", "p50 without empty_cache", super::SAME_TIME),
    experiment: empty_cache,
};

/// The empty-cache rule; `with` and `without` are per-request milliseconds.
pub fn empty_cache_rule(allocated_change: i64, with: &[f64], without: &[f64]) -> Decision {
    let (p90_with, p90_without) = (p(with, 90.0), p(without, 90.0));
    let shift = Shift::of(with, without);
    let figures = format!(
        "p90 {p90_with:.3} ms with empty_cache() in every request vs {p90_without:.3} ms without; p50 {}; allocated memory changed by {allocated_change} bytes.",
        shift.describe()
    );
    if allocated_change != 0 || p90_with <= p90_without {
        return Decision::rule(false, "", figures);
    }
    Decision::latency(&shift, 1.0, 1.05, figures.clone(), figures)
}

/// What empty-cache runs: the model and batch, the requests of each kind, and the line its
/// report is measured on.
fn empty_cache_plan(ctx: &Ctx) -> (Setup, usize, String) {
    let setup = Setup::new(ctx, ModelId::Resnet50, (8, 32), GradMode::NoGrad);
    let requests = 100;
    let line = format!("{}, no_grad, {requests} requests of each kind", setup.describe());
    (setup, requests, line)
}

/// The untimed passes before empty-cache's timed requests.
const EMPTY_CACHE_WARM: usize = 3;

fn empty_cache_setup(ctx: &Ctx) -> Vec<String> {
    let (_, _, line) = empty_cache_plan(ctx);
    vec![
        line,
        format!("A: each request ends with torch.cuda.empty_cache(), timed with it (and so starts from an emptied pool); B: requests without it, each starting from a pool an untimed pass has just filled. The two kinds alternate, after {EMPTY_CACHE_WARM} untimed passes").into(),
        "Also read: the bytes allocated just before and just after each empty_cache(), with the model and its input held".into(),
    ]
}

fn empty_cache(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    let meter = lab.meter(ctx.device);
    if let Some(na) = no_pool(
        meter.read().map_err(torch_failure)?.reserved,
        "empty_cache() acts on the CUDA caching allocator; a CPU has none.",
    ) {
        return Ok(Outcome::new(na, String::new(), ChartKind::Line));
    }
    let (setup, requests, measured_on) = empty_cache_plan(ctx);
    let spec = setup.spec.clone();
    let i = setup.cached(lab, ctx)?;
    let model = lab.model(i);
    let meter = lab.meter(ctx.device);
    let x = setup.input(model, ctx)?;
    for _ in 0..EMPTY_CACHE_WARM {
        drop(forward(model, &x, &spec, ctx.device)?);
    }
    let mut allocated_change = 0i64;
    let empty = || torch_ext::cuda_empty_cache().map_err(torch_failure);
    let allocated =
        || -> Result<i64, RunFailure> { Ok(meter.read().map_err(torch_failure)?.allocated as i64) };
    let times = time_passes(ctx, requests, 2, |variant, clock| {
        if variant == 0 {
            // A warm cache: the previous request emptied it, so refill it untimed.
            drop(forward(model, &x, &spec, ctx.device)?);
            crate::torch_call::synchronize(ctx.device)?;
            clock.restart();
            return forward(model, &x, &spec, ctx.device).map(Some);
        }
        // The previous request's empty_cache(), with the model and input held.
        let before = allocated()?;
        empty()?;
        allocated_change += allocated()? - before;
        clock.restart();
        drop(forward(model, &x, &spec, ctx.device)?);
        crate::torch_call::synchronize(ctx.device)?;
        empty()?;
        Ok(None)
    })?;
    let (without, with) = (&times[0], &times[1]);
    Ok(Outcome::new(
        empty_cache_rule(allocated_change, with, without),
        measured_on,
        ChartKind::Line,
    )
    .figures([vec![
        fig("p50 without empty_cache", p(without, 50.0), "ms"),
        fig("p90 without empty_cache", p(without, 90.0), "ms"),
        fig("p50 with empty_cache", p(with, 50.0), "ms"),
        fig("p90 with empty_cache", p(with, 90.0), "ms"),
        fig(
            "p50 ratio with / without, 95% interval low",
            Shift::of(with, without).bounds().0,
            "ratio",
        ),
        fig(
            "p50 ratio with / without, 95% interval high",
            Shift::of(with, without).bounds().1,
            "ratio",
        ),
        fig(
            "allocated change from empty_cache",
            allocated_change as f64,
            "bytes",
        ),
    ], super::kit::interval_figures(&EMPTY_CACHE.question, &Shift::of(with, without))].concat())
    .series(vec![
        series(
            "without (ms)",
            "ms",
            numbered(without.len()),
            without.clone(),
        ),
        series(
            "with empty_cache (ms)",
            "ms",
            numbered(with.len()),
            with.clone(),
        ),
    ])
    .notes(vec![
        "Requests alternate between the two kinds so both see the same conditions.".into(),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::Verdict;

    #[test]
    fn allocator_cards_apply_only_where_the_meter_reports_a_pool() {
        // A CPU-like reading: no reserved figure.
        let na = no_pool(None, "why.").expect("not applicable without a pool");
        assert_eq!(na.verdict, Verdict::NotApplicable);
        assert!(na.reason.contains("GPU"));
        // A CUDA-like reading: the rule decides.
        assert!(no_pool(Some(0), "why.").is_none());
    }

    #[test]
    fn reserved_rule_needs_allocated_back_at_baseline_and_a_pool_above_it() {
        let m = 1 << 20;
        assert_eq!(
            reserved_rule(5 * m, 5 * m, 50 * m).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            reserved_rule(6 * m, 5 * m, 50 * m).verdict,
            Verdict::Refuted,
            "a leak"
        );
        assert_eq!(
            reserved_rule(5 * m, 5 * m, 5 * m).verdict,
            Verdict::Refuted,
            "no pool kept"
        );
    }

    #[test]
    fn empty_cache_rule_needs_a_shift_that_one_request_cannot_make() {
        let without: Vec<f64> = (0..100).map(|i| 4.0 + (i % 10) as f64 * 0.01).collect();
        let with: Vec<f64> = without.iter().map(|x| x + 0.5).collect();
        assert_eq!(
            empty_cache_rule(0, &with, &without).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            empty_cache_rule(4096, &with, &without).verdict,
            Verdict::Refuted,
            "empty_cache must not free a held tensor"
        );
        // The same requests plus a few very slow ones (less than a tenth): not decided.
        let mut jitter = without.clone();
        for x in jitter.iter_mut().take(9) {
            *x = 100.0;
        }
        assert_eq!(
            empty_cache_rule(0, &jitter, &without).verdict,
            Verdict::Refuted
        );
    }
}
