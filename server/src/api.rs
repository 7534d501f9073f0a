//! The JSON API: what the server offers (`GET /api/info`), starting a run
//! (`POST /api/runs`), following it (`GET /api/runs/{id}/events`, Server-Sent Events) and
//! reading its report (`GET /api/runs/{id}`). Every error is JSON with a stable code; none
//! leaks internals.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::stream::{self, Stream};
use protocol::{ApiError as ApiErrorPayload, ApiErrorBody, Event, RunCreated, RunSpec, ServerInfo, SpecError};

use crate::runs::{RunState, ViewerGuard};
use crate::state::AppState;

/// Everything an API call can answer instead of success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not a RunSpec (bad JSON, wrong type, unknown field).
    #[error("{message}")]
    BadRequest { message: String, field: Option<String> },
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
        let body = ApiErrorBody { error: ApiErrorPayload { code: code.to_string(), message, field } };
        let mut response = (status, Json(body)).into_response();
        if matches!(self, ApiError::QueueFull { .. }) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        response
    }
}

impl From<engine::EngineError> for ApiError {
    fn from(e: engine::EngineError) -> Self {
        match e {
            engine::EngineError::InvalidSpec(s) => ApiError::InvalidSpec(s),
            engine::EngineError::QueueFull { capacity } => ApiError::QueueFull { capacity },
            engine::EngineError::WorkerGone | engine::EngineError::Torch(_) => ApiError::Unavailable,
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

/// `POST /api/runs`: queue a run; follow it at `events_url`.
pub async fn create_run(State(state): State<AppState>, body: Bytes) -> Result<(StatusCode, Json<RunCreated>), ApiError> {
    let spec = parse_spec(&body)?;
    let (id, run) = state.runs.create();
    let sink_run = run.clone();
    match state.worker.submit(spec, Box::new(move |event| sink_run.push(event))) {
        Ok(ticket) => run.set_ticket(ticket),
        Err(e) => {
            state.runs.remove(&id);
            return Err(e.into());
        }
    }
    let events_url = format!("/api/runs/{id}/events");
    Ok((StatusCode::ACCEPTED, Json(RunCreated { id, events_url })))
}

/// `GET /api/runs/{id}`: the report of a finished run.
pub async fn get_run(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<protocol::Report>, ApiError> {
    let run = state.runs.get(&id).ok_or_else(|| ApiError::NotFound(id.clone()))?;
    if let Some(report) = run.report() {
        return Ok(Json(report));
    }
    Err(match run.outcome() {
        Some(Event::Failed { failure }) => ApiError::NoReport(format!("the run failed: {}", failure.message)),
        _ => ApiError::NoReport("the run has not finished yet; follow its events".into()),
    })
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
    let follow = Follow { changes: run.subscribe(), _viewer: run.view(), run, next: 0, finished: false };
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
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<protocol::PitfallReport>, ApiError> {
    if !engine::pitfalls::exists(&id) {
        return Err(ApiError::NotFound(format!("pitfall {id}")));
    }
    let options: protocol::PitfallOptions = if body.iter().all(u8::is_ascii_whitespace) {
        Default::default()
    } else {
        let de = &mut serde_json::Deserializer::from_slice(&body);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ApiError::BadRequest { message: format!("{path}: {}", e.into_inner()), field: Some(path) }
        })?
    };
    let capacity = state.worker.queue_capacity();
    let _permit = state.experiments.clone().try_acquire_owned().map_err(|_| ApiError::QueueFull { capacity })?;
    let worker = state.worker.clone();
    let result = tokio::task::spawn_blocking(move || worker.call(move |lab| engine::pitfalls::run(lab, &id, options)))
        .await
        .map_err(|_| ApiError::Unavailable)?
        .map_err(ApiError::from)?;
    result.map(Json).map_err(|f| match f.kind {
        protocol::FailureKind::Invalid => ApiError::InvalidSpec(SpecError { field: "device".into(), message: f.message }),
        _ => ApiError::NoReport(f.message),
    })
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
        assert!(matches!(parse_spec(b"  "), Err(ApiError::BadRequest { field: None, .. })));
        assert!(matches!(parse_spec(b"{not json"), Err(ApiError::BadRequest { .. })));
        assert_eq!(parse_spec(b"{}").unwrap(), RunSpec::default());
    }
}
