//! The one router: the API under `/api`, the Leptos pages and the built site's static files
//! (wasm, js, css, ECharts), with everything that applies to them — the body limit, the
//! JSON error layer, the Host check, who may drive the server, the security headers and
//! the framing policy. [`router`] is a plain function so tests drive it with `oneshot`.
//!
//! Headers every response carries:
//! - `X-Content-Type-Options: nosniff`.
//! - `Content-Security-Policy`. Pages: `default-src 'self'`; scripts from this server, the
//!   inline scripts Leptos writes (hydration start-up, streamed resources) by a per-page
//!   nonce, and `'wasm-unsafe-eval'` to compile the app's WebAssembly; styles from this
//!   server plus `'unsafe-inline'` (ECharts writes `style` attributes into its tooltips);
//!   images from this server, `data:` and `blob:` (chart exports); no plugins; `base-uri`
//!   and `form-action` this server. Everything else: `default-src 'none'`.
//! - `frame-ancestors`: `/embed/...` pages may be framed by the configured origins, all
//!   others by this server only. Paths with dot segments or encoded slashes are refused
//!   (404) before routing, so "is an embed" is decided on the path that is served.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use leptos::nonce::Nonce;
use leptos::prelude::{provide_context, use_context};
use leptos_axum::{generate_route_list, LeptosRoutes};
use protocol::{Record, RecordSummary};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{api, openapi};
use crate::error::{json_errors, not_found, ApiError, BODY_LIMIT};
use crate::state::AppState;

pub fn router(state: AppState) -> Router {
    // Every route of the API and the embeds is registered with its operation (`routes!`,
    // see crate::openapi), so the document below lists exactly what is routed.
    // Requests that put work on the device: only this server's pages (or allowed ones).
    // The same handlers on a single server and a fleet front (where runs go is the
    // state's `dispatch`).
    let drive = OpenApiRouter::default()
        .routes(routes!(api::create_run))
        .routes(routes!(api::run_pitfall))
        .routes(routes!(api::late_prediction))
        .merge(crate::learn_api::drive_routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), check_drive));
    let api = OpenApiRouter::default()
        .routes(routes!(api::info))
        .routes(routes!(api::get_run))
        .routes(routes!(api::run_events))
        .routes(routes!(api::run_emitted))
        .routes(routes!(api::workers))
        .routes(routes!(api::list_records))
        .routes(routes!(api::get_record))
        .routes(routes!(api::export_record))
        .routes(routes!(api::health))
        .routes(routes!(api::pitfalls))
        .routes(routes!(api::quality_plan))
        .routes(routes!(openapi::serve))
        .merge(crate::learn_api::routes())
        .merge(drive)
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::map_response(json_errors));
    let (documented, mut document) = OpenApiRouter::with_openapi(openapi::base())
        .nest("/api", api)
        .routes(routes!(healthz))
        .routes(routes!(api::metrics))
        // Pictures of recorded results and oEmbed (crate::embeds).
        .merge(crate::embeds::routes())
        .split_for_parts();
    // `/runs/{id}.png|svg` are answered by a middleware below, not a route.
    document.merge(crate::embeds::RunImages::openapi());
    let document = openapi::Document::new(document);

    let routes = generate_route_list(app::App);
    let info = state.info.clone();
    let catalog = state.catalog.clone();
    let leptos = state.leptos.clone();
    let origins = state.origins.clone();
    // The same context for routed pages and the not-found page.
    let context = move || {
        let info = info.current();
        provide_context((*info).clone());
        provide_context(catalog.clone());
        page_context(&origins, &info);
    };
    documented
        // `GET /api/openapi.json` answers it.
        .layer(Extension(document))
        // The hashed, precompressed browser assets (see crate::assets).
        .merge(crate::assets::static_files(std::path::Path::new(
            &*state.leptos.site_root,
        )))
        .leptos_routes_with_context(&state, routes, context.clone(), move || {
            app::shell(leptos.clone())
        })
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(context, app::shell))
        // Record pages: their records read off the async threads, before rendering.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            prefetch_records,
        ))
        // The learn pages' paths and answers, read before rendering.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::learn_api::prefetch,
        ))
        // `/runs/{id}.png|svg`, before the page route `/runs/{id}` could take it.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::embeds::run_images,
        ))
        // Brotli, else gzip, for pages and API answers (the default predicate leaves SSE
        // streams alone, so events are never held back in a compressor's buffer; the site's
        // static files are served precompressed). Level 10: a page's HTML (~35 KB) takes
        // ~13 ms and comes out ~14% smaller than gzip's; gzip stops at its 9.
        .layer(tower_http::compression::CompressionLayer::new().quality(tower_http::CompressionLevel::Precise(10)))
        .layer(middleware::from_fn(normalised_paths))
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        // Outermost but for tracing: refusals carry the headers too.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            security_headers,
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// `GET /healthz`: answers while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "server",
    responses((status = 200, description = "`ok` while the process serves", content_type = "text/plain", body = String)))]
async fn healthz() -> &'static str {
    "ok"
}

/// 421 for a `Host` that is not one of this server's names (see [`crate::origin`]).
async fn check_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match state.origins.check_host(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// Origin and content type of a state-changing request (see [`crate::origin`]).
async fn check_drive(State(state): State<AppState>, request: Request, next: Next) -> Response {
    // Other methods are answered 405 by the route itself.
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    match state.origins.check_drive(request.uri(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// Refuses paths whose meaning changes when decoded: `.`/`..` segments (also as `%2e`) and
/// encoded `/` or `\`. Browsers never send them for links of this site; a server that
/// routed them could serve one page under another page's policy.
async fn normalised_paths(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if !is_normalised(path) {
        if path.starts_with("/api/") {
            return ApiError::NotFound("this API path".into()).into_response();
        }
        return (StatusCode::NOT_FOUND, "not found").into_response();
    }
    next.run(request).await
}

/// Whether `path` means the same decoded as it reads (see [`normalised_paths`]).
fn is_normalised(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    let encoded_separator = lower.contains("%2f") || lower.contains("%5c") || path.contains('\\');
    let dot_segment = lower
        .split('/')
        .any(|s| matches!(s.replace("%2e", ".").as_str(), "." | ".."));
    !(encoded_separator || dot_segment)
}

/// The nonce a page's inline scripts carry; the CSP header allows exactly it.
#[derive(Clone)]
struct PageNonce(Nonce);

/// `X-Content-Type-Options`, the CSP and the framing policy (see the module docs).
async fn security_headers(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    // Decided on the path that is served: others are refused by `normalised_paths`.
    let embed = path.starts_with("/embed/") && is_normalised(path);
    let nonce = Nonce::new();
    request.extensions_mut().insert(PageNonce(nonce.clone()));
    let mut response = next.run(request).await;
    let frame = if embed {
        state.embed_csp.to_string()
    } else {
        "frame-ancestors 'self'".to_string()
    };
    let html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    let policy = if html {
        page_csp(&nonce, &frame)
    } else {
        format!("default-src 'none'; {frame}")
    };
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&policy).unwrap_or_else(|_| {
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'self'")
        }),
    );
    response
}

/// A page's Content-Security-Policy (why each source is there: the module docs).
pub fn page_csp(nonce: &str, frame_ancestors: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; object-src 'none'; \
         base-uri 'self'; form-action 'self'; {frame_ancestors}"
    )
}

/// The records a page shows, read before it renders (SQLite blocks: never on the async
/// threads). Pages find them through the app's lookups, provided by [`page_context`].
#[derive(Clone, Default)]
struct Prefetched {
    records: Arc<HashMap<String, Result<Option<Record>, String>>>,
    index: Option<Arc<Result<Vec<RecordSummary>, String>>>,
}

/// What a page path needs from the database: ids to look up, the `/runs` listing, and
/// whether the page is one record's (then an unknown id answers 404).
fn page_needs(request: &Request) -> (Vec<String>, bool, bool) {
    if request.method() != Method::GET {
        return (vec![], false, false);
    }
    let path = request.uri().path();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["runs", id] | ["embed", "runs", id] => (vec![id.to_string()], false, true),
        ["runs"] => (vec![], true, false),
        ["compare"] => {
            let query: HashMap<String, String> = Query::try_from_uri(request.uri())
                .map(|q: Query<HashMap<String, String>>| q.0)
                .unwrap_or_default();
            let ids = query
                .get("runs")
                .map(|r| app::records::compare_ids(r).0)
                .unwrap_or_default();
            (ids, false, false)
        }
        _ => (vec![], false, false),
    }
}

async fn prefetch_records(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let (ids, index, single) = page_needs(&request);
    if ids.is_empty() && !index {
        return next.run(request).await;
    }
    let store = state.store.clone();
    let read = tokio::task::spawn_blocking(move || {
        let records: HashMap<String, Result<Option<Record>, String>> = ids
            .into_iter()
            .map(|id| {
                let found = if protocol::is_record_id(&id) {
                    store.get(&id).map_err(page_db_error)
                } else {
                    Ok(None)
                };
                (id, found)
            })
            .collect();
        let index = index.then(|| {
            Arc::new(
                store
                    .list(None, app::records::INDEX_LIMIT)
                    .map_err(page_db_error),
            )
        });
        Prefetched {
            records: Arc::new(records),
            index,
        }
    })
    .await
    .unwrap_or_default();
    let unknown = single && read.records.values().all(|r| matches!(r, Ok(None)));
    request.extensions_mut().insert(read);
    let mut response = next.run(request).await;
    if unknown && response.status() == StatusCode::OK {
        // The page still says what is missing; the status says it too.
        *response.status_mut() = StatusCode::NOT_FOUND;
    }
    response
}

/// Per page: the nonce for Leptos's inline scripts, the record lookups over what
/// [`prefetch_records`] read (the request's parts are in context by now), and the
/// `<head>` additions of a permalink or an embed (link previews, a pinned theme).
fn page_context(origins: &crate::origin::Origins, info: &protocol::ServerInfo) {
    let parts = use_context::<axum::http::request::Parts>();
    let extension = |parts: &axum::http::request::Parts| {
        (
            parts.extensions.get::<PageNonce>().cloned(),
            parts.extensions.get::<Prefetched>().cloned(),
        )
    };
    let (nonce, prefetched) = parts.as_ref().map(extension).unwrap_or_default();
    if let Some(learn) = parts.as_ref().and_then(|p| p.extensions.get::<protocol::learn::LearnPageData>()) {
        provide_context(learn.clone());
    }
    if let Some(PageNonce(nonce)) = nonce {
        provide_context(nonce);
    }
    let prefetched = prefetched.unwrap_or_default();
    if let Some(tags) = parts
        .as_ref()
        .and_then(|p| crate::embeds::head_tags(p, &prefetched.records, origins, info))
    {
        provide_context(tags);
    }
    let records = prefetched.records.clone();
    provide_context(app::records::RecordLookup(Arc::new(move |id: &str| {
        records.get(id).cloned().unwrap_or(Ok(None))
    })));
    let index = prefetched.index.clone();
    provide_context(app::records::RecordIndex(Arc::new(
        move |limit: usize| match index.as_deref() {
            Some(Ok(list)) => Ok(list.iter().take(limit).cloned().collect()),
            Some(Err(e)) => Err(e.clone()),
            None => Err("the run database was not read for this page".to_string()),
        },
    )));
}

/// What a page says when the database fails (the details go to the log, not the page).
fn page_db_error(e: anyhow::Error) -> String {
    tracing::error!("run database: {e:#}");
    "the run database is not available".to_string()
}
