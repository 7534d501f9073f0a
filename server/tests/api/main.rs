//! The HTTP API driven through the router without a socket (and, in `connections`, over
//! loopback): good input gets runs and reports, bad input gets 4xx JSON that names what is
//! wrong, only this server's pages may drive it, and the server keeps serving. One test
//! binary, one module per concern; the helpers here are shared.

mod access;
#[path = "../common/mod.rs"]
mod common;
mod connections;
mod embeds;
mod learn;
mod openapi;
mod pages;
mod pitfalls;
mod quant;
mod records;
mod runs;

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use protocol::{ApiErrorBody, Event};
use server::config::EngineArgs;
use server::state::AppState;
use tower::ServiceExt;

pub fn engine_args() -> EngineArgs {
    EngineArgs {
        threads: Some(1),
        max_batch: 256,
        memory_limit_mib: None,
        models_dir: None,
        hf_cache: false,
        quality_text: None,
        python: None,
    }
}

/// One worker for the whole test binary: building every model for /api/info takes a while.
pub fn state() -> AppState {
    static STATE: OnceLock<AppState> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let worker =
                server::start_worker(server::worker_config(&engine_args(), 32, None)).unwrap();
            server::build_state(
                worker,
                std::path::Path::new("target/site"),
                "127.0.0.1:0".parse().unwrap(),
                server::state::Services::ephemeral().unwrap(),
            )
            .unwrap()
        })
        .clone()
}

/// The shared state with a worker of its own (`queue` runs may wait).
pub fn state_with_worker(queue: usize) -> AppState {
    let worker = server::start_worker(server::worker_config(&engine_args(), queue, None)).unwrap();
    let mut state = state();
    state.dispatch = server::dispatch::Dispatch::Local(std::sync::Arc::new(worker));
    state
}

pub fn app() -> Router {
    server::router(state())
}

pub async fn send(app: Router, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let res = app.oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, headers, body)
}

pub fn post_run(body: &str) -> Request<Body> {
    post_json("/api/runs", body)
}

pub fn post_json(uri: &str, body: &str) -> Request<Body> {
    Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

pub fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

pub fn error_of(body: &[u8]) -> protocol::ApiError {
    serde_json::from_slice::<ApiErrorBody>(body)
        .unwrap_or_else(|e| panic!("not a JSON error ({e}): {}", String::from_utf8_lossy(body)))
        .error
}

/// Follows a run's events to the end (through the router) and returns them.
pub async fn follow(router: Router, events_url: &str) -> Vec<Event> {
    let res = router.oneshot(get(events_url)).await.unwrap();
    events_of(res).await
}

/// The events of an SSE response, read until the terminal one.
pub async fn events_of(res: axum::response::Response) -> Vec<Event> {
    read_events(res, usize::MAX).await
}

/// At most `limit` events of an SSE response (stops early at the terminal one).
pub async fn read_events(res: axum::response::Response, limit: usize) -> Vec<Event> {
    let mut body = res.into_body();
    let (mut reader, mut events) = (common::SseReader::default(), vec![]);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            events.extend(reader.push(&data));
        }
        if events.last().is_some_and(Event::is_terminal) || events.len() >= limit {
            break;
        }
    }
    events
}

pub use common::Lcg;
