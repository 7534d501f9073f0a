//! The `gradless` binary's library: the web server (router, API, SSE), the CLI commands and
//! their configuration. `main.rs` only parses the command line and calls in here, so tests
//! reach everything.

pub mod api;
pub mod cli;
pub mod config;
pub mod runs;
pub mod state;
pub mod web;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::serve::ListenerExt;
use engine::{LabConfig, Worker, WorkerConfig};
use leptos::config::LeptosOptions;
use protocol::{Limits, ServerInfo};

use crate::config::{EngineArgs, ServeArgs};
use crate::state::AppState;

/// The worker configuration these settings describe.
pub fn worker_config(engine: &EngineArgs, queue_capacity: usize, run_timeout: Option<Duration>) -> WorkerConfig {
    let mut lab = LabConfig::default();
    if let Some(t) = engine.threads {
        lab.threads = t.max(1);
    }
    lab.memory_limit_bytes = engine.memory_limit_mib.map(|m| m * 1024 * 1024);
    WorkerConfig {
        lab,
        limits: Limits { max_batch: engine.max_batch, ..Limits::default() },
        queue_capacity,
        run_timeout,
    }
}

/// Starts the device worker ("could not ..." errors for people, not backtraces).
pub fn start_worker(config: WorkerConfig) -> Result<Worker> {
    Worker::start(config).context("could not start the measurement worker (libtorch)")
}

/// Builds the shared state: the worker, the model list and the site settings.
pub fn build_state(worker: Worker, site_root: &std::path::Path, addr: std::net::SocketAddr) -> Result<AppState> {
    let models = cli::model_infos(&worker)?;
    let info = ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        libtorch_version: engine::LIBTORCH_VERSION.to_string(),
        devices: worker.devices(),
        models,
        limits: worker.limits().clone(),
        pitfalls: engine::pitfalls::catalogue(),
    };
    let experiments = Arc::new(tokio::sync::Semaphore::new(worker_queue_capacity(&worker)));
    let leptos = LeptosOptions::builder()
        .output_name("gradless")
        .site_root(site_root.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .build();
    Ok(AppState {
        worker: Arc::new(worker),
        runs: Arc::new(runs::Runs::new(1000)),
        info: Arc::new(info),
        leptos,
        experiments,
    })
}

/// Pitfall experiments wait in the same spirit as runs: as many as the run queue holds.
fn worker_queue_capacity(worker: &Worker) -> usize {
    worker.queue_capacity().max(1)
}

/// `gradless serve`: serves until Ctrl-C or SIGTERM, then lets the current run finish.
pub async fn serve(args: ServeArgs) -> Result<()> {
    if !args.site_root.join("pkg").exists() {
        tracing::warn!(
            "no built site at {} (pkg/ missing): the page will render but not hydrate; run scripts/build-site.sh",
            args.site_root.display()
        );
    }
    let config = worker_config(&args.engine, args.queue_capacity, Some(Duration::from_secs(args.run_timeout_s)));
    let site_root = args.site_root.clone();
    let addr = args.addr;
    let state = tokio::task::spawn_blocking(move || -> Result<AppState> {
        let worker = start_worker(config)?;
        build_state(worker, &site_root, addr)
    })
    .await
    .context("starting the worker panicked")??;
    for d in &state.info.devices {
        tracing::info!(device = d.kind.as_str(), name = %d.name, "device available");
    }
    let worker = state.worker.clone();
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("could not listen on {addr}"))?;
    tracing::info!("Gradless is serving at http://{}", listener.local_addr()?);
    // Without TCP_NODELAY, Nagle's algorithm and the browser's delayed ACK hold small
    // responses (a run id, one SSE event) for ~40 ms each.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("could not set TCP_NODELAY: {e}");
        }
    });
    axum::serve(listener, web::app(state)).with_graceful_shutdown(shutdown_signal()).await.context("the server failed")?;
    tracing::info!("shutting down: finishing the current run");
    tokio::task::spawn_blocking(move || {
        if let Ok(mut w) = Arc::try_unwrap(worker) {
            w.shutdown();
        }
    })
    .await
    .ok();
    Ok(())
}

async fn shutdown_signal() {
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
