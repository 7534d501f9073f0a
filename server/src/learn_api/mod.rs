//! `/api/learn/...`: the onboarding paths, running a step with its locked prediction
//! ([`step`]), composing a path (`POST /api/learn`, behind the access token when one is set)
//! and the answers (JSON, CSV); and what the `/learn/...` pages are given to render
//! ([`prefetch`]). The paths and the answers table are [`crate::learn`]'s.

pub mod step;

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use protocol::learn::{summarise, AnswersView, LearnPageData, LearnPath, PathSummary, StepOutcome, StepRequest};

use crate::api::{parse_object, ClientAddr};
use crate::error::{storage_error, ApiError};
use crate::learn::answers::{csv, MAX_ANSWERS_PER_PATH};
use crate::state::AppState;

/// The routes that read.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/learn", get(list))
        .route("/learn/{id}", get(one))
        .route("/learn/{id}/answers", get(answers))
}

/// The routes that start work or change what is stored (the router puts them behind the
/// Origin and content-type checks of every state-changing request).
pub fn drive_routes() -> Router<AppState> {
    Router::new()
        .route("/learn", post(compose))
        .route("/learn/{id}/steps/{n}", post(run_step))
}

/// `GET /api/learn`: the paths this server serves.
async fn list(State(state): State<AppState>) -> Json<Vec<PathSummary>> {
    Json(state.learn.list())
}

fn find(state: &AppState, id: &str) -> Result<std::sync::Arc<LearnPath>, ApiError> {
    state
        .learn
        .get(id)
        .ok_or_else(|| ApiError::NotFound(format!("path `{}` (GET /api/learn lists them)", id.chars().take(64).collect::<String>())))
}

/// `GET /api/learn/{id}`: one path, its steps in order.
async fn one(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<LearnPath>, ApiError> {
    Ok(Json((*find(&state, &id)?).clone()))
}

/// `POST /api/learn/{id}/steps/{n}`: runs step `n` (from 1) with the prediction the body
/// locks (`{"prediction": {"choice": "lower"}}`, `{"value": 0.5}` or `"skipped"`).
async fn run_step(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    headers: HeaderMap,
    Path((id, n)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<StepOutcome>, ApiError> {
    let path = find(&state, &id)?;
    let n: usize = n.parse().map_err(|_| ApiError::NotFound(format!("step `{}` of path `{id}` (steps are numbered from 1)", n.chars().take(20).collect::<String>())))?;
    let request: StepRequest = parse_object(&body, "step request", r#"{"prediction": {"choice": "lower"}}"#)?;
    step::run(&state, &headers, peer, path, n, request.prediction).await.map(Json)
}

/// The body of `POST /api/learn`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Compose {
    toml: String,
    /// Only check it: nothing is kept.
    #[serde(default)]
    check: bool,
}

/// `POST /api/learn`: a path composed on `/learn/new`, as the TOML a `paths/` file holds;
/// kept in the learn database and served from now on (201 with its address), or with
/// `"check": true` only checked. Needs the access token when one is configured.
async fn compose(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    state.guard.authorize(&headers)?;
    let request: Compose = parse_object(&body, "path", r#"{"toml": "id = \"ours\"\ntitle = \"...\"\n[[step]]\n..."}"#)?;
    let cards = state.info.current().pitfalls.clone();
    let mut path = crate::learn::paths::parse(&request.toml, &cards, "composed")
        .map_err(|e| ApiError::BadRequest { message: format!("{}: {}", e.field, e.message), field: Some(format!("toml.{}", e.field)) })?;
    path.source = "composed".into();
    let taken = || ApiError::PredictionLocked(format!("a path `{}` exists already: choose another id", path.id));
    if state.learn.get(&path.id).is_some() {
        return Err(taken());
    }
    let url = format!("/learn/{}", path.id);
    if request.check {
        return Ok((StatusCode::OK, Json(serde_json::json!({ "id": path.id, "url": url, "steps": path.steps.len(), "kept": false }))).into_response());
    }
    let db = state.learn.db.clone();
    let (id, text) = (path.id.clone(), request.toml.clone());
    let added = tokio::task::spawn_blocking(move || db.add_path(&id, &text, crate::learn::now_s()))
        .await
        .map_err(|_| ApiError::Storage)?
        .map_err(storage_error)?;
    if !added || !state.learn.insert_composed(path.clone()) {
        return Err(taken());
    }
    tracing::info!(path = %path.id, steps = path.steps.len(), "onboarding path composed");
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": path.id, "url": url, "steps": path.steps.len(), "kept": true }))).into_response())
}

/// The answers of `path`, summarised.
async fn answers_view(state: &AppState, path: &LearnPath) -> Result<(AnswersView, Vec<protocol::learn::Answer>), ApiError> {
    let db = state.learn.db.clone();
    let id = path.id.clone();
    let kept = tokio::task::spawn_blocking(move || db.answers(&id))
        .await
        .map_err(|_| ApiError::Storage)?
        .map_err(storage_error)?;
    let cards = state.info.current().pitfalls.clone();
    let view = AnswersView { steps: summarise(path, &cards, &kept), kept: kept.len(), max: MAX_ANSWERS_PER_PATH };
    Ok((view, kept))
}

/// `GET /api/learn/{id}/answers[?format=csv]`: per step, the predictions' histogram with
/// the measured value marked, the share right and the most common wrong answer; or every
/// kept answer as CSV.
async fn answers(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let path = find(&state, &id)?;
    let (view, kept) = answers_view(&state, &path).await?;
    match query.get("format").map(String::as_str) {
        None | Some("json") => Ok(Json(view).into_response()),
        Some("csv") => Ok((
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                (header::CONTENT_DISPOSITION, format!("attachment; filename=\"gradless-{}-answers.csv\"", path.id)),
            ],
            csv(&path.id, &kept),
        )
            .into_response()),
        Some(other) => Err(ApiError::BadRequest {
            message: format!("`{}` is not a format of the answers: json or csv", other.chars().take(20).collect::<String>()),
            field: Some("format".into()),
        }),
    }
}

/// For `/learn`, `/learn/new`, `/learn/{id}`, `/learn/{id}/answers` and `/embed/learn/{id}`:
/// what the page renders (the paths, the one asked for, its answers), read before rendering
/// and put in the request for the router's page context. An unknown path answers 404 (the
/// page says so too).
pub async fn prefetch(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::GET {
        return next.run(request).await;
    }
    let segments: Vec<String> = request.uri().path().trim_start_matches('/').split('/').map(str::to_string).collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let (id, with_answers) = match segments.as_slice() {
        ["learn"] | ["learn", "new"] => (None, false),
        ["learn", id] | ["embed", "learn", id] => (Some(*id), false),
        ["learn", id, "answers"] => (Some(*id), true),
        _ => return next.run(request).await,
    };
    let mut data = LearnPageData { paths: state.learn.list(), path: None, answers: None };
    let mut unknown = false;
    if let Some(id) = id {
        match state.learn.get(id) {
            Some(path) => {
                if with_answers {
                    data.answers = answers_view(&state, &path).await.ok().map(|(v, _)| v);
                }
                data.path = Some((*path).clone());
            }
            None => unknown = true,
        }
    }
    request.extensions_mut().insert(data);
    let mut response = next.run(request).await;
    if unknown && response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::NOT_FOUND;
    }
    response
}
