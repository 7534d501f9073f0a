//! Following a run (`GET /api/runs/{id}/events`): its events as Server-Sent Events from the
//! first, then live ones, written once as bytes its viewers share; a recorded run that is
//! not live replays what its record keeps.

use super::*;

/// The events of recorded run `id`, which is not live in this process: an interrupted
/// run's stream is its one `failed` event (kind `interrupted`, saying when), a failed
/// run's what it measured before (`started`, its passes or steps) and its `failed`, so a
/// viewer holding the link learns what happened. A finished or unknown run is 404, as
/// before runs were recorded at their start.
async fn recorded_events(state: &AppState, id: &str) -> Result<Arc<RunState>, ApiError> {
    let record = find_record(state, id).await?;
    match record.body {
        RecordBody::Unfinished(u) if u.status == RecordStatus::Interrupted => Ok(RunState::ended(
            id,
            Event::Failed {
                failure: RunFailure {
                    kind: FailureKind::Interrupted,
                    message: u.message,
                },
            },
        )),
        RecordBody::Unfinished(u) if u.status == RecordStatus::Failed => {
            let failure = u.failure.clone().unwrap_or(RunFailure { kind: FailureKind::Internal, message: u.message.clone() });
            let mut events = u.measured.as_ref().map(protocol::PartialRun::events).unwrap_or_default();
            events.push(Event::Failed { failure });
            Ok(RunState::replayed(id, events))
        }
        RecordBody::Unfinished(_) => Err(ApiError::NoReport(
            "the run is being measured by another server process; its events are not relayed here".into(),
        )),
        _ => Err(ApiError::NotFound(id.to_string())),
    }
}

/// `GET /api/runs/{id}/events[?cancel_token=...]`: every event of the run from the first,
/// then live ones, as SSE messages whose data is the event's JSON. The stream ends after
/// `done` or `failed`. With the run's secret, this viewer is the submitter's: its leaving
/// cancels the run while it waits (see [`crate::runs::ViewerGuard`]). On a fleet front a
/// run submitted on another front is followed from the stream, from its first event.
///
/// The messages are written as bytes the run shares among its viewers (see
/// [`RunState::frames_from`]) rather than through axum's `Sse`, which would copy and
/// re-scan every event's JSON for every viewer.
#[utoipa::path(get, path = "/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, description = "Server-Sent Events from the start of the run (replayed for late viewers); each `data:` line is one JSON event, the last `done` or `failed` (a run interrupted by a server restart answers one `failed` event of kind `interrupted`; a recorded failed run replays what it measured, then its `failed`)", content_type = "text/event-stream", body = protocol::Event),
        (status = 404, description = "No such run", body = protocol::ApiErrorBody),
        (status = 409, description = "A run another server process is measuring (its events are not relayed here)", body = protocol::ApiErrorBody),
        (status = 503, description = "Too many event streams are open", body = protocol::ApiErrorBody),
    ))]
pub async fn run_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let run = match state.runs.get(&id) {
        Some(run) => run,
        None => match state.dispatch.follow(&state.runs, &state.recorder, &id).await? {
            Some(run) => run,
            None => recorded_events(&state, &id).await?,
        },
    };
    event_response(&state, run, &query)
}

/// The SSE response following `run` (see [`run_events`]): one of the server's stream
/// slots (429 when none is free), and the owner's rights when the query carries the run's
/// `cancel_token`.
fn event_response(
    state: &AppState,
    run: Arc<RunState>,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let permit = state
        .streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams(state.max_streams))?;
    let owner = run.is_owner(query.get("cancel_token").map(String::as_str));
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        // Proxies (nginx) must pass each message on as it comes, not buffer the stream.
        (
            header::HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        ),
    ];
    Ok((headers, axum::body::Body::from_stream(event_stream(run, owner, permit))).into_response())
}

/// Silence longer than this gets an SSE comment, so proxies and browsers keep the stream.
const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// A viewer catching up writes at most about this much at once.
const CATCH_UP_BYTES: usize = 256 * 1024;

struct Follow {
    run: Arc<RunState>,
    next: usize,
    changes: tokio::sync::watch::Receiver<usize>,
    finished: bool,
    _viewer: ViewerGuard,
    _slot: tokio::sync::OwnedSemaphorePermit,
    _counted: fleet::metrics::ViewerCount,
}

fn event_stream(
    run: Arc<RunState>,
    owner: bool,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let follow = Follow {
        changes: run.subscribe(),
        _viewer: run.view(owner),
        _slot: slot,
        _counted: fleet::metrics::global().viewer(),
        run,
        next: 0,
        finished: false,
    };
    stream::unfold(follow, |mut f| async move {
        loop {
            if f.finished {
                return None;
            }
            // Unnamed SSE messages, so a browser's `onmessage` sees them all; the JSON
            // carries its own `type`.
            if let Some((messages, next, terminal)) = f.run.frames_from(f.next, CATCH_UP_BYTES) {
                f.next = next;
                f.finished = terminal;
                return Some((Ok(messages), f));
            }
            // Nothing new: wait for the worker (the sender lives as long as the run state).
            match tokio::time::timeout(KEEP_ALIVE, f.changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return None,
                Err(_) => return Some((Ok(Bytes::from_static(b":\n\n")), f)),
            }
        }
    })
}
