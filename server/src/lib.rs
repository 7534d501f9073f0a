//! The `gradless` binary's library: the web server (router, API, SSE), the CLI commands and
//! their configuration. `main.rs` only parses the command line and calls in here, so tests
//! reach everything.

// The Lab's view is one deeply nested type; the compiler's default depth is too shallow for it.
#![recursion_limit = "256"]

pub mod api;
pub mod assets;
pub mod cli;
pub mod config;
pub mod conn;
pub mod embeds;
pub mod error;
pub mod export;
pub mod front;
pub mod guard;
pub mod logging;
pub mod models;
pub mod origin;
pub mod pg_store;
pub mod recorder;
pub mod router;
pub mod runs;
pub mod state;
pub mod store;
pub mod team;
pub mod trace_export;
pub mod worker_cmd;

pub use router::router;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use engine::{LabConfig, Worker, WorkerConfig};
use leptos::config::LeptosOptions;
use protocol::{Limits, ServerInfo};

use crate::config::{EngineArgs, ServeArgs};
use crate::guard::Guard;
use crate::state::{AppState, InfoCell, Services};
use crate::store::Store;

/// The worker configuration these settings describe.
pub fn worker_config(
    engine: &EngineArgs,
    queue_capacity: usize,
    run_timeout: Option<Duration>,
) -> WorkerConfig {
    let mut lab = LabConfig::default();
    if let Some(t) = engine.threads {
        lab.threads = t.max(1);
    }
    lab.memory_limit_bytes = engine.memory_limit_mib.map(|m| m * 1024 * 1024);
    WorkerConfig {
        lab,
        limits: Limits {
            max_batch: engine.max_batch,
            ..Limits::default()
        },
        queue_capacity,
        run_timeout,
    }
}

/// Starts the device worker ("could not ..." errors for people, not backtraces).
pub fn start_worker(config: WorkerConfig) -> Result<Worker> {
    Worker::start(config).context("could not start the measurement worker (libtorch)")
}

/// Builds the shared state: the worker, the model list and the site settings.
pub fn build_state(
    worker: Worker,
    site_root: &std::path::Path,
    addr: std::net::SocketAddr,
    services: Services,
) -> Result<AppState> {
    let models = match &services.model_counts {
        Some(cache) => models::model_infos_cached(&worker, cache)?,
        None => models::model_infos(&worker)?,
    };
    let info = ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        libtorch_version: engine::LIBTORCH_VERSION.to_string(),
        devices: worker.devices(),
        models,
        limits: worker.limits().clone(),
        pitfalls: engine::pitfalls::catalogue(),
        auth_required: services.guard.token_required(),
        workers: Vec::new(),
    };
    let experiments = Arc::new(tokio::sync::Semaphore::new(worker_queue_capacity(&worker)));
    let leptos = LeptosOptions::builder()
        .output_name("gradless")
        .site_root(site_root.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build();
    let store = services.store;
    Ok(AppState {
        worker: Some(Arc::new(worker)),
        fleet: None,
        runs: Arc::new(runs::Runs::new(1000)),
        recorder: Arc::new(recorder::Recorder::start(store.clone())),
        store,
        guard: Arc::new(services.guard),
        origins: Arc::new(services.origins),
        info: Arc::new(InfoCell::new(info)),
        leptos,
        experiments,
        streams: Arc::new(tokio::sync::Semaphore::new(services.max_streams.max(1))),
        max_streams: services.max_streams.max(1),
        embed_csp: services.embed_csp.into(),
    })
}

/// Pitfall experiments wait in the same spirit as runs: as many as the run queue holds.
fn worker_queue_capacity(worker: &Worker) -> usize {
    worker.queue_capacity().max(1)
}

/// `gradless serve`: serves until Ctrl-C or SIGTERM, then lets the current run finish
/// (a second signal exits at once).
pub async fn serve(args: ServeArgs) -> Result<()> {
    if args.fleet.nats.is_some() {
        return front::serve(args).await;
    }
    if !args.site_root.join("pkg").exists() {
        tracing::warn!(
            "no built site at {} (pkg/ missing): the page will render but not hydrate; run scripts/build-site.sh",
            args.site_root.display()
        );
    }
    let run_timeout = Duration::from_secs(args.run_timeout_s);
    team::load(&args.engine)?;
    let config = worker_config(&args.engine, args.queue_capacity, Some(run_timeout));
    let embed_csp = config::frame_ancestors(&args.embed_origins).map_err(anyhow::Error::msg)?;
    let db_path = args.db.path();
    let guard = Guard::new(
        args.token.clone(),
        args.rate_limit,
        args.trust_forwarded_for,
    );
    if guard.token_required() {
        tracing::info!("starting runs needs the access token; reading and embeds stay open");
    }
    if let Some(files) = conn::open_files_limit() {
        // Every connection is a descriptor; past the limit `accept` fails (EMFILE) and
        // browsers wait, where the configured limit would have answered them.
        let wanted = args.max_connections as u64 + 64;
        if files < wanted {
            tracing::warn!(
                "this process may open {files} files, fewer than --max-connections {} needs (about {wanted}): raise it with `ulimit -n {wanted}` or lower --max-connections",
                args.max_connections
            );
        }
    }
    let listener =
        listen(args.addr).with_context(|| format!("could not listen on {}", args.addr))?;
    let bound = listener.local_addr()?;
    let origins = origin::Origins::new(bound, args.public_url.as_deref(), &args.allowed_origins)
        .map_err(anyhow::Error::msg)?;
    let site_root = args.site_root.clone();
    let max_streams = args.max_streams;
    // SQLite and libtorch both block: opened off the async threads.
    let state = tokio::task::spawn_blocking(move || -> Result<AppState> {
        let store = Store::open(&db_path)?;
        tracing::info!(path = %db_path.display(), records = store.count().unwrap_or(0), "run database open");
        // Before any run is accepted: whatever is still `running` was being measured by
        // an earlier process on this file that died (only one serves a file at a time).
        let now = engine::device::rfc3339_now();
        for id in store::interrupt_unfinished(&store, &now).context("marking interrupted runs")? {
            tracing::warn!(run = %id, "run {id} was interrupted: the previous server stopped while it was measuring it; its permalink says so");
        }
        let worker = start_worker(config)?;
        build_state(
            worker,
            &site_root,
            bound,
            Services {
                store: Arc::new(store),
                guard,
                origins,
                embed_csp,
                max_streams,
                model_counts: models::CountCache::for_this_executable(),
            },
        )
    })
    .await
    .context("starting the worker panicked")??;
    for d in &state.info.current().devices {
        tracing::info!(device = d.kind.as_str(), name = %d.name, "device available");
    }
    let worker = state.worker()?.clone();
    let recorder = state.recorder.clone();
    tracing::info!("Gradless is serving at http://{bound}");
    let limits = conn::ConnLimits {
        header_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
        max_connections: args.max_connections,
        // The current run has at most its time limit left; its viewers a moment more.
        drain_timeout: run_timeout + Duration::from_secs(10),
    };
    let closing = worker.clone();
    conn::serve(listener, router(state), limits, async move {
        shutdown_signal().await;
        // Refuse new work and cancel what waits, so every open event stream reaches
        // its end and the server can drain; the current run goes on to finish.
        tracing::info!("shutting down: finishing the current run, cancelling queued ones (a second signal stops at once)");
        closing.close();
        tokio::spawn(async {
            shutdown_signal().await;
            tracing::warn!("second signal: stopping now");
            std::process::exit(130);
        });
    })
    .await;
    tokio::task::spawn_blocking(move || {
        worker.shutdown();
        // After the worker: the last run's record is written before the file is closed.
        recorder.close();
    })
    .await
    .ok();
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Connections the kernel may hold for us before we accept them. std's (and so tokio's
/// `bind`) is 128: a team's burst of page loads and event streams beyond that had SYNs
/// dropped and retried a second later (the load test saw 1 s event delays from it).
const LISTEN_BACKLOG: u32 = 1024;

/// A listening socket on `addr` with a backlog for a team (see [`LISTEN_BACKLOG`]).
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
