//! The lab bench: the state that lives on the device thread — the machine's facts, the
//! CPU memory counter, the model cache ([`Lab::model_index`]), the leak check run after every
//! task ([`Lab::memory_checks`]) and the CUDA libraries primed at start-up — and [`LabConfig`],
//! the settings a run cannot change. The rest of the bench, by concern:
//!
//! - `measure`: one run's measurement ([`Lab::measure`], [`timed_forward`]), by the method
//!   docs/ARCHITECTURE.md ("The measurement method") states.
//! - `forward`: the one forward pass under a spec's settings ([`forward`], and
//!   [`traced_pass`], the pass with a recording probe).
//! - `control`: what every task may use and when it stops ([`RunControl`], [`Lab::with_task`],
//!   the run guard of [`Lab::guard`]).
//! - `admission`: memory budgets ([`Budget`]), profiles and the up-front refusal of runs
//!   predicted not to fit ([`Lab::admit`], [`refusal`]).
//! - `cuda_graph`: CUDA graph capture and replay for runs that ask for it.
//! - `generate`: a generate run's loop (prefill, then one decode step per token).
//! - `advanced`: the advanced settings' conversions (weights dtype, memory format, where
//!   the input starts) and the CUDA math switches around a pass.
//!
//! A `Lab` must stay on the thread that created it: libtorch's grad mode, inference mode,
//! autocast state and the CPU memory counter are all thread-local.

mod admission;
mod advanced;
pub(crate) mod compiled;
mod subprocess;
pub use subprocess::{run_python, run_python_reporting};
pub use compiled::cache_dir as compiled_cache_dir;
mod control;
pub mod cuda_graph;
pub mod decoder_figures;
mod drift;
mod forward;
pub mod generate;
mod measure;
mod quality;

use protocol::{DeviceKind, MemoryReport, ModelId, RunFailure};
use tch::{Device, Kind, Tensor};

use crate::device::{Machine, Meter};
use crate::models::Model;
use crate::peak::Precision;
use crate::torch_ext::{self, CpuMemoryCounter, ExtError};

use admission::budgets;
pub use admission::{
    decoder_footprint, decoder_refusal, known_profile, prefill_backend, Footprint, profile_key, refusal, Budget, Profile, ProfileKey, Profiles,
    CPU_BUDGET_FRACTION, PREDICTION_MARGIN, PROBE_BATCH,
};
pub use advanced::{
    backend_guard, convert_model, is_channels_last, kind_of, make_input, parameter_bytes,
    place_input, to_channels_last,
};
pub use control::RunControl;
pub use forward::{forward, forward_probed, traced_pass};
pub use measure::timed_forward;
pub use quality::{quality_plan, quantized};

// The libtorch helpers this module and its files use (they live in the leaf `torch_call`).
use crate::torch_call::{catch_torch, synchronize, tch_device, torch_failure};

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
    /// The text a tokenized decoder's quality is measured on (`--quality-text`); `None`: the
    /// trained model's held-out slice.
    pub quality_text: Option<std::path::PathBuf>,
    /// The Python with PyTorch that exports and compiles a compiled run's model
    /// (`advanced.compiled`); `None`: such a run is refused, saying so.
    pub python: Option<std::path::PathBuf>,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig {
            threads: default_threads(),
            memory_limit_bytes: None,
            seed: 0,
            model_cache: 3,
            quality_text: None,
            python: None,
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

/// The device thread's state. See the module docs.
pub struct Lab {
    machine: Machine,
    counter: CpuMemoryCounter,
    models: Vec<Model>,
    config: LabConfig,
    /// CUDA memory the libraries keep for the life of the process (see
    /// [`prime_cuda_libraries`]): part of the worker's own holdings, not a leak.
    cuda_library_bytes: u64,
    /// What each device's meter read when the lab had started (the CUDA libraries
    /// primed): the leak check compares what the meter reads after a task with this, plus
    /// the cached models. On CUDA the meter reads the whole process (another lab's models,
    /// the workspaces of threads that have ended), so only a difference inside this lab
    /// says what this lab holds; on the CPU it reads this thread's allocations.
    held_at_start: [u64; 2],
    cpu_budget: Budget,
    cuda_budget: Option<Budget>,
    profiles: Profiles,
    /// The control of the task under way (set by the worker): every measurement inside the
    /// task obeys its deadline, budget and cancel flag.
    task: Option<RunControl>,
    /// Device peaks per (device, precision, threads): from the datasheet or measured once.
    peaks: std::collections::HashMap<(DeviceKind, Precision, u32), Option<protocol::DevicePeak>>,
    /// Set only for the length of [`Lab::measure_autocast_per_step`].
    autocast_per_step: bool,
    /// The medians of the runs this device thread measured (and those recorded before it
    /// started): this server's run-to-run noise, stamped on every run it finishes.
    noise: protocol::noise::NoiseBook,
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
        let held_at_start = [
            Meter::Cpu(&counter).read().map(|r| r.allocated).unwrap_or(0),
            match machine.has_cuda() {
                true => held(&Meter::Cuda { index: 0 }, DeviceKind::Cuda).unwrap_or(0),
                false => 0,
            },
        ];
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
            held_at_start,
            cpu_budget,
            cuda_budget,
            profiles: Profiles::default(),
            task: None,
            peaks: Default::default(),
            autocast_per_step: false,
            noise: Default::default(),
        })
    }

    /// A run that finished: stamps it with this server's run-to-run noise for runs like it
    /// (measured from the runs before it, so a run never vouches for itself), then keeps
    /// its median for the runs after it.
    pub fn note_run(&mut self, report: &mut protocol::Report) {
        report.run_to_run = self.noise.floor(report);
        self.noise.add(report);
    }

    /// Runs this server recorded before the worker started, oldest first: their repeats
    /// count towards the run-to-run noise from the first run on.
    pub fn remember_runs<'a>(&mut self, reports: impl IntoIterator<Item = &'a protocol::Report>) {
        for r in reports {
            self.noise.add(r);
        }
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

    /// The cached model for this run (fp32, contiguous), built if needed. Returns its
    /// index in the cache.
    pub fn model_index(
        &mut self,
        id: ModelId,
        device: DeviceKind,
        input_size: u32,
    ) -> Result<usize, RunFailure> {
        self.model_index_as(id, device, input_size, &protocol::Advanced::default())
    }

    /// The cached model with the weights' dtype and memory format `adv` asks for, built
    /// (and converted once) if needed.
    pub fn model_index_as(
        &mut self,
        id: ModelId,
        device: DeviceKind,
        input_size: u32,
        adv: &protocol::Advanced,
    ) -> Result<usize, RunFailure> {
        self.model_index_quant(id, device, input_size, adv, protocol::LinearQuant::NONE)
    }

    /// [`Lab::model_index_as`], a decoder's linear layers quantized as `quant` says (once,
    /// after building: a team decoder's checkpoint is loaded, then quantized).
    pub fn model_index_quant(
        &mut self,
        id: ModelId,
        device: DeviceKind,
        input_size: u32,
        adv: &protocol::Advanced,
        quant: protocol::LinearQuant,
    ) -> Result<usize, RunFailure> {
        let tdev = tch_device(device);
        if let Some(i) = self.models.iter().position(|m| {
            m.id == id
                && m.vs.device() == tdev
                && m.fits(input_size)
                && m.weights == adv.weights
                && m.format == adv.memory_format
                && m.quant == quant
        }) {
            // Most recently used goes last; eviction takes from the front.
            let m = self.models.remove(i);
            if !matches!(id, ModelId::Team(_)) {
                self.models.push(m);
                return Ok(self.models.len() - 1);
            }
            // A TorchScript module's graph executor specialises its plan on the passes it
            // has run (after grad-mode passes an inference_mode pass trips on the autodiff
            // subgraphs left behind): a team model is loaded afresh each time, as a new
            // Python process would (`torch.jit.load`), so no run depends on the ones before
            // it. The old copy goes first, so the two never share the budget.
            drop(m);
        }
        while self.models.len() >= self.config.model_cache.max(1) {
            self.models.remove(0);
        }
        tch::manual_seed(self.config.seed);
        let meter = self.meter(device);
        let before = held(&meter, device)?;
        let mut model = catch_torch(|| Model::build_in(id, tdev, input_size, adv.weights))?;
        convert_model(&mut model, adv.weights, adv.memory_format)?;
        catch_torch(|| model.quantize(quant))?;
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
    /// what the lab started with (on CUDA the whole process's, the libraries' workspaces
    /// primed) plus exactly the cached models' weights and buffers. Anything above is
    /// memory a run left behind.
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
                // A difference inside this lab: what the meter read once the lab had started
                // (on CUDA the whole process's, the libraries' workspaces included, whatever
                // other labs or ended threads left), then each model counts what building it
                // added to the meter (on CUDA whole blocks, as the meter reads them), not
                // its element bytes.
                let start = self.held_at_start[usize::from(device == DeviceKind::Cuda)];
                let expected = start
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

    /// The device's peak for `precision`: a known GPU's datasheet, otherwise measured once
    /// (with `threads` intra-op threads on the CPU) and cached. `None` if it cannot be had.
    pub fn device_peak(
        &mut self,
        device: DeviceKind,
        precision: Precision,
        threads: u32,
    ) -> Option<protocol::DevicePeak> {
        let threads = if device == DeviceKind::Cpu {
            threads
        } else {
            0
        };
        if let Some(peak) = self.peaks.get(&(device, precision, threads)) {
            return peak.clone();
        }
        let sheet = match (device, &self.machine.cuda) {
            (DeviceKind::Cuda, Some(cuda)) => crate::peak::datasheet_peak(&cuda.name, precision),
            _ => None,
        };
        let peak = sheet.or_else(|| {
            if device == DeviceKind::Cpu {
                tch::set_num_threads(threads.max(1) as i32);
            }
            crate::peak::measure_peak(device, precision)
        });
        self.peaks
            .insert((device, precision, threads), peak.clone());
        peak
    }

    /// Puts `device` in the one state every pitfall experiment starts from, so a card gives
    /// the same figures wherever it sits in a tour: no cached model (the models of earlier
    /// cards would hold memory, and a cached model's earlier passes could decide which
    /// kernels this one's first pass finds ready), the CUDA caching allocator's unused
    /// blocks given back (its reserved pool would otherwise be the tour's high-water mark),
    /// the queued work done, and the peak counters reset.
    pub fn fresh_state(&mut self, device: DeviceKind) -> Result<(), RunFailure> {
        self.models.clear();
        synchronize(device)?;
        if device == DeviceKind::Cuda {
            torch_ext::cuda_empty_cache().map_err(torch_failure)?;
        }
        self.meter(device).reset_peak().map_err(torch_failure)
    }

    /// Drops every cached model (used when a device runs out of memory).
    pub fn clear_models(&mut self) {
        self.models.clear();
    }
}

/// What the meter counts as allocated on `device` now, after the device's queued work.
fn held(meter: &Meter<'_>, device: DeviceKind) -> Result<u64, RunFailure> {
    synchronize(device)?;
    Ok(meter.read().map_err(torch_failure)?.allocated)
}

/// A report's memory section from what the run read (a forward run's and a generation's
/// alike): the figures above the baseline and the leak follow from the readings.
fn memory_report(
    meter: &Meter<'_>,
    baseline: u64,
    peak_allocated: u64,
    peak_reserved: Option<u64>,
    after_release: u64,
    device_used: Option<u64>,
    other: u64,
) -> MemoryReport {
    MemoryReport {
        source: meter.source(),
        baseline_bytes: baseline,
        peak_allocated_bytes: peak_allocated,
        peak_above_baseline_bytes: peak_allocated.saturating_sub(baseline),
        peak_reserved_bytes: peak_reserved,
        after_release_bytes: after_release,
        leaked_bytes: after_release.saturating_sub(baseline),
        device_used_bytes: device_used,
        other_held_bytes: Some(other),
    }
}

/// cuBLAS and cuBLASLt keep a workspace per stream that PyTorch allocates through its
/// caching allocator at the first matmul and holds until the process ends. Making those
/// first matmuls here, once, on the default stream and on the CUDA graphs' side stream,
/// before any run keeps the workspaces out of every run's
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
    let prime = || {
        for kind in [Kind::Float, Kind::Half, Kind::BFloat16] {
            // A plain matmul (cuBLAS) and one with a bias (the cuBLASLt epilogue path). A
            // dtype the GPU cannot multiply is skipped: runs in it fail on their own terms.
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
    };
    // The default stream, then the side stream every CUDA graph capture uses: cuBLAS keeps
    // one workspace per (handle, stream), so a capture's warm-up there would otherwise make
    // one (about 32 MiB on sm_90) that outlives the run and reads as its leak.
    prime();
    match torch_ext::SideStream::enter(0) {
        Ok(side) => {
            prime();
            drop(side);
        }
        Err(e) => tracing::info!("CUDA graphs' side stream not primed: {e}"),
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

#[cfg(test)]
mod leak_check_tests {
    use super::*;

    /// Issue 54: the worker's leak check compared what the meter reads (on CUDA the whole
    /// process's allocations) with one lab's priming delta and its models, so anything the
    /// process held before the lab started (another worker's models, the workspaces of a
    /// thread that had ended) read as this lab's leak. It is now a difference inside the
    /// lab. The CPU shows the same with memory its thread held before the lab started.
    #[test]
    fn the_leak_check_counts_what_the_lab_started_with() {
        std::thread::spawn(|| {
            let counter = CpuMemoryCounter::install().unwrap();
            // Held by this thread before the lab starts (and after: it is not the lab's).
            let before = Tensor::ones([1 << 16], (Kind::Float, Device::Cpu));
            assert!(counter.read().unwrap().current >= (1 << 18));
            let mut lab = Lab::new(LabConfig::default()).unwrap();
            let cpu = |lab: &Lab| lab.memory_checks().into_iter().find(|c| c.device == DeviceKind::Cpu).unwrap();
            let c = cpu(&lab);
            assert!(c.ok, "{c:?}");
            assert!(c.expected_bytes >= 1 << 18, "{c:?}");
            // A cached model is expected; a tensor a task leaves behind is not.
            lab.model_index(ModelId::TinyMlp, DeviceKind::Cpu, 64).unwrap();
            assert!(cpu(&lab).ok, "{:?}", cpu(&lab));
            let left = Tensor::ones([1024], (Kind::Float, Device::Cpu));
            let c = cpu(&lab);
            assert!(!c.ok && c.held_bytes >= c.expected_bytes + 4096, "{c:?}");
            drop(left);
            assert!(cpu(&lab).ok);
            drop(before);
        })
        .join()
        .unwrap();
    }
}
