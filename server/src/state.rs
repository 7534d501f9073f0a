//! What every request handler shares.

use std::sync::Arc;

use axum::extract::FromRef;
use engine::Worker;
use leptos::config::LeptosOptions;
use protocol::ServerInfo;

use crate::runs::Runs;

#[derive(Clone)]
pub struct AppState {
    pub worker: Arc<Worker>,
    pub runs: Arc<Runs>,
    /// What this server offers, computed once at start (the models need building to count).
    pub info: Arc<ServerInfo>,
    pub leptos: LeptosOptions,
    /// Bounds the pitfall experiments waiting for the device (each holds a permit).
    pub experiments: Arc<tokio::sync::Semaphore>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}
