//! What every task may use and when it must stop: [`RunControl`] (the cancel flag, the
//! deadline, the memory budget), the task under way on the lab ([`Lab::with_task`]), and the
//! run guard that checks the same limits at every CPU allocation ([`Lab::guard`]).
//!
//! Guarantees every task gets: a memory budget (refused up front when the predicted peak
//! exceeds it, see [`Lab::admit`]; on the CPU enforced at the allocation that crosses it, on
//! CUDA after each pass and by CUDA's own out-of-memory error), a deadline and a cancel flag
//! (on the CPU checked at every allocation of the measuring thread, so a run stops within the
//! op that crossed it; on CUDA between passes, and a pass predicted to be longer than the
//! time left is refused up front).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::{DeviceKind, FailureKind, RunFailure};

use super::Lab;
use crate::torch_call::{failure, torch_failure};
use crate::torch_ext::{GuardSettings, RunGuard};

/// How a running measurement learns that it should stop early, and what it may use. Every
/// task (run or experiment) gets one; [`RunControl::check`] is called between passes, and on
/// the CPU the same limits are checked at every allocation (see [`Lab::guard`]).
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    pub cancel: Arc<AtomicBool>,
    pub deadline: Option<Instant>,
    /// The most the worker may hold on the device during the task (weights of every cached
    /// model included). `None`: no budget beyond the device's own limit.
    pub budget_bytes: Option<u64>,
}

impl RunControl {
    /// Fails with `Cancelled` or `Timeout` when the task should stop now.
    pub fn check(&self) -> Result<(), RunFailure> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(failure(FailureKind::Cancelled, "the run was cancelled"));
        }
        if self.deadline.is_some_and(|d| Instant::now() > d) {
            return Err(failure(
                FailureKind::Timeout,
                "the run went past the server's time limit",
            ));
        }
        Ok(())
    }

    /// The time left before the deadline (`None`: no deadline).
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// This control within `outer`'s limits: the earlier deadline, the smaller budget, and
    /// `outer`'s cancel flag (a measurement inside a task stops when the task is cancelled).
    pub fn within(&self, outer: &RunControl) -> RunControl {
        RunControl {
            cancel: outer.cancel.clone(),
            deadline: match (self.deadline, outer.deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            budget_bytes: match (self.budget_bytes, outer.budget_bytes) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

impl Lab {
    /// Runs `f` as one task under `control`: every measurement inside it obeys the control,
    /// and on the CPU its limits are checked at every allocation (see [`Lab::guard`]).
    pub fn with_task<R>(
        &mut self,
        control: RunControl,
        f: impl FnOnce(&mut Lab) -> R,
    ) -> Result<R, RunFailure> {
        let previous = self.task.replace(control.clone());
        let guard = self.guard(DeviceKind::Cpu, &control);
        let result = guard.map(|_g| f(self));
        self.task = previous;
        result
    }

    /// The control of the task under way, if any.
    pub fn task_control(&self) -> Option<&RunControl> {
        self.task.as_ref()
    }

    /// Arms the CPU allocation check with `control`'s limits for as long as the returned
    /// guard lives (nothing on CUDA, whose allocations the extension does not see).
    pub fn guard(
        &self,
        device: DeviceKind,
        control: &RunControl,
    ) -> Result<Option<RunGuard>, RunFailure> {
        if device != DeviceKind::Cpu {
            return Ok(None);
        }
        RunGuard::arm(
            &self.counter,
            GuardSettings {
                limit_bytes: control.budget_bytes,
                deadline: control.deadline,
                cancel: Some(control.cancel.clone()),
            },
        )
        .map(Some)
        .map_err(torch_failure)
    }
}
