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

mod events;
mod pitfalls;
mod records;
pub use events::*;
pub use pitfalls::*;
pub use records::*;
use records::find_record;

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

/// `GET /api/quality-plan?model=NAME[&device=cpu|cuda]`: what the quality measurement of a
/// generation on that model and device will score (the settings, the units of the text
/// each one scores, the text), so that the Generate page can say its time before it runs.
/// Checked as a run's spec is; worked out once per model and device, off the async threads.
#[utoipa::path(get, path = "/quality-plan", tag = "runs",
    params(
        ("model" = String, Query, description = "A served decoder that reads text (the trained model, or one with a tokenizer)"),
        ("device" = Option<String>, Query, description = "`cpu`, `cuda` or `auto` (the default): the device the generation will run on"),
    ),
    responses(
        (status = 200, description = "The plan: `settings` × `tokens` units at the run's prefill rate is its time", body = protocol::QualityPlan),
        (status = 400, description = "A parameter missing, unknown or unreadable (named)", body = protocol::ApiErrorBody),
        (status = 404, description = "Asked of a fleet front: each worker reads its own quality text", body = protocol::ApiErrorBody),
        (status = 422, description = "The model reads no text, or the text cannot be read (the field is named)", body = protocol::ApiErrorBody),
    ))]
pub async fn quality_plan(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<protocol::QualityPlan>, ApiError> {
    let bad = |message: String, field: &str| ApiError::BadRequest { message, field: Some(field.into()) };
    if let Some(other) = query.keys().find(|k| *k != "model" && *k != "device") {
        return Err(bad(format!("`{other}` is not a parameter of /api/quality-plan (model, device)"), other));
    }
    let model = query.get("model").ok_or_else(|| bad("`model` is missing: /api/quality-plan?model=NAME".into(), "model"))?;
    let mut fields = serde_json::json!({ "model": model });
    if let Some(device) = query.get("device") {
        fields["device"] = device.clone().into();
    }
    let spec: RunSpec = parse_object(&serde_json::to_vec(&fields).unwrap_or_default(), "RunSpec", r#"{"model": "torch_bytes"}"#)?;
    let worker = state.dispatch.local().cloned().ok_or_else(|| {
        ApiError::SingleServerOnly("a fleet front has no quality plan: each worker measures quality on its own text (its --quality-text)".into())
    })?;
    let plan = tokio::task::spawn_blocking(move || worker.quality_plan(spec))
        .await
        .map_err(|_| ApiError::Unavailable)?
        .map_err(ApiError::InvalidSpec)?;
    Ok(Json(plan))
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
    let mut spec = parse_spec(&body)?;
    spec.model = state.catalog.resolve(spec.model);
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
