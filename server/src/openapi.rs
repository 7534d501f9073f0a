//! The HTTP API described as an OpenAPI 3.1 document, served at `GET /api/openapi.json`.
//!
//! The schemas are derived from the types the handlers answer with (`protocol`'s, with its
//! `openapi` feature, which only this crate turns on, so the browser build never compiles
//! utoipa). The operations are written here, on bodiless functions, rather than on the
//! handlers: the document then reads as one page beside the router, and the handlers keep
//! their own signatures. `server/tests/api/openapi.rs` keeps it true — every documented
//! operation is routed, every route of the API reference (docs/api.md) is documented, and
//! `openapi-spec-validator` accepts the document.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use protocol::{
    ApiErrorBody, Event, PitfallInfo, PitfallOptions, PitfallReport, Record, RecordKind,
    RecordSummary, Report, RunCreated, RunSpec, ServerInfo, WorkerHealth,
};
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
    paths(
        info, create_run, run_events, get_run, run_emitted, list_records, get_record,
        export_record, health, pitfalls, run_pitfall, late_prediction, learn_paths, learn_path,
        learn_step, learn_compose, learn_answers, workers, openapi_json, run_png,
        run_svg, compare_png, compare_svg, oembed, healthz, metrics
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

/// The document, built once (it depends on nothing but the types).
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serialises");
        describe_sse_messages(&mut doc);
        serde_json::to_string_pretty(&doc).expect("the OpenAPI document serialises")
    })
}

/// Under OpenAPI 3.1 a `text/event-stream` schema describes each message of the stream, not
/// its `data`: a message is `{data, event}` (`event` is "message": the stream names none),
/// and its `data` holds one [`Event`] as JSON. utoipa writes `body = Event` as the message's
/// own schema, which every message then fails (schemathesis checks each one).
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
    fn objects(v: &mut serde_json::Value) -> impl Iterator<Item = &mut serde_json::Value> {
        v.as_object_mut().into_iter().flat_map(|o| o.values_mut())
    }
    let paths = doc.get_mut("paths").into_iter().flat_map(objects);
    for operation in paths.flat_map(objects) {
        for response in operation.get_mut("responses").into_iter().flat_map(objects) {
            if let Some(media) = response.pointer_mut("/content/text~1event-stream") {
                media["schema"] = message.clone();
            }
        }
    }
}

/// `GET /api/openapi.json`.
pub async fn serve() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}

/// A fleet worker's card (name, host, devices, models, limits, queue, memory in use), as
/// `fleet::bus::WorkerCard` serialises it; described by hand, the fleet crate stays free of
/// the document's library.
#[derive(utoipa::ToSchema)]
#[schema(as = WorkerCard)]
#[allow(dead_code)]
struct WorkerCardSchema {
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

// The operations. Their bodies are empty: the handlers are in crate::api and crate::embeds,
// routed by crate::router.

#[utoipa::path(get, path = "/api/info", tag = "server",
    responses((status = 200, description = "Devices (with autocast support, or why not), models with parameter counts, limits, the pitfall cards", body = ServerInfo)))]
#[allow(dead_code)]
fn info() {}

#[utoipa::path(post, path = "/api/runs", tag = "runs",
    request_body(content = RunSpec, description = "Every field is optional; a missing one takes its default. Unknown fields are refused."),
    responses(
        (status = 202, description = "Queued: follow `events_url`", body = RunCreated),
        (status = 400, description = "The body is not a JSON object of a RunSpec's fields", body = ApiErrorBody),
        (status = 401, description = "This server wants its token", body = ApiErrorBody),
        (status = 403, description = "A page of another origin may not start work here", body = ApiErrorBody),
        (status = 415, description = "The body is not `application/json`", body = ApiErrorBody),
        (status = 422, description = "The spec cannot run here (the field is named)", body = ApiErrorBody),
        (status = 429, description = "Rate limited", body = ApiErrorBody),
        (status = 503, description = "The queue is full, or no worker is connected", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn create_run() {}

#[utoipa::path(get, path = "/api/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "Server-Sent Events from the start of the run (replayed for late viewers); each `data:` line is one JSON event, the last `done` or `failed` (a run interrupted by a server restart answers one `failed` event of kind `interrupted`; a recorded failed run replays what it measured, then its `failed`)", content_type = "text/event-stream", body = Event),
        (status = 404, description = "No such run", body = ApiErrorBody),
        (status = 409, description = "A run another server process is measuring (its events are not relayed here)", body = ApiErrorBody),
        (status = 503, description = "Too many event streams are open", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn run_events() {}

#[utoipa::path(get, path = "/api/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The finished run's report, live or from the database", body = Report),
        (status = 404, description = "No such run", body = ApiErrorBody),
        (status = 409, description = "Still running: no report yet", body = ApiErrorBody),
        (status = 410, description = "There will never be a report: interrupted by a server restart or the loss of its fleet worker (code `interrupted`; the message gives the times), or failed (code `failed`: out of memory, past its time limit, cancelled, a libtorch error; the message says why and what it measured first). Its record, `GET /api/records/{id}`, keeps its settings, and a failed run's `measured` figures", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn get_run() {}

#[utoipa::path(get, path = "/api/runs/{id}/emitted", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "On a fleet front: when each of the run's events was emitted by its worker (ms since the Unix epoch); the load test reads emit-to-viewer delays from it", body = Vec<u64>),
        (status = 404, description = "No such run on this front; on a single server, code `fleet_only` (it has no fleet workers)", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn run_emitted() {}

#[utoipa::path(get, path = "/api/records", tag = "records",
    params(
        ("kind" = Option<RecordKind>, Query, description = "Only runs or only pitfall results"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "How many, newest first (1 to 1000; 50 by default)"),
    ),
    responses(
        (status = 200, description = "Recorded results, newest first", body = Vec<RecordSummary>),
        (status = 400, description = "A bad `kind` or `limit` (the field is named)", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn list_records() {}

#[utoipa::path(get, path = "/api/records/{id}", tag = "records",
    params(("id" = String, Path, description = "The record's id (a run's id, or a pitfall result's `record_id`)")),
    responses(
        (status = 200, description = "One recorded result with its kind", body = Record),
        (status = 404, description = "No such record", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn get_record() {}

#[utoipa::path(get, path = "/api/records/{id}/export/{format}", tag = "records",
    params(
        ("id" = String, Path, description = "The record's id"),
        ("format" = String, Path, description = "`json` (the record), `csv` (its samples or series), `py` (the reproducing PyTorch script; runs only), `trace` (the traced pass as Chrome trace-event JSON) or `trace-csv`"),
    ),
    responses(
        (status = 200, description = "A download (`Content-Disposition: attachment`)", content(
            (Record = "application/json"),
            (String = "text/csv"),
            (String = "text/x-python"),
        )),
        (status = 400, description = "An unknown format", body = ApiErrorBody),
        (status = 404, description = "No such record, or nothing of that kind to export", body = ApiErrorBody),
        (status = 422, description = "Nothing of that kind in this record (a pitfall result has no script; a run without a report no table; a run without a traced pass no trace): the message says what it has (field `format`)", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn export_record() {}

#[utoipa::path(get, path = "/api/health", tag = "server",
    responses(
        (status = 200, description = "The worker: tasks, queue, and the leak check after every task. On a fleet front: `nats_connected` and the live `workers`", body = WorkerHealth),
        (status = 503, description = "The worker thread has stopped", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn health() {}

#[utoipa::path(get, path = "/api/pitfalls", tag = "pitfalls",
    responses((status = 200, description = "The pitfall cards in tour order", body = Vec<PitfallInfo>)))]
#[allow(dead_code)]
fn pitfalls() {}

#[utoipa::path(post, path = "/api/pitfalls/{id}", tag = "pitfalls",
    params(("id" = String, Path, description = "The card's id (see GET /api/pitfalls)")),
    request_body(content = Option<PitfallOptions>, description = "Optional: device, model, batch, memory budget, and `prediction`, the answer to the card's `question` (`\"skipped\"`, `{\"value\": 0.5}` or `{\"choice\": \"lower\"}`), locked by this request and scored in the report"),
    responses(
        (status = 200, description = "The experiment's report, recorded: its permalink is `/runs/{record_id}`", body = PitfallReport),
        (status = 400, description = "The body is not a JSON object of the card's options (the field is named)", body = ApiErrorBody),
        (status = 401, description = "This server wants its token", body = ApiErrorBody),
        (status = 403, description = "A page of another origin may not start work here", body = ApiErrorBody),
        (status = 404, description = "No such card", body = ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ApiErrorBody),
        (status = 409, description = "The experiment failed (the message says why)", body = ApiErrorBody),
        (status = 422, description = "Options this card cannot take, or a prediction its question cannot take (field `prediction`: out of the scale, or the wrong kind of answer)", body = ApiErrorBody),
        (status = 429, description = "Rate limited", body = ApiErrorBody),
        (status = 503, description = "Too many experiments waiting", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn run_pitfall() {}

#[utoipa::path(get, path = "/api/learn", tag = "learn",
    responses((status = 200, description = "The onboarding paths this server serves: the shipped one, the `paths/` folder's, the composed ones", body = Vec<protocol::learn::PathSummary>)))]
#[allow(dead_code)]
fn learn_paths() {}

#[utoipa::path(get, path = "/api/learn/{id}", tag = "learn",
    params(("id" = String, Path, description = "The path's id (see GET /api/learn)")),
    responses(
        (status = 200, description = "The path: title, the lead's note, its steps in order (a card with model, batch and device, or a change of one setting from -> to)", body = protocol::learn::LearnPath),
        (status = 404, description = "No such path", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn learn_path() {}

#[utoipa::path(post, path = "/api/learn/{id}/steps/{step}", tag = "learn",
    params(("id" = String, Path, description = "The path's id"), ("step" = u32, Path, description = "The step, from 1")),
    request_body(content = protocol::learn::StepRequest, description = "`prediction`: the answer to the step's question, locked by this request (`\"skipped\"`: run without predicting, not kept among the answers)"),
    responses(
        (status = 200, description = "The prediction against the measurement (`scored`), with the card's recorded report or the change's two recorded runs; `counted` when the answer was kept", body = protocol::learn::StepOutcome),
        (status = 400, description = "A malformed body (the field is named: `prediction...`)", body = ApiErrorBody),
        (status = 401, description = "This server wants its token", body = ApiErrorBody),
        (status = 404, description = "No such path or step", body = ApiErrorBody),
        (status = 409, description = "The experiment or a run failed (the message says why)", body = ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ApiErrorBody),
        (status = 422, description = "A prediction the step's question cannot take (field `prediction`)", body = ApiErrorBody),
        (status = 429, description = "Rate limited: runs, or answers per client per minute", body = ApiErrorBody),
        (status = 503, description = "The queue is full", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn learn_step() {}

/// The body of `POST /api/learn`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct ComposeBody {
    /// The path as the TOML a `paths/` file holds.
    toml: String,
    /// Only check it; nothing is kept.
    check: Option<bool>,
}

#[utoipa::path(post, path = "/api/learn", tag = "learn",
    request_body(content = ComposeBody, description = "A path composed on /learn/new, as TOML"),
    responses(
        (status = 200, description = "Checked only (`check: true`): `{id, url, steps}`"),
        (status = 201, description = "Kept and served from now on: `{id, url, steps}`"),
        (status = 400, description = "The TOML breaks a rule: the field is named (`toml.step[2].card`)", body = ApiErrorBody),
        (status = 401, description = "This server wants its token", body = ApiErrorBody),
        (status = 409, description = "A path with this id exists", body = ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn learn_compose() {}

/// `GET /api/learn/{id}/answers`: every step's summary.
#[derive(utoipa::ToSchema)]
#[schema(as = AnswersView)]
#[allow(dead_code)]
struct AnswersSchema {
    /// Per step: `step`, `title`, `question`, `answers`, `right`, `measured` (the median, formatted), `bars` (`label`, `count`, `truth`), `common_wrong` (`[answer, count]`).
    steps: Vec<serde_json::Value>,
    /// Answers kept for this path.
    kept: u64,
    /// The most kept per path (the oldest are dropped past it).
    max: u64,
}

#[utoipa::path(get, path = "/api/learn/{id}/answers", tag = "learn",
    params(("id" = String, Path, description = "The path's id"), ("format" = Option<String>, Query, description = "`json` (default) or `csv`: every kept answer")),
    responses(
        (status = 200, description = "Per step, the predictions' histogram with the measured value's bar marked, the share right and the most common wrong answer (or the CSV)", body = AnswersSchema),
        (status = 400, description = "An unknown format (field `format`)", body = ApiErrorBody),
        (status = 404, description = "No such path", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn learn_answers() {}

/// The body of a prediction sent after its run: `{"prediction": ...}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
struct LatePrediction {
    prediction: protocol::Prediction,
}

#[utoipa::path(post, path = "/api/records/{id}/prediction", tag = "pitfalls",
    params(("id" = String, Path, description = "A recorded result's id")),
    request_body(content = LatePrediction, description = "`{\"prediction\": {\"value\": 0.5}}`"),
    responses(
        (status = 400, description = "Not a prediction (the field is named)", body = ApiErrorBody),
        (status = 403, description = "A page of another origin may not send it", body = ApiErrorBody),
        (status = 404, description = "No such record", body = ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = ApiErrorBody),
        (status = 409, description = "Its run has started: a prediction is locked by the request that starts the run (`POST /api/pitfalls/{id}` with `prediction`) and cannot be sent or changed later", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn late_prediction() {}

#[utoipa::path(get, path = "/api/workers", tag = "server",
    responses((status = 200, description = "On a fleet front, the live workers' cards; `[]` on a single server", body = Vec<WorkerCardSchema>)))]
#[allow(dead_code)]
fn workers() {}

#[utoipa::path(get, path = "/api/openapi.json", tag = "server",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
#[allow(dead_code)]
fn openapi_json() {}

#[utoipa::path(get, path = "/runs/{id}.png", tag = "embeds",
    params(("id" = String, Path, description = "The record's id"), PictureQuery),
    responses(
        (status = 200, description = "The recorded result's picture (immutable, with an ETag)", content_type = "image/png", body = Vec<u8>),
        (status = 304, description = "Not modified (If-None-Match)"),
        (status = 400, description = "A malformed option (named)", body = ApiErrorBody),
        (status = 404, description = "No such record", body = ApiErrorBody),
        (status = 409, description = "The record has no report to draw (running, interrupted or failed; the message says which)", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn run_png() {}

#[utoipa::path(get, path = "/runs/{id}.svg", tag = "embeds",
    params(("id" = String, Path, description = "The record's id"), PictureQuery),
    responses(
        (status = 200, description = "The recorded result's picture as SVG (immutable, with an ETag)", content_type = "image/svg+xml", body = String),
        (status = 304, description = "Not modified (If-None-Match)"),
        (status = 400, description = "A malformed option (named)", body = ApiErrorBody),
        (status = 404, description = "No such record", body = ApiErrorBody),
        (status = 409, description = "The record has no report to draw (running, interrupted or failed; the message says which)", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn run_svg() {}

#[utoipa::path(get, path = "/compare.png", tag = "embeds",
    params(("runs" = String, Query, description = "Comma-separated record ids"), PictureQuery),
    responses(
        (status = 200, description = "The runs side by side", content_type = "image/png", body = Vec<u8>),
        (status = 400, description = "A malformed option (named)", body = ApiErrorBody),
        (status = 404, description = "A record that does not exist", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn compare_png() {}

#[utoipa::path(get, path = "/compare.svg", tag = "embeds",
    params(("runs" = String, Query, description = "Comma-separated record ids"), PictureQuery),
    responses(
        (status = 200, description = "The runs side by side as SVG", content_type = "image/svg+xml", body = String),
        (status = 400, description = "A malformed option (named)", body = ApiErrorBody),
        (status = 404, description = "A record that does not exist", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn compare_svg() {}

/// The options every picture takes.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct PictureQuery {
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
enum PictureChart {
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
enum PictureTheme {
    Light,
    Dark,
}

#[utoipa::path(get, path = "/oembed", tag = "embeds",
    params(
        ("url" = String, Query, description = "A permalink of this server"),
        ("format" = Option<String>, Query, description = "Only `json`"),
        ("maxwidth" = Option<u32>, Query, minimum = 1),
        ("maxheight" = Option<u32>, Query, minimum = 1),
    ),
    responses(
        (status = 200, description = "The oEmbed answer (`rich` or `photo`)", body = Object),
        (status = 400, description = "No `url`, a format other than JSON, or a malformed `maxwidth`/`maxheight` (the field is named)", body = ApiErrorBody),
        (status = 404, description = "A URL this server does not serve", body = ApiErrorBody),
    ))]
#[allow(dead_code)]
fn oembed() {}

#[utoipa::path(get, path = "/healthz", tag = "server",
    responses((status = 200, description = "`ok` while the process serves", content_type = "text/plain", body = String)))]
#[allow(dead_code)]
fn healthz() {}

#[utoipa::path(get, path = "/metrics", tag = "server",
    responses((status = 200, description = "Prometheus metrics (text exposition format)", content_type = "text/plain", body = String)))]
#[allow(dead_code)]
fn metrics() {}
