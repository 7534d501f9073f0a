//! A decoder folder's weights as Hugging Face transformers saves them: one
//! `model.safetensors`, or `model.safetensors.index.json` naming each tensor's shard (what
//! `save_pretrained` writes past its shard size, and what every published 7–8B checkpoint
//! is). Checked at start-up ([`WeightFiles::find`]: the index, every shard inside the folder,
//! every header readable and complete, the dtypes), described for every report
//! ([`WeightFiles::stored`]: the files, their bytes, the dtype as stored, a content hash), and
//! read when a run builds the model ([`WeightFiles::load_into`]): each shard memory-mapped,
//! one tensor at a time copied into its variable, so the host never holds the model twice.
//! A folder whose weights do not load is refused, naming the file or the tensor; nothing is
//! ever replaced by random weights.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Dtype, SafeTensors};
use sha2::{Digest, Sha256};
use tch::{nn, Kind, Tensor};

use protocol::decoder::StoredWeights;

/// The single-file name `save_pretrained` writes.
pub const SINGLE: &str = "model.safetensors";
/// The index `save_pretrained` writes beside its shards.
pub const INDEX: &str = "model.safetensors.index.json";

/// A folder's weight files, checked.
#[derive(Clone, Debug)]
pub struct WeightFiles {
    /// The index, for a sharded checkpoint.
    index: Option<PathBuf>,
    /// The files holding tensors, in name order.
    files: Vec<PathBuf>,
    /// Each tensor's file (an index into `files`).
    map: HashMap<String, usize>,
    /// The dtypes stored, by name (`bf16`, `fp32`, `fp16`), with their tensor counts.
    dtypes: BTreeMap<&'static str, usize>,
}

impl WeightFiles {
    /// The weights in `dir`: `Ok(None)` when it has none (the model then runs on random
    /// seeded weights, and says so), an error naming the file when they cannot be read.
    pub fn find(dir: &Path) -> Result<Option<WeightFiles>, String> {
        let index = dir.join(INDEX);
        if index.is_file() {
            return Self::sharded(dir, &index).map(Some);
        }
        let single = dir.join(SINGLE);
        if single.is_file() {
            let mut files = WeightFiles { index: None, files: vec![single.clone()], map: HashMap::new(), dtypes: BTreeMap::new() };
            files.read_header(0)?;
            return Ok(Some(files));
        }
        Ok(None)
    }

    fn sharded(dir: &Path, index: &Path) -> Result<WeightFiles, String> {
        let text = std::fs::read_to_string(index).map_err(|e| format!("{INDEX} cannot be read: {e}"))?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{INDEX} is not JSON: {e}"))?;
        let map = value
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| format!("{INDEX} has no `weight_map` object"))?;
        let mut names: Vec<String> = vec![];
        let mut tensor_file: HashMap<String, String> = HashMap::new();
        for (tensor, file) in map {
            let file = file.as_str().ok_or_else(|| format!("{INDEX}: `{tensor}` maps to a non-string"))?;
            // A shard is a file of this folder: no path, no `..`, nothing outside it.
            if file.is_empty() || file.contains('/') || file.contains('\\') || file == ".." || file == "." {
                return Err(format!("{INDEX} names `{file}` for `{tensor}`: a shard must be a file in the model's folder"));
            }
            if !names.contains(&file.to_string()) {
                names.push(file.to_string());
            }
            tensor_file.insert(tensor.clone(), file.to_string());
        }
        if names.is_empty() {
            return Err(format!("{INDEX}'s `weight_map` is empty"));
        }
        names.sort();
        let mut files = WeightFiles { index: Some(index.to_path_buf()), files: vec![], map: HashMap::new(), dtypes: BTreeMap::new() };
        for name in &names {
            let path = dir.join(name);
            if !path.is_file() {
                return Err(format!("{INDEX} names the shard `{name}`, which is missing"));
            }
            files.files.push(path);
            files.read_header(files.files.len() - 1)?;
        }
        // Every tensor the index names is in the shard it names.
        for (tensor, file) in &tensor_file {
            let at = names.iter().position(|n| n == file).expect("listed above");
            match files.map.get(tensor) {
                Some(i) if *i == at => {}
                Some(i) => return Err(format!("{INDEX} puts `{tensor}` in `{file}`, but it is in `{}`", names[*i])),
                None => return Err(format!("{INDEX} puts `{tensor}` in `{file}`, which does not hold it")),
            }
        }
        Ok(files)
    }

    /// Reads file `i`'s header (the whole file checked against it: a truncated file is
    /// refused), records its tensors and their dtypes.
    fn read_header(&mut self, i: usize) -> Result<(), String> {
        let path = self.files[i].clone();
        let name = file_name(&path);
        let mmap = map(&path)?;
        let st = SafeTensors::deserialize(&mmap).map_err(|e| format!("{name} is not a complete safetensors file: {e:?}"))?;
        for (tensor, view) in st.tensors() {
            let dtype = dtype_name(view.dtype()).ok_or_else(|| format!("{name}: `{tensor}` is {:?}; Gradless reads fp32, bf16 and fp16", view.dtype()))?;
            *self.dtypes.entry(dtype).or_default() += 1;
            if let Some(j) = self.map.insert(tensor.clone(), i) {
                return Err(format!("`{tensor}` is in both {} and {name}", file_name(&self.files[j])));
            }
        }
        Ok(())
    }

    /// What the folder holds, for reports and pages: the files with their bytes, the dtype
    /// as stored, and the SHA-256 of the index (a sharded checkpoint) or of the single file.
    pub fn stored(&self) -> Result<StoredWeights, String> {
        let hashed = self.index.as_ref().unwrap_or(&self.files[0]);
        let mut hasher = Sha256::new();
        let mut f = File::open(hashed).map_err(|e| format!("{} cannot be read: {e}", file_name(hashed)))?;
        std::io::copy(&mut f, &mut hasher).map_err(|e| format!("{} cannot be read: {e}", file_name(hashed)))?;
        let hash = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>();
        let mut files = vec![];
        if let Some(index) = &self.index {
            files.push((file_name(index), std::fs::metadata(index).map(|m| m.len()).unwrap_or(0)));
        }
        for f in &self.files {
            files.push((file_name(f), std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)));
        }
        Ok(StoredWeights {
            files,
            dtype: self.dtypes.keys().copied().collect::<Vec<_>>().join(" + "),
            sha256: hash,
            hashed: file_name(hashed),
        })
    }

    /// Copies every variable of `vs` from the files, one tensor at a time from the
    /// memory-mapped shard that holds it (converted to the variable's dtype and device).
    /// A tied head has no tensor of its own; any other variable missing, or a shape that
    /// is not the config's, is an error naming the tensor and its file.
    pub fn load_into(&self, vs: &nn::VarStore) -> Result<(), String> {
        let _no_grad = tch::no_grad_guard();
        // Every variable's file first: a tensor missing anywhere is refused before any is read.
        let mut by_file: Vec<Vec<(String, Tensor)>> = (0..self.files.len()).map(|_| vec![]).collect();
        let mut variables: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, var) in variables {
            let Some(&i) = self.map.get(&name) else {
                return Err(format!("the weights have no tensor `{name}`"));
            };
            by_file[i].push((name, var));
        }
        // One file mapped at a time: its pages leave the process with its map, so the host
        // holds the model and at most one shard, never the checkpoint twice.
        for (path, wanted) in self.files.iter().zip(by_file) {
            let file = file_name(path);
            let mapped = map(path)?;
            let view = SafeTensors::deserialize(&mapped).map_err(|e| format!("{file} is not a complete safetensors file: {e:?}"))?;
            for (name, mut var) in wanted {
                let tensor = view.tensor(&name).map_err(|e| format!("{file}: `{name}`: {e:?}"))?;
                let shape: Vec<i64> = tensor.shape().iter().map(|&d| d as i64).collect();
                if shape != var.size() {
                    return Err(format!("`{name}` is {shape:?} in {file}, {:?} in the config's shape", var.size()));
                }
                let kind = kind_of(tensor.dtype()).ok_or_else(|| format!("{file}: `{name}` is {:?}", tensor.dtype()))?;
                // Copied straight from the mapped file into the weight, converted to the
                // run's weights dtype on the way: a bf16 checkpoint stays bf16 when the run's
                // weights are bf16, and no tensor is held between the map and the weight.
                crate::torch_ext::copy_from_bytes(&mut var, tensor.data(), &shape, kind)
                    .map_err(|e| format!("{file}: `{name}`: {}", crate::torch_call::first_line(&e.to_string())))?;
            }
        }
        Ok(())
    }
}

fn map(path: &Path) -> Result<Mmap, String> {
    let f = File::open(path).map_err(|e| format!("{} cannot be opened: {e}", file_name(path)))?;
    // SAFETY: the file is only read; a checkpoint rewritten while a run reads it is the
    // operator's to avoid, as for every memory-mapped loader (transformers' included).
    unsafe { Mmap::map(&f) }.map_err(|e| format!("{} cannot be mapped: {e}", file_name(path)))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

fn dtype_name(d: Dtype) -> Option<&'static str> {
    match d {
        Dtype::F32 => Some("fp32"),
        Dtype::BF16 => Some("bf16"),
        Dtype::F16 => Some("fp16"),
        _ => None,
    }
}

fn kind_of(d: Dtype) -> Option<Kind> {
    match d {
        Dtype::F32 => Some(Kind::Float),
        Dtype::BF16 => Some(Kind::BFloat16),
        Dtype::F16 => Some(Kind::Half),
        _ => None,
    }
}
