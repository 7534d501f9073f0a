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
use crate::store::{RecordStore, Store};

#[derive(Clone)]
pub struct AppState {
    /// This process's device worker; `None` on a fleet front, whose runs go to
    /// [`AppState::fleet`]'s workers.
    pub worker: Option<Arc<Worker>>,
    /// A fleet front's link to the workers (`gradless serve --nats ...`).
    pub fleet: Option<Arc<fleet::front::Front>>,
    /// Runs this process is measuring or has measured (their live event streams).
    pub runs: Arc<Runs>,
    /// Every finished run and experiment, kept across restarts (read here; written
    /// through [`AppState::recorder`] or off the async threads).
    pub store: Arc<dyn RecordStore>,
    /// Writes finished runs' records off the device thread.
    pub recorder: Arc<Recorder>,
    /// Token and rate limit for starting work.
    pub guard: Arc<Guard>,
    /// Which hosts this server answers to and which pages may drive it.
    pub origins: Arc<Origins>,
    /// What this server offers: computed once at start (the models need building to count, or
    /// this executable's earlier counts: `crate::models::CountCache`), or on a fleet front
    /// from the live workers' announcements.
    pub info: Arc<InfoCell>,
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
    pub store: Arc<dyn RecordStore>,
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
            store: Arc::new(Store::open(std::path::Path::new(":memory:"))?),
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

/// The [`ServerInfo`] pages and `/api/info` show now.
pub struct InfoCell(std::sync::RwLock<Arc<ServerInfo>>);

impl InfoCell {
    pub fn new(info: ServerInfo) -> InfoCell {
        InfoCell(std::sync::RwLock::new(Arc::new(info)))
    }

    pub fn current(&self) -> Arc<ServerInfo> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set(&self, info: ServerInfo) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(info);
    }
}

impl AppState {
    /// This process's device worker (single-process mode; fleet fronts route the calls
    /// that need one to their own handlers, so this is never reached there).
    pub fn worker(&self) -> Result<&Arc<Worker>, crate::error::ApiError> {
        self.worker.as_ref().ok_or(crate::error::ApiError::Unavailable)
    }
}
