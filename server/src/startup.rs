//! `gradless serve`: the one start-up path. It reads the options every server shares
//! (access, origins, embeds, limits), makes the [`Dispatch`] the flags ask for — this
//! process's device worker and its SQLite file, or with `--nats` a fleet front and its
//! PostgreSQL — builds the one [`AppState`] around it, serves, and shuts down in order:
//! the current run finishes, then the recorder writes its record and closes the store.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use engine::Worker;

use crate::access::Guard;
use crate::config::ServeArgs;
use crate::conn::{listen, shutdown_signal};
use crate::dispatch::fleet::FleetLink;
use crate::dispatch::{local, Dispatch};
use crate::model_counts::CountCache;
use crate::state::{AppState, Services};
use crate::store::{interrupt_unfinished, RecordStore, ServingLock, Store};

/// The state of a single server around `worker` (what tests build too).
pub fn build_state(
    worker: Worker,
    site_root: &std::path::Path,
    addr: std::net::SocketAddr,
    services: Services,
) -> Result<AppState> {
    let info = local::server_info(&worker, services.model_counts.as_ref(), services.guard.token_required())?;
    // Pitfall experiments wait in the same spirit as runs: as many as the run queue holds.
    let experiments = worker.queue_capacity().max(1);
    Ok(AppState::new(Dispatch::Local(Arc::new(worker)), info, experiments, site_root, addr, services))
}

/// `gradless serve`: serves until Ctrl-C or SIGTERM, then lets the current run finish
/// (a second signal exits at once).
/// The onboarding paths (the shipped one, `--paths-dir` or the `paths/` folder inside
/// `--models-dir`, the composed ones) and the answers, in `learn.sqlite3` beside the run
/// database. A path file with an error stops the start, naming the file and the field.
async fn open_learn(args: &ServeArgs, catalog: &protocol::Catalog) -> Result<crate::learn::Learn> {
    let dir = args.paths_dir.clone().or_else(|| {
        args.engine.models_dir.as_ref().map(|m| m.join("paths")).filter(|p| p.is_dir())
    });
    let db = crate::learn::db_beside(&args.db.path());
    let catalog = catalog.clone();
    tokio::task::spawn_blocking(move || crate::learn::Learn::open(dir.as_deref(), &db, &catalog))
        .await
        .context("reading the onboarding paths panicked")?
        .context("onboarding paths")
}

pub async fn serve(args: ServeArgs) -> Result<()> {
    let fleet = args.fleet.nats.is_some();
    if fleet && args.device != crate::config::DeviceArg::Auto {
        anyhow::bail!("--device {}: a front (--nats) measures nothing itself; give each worker its device (`gradless worker --device cuda:N`)", args.device);
    }
    if !args.site_root.join("pkg").exists() {
        tracing::warn!(
            "no built site at {} (pkg/ missing): the page will render but not hydrate; run scripts/build-site.sh",
            args.site_root.display()
        );
    }
    let run_timeout = Duration::from_secs(args.run_timeout_s);
    let embed_csp = crate::config::frame_ancestors(&args.embed_origins).map_err(anyhow::Error::msg)?;
    let guard = Guard::new(args.token.clone(), args.rate_limit, args.trust_forwarded_for);
    if guard.token_required() {
        tracing::info!("starting runs needs the access token; reading and embeds stay open");
    }
    if let Some(files) = crate::conn::open_files_limit() {
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
    let listener = listen(args.addr).with_context(|| format!("could not listen on {}", args.addr))?;
    let bound = listener.local_addr()?;
    let origins = crate::origin::Origins::new(bound, args.public_url.as_deref(), &args.allowed_origins)
        .map_err(anyhow::Error::msg)?;
    let auth_required = guard.token_required();
    let max_streams = args.max_streams;
    let services = move |store: Arc<dyn RecordStore>, model_counts: Option<CountCache>| Services {
        store,
        guard,
        origins,
        embed_csp,
        max_streams,
        model_counts,
    };

    // Held until `serve` returns: the kernel releases it when the process ends, however.
    let mut _serving_lock: Option<ServingLock> = None;
    let state = if fleet {
        let (link, store) = crate::dispatch::fleet::start(&args).await?;
        let info = FleetLink::initial_info(auth_required);
        let link = Arc::new(link);
        let state = AppState::new(
            Dispatch::Fleet(link.clone()),
            info,
            args.queue_capacity.max(1),
            &args.site_root,
            bound,
            services(store, None),
        );
        link.spawn_background(state.info.clone(), state.guard.token_required(), state.recorder.clone());
        state
    } else {
        // Team models are loaded and probed through libtorch (TorchScript modules run once,
        // tokenizers read, checkpoint headers checked): blocking work, off the async threads.
        let engine_args = args.engine.clone();
        let catalog = tokio::task::spawn_blocking(move || crate::team::load(&engine_args))
            .await
            .context("loading the models directory")??;
        let config = engine::WorkerConfig { catalog, ..local::worker_config(&args.engine, args.queue_capacity, Some(run_timeout)) };
        let db_path = args.db.path();
        let site_root = args.site_root.clone();
        let device = args.device;
        // SQLite and libtorch both block: opened off the async threads.
        let (state, lock) = tokio::task::spawn_blocking(move || -> Result<(AppState, Option<ServingLock>)> {
            // First: a second server on this file must refuse before it touches a row.
            let lock = ServingLock::acquire(&db_path, &bound.to_string())?;
            let store = Store::open(&db_path)?;
            tracing::info!(path = %db_path.display(), records = store.count().unwrap_or(0), "run database open");
            // Before any run is accepted: whatever is still `running` was being measured
            // by an earlier process on this file that died (the lock: one serves it at a time).
            let now = engine::device::rfc3339_now();
            for id in interrupt_unfinished(&store, &now).context("marking interrupted runs")? {
                tracing::warn!(run = %id, "run {id} was interrupted: the previous server stopped while it was measuring it; its permalink says so");
            }
            let worker = local::start_worker(config)?;
            device.check_found(worker.machine().has_cuda()).map_err(anyhow::Error::msg)?;
            local::remember_recorded_runs(&worker, &store);
            let state = build_state(worker, &site_root, bound, services(Arc::new(store), CountCache::for_this_executable()))?;
            Ok((state, lock))
        })
        .await
        .context("starting the worker panicked")??;
        _serving_lock = lock;
        state
    };
    for d in &state.info.current().devices {
        tracing::info!(device = d.kind.as_str(), name = %d.name, "device available");
    }
    if fleet {
        tracing::info!("Gradless front is serving at http://{bound}");
    } else {
        tracing::info!("Gradless is serving at http://{bound}");
    }
    let limits = crate::conn::ConnLimits {
        header_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
        max_connections: args.max_connections,
        // A local run has at most its time limit left; its viewers a moment more. A
        // front's runs go on on their workers.
        drain_timeout: if fleet { Duration::from_secs(5) } else { run_timeout + Duration::from_secs(10) },
    };
    let mut state = state;
    state.learn = Arc::new(open_learn(&args, &state.catalog).await?);
    let dispatch = state.dispatch.clone();
    let recorder = state.recorder.clone();
    let closing = dispatch.clone();
    crate::conn::serve(listener, crate::router::router(state), limits, async move {
        shutdown_signal().await;
        if fleet {
            tracing::info!("shutting down: runs go on on their workers; their events stay in the stream");
            return;
        }
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
        dispatch.shutdown();
        // After the worker: the last run's record is written before the store is closed.
        recorder.close();
    })
    .await
    .ok();
    tracing::info!("stopped cleanly");
    Ok(())
}
