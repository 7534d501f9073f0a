//! Team models in the engine: reading the operator's models directory (every `NAME.pt`
//! TorchScript file with its `NAME.json` sidecar), checking and probing each module once at
//! start-up ([`load_dir`]), and building a loaded module for a run ([`build`]).
//!
//! A bad file never stops the others: each problem is reported with its file and reason,
//! and the good models are served. Only files in the directory the operator named are ever
//! loaded (a TorchScript file is code; nothing is uploaded).
//!
//! The forward pass goes through the TorchScript interpreter, so the lab's settings apply
//! as they do in Python: train/eval is the module's `training` flag (`set_train` /
//! `set_eval`), grad modes and autocast are thread state around the call. What train mode
//! changes is measured here at load ([`protocol::team::TrainingEffect`]), since a script
//! hides its layers.
//!
//! A module may take several inputs (token ids and an attention mask): the sidecar lists
//! them in the forward pass's order, [`input`] makes each, and the pass receives them all as
//! positional arguments. How the forward's own declaration is read and a mismatch named is
//! in `signature`.

mod decoders;
mod signature;

pub use decoders::decoder_weights;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use protocol::team::{self, Sidecar, TeamModel, TrainingEffect};
use tch::nn::{self, ModuleT};
use tch::{CModule, Device, IValue, Kind, Tensor};

use crate::input::Input;
use crate::lab::catch_torch;
pub use signature::script_error;

/// A file the models directory holds that is not served, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub reason: String,
}

impl Problem {
    /// The model name the file would have been served under: its stem (`broken.pt`,
    /// `orphan.json`); any other entry (a folder) by its whole name.
    pub fn model_name(&self) -> &str {
        [".pt", ".json"]
            .iter()
            .find_map(|ext| self.file.strip_suffix(ext))
            .unwrap_or(&self.file)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.reason)
    }
}

/// What [`load_dir`] found: the models it serves and the files it refused.
#[derive(Debug, Default)]
pub struct Loaded {
    pub models: Vec<TeamModel>,
    /// Folders holding a Hugging Face `config.json` (see `decoders`).
    pub decoders: Vec<protocol::decoder::DecoderModel>,
    pub problems: Vec<Problem>,
}

static FILES: RwLock<Option<Files>> = RwLock::new(None);

/// [`scan_dir`], then registers the good models (in [`protocol::team`] and here, with their
/// paths): from then on they are served.
pub fn load_dir(dir: &Path, weight_limit: Option<u64>) -> Result<Loaded, String> {
    let (loaded, files) = scan(dir, weight_limit)?;
    team::register(loaded.models.clone());
    decoders::register(dir, &loaded.decoders);
    // A request for a refused file's model is answered with its reason, not "unknown".
    team::register_refused(
        loaded
            .problems
            .iter()
            .map(|p| (p.model_name().to_string(), p.to_string()))
            .collect(),
    );
    *FILES.write().unwrap_or_else(|e| e.into_inner()) = Some(files);
    Ok(loaded)
}

/// Reads `dir` and checks and probes every `NAME.pt` on the CPU, registering nothing.
/// `Err` only when the directory itself cannot be read. `weight_limit`: the memory budget
/// (`--memory-limit-mib`); a model whose weights alone exceed it is refused.
pub fn scan_dir(dir: &Path, weight_limit: Option<u64>) -> Result<Loaded, String> {
    scan(dir, weight_limit).map(|(loaded, _)| loaded)
}

type Files = HashMap<String, PathBuf>;

fn scan(dir: &Path, weight_limit: Option<u64>) -> Result<(Loaded, Files), String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read the models directory {}: {e}", dir.display()))?;
    let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    let mut loaded = Loaded::default();
    let mut files = HashMap::new();
    for path in &names {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = path.extension().and_then(|e| e.to_str());
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            match decoders::read_folder(path) {
                Some(Ok(d)) => loaded.decoders.push(d),
                Some(Err(p)) => loaded.problems.push(p),
                None => {}
            }
            continue;
        }
        match ext {
            Some("pt") => match load_one(path, &stem, weight_limit) {
                Ok(model) => {
                    files.insert(model.name.clone(), path.clone());
                    loaded.models.push(model);
                }
                Err(reason) => loaded.problems.push(Problem { file, reason }),
            },
            Some("json") if !path.with_extension("pt").exists() => loaded.problems.push(Problem {
                file,
                reason: format!("a sidecar without its module: there is no {stem}.pt beside it"),
            }),
            _ => {}
        }
    }
    Ok((loaded, files))
}

/// Checks one `NAME.pt` with its sidecar, loads it and probes it.
fn load_one(path: &Path, name: &str, weight_limit: Option<u64>) -> Result<TeamModel, String> {
    if !team::valid_name(name) {
        return Err(format!(
            "`{name}` cannot name a model: use letters, digits, `_` and `-` (at most {} characters)",
            team::MAX_NAME_LEN
        ));
    }
    if team::is_built_in(name) {
        return Err(format!(
            "`{name}` is the name of a built-in model, which is served under it: rename the file and its sidecar (e.g. team_{name}.pt and team_{name}.json; bench/export_model.py names them team_<source> by default)"
        ));
    }
    let sidecar_path = path.with_extension("json");
    let text = std::fs::read_to_string(&sidecar_path)
        .map_err(|e| format!("its sidecar {name}.json cannot be read ({e}): every model needs one saying what its input is"))?;
    let sidecar: Sidecar = serde_json::from_str(&text)
        .map_err(|e| format!("its sidecar {name}.json does not parse: {e}"))?;
    sidecar
        .validate()
        .map_err(|e| format!("its sidecar {name}.json: {e}"))?;
    let module = CModule::load_on_device(path, Device::Cpu).map_err(|e| {
        format!(
            "does not load as TorchScript: {}",
            script_error(&e.to_string())
        )
    })?;
    let params = module.named_parameters().map_err(|e| {
        format!(
            "its parameters cannot be read: {}",
            script_error(&e.to_string())
        )
    })?;
    let parameters: u64 = params.iter().map(|(_, t)| t.numel() as u64).sum();
    let weight_bytes: u64 = params
        .iter()
        .map(|(_, t)| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
        .sum();
    if let Some(limit) = weight_limit {
        if weight_bytes > limit {
            return Err(format!(
                "its parameters alone take {}, above this server's memory limit of {} (--memory-limit-mib)",
                protocol::format_bytes(weight_bytes),
                protocol::format_bytes(limit)
            ));
        }
    }
    drop(params);
    // The forward's declaration first: a count that cannot fit is said before anything
    // runs, and the argument names let a failing pass be traced to the input at fault.
    let declaration = signature::Declaration::read(&module);
    if let Some(d) = &declaration {
        d.check_count(&sidecar)
            .map_err(|e| format!("its sidecar {name}.json does not fit the module: {e}"))?;
    }
    let training = probe(module, &sidecar).map_err(|e| {
        format!(
            "its sidecar {name}.json does not fit the module: {}",
            signature::mismatch(&sidecar, declaration.as_ref(), &e)
        )
    })?;
    Ok(TeamModel::new(
        name.to_string(),
        sidecar,
        parameters,
        training,
    ))
}

/// Runs the module at batch 2 (BatchNorm needs two samples in train mode) at the sidecar's
/// default size: once in eval mode (it must run and return a tensor), twice in train mode.
/// The probe's copy is dropped afterwards: train-mode passes move BatchNorm's running
/// statistics, and runs load the file afresh.
fn probe(mut module: CModule, sidecar: &Sidecar) -> Result<TrainingEffect, String> {
    let size = sidecar.size.as_ref().map_or(0, |s| s.default);
    let x = catch_torch(|| input(sidecar, 2, size, Device::Cpu)).map_err(|f| f.message)?;
    let run = |module: &CModule| -> Result<Tensor, String> {
        // The whole interpreter text: `signature::mismatch` reads its traceback.
        let out = tch::no_grad(|| module.forward_is(&ivalues(x.tensors())))
            .map_err(|e| e.to_string())?;
        first_tensor(out).ok_or_else(|| "forward returned no tensor".to_string())
    };
    module.f_set_eval().map_err(|e| e.to_string())?;
    let eval = run(&module)?;
    module.f_set_train().map_err(|e| e.to_string())?;
    let train_a = run(&module)?;
    let train_b = run(&module)?;
    let differ = |a: &Tensor, b: &Tensor| -> Result<bool, String> {
        catch_torch(|| {
            if a.size() != b.size() {
                return true;
            }
            let d = (a.to_kind(Kind::Double) - b.to_kind(Kind::Double))
                .abs()
                .max()
                .double_value(&[]);
            // float32 rounding of an identical computation stays far below this.
            d > 1e-6
        })
        .map_err(|f| f.message)
    };
    Ok(TrainingEffect {
        random_in_train: differ(&train_a, &train_b)?,
        train_differs_from_eval: differ(&train_a, &eval)?,
    })
}

/// The first tensor of a forward pass's output (a tensor, or a tuple or list of them).
fn first_tensor(out: IValue) -> Option<Tensor> {
    match out {
        IValue::Tensor(t) => Some(t),
        IValue::TensorList(v) => v.into_iter().next(),
        IValue::Tuple(v) | IValue::GenericList(v) => v.into_iter().find_map(first_tensor),
        _ => None,
    }
}

/// A team model's inputs at `batch` and `size`, as its sidecar describes each: random
/// normal (floating point), uniform in `0..high` (ids), or `fill` everywhere (a mask).
/// `bench/peer.py` makes the same tensors, so both sides hold the same bytes.
pub fn input(sidecar: &Sidecar, batch: u32, size: u32, device: Device) -> Input {
    let tensors = sidecar
        .inputs
        .iter()
        .zip(sidecar.shapes(batch, size))
        .map(|(spec, shape)| {
            let kind = match spec.dtype {
                team::Dtype::Float32 => Kind::Float,
                team::Dtype::Float64 => Kind::Double,
                team::Dtype::Float16 => Kind::Half,
                team::Dtype::Bfloat16 => Kind::BFloat16,
                team::Dtype::Int64 => Kind::Int64,
                team::Dtype::Int32 => Kind::Int,
                team::Dtype::Bool => Kind::Bool,
            };
            match (spec.high, spec.fill) {
                (Some(high), _) => Tensor::randint(high, shape.as_slice(), (kind, device)),
                // The sidecar's check keeps integer and bool fills whole.
                (None, Some(fill)) if !spec.dtype.is_floating_point() => {
                    Tensor::full(shape.as_slice(), fill as i64, (kind, device))
                }
                (None, Some(fill)) => Tensor::full(shape.as_slice(), fill, (kind, device)),
                (None, None) => Tensor::randn(shape.as_slice(), (kind, device)),
            }
        })
        .collect();
    Input::many(tensors)
}

/// The inputs as the interpreter's positional arguments (sharing their storage).
fn ivalues(tensors: &[Tensor]) -> Vec<IValue> {
    tensors
        .iter()
        .map(|t| IValue::Tensor(t.shallow_clone()))
        .collect()
}

/// A loaded TorchScript module as the lab runs it. The interpreter keeps `training` on the
/// module, so the mode a run asks for is set before the pass when it differs.
#[derive(Debug)]
struct Scripted {
    module: Mutex<(CModule, Option<bool>)>,
}

impl Scripted {
    /// One forward pass on `inputs` in the mode asked for. Panics with the interpreter's
    /// reason (callers run it under [`catch_torch`]).
    fn run(&self, inputs: &[Tensor], train: bool) -> Tensor {
        let mut guard = self.module.lock().unwrap_or_else(|e| e.into_inner());
        let (module, mode) = &mut *guard;
        if *mode != Some(train) {
            let set = if train {
                module.f_set_train()
            } else {
                module.f_set_eval()
            };
            if let Err(e) = set {
                panic!("{}", script_error(&e.to_string()));
            }
            *mode = Some(train);
        }
        match module.forward_is(&ivalues(inputs)) {
            Ok(out) => match first_tensor(out) {
                Some(t) => t,
                None => panic!("the module's forward returned no tensor"),
            },
            Err(e) => panic!(
                "the module's forward raised: {}",
                script_error(&e.to_string())
            ),
        }
    }
}

impl ModuleT for Scripted {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.run(std::slice::from_ref(xs), train)
    }
}

/// The forward-pass trace cannot follow a TorchScript module (its interpreter runs the
/// submodules; no probe reaches inside), so it marks nothing: the trace and the FLOP count
/// are absent. Every input the sidecar lists is passed.
impl crate::models::Net for Scripted {
    fn forward_inputs(
        &self,
        inputs: &Input,
        train: bool,
        _probe: &mut crate::trace::Probe<'_>,
    ) -> Tensor {
        self.run(inputs.tensors(), train)
    }
}

/// Loads the team model `name` on `device`, its parameters added to `vs` (shared, not
/// copied) so that they are counted like a built-in model's. Panics with the reason when
/// the file is gone or no longer loads; callers run it under [`catch_torch`].
pub fn build(name: &str, vs: &nn::VarStore) -> Box<dyn crate::models::Net> {
    let path = FILES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|f| f.get(name).cloned());
    let Some(path) = path else {
        panic!("`{name}` is not a team model this process loaded");
    };
    let module = match CModule::load_on_device(&path, vs.device()) {
        Ok(m) => m,
        Err(e) => panic!(
            "{} no longer loads: {}",
            path.display(),
            script_error(&e.to_string())
        ),
    };
    let params = match module.named_parameters() {
        Ok(p) => p,
        Err(e) => panic!("{}", script_error(&e.to_string())),
    };
    let root = vs.root();
    for (pname, tensor) in params {
        let trainable = tensor.requires_grad();
        let _ = root.add(&pname.replace('.', "_"), tensor, trainable);
    }
    Box::new(Scripted {
        module: Mutex::new((module, None)),
    })
}
