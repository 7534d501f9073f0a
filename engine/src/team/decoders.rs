//! Team decoders: a folder in the models directory holding a Hugging Face `config.json`
//! (and, optionally, the weights `save_pretrained` writes beside it: `model.safetensors`, or
//! `model.safetensors.index.json` and its shards) is a decoder served beside the
//! TorchScript models. Its weight files are checked here (`WeightFiles::find`: a missing
//! or truncated shard, an index naming a file outside the folder, a dtype Gradless cannot
//! read refuse the folder, naming the file), and described in every report. Its config is read and checked at
//! start-up by its family's reader (`crate::models::decoder::read_config`: Llama, Mistral,
//! Qwen2, Qwen3, Gemma 3, Qwen3-MoE, Mixtral); its weights are read when a run builds it
//! (`crate::models::decoder`). Its `tokenizer.json`, when it has one, is read and checked
//! here too (`crate::models::decoder::text`): its prompt can then be text.

use std::path::Path;

use protocol::decoder::{DecoderModel, DecoderSource};

use super::Problem;

/// Reads one folder as a decoder: its name must be free, its `config.json` one Gradless
/// builds.
pub(super) fn read_folder(dir: &Path) -> Option<Result<DecoderModel, Problem>> {
    let name = dir.file_name()?.to_string_lossy().into_owned();
    if dir.join("config.json").is_file() && !protocol::team::valid_name(&name) {
        return Some(Err(Problem {
            file: format!("{name}/config.json"),
            reason: format!(
                "`{name}` cannot name a model: use letters, digits, `_` and `-` (at most {} characters)",
                protocol::team::MAX_NAME_LEN
            ),
        }));
    }
    read_folder_as(dir, &name, &name)
}

/// [`read_folder`] served under `name`, its folder said as `folder` (a hub cache's snapshot:
/// `ORG/NAME` from `models--ORG--NAME/snapshots/REV`).
pub(super) fn read_folder_as(dir: &Path, name: &str, folder: &str) -> Option<Result<DecoderModel, Problem>> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        return None;
    }
    let name = name.to_string();
    let file = format!("{name}/config.json");
    let problem = |reason: String| {
        Some(Err(Problem {
            file: file.clone(),
            reason,
        }))
    };
    if protocol::ModelId::ALL.iter().any(|m| m.as_str() == name)
        || protocol::decoder::presets().iter().any(|p| p.name == name)
    {
        return problem(format!(
            "`{name}` is the name of a built-in model: rename the folder"
        ));
    }
    let text = match std::fs::read_to_string(&config_path) {
        Ok(t) => t,
        Err(e) => return problem(format!("cannot be read: {e}")),
    };
    let (config, read_past) = match crate::models::decoder::registry::read_config_noting(&text) {
        Ok(c) => c,
        Err(e) => return problem(e),
    };
    // A weights problem names the folder; its reason names the file or the tensor.
    let weights_problem = |reason: String| Some(Err(Problem { file: format!("{name}/"), reason }));
    let stored = match crate::models::decoder::weights::WeightFiles::find(dir) {
        Ok(None) => None,
        Ok(Some(files)) => match files.stored() {
            Ok(s) => Some(s),
            Err(e) => return weights_problem(e),
        },
        Err(e) => return weights_problem(e),
    };
    let weights = stored.is_some();
    let tokenizer = match crate::models::decoder::text::read_tokenizer(dir, &text, config.vocab_size) {
        Ok(t) => t,
        Err(e) => return Some(Err(Problem { file: format!("{name}/{}", crate::models::decoder::text::TOKENIZER), reason: e })),
    };
    Some(Ok(DecoderModel {
        display_name: format!("{name} ({})", config.architecture.class_name()),
        name: name.clone(),
        source: DecoderSource::Team {
            folder: folder.to_string(),
            weights,
            stored,
            read_past,
            tokenizer,
            dir: Some(dir.to_path_buf()),
        },
        config,
    }))
}

