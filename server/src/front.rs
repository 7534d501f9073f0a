//! A fleet front: `gradless serve --nats URL --database postgres://...`. The same page,
//! API and event streams as the single-process server, without a device: runs and
//! experiments go to the workers announced in NATS ([`fleet::front`]), their events come
//! back from JetStream into the same [`crate::runs::RunState`]s the SSE handler reads, and
//! records go to PostgreSQL ([`crate::pg_store`]). The handlers here replace the
//! single-process ones only where a device was involved; the router picks them when the
//! state has a fleet.
//!
//! Faults: NATS or PostgreSQL unreachable → `POST /api/runs` (and experiments) answer 503
//! with `Retry-After` and a message naming the service; both clients reconnect by
//! themselves. A run's record is written by whichever front sees its end first (its relay,
//! or the fleet-wide recorder consumer when nobody watches); the store keeps one row per id.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use fleet::bus::{Body, Bus, Message, Task, WorkerCard};
use fleet::front::{Front, SubmitError};
use leptos::config::LeptosOptions;
use protocol::{
    DeviceInfo, Event, FailureKind, Record, RecordBody, RunCreated, RunFailure, ServerInfo,
    WorkerSummary,
};

use crate::api::{parse_spec, ClientAddr};
use crate::config::ServeArgs;
use crate::error::ApiError;
use crate::guard::Guard;
use crate::pg_store::PgStore;
use crate::recorder::Recorder;
use crate::runs::RunState;
use crate::state::{AppState, InfoCell};
use crate::store::RecordStore;

/// Serves as a front until Ctrl-C or SIGTERM.
pub async fn serve(args: ServeArgs) -> Result<()> {
    let nats = args.fleet.nats.clone().context("a front needs --nats")?;
    let database = args.fleet.database.clone().context(
        "a fleet front keeps its records in PostgreSQL: add --database postgres://user:pass@host/db",
    )?;
    let heartbeat = Duration::from_secs_f64(args.fleet.heartbeat_s.max(0.5));
    let run_timeout = Duration::from_secs(args.run_timeout_s);
    let embed_csp = crate::config::frame_ancestors(&args.embed_origins).map_err(anyhow::Error::msg)?;
    let guard = Guard::new(args.token.clone(), args.rate_limit, args.trust_forwarded_for);
    let listener = crate::listen(args.addr).with_context(|| format!("could not listen on {}", args.addr))?;
    let bound = listener.local_addr()?;
    let origins = crate::origin::Origins::new(bound, args.public_url.as_deref(), &args.allowed_origins)
        .map_err(anyhow::Error::msg)?;

    // PostgreSQL is not waited for either: the store migrates the schema on its first
    // connection, before anything is recorded, and until then the front serves its pages
    // and answers runs with 503 naming PostgreSQL. Fronts and services start in any order.
    let store = Arc::new(PgStore::open(&database)?);
    tokio::spawn({
        let store = store.clone();
        async move {
            let mut said = std::time::Instant::now() - Duration::from_secs(10);
            loop {
                let s = store.clone();
                match tokio::task::spawn_blocking(move || s.ready()).await {
                    Ok(Ok(())) => {
                        tracing::info!(database = %store.describe(), "run database open (PostgreSQL)");
                        return;
                    }
                    Ok(Err(e)) if said.elapsed() > Duration::from_secs(5) => {
                        tracing::warn!("waiting for PostgreSQL: {e:#}");
                        said = std::time::Instant::now();
                    }
                    _ => {}
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    let store: Arc<dyn RecordStore> = store;
    let bus = Bus::connect(&nats, "gradless-front", &args.fleet.nats_auth.auth()).await?;
    // Not waited for: a front started while NATS is away (or refuses it: credentials, TLS)
    // serves its pages and recorded runs, and answers runs with 503 naming NATS, as one
    // that loses NATS later does; its worker list and recorder retry until the streams exist.
    tokio::spawn({
        let bus = bus.clone();
        async move { bus.ensure_patiently(heartbeat).await }
    });
    let front = Front::start(bus, heartbeat, run_timeout).await;

    let info = fleet_info(&[], guard.token_required(), None);
    let leptos = LeptosOptions::builder()
        .output_name("gradless")
        .site_root(args.site_root.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .site_addr(bound)
        .build();
    let max_streams = args.max_streams.max(1);
    let state = AppState {
        worker: None,
        fleet: Some(front.clone()),
        runs: Arc::new(crate::runs::Runs::new(1000)),
        recorder: Arc::new(crate::recorder::Recorder::start(store.clone())),
        store: store.clone(),
        guard: Arc::new(guard),
        origins: Arc::new(origins),
        info: Arc::new(InfoCell::new(info)),
        leptos,
        experiments: Arc::new(tokio::sync::Semaphore::new(args.queue_capacity.max(1))),
        streams: Arc::new(tokio::sync::Semaphore::new(max_streams)),
        max_streams,
        embed_csp: embed_csp.into(),
    };
    tokio::spawn(keep_info(state.clone()));
    let ends = state.recorder.clone();
    tokio::spawn(front.clone().record_ends(move |job, message| record_end(ends.clone(), job, message)));
    tracing::info!(nats = %front.bus.url, "Gradless front is serving at http://{bound}");
    let limits = crate::conn::ConnLimits {
        header_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
        max_connections: args.max_connections,
        drain_timeout: Duration::from_secs(5),
    };
    let recorder = state.recorder.clone();
    crate::conn::serve(listener, crate::router(state), limits, async {
        crate::shutdown_signal().await;
        tracing::info!("shutting down: runs go on on their workers; their events stay in the stream");
    })
    .await;
    tokio::task::spawn_blocking(move || recorder.close()).await.ok();
    tracing::info!("stopped cleanly");
    Ok(())
}

/// What the page shows, from the live workers: every worker's devices, the models and
/// limits the workers announce (the first one's: a fleet runs one build), the cards.
fn fleet_info(cards: &[WorkerCard], auth_required: bool, previous: Option<&ServerInfo>) -> ServerInfo {
    let mut devices: Vec<DeviceInfo> = Vec::new();
    for d in cards.iter().flat_map(|c| c.devices.iter()) {
        if !devices.iter().any(|x| x.kind == d.kind) {
            devices.push(d.clone());
        }
    }
    let first = cards.first();
    ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        libtorch_version: first
            .map(|c| c.libtorch_version.clone())
            .or_else(|| previous.map(|p| p.libtorch_version.clone()))
            .unwrap_or_default(),
        devices,
        // Kept from the last worker seen when none is live: the pages still describe the
        // models (runs are refused until a worker returns).
        models: first
            .map(|c| c.models.clone())
            .or_else(|| previous.map(|p| p.models.clone()))
            .unwrap_or_default(),
        limits: first
            .map(|c| c.limits.clone())
            .or_else(|| previous.map(|p| p.limits.clone()))
            .unwrap_or_default(),
        pitfalls: engine::pitfalls::catalogue(),
        auth_required,
        workers: cards
            .iter()
            .map(|c| WorkerSummary {
                name: c.name.clone(),
                host: c.host.clone(),
                label: c.label(),
                devices: c.devices.clone(),
                queued: c.queued,
            })
            .collect(),
    }
}

/// Refreshes the page's [`ServerInfo`] from the live workers.
async fn keep_info(state: AppState) {
    let Some(front) = state.fleet.clone() else { return };
    let mut tick = tokio::time::interval((front.heartbeat_ttl / 3).max(Duration::from_millis(200)));
    loop {
        tick.tick().await;
        let previous = state.info.current();
        let next = fleet_info(&front.workers(), state.guard.token_required(), Some(&previous));
        if next != *previous {
            state.info.set(next);
        }
    }
}

/// Records a job's end from its last message, once per fleet (the shared recorder
/// consumer): a run's `done` or an experiment's report completes its row; a run whose
/// worker went away is marked interrupted — in a fleet that is what interrupts a run, not
/// a front's restart (the job lives on in JetStream and on its worker, and any front can
/// follow and record it), so fronts never mark `running` rows at start-up; any other
/// failure discards the row, as on a single server.
async fn record_end(recorder: Arc<Recorder>, job: String, message: Message) -> Result<()> {
    let body = match message.body {
        Body::Event { event: Event::Done { report } } => RecordBody::Run(report),
        Body::Pitfall { report } => RecordBody::Pitfall(report),
        Body::Event { event: Event::Failed { failure } } if failure.kind == FailureKind::WorkerGone => {
            let cause = format!("the loss of its fleet worker ({})", failure.message);
            return recorder
                .write(move |store| {
                    let Some(RecordBody::Unfinished(u)) = store.get(&job)?.map(|r| r.body) else {
                        return Ok(());
                    };
                    let at = engine::device::rfc3339_now();
                    let interrupted = RecordBody::Unfinished(Box::new(u.interrupted(at, Some(&cause))));
                    store.save(&Record { id: job, body: interrupted })
                })
                .await;
        }
        Body::Event { event: Event::Failed { .. } } => {
            return recorder.write(move |store| store.discard_running(&job)).await;
        }
        Body::Event { .. } => return Ok(()),
    };
    recorder.save(Record { id: job, body }).await
}

fn fleet(state: &AppState) -> Result<&Arc<Front>, ApiError> {
    state.fleet.as_ref().ok_or(ApiError::Unavailable)
}

/// 503 naming the service that is down, if one is.
async fn services_up(state: &AppState, front: &Front) -> Result<(), ApiError> {
    if !front.bus.is_connected() {
        return Err(ApiError::ServiceDown(format!(
            "NATS ({}) is unreachable: runs cannot be handed to workers until it is back; the front reconnects by itself",
            crate::pg_store::redact(&front.bus.url)
        )));
    }
    let store = state.store.clone();
    let ping = tokio::task::spawn_blocking(move || store.ping()).await;
    if !matches!(ping, Ok(Ok(()))) {
        return Err(ApiError::ServiceDown(
            "PostgreSQL (the run database) is unreachable: a run now could not be recorded; the front reconnects by itself".into(),
        ));
    }
    Ok(())
}

fn submit_error(e: SubmitError) -> ApiError {
    match e {
        SubmitError::NatsDown(url) => ApiError::ServiceDown(format!(
            "NATS ({}) is unreachable: runs cannot be handed to workers until it is back; the front reconnects by itself",
            crate::pg_store::redact(&url)
        )),
        SubmitError::Publish { .. } => ApiError::ServiceDown(e.to_string()),
        SubmitError::Spec(s) => ApiError::InvalidSpec(s),
        SubmitError::NoWorker(m) => ApiError::NoWorker(m),
    }
}

/// Starts relaying job `id`'s events into `run` (once per run per front). Saves the
/// record before `done` goes out, as the single-process server does.
fn attach(state: &AppState, front: &Arc<Front>, id: &str, run: Arc<RunState>) {
    let mut messages = front.relay(id);
    let recorder = state.recorder.clone();
    let id = id.to_string();
    tokio::spawn(async move {
        while let Some(message) = messages.recv().await {
            match message.body {
                Body::Event { event: Event::Done { report } } => {
                    let record = Record { id: id.clone(), body: RecordBody::Run(report.clone()) };
                    run.push(match recorder.save(record).await {
                        Ok(()) => Event::Done { report },
                        Err(e) => not_recorded(&format!("{e:#}")),
                    });
                }
                Body::Event { event } => run.push(event),
                Body::Pitfall { .. } => {}
            }
        }
        if !run.is_finished() {
            run.push(Event::Failed {
                failure: RunFailure {
                    kind: FailureKind::Internal,
                    message: "this front stopped receiving the run's events".into(),
                },
            });
        }
    });
}

fn not_recorded(why: &str) -> Event {
    Event::Failed {
        failure: RunFailure {
            kind: FailureKind::Storage,
            message: format!("the run finished but could not be recorded, so its figures are not kept: {why}"),
        },
    }
}

/// `POST /api/runs[?worker=NAME]`: hands the run to the named worker, or to the live one
/// with the device it asks for and the shortest queue.
pub async fn create_run(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<RunCreated>), ApiError> {
    state.guard.authorize(&headers)?;
    let spec = parse_spec(&body)?;
    let front = fleet(&state)?.clone();
    services_up(&state, &front).await?;
    let card = front
        .choose(query.get("worker").map(String::as_str), spec.device)
        .map_err(submit_error)?;
    front.check(&card, &spec).map_err(submit_error)?;
    state.guard.charge(&headers, peer.as_ref())?;
    let (id, run) = state.runs.create();
    // The intent first, before a worker can have it: the job's end completes this row,
    // whichever front records it.
    if let Err(e) = state.recorder.save(crate::api::started_run(&id, &spec)).await {
        state.runs.remove(&id);
        tracing::error!("could not record the start of a run: {e:#}");
        return Err(ApiError::ServiceDown(
            "PostgreSQL (the run database) is unreachable: a run now could not be recorded; the front reconnects by itself".into(),
        ));
    }
    attach(&state, &front, &id, run.clone());
    if let Err(e) = front.submit(&card, &id, Task::Run { spec }).await {
        state.runs.remove(&id);
        state.recorder.discard(&id);
        return Err(submit_error(e));
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(RunCreated {
            events_url: format!("/api/runs/{id}/events"),
            cancel_token: Some(run.secret().to_string()),
            id,
        }),
    ))
}

/// `GET /api/runs/{id}/events`: as on a single server; a run submitted on another front
/// is followed from the stream, from its first event.
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let run = match state.runs.get(&id) {
        Some(run) => run,
        None => {
            let front = fleet(&state)?.clone();
            if !protocol::is_record_id(&id) {
                return Err(ApiError::NotFound(id));
            }
            let exists = front.bus.job_exists(&id).await.map_err(|e| {
                ApiError::ServiceDown(format!("NATS is unreachable, so this run's events cannot be read: {e:#}"))
            })?;
            if !exists {
                // Gone from the stream (or never there): the record may say why.
                let run = crate::api::recorded_events(&state, &id).await?;
                return crate::api::event_response(&state, run, &query);
            }
            let (run, fresh) = state.runs.adopt(&id);
            if fresh {
                attach(&state, &front, &id, run.clone());
            }
            run
        }
    };
    crate::api::event_response(&state, run, &query)
}

/// `GET /api/runs/{id}/emitted`: when each event of the run was emitted by its worker
/// (microseconds since the Unix epoch), as relayed by this front: what the fleet load test
/// measures delivery delays against.
pub async fn run_emitted(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Vec<u64>>, ApiError> {
    fleet(&state)?.emitted(&id).map(Json).ok_or(ApiError::NotFound(id))
}

/// `POST /api/pitfalls/{id}[?worker=NAME]`: the experiment on a worker; answers its report.
pub async fn run_pitfall(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<protocol::PitfallReport>, ApiError> {
    let options = crate::api::pitfall_request(&state, &headers, &id, &body)?;
    let front = fleet(&state)?.clone();
    services_up(&state, &front).await?;
    let card = front
        .choose(query.get("worker").map(String::as_str), options.device)
        .map_err(submit_error)?;
    state.guard.charge(&headers, peer.as_ref())?;
    let _permit = state
        .experiments
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::QueueFull { capacity: state.experiments.available_permits() })?;
    let job = state.runs.fresh_id();
    state.recorder.started(crate::api::started_pitfall(&job, &id));
    let task = Task::Pitfall { pitfall: id, options };
    // Followed from before the job exists, so its end cannot be missed.
    let last = {
        let front = front.clone();
        let job = job.clone();
        tokio::spawn(async move { front.last_message(&job).await })
    };
    if let Err(e) = front.submit(&card, &job, task).await {
        state.recorder.discard(&job);
        return Err(submit_error(e));
    }
    let wait = front.run_timeout + front.heartbeat_ttl * 3;
    let message = tokio::time::timeout(wait, last)
        .await
        .map_err(|_| ApiError::NoReport("the experiment did not end within the run time limit".into()))?
        .map_err(|_| ApiError::Unavailable)?
        .map_err(|e| ApiError::NoReport(format!("{e:#}")))?;
    match message.body {
        Body::Pitfall { report } => Ok(Json(crate::api::record_pitfall(&state, job, *report).await)),
        Body::Event { event: Event::Failed { failure } } => Err(crate::api::experiment_failed(failure)),
        Body::Event { .. } => Err(ApiError::NoReport("the experiment ended without a report".into())),
    }
}

/// `GET /api/health` on a front: the live workers as they announce themselves.
pub async fn health(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let front = fleet(&state)?;
    Ok(Json(serde_json::json!({
        "nats_connected": front.bus.is_connected(),
        "workers": front.workers(),
    })))
}

/// `GET /api/workers`: the live workers (an empty list on a single-process server).
pub async fn workers(State(state): State<AppState>) -> Json<Vec<WorkerCard>> {
    Json(state.fleet.as_ref().map(|f| f.workers()).unwrap_or_default())
}
