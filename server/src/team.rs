//! The server's and the CLI's side of team models: loading `--models-dir` before the worker
//! starts (the engine checks and probes each file, see `engine::team`) and telling the
//! operator which files were refused and why. A refused file never stops the start: the
//! other models are served. What was loaded is the [`protocol::Catalog`] the worker gets.

use anyhow::Result;

use crate::config::EngineArgs;

/// Loads the models directory, if one is given, logs what it serves and refuses, and
/// returns the catalog of what is served. Errors only when the directory itself cannot be
/// read: that is a typo in the command, better said at once than served as an empty list.
pub fn load(engine: &EngineArgs) -> Result<protocol::Catalog> {
    let mut dirs: Vec<std::path::PathBuf> = engine.models_dir.iter().cloned().collect();
    if engine.hf_cache {
        let cache = engine::team::hub::default_cache()
            .ok_or_else(|| anyhow::anyhow!("--hf-cache: no HF_HUB_CACHE, HF_HOME or HOME says where the hub cache is"))?;
        if !cache.is_dir() {
            anyhow::bail!("--hf-cache: {} is not a directory (HF_HUB_CACHE, HF_HOME or ~/.cache/huggingface/hub)", cache.display());
        }
        dirs.push(cache);
    }
    if dirs.is_empty() {
        return Ok(protocol::Catalog::built_in());
    }
    let limit = engine.memory_limit_mib.map(|m| m * 1024 * 1024);
    let paths: Vec<&std::path::Path> = dirs.iter().map(|d| d.as_path()).collect();
    let loaded = engine::team::load_dirs(&paths, limit).map_err(anyhow::Error::msg)?;
    let dir = dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
    for p in &loaded.problems {
        tracing::warn!("team model {} is not served: {}", p.file, p.reason);
    }
    for m in &loaded.models {
        tracing::info!(
            model = %m.name,
            parameters = m.parameters,
            "team model served: {} ({})",
            m.sidecar.display_name,
            m.training.describe()
        );
    }
    for d in &loaded.decoders {
        tracing::info!(model = %d.name, parameters = d.config.parameters(), "team decoder served: {}", d.provenance());
    }
    tracing::info!(
        dir = %dir,
        served = loaded.models.len() + loaded.decoders.len(),
        refused = loaded.problems.len(),
        "models directory read"
    );
    Ok(loaded.catalog())
}
