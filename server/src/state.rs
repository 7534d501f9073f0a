//! What every request handler shares.

use std::sync::Arc;

use axum::extract::FromRef;
use engine::Worker;
use leptos::config::LeptosOptions;
use protocol::ServerInfo;

use crate::guard::Guard;
use crate::runs::Runs;
use crate::store::Store;

#[derive(Clone)]
pub struct AppState {
    pub worker: Arc<Worker>,
    /// Runs this process is measuring or has measured (their live event streams).
    pub runs: Arc<Runs>,
    /// Every finished run and experiment, kept across restarts.
    pub store: Arc<Store>,
    /// Token and rate limit for starting work.
    pub guard: Arc<Guard>,
    /// What this server offers, computed once at start (the models need building to count).
    pub info: Arc<ServerInfo>,
    pub leptos: LeptosOptions,
    /// Bounds the pitfall experiments waiting for the device (each holds a permit).
    pub experiments: Arc<tokio::sync::Semaphore>,
    /// The `Content-Security-Policy` of /embed/ pages (which sites may frame them).
    pub embed_csp: Arc<str>,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

/// The services around the worker, chosen by configuration.
pub struct Services {
    pub store: Store,
    pub guard: Guard,
    /// `frame-ancestors ...` for embeds (see [`crate::config::frame_ancestors`]).
    pub embed_csp: String,
}

impl Services {
    /// A database in memory, no token, no rate limit, embeds framed by this origin only.
    pub fn ephemeral() -> anyhow::Result<Services> {
        Ok(Services {
            store: Store::open(std::path::Path::new(":memory:"))?,
            guard: Guard::open(),
            embed_csp: "frame-ancestors 'self'".into(),
        })
    }
}
