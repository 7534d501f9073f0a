//! What every request handler shares ([`AppState`]), and the one way it is built
//! ([`AppState::new`]): from where runs go (a [`Dispatch`]), what the server offers, and
//! the [`Services`] configuration chooses.

use std::sync::Arc;

use axum::extract::FromRef;
use leptos::config::LeptosOptions;
use protocol::ServerInfo;

use crate::access::Guard;
pub use crate::conn::DEFAULT_MAX_STREAMS;
pub use crate::dispatch::InfoCell;
use crate::dispatch::Dispatch;
use crate::origin::Origins;
use crate::recorder::Recorder;
use crate::runs::Runs;
use crate::store::{RecordStore, Store};

#[derive(Clone)]
pub struct AppState {
    /// Where runs go: this process's device worker, or a fleet's workers.
    pub dispatch: Dispatch,
    /// Runs this process is measuring or has measured (their live event streams).
    pub runs: Arc<Runs>,
    /// Every run and experiment, kept across restarts (read here; every write goes
    /// through [`AppState::recorder`]).
    pub store: Arc<dyn RecordStore>,
    /// Writes records off the device thread and the async threads; shutdown waits for it.
    pub recorder: Arc<Recorder>,
    /// Token and rate limit for starting work.
    pub guard: Arc<Guard>,
    /// Which hosts this server answers to and which pages may drive it.
    pub origins: Arc<Origins>,
    /// What this server offers: computed once at start (the models need building to count, or
    /// this executable's earlier counts: `model_counts::CountCache`), or on a fleet front
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
    /// The onboarding paths and their answers (the shipped path and answers in memory until
    /// start-up opens the configured ones).
    pub learn: Arc<crate::learn::Learn>,
    /// The models this server serves (its worker's; a fleet front: the built-in ones, its
    /// workers check what they serve): what request bodies and paths are resolved against.
    pub catalog: protocol::Catalog,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

/// The services around where runs go, chosen by configuration.
pub struct Services {
    pub store: Arc<dyn RecordStore>,
    pub guard: Guard,
    pub origins: Origins,
    /// `frame-ancestors ...` for embeds (made from `--embed-origins` by the configuration).
    pub embed_csp: String,
    /// Event streams that may be open at once.
    pub max_streams: usize,
    /// Where this executable keeps the parameter counts it measured (`None`: count at
    /// every start).
    pub model_counts: Option<crate::model_counts::CountCache>,
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

impl AppState {
    /// The state around `dispatch`, offering `info`, with `experiments` pitfall
    /// experiments allowed to wait, serving the site at `site_root` on `addr`.
    pub fn new(
        dispatch: Dispatch,
        info: ServerInfo,
        experiments: usize,
        site_root: &std::path::Path,
        addr: std::net::SocketAddr,
        services: Services,
    ) -> AppState {
        let leptos = LeptosOptions::builder()
            .output_name("gradless")
            .site_root(site_root.to_string_lossy().to_string())
            .site_pkg_dir("pkg")
            .site_addr(addr)
            .build();
        let max_streams = services.max_streams.max(1);
        AppState {
            catalog: match &dispatch {
                Dispatch::Local(worker) => worker.catalog().clone(),
                _ => protocol::Catalog::built_in(),
            },
            dispatch,
            runs: Arc::new(Runs::new(1000)),
            recorder: Arc::new(Recorder::start(services.store.clone())),
            store: services.store,
            guard: Arc::new(services.guard),
            origins: Arc::new(services.origins),
            info: Arc::new(InfoCell::new(info)),
            leptos,
            experiments: Arc::new(tokio::sync::Semaphore::new(experiments.max(1))),
            streams: Arc::new(tokio::sync::Semaphore::new(max_streams)),
            max_streams,
            embed_csp: services.embed_csp.into(),
            learn: Arc::new(crate::learn::Learn::ephemeral()),
        }
    }

    /// This state with `store` in place of its own (and a recorder writing to it).
    pub fn with_store(mut self, store: Arc<dyn RecordStore>) -> AppState {
        self.recorder = Arc::new(Recorder::start(store.clone()));
        self.store = store;
        self
    }
}
