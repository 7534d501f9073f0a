//! Team models: TorchScript files the server's operator put in its models directory
//! (`--models-dir`), each `NAME.pt` described by a `NAME.json` sidecar ([`Sidecar`], in
//! `sidecar`).
//!
//! This module owns the vocabulary: what a sidecar holds, what the engine measured about a
//! module when it loaded it ([`TeamModel`]), and which names a team model may take. Which
//! team models a process serves is not here: it is a [`crate::Catalog`] value, built by the
//! server and the CLI from what the engine loaded and by the browser from `/api/info`.

use serde::{Deserialize, Serialize};

mod sidecar;
pub use sidecar::*;

/// The longest team model name: names travel in URLs and file names.
pub const MAX_NAME_LEN: usize = 64;

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
    /// Where the process that loaded it read the file (the engine builds the model from
    /// it). Never sent: the catalog a browser reads from `/api/info` has none.
    #[serde(skip)]
    pub path: Option<std::path::PathBuf>,
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
            path: None,
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
