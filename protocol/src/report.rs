//! What a finished run reports: latency statistics, memory figures with their source,
//! the output's facts and the environment it was measured in.

use serde::{Deserialize, Serialize};

use crate::*;

/// Where memory figures come from. Every report names it, because the two differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MemorySource {
    /// libtorch's own allocation reporting on the measuring thread: bytes held by CPU tensors.
    CpuTensorMemory,
    /// The CUDA caching allocator's statistics (what `torch.cuda.memory_allocated` reads).
    CudaCachingAllocator,
}

impl MemorySource {
    /// A few words, for tables.
    pub fn short(self) -> &'static str {
        match self {
            MemorySource::CpuTensorMemory => "CPU tensor memory",
            MemorySource::CudaCachingAllocator => "CUDA caching allocator",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            MemorySource::CpuTensorMemory => {
                "CPU tensor memory, from libtorch's allocation reporting on the measuring thread"
            }
            MemorySource::CudaCachingAllocator => {
                "CUDA caching allocator statistics (torch.cuda.memory_allocated / memory_reserved)"
            }
        }
    }
}

/// One iteration's measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sample {
    /// 0-based within its phase (warm-up or timed).
    pub iteration: u32,
    pub latency_ms: f64,
    /// Bytes allocated right after the forward pass, output (and graph) still alive.
    pub allocated_bytes: u64,
    /// Highest bytes allocated during this forward pass (activations and workspace included).
    pub peak_bytes: u64,
    /// Bytes the caching allocator holds; `None` where there is no such pool (CPU).
    pub reserved_bytes: Option<u64>,
}

/// Latency statistics in milliseconds over the timed iterations only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LatencyStats {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub stddev: f64,
    /// Interquartile range (p75 − p25), torch.utils.benchmark's measure of noise; `None`
    /// with fewer than 4 samples, and in reports recorded before it existed (then
    /// [`Report::relative_iqr`] reads it from the samples).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iqr: Option<f64>,
}

/// Memory figures in bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryReport {
    pub source: MemorySource,
    /// Allocated with the weights and the input alive, before the first forward pass.
    pub baseline_bytes: u64,
    /// Highest allocated during the timed iterations.
    pub peak_allocated_bytes: u64,
    /// `peak_allocated_bytes - baseline_bytes`: activations, graph and workspace.
    pub peak_above_baseline_bytes: u64,
    /// Highest reserved by the caching allocator; `None` on the CPU, which has no pool.
    pub peak_reserved_bytes: Option<u64>,
    /// Allocated after the last output was dropped. Equals the baseline unless memory leaked.
    pub after_release_bytes: u64,
    /// `after_release_bytes - baseline_bytes` when positive: memory the run failed to give back.
    pub leaked_bytes: u64,
    /// Device memory in use as the driver sees it (includes the CUDA context); `None` where
    /// it cannot be read.
    pub device_used_bytes: Option<u64>,
    /// Allocated on the device at the baseline for anything but this run's weights and
    /// input (the worker's other cached models, the CUDA libraries' workspaces). Left out of
    /// every figure above, so the same spec reads the same whatever ran before it. `None` in
    /// reports recorded before this figure existed.
    #[serde(default)]
    pub other_held_bytes: Option<u64>,
}

/// Facts about the model's output, for the lessons that depend on them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutputFacts {
    pub dtype: String,
    pub shape: Vec<i64>,
    pub is_inference: bool,
    pub requires_grad: bool,
}

/// The hardware and software a report was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnvStamp {
    pub device: DeviceKind,
    pub device_name: String,
    pub device_total_memory_bytes: Option<u64>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub cudnn_version: Option<String>,
    pub libtorch_version: String,
    pub cpu_model: String,
    /// libtorch intra-op threads during the run.
    pub threads: u32,
    /// RFC 3339, UTC.
    pub measured_at: String,
    pub gradless_version: String,
    /// The fleet worker that measured it (`NAME on HOST`); absent from a single server's
    /// results, where the server is the only measurer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// CPU cores the measuring process could use (`std::thread::available_parallelism`:
    /// its affinity and cgroup quota applied); absent from reports older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<u32>,
}

impl EnvStamp {
    /// The device as a page names it: `NVIDIA H200 (cuda)`, with the fleet worker when
    /// there is one (`… · worker gpu-host-3 on node7`), so two hosts with the same GPU
    /// stay apart side by side.
    pub fn device_label(&self) -> String {
        let device = format!("{} ({})", self.device_name, self.device.as_str());
        match &self.worker {
            Some(w) => format!("{device} · worker {w}"),
            None => device,
        }
    }
}

/// Everything a finished run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Report {
    /// The spec as run: `device` and `input_size` resolved.
    pub spec: RunSpec,
    pub env: EnvStamp,
    pub latency_ms: LatencyStats,
    /// Samples per second at the mean latency.
    pub throughput_per_s: f64,
    pub memory: MemoryReport,
    pub output: OutputFacts,
    pub warmup: Vec<Sample>,
    pub samples: Vec<Sample>,
    /// One extra traced forward pass after the timed iterations (never in the statistics):
    /// the state at every module boundary, in execution order. Empty in reports recorded
    /// before tracing existed.
    #[serde(default)]
    pub trace: Vec<TracePoint>,
    /// FLOPs of one forward pass at the run's batch (the sum over the trace), a multiply-add
    /// counting as 2.
    #[serde(default)]
    pub flops: Option<u64>,
    /// `flops / p50 latency`, in TFLOP/s.
    #[serde(default)]
    pub achieved_tflops: Option<f64>,
    /// `achieved_tflops` as a percentage of the device's peak for the run's dtype.
    #[serde(default)]
    pub percent_of_peak: Option<f64>,
    /// Where the peak comes from (a named datasheet, or a matmul measured at worker start).
    #[serde(default)]
    pub peak_source: Option<String>,
    /// The device's peak and the run's estimated arithmetic intensity.
    #[serde(default)]
    pub roofline: Option<Roofline>,
    /// What the device's memory holds, part by part, each measured.
    #[serde(default)]
    pub memory_breakdown: Option<MemoryBreakdown>,
    /// A generate run's figures. Its `latency_ms` and `samples` are then the decode steps
    /// (per token), its `warmup` the warm-up generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<GenerationReport>,
    /// This server's run-to-run noise for runs like this one (same device, the model's
    /// repeats or the device's) as measured when it finished: what a comparison with another
    /// run is decided against ([`crate::noise`]). Absent before any setting had been run
    /// twice, and in reports recorded before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_to_run: Option<crate::noise::RunToRun>,
    /// A compiled run's (`advanced.compiled`): the compile's cost, and the eager model's
    /// passes and outputs beside the compiled ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled: Option<crate::CompiledFacts>,
}

impl Report {
    /// A caveat that must travel with the figures wherever they go (the Lab, permalinks,
    /// /compare, every export): fp16/bf16 autocast on a CPU measures the CPU's (often
    /// emulated) low-precision path, not what a GPU does.
    pub fn caveat(&self) -> Option<String> {
        (self.spec.autocast != Autocast::Off && self.env.device == DeviceKind::Cpu).then(|| {
            format!(
                "{} autocast ran on a CPU ({}): without native low-precision units it is emulated and usually slower than fp32; its latency says nothing about a GPU.",
                self.spec.autocast.as_str(),
                self.env.cpu_model
            )
        })
    }
}
