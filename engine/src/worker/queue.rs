//! The bounded queue every task waits in: the tasks themselves (runs, experiments and
//! internal calls), their cancellation before they start, the capacity bound with the
//! position each submitter hears, and the hand-over to the device thread.
//!
//! Each task waits with the tracing span its submitter was in ([`Queued::span`]), and the
//! device thread enters that span while the task runs: what the engine logs during a run
//! (a panic, an out-of-memory failure, the memory check after it) then carries whatever
//! the submitter put in its span, such as the server's run id.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use protocol::{Event, FailureKind, PitfallOptions, RunFailure, WorkerHealth};

use super::{ExperimentReply, Sink, Worker};
use crate::error::EngineError;
use crate::lab::Lab;
use crate::spec::CheckedSpec;
use crate::torch_call::failure;

/// Work run on the device thread; it returns how to deliver its result, so the worker can
/// check its memory before the caller hears back.
pub(super) type Call = Box<dyn FnOnce(&mut Lab) -> Box<dyn FnOnce() + Send> + Send>;

pub(super) enum Task {
    Run {
        spec: CheckedSpec,
        sink: Sink,
        cancel: Arc<AtomicBool>,
    },
    Experiment {
        id: String,
        options: PitfallOptions,
        reply: ExperimentReply,
        cancel: Arc<AtomicBool>,
    },
    Call {
        call: Call,
        /// Tells the caller when `call` panicked.
        on_panic: Box<dyn FnOnce(String) + Send>,
    },
}

impl Task {
    /// Runs and experiments count against the queue's capacity; internal calls do not.
    pub(super) fn is_queued_work(&self) -> bool {
        !matches!(self, Task::Call { .. })
    }

    pub(super) fn cancelled(&self) -> bool {
        match self {
            Task::Run { cancel, .. } | Task::Experiment { cancel, .. } => {
                cancel.load(Ordering::Relaxed)
            }
            Task::Call { .. } => false,
        }
    }

    /// Tells the submitter that the task will not run.
    pub(super) fn refuse(self, f: RunFailure) {
        match self {
            Task::Run { mut sink, .. } => sink(Event::Failed { failure: f }),
            Task::Experiment { reply, .. } => reply(Err(f)),
            Task::Call { on_panic, .. } => on_panic(f.message),
        }
    }

    /// The task, or `None` once its submitter has been told that it was cancelled before
    /// it started.
    pub(super) fn unless_cancelled(self) -> Option<Task> {
        if !self.cancelled() {
            return Some(self);
        }
        self.refuse(failure(
            FailureKind::Cancelled,
            "cancelled before it started",
        ));
        None
    }
}

/// A task waiting for the device thread.
pub(super) struct Queued {
    pub(super) task: Task,
    /// The span current where the task was submitted (`Span::none()` outside any): the
    /// device thread runs the task inside it.
    pub(super) span: tracing::Span,
}

impl Queued {
    /// The task, or `None` once its submitter has been told it was cancelled (in its span).
    fn unless_cancelled(self) -> Option<Queued> {
        let Queued { task, span } = self;
        let task = span.in_scope(|| task.unless_cancelled())?;
        Some(Queued { task, span })
    }
}

#[derive(Default)]
pub(super) struct Queue {
    pub(super) tasks: VecDeque<Queued>,
    shutdown: bool,
}

/// What the worker's handle and its device thread share.
#[derive(Default)]
pub(super) struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    health: Mutex<WorkerHealth>,
}

impl Shared {
    pub(super) fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_health(&self) -> MutexGuard<'_, WorkerHealth> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next task, once there is one (everyone still waiting hears their new place);
    /// `None` when the queue is closed and empty.
    pub(super) fn next_task(&self) -> Option<Queued> {
        let mut queue = self.lock_queue();
        loop {
            if let Some(task) = queue.tasks.pop_front() {
                // Everyone still waiting moves up one place.
                let mut position = 0;
                for Queued { task: t, .. } in queue.tasks.iter_mut() {
                    if let Task::Run { sink, .. } = t {
                        sink(Event::Queued { position });
                    }
                    if t.is_queued_work() {
                        position += 1;
                    }
                }
                return Some(task);
            }
            if queue.shutdown {
                return None;
            }
            queue = self.ready.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Stops taking work and refuses what waits.
    pub(super) fn close(&self) {
        {
            let mut queue = self.lock_queue();
            queue.shutdown = true;
            for Queued { task, span } in queue.tasks.drain(..) {
                span.in_scope(|| {
                    task.refuse(failure(
                        FailureKind::Cancelled,
                        "the server is shutting down",
                    ))
                });
            }
        }
        self.ready.notify_all();
    }
}

impl Worker {
    /// Queues a task, or refuses it when the queue is full or closed. `on_queued` hears its
    /// position before it can start.
    pub(super) fn enqueue(
        &self,
        mut task: Task,
        on_queued: impl FnOnce(&mut Task, u32),
    ) -> Result<(), EngineError> {
        let mut queue = self.shared.lock_queue();
        if queue.shutdown {
            return Err(EngineError::WorkerGone);
        }
        drop_cancelled(&mut queue.tasks);
        let waiting = queue.tasks.iter().filter(|q| q.task.is_queued_work()).count();
        if task.is_queued_work() && waiting >= self.config.queue_capacity {
            return Err(EngineError::QueueFull {
                capacity: self.config.queue_capacity,
            });
        }
        on_queued(&mut task, waiting as u32);
        queue.tasks.push_back(Queued {
            task,
            span: tracing::Span::current(),
        });
        drop(queue);
        self.shared.ready.notify_one();
        Ok(())
    }
}

/// Refuses the waiting tasks whose submitters cancelled them, so they do not hold places.
fn drop_cancelled(tasks: &mut VecDeque<Queued>) {
    *tasks = tasks.drain(..).filter_map(Queued::unless_cancelled).collect();
}
