//! Recorded results where teams write: their pictures and link previews.
//!
//! - `GET /runs/{id}.svg|png` (a run or a pitfall result: both are permalinked at
//!   `/runs/{id}`) and `GET /compare.svg|png?runs=ID,ID`: the `render` crate's pictures,
//!   with `?theme=light|dark&width=N&scale=1|2`; a run's `?chart=NAME&height=N` is one of
//!   its charts alone, at the size of the page's element it stands in for. A record never changes, so neither does
//!   its picture: `Cache-Control: immutable`, an ETag (answered 304), and a small cache of
//!   the bytes. A missing id is 404, a malformed option 400 naming it (JSON, as the API).
//! - `GET /oembed?url=...&format=json`: the oEmbed answer for a permalink (`rich`: the
//!   iframe, with the PNG as thumbnail; `photo`: the PNG, with `type=photo` or a URL of the
//!   PNG itself); 404 for a URL this server does not serve, 400 naming `format` for another format.
//! - [`head_tags`]: the Open Graph / Twitter-card tags and the oEmbed link of a permalink
//!   page, and an embed's pinned `?theme=`, which the router's page context hands the shell.
//!
//! Pictures are drawn from the stored record on a thread of their own, one at a time and at
//! the lowest CPU priority, never on the device thread (which only measures): a run in
//! progress is not slowed by them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::{Record, RecordBody, ServerInfo};
use render::preview::{OembedAsk, Preview, Tag};
use render::ImageOptions;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{storage_error, ApiError};

mod preview;
pub use preview::head_tags;
use crate::origin::Origins;
use crate::state::AppState;

/// The routes with paths of their own, with their operations (`/runs/{id}.png` goes
/// through [`run_images`], and its operations through [`RunImages`]).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::default()
        .routes(routes!(compare_svg))
        .routes(routes!(compare_png))
        .routes(routes!(preview::oembed))
}

/// The operations [`run_images`] answers. No route carries them (the page route
/// `/runs/{id}` would take the name), so the router adds them to the document from here.
#[derive(utoipa::OpenApi)]
#[openapi(paths(run_png, run_svg))]
pub struct RunImages;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::Svg => "image/svg+xml",
            Format::Png => "image/png",
        }
    }
    fn ext(self) -> &'static str {
        match self {
            Format::Svg => "svg",
            Format::Png => "png",
        }
    }
}

/// What a picture or a preview is of.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Subject {
    /// A run or pitfall result, by id.
    Record(String),
    /// Runs side by side, by their ids (in order).
    Compare(Vec<String>),
}

impl Subject {
    fn ids(&self) -> Vec<String> {
        match self {
            Subject::Record(id) => vec![id.clone()],
            Subject::Compare(ids) => ids.clone(),
        }
    }
}

/// `/runs/{id}.svg` → (`id`, svg).
fn run_image_path(path: &str) -> Option<(String, Format)> {
    let file = path.strip_prefix("/runs/")?;
    let (id, ext) = file.rsplit_once('.')?;
    let format = match ext {
        "svg" => Format::Svg,
        "png" => Format::Png,
        _ => return None,
    };
    (!id.is_empty() && !id.contains('/')).then(|| (id.to_string(), format))
}

/// Middleware ahead of the pages (whose `/runs/{id}` would take the name): answers
/// `GET /runs/{id}.svg|png`, passes everything else on.
pub async fn run_images(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let image = matches!(*request.method(), Method::GET | Method::HEAD)
        .then(|| run_image_path(request.uri().path()))
        .flatten();
    match image {
        Some((id, Format::Png)) => run_png(&state, id, request.uri(), request.headers()).await,
        Some((id, Format::Svg)) => run_svg(&state, id, request.uri(), request.headers()).await,
        None => next.run(request).await,
    }
}

/// `GET /runs/{id}.png`, answered by [`run_images`].
#[utoipa::path(get, path = "/runs/{id}.png", tag = "embeds",
    params(("id" = String, Path, description = "The record's id"), crate::openapi::PictureQuery),
    responses(
        (status = 200, description = "The recorded result's picture (immutable, with an ETag)", content_type = "image/png", body = Vec<u8>),
        (status = 304, description = "Not modified (If-None-Match)"),
        (status = 400, description = "A malformed option (named)", body = protocol::ApiErrorBody),
        (status = 404, description = "No such record", body = protocol::ApiErrorBody),
        (status = 409, description = "The record has no report to draw (running, interrupted or failed; the message says which)", body = protocol::ApiErrorBody),
    ))]
async fn run_png(state: &AppState, id: String, uri: &Uri, headers: &HeaderMap) -> Response {
    run_image(state, id, Format::Png, uri, headers).await
}

/// `GET /runs/{id}.svg`, answered by [`run_images`].
#[utoipa::path(get, path = "/runs/{id}.svg", tag = "embeds",
    params(("id" = String, Path, description = "The record's id"), crate::openapi::PictureQuery),
    responses(
        (status = 200, description = "The recorded result's picture as SVG (immutable, with an ETag)", content_type = "image/svg+xml", body = String),
        (status = 304, description = "Not modified (If-None-Match)"),
        (status = 400, description = "A malformed option (named)", body = protocol::ApiErrorBody),
        (status = 404, description = "No such record", body = protocol::ApiErrorBody),
        (status = 409, description = "The record has no report to draw (running, interrupted or failed; the message says which)", body = protocol::ApiErrorBody),
    ))]
async fn run_svg(state: &AppState, id: String, uri: &Uri, headers: &HeaderMap) -> Response {
    run_image(state, id, Format::Svg, uri, headers).await
}

/// One recorded result's picture.
async fn run_image(state: &AppState, id: String, format: Format, uri: &Uri, headers: &HeaderMap) -> Response {
    picture(state, Some(Subject::Record(id)), format, uri, headers)
        .await
    .unwrap_or_else(IntoResponse::into_response)
}

#[utoipa::path(get, path = "/compare.svg", tag = "embeds",
    params(("runs" = String, Query, description = "Comma-separated record ids"), crate::openapi::PictureQuery),
    responses(
        (status = 200, description = "The runs side by side as SVG", content_type = "image/svg+xml", body = String),
        (status = 400, description = "A malformed option (named)", body = protocol::ApiErrorBody),
        (status = 404, description = "A record that does not exist", body = protocol::ApiErrorBody),
    ))]
async fn compare_svg(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    picture(&state, None, Format::Svg, &uri, &headers)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

#[utoipa::path(get, path = "/compare.png", tag = "embeds",
    params(("runs" = String, Query, description = "Comma-separated record ids"), crate::openapi::PictureQuery),
    responses(
        (status = 200, description = "The runs side by side", content_type = "image/png", body = Vec<u8>),
        (status = 400, description = "A malformed option (named)", body = protocol::ApiErrorBody),
        (status = 404, description = "A record that does not exist", body = protocol::ApiErrorBody),
    ))]
async fn compare_png(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    picture(&state, None, Format::Png, &uri, &headers)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
        field: Some(field.into()),
    }
}

/// The query's pairs (the last of a repeated key), or 400.
fn query_of(uri: &Uri) -> Result<BTreeMap<String, String>, ApiError> {
    let Some(q) = uri.query() else {
        return Ok(BTreeMap::new());
    };
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|p| p.0.into_iter().collect())
        .map_err(|_| {
            bad(
                "query",
                format!(
                    "the query `{}` cannot be read",
                    q.chars().take(100).collect::<String>()
                ),
            )
        })
}

/// The runs a `runs=ID,ID` list names, or 400 saying what is wrong with it.
fn compare_subject(query: &BTreeMap<String, String>) -> Result<Subject, ApiError> {
    let list = query.get("runs").ok_or_else(|| {
        bad(
            "runs",
            "runs=ID,ID names the runs to compare (ids from their permalinks)",
        )
    })?;
    let (ids, ignored) = app::records::compare_ids(list);
    if let Some(m) = ignored.into_iter().next() {
        return Err(bad("runs", m));
    }
    if ids.is_empty() {
        return Err(bad(
            "runs",
            "runs=ID,ID names the runs to compare (ids from their permalinks)",
        ));
    }
    Ok(Subject::Compare(ids))
}

/// The records of `subject`, read off the async threads; 404 naming the first missing one.
async fn records_of(state: &AppState, subject: &Subject) -> Result<Vec<Record>, ApiError> {
    let ids = subject.ids();
    if let Some(bad_id) = ids.iter().find(|id| !protocol::is_record_id(id)) {
        return Err(ApiError::NotFound(bad_id.chars().take(100).collect()));
    }
    let store = state.store.clone();
    let read = tokio::task::spawn_blocking(move || {
        ids.iter()
            .map(|id| store.get(id).map(|r| (id.clone(), r)))
            .collect::<anyhow::Result<Vec<_>>>()
    })
    .await
    .map_err(|_| ApiError::Storage)?
    .map_err(storage_error)?;
    // Read from JSON, a team model's id is its name: resolved in the server's catalog.
    read.into_iter()
        .map(|(id, r)| {
            let mut r = r.ok_or(ApiError::NotFound(id))?;
            r.resolve(&state.catalog);
            Ok(r)
        })
        .collect()
}

/// The card's title of a pitfall result (its id if the card is gone).
fn card_title(info: &ServerInfo, card: &str) -> String {
    info.pitfalls
        .iter()
        .find(|c| c.id == card)
        .map(|c| c.title.clone())
        .unwrap_or_else(|| card.to_string())
}

/// The runs of a comparison, or 400 for a record that is not a run.
fn runs_of(records: &[Record]) -> Result<Vec<&protocol::Report>, ApiError> {
    records
        .iter()
        .map(|r| {
            r.run().ok_or_else(|| {
                let what = match r.unfinished() {
                    Some(u) => format!("{} has no figures ({})", r.id, u.message),
                    None => format!("{} is a pitfall experiment, not a run: its picture is /runs/{}.png", r.id, r.id),
                };
                bad("runs", what)
            })
        })
        .collect()
}

/// 64-bit FNV-1a: a stable hash for ETags (std's hasher may change between releases).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

fn etag(subject: &Subject, o: &ImageOptions, format: Format) -> String {
    let key = format!(
        "{}|{}|{}|{}|{}|{}|{}|{}",
        render::DRAWING_VERSION,
        env!("CARGO_PKG_VERSION"),
        format.ext(),
        o.theme.as_str(),
        o.width,
        o.scale,
        o.to_query(),
        subject.ids().join(",")
    );
    format!("\"g{:016x}\"", fnv(&key))
}

/// Pictures drawn recently, by ETag: a page's image asked for by many readers at once is
/// drawn once. At most [`CACHE_ENTRIES`] of them, [`CACHE_BYTES`] in all.
static CACHE: Mutex<VecDeque<(String, Bytes)>> = Mutex::new(VecDeque::new());
const CACHE_ENTRIES: usize = 64;
const CACHE_BYTES: usize = 24 << 20;

fn cached(key: &str) -> Option<Bytes> {
    let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.iter().find(|(k, _)| k == key).map(|(_, b)| b.clone())
}

fn keep(key: String, bytes: Bytes) {
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache.retain(|(k, _)| *k != key);
    cache.push_back((key, bytes));
    while cache.len() > CACHE_ENTRIES
        || cache.iter().map(|(_, b)| b.len()).sum::<usize>() > CACHE_BYTES
    {
        cache.pop_front();
    }
}

/// A drawing to make on the drawing thread.
type Job = Box<dyn FnOnce() + Send>;

/// The one thread that draws: pictures are made one at a time, at the lowest CPU priority
/// (nice 19, Linux), so a run measuring on the CPU keeps its core while readers fetch
/// pictures (measured: `drawing_does_not_slow_a_run` in server/tests/api/embeds.rs). Its
/// own thread, not the blocking pool's, so the priority never reaches database reads.
fn drawing_thread() -> Option<std::sync::mpsc::Sender<Job>> {
    static SENDER: std::sync::OnceLock<Option<Mutex<std::sync::mpsc::Sender<Job>>>> =
        std::sync::OnceLock::new();
    let sender = SENDER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("gradless-draw".into())
            .spawn(move || {
                lower_priority();
                for job in rx {
                    // A drawing that panics costs its own answer (503), not the thread.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
        match spawned {
            Ok(_) => Some(Mutex::new(tx)),
            Err(e) => {
                tracing::error!("could not start the drawing thread: {e}");
                None
            }
        }
    });
    sender
        .as_ref()
        .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).clone())
}

/// Nice 19 for the calling thread (a per-thread attribute on Linux).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
        tracing::warn!("the drawing thread keeps the normal CPU priority: {e}");
    }
}

/// `f`'s result, computed on the drawing thread.
async fn on_drawing_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    drawing_thread()
        .ok_or(ApiError::Unavailable)?
        .send(job)
        .map_err(|_| ApiError::Unavailable)?;
    rx.await.map_err(|_| ApiError::Unavailable)
}

fn image_headers(etag: &str, format: Format) -> [(header::HeaderName, HeaderValue); 3] {
    [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        ),
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        ),
        (
            header::ETAG,
            HeaderValue::from_str(etag).unwrap_or(HeaderValue::from_static("\"g\"")),
        ),
    ]
}

/// A picture of `subject` (`None`: the comparison the query names).
async fn picture(
    state: &AppState,
    subject: Option<Subject>,
    format: Format,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let query = query_of(uri)?;
    let options = ImageOptions::from_query(&query).map_err(|e| bad(&e.field, e.message))?;
    let subject = match subject {
        Some(s) => s,
        None => compare_subject(&query)?,
    };
    let records = records_of(state, &subject).await?;
    if matches!(subject, Subject::Compare(_)) {
        runs_of(&records)?;
    }
    let tag = etag(&subject, &options, format);
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    if matches {
        return Ok((StatusCode::NOT_MODIFIED, image_headers(&tag, format)).into_response());
    }
    if let Some(bytes) = cached(&tag) {
        return Ok((image_headers(&tag, format), bytes).into_response());
    }
    let info = state.info.current();
    let bytes =
        on_drawing_thread(move || draw(&records, &subject, &options, format, &info)).await??;
    let bytes = Bytes::from(bytes);
    keep(tag.clone(), bytes.clone());
    Ok((image_headers(&tag, format), bytes).into_response())
}

fn draw(
    records: &[Record],
    subject: &Subject,
    o: &ImageOptions,
    format: Format,
    info: &ServerInfo,
) -> Result<Vec<u8>, ApiError> {
    let svg = match (subject, records, o.chart) {
        // One chart of a run alone: what the Lab and Generate show in a chart's place
        // until ECharts has come (app/src/charts/draw.rs).
        (Subject::Record(_), [record], Some(part)) => match &record.body {
            RecordBody::Run(r) => render::run_chart_svg(r, part, o).map_err(|m| bad("chart", m))?,
            RecordBody::Pitfall(_) => {
                return Err(bad(
                    "chart",
                    "a pitfall result is drawn whole: leave out `chart`",
                ))
            }
            RecordBody::Unfinished(u) => return Err(ApiError::NoReport(format!("{}: there is nothing to draw", u.message))),
        },
        (Subject::Compare(_), _, Some(_)) => {
            return Err(bad(
                "chart",
                "runs side by side are drawn whole: leave out `chart`",
            ))
        }
        (Subject::Record(_), [record], None) => match &record.body {
            RecordBody::Run(r) => render::run_svg(r, o),
            RecordBody::Pitfall(p) => render::pitfall_svg(p, &card_title(info, &p.id), o),
            RecordBody::Unfinished(u) => return Err(ApiError::NoReport(format!("{}: there is nothing to draw", u.message))),
        },
        _ => render::compare_svg(&runs_of(records)?, o),
    };
    match format {
        Format::Svg => Ok(svg.into_bytes()),
        Format::Png => render::png(&svg, o.scale).map_err(|e| {
            tracing::error!("drawing a picture: {e}");
            ApiError::Unavailable
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::preview::subject_of_page;
    use super::*;

    #[test]
    fn picture_paths_and_pages_are_told_apart() {
        assert_eq!(
            run_image_path("/runs/0123456789abcdef.png"),
            Some(("0123456789abcdef".into(), Format::Png))
        );
        assert_eq!(
            run_image_path("/runs/0123456789abcdef.svg").map(|p| p.1),
            Some(Format::Svg)
        );
        for not in [
            "/runs/0123456789abcdef",
            "/runs/x.gif",
            "/runs/.png",
            "/runs/a/b.png",
            "/compare.png",
        ] {
            assert_eq!(run_image_path(not), None, "{not}");
        }
        assert_eq!(
            subject_of_page("/embed/runs/abc", ""),
            Some((Subject::Record("abc".into()), false))
        );
        assert_eq!(
            subject_of_page("/runs/abc.png", ""),
            Some((Subject::Record("abc".into()), true))
        );
        let ids = vec![
            "0123456789abcdef".to_string(),
            "fedcba9876543210".to_string(),
        ];
        assert_eq!(
            subject_of_page("/compare", "runs=0123456789abcdef,fedcba9876543210"),
            Some((Subject::Compare(ids), false))
        );
        assert_eq!(subject_of_page("/compare", "runs=nope"), None);
        assert_eq!(subject_of_page("/pitfalls", ""), None);
    }

    #[test]
    fn etags_change_with_every_option() {
        let s = Subject::Record("0123456789abcdef".into());
        let o = ImageOptions::default();
        let dark = ImageOptions {
            theme: render::Theme::Dark,
            ..o
        };
        let tags = [
            etag(&s, &o, Format::Png),
            etag(&s, &dark, Format::Png),
            etag(&s, &o, Format::Svg),
            etag(&s, &ImageOptions { scale: 2, ..o }, Format::Png),
            etag(&s, &ImageOptions { chart: Some(render::Part::Latency), ..o }, Format::Svg),
            etag(&s, &ImageOptions { chart: Some(render::Part::Memory), ..o }, Format::Svg),
            etag(
                &s,
                &ImageOptions { chart: Some(render::Part::Memory), chart_height: Some(300), ..o },
                Format::Svg,
            ),
        ];
        for (i, a) in tags.iter().enumerate() {
            assert!(tags[i + 1..].iter().all(|b| a != b), "{tags:?}");
        }
        assert_eq!(etag(&s, &o, Format::Png), tags[0], "stable");
    }
}
