//! The device worker: one OS thread owns the device, the models and every tensor
//! (`tch::Tensor` is not `Sync`, and libtorch's modes are thread-local). Runs wait in a
//! bounded queue and execute one at a time, so one person's run never pollutes another's
//! peak. Each run streams [`Event`]s to the sink it was submitted with.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use protocol::{
    DeviceInfo, Event, FailureKind, Limits, Report, RunFailure, RunSpec, SpecError, WorkerHealth,
};

use crate::device::Machine;
use crate::error::EngineError;
use crate::lab::{failure, Lab, LabConfig, RunControl};
use crate::spec::{check_spec, CheckedSpec};

/// Where a run's events go. Called on the device thread; must not block.
pub type Sink = Box<dyn FnMut(Event) + Send>;

/// Worker settings.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub lab: LabConfig,
    pub limits: Limits,
    /// Runs that may wait; the next submission is refused with [`EngineError::QueueFull`].
    pub queue_capacity: usize,
    /// A run still going after this long fails with a timeout.
    pub run_timeout: Option<Duration>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            lab: LabConfig::default(),
            limits: Limits::default(),
            queue_capacity: 16,
            run_timeout: Some(Duration::from_secs(300)),
        }
    }
}

/// Work run on the device thread; it returns how to deliver its result, so the worker can
/// check its memory before the caller hears back.
type Call = Box<dyn FnOnce(&mut Lab) -> Box<dyn FnOnce() + Send> + Send>;

enum Task {
    Run {
        spec: CheckedSpec,
        sink: Sink,
        cancel: Arc<AtomicBool>,
    },
    Call(Call),
}

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    health: Mutex<WorkerHealth>,
}

/// A handle on a submitted run: cancel it if its requester goes away.
#[derive(Clone, Debug)]
pub struct RunTicket {
    cancel: Arc<AtomicBool>,
}

impl RunTicket {
    /// A queued run is dropped when its turn comes; a running one stops at the next iteration.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// The device worker. Dropping it stops the thread after the current run.
pub struct Worker {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    machine: Machine,
    config: WorkerConfig,
}

impl Worker {
    /// Starts the device thread and waits until it has probed the machine.
    pub fn start(config: WorkerConfig) -> Result<Worker, EngineError> {
        crate::quiet_device_thread_panics();
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            health: Mutex::new(WorkerHealth::default()),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_shared = shared.clone();
        let thread_config = config.clone();
        let thread = std::thread::Builder::new()
            .name("gradless-device".into())
            .spawn(move || {
                let lab = match Lab::new(thread_config.lab.clone()) {
                    Ok(lab) => lab,
                    Err(e) => {
                        let _ = ready_tx.send(Err(EngineError::from(e)));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(lab.machine().clone()));
                device_loop(lab, &thread_shared, &thread_config);
            })
            .map_err(|e| EngineError::Torch(format!("could not start the device thread: {e}")))?;
        let machine = ready_rx.recv().map_err(|_| EngineError::WorkerGone)??;
        Ok(Worker {
            shared,
            thread: Mutex::new(Some(thread)),
            machine,
            config,
        })
    }

    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.machine.devices()
    }

    pub fn queue_capacity(&self) -> usize {
        self.config.queue_capacity
    }

    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// Validates a spec without running it.
    pub fn check(&self, spec: RunSpec) -> Result<CheckedSpec, SpecError> {
        check_spec(spec, &self.config.limits, &self.machine)
    }

    /// Queues a run. Its first event (`queued` with its position) is emitted before this
    /// returns.
    pub fn submit(&self, spec: RunSpec, mut sink: Sink) -> Result<RunTicket, EngineError> {
        let spec = self.check(spec)?;
        let cancel = Arc::new(AtomicBool::new(false));
        let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.shutdown {
            return Err(EngineError::WorkerGone);
        }
        drop_cancelled(&mut queue.tasks);
        let waiting = queue
            .tasks
            .iter()
            .filter(|t| matches!(t, Task::Run { .. }))
            .count();
        if waiting >= self.config.queue_capacity {
            return Err(EngineError::QueueFull {
                capacity: self.config.queue_capacity,
            });
        }
        sink(Event::Queued {
            position: waiting as u32,
        });
        queue.tasks.push_back(Task::Run {
            spec,
            sink,
            cancel: cancel.clone(),
        });
        drop(queue);
        self.shared.ready.notify_one();
        Ok(RunTicket { cancel })
    }

    /// Runs `f` on the device thread (after the runs queued before it) and returns its result.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Lab) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (tx, rx) = mpsc::channel();
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            if queue.shutdown {
                return Err(EngineError::WorkerGone);
            }
            queue.tasks.push_back(Task::Call(Box::new(move |lab| {
                let result = f(lab);
                Box::new(move || drop(tx.send(result)))
            })));
        }
        self.shared.ready.notify_one();
        rx.recv().map_err(|_| EngineError::WorkerGone)
    }

    /// Submits a run and waits for its report: the CLI's path through the same worker.
    pub fn measure(
        &self,
        spec: RunSpec,
        mut on_event: impl FnMut(&Event),
    ) -> Result<Report, MeasureError> {
        let (tx, rx) = mpsc::channel();
        self.submit(spec, Box::new(move |e| drop(tx.send(e))))
            .map_err(MeasureError::Rejected)?;
        for event in rx {
            on_event(&event);
            match event {
                Event::Done { report } => return Ok(*report),
                Event::Failed { failure } => return Err(MeasureError::Failed(failure)),
                _ => {}
            }
        }
        Err(MeasureError::Rejected(EngineError::WorkerGone))
    }

    /// The worker's bookkeeping: tasks done, the queue, and the leak checks.
    pub fn health(&self) -> WorkerHealth {
        let mut h = self
            .shared
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        h.queued = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tasks
            .len();
        h
    }

    /// Stops taking work and cancels what waits (each waiting run gets a `failed` event);
    /// the current run goes on. Does not block.
    pub fn close(&self) {
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.shutdown = true;
            for task in queue.tasks.drain(..) {
                if let Task::Run { mut sink, .. } = task {
                    sink(Event::Failed {
                        failure: failure(FailureKind::Cancelled, "the server is shutting down"),
                    });
                }
            }
        }
        self.shared.ready.notify_all();
    }

    /// [`Worker::close`], then waits for the current run to finish and the thread to end.
    pub fn shutdown(&self) {
        self.close();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Why [`Worker::measure`] gave no report.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error(transparent)]
    Rejected(EngineError),
    #[error("{}", .0.message)]
    Failed(RunFailure),
}

fn drop_cancelled(tasks: &mut VecDeque<Task>) {
    tasks.retain_mut(|t| match t {
        Task::Run { cancel, sink, .. } if cancel.load(Ordering::Relaxed) => {
            sink(Event::Failed {
                failure: failure(FailureKind::Cancelled, "cancelled before it started"),
            });
            false
        }
        _ => true,
    });
}

fn device_loop(mut lab: Lab, shared: &Shared, config: &WorkerConfig) {
    loop {
        let task = {
            let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(task) = queue.tasks.pop_front() {
                    // Everyone still waiting moves up one place.
                    let mut position = 0;
                    for t in queue.tasks.iter_mut() {
                        if let Task::Run { sink, .. } = t {
                            sink(Event::Queued { position });
                            position += 1;
                        }
                    }
                    break task;
                }
                if queue.shutdown {
                    return;
                }
                queue = shared.ready.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
        };
        match task {
            Task::Call(f) => {
                let deliver = f(&mut lab);
                check_memory(&lab, shared);
                deliver();
            }
            Task::Run {
                spec,
                mut sink,
                cancel,
            } => {
                if cancel.load(Ordering::Relaxed) {
                    sink(Event::Failed {
                        failure: failure(FailureKind::Cancelled, "cancelled before it started"),
                    });
                    continue;
                }
                let control = RunControl {
                    cancel,
                    deadline: config.run_timeout.map(|t| Instant::now() + t),
                };
                let device = spec.device();
                // The leak check runs before the terminal event goes out, so whoever hears
                // "done" can already read its result in the worker's health.
                match lab.measure(&spec, &control, &mut *sink) {
                    Ok(report) => {
                        check_memory(&lab, shared);
                        sink(Event::Done {
                            report: Box::new(report),
                        });
                    }
                    Err(f) => {
                        if f.kind == FailureKind::OutOfMemory {
                            // Free everything we hold so the next run has the whole device.
                            tracing::info!("{}", f.message);
                            lab.clear_models();
                        }
                        lab.recover(device);
                        check_memory(&lab, shared);
                        sink(Event::Failed { failure: f });
                    }
                }
            }
        }
    }
}

/// After every task: is the memory the worker holds back to its cached models' weights?
fn check_memory(lab: &Lab, shared: &Shared) {
    let checks = lab.memory_checks();
    let mut health = shared.health.lock().unwrap_or_else(|e| e.into_inner());
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
