//! Every answer the API gives instead of success: [`ApiError`], its status, stable code and
//! JSON body, and [`json_errors`], the layer that turns what axum and the connection
//! limits answer by themselves (plain text) into the same JSON. No error leaks internals.

use protocol::settings::SettingId;
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::{ApiError as ApiErrorPayload, ApiErrorBody, SpecError};

use crate::access::Refusal;

/// Largest request body the API reads: a RunSpec is a few hundred bytes.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Everything an API call can answer instead of success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not a RunSpec (bad JSON, wrong type, unknown field, trailing bytes).
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
    /// `POST /api/pitfalls/{id}` for an id that is not a card.
    #[error("there is no pitfall `{0}`; GET /api/pitfalls lists them")]
    UnknownPitfall(String),
    /// The run exists but has no report (still going, or it failed).
    #[error("{0}")]
    NoReport(String),
    /// The run never finished: its server stopped mid-way (the message says when).
    #[error("{0}")]
    Interrupted(String),
    /// The run failed (out of memory, past its time limit, cancelled, a libtorch error):
    /// the message says why and what it measured before; its record keeps that.
    #[error("{0}")]
    Failed(String),
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
    /// A state-changing request whose body is not declared as JSON: a cross-site form or
    /// a `text/plain` fetch (which browsers send without asking the server first).
    #[error("this request must be sent with Content-Type: application/json")]
    UnsupportedMediaType,
    /// A browser request from a page of another origin.
    #[error("requests from {0} may not start work on this server (see --allowed-origins)")]
    ForeignOrigin(String),
    /// A `Host` that is not one of this server's names (DNS rebinding, a misrouted proxy).
    #[error("this server does not answer to the host `{0}` (see --public-url)")]
    MisdirectedHost(String),
    /// A fleet front cannot reach a service it needs (the message names it: NATS or
    /// PostgreSQL); it reconnects by itself.
    #[error("{0}")]
    ServiceDown(String),
    /// A fleet front has no live worker for the run (none announced, or not the named one).
    #[error("{0}")]
    NoWorker(String),
    /// A prediction sent for a run that has already started: predictions are locked by
    /// the request that starts the run (the message says what was locked).
    #[error("{0}")]
    PredictionLocked(String),
    /// A fleet front's route asked of a single server (the message says which).
    #[error("{0}")]
    FleetOnly(String),
    /// A single server's route asked of a fleet front (the message says which and why).
    #[error("{0}")]
    SingleServerOnly(String),
    /// Too many event streams are open at once.
    #[error("too many event streams are open on this server ({0}); try again shortly")]
    TooManyStreams(usize),
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

impl ApiError {
    /// An experiment that failed, as the API answers it: a device it cannot use is the
    /// request's fault (400 naming `device`), anything else a report that could not be made.
    pub fn experiment_failed(f: protocol::RunFailure) -> ApiError {
        match f.kind {
            protocol::FailureKind::Invalid => ApiError::InvalidSpec(SpecError {
                field: SettingId::Device.into(),
                message: f.message,
            }),
            _ => ApiError::NoReport(f.message),
        }
    }
}

/// Logs a database failure and answers the generic [`ApiError::Storage`].
pub fn storage_error(e: anyhow::Error) -> ApiError {
    tracing::error!("run database: {e:#}");
    ApiError::Storage
}

impl ApiError {
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::InvalidSpec(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_spec"),
            ApiError::QueueFull { .. } => (StatusCode::SERVICE_UNAVAILABLE, "queue_full"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::FleetOnly(_) => (StatusCode::NOT_FOUND, "fleet_only"),
            ApiError::SingleServerOnly(_) => (StatusCode::NOT_FOUND, "single_server_only"),
            ApiError::UnknownPitfall(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::NoReport(_) => (StatusCode::CONFLICT, "no_report"),
            ApiError::PredictionLocked(_) => (StatusCode::CONFLICT, "prediction_locked"),
            // Gone for good: there will never be a report.
            ApiError::Interrupted(_) => (StatusCode::GONE, "interrupted"),
            ApiError::Failed(_) => (StatusCode::GONE, "failed"),
            ApiError::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::Storage => (StatusCode::INTERNAL_SERVER_ERROR, "storage"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::ForeignOrigin(_) => (StatusCode::FORBIDDEN, "foreign_origin"),
            ApiError::MisdirectedHost(_) => (StatusCode::MISDIRECTED_REQUEST, "unknown_host"),
            ApiError::TooManyStreams(_) => (StatusCode::SERVICE_UNAVAILABLE, "too_many_streams"),
            ApiError::ServiceDown(_) => (StatusCode::SERVICE_UNAVAILABLE, "service_down"),
            ApiError::NoWorker(_) => (StatusCode::SERVICE_UNAVAILABLE, "no_worker"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let field = match &self {
            ApiError::BadRequest { field, .. } => field.clone(),
            ApiError::InvalidSpec(e) => Some(e.field.to_string()),
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
            ApiError::QueueFull { .. } | ApiError::ServiceDown(_) | ApiError::NoWorker(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            ApiError::TooManyStreams(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
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
                ApiError::UnknownPitfall(id.chars().take(100).collect())
            }
            engine::EngineError::TaskPanicked(reason) => ApiError::NoReport(reason),
        }
    }
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
                BODY_LIMIT / 1024
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

/// The JSON body of an error, for the connection loop's own answers (it has no router).
pub fn error_json(code: &str, message: &str) -> String {
    serde_json::to_string(&ApiErrorBody {
        error: ApiErrorPayload {
            code: code.into(),
            message: message.into(),
            field: None,
        },
    })
    .unwrap_or_else(|_| "{}".into())
}
