//! The JSON API: what the server offers (`GET /api/info`), starting a run
//! (`POST /api/runs`), following it (`GET /api/runs/{id}/events`, Server-Sent Events),
//! reading its report (`GET /api/runs/{id}`, also after a restart), the recorded results
//! (`GET /api/records`, `/api/records/{id}`, `/api/records/{id}/export/{json|csv|py}`),
//! the pitfall experiments and the worker's health. Every error is JSON with a stable
//! code; none leaks internals.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, Stream};
use protocol::{
    ApiError as ApiErrorPayload, ApiErrorBody, Event, Record, RecordBody, RecordKind,
    RecordSummary, RunCreated, RunSpec, ServerInfo, SpecError, WorkerHealth,
};

use crate::export::{export, Format};
use crate::guard::Refusal;
use crate::runs::{RunState, ViewerGuard};
use crate::state::AppState;

/// Everything an API call can answer instead of success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not a RunSpec (bad JSON, wrong type, unknown field).
    #[error("{message}")]
    BadRequest {
        message: String,
        field: Option<String>,
    },
    /// A well-formed spec that breaks a rule.
    #[error("{0}")]
    InvalidSpec(SpecError),
    /// Too many runs wait for the device.
    #[error("the run queue is full ({capacity} runs waiting); try again in a few seconds")]
    QueueFull { capacity: usize },
    #[error("no run with id `{0}`")]
    NotFound(String),
    /// The run exists but has no report (still going, or it failed).
    #[error("{0}")]
    NoReport(String),
    /// The device worker is gone (shutting down).
    #[error("the measurement worker is not available")]
    Unavailable,
    #[error("starting runs on this server needs its access token (Authorization: Bearer <token>)")]
    Unauthorized,
    #[error("too many runs from this client: {per_minute} per minute are allowed; try again in {} s", retry_after.as_secs())]
    RateLimited {
        retry_after: Duration,
        per_minute: u32,
    },
    /// The run database failed (logged; the message stays generic).
    #[error("the run database is not available")]
    Storage,
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Unauthorized => ApiError::Unauthorized,
            Refusal::RateLimited {
                retry_after,
                per_minute,
            } => ApiError::RateLimited {
                retry_after,
                per_minute,
            },
        }
    }
}

fn storage_error(e: anyhow::Error) -> ApiError {
    tracing::error!("run database: {e:#}");
    ApiError::Storage
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::InvalidSpec(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_spec"),
            ApiError::QueueFull { .. } => (StatusCode::SERVICE_UNAVAILABLE, "queue_full"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::NoReport(_) => (StatusCode::CONFLICT, "no_report"),
            ApiError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::Storage => (StatusCode::INTERNAL_SERVER_ERROR, "storage"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let field = match &self {
            ApiError::BadRequest { field, .. } => field.clone(),
            ApiError::InvalidSpec(e) => Some(e.field.clone()),
            _ => None,
        };
        let message = match &self {
            ApiError::InvalidSpec(e) => e.message.clone(),
            other => other.to_string(),
        };
        if status.is_server_error() {
            tracing::warn!(code, "{message}");
        }
        let body = ApiErrorBody {
            error: ApiErrorPayload {
                code: code.to_string(),
                message,
                field,
            },
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            ApiError::QueueFull { .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            ApiError::RateLimited { retry_after, .. } => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after.as_secs().max(1)),
                );
            }
            ApiError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"gradless\""),
                );
            }
            _ => {}
        }
        response
    }
}

impl From<engine::EngineError> for ApiError {
    fn from(e: engine::EngineError) -> Self {
        match e {
            engine::EngineError::InvalidSpec(s) => ApiError::InvalidSpec(s),
            engine::EngineError::QueueFull { capacity } => ApiError::QueueFull { capacity },
            engine::EngineError::WorkerGone | engine::EngineError::Torch(_) => {
                ApiError::Unavailable
            }
            engine::EngineError::UnknownPitfall { id, .. } => {
                ApiError::NotFound(format!("pitfall {id}"))
            }
            engine::EngineError::TaskPanicked(reason) => ApiError::NoReport(reason),
        }
    }
}

/// Parses a RunSpec body, naming the field at fault.
pub fn parse_spec(body: &[u8]) -> Result<RunSpec, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::BadRequest {
            message: "the request body must be a JSON RunSpec, e.g. {\"model\": \"tiny_mlp\", \"batch\": 8}".into(),
            field: None,
        });
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize::<_, RunSpec>(de).map_err(|e| {
        let path = e.path().to_string();
        // "." is the whole document, "?" a syntax error before any field.
        let field = (path != "." && path != "?").then_some(path);
        let inner = e.into_inner();
        let message = match &field {
            Some(f) => format!("{f}: {inner}"),
            None => format!("not a valid RunSpec: {inner}"),
        };
        ApiError::BadRequest { message, field }
    })
}

/// `GET /api/info`
pub async fn info(State(state): State<AppState>) -> Json<ServerInfo> {
    Json((*state.info).clone())
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

/// `POST /api/runs`: queue a run; follow it at `events_url`. Checked in this order: the
/// token, the spec, the client's rate, the queue. When it finishes, the report is recorded
/// under the run's id before the `done` event goes out.
pub async fn create_run(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<RunCreated>), ApiError> {
    state.guard.authorize(&headers)?;
    let spec = parse_spec(&body)?;
    state
        .worker
        .check(spec.clone())
        .map_err(ApiError::InvalidSpec)?;
    state.guard.charge(&headers, peer.as_ref())?;
    let (id, run) = state.runs.create();
    let sink_run = run.clone();
    let store = state.store.clone();
    let record_id = id.clone();
    let sink = move |event: Event| {
        if let Event::Done { report } = &event {
            let record = Record {
                id: record_id.clone(),
                body: RecordBody::Run(report.clone()),
            };
            if let Err(e) = store.save(&record) {
                tracing::error!(run = %record_id, "could not record the run: {e:#}");
            }
        }
        sink_run.push(event);
    };
    match state.worker.submit(spec, Box::new(sink)) {
        Ok(ticket) => run.set_ticket(ticket),
        Err(e) => {
            state.runs.remove(&id);
            return Err(e.into());
        }
    }
    let events_url = format!("/api/runs/{id}/events");
    Ok((StatusCode::ACCEPTED, Json(RunCreated { id, events_url })))
}

/// `GET /api/runs/{id}`: the report of a finished run: live from this process, or recorded
/// (also by an earlier process on the same database).
pub async fn get_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<protocol::Report>, ApiError> {
    let Some(run) = state.runs.get(&id) else {
        let record = find_record(&state, &id).await?;
        return match record.body {
            RecordBody::Run(report) => Ok(Json(*report)),
            RecordBody::Pitfall(_) => Err(ApiError::NotFound(format!(
                "{id} (it is a pitfall experiment: GET /api/records/{id})"
            ))),
        };
    };
    if let Some(report) = run.report() {
        return Ok(Json(report));
    }
    Err(match run.outcome() {
        Some(Event::Failed { failure }) => {
            ApiError::NoReport(format!("the run failed: {}", failure.message))
        }
        _ => ApiError::NoReport("the run has not finished yet; follow its events".into()),
    })
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
pub async fn get_record(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Record>, ApiError> {
    find_record(&state, &id).await.map(Json)
}

/// `GET /api/records/{id}/export/{json|csv|py}`: a file to download.
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

/// `GET /api/health`: the worker's tasks, queue and leak checks.
pub async fn health(State(state): State<AppState>) -> Json<WorkerHealth> {
    Json(state.worker.health())
}

/// `GET /api/runs/{id}/events`: every event of the run from the first, then live ones, as
/// SSE messages whose data is the event's JSON. The stream ends after `done` or `failed`.
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let run = state.runs.get(&id).ok_or(ApiError::NotFound(id))?;
    Ok(Sse::new(event_stream(run)).keep_alive(KeepAlive::new().interval(Duration::from_secs(10))))
}

struct Follow {
    run: Arc<RunState>,
    next: usize,
    changes: tokio::sync::watch::Receiver<usize>,
    finished: bool,
    _viewer: ViewerGuard,
}

fn event_stream(run: Arc<RunState>) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let follow = Follow {
        changes: run.subscribe(),
        _viewer: run.view(),
        run,
        next: 0,
        finished: false,
    };
    stream::unfold(follow, |mut f| async move {
        loop {
            if f.finished {
                return None;
            }
            if let Some(event) = f.run.get(f.next) {
                f.next += 1;
                f.finished = event.is_terminal();
                // Unnamed SSE messages, so a browser's `onmessage` sees them all; the JSON
                // carries its own `type`.
                let data = serde_json::to_string(&event).unwrap_or_else(|_| "{}".into());
                return Some((Ok(SseEvent::default().data(data)), f));
            }
            // Nothing new: wait for the worker (the sender lives as long as the run state).
            if f.changes.changed().await.is_err() {
                return None;
            }
        }
    })
}

/// `GET /api/pitfalls`: the cards, in guided-tour order.
pub async fn pitfalls(State(state): State<AppState>) -> Json<Vec<protocol::PitfallInfo>> {
    Json(state.info.pitfalls.clone())
}

/// `POST /api/pitfalls/{id}`: runs the experiment (body: optional PitfallOptions) and
/// answers its report when it is done.
pub async fn run_pitfall(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<protocol::PitfallReport>, ApiError> {
    state.guard.authorize(&headers)?;
    if !engine::pitfalls::exists(&id) {
        return Err(ApiError::NotFound(format!("pitfall {id}")));
    }
    let options: protocol::PitfallOptions = if body.iter().all(u8::is_ascii_whitespace) {
        Default::default()
    } else {
        let de = &mut serde_json::Deserializer::from_slice(&body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ApiError::BadRequest {
                message: format!("{path}: {}", e.into_inner()),
                field: Some(path),
            }
        })?
    };
    state.guard.charge(&headers, peer.as_ref())?;
    let capacity = state.worker.queue_capacity();
    let _permit = state
        .experiments
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::QueueFull { capacity })?;
    let worker = state.worker.clone();
    let result = tokio::task::spawn_blocking(move || {
        worker.call(move |lab| {
            engine::pitfalls::run(lab, &id, options, &engine::RunControl::default())
        })
    })
    .await
    .map_err(|_| ApiError::Unavailable)?
    .map_err(ApiError::from)?;
    let mut report = result.map_err(|f| match f.kind {
        protocol::FailureKind::Invalid => ApiError::InvalidSpec(SpecError {
            field: "device".into(),
            message: f.message,
        }),
        _ => ApiError::NoReport(f.message),
    })?;
    let record_id = state.runs.fresh_id();
    report.record_id = Some(record_id.clone());
    let record = Record {
        id: record_id,
        body: RecordBody::Pitfall(Box::new(report.clone())),
    };
    let store = state.store.clone();
    match tokio::task::spawn_blocking(move || store.save(&record)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!("could not record the experiment: {e:#}");
            report.record_id = None;
        }
        Err(_) => report.record_id = None,
    }
    Ok(Json(report))
}

/// Errors that axum answers by itself (a body over the limit, a wrong method, a path it
/// cannot decode) come as plain text; under `/api` they become the same JSON as ours.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            format!(
                "the request body is larger than this server accepts ({} KiB)",
                crate::web::BODY_LIMIT / 1024
            )
        }
        StatusCode::METHOD_NOT_ALLOWED => "this API path does not take that method".to_string(),
        s if s.is_server_error() => "the server could not answer this request".to_string(),
        _ => String::from_utf8_lossy(&text).trim().to_string(),
    };
    let body = ApiErrorBody {
        error: ApiErrorPayload {
            code: code.to_string(),
            message,
            field: None,
        },
    };
    let mut response = (status, Json(body)).into_response();
    for (name, value) in parts
        .headers
        .iter()
        .filter(|(n, _)| *n == header::ALLOW || *n == header::RETRY_AFTER)
    {
        response.headers_mut().insert(name, value.clone());
    }
    response
}

/// Unknown `/api/...` paths answer JSON too.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("this API path".into())
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
