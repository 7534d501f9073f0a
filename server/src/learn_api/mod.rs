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
use axum::Json;
use protocol::learn::{summarise, AnswersView, LearnPageData, LearnPath, PathSummary, StepOutcome, StepRequest};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{parse_object, ClientAddr};
use crate::error::{storage_error, ApiError};
use crate::learn::answers::{csv, MAX_ANSWERS_PER_PATH};
use crate::state::AppState;

/// The routes that read, with their operations (see [`crate::openapi`]).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(list))
        .routes(routes!(one))
        .routes(routes!(answers))
}

/// The routes that start work or change what is stored (the router puts them behind the
/// Origin and content-type checks of every state-changing request).
pub fn drive_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(compose))
        .routes(routes!(run_step))
}

/// `GET /api/learn`: the paths this server serves.
#[utoipa::path(get, path = "/learn", operation_id = "learn_paths", tag = "learn",
    responses((status = 200, description = "The onboarding paths this server serves: the shipped one, the `paths/` folder's, the composed ones", body = Vec<protocol::learn::PathSummary>)))]
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
#[utoipa::path(get, path = "/learn/{id}", operation_id = "learn_path", tag = "learn",
    params(("id" = String, Path, description = "The path's id (see GET /api/learn)")),
    responses(
        (status = 200, description = "The path: title, the lead's note, its steps in order (a card with model, batch and device, or a change of one setting from -> to)", body = protocol::learn::LearnPath),
        (status = 404, description = "No such path", body = protocol::ApiErrorBody),
    ))]
async fn one(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<LearnPath>, ApiError> {
    Ok(Json((*find(&state, &id)?).clone()))
}

/// `POST /api/learn/{id}/steps/{step}`: runs that step (numbered from 1) with the prediction the body
/// locks (`{"prediction": {"choice": "lower"}}`, `{"value": 0.5}` or `"skipped"`).
#[utoipa::path(post, path = "/learn/{id}/steps/{step}", operation_id = "learn_step", tag = "learn",
    params(("id" = String, Path, description = "The path's id"), ("step" = u32, Path, description = "The step, from 1")),
    request_body(content = protocol::learn::StepRequest, description = "`prediction`: the answer to the step's question, locked by this request (`\"skipped\"`: run without predicting, not kept among the answers)"),
    responses(
        (status = 200, description = "The prediction against the measurement (`scored`), with the card's recorded report or the change's two recorded runs; `counted` when the answer was kept", body = protocol::learn::StepOutcome),
        (status = 400, description = "A malformed body (the field is named: `prediction...`)", body = protocol::ApiErrorBody),
        (status = 401, description = "This server wants its token", body = protocol::ApiErrorBody),
        (status = 404, description = "No such path or step", body = protocol::ApiErrorBody),
        (status = 409, description = "The experiment or a run failed (the message says why)", body = protocol::ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = protocol::ApiErrorBody),
        (status = 422, description = "A prediction the step's question cannot take (field `prediction`)", body = protocol::ApiErrorBody),
        (status = 429, description = "Rate limited: runs, or answers per client per minute", body = protocol::ApiErrorBody),
        (status = 503, description = "The queue is full", body = protocol::ApiErrorBody),
    ))]
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
#[utoipa::path(post, path = "/learn", operation_id = "learn_compose", tag = "learn",
    request_body(content = crate::openapi::ComposeBody, description = "A path composed on /learn/new, as TOML"),
    responses(
        (status = 200, description = "Checked only (`check: true`): `{id, url, steps}`"),
        (status = 201, description = "Kept and served from now on: `{id, url, steps}`"),
        (status = 400, description = "The TOML breaks a rule: the field is named (`toml.step[2].card`)", body = protocol::ApiErrorBody),
        (status = 401, description = "This server wants its token", body = protocol::ApiErrorBody),
        (status = 409, description = "A path with this id exists", body = protocol::ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = protocol::ApiErrorBody),
    ))]
async fn compose(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    state.guard.authorize(&headers)?;
    let request: Compose = parse_object(&body, "path", r#"{"toml": "id = \"ours\"\ntitle = \"...\"\n[[step]]\n..."}"#)?;
    let cards = state.info.current().pitfalls.clone();
    let mut path = crate::learn::paths::parse(&request.toml, &cards, "composed", &state.catalog)
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
#[utoipa::path(get, path = "/learn/{id}/answers", operation_id = "learn_answers", tag = "learn",
    params(("id" = String, Path, description = "The path's id"), ("format" = Option<String>, Query, description = "`json` (default) or `csv`: every kept answer")),
    responses(
        (status = 200, description = "Per step, the predictions' histogram with the measured value's bar marked, the share right and the most common wrong answer (or the CSV)", body = crate::openapi::AnswersSchema),
        (status = 400, description = "An unknown format (field `format`)", body = protocol::ApiErrorBody),
        (status = 404, description = "No such path", body = protocol::ApiErrorBody),
    ))]
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
