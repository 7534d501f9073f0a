//! A forward model compiled ahead of time (`advanced.compiled`): `torch.export` and
//! AOTInductor (`aoti_compile_and_package`) in the venv's Python, on Gradless's own weights,
//! the package cached on disk and run from libtorch (`crate::torch_ext::AotiPackage`).
//!
//! The Python side is `python/gradless/aoti_compile.py`, run from the sources compiled in
//! (`crate::python_package`, with `-c`): it builds the same architecture as the PyTorch peer
//! does (`gradless.models`), loads the weights Gradless saved (a safetensors file of the
//! run's VarStore, whose variable names are the module's state_dict names), exports it with a
//! dynamic batch dimension and compiles it, timing each part. Inductor writes the CPU thread
//! count into its kernels, so the package is compiled for the run's threads and the cache is
//! keyed by them, as by the model, its weights, the device, the batch range, PyTorch's
//! version and the program (the script and the architectures).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use protocol::{DeviceKind, FailureKind, RunFailure, RunSpec};
use sha2::{Digest, Sha256};

use super::RunControl;
use crate::models::Model;
use crate::torch_call::failure;
use crate::torch_ext::AotiPackage;

/// The compile program, run as `python -c`: `gradless.aoti_compile` and the architectures.
fn program() -> String {
    crate::python_package::program(crate::python_package::Entry::AotiCompile)
}

/// The longest a compile may take, interpreter start and imports included (a ResNet-50 on
/// a busy 2-core CPU takes minutes); it is also kept inside the run's own deadline.
const COMPILE_LIMIT: Duration = Duration::from_secs(540);

/// A loaded package and what compiling it cost.
pub(crate) struct Compiled {
    pub package: AotiPackage,
    pub file: PathBuf,
    pub package_bytes: u64,
    pub cached: bool,
    pub export_ms: f64,
    pub compile_ms: f64,
    /// The C++ build within `compile_ms`.
    pub build_ms: f64,
    pub subprocess_ms: f64,
    pub load_ms: f64,
    pub batch_min: u32,
    pub batch_max: u32,
    pub torch_version: String,
    pub threads: u32,
    /// On CUDA, the driver's device memory in use grown across the load (the package's
    /// constants, which AOTInductor allocates outside the caching allocator).
    pub load_device_bytes: Option<u64>,
}

impl Compiled {
    /// One pass of the package on a run's input, inside the run's grad mode (the package
    /// records no graph whatever the mode; the mode is entered as the eager pass enters it,
    /// so the two differ only in what runs).
    pub fn forward(&self, input: &crate::input::Input, spec: &RunSpec, device: DeviceKind) -> Result<tch::Tensor, RunFailure> {
        let _regions = super::forward::enter_regions(spec, device)?;
        let placed = super::place_input(input, &spec.advanced, device)?;
        self.call_all(placed.tensors())
    }

    /// One call of the package with every positional input (a team model's may be
    /// several), under whatever mode the caller has entered; no check of the shapes against
    /// the exported range (the package makes none either).
    pub fn call_all(&self, xs: &[tch::Tensor]) -> Result<tch::Tensor, RunFailure> {
        let refs: Vec<&tch::Tensor> = xs.iter().collect();
        let out = self.package.run(&refs).map_err(crate::torch_call::torch_failure)?;
        out.into_iter().next().ok_or_else(|| failure(FailureKind::Internal, "the compiled package returned no tensor"))
    }
}

/// What the script reports, and what the cache keeps beside a package.
#[derive(serde::Deserialize, serde::Serialize)]
struct Built {
    export_s: f64,
    compile_s: f64,
    #[serde(default)]
    build_s: f64,
    #[serde(default)]
    subprocess_s: f64,
    torch_version: String,
}

/// Where packages are kept: `$GRADLESS_CACHE/aoti` (`~/.cache/gradless/aoti`).
pub fn cache_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("GRADLESS_CACHE")
        .or_else(|| var("HOME").map(|h| h.join(".cache/gradless")))
        .unwrap_or_else(std::env::temp_dir)
        .join("aoti")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What to compile: a model as a run uses it (its weights, input size and mode), on a
/// device, for the run's threads and a batch range.
pub(crate) struct Job<'a> {
    pub model: &'a Model,
    pub spec: &'a RunSpec,
    pub device: DeviceKind,
    pub threads: u32,
    /// The batches the package is exported for, `(min, max)`: a dynamic batch dimension,
    /// or a static batch when `min == max`.
    pub batches: (u32, u32),
}

impl<'a> Job<'a> {
    /// The package a run of `spec` uses: its batch inside [`protocol::compiled_batch_range`].
    pub fn for_run(model: &'a Model, spec: &'a RunSpec, device: DeviceKind, threads: u32) -> Job<'a> {
        Job { model, spec, device, threads, batches: protocol::compiled_batch_range(spec.batch) }
    }
}

/// The parts of a compile, in order, as the script names each when it begins (its
/// `gradless-phase:` lines; "start" and "load" are the engine's) and as the page says it:
/// a compile takes a minute or more, and the page says which part it is in.
const STAGES: [(&str, &str); 5] = [
    ("start", "starting Python and building the model in PyTorch"),
    ("export", "export (torch.export)"),
    ("inductor", "Inductor (lowering, generating the kernels)"),
    ("c++ build", "C++ build of the kernels"),
    ("load", "loading the package"),
];

/// What a run says while its model compiles (`on`'s arguments: what, parts done, parts).
pub(crate) type OnStage<'a> = &'a mut dyn FnMut(&str, u32, u32);

/// Tells `on` that part `name` of [`STAGES`] begins (a name the script did not list is
/// passed over).
fn stage(on: OnStage, name: &str) {
    if let Some(i) = STAGES.iter().position(|(n, _)| *n == name) {
        on(&format!("Compiling ahead of time (AOTInductor): {}", STAGES[i].1), i as u32, STAGES.len() as u32);
    }
}

/// Compiles `job` (or takes it from the cache) and loads it, with the server's Python.
pub(crate) fn prepare(job: &Job, python: Option<&Path>, control: &RunControl) -> Result<Compiled, RunFailure> {
    prepare_reporting(job, python, control, &mut |_, _, _| {})
}

/// [`prepare`], telling `on` each part of the compile as it begins ([`STAGES`]).
pub(crate) fn prepare_reporting(job: &Job, python: Option<&Path>, control: &RunControl, on: OnStage) -> Result<Compiled, RunFailure> {
    let invalid = |m: String| failure(FailureKind::Invalid, m);
    let python = python.ok_or_else(|| {
        invalid("advanced.compiled: this server has no Python with PyTorch (--python) to export and compile the model with".into())
    })?;
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(|e| failure(FailureKind::Internal, format!("{}: {e}", dir.display())))?;
    // A team model's weights are its TorchScript file's, as served.
    if let protocol::ModelId::Team(team) = job.spec.model {
        let file = team.path.clone()
            .ok_or_else(|| invalid(format!("advanced.compiled: {} is not a team model this process loaded", job.spec.model)))?;
        return prepare_with(job, python, control, &dir, &file, on);
    }
    // The run's weights, as the package will hold them.
    let stamp = format!("{}-{:?}", std::process::id(), std::time::SystemTime::now());
    let weights = dir.join(format!("weights-{:x}.safetensors", Sha256::digest(stamp.as_bytes())));
    job.model.vs.save(&weights).map_err(|e| failure(FailureKind::Internal, format!("saving the weights to compile: {e}")))?;
    let result = prepare_with(job, python, control, &dir, &weights, on);
    let _ = std::fs::remove_file(&weights);
    result
}

fn prepare_with(job: &Job, python: &Path, control: &RunControl, dir: &Path, weights: &Path, on: OnStage) -> Result<Compiled, RunFailure> {
    let internal = |m: String| failure(FailureKind::Internal, m);
    let bytes = std::fs::read(weights).map_err(|e| internal(format!("{}: {e}", weights.display())))?;
    let (batch_min, batch_max) = job.batches;
    let spec = job.spec;
    let input_size = spec.resolved_input_size();
    let key_text = format!(
        "{}|{input_size}|{}|fp32|{batch_min}..{batch_max}|threads {}|libtorch {}|eval {}|program {}|weights {}",
        spec.model,
        job.device.as_str(),
        job.threads,
        crate::device::LIBTORCH_VERSION,
        spec.eval,
        hex(&Sha256::digest(program().as_bytes())),
        hex(&Sha256::digest(&bytes)),
    );
    drop(bytes);
    // A team model's package also depends on its Python definition.
    let key_text = match team_source(job, weights)? {
        Some(t) => format!("{key_text}|source {}|{}|inputs {}", t.source, hex(&Sha256::digest(&t.bytes)), t.inputs),
        None => key_text,
    };
    let key = &hex(&Sha256::digest(key_text.as_bytes()))[..20];
    let file = dir.join(format!("{}-{key}.pt2", spec.model.as_str().replace('/', "_")));
    let meta = file.with_extension("json");
    let cached: Option<Built> = std::fs::read(&meta).ok().filter(|_| file.is_file()).and_then(|m| serde_json::from_slice(&m).ok());
    let (built, cached) = match cached {
        Some(b) => (b, true),
        None => (compile(job, python, control, &file, weights, on)?, false),
    };
    stage(on, "load");
    if !cached {
        let _ = std::fs::write(&meta, serde_json::to_vec(&built).unwrap_or_default());
    }
    // On CUDA the package's constants are allocated by AOTInductor's own cudaMalloc, outside
    // the caching allocator: only the driver's count of memory in use sees them.
    let driver = (job.device == DeviceKind::Cuda).then_some(crate::device::Meter::Cuda { index: 0 });
    let used_before = driver.as_ref().and_then(|m| m.device_used());
    let start = Instant::now();
    let package = AotiPackage::load(&file).map_err(|e| internal(format!("loading the compiled package {}: {e}", file.display())))?;
    let load_ms = start.elapsed().as_secs_f64() * 1000.0;
    let load_device_bytes = match (used_before, driver.as_ref().and_then(|m| m.device_used())) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    Ok(Compiled {
        package,
        package_bytes: std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0),
        file,
        cached,
        export_ms: built.export_s * 1000.0,
        compile_ms: built.compile_s * 1000.0,
        build_ms: built.build_s * 1000.0,
        subprocess_ms: built.subprocess_s * 1000.0,
        load_ms,
        batch_min,
        batch_max,
        torch_version: built.torch_version,
        threads: job.threads,
        load_device_bytes,
    })
}

/// A team model's source, as the compile script takes it: the Python file resolved beside
/// its TorchScript file (or `torchvision:NAME`), and the sidecar's inputs as JSON.
struct TeamSource {
    source: String,
    inputs: String,
    /// The source file's bytes (empty for torchvision), for the cache key.
    bytes: Vec<u8>,
}

fn team_source(job: &Job, weights: &Path) -> Result<Option<TeamSource>, RunFailure> {
    let protocol::ModelId::Team(model) = job.spec.model else { return Ok(None) };
    let name = &model.name;
    let invalid = |m: String| failure(FailureKind::Invalid, m);
    let source = model.sidecar.source.as_deref().ok_or_else(|| invalid(format!("advanced.compiled: {name}'s sidecar names no `source`")))?;
    let inputs = serde_json::to_string(&model.sidecar.inputs).map_err(|e| failure(FailureKind::Internal, e.to_string()))?;
    match protocol::team::module_source(source).map_err(|e| invalid(format!("advanced.compiled: {name}.json: {e}")))? {
        protocol::team::ModuleSource::Torchvision(_) => Ok(Some(TeamSource { source: source.to_string(), inputs, bytes: vec![] })),
        protocol::team::ModuleSource::File { file, name: item } => {
            let dir = weights.parent().unwrap_or(Path::new("."));
            let path = dir.join(file);
            let bytes = std::fs::read(&path).map_err(|e| invalid(format!("advanced.compiled: {name}.json's source {}: {e}", path.display())))?;
            Ok(Some(TeamSource { source: format!("{}:{item}", path.to_string_lossy()), inputs, bytes }))
        }
    }
}

fn compile(job: &Job, python: &Path, control: &RunControl, file: &Path, weights: &Path, on: OnStage) -> Result<Built, RunFailure> {
    let (spec, model, (batch_min, batch_max)) = (job.spec, job.model, job.batches);
    let limit = match control.time_left() {
        Some(left) => COMPILE_LIMIT.min(left.saturating_sub(Duration::from_secs(5))),
        None => COMPILE_LIMIT,
    };
    let partial = file.with_extension("partial.pt2");
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let (weights_arg, out) = (s(weights), s(&partial));
    let (input, bmin, bmax, t) = (spec.resolved_input_size().to_string(), batch_min.to_string(), batch_max.to_string(), job.threads.to_string());
    let common = [
        "--input-size", &input, "--batch-min", &bmin, "--batch-max", &bmax, "--threads", &t, "--device", job.device.as_str(), "--dtype", "fp32",
        "--out", &out, "--eval",
    ];
    let team = team_source(job, weights)?;
    let program = program();
    let mut args: Vec<&str> = vec!["-c", &program];
    match &team {
        // A team model: built from its sidecar's source, filled from its TorchScript file.
        Some(t) => args.extend(["--team-source", &t.source, "--team-name", spec.model.as_str(), "--team-weights", &weights_arg, "--team-inputs", &t.inputs]),
        None => args.extend(["--model", model.id.as_str(), "--weights", &weights_arg]),
    }
    args.extend(common);
    let inductor = cache_dir().join("inductor");
    let start = Instant::now();
    stage(on, "start");
    let outcome = super::run_python_reporting(python, &args, &[("TORCHINDUCTOR_CACHE_DIR", inductor.as_os_str())], limit, control, &mut |name| stage(on, name))?;
    let subprocess_s = start.elapsed().as_secs_f64();
    let stdout = outcome.map_err(|why| failure(FailureKind::Invalid, format!("advanced.compiled: compiling {} failed: {why}", spec.model)))?;
    let answer = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut built: Built = serde_json::from_str(answer)
        .map_err(|e| failure(FailureKind::Internal, format!("the compile script's answer could not be read ({e}): `{}`", answer.chars().take(200).collect::<String>())))?;
    built.subprocess_s = subprocess_s;
    std::fs::rename(&partial, file).map_err(|e| failure(FailureKind::Internal, format!("{}: {e}", file.display())))?;
    Ok(built)
}
