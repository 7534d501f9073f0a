//! The lab bench: everything that lives on the device thread (the machine's facts, the CPU
//! memory counter, the model cache) and the measurement of one run, following DESIGN.md's
//! method: build or reuse the model, make the input, synchronise, record the baseline and
//! reset the peaks, warm up (reported apart), time each iteration with synchronisation,
//! then release the output and check that memory returns to the baseline.
//!
//! A `Lab` must stay on the thread that created it: libtorch's grad mode, inference mode,
//! autocast state and the CPU memory counter are all thread-local.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
    self, AutocastGuard, CpuMemoryCounter, ExtError, InferenceModeGuard, LowPrecision,
};

/// Settings of the lab that a run cannot change.
#[derive(Clone, Debug)]
pub struct LabConfig {
    /// Default libtorch intra-op threads for runs that do not ask for a number.
    pub threads: u32,
    /// Runs whose allocated memory goes above this fail as out-of-memory, as they would on a
    /// device of that size. `None`: only the device's own limit applies.
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

/// How a running measurement learns that it should stop early.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    pub cancel: Arc<AtomicBool>,
    pub deadline: Option<Instant>,
}

impl RunControl {
    /// Fails with `Cancelled` or `Timeout` when the run should stop now.
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
}

/// The device thread's state. See the module docs.
pub struct Lab {
    machine: Machine,
    counter: CpuMemoryCounter,
    models: Vec<Model>,
    config: LabConfig,
    /// CUDA memory the libraries keep for the life of the process (see
    /// [`prime_cuda_libraries`]): part of the worker's baseline, not a leak.
    cuda_library_bytes: u64,
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
        Ok(Lab {
            machine,
            counter,
            models: Vec::new(),
            config,
            cuda_library_bytes,
        })
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
        let model = catch_torch(|| Model::build(id, tdev, input_size))?;
        self.models.push(model);
        Ok(self.models.len() - 1)
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
                let expected = libraries
                    + self
                        .models
                        .iter()
                        .filter(|m| m.vs.device() == tdev)
                        .map(|m| m.resident_bytes())
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

    /// Measures one run, emitting events as it goes. See the module docs for the method.
    pub fn measure(
        &mut self,
        checked: &CheckedSpec,
        control: &RunControl,
        emit: &mut dyn FnMut(Event),
    ) -> Result<Report, RunFailure> {
        let spec = checked.spec().clone();
        let device = checked.device();
        let threads = spec.threads.unwrap_or(self.config.threads);
        tch::set_num_threads(threads as i32);

        let index = self.model_index(spec.model, device, checked.input_size())?;
        tch::manual_seed(self.config.seed);
        let model = &self.models[index];
        let input =
            catch_torch(|| model.input(spec.batch, checked.input_size(), tch_device(device)))?;
        let meter = self.meter(device);

        synchronize(device)?;
        let baseline = meter.read().map_err(torch_failure)?.allocated;
        meter.reset_peak().map_err(torch_failure)?;
        emit(Event::Started {
            device_name: self.machine.stamp(device, threads).device_name,
            baseline_bytes: baseline,
            memory_source: meter.source(),
            total: spec.warmup + spec.iters,
        });

        let limit = self.config.memory_limit_bytes;
        let mut warmup = Vec::with_capacity(spec.warmup as usize);
        for i in 0..spec.warmup {
            control.check()?;
            let (sample, out, _) = timed_forward(model, &input, &spec, device, &meter, i, limit)?;
            drop(out);
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
        let after_release = meter.read().map_err(torch_failure)?.allocated;
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
            },
            output,
            warmup,
            samples,
        })
    }
}

/// cuBLAS and cuBLASLt keep a workspace per stream that PyTorch allocates through its
/// caching allocator at the first matmul and holds until the process ends. Making those
/// first matmuls here, once, before any run keeps the workspaces out of every run's
/// baseline-to-release difference (a first run would otherwise look like a leak) and gives
/// the worker's leak check their size. Returns the CUDA bytes allocated afterwards, with
/// nothing else alive.
fn prime_cuda_libraries() -> u64 {
    let device = Device::Cuda(0);
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
    let held = held.unwrap_or(0);
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
