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
use std::sync::{Arc, RwLock};

/// The longest team model name: names travel in URLs and file names.
pub const MAX_NAME_LEN: usize = 64;


/// What `NAME.json` beside `NAME.pt` says the module needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Where the module's Python definition is, so the server can compile it ahead of time
    /// (`advanced.compiled`): `FILE.py:NAME`, the file relative to the models directory
    /// (NAME a class, or a function returning the module, called with no arguments), or
    /// `torchvision:NAME`. The weights come from the TorchScript file's `state_dict`.
    /// `bench/export_model.py` writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A sidecar's `source`, read: a Python file in the models directory and the name in it,
/// or a torchvision model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleSource<'a> {
    File { file: &'a str, name: &'a str },
    Torchvision(&'a str),
}

/// Reads a sidecar's `source` (see [`Sidecar::source`]): a file stays inside the models
/// directory (relative, no `..`), and names are Python identifiers.
pub fn module_source(source: &str) -> Result<ModuleSource<'_>, String> {
    let identifier = |n: &str| !n.is_empty() && !n.starts_with(|c: char| c.is_ascii_digit()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let (file, name) = source
        .rsplit_once(':')
        .ok_or_else(|| format!("`source` is `{source}`: it needs FILE.py:NAME or torchvision:NAME"))?;
    if !identifier(name) {
        return Err(format!("`source` names `{name}`, which is not a Python identifier"));
    }
    if file == "torchvision" {
        return Ok(ModuleSource::Torchvision(name));
    }
    let inside = !file.starts_with('/') && !file.split(['/', '\\']).any(|part| part == ".." || part.is_empty());
    if !file.ends_with(".py") || !inside {
        return Err(format!("`source` file `{file}` must be a .py file inside the models directory (a relative path without `..`)"));
    }
    Ok(ModuleSource::File { file, name })
}

/// One positional input of the forward pass. Its values: random normal for a floating-point
/// input, uniform in `0..high` for an integer one (token ids, class indices), or `fill` in
/// every element (an attention mask of ones); memory and latency depend on the shape and
/// dtype, but the values must be ones the module accepts (an id beyond the vocabulary
/// raises in the embedding).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// What the forward pass calls it (`input_ids`, `attention_mask`): shown in the
    /// model's description, the snippet and the messages. Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Dimensions: numbers, `"batch"` (exactly once) and `"size"`.
    pub shape: Vec<Dim>,
    #[serde(default)]
    pub dtype: Dtype,
    /// For integer inputs (token ids, class indices): values are drawn from `0..high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<i64>,
    /// Every element is this value (`1` for a mask that attends everywhere). Required for
    /// a `bool` input (0 or 1); an integer input takes `high` or `fill`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fill: Option<f64>,
}

/// The longest input name a sidecar may give.
pub const MAX_INPUT_NAME_LEN: usize = 32;

impl InputSpec {
    /// "input 1 (`attention_mask`)": how messages name it (`index` counts from 0, as
    /// Python's positional arguments after `self` do).
    pub fn label(&self, index: usize) -> String {
        match &self.name {
            Some(n) => format!("input {index} (`{n}`)"),
            None => format!("input {index}"),
        }
    }

    /// "[batch, size] int64 in 0..30000": the shape with its placeholders, the dtype and
    /// the values.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self
            .shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => n.to_string(),
                Dim::Named(DimName::Batch) => "batch".into(),
                Dim::Named(DimName::Size) => "size".into(),
            })
            .collect();
        let name = self.name.as_ref().map(|n| format!("{n} ")).unwrap_or_default();
        let values = match (self.high, self.fill) {
            (Some(h), _) => format!(" in 0..{h}"),
            (None, Some(f)) => format!(" all {}", fill_text(self.dtype, f)),
            (None, None) => String::new(),
        };
        format!("{name}[{}] {}{values}", dims.join(", "), self.dtype.torch_name())
    }

    fn check(&self, i: usize) -> Result<(), String> {
        let me = self.label(i);
        if let Some(n) = &self.name {
            let ok = !n.is_empty()
                && n.len() <= MAX_INPUT_NAME_LEN
                && !n.starts_with(|c: char| c.is_ascii_digit())
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(format!(
                    "input {i}: `name` must be an identifier (letters, digits and `_`, at most {MAX_INPUT_NAME_LEN} characters), not {n:?}"
                ));
            }
        }
        let batches = self
            .shape
            .iter()
            .filter(|d| **d == Dim::Named(DimName::Batch))
            .count();
        if batches != 1 {
            return Err(format!(
                "{me}: its shape must name \"batch\" exactly once (it names it {batches} times)"
            ));
        }
        if self.shape.contains(&Dim::Fixed(0)) {
            return Err(format!("{me}: a dimension of 0"));
        }
        let dtype = self.dtype.torch_name();
        if let Some(f) = self.fill {
            if !f.is_finite() {
                return Err(format!("{me}: `fill` must be a finite number"));
            }
            if self.high.is_some() {
                return Err(format!(
                    "{me}: `high` (random values) and `fill` (one value) exclude each other"
                ));
            }
            if self.dtype == Dtype::Bool && f != 0.0 && f != 1.0 {
                return Err(format!("{me}: a bool input's `fill` is 0 or 1"));
            }
            if self.dtype.is_integer() && f.fract() != 0.0 {
                return Err(format!("{me}: an {dtype} input's `fill` must be a whole number"));
            }
        }
        match (self.dtype, self.high, self.fill) {
            (Dtype::Bool, _, None) => Err(format!(
                "{me}: a bool input needs `fill` (0 or 1: a mask that keeps or drops everything)"
            )),
            (Dtype::Bool, Some(_), _) => Err(format!("{me}: `high` is for integer inputs")),
            (d, None, None) if d.is_integer() => Err(format!(
                "{me}: an integer input needs `high` (values drawn from 0..high, e.g. the vocabulary size) or `fill` (one value in every element)"
            )),
            (d, Some(_), _) if !d.is_integer() => Err(format!(
                "{me}: `high` is for integer inputs, and this one is {dtype}"
            )),
            (_, Some(h), _) if h < 1 => Err(format!("{me}: `high` must be at least 1")),
            _ => Ok(()),
        }
    }
}

/// `1`, `1.5` or `True`: a fill value as Python writes it for `dtype`.
pub fn fill_text(dtype: Dtype, fill: f64) -> String {
    match dtype {
        Dtype::Bool if fill != 0.0 => "True".into(),
        Dtype::Bool => "False".into(),
        d if d.is_integer() => format!("{}", fill as i64),
        _ => format!("{fill:?}"),
    }
}

/// One dimension of an input's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Dim {
    Fixed(u32),
    Named(DimName),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DimName {
    Batch,
    Size,
}

/// The element type of an input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    #[default]
    Float32,
    Float64,
    Float16,
    Bfloat16,
    Int64,
    Int32,
    /// A mask (`key_padding_mask`); its values come from `fill`.
    Bool,
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
            Dtype::Bool => "bool",
        }
    }

    pub fn is_integer(self) -> bool {
        matches!(self, Dtype::Int64 | Dtype::Int32)
    }

    /// Whether `model.half()` and the weights-dtype setting cast it (PyTorch casts only
    /// floating-point tensors: ids and masks keep their dtype).
    pub fn is_floating_point(self) -> bool {
        matches!(
            self,
            Dtype::Float32 | Dtype::Float64 | Dtype::Float16 | Dtype::Bfloat16
        )
    }
}

/// The adjustable dimension: what it means, its default and its bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
            input.check(i)?;
            uses_size |= input.shape.contains(&Dim::Named(DimName::Size));
            if let Some(n) = &input.name {
                if let Some(j) = self.inputs[..i].iter().position(|o| o.name.as_ref() == Some(n)) {
                    return Err(format!("inputs {j} and {i} are both named `{n}`"));
                }
            }
        }
        if let Some(source) = &self.source {
            module_source(source)?;
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

    /// "[batch, 3, size, size] float32", or for several inputs
    /// "ids [batch, size] int64 in 0..30000 + mask [batch, size] int64 all 1": the inputs in
    /// words, in order.
    pub fn describe_inputs(&self) -> String {
        self.inputs
            .iter()
            .map(InputSpec::describe)
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// What switching the module to train mode changed, measured by the engine when it loaded
/// the file (two train-mode passes and one eval-mode pass on the same input): TorchScript
/// hides which layers a module has, so the page says what was seen instead of guessing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// The longest hub repository name served (`ORG/NAME`; the Hub allows 96 for the name).
pub const MAX_HUB_NAME_LEN: usize = 128;

/// Whether `name` can name a decoder read from a Hugging Face hub cache: `ORG/NAME` (or
/// `NAME`), each part letters, digits, `_`, `-` and `.`, not starting with `.`.
pub fn valid_hub_name(name: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty() && !p.starts_with('.') && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    name.len() <= MAX_HUB_NAME_LEN
        && match name.split_once('/') {
            Some((org, repo)) => part(org) && part(repo),
            None => part(name),
        }
}

struct Registry {
    served: Vec<Arc<TeamModel>>,
    /// Names of files the models directory holds but this process refused, each with
    /// why ("broken.pt: does not load as TorchScript: ..."), see [`register_refused`].
    refused: Vec<(String, String)>,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    served: Vec::new(),
    refused: Vec::new(),
});

fn read() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

/// Makes `models` the team models this process serves (replacing any registered before:
/// the server and the CLI call it once with what the engine loaded, the browser with what
/// `/api/info` lists).
pub fn register(models: Vec<TeamModel>) {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner()).served = models.into_iter().map(Arc::new).collect();
}

/// The names built into Gradless, which no file of a models directory may take: the
/// built-in models' ([`crate::ModelId::ALL`]) and the decoder presets'
/// ([`crate::decoder::presets`]).
pub fn built_in_names() -> Vec<&'static str> {
    crate::ModelId::ALL
        .iter()
        .map(|m| m.as_str())
        .chain(crate::decoder::presets().iter().map(|p| p.name.as_str()))
        .collect()
}

/// Whether `name` is built into Gradless (see [`built_in_names`]).
pub fn is_built_in(name: &str) -> bool {
    built_in_names().contains(&name)
}

/// Remembers the files of the models directory that were not served, by model name (the
/// file's stem) with the reason, replacing any remembered before. A request for one of
/// them is then answered with that reason ([`crate::ModelId::unknown_message`]) rather
/// than a bare "unknown model": the reason is what the person needs, and it would
/// otherwise sit only in the server's log.
pub fn register_refused(refused: Vec<(String, String)>) {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner()).refused = refused;
}

/// Why the models directory's `name` is not served, when it holds such a file that was
/// refused: "FILE: reason".
pub fn refusal(name: &str) -> Option<String> {
    read()
        .refused
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, why)| why.clone())
}

/// The team model served under `name`, if any.
pub fn lookup(name: &str) -> Option<Arc<TeamModel>> {
    read().served.iter().find(|m| m.name == name).cloned()
}

/// Every team model this process serves, in registration order.
pub fn served() -> Vec<Arc<TeamModel>> {
    read().served.clone()
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
    fn several_inputs_each_have_their_shape_dtype_and_values() {
        let two = sidecar(
            r#"{"display_name": "Tagger", "inputs": [
                  {"name": "ids", "shape": ["batch", "size"], "dtype": "int64", "high": 30000},
                  {"name": "mask", "shape": ["batch", "size"], "dtype": "int64", "fill": 1},
                  {"shape": ["batch", "size"], "dtype": "bool", "fill": 0}],
                "size": {"meaning": "tokens", "default": 128, "max": 512}}"#,
        )
        .unwrap();
        assert_eq!(two.shapes(4, 16), vec![vec![4, 16]; 3]);
        assert_eq!(
            two.describe_inputs(),
            "ids [batch, size] int64 in 0..30000 + mask [batch, size] int64 all 1 + [batch, size] bool all False"
        );
        let m = TeamModel::new("tagger".into(), two, 1, TrainingEffect {
            random_in_train: false,
            train_differs_from_eval: false,
        });
        assert!(m.input_meaning.starts_with("tokens (inputs ids [batch, size]"), "{}", m.input_meaning);
        let input = |fields: &str| {
            format!(
                r#"{{"display_name": "x", "inputs": [{{"shape": ["batch", 4], "dtype": "float32"}}, {{"shape": ["batch", 4], {fields}}}]}}"#
            )
        };
        for (fields, says) in [
            (r#""dtype": "int64""#, "input 1: an integer input needs `high`"),
            (r#""dtype": "int64", "high": 5, "fill": 1"#, "exclude each other"),
            (r#""dtype": "int64", "fill": 0.5"#, "whole number"),
            (r#""dtype": "bool""#, "a bool input needs `fill`"),
            (r#""dtype": "bool", "fill": 2"#, "0 or 1"),
            (r#""dtype": "float32", "high": 3"#, "`high` is for integer inputs"),
            (r#""name": "1st""#, "identifier"),
            (r#""name": "x-y""#, "identifier"),
        ] {
            let e = sidecar(&input(fields)).unwrap_err();
            assert!(e.contains(says), "{fields}: {e}");
        }
        let e = sidecar(
            r#"{"display_name": "x", "inputs": [{"name": "a", "shape": ["batch"]}, {"name": "a", "shape": ["batch"]}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("inputs 0 and 1 are both named `a`"), "{e}");
        let e = sidecar(
            r#"{"display_name": "x", "inputs": [{"shape": ["batch"]}, {"name": "m", "shape": [2, 3]}]}"#,
        )
        .unwrap_err();
        assert!(e.starts_with("input 1 (`m`):"), "{e}");
    }

    #[test]
    fn names_are_safe_for_urls_and_files() {
        assert!(valid_name("detector_v3-small"));
        for bad in ["", "../x", "a b", "x.pt", &"a".repeat(MAX_NAME_LEN + 1)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
