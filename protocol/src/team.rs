//! Team models: TorchScript files the server's operator put in its models directory
//! (`--models-dir`), each `NAME.pt` described by a `NAME.json` sidecar ([`Sidecar`]).
//!
//! This module owns the vocabulary (what a sidecar holds, what the engine measured about a
//! module when it loaded it: [`TeamModel`]) and the process-wide registry of the team models
//! this process serves. A [`crate::ModelId::Team`] is a name; its display name, input and
//! training behaviour are looked up here, so a team model goes wherever a built-in one goes
//! (specs, records, permalinks, snippets) without a second identity type. The server and
//! the CLI register what the engine loaded at start-up; the browser registers what
//! `/api/info` lists. Registration leaks one small entry per model: it happens once per
//! process, never per request.

use serde::{Deserialize, Serialize};
use std::sync::RwLock;

/// The longest team model name: names travel in URLs and file names.
pub const MAX_NAME_LEN: usize = 64;

/// Names seen in records or requests that no registered model answers to are kept (so a
/// record of a model the operator removed still reads) up to this many; beyond, they are
/// refused, so requests cannot grow the process without bound.
const MAX_UNKNOWN_NAMES: usize = 256;

/// What `NAME.json` beside `NAME.pt` says the module needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sidecar {
    /// Shown in the model picker, reports and records.
    pub display_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where the model is documented (an internal wiki page, a model card).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The forward pass's positional inputs, in order.
    pub inputs: Vec<InputSpec>,
    /// The adjustable dimension (`"size"` in a shape), like the built-in models'
    /// `input_size`. Required when a shape uses `"size"`, refused when none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<SizeSpec>,
}

/// One positional input of the forward pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Dimensions: numbers, `"batch"` (exactly once) and `"size"`.
    pub shape: Vec<Dim>,
    #[serde(default)]
    pub dtype: Dtype,
    /// For integer inputs (token ids, class indices): values are drawn from `0..high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<i64>,
}

/// One dimension of an input's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    Fixed(u32),
    Named(DimName),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DimName {
    Batch,
    Size,
}

/// The element type of an input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    #[default]
    Float32,
    Float64,
    Float16,
    Bfloat16,
    Int64,
    Int32,
}

impl Dtype {
    /// The name PyTorch gives it (`torch.float32`).
    pub fn torch_name(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float64 => "float64",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Int64 => "int64",
            Dtype::Int32 => "int32",
        }
    }

    pub fn is_integer(self) -> bool {
        matches!(self, Dtype::Int64 | Dtype::Int32)
    }
}

/// The adjustable dimension: what it means, its default and its bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeSpec {
    /// In words, e.g. "image side in pixels".
    pub meaning: String,
    pub default: u32,
    #[serde(default = "one")]
    pub min: u32,
    pub max: u32,
}

fn one() -> u32 {
    1
}

impl Sidecar {
    /// The rules a sidecar must follow before its module is even loaded.
    pub fn validate(&self) -> Result<(), String> {
        if self.display_name.trim().is_empty() {
            return Err("`display_name` is empty".into());
        }
        if self.inputs.is_empty() {
            return Err("`inputs` is empty: the forward pass needs at least one input".into());
        }
        let mut uses_size = false;
        for (i, input) in self.inputs.iter().enumerate() {
            let batches = input
                .shape
                .iter()
                .filter(|d| **d == Dim::Named(DimName::Batch))
                .count();
            if batches != 1 {
                return Err(format!(
                    "input {i}: its shape must name \"batch\" exactly once (it names it {batches} times)"
                ));
            }
            if input.shape.contains(&Dim::Fixed(0)) {
                return Err(format!("input {i}: a dimension of 0"));
            }
            uses_size |= input.shape.contains(&Dim::Named(DimName::Size));
            match (input.dtype.is_integer(), input.high) {
                (true, None) => {
                    return Err(format!(
                        "input {i}: an integer input needs `high` (values are drawn from 0..high)"
                    ))
                }
                (true, Some(h)) if h < 1 => {
                    return Err(format!("input {i}: `high` must be at least 1"))
                }
                (false, Some(_)) => {
                    return Err(format!(
                        "input {i}: `high` is for integer inputs, and this one is {}",
                        input.dtype.torch_name()
                    ))
                }
                _ => {}
            }
        }
        match (&self.size, uses_size) {
            (None, true) => Err(
                "a shape uses \"size\" but the sidecar has no `size` (meaning, default, max)"
                    .into(),
            ),
            (Some(_), false) => Err("`size` is given but no input shape uses \"size\"".into()),
            (Some(s), true) if !(s.min >= 1 && s.min <= s.default && s.default <= s.max) => {
                Err(format!(
                    "`size` needs 1 <= min <= default <= max (it has min {}, default {}, max {})",
                    s.min, s.default, s.max
                ))
            }
            _ => Ok(()),
        }
    }

    /// Every input's concrete shape at `batch` and `size`.
    pub fn shapes(&self, batch: u32, size: u32) -> Vec<Vec<i64>> {
        self.inputs
            .iter()
            .map(|input| {
                input
                    .shape
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => *n as i64,
                        Dim::Named(DimName::Batch) => batch as i64,
                        Dim::Named(DimName::Size) => size as i64,
                    })
                    .collect()
            })
            .collect()
    }

    /// "[batch, 3, size, size] float32": the inputs in words.
    pub fn describe_inputs(&self) -> String {
        self.inputs
            .iter()
            .map(|input| {
                let dims: Vec<String> = input
                    .shape
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(n) => n.to_string(),
                        Dim::Named(DimName::Batch) => "batch".into(),
                        Dim::Named(DimName::Size) => "size".into(),
                    })
                    .collect();
                format!("[{}] {}", dims.join(", "), input.dtype.torch_name())
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// What switching the module to train mode changed, measured by the engine when it loaded
/// the file (two train-mode passes and one eval-mode pass on the same input): TorchScript
/// hides which layers a module has, so the page says what was seen instead of guessing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainingEffect {
    /// Two train-mode passes on the same input differ (Dropout-like randomness).
    pub random_in_train: bool,
    /// A train-mode pass differs from the eval-mode pass (Dropout, or BatchNorm's batch
    /// statistics). Both false: the module ignores `training`, and train and eval measure
    /// the same forward pass.
    pub train_differs_from_eval: bool,
}

impl TrainingEffect {
    /// The measured behaviour in one sentence, for the page and the CLI.
    pub fn describe(&self) -> &'static str {
        match (self.random_in_train, self.train_differs_from_eval) {
            (true, _) => "measured at load: train mode makes its output random (Dropout-like), eval mode makes it deterministic",
            (false, true) => "measured at load: train mode changes its output deterministically (batch statistics, BatchNorm-like), without randomness",
            (false, false) => "measured at load: this module ignores train()/eval() (the same output in both), so train and eval measure the same forward pass",
        }
    }
}

/// A team model as this process serves it: its name (the file's stem), its sidecar, and
/// what the engine found when it loaded and probed the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeamModel {
    pub name: String,
    /// The file it was loaded from, relative to the models directory (`NAME.pt`).
    pub file: String,
    pub sidecar: Sidecar,
    pub parameters: u64,
    pub training: TrainingEffect,
    /// "image side in pixels (shape [batch, 3, size, size] float32)": what `input_size`
    /// means for this model (for a fixed shape, the shape).
    pub input_meaning: String,
}

impl TeamModel {
    pub fn new(name: String, sidecar: Sidecar, parameters: u64, training: TrainingEffect) -> Self {
        let shape = sidecar.describe_inputs();
        let input_meaning = match &sidecar.size {
            Some(s) => format!("{} (inputs {shape})", s.meaning),
            None => format!("fixed shape (inputs {shape})"),
        };
        TeamModel {
            file: format!("{name}.pt"),
            name,
            sidecar,
            parameters,
            training,
            input_meaning,
        }
    }
}

/// Whether `name` may name a team model: letters, digits, `_` and `-`, at most
/// [`MAX_NAME_LEN`] characters (it travels in URLs, commands and file names).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

struct Registry {
    served: Vec<&'static TeamModel>,
    unknown: Vec<&'static str>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    served: Vec::new(),
    unknown: Vec::new(),
});

fn read() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

/// Makes `models` the team models this process serves (replacing any registered before:
/// the server and the CLI call it once with what the engine loaded, the browser with what
/// `/api/info` lists).
pub fn register(models: Vec<TeamModel>) {
    let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    let mut served = Vec::with_capacity(models.len());
    for m in models {
        match reg.served.iter().find(|old| ***old == m) {
            Some(old) => served.push(*old),
            None => served.push(&*Box::leak(Box::new(m))),
        }
    }
    reg.served = served;
}

/// The team model served under `name`, if any.
pub fn lookup(name: &str) -> Option<&'static TeamModel> {
    read().served.iter().find(|m| m.name == name).copied()
}

/// Every team model this process serves, in registration order.
pub fn served() -> Vec<&'static TeamModel> {
    read().served.clone()
}

/// The `'static` name for `name`: a served model's, or a remembered unknown one (a record
/// of a model that is no longer served must still read). `None` when the name is not a
/// valid team name or too many unknown names were seen.
pub(crate) fn intern(name: &str) -> Option<&'static str> {
    if let Some(m) = lookup(name) {
        return Some(m.name.as_str());
    }
    if !valid_name(name) {
        return None;
    }
    let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = reg.unknown.iter().find(|n| **n == name) {
        return Some(*n);
    }
    if reg.unknown.len() >= MAX_UNKNOWN_NAMES {
        return None;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    reg.unknown.push(leaked);
    Some(leaked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sidecar(json: &str) -> Result<Sidecar, String> {
        let s: Sidecar = serde_json::from_str(json).map_err(|e| e.to_string())?;
        s.validate().map(|_| s)
    }

    #[test]
    fn a_sidecar_is_checked_before_its_module_is_loaded() {
        let ok = sidecar(
            r#"{"display_name": "Detector", "inputs": [{"shape": ["batch", 3, "size", "size"]}],
                "size": {"meaning": "image side", "default": 64, "max": 256}}"#,
        )
        .unwrap();
        assert_eq!(ok.shapes(2, 32), vec![vec![2, 3, 32, 32]]);
        assert_eq!(ok.describe_inputs(), "[batch, 3, size, size] float32");
        for (json, says) in [
            (
                r#"{"display_name": "x", "inputs": [{"shape": [3, 4]}]}"#,
                "\"batch\" exactly once",
            ),
            (
                r#"{"display_name": "x", "inputs": [{"shape": ["batch", "size"]}]}"#,
                "no `size`",
            ),
            (
                r#"{"display_name": "x", "inputs": [{"shape": ["batch", 8], "dtype": "int64"}]}"#,
                "`high`",
            ),
            (
                r#"{"display_name": "x", "inputs": []}"#,
                "at least one input",
            ),
            (
                r#"{"display_name": "x", "inputs": [{"shape": ["batch"], "dtype": "complex"}]}"#,
                "complex",
            ),
            (
                r#"{"display_name": "x", "inputs": [{"shape": ["batch"]}], "colour": 1}"#,
                "colour",
            ),
            (
                r#"{"display_name": "x", "inputs": [{"shape": ["batch", "size"]}], "size": {"meaning": "m", "default": 9, "max": 4}}"#,
                "min <= default <= max",
            ),
        ] {
            let e = sidecar(json).unwrap_err();
            assert!(e.contains(says), "{json}: {e}");
        }
    }

    #[test]
    fn names_are_safe_for_urls_and_files() {
        assert!(valid_name("detector_v3-small"));
        for bad in ["", "../x", "a b", "x.pt", &"a".repeat(MAX_NAME_LEN + 1)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
