//! The HTTP API described as an OpenAPI 3.1 document, served at `GET /api/openapi.json`.
//!
//! Each operation is written on its handler (`#[utoipa::path]`, in crate::api,
//! crate::learn_api, crate::embeds and crate::router), and [`crate::router`] registers the
//! handlers through utoipa-axum's `OpenApiRouter` (`routes!`), which builds the routes and
//! the document together: an operation is documented exactly where it is routed. The two
//! pictures that a middleware answers ahead of the pages (`/runs/{id}.png|svg`, see
//! [`crate::embeds::run_images`]) have no route and join the document by hand.
//!
//! The schemas are derived from the types the handlers answer with (`protocol`'s, with its
//! `openapi` feature, which only this crate turns on, so the browser build never compiles
//! utoipa). This file holds what is no handler's: the document's title, description and
//! tags ([`base`]), the schemas described by hand, and the final touches ([`Document`]).
//! `server/tests/api/openapi.rs` keeps it true: every documented operation is routed, every
//! route of the API reference (docs/api.md) is documented, and `openapi-spec-validator`
//! accepts the document.

use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Extension;
use protocol::ApiErrorBody;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gradless",
        description = "Measure what PyTorch's inference settings do: start runs and pitfall \
            experiments on this server's device, follow their events, read and export the \
            recorded results. Errors are JSON bodies `{\"error\": {\"code\", \"message\", \
            \"field\"}}` with a stable code. Requests that start work may need the server's \
            token (`Authorization: Bearer ...`) and must come from an allowed origin.",
        license(name = "MIT OR Apache-2.0"),
    ),
    components(schemas(ApiErrorBody, WorkerCardSchema, AnswersSchema)),
    tags(
        (name = "runs", description = "Timed runs: start one, follow it, read its report"),
        (name = "records", description = "Recorded results, kept across restarts"),
        (name = "pitfalls", description = "The pitfall cards and their live experiments"),
        (name = "server", description = "What this server offers and how it is doing"),
        (name = "embeds", description = "Pictures and link previews of recorded results"),
        (name = "learn", description = "Onboarding paths: steps predicted before they run, and what the learners predicted"),
    )
)]
struct ApiDoc;

/// The document before the routes add their operations: its title, description, license
/// and tags, and the schemas described by hand.
pub fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as `GET /api/openapi.json` serves it, built once with the router (see
/// [`crate::router`]) and handed to [`serve`] as a request extension.
#[derive(Clone)]
pub struct Document(Bytes);

impl Document {
    /// The final form of what the router collected: each operation says what it does
    /// through its responses and parameters, not through its handler's rustdoc (written for
    /// readers of this crate, so dropped here), and a stream's messages are described as
    /// OpenAPI 3.1 wants them.
    pub fn new(api: utoipa::openapi::OpenApi) -> Document {
        let mut doc = serde_json::to_value(api).expect("the OpenAPI document serialises");
        for operation in operations(&mut doc) {
            if let Some(o) = operation.as_object_mut() {
                o.remove("summary");
                o.remove("description");
            }
        }
        describe_sse_messages(&mut doc);
        let text = serde_json::to_string_pretty(&doc).expect("the OpenAPI document serialises");
        Document(Bytes::from(text))
    }
}

/// Every operation of the document (the values under each path).
fn operations(doc: &mut serde_json::Value) -> impl Iterator<Item = &mut serde_json::Value> {
    fn objects(v: &mut serde_json::Value) -> impl Iterator<Item = &mut serde_json::Value> {
        v.as_object_mut().into_iter().flat_map(|o| o.values_mut())
    }
    doc.get_mut("paths").into_iter().flat_map(objects).flat_map(objects)
}

/// Under OpenAPI 3.1 a `text/event-stream` schema describes each message of the stream, not
/// its `data`: a message is `{data, event}` (`event` is "message": the stream names none),
/// and its `data` holds one [`protocol::Event`] as JSON. utoipa writes `body = Event` as the
/// message's own schema, which every message then fails (schemathesis checks each one).
fn describe_sse_messages(doc: &mut serde_json::Value) {
    let message = serde_json::json!({
        "type": "object",
        "description": "One Server-Sent Events message: its `data` is one event as JSON",
        "required": ["data"],
        "properties": {
            "event": { "type": "string", "description": "Always `message`: the stream names no event types" },
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": { "$ref": "#/components/schemas/Event" }
            },
            "id": { "type": "string" },
            "retry": { "type": "integer" }
        }
    });
    for operation in operations(doc) {
        let responses = operation.get_mut("responses").and_then(|r| r.as_object_mut());
        for response in responses.into_iter().flat_map(|r| r.values_mut()) {
            if let Some(media) = response.pointer_mut("/content/text~1event-stream") {
                media["schema"] = message.clone();
            }
        }
    }
}

/// `GET /api/openapi.json`: the document the router was built with.
#[utoipa::path(get, path = "/openapi.json", tag = "server", operation_id = "openapi_json",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
pub async fn serve(Extension(doc): Extension<Document>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], doc.0)
}

// The schemas described by hand: bodies the handlers parse or answer as untyped JSON.

/// A fleet worker's card (name, host, devices, models, limits, queue, memory in use), as
/// `fleet::bus::WorkerCard` serialises it; described by hand, the fleet crate stays free of
/// the document's library.
#[derive(utoipa::ToSchema)]
#[schema(as = WorkerCard)]
#[allow(dead_code)]
pub(crate) struct WorkerCardSchema {
    name: String,
    host: String,
    devices: Vec<protocol::DeviceInfo>,
    models: Vec<protocol::ModelInfo>,
    limits: protocol::Limits,
    version: String,
    libtorch_version: String,
    driver_version: Option<String>,
    cuda_version: Option<String>,
    /// When the worker process started (ms since the Unix epoch).
    started_ms: u64,
    /// Its last heartbeat (ms since the Unix epoch).
    heartbeat_ms: u64,
    heartbeat_ttl_ms: u64,
    queued: u64,
    running: Option<String>,
    /// `[device kind, bytes]` pairs: memory the device holds after the worker's last task.
    memory_in_use: Vec<(String, u64)>,
}

/// The body of `POST /api/learn`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct ComposeBody {
    /// The path as the TOML a `paths/` file holds.
    toml: String,
    /// Only check it; nothing is kept.
    check: Option<bool>,
}

/// `GET /api/learn/{id}/answers`: every step's summary.
#[derive(utoipa::ToSchema)]
#[schema(as = AnswersView)]
#[allow(dead_code)]
pub(crate) struct AnswersSchema {
    /// Per step: `step`, `title`, `question`, `answers`, `right`, `measured` (the median, formatted), `bars` (`label`, `count`, `truth`), `common_wrong` (`[answer, count]`).
    steps: Vec<serde_json::Value>,
    /// Answers kept for this path.
    kept: u64,
    /// The most kept per path (the oldest are dropped past it).
    max: u64,
}

/// The body of a prediction sent after its run: `{"prediction": ...}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct LatePrediction {
    prediction: protocol::Prediction,
}

/// The options every picture takes.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct PictureQuery {
    /// `light` or `dark` (the page's default: light).
    #[param(inline)]
    theme: Option<PictureTheme>,
    /// Width in CSS pixels, 300 to 2400.
    #[param(minimum = 300, maximum = 2400)]
    width: Option<u32>,
    /// 1 or 2: the PNG's pixels per CSS pixel.
    #[param(minimum = 1, maximum = 2)]
    scale: Option<u32>,
    /// One chart of a recorded run alone, instead of the whole picture: `latency` and
    /// `memory` (a forward run's), `step-latency`, `step-memory` and `prefill-decode` (a
    /// generation's). What the Lab and the Generate page show in a chart's place until the
    /// chart library has come. Not for a pitfall result or runs side by side (400).
    #[param(inline)]
    chart: Option<PictureChart>,
    /// With `chart` only: its height in CSS pixels, 150 to 1600 (default: half the width).
    #[param(minimum = 150, maximum = 1600)]
    height: Option<u32>,
}

/// One chart of a run, as `?chart=` takes it.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
pub(crate) enum PictureChart {
    Latency,
    Memory,
    StepLatency,
    StepMemory,
    PrefillDecode,
}

/// A picture's colours, as `?theme=` takes them.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum PictureTheme {
    Light,
    Dark,
}
