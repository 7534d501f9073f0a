//! The JSON API: what the server offers (`GET /api/info`), starting a run
//! (`POST /api/runs`), following it (`GET /api/runs/{id}/events`, Server-Sent Events),
//! reading its report (`GET /api/runs/{id}`, also after a restart), the recorded results
//! (`GET /api/records`, `/api/records/{id}`, `/api/records/{id}/export/{json|csv|py|trace|trace-csv}`),
//! the pitfall experiments and the health of where runs go. Every error is JSON with a
//! stable code; none leaks internals. The handlers are the same on a single server and a
//! fleet front: what differs is behind [`crate::dispatch::Dispatch`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, Stream};
use protocol::{
    Event, FailureKind, Record, RecordBody, RecordKind, RecordStatus, RecordSummary, RunCreated,
    RunFailure, RunSpec, ServerInfo, SpecError, Unfinished,
};
use serde::de::DeserializeOwned;

use crate::error::storage_error;
pub use crate::error::ApiError;
use crate::export::{export, Format};
use crate::recorder::started_pitfall;
use crate::runs::{RunState, ViewerGuard};
use crate::state::AppState;

/// Parses a RunSpec body, naming the field at fault.
pub fn parse_spec(body: &[u8]) -> Result<RunSpec, ApiError> {
    parse_object(body, "RunSpec", r#"{"model": "tiny_mlp", "batch": 8}"#)
}

/// Parses a body that must be exactly one JSON object: not an array (which serde would
/// read as the struct's fields in order), nothing after it. Errors name the field.
pub fn parse_object<T: DeserializeOwned>(
    body: &[u8],
    what: &str,
    example: &str,
) -> Result<T, ApiError> {
    let bad = |message: String| ApiError::BadRequest {
        message,
        field: None,
    };
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => {
            return Err(bad(format!(
                "the request body must be a JSON {what}, e.g. {example}"
            )))
        }
        Some(b'{') => {}
        Some(_) => {
            return Err(bad(format!(
                "the request body must be one JSON object (a {what}), e.g. {example}"
            )))
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize::<_, T>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        // "." is the whole document, "?" a syntax error before any field.
        let field = (path != "." && path != "?").then_some(path);
        let inner = e.into_inner();
        let message = match &field {
            Some(f) => format!("{f}: {inner}"),
            None => format!("not a valid {what}: {inner}"),
        };
        ApiError::BadRequest { message, field }
    })?;
    de.end().map_err(|e| {
        bad(format!(
            "the request body must be exactly one JSON object, with nothing after it ({e})"
        ))
    })?;
    Ok(value)
}

/// `GET /api/info`
#[utoipa::path(get, path = "/info", tag = "server",
    responses((status = 200, description = "Devices (with autocast support, or why not), models with parameter counts, limits, the pitfall cards", body = protocol::ServerInfo)))]
pub async fn info(State(state): State<AppState>) -> Json<ServerInfo> {
    Json((*state.info.current()).clone())
}

/// The client's socket address, when the server was started with connect info (tests
/// driving the router directly have none).
pub struct ClientAddr(pub Option<ConnectInfo<SocketAddr>>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = Infallible;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts.extensions.get::<ConnectInfo<SocketAddr>>().cloned(),
        ))
    }
}

/// `POST /api/runs[?worker=NAME]`: queue a run; follow it at `events_url`. Checked in this
/// order: the token, the spec (and on a fleet, the services and the worker), the client's
/// rate, the queue. Its start is recorded first; when it finishes, the report is recorded
/// under the run's id before the `done` event goes out.
#[utoipa::path(post, path = "/runs", tag = "runs",
    request_body(content = protocol::RunSpec, description = "Every field is optional; a missing one takes its default. Unknown fields are refused."),
    responses(
        (status = 202, description = "Queued: follow `events_url`", body = protocol::RunCreated),
        (status = 400, description = "The body is not a JSON object of a RunSpec's fields", body = protocol::ApiErrorBody),
        (status = 401, description = "This server wants its token", body = protocol::ApiErrorBody),
        (status = 403, description = "A page of another origin may not start work here", body = protocol::ApiErrorBody),
        (status = 415, description = "The body is not `application/json`", body = protocol::ApiErrorBody),
        (status = 422, description = "The spec cannot run here (the field is named)", body = protocol::ApiErrorBody),
        (status = 429, description = "Rate limited", body = protocol::ApiErrorBody),
        (status = 503, description = "The queue is full, or no worker is connected", body = protocol::ApiErrorBody),
    ))]
pub async fn create_run(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<RunCreated>), ApiError> {
    state.guard.authorize(&headers)?;
    let spec = parse_spec(&body)?;
    let target = state
        .dispatch
        .prepare_run(&state.store, query.get("worker").map(String::as_str), &spec)
        .await?;
    state.guard.charge(&headers, peer.as_ref())?;
    let (id, run) = state.runs.create();
    if let Err(e) = state.dispatch.start_run(target, &state.recorder, &id, run.clone(), spec).await {
        state.runs.remove(&id);
        return Err(e);
    }
    let events_url = format!("/api/runs/{id}/events");
    let cancel_token = Some(run.secret().to_string());
    Ok((
        StatusCode::ACCEPTED,
        Json(RunCreated {
            id,
            events_url,
            cancel_token,
        }),
    ))
}

/// `GET /api/runs/{id}`: the report of a finished run: live from this process, or recorded
/// (also by an earlier process on the same database).
#[utoipa::path(get, path = "/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The finished run's report, live or from the database", body = protocol::Report),
        (status = 404, description = "No such run", body = protocol::ApiErrorBody),
        (status = 409, description = "Still running: no report yet", body = protocol::ApiErrorBody),
        (status = 410, description = "There will never be a report: interrupted by a server restart or the loss of its fleet worker (code `interrupted`; the message gives the times), or failed (code `failed`: out of memory, past its time limit, cancelled, a libtorch error; the message says why and what it measured first). Its record, `GET /api/records/{id}`, keeps its settings, and a failed run's `measured` figures", body = protocol::ApiErrorBody),
    ))]
pub async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<protocol::Report>, ApiError> {
    let Some(run) = state.runs.get(&id) else {
        let record = find_record(&state, &id).await?;
        return match record.body {
            RecordBody::Run(report) => Ok(Json(*report)),
            RecordBody::Unfinished(u) if u.of == RecordKind::Run => Err(unfinished_error(&u)),
            RecordBody::Pitfall(_) | RecordBody::Unfinished(_) => Err(ApiError::NotFound(format!(
                "{id} (it is a pitfall experiment: GET /api/records/{id})"
            ))),
        };
    };
    if let Some(report) = run.report() {
        return Ok(Json(report));
    }
    Err(match run.outcome() {
        Some(Event::Failed { failure }) => ApiError::Failed(format!(
            "the run failed: {} (its record, GET /api/records/{id}, keeps what it measured before)",
            failure.message
        )),
        _ => ApiError::NoReport("the run has not finished yet; follow its events".into()),
    })
}

/// What asking for the report of an unfinished run answers: 410 when it was interrupted
/// or failed (there will never be one), 409 while it is still going.
fn unfinished_error(u: &Unfinished) -> ApiError {
    match u.status {
        RecordStatus::Interrupted => ApiError::Interrupted(u.message.clone()),
        RecordStatus::Failed => ApiError::Failed(u.message.clone()),
        _ => ApiError::NoReport("the run has not finished yet; follow its events".into()),
    }
}

/// The events of recorded run `id`, which is not live in this process: an interrupted
/// run's stream is its one `failed` event (kind `interrupted`, saying when), a failed
/// run's what it measured before (`started`, its passes or steps) and its `failed`, so a
/// viewer holding the link learns what happened. A finished or unknown run is 404, as
/// before runs were recorded at their start.
async fn recorded_events(state: &AppState, id: &str) -> Result<Arc<RunState>, ApiError> {
    let record = find_record(state, id).await?;
    match record.body {
        RecordBody::Unfinished(u) if u.status == RecordStatus::Interrupted => Ok(RunState::ended(
            id,
            Event::Failed {
                failure: RunFailure {
                    kind: FailureKind::Interrupted,
                    message: u.message,
                },
            },
        )),
        RecordBody::Unfinished(u) if u.status == RecordStatus::Failed => {
            let failure = u.failure.clone().unwrap_or(RunFailure { kind: FailureKind::Internal, message: u.message.clone() });
            let mut events = u.measured.as_ref().map(protocol::PartialRun::events).unwrap_or_default();
            events.push(Event::Failed { failure });
            Ok(RunState::replayed(id, events))
        }
        RecordBody::Unfinished(_) => Err(ApiError::NoReport(
            "the run is being measured by another server process; its events are not relayed here".into(),
        )),
        _ => Err(ApiError::NotFound(id.to_string())),
    }
}

/// A recorded result, read off the async threads (SQLite blocks).
async fn find_record(state: &AppState, id: &str) -> Result<Record, ApiError> {
    if !protocol::is_record_id(id) {
        return Err(ApiError::NotFound(id.to_string()));
    }
    let store = state.store.clone();
    let key = id.to_string();
    tokio::task::spawn_blocking(move || store.get(&key))
        .await
        .map_err(|_| ApiError::Storage)?
        .map_err(storage_error)?
        .ok_or_else(|| ApiError::NotFound(id.to_string()))
}

/// `GET /api/records?kind=run|pitfall&limit=N`: the newest recorded results first.
#[utoipa::path(get, path = "/records", tag = "records",
    params(
        ("kind" = Option<protocol::RecordKind>, Query, description = "Only runs or only pitfall results"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "How many, newest first (1 to 1000; 50 by default)"),
    ),
    responses(
        (status = 200, description = "Recorded results, newest first", body = Vec<protocol::RecordSummary>),
        (status = 400, description = "A bad `kind` or `limit` (the field is named)", body = protocol::ApiErrorBody),
    ))]
pub async fn list_records(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Vec<RecordSummary>>, ApiError> {
    let bad = |field: &str, message: String| ApiError::BadRequest {
        message,
        field: Some(field.into()),
    };
    let kind = query
        .get("kind")
        .map(|k| k.parse::<RecordKind>())
        .transpose()
        .map_err(|m| bad("kind", m))?;
    let limit = match query.get("limit") {
        None => 50,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| {
                bad(
                    "limit",
                    format!("limit `{l}` must be a whole number from 1 to 1000"),
                )
            })?,
    };
    let store = state.store.clone();
    let list = tokio::task::spawn_blocking(move || store.list(kind, limit))
        .await
        .map_err(|_| ApiError::Storage)?
        .map_err(storage_error)?;
    Ok(Json(list))
}

/// `GET /api/records/{id}`: one recorded run or experiment, with its kind.
#[utoipa::path(get, path = "/records/{id}", tag = "records",
    params(("id" = String, Path, description = "The record's id (a run's id, or a pitfall result's `record_id`)")),
    responses(
        (status = 200, description = "One recorded result with its kind", body = protocol::Record),
        (status = 404, description = "No such record", body = protocol::ApiErrorBody),
    ))]
pub async fn get_record(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Record>, ApiError> {
    find_record(&state, &id).await.map(Json)
}

/// `GET /api/records/{id}/export/{json|csv|py|trace|trace-csv}`: a file to download.
#[utoipa::path(get, path = "/records/{id}/export/{format}", tag = "records",
    params(
        ("id" = String, Path, description = "The record's id"),
        ("format" = String, Path, description = "`json` (the record), `csv` (its samples or series), `py` (the reproducing PyTorch script; runs only), `trace` (the traced pass as Chrome trace-event JSON) or `trace-csv`"),
    ),
    responses(
        (status = 200, description = "A download (`Content-Disposition: attachment`)", content(
            (protocol::Record = "application/json"),
            (String = "text/csv"),
            (String = "text/x-python"),
        )),
        (status = 400, description = "An unknown format", body = protocol::ApiErrorBody),
        (status = 404, description = "No such record, or nothing of that kind to export", body = protocol::ApiErrorBody),
        (status = 422, description = "Nothing of that kind in this record (a pitfall result has no script; a run without a report no table; a run without a traced pass no trace): the message says what it has (field `format`)", body = protocol::ApiErrorBody),
    ))]
pub async fn export_record(
    State(state): State<AppState>,
    Path((id, format)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let format: Format = format.parse().map_err(|m| ApiError::BadRequest {
        message: m,
        field: Some("format".into()),
    })?;
    let record = find_record(&state, &id).await?;
    let file = export(&record, format).map_err(|m| {
        ApiError::InvalidSpec(SpecError {
            field: "format".into(),
            message: m,
        })
    })?;
    let disposition = format!("attachment; filename=\"{}\"", file.filename);
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(file.content_type),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_str(&disposition).map_err(|_| ApiError::Storage)?,
            ),
        ],
        file.body,
    )
        .into_response())
}

/// `GET /api/health`: the worker's tasks, queue and leak checks; on a fleet front, whether
/// NATS answers and the live workers.
#[utoipa::path(get, path = "/health", tag = "server",
    responses(
        (status = 200, description = "The worker: tasks, queue, and the leak check after every task. On a fleet front: `nats_connected` and the live `workers`", body = protocol::WorkerHealth),
        (status = 503, description = "The worker thread has stopped", body = protocol::ApiErrorBody),
    ))]
pub async fn health(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(state.dispatch.health())
}

/// `GET /api/workers`: the live workers (an empty list on a single-process server).
#[utoipa::path(get, path = "/workers", tag = "server",
    responses((status = 200, description = "On a fleet front, the live workers' cards; `[]` on a single server", body = Vec<crate::openapi::WorkerCardSchema>)))]
pub async fn workers(State(state): State<AppState>) -> Json<Vec<fleet::bus::WorkerCard>> {
    Json(state.dispatch.workers())
}

/// `GET /api/runs/{id}/emitted`: when each event of the run was emitted by its fleet
/// worker (microseconds since the Unix epoch), as relayed by this front: what the fleet
/// load test measures delivery delays against (404, code `fleet_only`, on a single server).
#[utoipa::path(get, path = "/runs/{id}/emitted", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "On a fleet front: when each of the run's events was emitted by its worker (ms since the Unix epoch); the load test reads emit-to-viewer delays from it", body = Vec<u64>),
        (status = 404, description = "No such run on this front; on a single server, code `fleet_only` (it has no fleet workers)", body = protocol::ApiErrorBody),
    ))]
pub async fn run_emitted(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<Vec<u64>>, ApiError> {
    state.dispatch.emitted(&id).map(Json)
}

/// `GET /metrics`: Prometheus metrics (see [`fleet::metrics`]). On a single-process server
/// the queue depth and device memory are read from the worker at each scrape.
#[utoipa::path(get, path = "/metrics", tag = "server",
    responses((status = 200, description = "Prometheus metrics (text exposition format)", content_type = "text/plain", body = String)))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let m = fleet::metrics::global();
    state.dispatch.observe();
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"))],
        m.render(),
    )
        .into_response()
}

/// `GET /api/runs/{id}/events[?cancel_token=...]`: every event of the run from the first,
/// then live ones, as SSE messages whose data is the event's JSON. The stream ends after
/// `done` or `failed`. With the run's secret, this viewer is the submitter's: its leaving
/// cancels the run while it waits (see [`crate::runs::ViewerGuard`]). On a fleet front a
/// run submitted on another front is followed from the stream, from its first event.
///
/// The messages are written as bytes the run shares among its viewers (see
/// [`RunState::frames_from`]) rather than through axum's `Sse`, which would copy and
/// re-scan every event's JSON for every viewer.
#[utoipa::path(get, path = "/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "Server-Sent Events from the start of the run (replayed for late viewers); each `data:` line is one JSON event, the last `done` or `failed` (a run interrupted by a server restart answers one `failed` event of kind `interrupted`; a recorded failed run replays what it measured, then its `failed`)", content_type = "text/event-stream", body = protocol::Event),
        (status = 404, description = "No such run", body = protocol::ApiErrorBody),
        (status = 409, description = "A run another server process is measuring (its events are not relayed here)", body = protocol::ApiErrorBody),
        (status = 503, description = "Too many event streams are open", body = protocol::ApiErrorBody),
    ))]
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let run = match state.runs.get(&id) {
        Some(run) => run,
        None => match state.dispatch.follow(&state.runs, &state.recorder, &id).await? {
            Some(run) => run,
            None => recorded_events(&state, &id).await?,
        },
    };
    event_response(&state, run, &query)
}

/// The SSE response following `run` (see [`run_events`]): one of the server's stream
/// slots (429 when none is free), and the owner's rights when the query carries the run's
/// `cancel_token`.
fn event_response(
    state: &AppState,
    run: Arc<RunState>,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let permit = state
        .streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams(state.max_streams))?;
    let owner = run.is_owner(query.get("cancel_token").map(String::as_str));
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        // Proxies (nginx) must pass each message on as it comes, not buffer the stream.
        (
            header::HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        ),
    ];
    Ok((headers, axum::body::Body::from_stream(event_stream(run, owner, permit))).into_response())
}

/// Silence longer than this gets an SSE comment, so proxies and browsers keep the stream.
const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// A viewer catching up writes at most about this much at once.
const CATCH_UP_BYTES: usize = 256 * 1024;

struct Follow {
    run: Arc<RunState>,
    next: usize,
    changes: tokio::sync::watch::Receiver<usize>,
    finished: bool,
    _viewer: ViewerGuard,
    _slot: tokio::sync::OwnedSemaphorePermit,
    _counted: fleet::metrics::ViewerCount,
}

fn event_stream(
    run: Arc<RunState>,
    owner: bool,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let follow = Follow {
        changes: run.subscribe(),
        _viewer: run.view(owner),
        _slot: slot,
        _counted: fleet::metrics::global().viewer(),
        run,
        next: 0,
        finished: false,
    };
    stream::unfold(follow, |mut f| async move {
        loop {
            if f.finished {
                return None;
            }
            // Unnamed SSE messages, so a browser's `onmessage` sees them all; the JSON
            // carries its own `type`.
            if let Some((messages, next, terminal)) = f.run.frames_from(f.next, CATCH_UP_BYTES) {
                f.next = next;
                f.finished = terminal;
                return Some((Ok(messages), f));
            }
            // Nothing new: wait for the worker (the sender lives as long as the run state).
            match tokio::time::timeout(KEEP_ALIVE, f.changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return None,
                Err(_) => return Some((Ok(Bytes::from_static(b":\n\n")), f)),
            }
        }
    })
}

/// `GET /api/pitfalls`: the cards, in guided-tour order.
#[utoipa::path(get, path = "/pitfalls", tag = "pitfalls",
    responses((status = 200, description = "The pitfall cards in tour order", body = Vec<protocol::PitfallInfo>)))]
pub async fn pitfalls(State(state): State<AppState>) -> Json<Vec<protocol::PitfallInfo>> {
    Json(state.info.current().pitfalls.clone())
}

/// `POST /api/pitfalls/{id}[?worker=NAME]`: runs the experiment (body: optional
/// PitfallOptions) and answers its report when it is done, recorded under `record_id`.
#[utoipa::path(post, path = "/pitfalls/{id}", tag = "pitfalls",
    params(("id" = String, Path, description = "The card's id (see GET /api/pitfalls)")),
    request_body(content = Option<protocol::PitfallOptions>, description = "Optional: device, model, batch, memory budget, and `prediction`, the answer to the card's `question` (`\"skipped\"`, `{\"value\": 0.5}` or `{\"choice\": \"lower\"}`), locked by this request and scored in the report"),
    responses(
        (status = 200, description = "The experiment's report, recorded: its permalink is `/runs/{record_id}`", body = protocol::PitfallReport),
        (status = 400, description = "The body is not a JSON object of the card's options (the field is named)", body = protocol::ApiErrorBody),
        (status = 401, description = "This server wants its token", body = protocol::ApiErrorBody),
        (status = 403, description = "A page of another origin may not start work here", body = protocol::ApiErrorBody),
        (status = 404, description = "No such card", body = protocol::ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = protocol::ApiErrorBody),
        (status = 409, description = "The experiment failed (the message says why)", body = protocol::ApiErrorBody),
        (status = 422, description = "Options this card cannot take, or a prediction its question cannot take (field `prediction`: out of the scale, or the wrong kind of answer)", body = protocol::ApiErrorBody),
        (status = 429, description = "Rate limited", body = protocol::ApiErrorBody),
        (status = 503, description = "Too many experiments waiting", body = protocol::ApiErrorBody),
    ))]
pub async fn run_pitfall(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<protocol::PitfallReport>, ApiError> {
    let options = pitfall_request(&state, &headers, &id, &body)?;
    let target = state
        .dispatch
        .prepare_pitfall(&state.store, query.get("worker").map(String::as_str), options.device)
        .await?;
    state.guard.charge(&headers, peer.as_ref())?;
    let capacity = state.dispatch.experiment_capacity(&state.experiments);
    let permit = state
        .experiments
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::QueueFull { capacity })?;
    let record_id = state.runs.fresh_id();
    state.recorder.started(started_pitfall(&record_id, &id));
    // From here the experiment and its record are the server's, not the request's: they go
    // on in a task of their own, so a client that goes away (a closed tab, `curl -m 1`)
    // still leaves a finished record behind, never a row `running` for ever. Dropping this
    // handler's future only stops the waiting.
    let task = tokio::spawn({
        let state = state.clone();
        async move {
            let _permit = permit;
            match state.dispatch.run_pitfall(target, &record_id, id, options).await {
                Ok(report) => Ok(record_pitfall(&state, record_id, report).await),
                Err(e) => {
                    state.recorder.discard(&record_id);
                    Err(e)
                }
            }
        }
    });
    match task.await {
        Ok(answer) => answer.map(Json),
        Err(e) => {
            tracing::error!("the experiment's task ended abnormally: {e}");
            Err(ApiError::Unavailable)
        }
    }
}

/// What a pitfall request must pass before anything runs: the caller may run experiments,
/// the card exists, and the body is the card's options (none: the defaults).
fn pitfall_request(
    state: &AppState,
    headers: &HeaderMap,
    id: &str,
    body: &[u8],
) -> Result<protocol::PitfallOptions, ApiError> {
    state.guard.authorize(headers)?;
    if !engine::pitfalls::exists(id) {
        return Err(ApiError::UnknownPitfall(id.chars().take(100).collect()));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Default::default());
    }
    let options: protocol::PitfallOptions =
        parse_object(body, "PitfallOptions", r#"{"device": "cpu", "prediction": {"value": 0.5}}"#)?;
    if let (Some(p), Some(card)) = (&options.prediction, engine::pitfalls::card(id)) {
        card.question.check(p).map_err(|message| {
            ApiError::InvalidSpec(SpecError {
                field: "prediction".into(),
                message: format!("{message} (the question: {})", card.question.text),
            })
        })?;
    }
    Ok(options)
}

/// The body of `POST /api/records/{id}/prediction`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LatePrediction {
    #[allow(dead_code)]
    prediction: protocol::Prediction,
}

/// `POST /api/records/{id}/prediction`: a prediction for a result whose run has started.
/// Always refused (409) for a record that exists: a prediction is locked by the request
/// that starts its run (`POST /api/pitfalls/{id}` with `prediction`), so one made after
/// the run began, or a change to the one locked, is never recorded.
#[utoipa::path(post, path = "/records/{id}/prediction", tag = "pitfalls",
    params(("id" = String, Path, description = "A recorded result's id")),
    request_body(content = crate::openapi::LatePrediction, description = "`{\"prediction\": {\"value\": 0.5}}`"),
    responses(
        (status = 400, description = "Not a prediction (the field is named)", body = protocol::ApiErrorBody),
        (status = 403, description = "A page of another origin may not send it", body = protocol::ApiErrorBody),
        (status = 404, description = "No such record", body = protocol::ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = protocol::ApiErrorBody),
        (status = 409, description = "Its run has started: a prediction is locked by the request that starts the run (`POST /api/pitfalls/{id}` with `prediction`) and cannot be sent or changed later", body = protocol::ApiErrorBody),
    ))]
pub async fn late_prediction(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let _: LatePrediction = parse_object(&body, "prediction", r#"{"prediction": {"value": 0.5}}"#)?;
    let record = find_record(&state, &id).await?;
    let locked = match &record.body {
        RecordBody::Pitfall(p) => match &p.prediction {
            Some(s) if s.predicted != protocol::Prediction::Skipped => format!("it locked “{}”", s.predicted_text()),
            Some(_) => "it was run without predicting, and is recorded so".into(),
            None => "it was run without a question".into(),
        },
        RecordBody::Run(_) => "a run of the Lab records no prediction of its own".into(),
        RecordBody::Unfinished(u) => format!("it is {}", match u.status {
            RecordStatus::Failed => "failed",
            RecordStatus::Interrupted => "interrupted",
            _ => "running",
        }),
    };
    Err(ApiError::PredictionLocked(format!(
        "the run of {id} has already started, so its prediction is locked ({locked}): a prediction is sent with the request that starts the run, POST /api/pitfalls/{{card}} with \"prediction\""
    )))
}

/// Keeps an experiment's report as record `record_id` and answers it with that id, or
/// without one when it could not be kept (the report itself is still the answer).
async fn record_pitfall(
    state: &AppState,
    record_id: String,
    mut report: protocol::PitfallReport,
) -> protocol::PitfallReport {
    report.record_id = Some(record_id.clone());
    let record = Record {
        id: record_id,
        body: RecordBody::Pitfall(Box::new(report.clone())),
    };
    // Through the recorder, like runs: shutdown waits for this write.
    if let Err(e) = state.recorder.save(record).await {
        tracing::error!("could not record the experiment: {e:#}");
        report.record_id = None;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_errors_name_the_field() {
        match parse_spec(br#"{"batch": "eight"}"#) {
            Err(ApiError::BadRequest { field, message }) => {
                assert_eq!(field.as_deref(), Some("batch"));
                assert!(message.contains("batch"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_spec(b"  "),
            Err(ApiError::BadRequest { field: None, .. })
        ));
        assert!(matches!(
            parse_spec(b"{not json"),
            Err(ApiError::BadRequest { .. })
        ));
        assert_eq!(parse_spec(b"{}").unwrap(), RunSpec::default());
    }
}
