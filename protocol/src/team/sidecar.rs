//! What a team model's `NAME.json` sidecar says: its inputs (shape, dtype, values), its
//! adjustable size and its Python source, and the rules a sidecar follows before its module
//! is loaded.

use serde::{Deserialize, Serialize};

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

