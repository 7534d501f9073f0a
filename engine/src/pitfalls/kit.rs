//! The parts every experiment shares, so that each experiment reads as its lesson and
//! nothing else: the context it runs in ([`Ctx`], [`Setup`]), the one way to measure a run
//! ([`measure`]), the one way to time passes ([`time_passes`]), the one per-pass memory
//! measurement ([`pass_memory`], the run's own method from [`crate::lab`]), the one
//! noise-aware comparison of timings ([`Shift`], a bootstrap interval) and the one verdict builder ([`Decision`]).
//! Failures from libtorch go through [`catch_torch`] / [`torch_failure`], so an
//! out-of-memory is classified the same way in an experiment as in a run.

use std::time::Instant;

use protocol::{
    Autocast, ChartKind, DeviceChoice, DeviceKind, Event, FailureKind, Figure, GradMode, Limits,
    ModelId, NamedTrace, PitfallOptions, Report, RunFailure, RunSpec, Series, Table, Verdict,
};
use protocol::stats::{RatioCi, Side};

use super::python::PythonPeer;
use crate::input::Input;
use crate::lab::{forward, timed_forward, Lab, RunControl};
use crate::models::Model;
use crate::spec::check_spec;
use crate::torch_call::{catch_torch, failure, synchronize, tch_device, torch_failure};

pub const MIB: f64 = 1024.0 * 1024.0;

/// Where and under what control an experiment runs, with the person's options.
pub struct Ctx<'a> {
    pub device: DeviceKind,
    pub opts: PitfallOptions,
    /// The worker's guarantees for this task (cancellation, deadline, ...): checked between
    /// passes by [`time_passes`] and [`pass_memory`], and given to every [`measure`]d run.
    pub control: &'a RunControl,
    /// The server's Python, which times the per-call-overhead cards' Python side
    /// ([`super::python`]); `None`: those cards say in a note that it was not timed.
    pub python: Option<&'a PythonPeer>,
}

impl Ctx<'_> {
    pub fn cuda(&self) -> bool {
        self.device == DeviceKind::Cuda
    }

    /// A spec on this device; image models get small images on the CPU so cards run in
    /// seconds, and full-size (224²) ones on a GPU.
    pub fn spec(&self, model: ModelId, batch: u32, eval: bool, grad: GradMode) -> RunSpec {
        RunSpec {
            model,
            device: if self.cuda() {
                DeviceChoice::Cuda
            } else {
                DeviceChoice::Cpu
            },
            batch,
            input_size: (model.is_image() && !self.cuda()).then_some(96),
            eval,
            grad,
            autocast: Autocast::Off,
            warmup: if self.cuda() { 3 } else { 1 },
            iters: if self.cuda() { 10 } else { 3 },
            threads: None,
            advanced: Default::default(),
            generate: None,
        }
    }

    pub fn model(&self, default: ModelId) -> ModelId {
        self.opts.model.unwrap_or(default)
    }

    pub fn batch(&self, cpu: u32, cuda: u32) -> u32 {
        self.opts
            .batch
            .unwrap_or(if self.cuda() { cuda } else { cpu })
    }

    /// Stops the experiment if the worker asked it to (cancelled, past its deadline).
    pub fn check(&self) -> Result<(), RunFailure> {
        self.control.check()
    }
}

/// "ResNet-18, batch 8, 96×96 images": what a card's figures were measured on.
pub fn describe(model: ModelId, batch: impl std::fmt::Display, size: u32) -> String {
    // The one table of model facts says what the input is (no fallback arm).
    let input = match model.facts().input {
        protocol::InputKind::Sidecar => match model.team() {
            Some(m) if size > 0 => format!("input {}, size {size}", m.sidecar.describe_inputs()),
            Some(m) => format!("input {}", m.sidecar.describe_inputs()),
            None => format!("size {size}"),
        },
        protocol::InputKind::Image => format!("{size}×{size} images"),
        _ => model.describe_sample(size),
    };
    format!("{}, batch {batch}, {input}", model.display_name())
}

/// The model, batch and spec an experiment runs, with its input size resolved.
pub struct Setup {
    pub model: ModelId,
    pub batch: u32,
    pub size: u32,
    pub spec: RunSpec,
}

impl Setup {
    pub fn new(
        ctx: &Ctx,
        default: ModelId,
        (cpu_batch, cuda_batch): (u32, u32),
        grad: GradMode,
    ) -> Setup {
        let model = ctx.model(default);
        Setup::with_batch(ctx, model, ctx.batch(cpu_batch, cuda_batch), grad)
    }

    pub fn with_batch(ctx: &Ctx, model: ModelId, batch: u32, grad: GradMode) -> Setup {
        let spec = ctx.spec(model, batch, true, grad);
        Setup {
            model,
            batch,
            size: spec.resolved_input_size(),
            spec,
        }
    }

    /// The lab's cached model for this setup (its index in the lab).
    pub fn cached(&self, lab: &mut Lab, ctx: &Ctx) -> Result<usize, RunFailure> {
        lab.model_index(self.model, ctx.device, self.size)
    }

    /// A freshly built model, for experiments that change it (or need it cold).
    pub fn fresh(&self, lab: &Lab, ctx: &Ctx) -> Result<Model, RunFailure> {
        tch::manual_seed(lab.config().seed);
        catch_torch(|| Model::build(self.model, tch_device(ctx.device), self.size))
    }

    pub fn input(&self, model: &Model, ctx: &Ctx) -> Result<Input, RunFailure> {
        catch_torch(|| model.input(self.batch, self.size, tch_device(ctx.device)))
    }

    pub fn describe(&self) -> String {
        describe(self.model, self.batch, self.size)
    }
}

/// One whole run, measured exactly as the Lab measures it (baseline, warm-up, per-iteration
/// peaks), under the experiment's run control.
pub fn measure(lab: &mut Lab, ctx: &Ctx, spec: RunSpec) -> Result<Report, RunFailure> {
    let limits = Limits {
        max_batch: u32::MAX,
        ..Limits::default()
    };
    // An experiment's models are built in, or resolved by the worker's check of its
    // options: the built-in catalog checks them.
    let checked = check_spec(spec, &protocol::Catalog::built_in(), &limits, lab.machine())
        .map_err(|e| failure(FailureKind::Invalid, e.to_string()))?;
    let result = lab.measure(&checked, ctx.control, &mut |_: Event| {});
    if result.is_err() {
        lab.recover(checked.device());
    }
    result
}

/// What one forward pass held, measured by the run's own method: after an unmeasured pass
/// (one-time caches out of the way), synchronise and read the baseline, then
/// [`timed_forward`] resets the peak, runs the pass, synchronises and reads — with the lab's
/// memory limit applied, as in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassMemory {
    /// Highest allocation during the pass, above the baseline.
    pub peak_above: u64,
    /// Allocated while the output is still alive, above the baseline: the output and
    /// whatever it keeps alive (its autograd graph's saved tensors).
    pub retained: u64,
}

pub fn pass_memory(
    lab: &Lab,
    ctx: &Ctx,
    model: &Model,
    input: &Input,
    spec: &RunSpec,
) -> Result<PassMemory, RunFailure> {
    ctx.check()?;
    drop(forward(model, input, spec, ctx.device)?);
    let meter = lab.meter(ctx.device);
    synchronize(ctx.device)?;
    let baseline = meter.read().map_err(torch_failure)?.allocated;
    let limit = lab.config().memory_limit_bytes;
    let (sample, out, _) = timed_forward(model, input, spec, ctx.device, &meter, 0, limit)?;
    drop(out);
    Ok(PassMemory {
        peak_above: sample.peak_bytes.saturating_sub(baseline),
        retained: sample.allocated_bytes.saturating_sub(baseline),
    })
}

/// A measured run's traced pass, labelled as its row.
pub fn named(label: &str, report: &Report) -> NamedTrace {
    NamedTrace {
        label: label.into(),
        trace: report.trace.clone(),
    }
}

/// One traced forward pass of `model` on `input` (see `crate::trace`), above the memory
/// allocated before it: for experiments that measure passes, not runs.
pub fn trace_pass(
    lab: &Lab,
    ctx: &Ctx,
    model: &Model,
    input: &Input,
    spec: &RunSpec,
) -> Result<Vec<protocol::TracePoint>, RunFailure> {
    ctx.check()?;
    let meter = lab.meter(ctx.device);
    synchronize(ctx.device)?;
    let offset = meter.read().map_err(torch_failure)?.allocated;
    crate::lab::traced_pass(model, input, spec, ctx.device, &meter, offset)
}

/// The stopwatch a timed pass runs under; see [`time_passes`].
pub struct Clock {
    start: Instant,
    stopped: Option<f64>,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            start: Instant::now(),
            stopped: None,
        }
    }

    /// Untimed preparation is done: count from now.
    pub fn restart(&mut self) {
        self.start = Instant::now();
    }

    /// Stop here instead of after the device synchronisation (a naive timer).
    pub fn stop(&mut self) {
        if self.stopped.is_none() {
            self.stopped = Some(self.start.elapsed().as_secs_f64() * 1000.0);
        }
    }
}

/// The one timing loop. Runs `rounds` rounds; each round runs every variant once, in turn,
/// so that every variant sees the same conditions (alternation cancels drift). Before the
/// first pass the device is synchronised, so work queued by the setup (weight init, input)
/// never lands in a timed pass; the run control is checked before each pass. A pass gets
/// its variant and the running [`Clock`]; unless it stops the clock itself, the clock stops
/// after the device has synchronised. Whatever the pass returns (its output) is dropped
/// after the clock stops. Returns the milliseconds of each variant, in order.
pub fn time_passes<T>(
    ctx: &Ctx,
    rounds: usize,
    variants: usize,
    mut pass: impl FnMut(usize, &mut Clock) -> Result<T, RunFailure>,
) -> Result<Vec<Vec<f64>>, RunFailure> {
    let mut times = vec![Vec::with_capacity(rounds); variants];
    synchronize(ctx.device)?;
    for _ in 0..rounds {
        for (variant, samples) in times.iter_mut().enumerate() {
            ctx.check()?;
            let mut clock = Clock::start();
            let kept = pass(variant, &mut clock)?;
            synchronize(ctx.device)?;
            clock.stop();
            drop(kept);
            samples.extend(clock.stopped);
        }
    }
    Ok(times)
}

/// How one set of timings compares with another, beyond their noise: the ratio of their
/// medians (`slow` over `fast`) with its 95% bootstrap interval ([`RatioCi`], the one the
/// Lab, `/compare` and the CLI read). No single outlier can move a median far, and an
/// interval that straddles a rule's threshold makes the verdict `inconclusive`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shift {
    pub slow_p50: f64,
    pub fast_p50: f64,
    /// `None` when a side is empty or its median is not positive.
    pub ci: Option<RatioCi>,
}

impl Shift {
    pub fn of(slow: &[f64], fast: &[f64]) -> Shift {
        Shift {
            slow_p50: p(slow, 50.0),
            fast_p50: p(fast, 50.0),
            ci: RatioCi::of(slow, fast),
        }
    }

    /// Where the ratio's interval sits against `threshold` (untrusted: straddles).
    pub fn side(&self, threshold: f64) -> Side {
        self.ci.map_or(Side::Straddles, |c| c.side(threshold))
    }

    /// `slow` is slower than `fast` beyond noise (the interval lies above 1).
    pub fn slower(&self) -> bool {
        self.side(1.0) == Side::Above
    }

    /// The interval's bounds (0, 0 when there is none), for figures.
    pub fn bounds(&self) -> (f64, f64) {
        self.ci.map_or((0.0, 0.0), |c| (c.lo, c.hi))
    }

    /// A person's reading of the difference, e.g. "1.23× (95% interval 1.10–1.35, beyond
    /// noise)".
    pub fn describe(&self) -> String {
        let ratio = self.slow_p50 / self.fast_p50;
        let Some(ci) = self.ci else {
            return format!("{ratio:.2}× (no interval: a side has no positive median)");
        };
        let noise = if !ci.trusted() {
            "too few samples to tell it from noise"
        } else if ci.side(1.0) == Side::Straddles {
            "within noise"
        } else {
            "beyond noise"
        };
        format!("{ratio:.2}× (95% interval {}, {noise})", ci.range())
    }

    /// What more measuring would do about the straddled `thresholds` (the nearest
    /// decision counts), for an inconclusive reason.
    pub fn more(&self, thresholds: &[f64]) -> String {
        let n = thresholds
            .iter()
            .filter_map(|&t| self.ci.and_then(|c| c.more_iterations(t)))
            .min();
        match n {
            Some(n) => format!("about {n} more iterations of each would likely decide it"),
            None if self.ci.is_some_and(|c| !c.trusted()) => format!(
                "at least {} iterations of each are needed to decide it",
                protocol::stats::MIN_SAMPLES
            ),
            None => "the ratio sits so close to the threshold that more iterations would likely not decide it".into(),
        }
    }
}

/// The `q`-th percentile of unsorted samples (numpy's default interpolation); 0 if empty.
pub fn p(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    protocol::stats::percentile(&sorted, q)
}

/// The figures that carry `question`'s 95% noise interval (see
/// [`protocol::Question::interval_names`]), from `shift`, which must compare the question's
/// own arms in its order: `Shift::of(figure's samples, over's samples)`. A direction
/// question about latency is graded by them, the same interval the verdict reads.
pub fn interval_figures(question: &protocol::Question, shift: &Shift) -> Vec<Figure> {
    let (lo, hi) = question.interval_names();
    let (l, h) = shift.bounds();
    vec![fig(&lo, l, "ratio"), fig(&hi, h, "ratio")]
}

/// How two byte counts compare, by the one rule that also grades a byte question
/// ([`protocol::Ask::SameBytes`], [`protocol::bytes_direction`]): the band, and the words a
/// verdict uses for it, `"<a> against <b> (×r): no difference beyond 1%"` or `"…: lower"`.
/// A card whose question asks about `a / b` puts these words in its reason, so its lesson
/// and its grade cannot disagree (the device tests check every report).
pub fn bytes_compared(a: f64, b: f64) -> (protocol::Choice, String) {
    let within = protocol::SAME_BYTES_WITHIN;
    let r = if b != 0.0 { a / b } else { f64::NAN };
    let band = protocol::bytes_direction(r, within);
    let words = match band {
        protocol::Choice::Same => format!("no difference beyond {}%", 100.0 * within),
        other => other.as_str().to_string(),
    };
    let fmt = |x: f64| protocol::format_bytes(x.max(0.0) as u64);
    (band, format!("{} against {} (×{r:.3}): {words}", fmt(a), fmt(b)))
}

/// A verdict and the reason for it, with the deciding numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: String,
}

impl Decision {
    /// The one place a rule becomes a verdict: confirmed when the rule `holds`, refuted
    /// otherwise, each with its own reason.
    pub fn rule(holds: bool, if_holds: impl Into<String>, if_not: impl Into<String>) -> Decision {
        if holds {
            Decision {
                verdict: Verdict::Confirmed,
                reason: if_holds.into(),
            }
        } else {
            Decision {
                verdict: Verdict::Refuted,
                reason: if_not.into(),
            }
        }
    }

    /// A latency rule on the ratio `slow / fast` of a [`Shift`]: confirmed when its whole
    /// 95% interval lies above `confirm_above`, refuted when it lies below `refute_below`
    /// (which may sit a little higher: "any cost is under 5%" refutes a claimed cost), and
    /// inconclusive otherwise, the reason saying how many more iterations would likely
    /// decide it.
    pub fn latency(
        shift: &Shift,
        confirm_above: f64,
        refute_below: f64,
        if_holds: impl Into<String>,
        if_not: impl Into<String>,
    ) -> Decision {
        if shift.side(confirm_above) == Side::Above {
            return Decision::rule(true, if_holds, "");
        }
        if shift.side(refute_below) == Side::Below {
            return Decision::rule(false, "", if_not);
        }
        let (lo, hi) = shift.bounds();
        Decision::inconclusive(format!(
            "{:.2}× ({lo:.2}–{hi:.2} at 95%): the interval is neither above {confirm_above} nor below {refute_below}, so the noise is too large to tell; {}.",
            shift.slow_p50 / shift.fast_p50,
            shift.more(&[confirm_above, refute_below])
        ))
    }

    /// The figures cannot decide the claim here; `why` says why and what would.
    pub fn inconclusive(why: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Inconclusive,
            reason: why.into(),
        }
    }

    /// The effect cannot show here; `why` says why and what would show it.
    pub fn not_applicable(why: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::NotApplicable,
            reason: why.into(),
        }
    }
}

/// What one experiment produced, before the card's common fields are added.
pub struct Outcome {
    pub decision: Decision,
    /// What the figures were measured on (model, batch, input size; [`describe`]): the
    /// report's reason ends with it.
    pub setup: String,
    pub figures: Vec<Figure>,
    pub chart: ChartKind,
    pub series: Vec<Series>,
    pub notes: Vec<String>,
    pub table: Option<Table>,
    /// Each row's traced forward pass, for the cards about memory.
    pub traces: Vec<NamedTrace>,
}

impl Outcome {
    pub fn new(decision: Decision, setup: impl Into<String>, chart: ChartKind) -> Outcome {
        Outcome {
            decision,
            setup: setup.into(),
            figures: vec![],
            chart,
            series: vec![],
            notes: vec![],
            table: None,
            traces: vec![],
        }
    }

    pub fn traces(mut self, traces: Vec<NamedTrace>) -> Self {
        self.traces = traces;
        self
    }

    pub fn figures(mut self, figures: Vec<Figure>) -> Self {
        self.figures = figures;
        self
    }

    pub fn series(mut self, series: Vec<Series>) -> Self {
        self.series = series;
        self
    }

    pub fn notes(mut self, notes: Vec<String>) -> Self {
        self.notes = notes;
        self
    }

    pub fn table(mut self, table: Table) -> Self {
        self.table = Some(table);
        self
    }
}

pub fn fig(name: &str, value: f64, unit: &str) -> Figure {
    Figure {
        name: name.into(),
        value,
        unit: unit.into(),
    }
}

pub fn series(name: &str, unit: &str, x: Vec<String>, y: Vec<f64>) -> Series {
    Series {
        name: name.into(),
        unit: unit.into(),
        x,
        y: y.into_iter().map(Some).collect(),
    }
}

/// "1", "2", ... "n": the x labels of a series of passes.
pub fn numbered(n: usize) -> Vec<String> {
    (1..=n).map(|i| i.to_string()).collect()
}

pub fn mib(b: u64) -> f64 {
    (b as f64 / MIB * 1000.0).round() / 1000.0
}

/// Least-squares fit y = a + b·x; returns (b, R²).
pub fn linear_fit(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return (0.0, 0.0);
    }
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let syy: f64 = ys.iter().map(|y| (y - my).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 {
        sxy * sxy / (sxx * syy)
    } else {
        0.0
    };
    (slope, r2)
}

/// Elements of the largest tensor one sample makes in a forward pass. Many CUDA kernels
/// (cuDNN's convolutions among them) refuse tensors of 2³¹ elements or more, so a batch
/// sweep must stay below that.
pub fn largest_tensor_per_sample(model: ModelId, size: u32) -> u64 {
    let s = size as u64;
    match model {
        ModelId::TinyMlp => s.max(512),
        // The stem's 64 channels at half the side (ResNet-50's layer 1: 256 at a quarter).
        ModelId::Resnet18 | ModelId::Resnet50 => 64 * (s / 2) * (s / 2),
        // The second block's expansion: 96 channels at half the side.
        ModelId::MobilenetV2 => 96 * (s / 2) * (s / 2),
        // The attention scores (4 heads × seq²) or the feed-forward hidden layer (seq × 1024).
        ModelId::Transformer => (4 * s * s).max(1024 * s),
        // The logits (seq × vocab) or the attention scores (heads × seq²).
        ModelId::Decoder(_) => model.decoder().map_or(1 << 20, |d| {
            let c = &d.config;
            (s * c.vocab_size as u64).max(c.num_attention_heads as u64 * s * s)
        }),
        // A script hides its layers: the input's elements per sample times 64 (the
        // built-in convolutional stems' widening), so a sweep stays well below the limit.
        ModelId::Team(_) | ModelId::Named(_) => model.team().map_or(1 << 20, |m| {
            let shape = &m.sidecar.shapes(1, size)[0];
            64 * shape.iter().map(|d| *d as u64).product::<u64>()
        }),
    }
}

/// The largest batch whose biggest tensor stays below 2³¹ elements.
pub fn element_cap(model: ModelId, size: u32) -> u32 {
    let per_sample = largest_tensor_per_sample(model, size).max(1);
    (((1u64 << 31) - 1) / per_sample).min(u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_fit_recovers_a_line() {
        let (slope, r2) = linear_fit(&[1.0, 2.0, 4.0, 8.0], &[3.0, 5.0, 9.0, 17.0]);
        assert!((slope - 2.0).abs() < 1e-12 && (r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn shifts_read_intervals_and_latency_rules_can_be_inconclusive() {
        let fast: Vec<f64> = (0..20).map(|i| 10.0 + (i % 5) as f64 * 0.1).collect();
        let slow: Vec<f64> = fast.iter().map(|x| x * 2.0).collect();
        let shift = Shift::of(&slow, &fast);
        assert!(shift.slower() && shift.describe().contains("beyond noise"));
        let d = Decision::latency(&shift, 1.5, 1.5, "yes", "no");
        assert_eq!((d.verdict, d.reason.as_str()), (Verdict::Confirmed, "yes"));
        let d = Decision::latency(&shift, 3.0, 3.0, "yes", "no");
        assert_eq!((d.verdict, d.reason.as_str()), (Verdict::Refuted, "no"));
        // The same distribution: the interval straddles 1.
        let same = Shift::of(&fast, &fast);
        assert!(!same.slower() && same.describe().contains("within noise"));
        let d = Decision::latency(&same, 1.0, 1.0, "yes", "no");
        assert_eq!(d.verdict, Verdict::Inconclusive);
        // ... unless the claim's cost must exceed a margin the interval is wholly below.
        let d = Decision::latency(&same, 1.0, 1.05, "yes", "no");
        assert_eq!(d.verdict, Verdict::Refuted);
        // One huge outlier among otherwise equal samples cannot make a shift.
        let mut outlier = fast.clone();
        outlier[3] = 1e6;
        assert!(!Shift::of(&outlier, &fast).slower());
        // Three samples each can never be told apart from noise, however far apart.
        let few = Shift::of(&[10.0, 11.0, 12.0], &[1.0, 1.1, 1.2]);
        assert!(!few.slower() && few.describe().contains("too few samples"));
        let d = Decision::latency(&few, 1.0, 1.0, "yes", "no");
        assert!(d.verdict == Verdict::Inconclusive && d.reason.contains("iterations of each"));
        assert!(Shift::of(&[], &fast).ci.is_none());
    }

    #[test]
    fn the_element_cap_keeps_every_tensor_below_two_to_the_31() {
        for model in [
            ModelId::TinyMlp,
            ModelId::Resnet18,
            ModelId::Resnet50,
            ModelId::MobilenetV2,
            ModelId::Transformer,
        ] {
            let size = model.input().default;
            let cap = element_cap(model, size) as u64;
            let per_sample = largest_tensor_per_sample(model, size);
            assert!(cap * per_sample < 1 << 31, "{model:?}");
            assert!(
                (cap + 1) * per_sample >= 1 << 31,
                "{model:?}: the cap is the largest"
            );
        }
        // ResNet-18 at 224²: the stem output at batch 4096 has 3.3e9 elements.
        assert!(element_cap(ModelId::Resnet18, 224) < 4096);
    }
}
