//! The device worker: one OS thread owns the device, the models and every tensor
//! (`tch::Tensor` is not `Sync`, and libtorch's modes are thread-local). Runs wait in a
//! bounded queue and execute one at a time, so one person's run never pollutes another's
//! peak. Each run streams [`Event`]s to the sink it was submitted with.
//!
//! Runs and experiments are tasks of the same queue and get the same guarantees through one
//! path: checked options, the queue bound and position, cancellation, the deadline, the
//! memory budget (see [`crate::lab`]) and the panic barrier — a panic in any task is logged
//! at error level, fails that task with its reason, and the worker goes on.
//!
//! This module owns the [`Worker`] handle and its API (start, checks, submission, blocking
//! calls, shutdown); `queue` the bounded queue, its tasks and their cancellation;
//! `device_loop` the device thread with its panic barrier and memory check; `experiments`
//! the experiment path.

mod device_loop;
mod experiments;
mod queue;

use protocol::settings::SettingId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use protocol::{
    DeviceInfo, DeviceKind, Event, Limits, PitfallReport, Report, RunFailure, RunSpec, SpecError,
    WorkerHealth,
};

use crate::device::Machine;
use crate::error::EngineError;
use crate::lab::{known_profile, refusal, Budget, Lab, LabConfig, Profiles};
use crate::spec::{check_spec, CheckedSpec};
use device_loop::device_loop;
pub use experiments::{ExperimentError, ExperimentTicket};
use queue::{Shared, Task};

/// Where a run's events go. Called on the device thread; must not block.
pub type Sink = Box<dyn FnMut(Event) + Send>;

/// Where an experiment's result goes. Called once, on the device thread; must not block.
pub type ExperimentReply = Box<dyn FnOnce(Result<PitfallReport, RunFailure>) + Send>;

/// Worker settings.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub lab: LabConfig,
    pub limits: Limits,
    /// Runs that may wait; the next submission is refused with [`EngineError::QueueFull`].
    pub queue_capacity: usize,
    /// A run still going after this long fails with a timeout.
    pub run_timeout: Option<Duration>,
    /// The Python (with PyTorch) that times the per-call-overhead cards' Python side beside
    /// Gradless's figures ([`crate::pitfalls::python`]); `None`: those cards say in a note
    /// that nothing was timed from Python.
    pub python: Option<crate::pitfalls::PythonPeer>,
    /// The models it serves: every spec is resolved and checked against it.
    pub catalog: protocol::Catalog,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            lab: LabConfig::default(),
            limits: Limits::default(),
            queue_capacity: 16,
            run_timeout: Some(Duration::from_secs(300)),
            python: None,
            catalog: protocol::Catalog::built_in(),
        }
    }
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

/// The name of the thread that owns the device.
const DEVICE_THREAD: &str = "gradless-device";

/// Panics on the device thread are libtorch errors that [`crate::torch_call::catch_torch`]
/// turns into run failures; printing them as crashes would only alarm whoever reads the log.
fn quiet_device_thread_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(DEVICE_THREAD) {
                tracing::debug!("libtorch error on the device thread: {info}");
            } else {
                previous(info);
            }
        }));
    });
}

/// The device worker. Dropping it stops the thread after the current run.
pub struct Worker {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    machine: Machine,
    config: WorkerConfig,
    budgets: Vec<(DeviceKind, Budget)>,
    profiles: Profiles,
    /// Quality plans already worked out, by model and device: the server's text and models
    /// do not change while it runs, and encoding the text costs a tokenizer pass.
    plans: Mutex<std::collections::HashMap<(String, DeviceKind), protocol::QualityPlan>>,
}

impl Worker {
    /// Starts the device thread and waits until it has probed the machine.
    pub fn start(config: WorkerConfig) -> Result<Worker, EngineError> {
        quiet_device_thread_panics();
        let shared = Arc::new(Shared::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_shared = shared.clone();
        let thread_config = config.clone();
        let thread = std::thread::Builder::new()
            .name(DEVICE_THREAD.into())
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
            plans: Mutex::default(),
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
        let profile = known_profile(&self.profiles, &checked)?;
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

    /// The models this worker serves.
    pub fn catalog(&self) -> &protocol::Catalog {
        &self.config.catalog
    }

    /// Validates a spec without running it (its model resolved against the catalog).
    pub fn check(&self, spec: RunSpec) -> Result<CheckedSpec, SpecError> {
        check_spec(spec, &self.config.catalog, &self.config.limits, &self.machine)
    }

    /// What the quality measurement of a generation of `spec` (its model and device; the
    /// measurement asked for whatever `spec.generate` says) will score, said before it runs:
    /// see [`crate::lab::quality_plan`]. Checked as a run is (a model not served, or one
    /// that reads no text, names its field); worked out here, off the device thread, once
    /// per model and device.
    pub fn quality_plan(&self, mut spec: RunSpec) -> Result<protocol::QualityPlan, SpecError> {
        spec.generate.get_or_insert_with(Default::default).quality = true;
        let checked = self.check(spec)?;
        let device = checked.device();
        let key = (checked.spec().model.to_string(), device);
        if let Some(plan) = self.plans.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(plan.clone());
        }
        let plan = crate::lab::quality_plan(self.config.lab.quality_text.as_deref(), checked.spec(), device)
            .map_err(|f| SpecError { field: SettingId::Quality.into(), message: f.message })?;
        self.plans.lock().unwrap_or_else(|e| e.into_inner()).insert(key, plan.clone());
        Ok(plan)
    }

    /// Validates a spec and, when its model and mode have been profiled, refuses it if it is
    /// predicted not to fit the budget or the deadline (field `batch`).
    pub fn admit(&self, spec: RunSpec) -> Result<CheckedSpec, SpecError> {
        let checked = self.check(spec)?;
        if let Some(message) = self
            .memory_budget(checked.device())
            .and_then(|budget| crate::lab::decoder_refusal(checked.spec(), budget))
        {
            return Err(SpecError {
                field: SettingId::Model.into(),
                message,
            });
        }
        let profile = known_profile(&self.profiles, &checked);
        if let Some(profile) = profile.filter(|_| checked.spec().batch > crate::lab::PROBE_BATCH) {
            if let Some(message) = refusal(
                &checked,
                &profile,
                self.memory_budget(checked.device()),
                self.config.run_timeout,
            ) {
                return Err(SpecError {
                    field: SettingId::Batch.into(),
                    message,
                });
            }
        }
        Ok(checked)
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

    /// Hands the device thread runs recorded before it started (oldest first), so their
    /// repeats count towards this server's run-to-run noise ([`Lab::remember_runs`]).
    pub fn remember_runs(&self, reports: Vec<Report>) -> Result<(), EngineError> {
        self.call(move |lab| lab.remember_runs(&reports))
    }

    /// The worker's bookkeeping: tasks done, the queue, and the leak checks.
    pub fn health(&self) -> WorkerHealth {
        let mut h = self.shared.lock_health().clone();
        h.queued = self.shared.lock_queue().tasks.len();
        h
    }

    /// Stops taking work and cancels what waits (each waiting run gets a `failed` event);
    /// the current run goes on. Does not block.
    pub fn close(&self) {
        self.shared.close();
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
