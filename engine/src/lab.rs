//! The lab bench: everything that lives on the device thread (the machine's facts, the CPU
//! memory counter, the model cache, the memory budgets) and the measurement of one run, by
//! the method the README's "How it measures" states: build or reuse the model, make the
//! input, synchronise, record the baseline and reset the peaks, warm up (reported apart),
//! time each iteration with synchronisation, then release the output and check that memory
//! returns to the baseline.
//!
//! The baseline is the run's weights and input themselves: what building the model and
//! making the input added to the device's allocated memory. Whatever else the worker holds
//! there (other cached models, the CUDA libraries' workspaces) is reported apart as
//! `other_held_bytes` and left out of every figure, so a spec reads the same whatever ran
//! before it.
//!
//! Guarantees every task gets (see [`RunControl`]): a memory budget (refused up front when
//! the predicted peak exceeds it, see [`Lab::admit`]; on the CPU enforced at the allocation
//! that crosses it, on CUDA after each pass and by CUDA's own out-of-memory error), a
//! deadline and a cancel flag (on the CPU checked at every allocation of the measuring
//! thread, so a run stops within the op that crossed it; on CUDA between passes, and a pass
//! predicted to be longer than the time left is refused up front).
//!
//! A `Lab` must stay on the thread that created it: libtorch's grad mode, inference mode,
//! autocast state and the CPU memory counter are all thread-local.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protocol::{
    Autocast, DeviceKind, Event, FailureKind, GradMode, MemoryReport, ModelId, OutputFacts, Report,
    RunFailure, RunSpec, Sample,
};
use tch::{Device, Kind, Tensor};

use crate::device::{Machine, Meter};
use crate::models::Model;
use crate::spec::CheckedSpec;
use crate::stats::latency_stats;
use crate::torch_ext::{
    self, guard_stop, AutocastGuard, CpuMemoryCounter, ExtError, GuardSettings, GuardStop,
    InferenceModeGuard, LowPrecision, RunGuard,
};

/// Settings of the lab that a run cannot change.
#[derive(Clone, Debug)]
pub struct LabConfig {
    /// Default libtorch intra-op threads for runs that do not ask for a number.
    pub threads: u32,
    /// The memory budget of every run and experiment on either device: what the worker
    /// holds there may not go above it (see [`Budget`]). `None`: a default derived from the
    /// device at start-up ([`CPU_BUDGET_FRACTION`] of the memory available; the GPU's free
    /// memory).
    pub memory_limit_bytes: Option<u64>,
    /// Seed for weights and inputs, so that runs are reproducible.
    pub seed: i64,
    /// How many built models stay cached (least recently used ones are dropped).
    pub model_cache: usize,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            threads: default_threads(),
            memory_limit_bytes: None,
            seed: 0,
            model_cache: 3,
        }
    }
}

/// Half the logical CPUs, at least one: on small machines one thread gave the steadiest
/// timings, and a server should leave room for its own threads.
pub fn default_threads() -> u32 {
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1) as u32;
    (n / 2).max(1)
}

/// The share of the memory available at start-up (`MemAvailable` in /proc/meminfo) that a
/// CPU worker may hold when no `--memory-limit-mib` is given: leaves the rest to the server,
/// the OS and whatever else runs on the machine.
pub const CPU_BUDGET_FRACTION: f64 = 0.5;

/// Predicted activation memory is multiplied by this before it is compared with the budget:
/// the prediction is a straight line through two small batches, and allocator rounding,
/// oneDNN's reorders and the order of frees move the real peak by a few percent.
pub const PREDICTION_MARGIN: f64 = 1.25;

/// Batches at or below this run without a prediction: probing would cost as much as the run.
pub const PROBE_BATCH: u32 = 4;

/// One device's memory budget and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub bytes: u64,
    /// In words, for /api/info and error messages ("--memory-limit-mib", "half the memory
    /// available at start-up", ...).
    pub source: String,
}

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

/// What a model in one mode needs, measured at two small batches (see [`Lab::admit`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    /// Peak above the baseline at batch 1, and its growth per extra sample.
    pub above_at_1: u64,
    pub above_per_sample: u64,
    /// Input bytes per sample.
    pub input_per_sample: u64,
    /// What the model's weights hold on the device.
    pub weights: u64,
    /// One forward pass at batch 1 (fastest of the timed passes), and its growth per sample.
    pub pass_at_1: Duration,
    pub pass_per_sample: Duration,
}

impl Profile {
    /// Weights + input + predicted activations (with [`PREDICTION_MARGIN`]) at `batch`.
    pub fn predicted_bytes(&self, batch: u32) -> u64 {
        let b = batch.max(1) as u64;
        let above = self.above_at_1 + self.above_per_sample * (b - 1);
        self.weights + self.input_per_sample * b + (above as f64 * PREDICTION_MARGIN) as u64
    }

    /// The largest batch whose prediction fits in `budget` (0: not even batch 1).
    pub fn largest_batch(&self, budget: u64) -> u64 {
        if self.predicted_bytes(1) > budget {
            return 0;
        }
        let per = self.input_per_sample as f64 + self.above_per_sample as f64 * PREDICTION_MARGIN;
        if per <= 0.0 {
            return u64::MAX;
        }
        let spare = (budget - self.predicted_bytes(1)) as f64;
        1 + (spare / per).floor() as u64
    }

    /// One pass at `batch`, from the straight line through the two probes.
    pub fn predicted_pass(&self, batch: u32) -> Duration {
        self.pass_at_1 + self.pass_per_sample * (batch.max(1) - 1)
    }
}

/// Profiles are per model, device, mode and input size.
pub type ProfileKey = (ModelId, DeviceKind, bool, GradMode, Autocast, u32);

/// The profiles measured so far, shared with the worker so that a submission can be
/// refused before it is queued once its model and mode have been seen.
pub type Profiles = Arc<Mutex<HashMap<ProfileKey, Profile>>>;

pub fn profile_key(checked: &CheckedSpec) -> ProfileKey {
    let s = checked.spec();
    (
        s.model,
        checked.device(),
        s.eval,
        s.grad,
        s.autocast,
        checked.input_size(),
    )
}

/// Whether a profile says `checked` cannot fit `budget` (weights + input + predicted
/// activations, other cached models not counted: they are evicted first) or cannot finish
/// one pass in `time_left`. The message says why, with the numbers.
pub fn refusal(
    checked: &CheckedSpec,
    profile: &Profile,
    budget: Option<&Budget>,
    time_left: Option<Duration>,
) -> Option<String> {
    let spec = checked.spec();
    let device = checked.device().as_str();
    if let Some(budget) = budget {
        let need = profile.predicted_bytes(spec.batch);
        if need > budget.bytes {
            let largest = profile.largest_batch(budget.bytes);
            return Some(format!(
                "out of memory (refused before it started): batch {} of {} ({}) would need about {} of {device} memory (weights, input and {PREDICTION_MARGIN}x the activations predicted from batches 1 and {PROBE_BATCH}), above this server's budget of {} ({}); {}",
                spec.batch,
                spec.model,
                spec.label(),
                protocol::format_bytes(need),
                protocol::format_bytes(budget.bytes),
                budget.source,
                if largest == 0 {
                    "not even batch 1 fits".to_string()
                } else {
                    format!("the largest batch that fits is about {largest}")
                },
            ));
        }
    }
    if let Some(left) = time_left {
        let pass = profile.predicted_pass(spec.batch);
        if pass > left {
            return Some(format!(
                "refused before it started: one forward pass at batch {} ({}) is predicted to take {:.1} s (from batches 1 and {PROBE_BATCH}), longer than the {:.1} s this run may take",
                spec.batch,
                spec.label(),
                pass.as_secs_f64(),
                left.as_secs_f64(),
            ));
        }
    }
    None
}

/// The device thread's state. See the module docs.
pub struct Lab {
    machine: Machine,
    counter: CpuMemoryCounter,
    models: Vec<Model>,
    config: LabConfig,
    /// CUDA memory the libraries keep for the life of the process (see
    /// [`prime_cuda_libraries`]): part of the worker's own holdings, not a leak.
    cuda_library_bytes: u64,
    cpu_budget: Budget,
    cuda_budget: Option<Budget>,
    profiles: Profiles,
    /// The control of the task under way (set by the worker): every measurement inside the
    /// task obeys its deadline, budget and cancel flag.
    task: Option<RunControl>,
}

impl Lab {
    /// Sets up the lab on the calling thread, which must be the only one to use it.
    pub fn new(config: LabConfig) -> Result<Lab, ExtError> {
        let counter = CpuMemoryCounter::install()?;
        let machine = Machine::probe();
        let cuda_library_bytes = if machine.has_cuda() {
            prime_cuda_libraries()
        } else {
            0
        };
        let (cpu_budget, cuda_budget) = budgets(&config, &machine);
        tracing::info!(
            cpu = cpu_budget.bytes,
            cuda = cuda_budget.as_ref().map(|b| b.bytes),
            "memory budgets"
        );
        Ok(Lab {
            machine,
            counter,
            models: Vec::new(),
            config,
            cuda_library_bytes,
            cpu_budget,
            cuda_budget,
            profiles: Profiles::default(),
            task: None,
        })
    }

    /// The budget every task on `device` gets (`None` for a device this machine lacks).
    pub fn budget(&self, device: DeviceKind) -> Option<&Budget> {
        match device {
            DeviceKind::Cpu => Some(&self.cpu_budget),
            DeviceKind::Cuda => self.cuda_budget.as_ref(),
        }
    }

    /// The profiles measured so far (shared: the worker reads them to refuse early).
    pub fn profiles(&self) -> Profiles {
        self.profiles.clone()
    }

    /// CUDA bytes the libraries' workspaces took when they were primed at start-up.
    pub fn cuda_library_bytes(&self) -> u64 {
        self.cuda_library_bytes
    }

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

    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    pub fn config(&self) -> &LabConfig {
        &self.config
    }

    /// The memory meter for `device`.
    pub fn meter(&self, device: DeviceKind) -> Meter<'_> {
        match device {
            DeviceKind::Cpu => Meter::Cpu(&self.counter),
            DeviceKind::Cuda => Meter::Cuda { index: 0 },
        }
    }

    /// The cached model for this run, built if needed. Returns its index in the cache.
    pub fn model_index(
        &mut self,
        id: ModelId,
        device: DeviceKind,
        input_size: u32,
    ) -> Result<usize, RunFailure> {
        let tdev = tch_device(device);
        if let Some(i) = self
            .models
            .iter()
            .position(|m| m.id == id && m.vs.device() == tdev && m.fits(input_size))
        {
            // Most recently used goes last; eviction takes from the front.
            let m = self.models.remove(i);
            self.models.push(m);
            return Ok(self.models.len() - 1);
        }
        while self.models.len() >= self.config.model_cache.max(1) {
            self.models.remove(0);
        }
        tch::manual_seed(self.config.seed);
        let meter = self.meter(device);
        let before = held(&meter, device)?;
        let mut model = catch_torch(|| Model::build(id, tdev, input_size))?;
        model.held_bytes = held(&meter, device)?.saturating_sub(before);
        self.models.push(model);
        Ok(self.models.len() - 1)
    }

    /// Drops the cached models on `device` other than the one at `keep`; returns the index
    /// of the kept one afterwards.
    fn evict_others(&mut self, keep: usize, device: DeviceKind) -> usize {
        let tdev = tch_device(device);
        let kept = self.models.remove(keep);
        self.models.retain(|m| m.vs.device() != tdev);
        self.models.push(kept);
        self.models.len() - 1
    }

    pub fn model(&self, index: usize) -> &Model {
        &self.models[index]
    }

    /// Parameter count of `id` (building it on the CPU if it is not cached there).
    pub fn parameters(&mut self, id: ModelId) -> Result<u64, RunFailure> {
        let i = self.model_index(id, DeviceKind::Cpu, id.input().default)?;
        Ok(self.models[i].parameters())
    }

    /// After a failure on `device`: give cached blocks back so the next run starts clean.
    pub fn recover(&mut self, device: DeviceKind) {
        if device == DeviceKind::Cuda {
            if let Err(e) = torch_ext::cuda_empty_cache() {
                tracing::warn!("emptying the CUDA cache after a failure: {e}");
            }
        }
    }

    /// The leak check run after every task: on each device, the allocated bytes must be
    /// exactly the cached models' weights and buffers. Anything above is memory a run
    /// left behind.
    pub fn memory_checks(&self) -> Vec<protocol::MemoryCheck> {
        let mut devices = vec![DeviceKind::Cpu];
        if self.machine.has_cuda() {
            devices.push(DeviceKind::Cuda);
        }
        devices
            .into_iter()
            .filter_map(|device| {
                if device == DeviceKind::Cuda {
                    synchronize(device).ok()?;
                }
                let held = self.meter(device).read().ok()?.allocated;
                let tdev = tch_device(device);
                let libraries = if device == DeviceKind::Cuda {
                    self.cuda_library_bytes
                } else {
                    0
                };
                // Each model counts what building it added to the meter (on CUDA whole
                // blocks, as the meter reads them), not its element bytes.
                let expected = libraries
                    + self
                        .models
                        .iter()
                        .filter(|m| m.vs.device() == tdev)
                        .map(|m| m.held_bytes)
                        .sum::<u64>();
                Some(protocol::MemoryCheck {
                    device,
                    held_bytes: held,
                    expected_bytes: expected,
                    ok: held <= expected,
                })
            })
            .collect()
    }

    /// Drops every cached model (used when a device runs out of memory).
    pub fn clear_models(&mut self) {
        self.models.clear();
    }

    /// Refuses `checked` before it starts when its profile (measured here at batches 1 and
    /// [`PROBE_BATCH`] the first time its model and mode are seen, then cached) predicts
    /// that it cannot fit the budget or finish one pass before the deadline; evicts the
    /// other cached models on the device when the run fits only without them. Batches up to
    /// [`PROBE_BATCH`] are admitted without a prediction (the guard still holds them).
    pub fn admit(&mut self, checked: &CheckedSpec, control: &RunControl) -> Result<(), RunFailure> {
        let spec = checked.spec();
        let device = checked.device();
        if spec.batch <= PROBE_BATCH {
            return Ok(());
        }
        let key = profile_key(checked);
        let cached = self
            .profiles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        let profile = match cached {
            Some(p) => p,
            None => {
                let p = self.probe(checked, control).map_err(|f| match f.kind {
                    FailureKind::OutOfMemory => failure(
                        FailureKind::OutOfMemory,
                        format!(
                            "out of memory (refused before it started): even batches 1 and {PROBE_BATCH} cross this server's memory budget (batch {}, {}): {}",
                            spec.batch,
                            spec.label(),
                            f.message
                        ),
                    ),
                    _ => f,
                })?;
                self.profiles
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, p);
                p
            }
        };
        let budget = control
            .budget_bytes
            .map(|bytes| Budget {
                bytes,
                source: self
                    .budget(device)
                    .filter(|b| b.bytes == bytes)
                    .map(|b| b.source.clone())
                    .unwrap_or_else(|| "this task's budget".into()),
            })
            .or_else(|| self.budget(device).cloned());
        if let Some(reason) = refusal(checked, &profile, budget.as_ref(), control.time_left()) {
            let kind = if reason.starts_with("out of memory") {
                FailureKind::OutOfMemory
            } else {
                FailureKind::Timeout
            };
            return Err(failure(kind, reason));
        }
        // It fits on its own; make room if the other cached models are in the way.
        if let Some(budget) = budget {
            let held_now = held(&self.meter(device), device)?;
            let need = profile.predicted_bytes(spec.batch);
            if held_now.saturating_sub(profile.weights) + need > budget.bytes {
                if let Some(i) = self.models.iter().position(|m| {
                    m.id == spec.model
                        && m.vs.device() == tch_device(device)
                        && m.fits(checked.input_size())
                }) {
                    self.evict_others(i, device);
                } else {
                    self.models.retain(|m| m.vs.device() != tch_device(device));
                }
                self.recover(device);
            }
        }
        Ok(())
    }

    /// Measures `checked`'s model and mode at batches 1 and [`PROBE_BATCH`].
    fn probe(
        &mut self,
        checked: &CheckedSpec,
        control: &RunControl,
    ) -> Result<Profile, RunFailure> {
        let at = |batch: u32| -> Result<CheckedSpec, RunFailure> {
            let mut spec = checked.spec().clone();
            spec.batch = batch;
            spec.warmup = 1;
            spec.iters = 2;
            Ok(checked.with_spec(spec))
        };
        let one = self.measure(&at(1)?, control, &mut |_| {})?;
        let four = self.measure(&at(PROBE_BATCH)?, control, &mut |_| {})?;
        let steps = (PROBE_BATCH - 1) as u64;
        let input = |r: &Report| r.memory.baseline_bytes;
        let index =
            self.model_index(checked.spec().model, checked.device(), checked.input_size())?;
        let weights = self.models[index].held_bytes;
        let fastest = |r: &Report| Duration::from_secs_f64(r.latency_ms.min / 1000.0);
        let (t1, t4) = (fastest(&one), fastest(&four));
        let profile = Profile {
            above_at_1: one.memory.peak_above_baseline_bytes,
            above_per_sample: four
                .memory
                .peak_above_baseline_bytes
                .saturating_sub(one.memory.peak_above_baseline_bytes)
                / steps,
            input_per_sample: input(&four).saturating_sub(input(&one)) / steps,
            weights,
            pass_at_1: t1,
            pass_per_sample: t4.saturating_sub(t1) / steps as u32,
        };
        tracing::debug!(?profile, spec = %checked.spec().label(), "profiled");
        Ok(profile)
    }

    /// Measures one run, emitting events as it goes. See the module docs for the method.
    /// Inside a task (see [`Lab::with_task`]) the task's limits apply too.
    pub fn measure(
        &mut self,
        checked: &CheckedSpec,
        control: &RunControl,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Report, RunFailure> {
        let control = match &self.task {
            Some(task) => control.within(task),
            None => control.clone(),
        };
        let device = checked.device();
        let budget = control
            .budget_bytes
            .or_else(|| self.budget(device).map(|b| b.bytes));
        let control = RunControl {
            budget_bytes: budget,
            ..control
        };
        let _guard = self.guard(device, &control)?;
        let spec = checked.spec().clone();
        let result = self.measure_guarded(checked, &control, emit);
        result.map_err(|f| explain(f, &spec, device, budget))
    }

    fn measure_guarded(
        &mut self,
        checked: &CheckedSpec,
        control: &RunControl,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Report, RunFailure> {
        let spec = checked.spec().clone();
        let device = checked.device();
        let threads = spec.threads.unwrap_or(self.config.threads);
        tch::set_num_threads(threads as i32);
        control.check()?;

        let index = self.model_index(spec.model, device, checked.input_size())?;
        let weights = self.models[index].held_bytes;
        tch::manual_seed(self.config.seed);
        let meter = self.meter(device);
        let before_input = held(&meter, device)?;
        let model = &self.models[index];
        let input =
            catch_torch(|| model.input(spec.batch, checked.input_size(), tch_device(device)))?;

        synchronize(device)?;
        let at_baseline = meter.read().map_err(torch_failure)?.allocated;
        // Weights + input themselves; what else the device holds is reported apart and taken
        // out of every figure below.
        let baseline = weights + at_baseline.saturating_sub(before_input);
        let other = at_baseline.saturating_sub(baseline);
        let own = |bytes: u64| bytes.saturating_sub(other);
        meter.reset_peak().map_err(torch_failure)?;
        emit(Event::Started {
            device_name: self.machine.stamp(device, threads).device_name,
            baseline_bytes: baseline,
            memory_source: meter.source(),
            total: spec.warmup + spec.iters,
        });

        // On CUDA the budget is checked after each pass (the CPU's is checked at every
        // allocation by the guard).
        let limit = control.budget_bytes.filter(|_| device == DeviceKind::Cuda);
        let mut warmup = Vec::with_capacity(spec.warmup as usize);
        for i in 0..spec.warmup {
            control.check()?;
            let (sample, out, _) = timed_forward(model, &input, &spec, device, &meter, i, limit)?;
            drop(out);
            let sample = Sample {
                allocated_bytes: own(sample.allocated_bytes),
                peak_bytes: own(sample.peak_bytes),
                ..sample
            };
            emit(Event::Warmup {
                sample: sample.clone(),
            });
            warmup.push(sample);
        }

        // Peaks count from here: the statistics describe the steady state only. Each
        // iteration resets the counters and reports its own peak; the run's peak is the
        // highest of them.
        let mut samples = Vec::with_capacity(spec.iters as usize);
        let mut peak_reserved: Option<u64> = None;
        let mut last: Option<Tensor> = None;
        for i in 0..spec.iters {
            control.check()?;
            // The previous output (and its graph) must be gone before the next forward pass,
            // or the peak would count two iterations at once.
            drop(last.take());
            let (sample, out, reserved) =
                timed_forward(model, &input, &spec, device, &meter, i, limit)?;
            peak_reserved = peak_reserved.max(reserved);
            let sample = Sample {
                allocated_bytes: own(sample.allocated_bytes),
                peak_bytes: own(sample.peak_bytes),
                ..sample
            };
            emit(Event::Sample {
                sample: sample.clone(),
            });
            samples.push(sample);
            last = Some(out);
        }
        let peak_allocated = samples
            .iter()
            .map(|s| s.peak_bytes)
            .max()
            .unwrap_or(baseline);
        let device_used = meter.device_used();
        let output = last
            .as_ref()
            .map(output_facts)
            .unwrap_or_else(|| OutputFacts {
                dtype: String::new(),
                shape: vec![],
                is_inference: false,
                requires_grad: false,
            });
        drop(last);
        synchronize(device)?;
        let after_release = own(meter.read().map_err(torch_failure)?.allocated);
        if after_release > baseline {
            tracing::warn!(
                leaked = after_release - baseline,
                "memory did not return to the baseline after a run"
            );
        }

        let latencies: Vec<f64> = samples.iter().map(|s| s.latency_ms).collect();
        let latency_ms = latency_stats(&latencies)
            .ok_or_else(|| failure(FailureKind::Internal, "no timed samples"))?;
        let throughput_per_s = if latency_ms.mean > 0.0 {
            spec.batch as f64 * 1000.0 / latency_ms.mean
        } else {
            0.0
        };
        Ok(Report {
            env: self.machine.stamp(device, threads),
            spec,
            latency_ms,
            throughput_per_s,
            memory: MemoryReport {
                source: meter.source(),
                baseline_bytes: baseline,
                peak_allocated_bytes: peak_allocated,
                peak_above_baseline_bytes: peak_allocated.saturating_sub(baseline),
                peak_reserved_bytes: peak_reserved,
                after_release_bytes: after_release,
                leaked_bytes: after_release.saturating_sub(baseline),
                device_used_bytes: device_used,
                other_held_bytes: Some(other),
            },
            output,
            warmup,
            samples,
        })
    }
}

/// The budgets of both devices: `--memory-limit-mib` when given, otherwise derived from the
/// device at start-up.
fn budgets(config: &LabConfig, machine: &Machine) -> (Budget, Option<Budget>) {
    let explicit = config.memory_limit_bytes.map(|bytes| Budget {
        bytes,
        source: "the server's --memory-limit-mib".into(),
    });
    let cpu = explicit.clone().unwrap_or_else(|| {
        let available = mem_available().or_else(total_ram).unwrap_or(u64::MAX / 2);
        Budget {
            bytes: (available as f64 * CPU_BUDGET_FRACTION) as u64,
            source: format!(
                "{}% of the memory available when the server started",
                (CPU_BUDGET_FRACTION * 100.0).round()
            ),
        }
    });
    let cuda = machine.has_cuda().then(|| {
        explicit.unwrap_or_else(|| {
            let free = torch_ext::cuda_mem_info(0)
                .map(|(free, _)| free)
                .unwrap_or(u64::MAX / 2);
            // What the device has free once the CUDA context and the libraries' workspaces
            // are in place: the worker's own workspaces count against it too, which errs
            // on the safe side by their few MiB.
            Budget {
                bytes: free,
                source: "the GPU's free memory when the server started".into(),
            }
        })
    });
    (cpu, cuda)
}

fn mem_available() -> Option<u64> {
    meminfo_field("MemAvailable:")
}

fn total_ram() -> Option<u64> {
    meminfo_field("MemTotal:")
}

fn meminfo_field(name: &str) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = meminfo
        .lines()
        .find(|l| l.starts_with(name))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// What the meter counts as allocated on `device` now, after the device's queued work.
fn held(meter: &Meter<'_>, device: DeviceKind) -> Result<u64, RunFailure> {
    synchronize(device)?;
    Ok(meter.read().map_err(torch_failure)?.allocated)
}

/// Adds the run's setting to a failure that stopped it at the budget.
fn explain(f: RunFailure, spec: &RunSpec, device: DeviceKind, budget: Option<u64>) -> RunFailure {
    if f.kind != FailureKind::OutOfMemory || f.message.contains(&format!("batch {}", spec.batch)) {
        return f;
    }
    let budget = budget
        .map(|b| format!(" (this server's budget is {})", protocol::format_bytes(b)))
        .unwrap_or_default();
    failure(
        FailureKind::OutOfMemory,
        format!(
            "out of memory on {}{budget}: batch {}, {}: {}",
            device.as_str(),
            spec.batch,
            spec.label(),
            f.message
        ),
    )
}

/// cuBLAS and cuBLASLt keep a workspace per stream that PyTorch allocates through its
/// caching allocator at the first matmul and holds until the process ends. Making those
/// first matmuls here, once, before any run keeps the workspaces out of every run's
/// baseline-to-release difference (a first run would otherwise look like a leak) and gives
/// the worker's leak check their size. Returns the CUDA bytes allocated afterwards, with
/// nothing else alive.
fn prime_cuda_libraries() -> u64 {
    let device = Device::Cuda(0);
    // The change across priming, not what is allocated afterwards: another Lab in the same
    // process (tests) may hold CUDA memory already.
    let before = synchronize(DeviceKind::Cuda)
        .ok()
        .and_then(|_| Meter::Cuda { index: 0 }.read().ok())
        .map(|r| r.allocated)
        .unwrap_or(0);
    for kind in [Kind::Float, Kind::Half, Kind::BFloat16] {
        // A plain matmul (cuBLAS) and one with a bias (the cuBLASLt epilogue path). A dtype
        // the GPU cannot multiply is skipped: runs in it will fail on their own terms.
        let primed = catch_torch(|| {
            let a = Tensor::ones([64, 64], (kind, device));
            let bias = Tensor::ones([64], (kind, device));
            let _ = a.matmul(&a);
            let _ = bias.addmm(&a, &a);
        });
        if let Err(f) = primed {
            tracing::info!("could not prime CUDA matmuls in {kind:?}: {}", f.message);
        }
    }
    let held = synchronize(DeviceKind::Cuda)
        .ok()
        .and_then(|_| Meter::Cuda { index: 0 }.read().ok())
        .map(|r| r.allocated);
    let held = held.unwrap_or(0).saturating_sub(before);
    tracing::info!(
        bytes = held,
        "CUDA library workspaces allocated before any run"
    );
    held
}

/// One forward pass under the spec's settings, timed with device synchronisation. Returns
/// the sample, the output, and the peak reserved bytes during the pass (CUDA only).
pub fn timed_forward(
    model: &Model,
    input: &Tensor,
    spec: &RunSpec,
    device: DeviceKind,
    meter: &Meter<'_>,
    iteration: u32,
    limit: Option<u64>,
) -> Result<(Sample, Tensor, Option<u64>), RunFailure> {
    meter.reset_peak().map_err(torch_failure)?;
    let start = Instant::now();
    let out = forward(model, input, spec, device)?;
    synchronize(device)?;
    let latency_ms = start.elapsed().as_secs_f64() * 1000.0;
    let reading = meter.read().map_err(torch_failure)?;
    if let Some(limit) = limit {
        if reading.peak_allocated > limit {
            return Err(failure(
                FailureKind::OutOfMemory,
                format!(
                    "out of memory: this run needed {} of {} memory, above the server's limit of {} (batch {}, {})",
                    protocol::format_bytes(reading.peak_allocated),
                    device.as_str(),
                    protocol::format_bytes(limit),
                    spec.batch,
                    spec.label()
                ),
            ));
        }
    }
    let sample = Sample {
        iteration,
        latency_ms,
        allocated_bytes: reading.allocated,
        peak_bytes: reading.peak_allocated,
        reserved_bytes: reading.reserved,
    };
    Ok((sample, out, reading.peak_reserved))
}

/// The forward pass inside the grad mode and autocast region the spec asks for, exactly as
/// the Python snippet nests them.
pub fn forward(
    model: &Model,
    input: &Tensor,
    spec: &RunSpec,
    device: DeviceKind,
) -> Result<Tensor, RunFailure> {
    let _inference = match spec.grad {
        GradMode::InferenceMode => Some(InferenceModeGuard::enter().map_err(torch_failure)?),
        _ => None,
    };
    let _no_grad = (spec.grad == GradMode::NoGrad).then(tch::no_grad_guard);
    let _autocast = match spec.autocast {
        Autocast::Off => None,
        Autocast::Fp16 => {
            Some(AutocastGuard::enter(device, LowPrecision::Fp16).map_err(torch_failure)?)
        }
        Autocast::Bf16 => {
            Some(AutocastGuard::enter(device, LowPrecision::Bf16).map_err(torch_failure)?)
        }
    };
    catch_torch(|| model.net.forward_t(input, !spec.eval))
}

fn output_facts(t: &Tensor) -> OutputFacts {
    OutputFacts {
        dtype: format!("{:?}", t.kind()),
        shape: t.size(),
        is_inference: t.is_inference(),
        requires_grad: t.requires_grad(),
    }
}

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

/// Runs tch code that panics on libtorch errors (its non-`f_` API) and turns such a panic
/// into a [`RunFailure`]: out-of-memory is recognised as such.
pub fn catch_torch<T>(f: impl FnOnce() -> T) -> Result<T, RunFailure> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let text = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "libtorch raised an error".to_string());
        classify(&text)
    })
}

fn classify(text: &str) -> RunFailure {
    let message =
        crate::first_line(text.trim_start_matches("called `Result::unwrap()` on an `Err` value: "));
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
