//! The `empty-cache` card ([`EMPTY_CACHE`]): empty_cache() frees nothing you hold, and costs time

use super::*;

pub const P50_WITH_EMPTY_CACHE: FigureName = FigureName::new("p50 with empty_cache", Unit::Ms);
pub const P50_WITHOUT_EMPTY_CACHE: FigureName = FigureName::new("p50 without empty_cache", Unit::Ms);
pub const P90_WITH_EMPTY_CACHE: FigureName = FigureName::new("p90 with empty_cache", Unit::Ms);
pub const P90_WITHOUT_EMPTY_CACHE: FigureName = FigureName::new("p90 without empty_cache", Unit::Ms);
pub const P50_RATIO_WITH_OVER_WITHOUT_CI_LOW: FigureName = FigureName::new("p50 ratio with / without, 95% interval low", Unit::Ratio);
pub const P50_RATIO_WITH_OVER_WITHOUT_CI_HIGH: FigureName = FigureName::new("p50 ratio with / without, 95% interval high", Unit::Ratio);
pub const ALLOCATED_CHANGE_FROM_EMPTY_CACHE: FigureName = FigureName::new("allocated change from empty_cache", Unit::Bytes);
pub const WITHOUT_MS: FigureName = FigureName::new("without (ms)", Unit::Ms);
pub const WITH_EMPTY_CACHE_MS: FigureName = FigureName::new("with empty_cache (ms)", Unit::Ms);

pub const EMPTY_CACHE: Card = Card {
    id: "empty-cache",
    title: "empty_cache() frees nothing you hold, and costs time",
    asks: "What does calling torch.cuda.empty_cache() after every request do to memory and latency?",
    labels: ["empty_cache() after every request", "no empty_cache() call"],
    setup: empty_cache_setup,
    needs: Needs::Cuda("empty_cache() acts on the CUDA caching allocator's pool; a CPU has no such pool."),
    claim: "torch.cuda.empty_cache() frees no tensor you still hold: it gives the pool's wholly unused segments back to the driver, so the next request must get them again with cudaMalloc, and a request that ends with it takes longer than one that does not.",
    statements: &[
        Said::run("Emptying the cache left the allocated bytes unchanged: the model and the input it held were not freed.", &[ALLOCATED_CHANGE_FROM_EMPTY_CACHE]),
        Said::source("empty_cache() returns to the driver, with cudaFree, only the cached segments that hold no live block; a segment holding any live tensor stays reserved.", "c10/cuda/CUDACachingAllocator.cpp", "release_cached_blocks", "cards"),
        Said::source("It first waits on the events of blocks still in use by other streams, so that it frees nothing the GPU is still reading.", "c10/cuda/CUDACachingAllocator.cpp", "synchronize_and_free_events", "cards"),
        Said::source("The next request finds the pool empty: every block it needs comes from a new cudaMalloc instead of the pool.", "c10/cuda/CUDACachingAllocator.cpp", "alloc_block", "cards"),
        Said::run("Requests that end with empty_cache() took longer than requests on a warm cache: a higher p50 and p90.", &[P50_WITH_EMPTY_CACHE, P50_WITHOUT_EMPTY_CACHE, P90_WITH_EMPTY_CACHE, P90_WITHOUT_EMPTY_CACHE, P50_RATIO_WITH_OVER_WITHOUT_CI_LOW, P50_RATIO_WITH_OVER_WITHOUT_CI_HIGH]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html",
    pitfall: "y = model(x)\ntorch.cuda.empty_cache()  # after every request",
    fix: "y = model(x)  # no empty_cache() call",
    threshold: "CUDA only (a device whose allocator keeps a reserved pool). 100 requests of each kind, alternating, after a synchronised warm-up: a request without starts from a warm cache; a request with starts from an emptied cache (as after the previous request's empty_cache()) and ends with its own empty_cache(), which is timed with it. Confirmed when emptying the cache leaves allocated memory unchanged, and the requests with it are slower: a higher p90 (over 100 requests, at least 10 must move it: one slow request cannot decide) and the 95% bootstrap interval of the p50 ratio (with / without) wholly above 1; refuted when allocated memory changes, the p90 is not higher, or the interval lies wholly below 1.05 (any cost under 5%); inconclusive otherwise. Regime: any GPU; ResNet-50 at batch 32, 224², under no_grad, holds hundreds of MB of activation blocks at its peak, which a request after empty_cache() must get again with cudaMalloc and which empty_cache() gives back with cudaFree, on every request",
    question: super::super::ratio("ResNet-50 under torch.no_grad() (batch 32, 224²): the p50 latency of a request with empty_cache() as a multiple of one without? (A judgment, against the noise of 100 requests of each kind.)", P50_WITH_EMPTY_CACHE, P50_WITHOUT_EMPTY_CACHE, super::super::SAME_TIME),
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
pub(super) fn empty_cache_plan(ctx: &Ctx) -> (Setup, usize, String) {
    let setup = Setup::new(ctx, ModelId::Resnet50, (8, 32), GradMode::NoGrad);
    let requests = 100;
    let line = format!("{}, no_grad, {requests} requests of each kind", setup.describe());
    (setup, requests, line)
}

/// The untimed passes before empty-cache's timed requests.
pub(super) const EMPTY_CACHE_WARM: usize = 3;

pub(super) fn empty_cache_setup(ctx: &Ctx) -> Vec<String> {
    let (_, _, line) = empty_cache_plan(ctx);
    vec![
        line,
        crate::pitfalls::kit::arms("each request ends with torch.cuda.empty_cache(), timed with it (and so starts from an emptied pool)", "requests without empty_cache(), each starting from a pool an untimed pass has just filled"),
        format!("The two kinds alternate, after {EMPTY_CACHE_WARM} untimed passes"),
        "Also read: the bytes allocated just before and just after each empty_cache(), with the model and its input held".into(),
    ]
}

pub(super) fn empty_cache(lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
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
        fig(P50_WITHOUT_EMPTY_CACHE, p(without, 50.0)),
        fig(P90_WITHOUT_EMPTY_CACHE, p(without, 90.0)),
        fig(P50_WITH_EMPTY_CACHE, p(with, 50.0)),
        fig(P90_WITH_EMPTY_CACHE, p(with, 90.0)),
        fig(
            P50_RATIO_WITH_OVER_WITHOUT_CI_LOW,
            Shift::of(with, without).bounds().0,
        ),
        fig(
            P50_RATIO_WITH_OVER_WITHOUT_CI_HIGH,
            Shift::of(with, without).bounds().1,
        ),
        fig(
            ALLOCATED_CHANGE_FROM_EMPTY_CACHE,
            allocated_change as f64,
        ),
    ], super::super::kit::interval_figures(&EMPTY_CACHE.question, &Shift::of(with, without))].concat())
    .series(vec![
        series(
            WITHOUT_MS,
            numbered(without.len()),
            without.clone(),
        ),
        series(
            WITH_EMPTY_CACHE_MS,
            numbered(with.len()),
            with.clone(),
        ),
    ])
    .notes(vec![
        "Requests alternate between the two kinds so both see the same conditions.".into(),
    ]))
}
