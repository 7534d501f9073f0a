//! Calling libtorch from the rest of the engine: the one failure classification — every
//! libtorch error, a panic of tch's non-`f_` API ([`catch_torch`]), an error of the C++
//! extension ([`torch_failure`]), a stop of the run guard, becomes a [`RunFailure`] here, so
//! an out-of-memory, a cancellation or a deadline reads the same in a run, an experiment and
//! the worker — its message cut to one line for people ([`first_line`]), and the two device
//! facts every measurement needs ([`tch_device`], [`synchronize`]).
//!
//! A leaf: it uses only [`crate::torch_ext`], so the lab, the probe, the peaks, the models
//! and the team loader can all call libtorch through it without importing one another.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use protocol::{DeviceKind, FailureKind, RunFailure};
use tch::Device;

use crate::torch_ext::{guard_stop, ExtError, GuardStop};

/// Runs tch code that panics on libtorch errors (its non-`f_` API) and turns such a panic
/// into a [`RunFailure`]: out-of-memory is recognised as such.
pub fn catch_torch<T>(f: impl FnOnce() -> T) -> Result<T, RunFailure> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let text = panic_text(&*payload).unwrap_or_else(|| "libtorch raised an error".to_string());
        classify(&text)
    })
}

/// The text a panic carries (`panic!` with a literal or a formatted message), if any.
pub(crate) fn panic_text(payload: &(dyn Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}

/// The one classification: a stop of the run guard is a cancellation, a timeout or an
/// out-of-memory; any other error naming "out of memory" is one too; the rest are `Torch`.
fn classify(text: &str) -> RunFailure {
    let message =
        first_line(text.trim_start_matches("called `Result::unwrap()` on an `Err` value: "));
    // The run guard's stops (see torch_ext::RunGuard) arrive as libtorch errors.
    match guard_stop(text) {
        Some(GuardStop::Cancelled) => {
            return failure(FailureKind::Cancelled, "the run was cancelled")
        }
        Some(GuardStop::Deadline) => {
            return failure(
                FailureKind::Timeout,
                "the run went past the server's time limit (stopped during a forward pass)",
            )
        }
        Some(GuardStop::OutOfMemory) => {
            let detail = message
                .split("gradless-guard: ")
                .nth(1)
                .unwrap_or(&message)
                .to_string();
            return failure(FailureKind::OutOfMemory, detail);
        }
        None => {}
    }
    let kind = if text.to_lowercase().contains("out of memory") {
        FailureKind::OutOfMemory
    } else {
        FailureKind::Torch
    };
    RunFailure { kind, message }
}

/// A libtorch error from the C++ extension, classified like every other ([`catch_torch`]).
pub fn torch_failure(e: ExtError) -> RunFailure {
    classify(&e.0)
}

pub fn failure(kind: FailureKind, message: impl Into<String>) -> RunFailure {
    RunFailure {
        kind,
        message: message.into(),
    }
}

/// The first line of a libtorch message, without tch's `Torch("...")` wrapping: libtorch
/// appends a whole C++ backtrace that means nothing to the person reading the error.
pub fn first_line(text: &str) -> String {
    let text = text.trim();
    let text = text.strip_prefix("Torch(\"").unwrap_or(text);
    let end = [text.find('\n'), text.find("\\n")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(text.len());
    text[..end].trim().trim_end_matches("\")").to_string()
}

/// The tch device of a run's device kind (CUDA is always device 0: one worker, one GPU).
pub fn tch_device(device: DeviceKind) -> Device {
    match device {
        DeviceKind::Cpu => Device::Cpu,
        DeviceKind::Cuda => Device::Cuda(0),
    }
}

/// Waits for queued device work, so a timer measures the work and not its launch.
pub fn synchronize(device: DeviceKind) -> Result<(), RunFailure> {
    match device {
        DeviceKind::Cpu => Ok(()),
        DeviceKind::Cuda => catch_torch(|| tch::Cuda::synchronize(0)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_line_strips_backtraces_and_wrapping() {
        let raw =
            "Torch(\"CUDA out of memory. Tried to allocate 2 GiB\\nException raised from malloc\")";
        assert_eq!(
            super::first_line(raw),
            "CUDA out of memory. Tried to allocate 2 GiB"
        );
        assert_eq!(super::first_line("plain\nsecond"), "plain");
    }
}
