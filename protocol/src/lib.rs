//! The vocabulary every part of Gradless speaks: what a run asks for ([`RunSpec`]), what it
//! streams while it runs ([`Event`]) and what it reports at the end ([`Report`]).
//!
//! This crate is compiled for the browser (WASM) as well as for the server, so it holds
//! plain data and pure functions only: no libtorch, no I/O. Structural validation of a
//! spec lives here so that the browser and the server give the same message for the
//! same mistake; checks that need the device (is there a GPU? can it do bf16?) live in
//! the engine.

use serde::{Deserialize, Serialize};
use std::fmt;

mod pitfall;
mod python;
mod record;
pub use pitfall::{
    ChartKind, Figure, PitfallInfo, PitfallOptions, PitfallReport, Series, Table, Verdict,
    BUDGET_PRESETS, DEFAULT_CPU_BUDGET_BYTES, DEFAULT_CUDA_BUDGET_BYTES,
};
pub use python::python_snippet;
pub use record::{is_record_id, Record, RecordBody, RecordKind, RecordSummary};

/// The models a run can use. Weights are random: weights do not change memory or latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelId {
    /// A three-layer MLP with BatchNorm and Dropout: the fast CPU default.
    TinyMlp,
    /// torchvision's ResNet-18 architecture (BatchNorm, no Dropout).
    Resnet18,
    /// torchvision's ResNet-50 architecture (BatchNorm, no Dropout).
    Resnet50,
    /// torchvision's MobileNet-V2 architecture (BatchNorm and one Dropout).
    MobilenetV2,
    /// A small transformer encoder with Dropout and LayerNorm.
    Transformer,
}

impl ModelId {
    pub const ALL: [ModelId; 5] = [
        ModelId::TinyMlp,
        ModelId::Resnet18,
        ModelId::Resnet50,
        ModelId::MobilenetV2,
        ModelId::Transformer,
    ];

    /// The identifier used in JSON, URLs and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelId::TinyMlp => "tiny_mlp",
            ModelId::Resnet18 => "resnet18",
            ModelId::Resnet50 => "resnet50",
            ModelId::MobilenetV2 => "mobilenet_v2",
            ModelId::Transformer => "transformer",
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            ModelId::TinyMlp => "Tiny MLP (BatchNorm + Dropout)",
            ModelId::Resnet18 => "ResNet-18",
            ModelId::Resnet50 => "ResNet-50",
            ModelId::MobilenetV2 => "MobileNet-V2",
            ModelId::Transformer => "Transformer encoder (Dropout + LayerNorm)",
        }
    }

    /// What `input_size` means for this model, and its default.
    pub fn input(self) -> InputShape {
        match self {
            ModelId::TinyMlp => InputShape {
                meaning: "features per sample",
                default: 512,
                max: 65_536,
            },
            ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 => InputShape {
                meaning: "image side in pixels (3×N×N)",
                default: 224,
                max: 1024,
            },
            ModelId::Transformer => InputShape {
                meaning: "sequence length in tokens",
                default: 128,
                max: 4096,
            },
        }
    }

    pub fn has_dropout(self) -> bool {
        matches!(
            self,
            ModelId::TinyMlp | ModelId::MobilenetV2 | ModelId::Transformer
        )
    }

    pub fn has_batchnorm(self) -> bool {
        !matches!(self, ModelId::Transformer)
    }

    /// The PyTorch expression that builds the same architecture, for snippets and peers.
    pub fn python_constructor(self) -> &'static str {
        match self {
            // The same layers as the engine's tiny MLP (engine/src/models.rs), so the snippet
            // runs as copied.
            ModelId::TinyMlp => "nn.Sequential(\n    nn.Linear(features, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),\n    nn.Linear(512, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Dropout(0.5),\n    nn.Linear(512, 10),\n)",
            ModelId::Resnet18 => "torchvision.models.resnet18()",
            ModelId::Resnet50 => "torchvision.models.resnet50()",
            ModelId::MobilenetV2 => "torchvision.models.mobilenet_v2()",
            // PyTorch's own layer, configured like the engine's encoder (which writes the same
            // layer out op by op, as bench/peer.py's EncoderLayer does).
            ModelId::Transformer => "nn.TransformerEncoder(\n    nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True),\n    num_layers=4,\n    enable_nested_tensor=False,\n)",
        }
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ModelId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ModelId::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<_> = ModelId::ALL.iter().map(|m| m.as_str()).collect();
                format!("unknown model `{s}`; known models: {}", known.join(", "))
            })
    }
}

/// The meaning, default and upper bound of a model's `input_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputShape {
    pub meaning: &'static str,
    pub default: u32,
    pub max: u32,
}

/// Which device a run asks for. `auto` means CUDA when the server has it, else the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceChoice {
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl DeviceChoice {
    /// The device this choice runs on, on a server with or without CUDA; `None` when it
    /// asks for CUDA where there is none. The one place `auto` is resolved.
    pub fn resolve(self, has_cuda: bool) -> Option<DeviceKind> {
        match self {
            DeviceChoice::Cpu => Some(DeviceKind::Cpu),
            DeviceChoice::Cuda | DeviceChoice::Auto if has_cuda => Some(DeviceKind::Cuda),
            DeviceChoice::Cuda => None,
            DeviceChoice::Auto => Some(DeviceKind::Cpu),
        }
    }
}

/// The device a run actually used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

impl DeviceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
        }
    }
}

/// How autograd is configured around the forward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradMode {
    /// PyTorch's default: every op on a tensor that requires grad records the graph.
    #[default]
    Enabled,
    /// `with torch.no_grad():`
    NoGrad,
    /// `with torch.inference_mode():`
    InferenceMode,
}

impl GradMode {
    pub const ALL: [GradMode; 3] = [GradMode::Enabled, GradMode::NoGrad, GradMode::InferenceMode];
    pub fn as_str(self) -> &'static str {
        match self {
            GradMode::Enabled => "enabled",
            GradMode::NoGrad => "no_grad",
            GradMode::InferenceMode => "inference_mode",
        }
    }
}

/// Automatic mixed precision around the forward pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Autocast {
    #[default]
    Off,
    Fp16,
    Bf16,
}

impl Autocast {
    pub const ALL: [Autocast; 3] = [Autocast::Off, Autocast::Fp16, Autocast::Bf16];
    pub fn as_str(self) -> &'static str {
        match self {
            Autocast::Off => "off",
            Autocast::Fp16 => "fp16",
            Autocast::Bf16 => "bf16",
        }
    }
}

macro_rules! from_str_via_all {
    ($t:ty, $what:literal) => {
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                <$t>::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| {
                        let known: Vec<_> = <$t>::ALL.iter().map(|v| v.as_str()).collect();
                        format!(
                            concat!("unknown ", $what, " `{}`; expected one of: {}"),
                            s,
                            known.join(", ")
                        )
                    })
            }
        }
    };
}
from_str_via_all!(GradMode, "grad mode");
from_str_via_all!(Autocast, "autocast setting");

impl std::str::FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda),
            _ => Err(format!(
                "unknown device `{s}`; expected one of: auto, cpu, cuda"
            )),
        }
    }
}

/// One measurement request. Every field has a default, so `{}` is a valid spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    pub model: ModelId,
    pub device: DeviceChoice,
    /// Samples per forward pass.
    pub batch: u32,
    /// Model-specific size of one sample (see [`ModelId::input`]); `None` takes the default.
    pub input_size: Option<u32>,
    /// `model.eval()` when true, `model.train()` when false.
    pub eval: bool,
    pub grad: GradMode,
    pub autocast: Autocast,
    /// Iterations run before timing starts; reported apart, never in the statistics.
    pub warmup: u32,
    /// Timed iterations.
    pub iters: u32,
    /// CPU threads for libtorch's intra-op pool; `None` keeps the server's setting.
    pub threads: Option<u32>,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            model: ModelId::TinyMlp,
            device: DeviceChoice::Auto,
            batch: 32,
            input_size: None,
            eval: true,
            grad: GradMode::Enabled,
            autocast: Autocast::Off,
            warmup: 3,
            iters: 20,
            threads: None,
        }
    }
}

/// Server-side bounds on a spec; the browser receives them to validate before sending.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_batch: u32,
    pub max_warmup: u32,
    pub max_iters: u32,
    pub max_threads: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_batch: 4096,
            max_warmup: 100,
            max_iters: 1000,
            max_threads: 256,
        }
    }
}

/// A spec that breaks a rule, with the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for SpecError {}

impl RunSpec {
    /// The input size this spec will use.
    pub fn resolved_input_size(&self) -> u32 {
        self.input_size.unwrap_or(self.model.input().default)
    }

    /// Checks the rules that need no device. The engine adds the device-dependent ones.
    pub fn check(&self, limits: &Limits) -> Result<(), SpecError> {
        let err = |field: &str, message: String| {
            Err(SpecError {
                field: field.into(),
                message,
            })
        };
        if self.batch == 0 {
            return err("batch", "batch must be at least 1".into());
        }
        if self.batch > limits.max_batch {
            return err(
                "batch",
                format!(
                    "batch {} is above this server's limit of {}",
                    self.batch, limits.max_batch
                ),
            );
        }
        if let Some(size) = self.input_size {
            let shape = self.model.input();
            let min = if matches!(
                self.model,
                ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2
            ) {
                32
            } else {
                1
            };
            if size < min || size > shape.max {
                return err(
                    "input_size",
                    format!(
                        "input_size {size} is out of range for {} ({}): allowed {min}..={}",
                        self.model, shape.meaning, shape.max
                    ),
                );
            }
        }
        if self.iters == 0 {
            return err("iters", "at least one timed iteration is needed".into());
        }
        if self.iters > limits.max_iters {
            return err(
                "iters",
                format!(
                    "iters {} is above the limit of {}",
                    self.iters, limits.max_iters
                ),
            );
        }
        if self.warmup > limits.max_warmup {
            return err(
                "warmup",
                format!(
                    "warmup {} is above the limit of {}",
                    self.warmup, limits.max_warmup
                ),
            );
        }
        if let Some(t) = self.threads {
            if t == 0 || t > limits.max_threads {
                return err(
                    "threads",
                    format!("threads must be between 1 and {}", limits.max_threads),
                );
            }
        }
        Ok(())
    }

    /// The classic comparison for this spec's model and batch: every combination people
    /// confuse (train+grad, eval+grad, train+no_grad, eval+no_grad, eval+inference_mode),
    /// then eval+no_grad under fp16 and bf16 autocast. Callers drop the rows their device
    /// cannot run.
    pub fn classic_modes(&self) -> Vec<RunSpec> {
        let row = |eval, grad, autocast| RunSpec {
            eval,
            grad,
            autocast,
            ..self.clone()
        };
        vec![
            row(false, GradMode::Enabled, Autocast::Off),
            row(true, GradMode::Enabled, Autocast::Off),
            row(false, GradMode::NoGrad, Autocast::Off),
            row(true, GradMode::NoGrad, Autocast::Off),
            row(true, GradMode::InferenceMode, Autocast::Off),
            row(true, GradMode::NoGrad, Autocast::Fp16),
            row(true, GradMode::NoGrad, Autocast::Bf16),
        ]
    }

    /// A short human label of the settings, e.g. `eval · no_grad · fp16 · batch 32`.
    pub fn label(&self) -> String {
        let mut parts = vec![
            if self.eval { "eval" } else { "train" }.to_string(),
            self.grad.as_str().to_string(),
        ];
        if self.autocast != Autocast::Off {
            parts.push(self.autocast.as_str().to_string());
        }
        parts.push(format!("batch {}", self.batch));
        parts.join(" · ")
    }
}

/// Where memory figures come from. Every report names it, because the two differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
pub struct LatencyStats {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub stddev: f64,
}

/// Memory figures in bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
pub struct OutputFacts {
    pub dtype: String,
    pub shape: Vec<i64>,
    pub is_inference: bool,
    pub requires_grad: bool,
}

/// The hardware and software a report was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

/// Everything a finished run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

/// Why a run ended without a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The device ran out of memory, or the run exceeded the configured memory budget.
    OutOfMemory,
    /// The spec cannot run here (for example CUDA asked for on a machine without a GPU).
    Invalid,
    /// The person who asked for it went away before it ran.
    Cancelled,
    /// It ran past the server's time limit.
    Timeout,
    /// libtorch raised an error.
    Torch,
    /// A bug in Gradless.
    Internal,
    /// It ran, but its record could not be saved (disk full, read-only database): the
    /// message says why. The figures were measured but are not kept.
    Storage,
}

/// A run's failure, readable by a person.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunFailure {
    pub kind: FailureKind,
    pub message: String,
}

/// What a run streams, in order: `queued`* `started` `warmup`* `sample`* then `done` or
/// `failed` (which may come at any point).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Waiting; `position` runs are ahead of this one (0: next).
    Queued {
        position: u32,
    },
    /// The worker has the model and input ready; timing starts.
    Started {
        device_name: String,
        baseline_bytes: u64,
        memory_source: MemorySource,
        total: u32,
    },
    Warmup {
        sample: Sample,
    },
    Sample {
        sample: Sample,
    },
    Done {
        report: Box<Report>,
    },
    Failed {
        failure: RunFailure,
    },
}

impl Event {
    pub fn is_terminal(&self) -> bool {
        matches!(self, Event::Done { .. } | Event::Failed { .. })
    }
}

/// A model as the server offers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub id: ModelId,
    pub name: String,
    pub parameters: u64,
    pub input_meaning: String,
    pub default_input_size: u32,
    pub has_dropout: bool,
    pub has_batchnorm: bool,
}

/// A device the server can run on, and what it can do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub kind: DeviceKind,
    pub name: String,
    pub total_memory_bytes: Option<u64>,
    /// Autocast settings this device runs, each with a note (empty when fine).
    pub autocast: Vec<AutocastSupport>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutocastSupport {
    pub autocast: Autocast,
    pub supported: bool,
    pub note: String,
}

/// `GET /api/info`: what this server offers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub version: String,
    pub libtorch_version: String,
    pub devices: Vec<DeviceInfo>,
    pub models: Vec<ModelInfo>,
    pub limits: Limits,
    /// The pitfall cards, in guided-tour order.
    #[serde(default)]
    pub pitfalls: Vec<PitfallInfo>,
    /// Starting runs needs an access token (`Authorization: Bearer ...`); reading does not.
    #[serde(default)]
    pub auth_required: bool,
}

/// `GET /api/health`: the device worker's own bookkeeping. After every task the worker
/// checks that the memory it holds on each device is exactly its cached models' weights
/// and buffers: anything more would be a leak, and it is logged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerHealth {
    /// Runs and experiments finished since the worker started.
    pub tasks: u64,
    /// Tasks waiting for the device now.
    pub queued: usize,
    pub memory_checks: u64,
    pub memory_check_failures: u64,
    /// The checks after the last task, one per device.
    pub last_checks: Vec<MemoryCheck>,
}

/// One leak check: what the worker holds on a device against what it should.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryCheck {
    pub device: DeviceKind,
    /// Allocated bytes on the device after the task (CPU tensor memory or the CUDA caching
    /// allocator's allocated bytes).
    pub held_bytes: u64,
    /// The cached models' weights and buffers on that device.
    pub expected_bytes: u64,
    pub ok: bool,
}

/// `POST /api/runs` answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunCreated {
    pub id: String,
    pub events_url: String,
    /// A secret only the submitter gets: following `events_url?cancel_token=<it>` makes that
    /// viewer the run's owner, whose leaving cancels the run while it still waits. Nobody
    /// else's viewers can cancel it. Absent from servers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_token: Option<String>,
}

/// Every API error body: `{"error": {"code": ..., "message": ..., "field": ...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiErrorBody {
    pub error: ApiError,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    /// Stable machine-readable code, e.g. `invalid_spec`, `queue_full`, `not_found`.
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub field: Option<String>,
}

/// Human-readable byte counts (binary units), for tables and chart labels.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_json_is_the_default_spec() {
        let spec: RunSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(spec, RunSpec::default());
    }

    #[test]
    fn unknown_fields_and_models_are_rejected_by_name() {
        let e = serde_json::from_str::<RunSpec>(r#"{"batchsize": 3}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("batchsize"), "{e}");
        let e = serde_json::from_str::<RunSpec>(r#"{"model": "resnet9"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("resnet9") && e.contains("resnet18"), "{e}");
    }

    #[test]
    fn check_names_the_field_at_fault() {
        let limits = Limits::default();
        let cases = [
            (
                RunSpec {
                    batch: 0,
                    ..Default::default()
                },
                "batch",
            ),
            (
                RunSpec {
                    batch: limits.max_batch + 1,
                    ..Default::default()
                },
                "batch",
            ),
            (
                RunSpec {
                    iters: 0,
                    ..Default::default()
                },
                "iters",
            ),
            (
                RunSpec {
                    warmup: limits.max_warmup + 1,
                    ..Default::default()
                },
                "warmup",
            ),
            (
                RunSpec {
                    threads: Some(0),
                    ..Default::default()
                },
                "threads",
            ),
            (
                RunSpec {
                    model: ModelId::Resnet18,
                    input_size: Some(8),
                    ..Default::default()
                },
                "input_size",
            ),
        ];
        for (spec, field) in cases {
            assert_eq!(spec.check(&limits).unwrap_err().field, field, "{spec:?}");
        }
        assert!(RunSpec::default().check(&limits).is_ok());
    }

    #[test]
    fn events_are_tagged_by_type() {
        let json = serde_json::to_value(Event::Queued { position: 2 }).unwrap();
        assert_eq!(json["type"], "queued");
        assert_eq!(json["position"], 2);
    }

    #[test]
    fn parse_round_trips_every_name() {
        for m in ModelId::ALL {
            assert_eq!(m.as_str().parse::<ModelId>().unwrap(), m);
        }
        for g in GradMode::ALL {
            assert_eq!(g.as_str().parse::<GradMode>().unwrap(), g);
        }
        for a in Autocast::ALL {
            assert_eq!(a.as_str().parse::<Autocast>().unwrap(), a);
        }
        assert!("gpu".parse::<DeviceChoice>().is_err());
    }

    #[test]
    fn bytes_format_in_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
