//! The one way to measure: a whole run as the Lab measures it ([`measure`]), one forward
//! pass's memory ([`pass_memory`]) or trace ([`trace_pass`]), and the one timing loop
//! ([`time_passes`], under a [`Clock`]).

use std::time::Instant;

use protocol::{Event, FailureKind, Limits, NamedTrace, Report, RunFailure, RunSpec};

use super::Ctx;
use crate::input::Input;
use crate::lab::{forward, timed_forward, Lab};
use crate::models::Model;
use crate::spec::check_spec;
use crate::torch_call::{failure, synchronize, torch_failure};

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
