//! The device thread: takes one task at a time from the queue and runs it under its
//! control (deadline, budget, cancel flag) behind the panic barrier, frees what a failure
//! left, and checks after every task that the memory the worker holds is back to its cached
//! models' weights before the submitter hears the result.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use protocol::{DeviceKind, Event, FailureKind, RunFailure};

use super::queue::{Queued, Shared, Task};
use super::WorkerConfig;
use crate::lab::{Lab, RunControl};
use crate::torch_call::{failure, panic_text};

/// The panic barrier: runs one task's body; a panic is logged at error level and becomes a
/// failure of that task (`Internal`, with the reason), and the device thread goes on.
fn barrier<R>(what: &str, body: impl FnOnce() -> Result<R, RunFailure>) -> Result<R, RunFailure> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let reason = crate::torch_call::first_line(
                &panic_text(&*payload).unwrap_or_else(|| "a panic without a message".to_string()),
            );
            tracing::error!("{what} panicked on the device thread: {reason}");
            Err(failure(
                FailureKind::Internal,
                format!("{what} failed with an internal error: {reason}"),
            ))
        }
    }
}

fn control_for(
    config: &WorkerConfig,
    cancel: Arc<AtomicBool>,
    lab: &Lab,
    device: DeviceKind,
) -> RunControl {
    RunControl {
        cancel,
        deadline: config.run_timeout.map(|t| Instant::now() + t),
        budget_bytes: lab.budget(device).map(|b| b.bytes),
    }
}

pub(super) fn device_loop(mut lab: Lab, shared: &Shared, config: &WorkerConfig) {
    while let Some(Queued { task, span }) = shared.next_task() {
        // The submitter's span (a server puts the run id in it): every line logged while
        // the task runs, its memory check included, carries it.
        let _in_span = span.enter();
        let Some(task) = task.unless_cancelled() else {
            continue;
        };
        match task {
            Task::Call { call, on_panic } => match barrier("a task", || Ok(call(&mut lab))) {
                Ok(deliver) => {
                    check_memory(&lab, shared);
                    deliver();
                }
                Err(f) => {
                    recover_all(&mut lab);
                    check_memory(&lab, shared);
                    on_panic(f.message);
                }
            },
            Task::Experiment {
                id,
                options,
                reply,
                cancel,
            } => {
                // Checked before it was queued: a CUDA choice here has a GPU. `auto`
                // is the GPU where there is one (it used to fall back to the CPU's
                // budget and deadline rules on a GPU server).
                let device = options
                    .device
                    .resolve(lab.machine().has_cuda())
                    .unwrap_or(DeviceKind::Cpu);
                let control = control_for(config, cancel, &lab, device);
                let result = barrier("the experiment", || {
                    lab.with_task(control.clone(), |lab| {
                        crate::pitfalls::run_with(lab, &id, options, &control, config.python.as_ref())
                    })?
                });
                if let Err(f) = &result {
                    after_failure(&mut lab, device, f);
                }
                check_memory(&lab, shared);
                reply(result);
            }
            Task::Run {
                spec,
                mut sink,
                cancel,
            } => {
                let device = spec.device();
                let control = control_for(config, cancel, &lab, device);
                // One line at each end of a run, so an operator's log shows the device's
                // work (the submitter's span says whose run it is).
                tracing::info!("run started: {} {} on {}", spec.spec().model, spec.spec().label(), device.as_str());
                // The leak check runs before the terminal event goes out, so whoever hears
                // "done" can already read its result in the worker's health.
                let result = barrier("the run", || {
                    lab.with_task(control.clone(), |lab| {
                        lab.admit(&spec, &control)?;
                        lab.measure(&spec, &control, &mut *sink)
                    })?
                });
                match result {
                    Ok(mut report) => {
                        lab.note_run(&mut report);
                        tracing::info!(
                            "run done: p50 {:.3} ms, peak {} B above the baseline",
                            report.latency_ms.p50,
                            report.memory.peak_above_baseline_bytes
                        );
                        check_memory(&lab, shared);
                        sink(Event::Done {
                            report: Box::new(report),
                        });
                    }
                    Err(f) => {
                        tracing::info!("run failed ({:?}): {}", f.kind, f.message);
                        after_failure(&mut lab, device, &f);
                        check_memory(&lab, shared);
                        sink(Event::Failed { failure: f });
                    }
                }
            }
        }
    }
}

/// After a failed task: free what the failure may have left (an out-of-memory failure
/// drops every cached model, so the next run has the whole device).
fn after_failure(lab: &mut Lab, device: DeviceKind, f: &RunFailure) {
    if f.kind == FailureKind::OutOfMemory {
        tracing::info!("{}", f.message);
        lab.clear_models();
    }
    lab.recover(device);
}

fn recover_all(lab: &mut Lab) {
    lab.recover(DeviceKind::Cpu);
    if lab.machine().has_cuda() {
        lab.recover(DeviceKind::Cuda);
    }
}

/// After every task: is the memory the worker holds back to its cached models' weights?
fn check_memory(lab: &Lab, shared: &Shared) {
    let checks = lab.memory_checks();
    let mut health = shared.lock_health();
    health.tasks += 1;
    for c in &checks {
        health.memory_checks += 1;
        if c.ok {
            tracing::debug!(
                device = c.device.as_str(),
                held = c.held_bytes,
                "memory back at the worker's baseline"
            );
        } else {
            health.memory_check_failures += 1;
            tracing::warn!(
                device = c.device.as_str(),
                held = c.held_bytes,
                expected = c.expected_bytes,
                "leak: the worker holds more memory than its cached models after a task"
            );
        }
    }
    health.last_checks = checks;
}
