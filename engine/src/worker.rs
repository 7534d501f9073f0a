//! The device worker: one OS thread owns the device, the models and every tensor
//! (`tch::Tensor` is not `Sync`, and libtorch's modes are thread-local). Runs wait in a
//! bounded queue and execute one at a time, so one person's run never pollutes another's
//! peak. Each run streams [`Event`]s to the sink it was submitted with.
//!
//! Runs and experiments are tasks of the same queue and get the same guarantees through one
//! path: checked options, the queue bound and position, cancellation, the deadline, the
//! memory budget (see [`crate::lab`]) and the panic barrier — a panic in any task is logged
//! at error level, fails that task with its reason, and the worker goes on.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use protocol::{
    DeviceChoice, DeviceInfo, DeviceKind, Event, FailureKind, Limits, PitfallOptions,
    PitfallReport, Report, RunFailure, RunSpec, SpecError, WorkerHealth,
};

use crate::device::Machine;
use crate::error::EngineError;
use crate::lab::{failure, profile_key, refusal, Budget, Lab, LabConfig, Profiles, RunControl};
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

/// Where an experiment's result goes. Called once, on the device thread; must not block.
pub type ExperimentReply = Box<dyn FnOnce(Result<PitfallReport, RunFailure>) + Send>;

enum Task {
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
    fn is_queued_work(&self) -> bool {
        !matches!(self, Task::Call { .. })
    }

    fn cancelled(&self) -> bool {
        match self {
            Task::Run { cancel, .. } | Task::Experiment { cancel, .. } => {
                cancel.load(Ordering::Relaxed)
            }
            Task::Call { .. } => false,
        }
    }

    /// Tells the submitter that the task will not run.
    fn refuse(self, f: RunFailure) {
        match self {
            Task::Run { mut sink, .. } => sink(Event::Failed { failure: f }),
            Task::Experiment { reply, .. } => reply(Err(f)),
            Task::Call { on_panic, .. } => on_panic(f.message),
        }
    }
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

/// What the device thread reports once it is ready.
struct Ready {
    machine: Machine,
    budgets: Vec<(DeviceKind, Budget)>,
    profiles: Profiles,
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
    budgets: Vec<(DeviceKind, Budget)>,
    profiles: Profiles,
}

/// A queued experiment: its ticket (to cancel it) and its place in the queue.
#[derive(Clone, Debug)]
pub struct ExperimentTicket {
    pub ticket: RunTicket,
    /// Tasks ahead of it when it was queued.
    pub position: u32,
}

/// Why [`Worker::run_experiment`] gave no report.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// Refused before it was queued (unknown id, bad options, full queue, ...).
    #[error(transparent)]
    Rejected(EngineError),
    /// It ran and failed.
    #[error("{}", .0.message)]
    Failed(RunFailure),
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
                let budgets = [DeviceKind::Cpu, DeviceKind::Cuda]
                    .into_iter()
                    .filter_map(|d| lab.budget(d).map(|b| (d, b.clone())))
                    .collect();
                let _ = ready_tx.send(Ok(Ready {
                    machine: lab.machine().clone(),
                    budgets,
                    profiles: lab.profiles(),
                }));
                device_loop(lab, &thread_shared, &thread_config);
            })
            .map_err(|e| EngineError::Torch(format!("could not start the device thread: {e}")))?;
        let ready = ready_rx.recv().map_err(|_| EngineError::WorkerGone)??;
        Ok(Worker {
            shared,
            thread: Mutex::new(Some(thread)),
            machine: ready.machine,
            config,
            budgets: ready.budgets,
            profiles: ready.profiles,
        })
    }

    /// The memory budget every task on `device` gets (for /api/info); `None` for a device
    /// this machine lacks.
    pub fn memory_budget(&self, device: DeviceKind) -> Option<&Budget> {
        self.budgets
            .iter()
            .find(|(d, _)| *d == device)
            .map(|(_, b)| b)
    }

    /// The largest batch of `spec`'s model and mode that the budget allows, once that model
    /// and mode have been profiled (by a run above batch 4); `None` before.
    pub fn largest_batch(&self, spec: RunSpec) -> Option<u64> {
        let checked = self.check(spec).ok()?;
        let profile = *self
            .profiles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&profile_key(&checked))?;
        Some(profile.largest_batch(self.memory_budget(checked.device())?.bytes))
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

    /// Validates a spec and, when its model and mode have been profiled, refuses it if it is
    /// predicted not to fit the budget or the deadline (field `batch`).
    pub fn admit(&self, spec: RunSpec) -> Result<CheckedSpec, SpecError> {
        let checked = self.check(spec)?;
        let profile = self
            .profiles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&profile_key(&checked))
            .copied();
        if let Some(profile) = profile.filter(|_| checked.spec().batch > crate::lab::PROBE_BATCH) {
            if let Some(message) = refusal(
                &checked,
                &profile,
                self.memory_budget(checked.device()),
                self.config.run_timeout,
            ) {
                return Err(SpecError {
                    field: "batch".into(),
                    message,
                });
            }
        }
        Ok(checked)
    }

    /// Queues a task, or refuses it when the queue is full or closed. `on_queued` hears its
    /// position before it can start.
    fn enqueue(
        &self,
        mut task: Task,
        on_queued: impl FnOnce(&mut Task, u32),
    ) -> Result<(), EngineError> {
        let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.shutdown {
            return Err(EngineError::WorkerGone);
        }
        drop_cancelled(&mut queue.tasks);
        let waiting = queue.tasks.iter().filter(|t| t.is_queued_work()).count();
        if task.is_queued_work() && waiting >= self.config.queue_capacity {
            return Err(EngineError::QueueFull {
                capacity: self.config.queue_capacity,
            });
        }
        on_queued(&mut task, waiting as u32);
        queue.tasks.push_back(task);
        drop(queue);
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Queues a run. Its first event (`queued` with its position) is emitted before this
    /// returns.
    pub fn submit(&self, spec: RunSpec, sink: Sink) -> Result<RunTicket, EngineError> {
        let spec = self.admit(spec)?;
        let cancel = Arc::new(AtomicBool::new(false));
        let task = Task::Run {
            spec,
            sink,
            cancel: cancel.clone(),
        };
        self.enqueue(task, |task, position| {
            if let Task::Run { sink, .. } = task {
                sink(Event::Queued { position });
            }
        })?;
        Ok(RunTicket { cancel })
    }

    /// Checks an experiment's id and options and queues it like a run: the same batch
    /// ceiling, queue bound, cancellation, deadline, budget and panic barrier. `reply` gets
    /// its report (or why it failed) on the device thread. Unknown ids are
    /// [`EngineError::UnknownPitfall`]; bad options are [`EngineError::InvalidSpec`] naming
    /// the field.
    pub fn experiment(
        &self,
        id: &str,
        options: PitfallOptions,
        reply: ExperimentReply,
    ) -> Result<ExperimentTicket, EngineError> {
        let options = self.check_experiment(id, options)?;
        let cancel = Arc::new(AtomicBool::new(false));
        let mut position = 0;
        let task = Task::Experiment {
            id: id.to_string(),
            options,
            reply,
            cancel: cancel.clone(),
        };
        self.enqueue(task, |_, p| position = p)?;
        Ok(ExperimentTicket {
            ticket: RunTicket { cancel },
            position,
        })
    }

    /// [`Worker::experiment`], waiting for the report: the CLI's and the server's blocking
    /// path.
    pub fn run_experiment(
        &self,
        id: &str,
        options: PitfallOptions,
    ) -> Result<PitfallReport, ExperimentError> {
        let (tx, rx) = mpsc::channel();
        self.experiment(id, options, Box::new(move |r| drop(tx.send(r))))
            .map_err(ExperimentError::Rejected)?;
        match rx.recv() {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(f)) => Err(ExperimentError::Failed(f)),
            Err(_) => Err(ExperimentError::Rejected(EngineError::WorkerGone)),
        }
    }

    /// The checks [`Worker::experiment`] makes, with the device resolved.
    pub fn check_experiment(
        &self,
        id: &str,
        options: PitfallOptions,
    ) -> Result<PitfallOptions, EngineError> {
        if !crate::pitfalls::exists(id) {
            return Err(EngineError::UnknownPitfall {
                id: id.to_string(),
                known: crate::pitfalls::catalogue()
                    .into_iter()
                    .map(|c| c.id)
                    .collect(),
            });
        }
        let invalid = |field: &str, message: String| {
            EngineError::InvalidSpec(SpecError {
                field: field.into(),
                message,
            })
        };
        let device = match options.device {
            DeviceChoice::Cuda if !self.machine.has_cuda() => {
                return Err(invalid(
                    "device",
                    "this server has no CUDA device (libtorch found none); use cpu or auto".into(),
                ))
            }
            DeviceChoice::Cpu => DeviceKind::Cpu,
            DeviceChoice::Auto | DeviceChoice::Cuda if self.machine.has_cuda() => DeviceKind::Cuda,
            _ => DeviceKind::Cpu,
        };
        if let Some(batch) = options.batch {
            if batch == 0 {
                return Err(invalid("batch", "batch must be at least 1".into()));
            }
            if batch > self.config.limits.max_batch {
                return Err(invalid(
                    "batch",
                    format!(
                        "batch {batch} is above this server's limit of {}",
                        self.config.limits.max_batch
                    ),
                ));
            }
        }
        if let (Some(asked), Some(budget)) = (options.budget_bytes, self.memory_budget(device)) {
            if asked > budget.bytes {
                return Err(invalid(
                    "budget_bytes",
                    format!(
                        "budget_bytes {} is above this server's memory budget of {} ({})",
                        protocol::format_bytes(asked),
                        protocol::format_bytes(budget.bytes),
                        budget.source
                    ),
                ));
            }
        }
        Ok(PitfallOptions {
            device: match device {
                DeviceKind::Cpu => DeviceChoice::Cpu,
                DeviceKind::Cuda => DeviceChoice::Cuda,
            },
            ..options
        })
    }

    /// Runs `f` on the device thread (after the runs queued before it) and returns its
    /// result. A panic inside `f` is [`EngineError::TaskPanicked`]; the worker goes on.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Lab) -> R + Send + 'static,
    ) -> Result<R, EngineError> {
        let (tx, rx) = mpsc::channel();
        let panic_tx = tx.clone();
        let task = Task::Call {
            call: Box::new(move |lab| {
                let result = f(lab);
                Box::new(move || drop(tx.send(Ok(result))))
            }),
            on_panic: Box::new(move |reason| drop(panic_tx.send(Err(reason)))),
        };
        self.enqueue(task, |_, _| {})?;
        match rx.recv() {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(reason)) => Err(EngineError::TaskPanicked(reason)),
            Err(_) => Err(EngineError::WorkerGone),
        }
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
                task.refuse(failure(
                    FailureKind::Cancelled,
                    "the server is shutting down",
                ));
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
    let mut kept = VecDeque::with_capacity(tasks.len());
    for task in tasks.drain(..) {
        if task.cancelled() {
            task.refuse(failure(
                FailureKind::Cancelled,
                "cancelled before it started",
            ));
        } else {
            kept.push_back(task);
        }
    }
    *tasks = kept;
}

/// The text of a panic's payload.
fn panic_reason(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// The panic barrier: runs one task's body; a panic is logged at error level and becomes a
/// failure of that task (`Internal`, with the reason), and the device thread goes on.
fn barrier<R>(what: &str, body: impl FnOnce() -> Result<R, RunFailure>) -> Result<R, RunFailure> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let reason = crate::first_line(&panic_reason(&*payload));
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
                        }
                        if t.is_queued_work() {
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
        if task.cancelled() {
            task.refuse(failure(
                FailureKind::Cancelled,
                "cancelled before it started",
            ));
            continue;
        }
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
                let device = match options.device {
                    DeviceChoice::Cuda => DeviceKind::Cuda,
                    _ => DeviceKind::Cpu,
                };
                let control = control_for(config, cancel, &lab, device);
                let result = barrier("the experiment", || {
                    lab.with_task(control, |lab| crate::pitfalls::run(lab, &id, options))?
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
                // The leak check runs before the terminal event goes out, so whoever hears
                // "done" can already read its result in the worker's health.
                let result = barrier("the run", || {
                    lab.with_task(control.clone(), |lab| {
                        lab.admit(&spec, &control)?;
                        lab.measure(&spec, &control, &mut *sink)
                    })?
                });
                match result {
                    Ok(report) => {
                        check_memory(&lab, shared);
                        sink(Event::Done {
                            report: Box::new(report),
                        });
                    }
                    Err(f) => {
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
