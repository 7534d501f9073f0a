//! Team models in the engine: reading the operator's models directory (every `NAME.pt`
//! TorchScript file with its `NAME.json` sidecar) and checking and probing each module once
//! at start-up ([`load_dir`]). Building a served module for a run, and its inputs, are the
//! model zoo's (`crate::models::scripted`), which loads the file its [`TeamModel`] notes.
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
//! them in the forward pass's order, `models::scripted::input` makes each, and the pass
//! receives them all as positional arguments. How the forward's own declaration is read and
//! a mismatch named is in `signature`.

mod decoders;
pub mod hub;
mod signature;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use protocol::team::{self, Sidecar, TeamModel, TrainingEffect};
use tch::{CModule, Device, Kind, Tensor};

use crate::models::scripted::{first_tensor, input, ivalues, script_error};
use crate::torch_call::catch_torch;

/// A file the models directory holds that is not served, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub reason: String,
}

impl Problem {
    /// The model name the file would have been served under: its stem (`broken.pt`,
    /// `orphan.json`); a decoder folder's file (`llama/config.json`) by its folder's name,
    /// which is the name the decoder would have had; any other entry by its whole name.
    pub fn model_name(&self) -> &str {
        if let Some((folder, _)) = self.file.split_once('/') {
            return folder;
        }
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
    /// Each decoder's folder, by name: `DIR/NAME`, or a hub cache's snapshot.
    pub decoder_dirs: HashMap<String, PathBuf>,
    pub problems: Vec<Problem>,
}

/// [`scan_dir`], each good model noting where its file is: the caller's catalog
/// ([`Loaded::catalog`]) serves them from then on.
pub fn load_dir(dir: &Path, weight_limit: Option<u64>) -> Result<Loaded, String> {
    load_dirs(&[dir], weight_limit)
}

/// [`load_dir`] over several directories served together (the models directory and a
/// Hugging Face hub cache): a name met twice is served from the first and refused in the
/// second.
pub fn load_dirs(dirs: &[&Path], weight_limit: Option<u64>) -> Result<Loaded, String> {
    let mut loaded = Loaded::default();
    let mut files = Files::new();
    for dir in dirs {
        let (more, more_files) = scan(dir, weight_limit)?;
        for m in more.models {
            match files.contains_key(&m.name) || loaded.decoders.iter().any(|d| d.name == m.name) {
                true => loaded.problems.push(Problem { file: format!("{}.pt", m.name), reason: format!("`{}` is served from an earlier directory", m.name) }),
                false => {
                    files.insert(m.name.clone(), more_files[&m.name].clone());
                    loaded.models.push(m);
                }
            }
        }
        for d in more.decoders {
            match loaded.decoder_dirs.contains_key(&d.name) || files.contains_key(&d.name) {
                true => loaded.problems.push(Problem { file: format!("{}/", d.name), reason: format!("`{}` is served from an earlier directory", d.name) }),
                false => {
                    loaded.decoder_dirs.insert(d.name.clone(), more.decoder_dirs[&d.name].clone());
                    loaded.decoders.push(d);
                }
            }
        }
        loaded.problems.extend(more.problems);
    }
    for m in &mut loaded.models {
        m.path = files.remove(&m.name);
    }
    Ok(loaded)
}

impl Loaded {
    /// The catalog serving what was loaded: the team models and decoders, with the refused
    /// files' reasons (a request for a refused file's model is answered with its reason,
    /// not "unknown").
    pub fn catalog(&self) -> protocol::Catalog {
        protocol::Catalog::new(
            self.models.clone(),
            self.decoders.clone(),
            self.problems.iter().map(|p| (p.model_name().to_string(), p.to_string())).collect(),
        )
    }
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
            // A Hugging Face hub cache's repository (`models--ORG--NAME`), served as ORG/NAME
            // from the snapshot `refs/main` names; any other folder by its own name.
            let found = match hub::snapshot(path) {
                Some(Ok((name, snapshot))) => {
                    let folder = snapshot.strip_prefix(dir).unwrap_or(&snapshot).display().to_string();
                    decoders::read_folder_as(&snapshot, &name, &folder).map(|r| r.map(|d| (d, snapshot)))
                }
                Some(Err(p)) => Some(Err(p)),
                None => decoders::read_folder(path).map(|r| r.map(|d| (d, path.clone()))),
            };
            match found {
                Some(Ok((d, folder))) => {
                    loaded.decoder_dirs.insert(d.name.clone(), folder);
                    loaded.decoders.push(d);
                }
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
