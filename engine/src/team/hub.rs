//! A Hugging Face hub cache, read as transformers reads it (huggingface_hub's layout): a
//! repository `ORG/NAME` is the folder `models--ORG--NAME`, whose `refs/main` names the
//! revision whose files are in `snapshots/REV/` (symlinks into `blobs/`, followed as any
//! file is). Nothing here touches the network: a cache holds what was downloaded before.

use std::path::{Path, PathBuf};

use super::Problem;

/// The hub cache transformers would read: `HF_HUB_CACHE`, else `HF_HOME/hub`, else
/// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
pub fn default_cache() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(c) = var("HF_HUB_CACHE") {
        return Some(c);
    }
    if let Some(home) = var("HF_HOME") {
        return Some(home.join("hub"));
    }
    let cache = var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")))?;
    Some(cache.join("huggingface").join("hub"))
}

/// The name `ORG/NAME` of a cache folder `models--ORG--NAME` (`NAME` alone for a repository
/// without an organisation), when `folder` is one.
pub fn repo_name(folder: &str) -> Option<String> {
    let rest = folder.strip_prefix("models--")?;
    Some(match rest.split_once("--") {
        Some((org, name)) => format!("{org}/{name}"),
        None => rest.to_string(),
    })
}

/// For a hub cache's repository folder: its name and the snapshot `refs/main` names, or why
/// it cannot be served. `None` for any other folder, and for a cached repository that is
/// not a model with a `config.json` (a tokenizer alone, a dataset).
pub fn snapshot(path: &Path) -> Option<Result<(String, PathBuf), Problem>> {
    let folder = path.file_name()?.to_str()?;
    let name = repo_name(folder)?;
    let problem = |reason: String| Some(Err(Problem { file: format!("{folder}/"), reason }));
    if !protocol::team::valid_hub_name(&name) {
        return problem(format!("`{name}` cannot name a model here: a repository is ORG/NAME of letters, digits, `_`, `-` and `.`"));
    }
    let refs = path.join("refs").join("main");
    let rev = match std::fs::read_to_string(&refs) {
        Ok(r) => r.trim().to_string(),
        // A cache without refs/main (only a pinned revision downloaded) has no snapshot that
        // transformers would pick by name either.
        Err(_) if !path.join("snapshots").is_dir() => return None,
        Err(e) => return problem(format!("refs/main cannot be read ({e}): which snapshot transformers would load is unknown")),
    };
    if rev.is_empty() || rev.contains(['/', '\\']) || rev.starts_with('.') {
        return problem(format!("refs/main names `{rev}`, which is not a revision"));
    }
    let snapshot = path.join("snapshots").join(&rev);
    if !snapshot.join("config.json").is_file() {
        return match snapshot.is_dir() {
            true => None,
            false => problem(format!("refs/main names revision {rev}, and snapshots/{rev} is not in the cache")),
        };
    }
    Some(Ok((name, snapshot)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_folder_is_named_as_its_repository() {
        assert_eq!(repo_name("models--Qwen--Qwen3-0.6B").as_deref(), Some("Qwen/Qwen3-0.6B"));
        assert_eq!(repo_name("models--gpt2").as_deref(), Some("gpt2"));
        assert_eq!(repo_name("datasets--x--y"), None);
        assert_eq!(repo_name("llama"), None);
    }
}
