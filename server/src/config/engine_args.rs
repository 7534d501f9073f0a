//! The engine's settings, shared by the server, the worker and every CLI command.

use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::Args;

/// Engine settings shared by the server and the CLI.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// libtorch intra-op CPU threads for runs that do not choose (default: half the CPUs).
    #[arg(long = "default-threads", env = "GRADLESS_THREADS")]
    pub threads: Option<u32>,
    /// Largest batch a run may ask for.
    #[arg(long, env = "GRADLESS_MAX_BATCH", default_value_t = 1024)]
    pub max_batch: u32,
    /// Treat a run that allocates more than this many MiB as out of memory (a device budget).
    #[arg(long, env = "GRADLESS_MEMORY_LIMIT_MIB")]
    pub memory_limit_mib: Option<u64>,
    /// The team's own models: every NAME.pt (TorchScript) with its NAME.json sidecar in this
    /// directory is served beside the built-in models (`bench/export_model.py` writes them).
    /// A file that does not load or does not match its sidecar is reported and skipped.
    /// A folder holding a Hugging Face `config.json` (with `model.safetensors` or a sharded
    /// index, and its `tokenizer.json`) is a decoder served under the folder's name; a hub
    /// cache's `models--ORG--NAME` as ORG/NAME.
    #[arg(long, env = "GRADLESS_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Also serve the decoders of the Hugging Face hub cache transformers reads
    /// (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`), each as
    /// ORG/NAME at the revision `refs/main` names. Never touches the network.
    #[arg(long, env = "GRADLESS_HF_CACHE")]
    pub hf_cache: bool,
    /// The text a tokenized decoder's quality is measured on (`generate.quality`: bits per
    /// byte and perplexity under each weights dtype, quantization and KV dtype). Default:
    /// the trained model's held-out slice of PyTorch's source.
    #[arg(long, env = "GRADLESS_QUALITY_TEXT")]
    pub quality_text: Option<PathBuf>,
    /// A Python with PyTorch that times the per-call-overhead cards (inference-vs-nograd,
    /// warm-up, timing-gpu-work, item-per-batch, cuda-graphs) a second time, beside Gradless's
    /// figures: Gradless calls libtorch from Rust, a team's code pays Python per op. Default:
    /// the venv's, `$GRADLESS_VENV/bin/python` (`~/.cache/gradless/venv` unless set), when
    /// it exists; `off` (or empty): none (the cards say so in a note).
    #[arg(long, env = "GRADLESS_PYTHON", default_value = venv_python(), value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from))]
    pub python: Option<PathBuf>,
}

impl EngineArgs {
    /// The Python the cards' Python side runs with (`None` for `off`).
    pub fn python(&self) -> Option<PathBuf> {
        self.python.clone().filter(|p| !p.as_os_str().is_empty() && p.as_os_str() != "off")
    }
}

/// The venv's Python where it exists, as scripts/env.sh finds the venv: `$GRADLESS_VENV`,
/// else `$GRADLESS_CACHE/venv`, else `~/.cache/gradless/venv`.
fn venv_python() -> Option<&'static str> {
    static FOUND: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
            let venv = var("GRADLESS_VENV")
                .or_else(|| var("GRADLESS_CACHE").map(|c| c.join("venv")))
                .or_else(|| var("HOME").map(|h| h.join(".cache/gradless/venv")))?;
            let python = venv.join("bin/python");
            python.is_file().then(|| python.to_str().map(String::from)).flatten()
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn python_is_a_path_or_off() {
        #[derive(Debug, Parser)]
        struct Engine {
            #[command(flatten)]
            engine: EngineArgs,
        }
        let parse = |args: &[&str]| Engine::try_parse_from(std::iter::once("gradless").chain(args.iter().copied())).unwrap().engine;
        assert_eq!(parse(&["--python", "/opt/py/bin/python"]).python(), Some(PathBuf::from("/opt/py/bin/python")));
        assert_eq!(parse(&["--python", "off"]).python(), None);
        assert_eq!(parse(&["--python", ""]).python(), None);
        // The default is the venv's Python, only where it exists.
        assert!(parse(&[]).python().is_none_or(|p| p.ends_with("bin/python") && p.is_file()));
    }
}
