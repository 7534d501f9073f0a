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

/// The lab, lent on with one of its fields set to a value for as long as this lives: the
/// field's previous value comes back when it is dropped, whether the code that held it
/// returned or unwound. For the lab's per-task state ([`Lab::with_task`]'s control, the
/// autocast-per-step switch), which a panic caught by the device loop must not leave behind.
pub(super) struct Scoped<'a, T: Default> {
    lab: &'a mut Lab,
    field: fn(&mut Lab) -> &mut T,
    previous: T,
}

impl<'a, T: Default> Scoped<'a, T> {
    /// Sets `field` of `lab` to `value` until the returned value is dropped.
    pub(super) fn set(lab: &'a mut Lab, field: fn(&mut Lab) -> &mut T, value: T) -> Self {
        let previous = std::mem::replace(field(lab), value);
        Scoped {
            lab,
            field,
            previous,
        }
    }
}

impl<T: Default> std::ops::Deref for Scoped<'_, T> {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        self.lab
    }
}

impl<T: Default> std::ops::DerefMut for Scoped<'_, T> {
    fn deref_mut(&mut self) -> &mut Lab {
        self.lab
    }
}

impl<T: Default> Drop for Scoped<'_, T> {
    fn drop(&mut self) {
        *(self.field)(self.lab) = std::mem::take(&mut self.previous);
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
        // Restored when `lab` is dropped: after `f` returns, and also when it panics (the
        // device loop catches the panic and keeps the lab, and the next task must not find
        // this one's deadline and cancel flag). The allocation check is disarmed first.
        let mut lab = Scoped::set(self, |lab| &mut lab.task, Some(control.clone()));
        let guard = lab.guard(DeviceKind::Cpu, &control);
        guard.map(|_g| f(&mut *lab))
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

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use super::*;
    use crate::lab::LabConfig;

    /// The lab's per-task state comes back when the code that set it panics: the device loop
    /// catches the panic and keeps the lab (engine/tests/device/guarantees.rs runs the same
    /// through a worker).
    #[test]
    fn a_panic_leaves_neither_the_task_nor_the_per_step_switch_behind() {
        let mut lab = Lab::new(LabConfig::default()).unwrap();
        let dead = RunControl {
            cancel: Arc::new(AtomicBool::new(true)),
            deadline: Some(Instant::now()),
            budget_bytes: None,
        };
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            lab.with_task(dead, |lab| -> u32 {
                assert!(lab.task_control().is_some());
                panic!("injected inside the task")
            })
        }));
        assert!(panicked.is_err());
        assert!(lab.task_control().is_none(), "the dead task's control stayed on the lab");

        let panicked = catch_unwind(AssertUnwindSafe(|| {
            lab.with_autocast_per_step(|lab| -> u32 {
                assert!(lab.autocast_per_step);
                panic!("injected inside a per-step measurement")
            })
        }));
        assert!(panicked.is_err());
        assert!(!lab.autocast_per_step, "the per-step switch stayed on");

        // Returning restores the same way, nested or not.
        let outer = RunControl {
            deadline: Some(Instant::now() + Duration::from_secs(60)),
            ..Default::default()
        };
        let inner_deadline = lab
            .with_task(outer.clone(), |lab| {
                lab.with_task(RunControl::default(), |lab| lab.task_control().unwrap().deadline)
                    .unwrap();
                lab.task_control().unwrap().deadline
            })
            .unwrap();
        assert_eq!(inner_deadline, outer.deadline);
        assert!(lab.task_control().is_none());
    }
}
