//! The team decoders this process serves, beside the presets: registered at start-up from
//! the models directory (the browser: from `/api/info`), looked up by name.

use std::sync::{Arc, RwLock};

use super::{presets, DecoderModel};

static TEAM: RwLock<Vec<Arc<DecoderModel>>> = RwLock::new(Vec::new());

/// Makes `models` the team decoders this process serves (the server and the CLI call it
/// with what they found in the models directory; the browser with what `/api/info` lists).
/// A name a preset has is left out.
pub fn register(models: Vec<DecoderModel>) {
    *TEAM.write().unwrap_or_else(|e| e.into_inner()) = models
        .into_iter()
        .filter(|m| !presets().iter().any(|p| p.name == m.name))
        .map(Arc::new)
        .collect();
}

/// The served decoder called `name`: a preset or a registered team decoder.
pub fn lookup(name: &str) -> Option<Arc<DecoderModel>> {
    presets().iter().find(|m| m.name == name).cloned().or_else(|| {
        TEAM.read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|m| m.name == name)
            .cloned()
    })
}

/// Every decoder this process serves: the presets, then the team's.
pub fn served() -> Vec<Arc<DecoderModel>> {
    let team = TEAM.read().unwrap_or_else(|e| e.into_inner()).clone();
    presets().iter().cloned().chain(team).collect()
}

/// Team decoders only (what `/api/info` lists for the browser to register).
pub fn team_served() -> Vec<DecoderModel> {
    TEAM.read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|m| (**m).clone())
        .collect()
}
