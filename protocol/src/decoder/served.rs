//! The team decoders this process serves, beside the presets: registered at start-up from
//! the models directory (the browser: from `/api/info`), looked up by name.

use std::sync::RwLock;

use super::{presets, DecoderModel};

static TEAM: RwLock<Vec<&'static DecoderModel>> = RwLock::new(Vec::new());

/// Makes `models` the team decoders this process serves (the server and the CLI call it
/// with what they found in the models directory; the browser with what `/api/info` lists).
/// Registration leaks one small entry per model, once per process.
pub fn register(models: Vec<DecoderModel>) {
    let mut reg = TEAM.write().unwrap_or_else(|e| e.into_inner());
    let mut served = Vec::with_capacity(models.len());
    for m in models {
        if presets().iter().any(|p| p.name == m.name) {
            continue;
        }
        match reg.iter().find(|old| ***old == m) {
            Some(old) => served.push(*old),
            None => served.push(&*Box::leak(Box::new(m))),
        }
    }
    *reg = served;
}

/// The served decoder called `name`: a preset or a registered team decoder.
pub fn lookup(name: &str) -> Option<&'static DecoderModel> {
    presets().iter().find(|m| m.name == name).or_else(|| {
        TEAM.read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|m| m.name == name)
            .copied()
    })
}

/// Every decoder this process serves: the presets, then the team's.
pub fn served() -> Vec<&'static DecoderModel> {
    let team = TEAM.read().unwrap_or_else(|e| e.into_inner()).clone();
    presets().iter().chain(team).collect()
}

/// Team decoders only (what `/api/info` lists for the browser to register).
pub fn team_served() -> Vec<DecoderModel> {
    TEAM.read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|m| (*m).clone())
        .collect()
}
