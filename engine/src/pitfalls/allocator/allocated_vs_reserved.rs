//! The `allocated-vs-reserved` card ([`ALLOCATED_VS_RESERVED`]): Reserved is not leaked

use super::*;

pub const ALLOCATED_AT_THE_RUNS_BASELINE_WEIGHTS_AND_INPUT: FigureName = FigureName::new("allocated at the run's baseline (weights and input)", Unit::Bytes);
pub const RESERVED_AFTER_RELEASE: FigureName = FigureName::new("reserved after release", Unit::Bytes);
pub const ALLOCATED_AFTER_RELEASE: FigureName = FigureName::new("allocated after release", Unit::Bytes);
pub const DEVICE_USED_DRIVER_INCLUDES_THE_CUDA_CONTEXT: FigureName = FigureName::new("device used (driver, includes the CUDA context)", Unit::Bytes);
pub const ALLOCATED_ONCE_THE_OUTPUT_WAS_FREED_WEIGHTS_AND_INPUT: FigureName = FigureName::new("allocated once the output was freed (weights and input)", Unit::Bytes);
pub const PEAK_RESERVED_DURING_THE_RUN: FigureName = FigureName::new("peak reserved during the run", Unit::Bytes);
pub const AFTER_THE_RUN_MIB: FigureName = FigureName::new("after the run (MiB)", Unit::Mib);

pub const ALLOCATED_VS_RESERVED: Card = Card {
    id: "allocated-vs-reserved",
    title: "Reserved is not leaked",
    asks: "After a forward pass's tensors are freed, what do torch.cuda.memory_allocated() and torch.cuda.memory_reserved() report?",
    labels: ["print memory_reserved()", "print memory_allocated()"],
    setup: reserved_setup,
    needs: Needs::Cuda("memory_reserved() and memory_allocated() read the CUDA caching allocator, which a CPU does not use."),
    claim: "On CUDA, memory_reserved() includes the caching allocator's pool: after a run's tensors are freed, memory_allocated() returns to the baseline while memory_reserved() stays at the pool the run grew. That memory is cached for reuse, not leaked.",
    statements: &[
        Said::run("Once the output is freed, memory_allocated() is back at the run's baseline, the weights and the input: nothing leaked.", &[ALLOCATED_AT_THE_RUNS_BASELINE_WEIGHTS_AND_INPUT, ALLOCATED_ONCE_THE_OUTPUT_WAS_FREED_WEIGHTS_AND_INPUT]),
        Said::run("memory_reserved() stays above what is still allocated, at the pool the run grew.", &[RESERVED_AFTER_RELEASE, ALLOCATED_AFTER_RELEASE, PEAK_RESERVED_DURING_THE_RUN]),
        Said::source("A freed block goes back to the caching allocator's pool, not to the driver: memory_allocated() drops by its size, memory_reserved() does not change.", "c10/cuda/CUDACachingAllocator.cpp", "free_block", "cards"),
        Said::source("Reserved memory goes back to the driver (cudaFree) only when empty_cache() is called, when a cudaMalloc fails and the allocator frees its unused segments to retry, or past a garbage-collection threshold set in PYTORCH_CUDA_ALLOC_CONF.", "c10/cuda/CUDACachingAllocator.cpp", "release_cached_blocks", "cards"),
        Said::source("memory_allocated() counts the blocks handed out, not the tensors' exact bytes: each request is rounded up to a multiple of 512 bytes.", "c10/cuda/CUDACachingAllocator.cpp", "round_size", "cards"),
        Said::source("A request above 1 MiB can also get a whole block up to 1 MiB larger than itself, counted whole: by default the allocator splits a free block of its large pool, cached or just allocated, only when more than 1 MiB would remain (kSmallSize).", "c10/cuda/CUDACachingAllocator.cpp", "should_split", "cards"),
        Said::source("memory_reserved() counts whole segments from cudaMalloc: 2 MiB for requests up to 1 MiB (shared by small blocks), 20 MiB for requests up to 10 MiB, otherwise the request rounded up to 2 MiB, so reserved can exceed allocated even while every tensor is alive.", "c10/cuda/CUDACachingAllocator.cpp", "get_allocation_size", "cards"),
        Said::run("The driver's count of used memory, which nvidia-smi shows, is higher still.", &[DEVICE_USED_DRIVER_INCLUDES_THE_CUDA_CONTEXT, RESERVED_AFTER_RELEASE]),
        Said::source("It also counts what the caching allocator does not: the CUDA context, memory the libraries took from the driver directly, and other processes.", "c10/cuda/CUDACachingAllocator.cpp", "malloc", "cards"),
    ],
    source: "https://pytorch.org/docs/stable/notes/cuda.html#memory-management",
    pitfall: "print(torch.cuda.memory_reserved())",
    fix: "print(torch.cuda.memory_allocated())  # bytes held by live tensors",
    threshold: "CUDA only (a device whose allocator keeps a reserved pool). Confirmed when, after the output is freed, allocated equals the run's baseline (weights and input) and reserved exceeds allocated. Every card starts with the cached models dropped, the cache emptied and the peak counters reset, so the pool read here is this run's own, not what earlier cards of a tour left. Regime: any GPU; ResNet-50 with grad at batch 64, 224², reserves several GB for its activations, which stay cached after they are freed",
    question: super::super::ratio("ResNet-50 after one run with autograd on (batch 64, 224², fp32), its output and input freed: memory_reserved() as a multiple of memory_allocated()?", RESERVED_AFTER_RELEASE, ALLOCATED_AFTER_RELEASE, super::super::Ask::LogScale { min: 0.5, max: 1000.0, within: 2.0 }),
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
pub(super) fn reserved_plan(ctx: &Ctx) -> (Setup, String) {
    let setup = Setup::new(ctx, ModelId::Resnet50, (8, 64), GradMode::Enabled);
    let line = format!("{}, grad enabled", setup.describe());
    (setup, line)
}

pub(super) fn reserved_setup(ctx: &Ctx) -> Vec<String> {
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
            super::super::memory::iterations(&s.spec)
        ),
        crate::pitfalls::kit::arms("torch.cuda.memory_reserved(), the allocator's pool", format!("torch.cuda.memory_allocated(), the blocks of the tensors still alive: {weights} and the cuBLAS workspaces this worker made at start")),
        "Before the card runs, the worker drops its cached models, empties the CUDA cache and resets the peak counters".into(),
    ]
}

pub(super) fn allocated_vs_reserved(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig(ALLOCATED_AT_THE_RUNS_BASELINE_WEIGHTS_AND_INPUT, r.memory.baseline_bytes as f64),
        fig(ALLOCATED_ONCE_THE_OUTPUT_WAS_FREED_WEIGHTS_AND_INPUT, r.memory.after_release_bytes as f64),
        fig(ALLOCATED_AFTER_RELEASE, reading.allocated as f64),
        fig(RESERVED_AFTER_RELEASE, reserved as f64),
        fig(
            PEAK_RESERVED_DURING_THE_RUN,
            r.memory.peak_reserved_bytes.unwrap_or(0) as f64,
        ),
        fig(
            DEVICE_USED_DRIVER_INCLUDES_THE_CUDA_CONTEXT,
            used as f64,
        ),
    ])
    .series(vec![series(
        AFTER_THE_RUN_MIB,
        labels,
        vec![mib(reading.allocated), mib(reserved), mib(used)],
    )]))
}
