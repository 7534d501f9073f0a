//! What the server and the CLI say about the models: facts the engine measures (parameter
//! counts, by building each model on the device thread) joined with the protocol's
//! descriptions. Neither the server nor the CLI owns this; both call it.
//!
//! Building every model takes seconds of CPU (ResNet-50's 25 M random weights among them),
//! which a server start would pay each time for five numbers that only change when the
//! code does. `gradless serve` therefore keeps the counts this very executable measured in
//! a small file ([`CountCache`]) and counts again only when the executable changed.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use engine::Worker;
use protocol::{ModelId, ModelInfo};
use serde::{Deserialize, Serialize};

/// Every model with its parameter count, built once on the device thread.
pub fn model_infos(worker: &Worker) -> Result<Vec<ModelInfo>> {
    let counts = count_parameters(worker)?;
    Ok(with_fit(worker, infos(worker.catalog(), &counts)))
}

/// Each decoder with why the Generate page's default generation on it cannot fit this
/// server's budget, from the footprint admission refuses it with (the page says so in its
/// picker, before Run).
fn with_fit(worker: &Worker, mut models: Vec<ModelInfo>) -> Vec<ModelInfo> {
    let device = worker.devices().first().map_or(protocol::DeviceKind::Cpu, |d| d.kind);
    let Some(budget) = worker.memory_budget(device) else { return models };
    for m in models.iter_mut().filter(|m| m.id.is_decoder()) {
        let spec = protocol::RunSpec { model: m.id, ..app::gen_settings::default_on(device, protocol::DeviceChoice::Auto) };
        m.fit = engine::lab::decoder_refusal(&spec, budget);
    }
    models
}

/// Like [`model_infos`], but reads the counts from `cache` when this executable measured
/// them before, and writes them there after counting. A cache that cannot be read or
/// written only costs the counting.
pub fn model_infos_cached(worker: &Worker, cache: &CountCache) -> Result<Vec<ModelInfo>> {
    if let Some(counts) = cache.read() {
        tracing::debug!(path = %cache.path.display(), "parameter counts from this executable's earlier start");
        return Ok(with_fit(worker, infos(worker.catalog(), &counts)));
    }
    let counts = count_parameters(worker)?;
    if let Err(e) = cache.write(&counts) {
        tracing::debug!(path = %cache.path.display(), "could not keep the parameter counts: {e}");
    }
    Ok(with_fit(worker, infos(worker.catalog(), &counts)))
}

/// The built-in models' counts (a team model's count was taken when its file was loaded).
fn count_parameters(worker: &Worker) -> Result<BTreeMap<String, u64>> {
    worker
        .call(|lab| {
            ModelId::ALL
                .into_iter()
                .map(|id| {
                    let parameters = lab.parameters(id).map_err(|f| f.message)?;
                    Ok((id.as_str().to_string(), parameters))
                })
                .collect::<Result<BTreeMap<_, _>, String>>()
        })
        .context("the measurement worker stopped")?
        .map_err(|e| anyhow::anyhow!("could not build the models: {e}"))
}

/// Every served model (built-in, then the team's) with its count.
fn infos(catalog: &protocol::Catalog, counts: &BTreeMap<String, u64>) -> Vec<ModelInfo> {
    catalog
        .models()
        .into_iter()
        .map(|id| {
            let team = id.team().cloned();
            let decoder = id.decoder().cloned();
            // A decoder's count comes from its config: building the 8B shape to count it
            // would take 32 GB.
            let parameters = match (&team, &decoder) {
                (Some(m), _) => m.parameters,
                (None, Some(d)) => d.config.parameters(),
                (None, None) => counts.get(id.as_str()).copied().unwrap_or(0),
            };
            ModelInfo {
                id,
                name: id.display_name().to_string(),
                parameters,
                input_meaning: id.input().meaning.to_string(),
                default_input_size: id.input().default,
                has_dropout: id.has_dropout(),
                has_batchnorm: id.has_batchnorm(),
                team,
                decoder,
                fit: None,
            }
        })
        .collect()
}

/// Parameter counts measured by one executable, kept in a file beside the user's other
/// caches. The file names the executable it came from (path, size, modification time):
/// any rebuild makes it stale, so a count shown is always one this binary measured.
pub struct CountCache {
    path: PathBuf,
    executable: String,
}

#[derive(Serialize, Deserialize)]
struct CountFile {
    executable: String,
    parameters: BTreeMap<String, u64>,
}

impl CountCache {
    /// The cache for the running executable, under `$XDG_CACHE_HOME/gradless` (or
    /// `~/.cache/gradless`); `None` when neither the executable nor a cache directory
    /// can be found.
    pub fn for_this_executable() -> Option<CountCache> {
        let exe = std::env::current_exe().ok()?;
        let dir = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
            .join("gradless");
        Some(CountCache::new(&exe, &dir))
    }

    /// The cache for `exe`, in `dir`: one file per executable path, so several builds
    /// (worktrees, installs) on one machine do not evict each other.
    pub fn new(exe: &Path, dir: &Path) -> CountCache {
        let meta = std::fs::metadata(exe).ok();
        let modified = meta
            .as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let size = meta.map_or(0, |m| m.len());
        let mut h = std::hash::DefaultHasher::new();
        exe.hash(&mut h);
        CountCache {
            path: dir.join(format!("model-parameters-{:016x}.json", h.finish())),
            executable: format!(
                "{} {} bytes modified {modified} v{}",
                exe.display(),
                size,
                env!("CARGO_PKG_VERSION")
            ),
        }
    }

    /// The counts, when the file is this executable's and names every model.
    fn read(&self) -> Option<BTreeMap<String, u64>> {
        let file: CountFile = serde_json::from_slice(&std::fs::read(&self.path).ok()?).ok()?;
        let complete = ModelId::ALL
            .iter()
            .all(|id| file.parameters.get(id.as_str()).is_some_and(|&n| n > 0));
        (file.executable == self.executable && complete).then_some(file.parameters)
    }

    fn write(&self, counts: &BTreeMap<String, u64>) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let body = serde_json::to_vec(&CountFile {
            executable: self.executable.clone(),
            parameters: counts.clone(),
        })?;
        // Written whole, then renamed: a reader never sees half a file.
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, body)?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts() -> BTreeMap<String, u64> {
        ModelId::ALL
            .iter()
            .map(|id| (id.as_str().to_string(), 7))
            .collect()
    }

    #[test]
    fn counts_are_kept_for_the_same_executable_only() {
        let dir = std::env::temp_dir().join(format!("gradless-count-cache-{}", std::process::id()));
        let exe = dir.join("gradless");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&exe, b"one build").unwrap();
        let cache = CountCache::new(&exe, &dir);
        assert!(cache.read().is_none(), "nothing kept yet");
        cache.write(&counts()).unwrap();
        assert_eq!(CountCache::new(&exe, &dir).read(), Some(counts()));

        // A rebuilt executable (another size) does not trust the old counts.
        std::fs::write(&exe, b"another, longer build").unwrap();
        assert!(CountCache::new(&exe, &dir).read().is_none());

        // Nor does a file that lacks a model.
        let cache = CountCache::new(&exe, &dir);
        let mut partial = counts();
        partial.remove(ModelId::ALL[0].as_str());
        cache.write(&partial).unwrap();
        assert!(cache.read().is_none());
        std::fs::remove_dir_all(&dir).ok();
    }
}
