//! What every request handler shares.

use std::sync::Arc;

use axum::extract::FromRef;
use engine::Worker;
use leptos::config::LeptosOptions;
use protocol::ServerInfo;

use crate::guard::Guard;
use crate::origin::Origins;
use crate::recorder::Recorder;
use crate::runs::Runs;
use crate::store::Store;

#[derive(Clone)]
pub struct AppState {
    pub worker: Arc<Worker>,
    /// Runs this process is measuring or has measured (their live event streams).
    pub runs: Arc<Runs>,
    /// Every finished run and experiment, kept across restarts (read here; written
    /// through [`AppState::recorder`] or off the async threads).
    pub store: Arc<Store>,
    /// Writes finished runs' records off the device thread.
    pub recorder: Arc<Recorder>,
    /// Token and rate limit for starting work.
    pub guard: Arc<Guard>,
    /// Which hosts this server answers to and which pages may drive it.
    pub origins: Arc<Origins>,
    /// What this server offers, computed once at start (the models need building to count, or
    /// this executable's earlier counts: `crate::models::CountCache`).
    pub info: Arc<ServerInfo>,
    pub leptos: LeptosOptions,
    /// Bounds the pitfall experiments waiting for the device (each holds a permit).
    pub experiments: Arc<tokio::sync::Semaphore>,
    /// Bounds the event streams open at once (each holds a permit).
    pub streams: Arc<tokio::sync::Semaphore>,
    /// How many permits `streams` started with.
    pub max_streams: usize,
    /// The `Content-Security-Policy: frame-ancestors` of /embed/ pages.
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
    pub origins: Origins,
    /// `frame-ancestors ...` for embeds (see [`crate::config::frame_ancestors`]).
    pub embed_csp: String,
    /// Event streams that may be open at once.
    pub max_streams: usize,
    /// Where this executable keeps the parameter counts it measured (`None`: count at
    /// every start).
    pub model_counts: Option<crate::models::CountCache>,
}

impl Services {
    /// A database in memory, no token, no rate limit, loopback names on any port, embeds
    /// framed by this origin only.
    pub fn ephemeral() -> anyhow::Result<Services> {
        Ok(Services {
            store: Store::open(std::path::Path::new(":memory:"))?,
            guard: Guard::open(),
            origins: Origins::local(),
            embed_csp: "frame-ancestors 'self'".into(),
            max_streams: DEFAULT_MAX_STREAMS,
            model_counts: None,
        })
    }
}

/// Event streams open at once, by default: server/tests/load.rs holds a thousand viewers
/// of one run on a 2-core machine, every one admitted and served to the end (each stream
/// costs a task, a socket and hyper's buffers: tens of KB). Delivery then lags: p99 1.2 s
/// for a tiny model's burst of 104 events, clients on the same cores.
pub const DEFAULT_MAX_STREAMS: usize = 2048;
