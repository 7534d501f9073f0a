//! The router: the API under `/api`, the Leptos pages, and the built site's static files
//! (wasm, js, css, ECharts) from the site root. `app(state)` is a plain function so tests
//! drive it with `oneshot`, no socket needed. It also owns who may frame the pages: only
//! `/embed/...` may be framed by the configured origins; everything else by this server only.

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use leptos::prelude::provide_context;
use leptos_axum::{generate_route_list, LeptosRoutes};

use crate::api;
use crate::state::AppState;

/// Largest request body the API reads: a RunSpec is a few hundred bytes.
pub const BODY_LIMIT: usize = 64 * 1024;

pub fn app(state: AppState) -> Router {
    let api = Router::new()
        .route("/info", get(api::info))
        .route("/runs", post(api::create_run))
        .route("/runs/{id}", get(api::get_run))
        .route("/runs/{id}/events", get(api::run_events))
        .route("/records", get(api::list_records))
        .route("/records/{id}", get(api::get_record))
        .route("/records/{id}/export/{format}", get(api::export_record))
        .route("/health", get(api::health))
        .route("/pitfalls", get(api::pitfalls))
        .route("/pitfalls/{id}", post(api::run_pitfall))
        .fallback(api::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::map_response(api::json_errors));

    let routes = generate_route_list(app::App);
    let info = state.info.clone();
    let leptos = state.leptos.clone();
    // Pages of recorded results render with their figures: the app looks them up here.
    let store = state.store.clone();
    let lookup = app::records::RecordLookup(std::sync::Arc::new(move |id: &str| {
        if !protocol::is_record_id(id) {
            return Ok(None);
        }
        store.get(id).map_err(page_db_error)
    }));
    let store = state.store.clone();
    let index = app::records::RecordIndex(std::sync::Arc::new(move |limit: usize| {
        store.list(None, limit).map_err(page_db_error)
    }));
    Router::new()
        .nest("/api", api)
        .route("/healthz", get(|| async { "ok" }))
        .leptos_routes_with_context(
            &state,
            routes,
            move || {
                provide_context((*info).clone());
                provide_context(lookup.clone());
                provide_context(index.clone());
            },
            move || app::shell(leptos.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(
            app::shell,
        ))
        // gzip for pages, wasm, js and css (the default predicate leaves SSE streams alone,
        // so events are never held back in a compressor's buffer).
        .layer(tower_http::compression::CompressionLayer::new())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            frame_policy,
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// What a page says when the database fails (the details go to the log, not the page).
fn page_db_error(e: anyhow::Error) -> String {
    tracing::error!("run database: {e:#}");
    "the run database is not available".to_string()
}

/// `Content-Security-Policy: frame-ancestors ...` on every response: embeds may be framed
/// by the configured origins, all other pages only by this server (clickjacking).
async fn frame_policy(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let embed = request.uri().path().starts_with("/embed/");
    let mut response = next.run(request).await;
    let policy = if embed {
        HeaderValue::from_str(&state.embed_csp)
            .unwrap_or_else(|_| HeaderValue::from_static("frame-ancestors 'self'"))
    } else {
        HeaderValue::from_static("frame-ancestors 'self'")
    };
    response
        .headers_mut()
        .insert(header::CONTENT_SECURITY_POLICY, policy);
    response
}
