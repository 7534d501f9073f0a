//! A forward model compiled ahead of time by AOTInductor (`torch.export` then
//! `torch._inductor.aoti_compile_and_package`, run from libtorch by
//! `AOTIModelPackageLoader`): what compiling it cost and how its passes compare with the
//! eager model's in the same run ([`CompiledFacts`], a report's `compiled`).

use serde::{Deserialize, Serialize};

use crate::{Autocast, InputSource, MemoryFormat, ModelId, RunSpec, WeightsDtype};

/// Why `spec` cannot be compiled here (`advanced.compiled`); `None` when it can, or does
/// not ask to be. Every rule of the setting, in one place: the spec's check refuses with it
/// and the Lab shows it beside the switch.
pub fn compiled_refusal(spec: &RunSpec) -> Option<String> {
    let a = &spec.advanced;
    if !a.compiled {
        return None;
    }
    let model = spec.model;
    match model {
        ModelId::TinyMlp | ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 | ModelId::Transformer => {}
        ModelId::Team(m) if m.sidecar.source.is_some() => {}
        _ => return Some(format!("{model} cannot be compiled here: AOTInductor compiles the built-in forward models and team models whose sidecar names their Python `source` (bench/export_model.py writes it)")),
    }
    if a.weights != WeightsDtype::Fp32 || a.memory_format != MemoryFormat::Contiguous || a.cuda_graph || a.input_source != InputSource::Device {
        return Some("a compiled model runs as it was exported: fp32 weights, contiguous, input on the device, no CUDA graph of Gradless's around it".into());
    }
    if spec.generate.is_some() {
        return Some("a generation is not compiled here: AOTInductor compiles the forward models' single pass (the Lab)".into());
    }
    if !spec.eval {
        return Some("eval() is baked into a compiled model when it is exported (Dropout off, BatchNorm's running statistics): turn eval on".into());
    }
    if spec.autocast != Autocast::Off {
        return Some("a compiled model is measured here without autocast: its graph is exported in fp32, and an autocast region around the package's call is not a setting Gradless measures: turn autocast off".into());
    }
    None
}

/// What a compiled run measured beside its passes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompiledFacts {
    /// The package's file name in the server's cache (`<key>.pt2`; the key hashes the model,
    /// its weights, dtype, device, batch range, threads, PyTorch's version and the options).
    pub package: String,
    pub package_bytes: u64,
    /// Whether the package came from the cache (its compile times are then those measured
    /// when it was compiled).
    pub cached: bool,
    /// `torch.export.export` of the model with a dynamic batch dimension, in the venv's
    /// Python.
    pub export_ms: f64,
    /// `aoti_compile_and_package`: Inductor's lowering and the C++ (or Triton) build.
    pub compile_ms: f64,
    /// The C++ compiles and links within `compile_ms` (Inductor's `CppBuilder`: the
    /// wrapper, the CPU kernels, the shared library); the rest is Inductor's lowering and
    /// code generation, with Triton's kernel compiles on a GPU. 0 in records made before it
    /// was measured.
    #[serde(default)]
    pub build_ms: f64,
    /// The Python process as a whole (interpreter and imports included): what the first
    /// compiled call waits for.
    pub subprocess_ms: f64,
    /// Loading the package into this process (unpacking it, opening its shared library).
    pub load_ms: f64,
    /// The batch range the package was exported for; a batch outside it is refused before
    /// it reaches the package, which checks none of its inputs.
    pub batch_min: u32,
    pub batch_max: u32,
    /// The eager model's passes in the same run, same input and settings: median and count.
    pub eager_p50_ms: f64,
    pub eager_iters: u32,
    /// The eager passes' highest allocated memory above the baseline (weights + input), as
    /// the run's own memory source counts it: beside the compiled passes' (the report's
    /// `memory.peak_above_baseline_bytes`).
    #[serde(default)]
    pub eager_peak_above_baseline_bytes: u64,
    /// Largest |compiled − eager| over the output, and whether they are equal bit for bit.
    pub max_abs_diff: f64,
    pub bitwise_equal: bool,
    /// The passes after which compiling has paid for itself
    /// (`(export + compile + load) / (eager p50 − compiled p50)`); `None` when the compiled
    /// pass is not faster.
    pub break_even_passes: Option<f64>,
    /// The PyTorch that compiled it (the venv's), and how many threads its CPU kernels were
    /// built for (Inductor writes the count into them).
    pub torch_version: String,
    pub threads: u32,
    /// On CUDA, how much the driver's count of device memory in use grew while the package
    /// loaded: AOTInductor allocates the package's constants (its own copy of the weights)
    /// with its own `cudaMalloc`, outside PyTorch's caching allocator, so no
    /// `memory_allocated` figure of the run holds them. `None` on the CPU (the package's
    /// constants are tensors there, and a run's memory figures leave them out like another
    /// cached model's) and in records made before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_device_bytes: Option<u64>,
}

/// The batch range a run's package is exported for: 1 to the next power of two from the
/// run's batch, at least 64 (one package serves the batches a page offers). The snippet
/// exports the same range.
pub fn compiled_batch_range(batch: u32) -> (u32, u32) {
    (1, batch.max(64).next_power_of_two())
}
