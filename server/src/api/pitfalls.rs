//! The pitfall experiments: the cards (`GET /api/pitfalls`), running one (`POST
//! /api/pitfalls/{id}`, recorded, its prediction locked by the request) and a prediction
//! sent for a result whose run has started (`POST /api/records/{id}/prediction`).

use super::*;

/// `GET /api/pitfalls`: the cards, in guided-tour order.
#[utoipa::path(get, path = "/pitfalls", tag = "pitfalls",
    responses((status = 200, description = "The pitfall cards in tour order", body = Vec<protocol::PitfallInfo>)))]
pub async fn pitfalls(State(state): State<AppState>) -> Json<Vec<protocol::PitfallInfo>> {
    Json(state.info.current().pitfalls.clone())
}

/// `POST /api/pitfalls/{id}[?worker=NAME]`: runs the experiment (body: optional
/// PitfallOptions) and answers its report when it is done, recorded under `record_id`.
#[utoipa::path(post, path = "/pitfalls/{id}", tag = "pitfalls",
    params(("id" = String, Path, description = "The card's id (see GET /api/pitfalls)")),
    request_body(content = Option<protocol::PitfallOptions>, description = "Optional: device, model, batch, memory budget, and `prediction`, the answer to the card's `question` (`\"skipped\"`, `{\"value\": 0.5}` or `{\"choice\": \"lower\"}`), locked by this request and scored in the report"),
    responses(
        (status = 200, description = "The experiment's report, recorded: its permalink is `/runs/{record_id}`", body = protocol::PitfallReport),
        (status = 400, description = "The body is not a JSON object of the card's options (the field is named)", body = protocol::ApiErrorBody),
        (status = 401, description = "This server wants its token", body = protocol::ApiErrorBody),
        (status = 403, description = "A page of another origin may not start work here", body = protocol::ApiErrorBody),
        (status = 404, description = "No such card", body = protocol::ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = protocol::ApiErrorBody),
        (status = 409, description = "The experiment failed (the message says why)", body = protocol::ApiErrorBody),
        (status = 422, description = "Options this card cannot take, or a prediction its question cannot take (field `prediction`: out of the scale, or the wrong kind of answer)", body = protocol::ApiErrorBody),
        (status = 429, description = "Rate limited", body = protocol::ApiErrorBody),
        (status = 503, description = "Too many experiments waiting", body = protocol::ApiErrorBody),
    ))]
pub async fn run_pitfall(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<protocol::PitfallReport>, ApiError> {
    let options = pitfall_request(&state, &headers, &id, &body)?;
    let target = state
        .dispatch
        .prepare_pitfall(&state.store, query.get("worker").map(String::as_str), options.device)
        .await?;
    state.guard.charge(&headers, peer.as_ref())?;
    let capacity = state.dispatch.experiment_capacity(&state.experiments);
    let permit = state
        .experiments
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::QueueFull { capacity })?;
    let record_id = state.runs.fresh_id();
    state.recorder.started(started_pitfall(&record_id, &id));
    // From here the experiment and its record are the server's, not the request's: they go
    // on in a task of their own, so a client that goes away (a closed tab, `curl -m 1`)
    // still leaves a finished record behind, never a row `running` for ever. Dropping this
    // handler's future only stops the waiting.
    let task = tokio::spawn({
        let state = state.clone();
        async move {
            let _permit = permit;
            match state.dispatch.run_pitfall(target, &record_id, id, options).await {
                Ok(report) => Ok(record_pitfall(&state, record_id, report).await),
                Err(e) => {
                    state.recorder.discard(&record_id);
                    Err(e)
                }
            }
        }
    });
    match task.await {
        Ok(answer) => answer.map(Json),
        Err(e) => {
            tracing::error!("the experiment's task ended abnormally: {e}");
            Err(ApiError::Unavailable)
        }
    }
}

/// What a pitfall request must pass before anything runs: the caller may run experiments,
/// the card exists, and the body is the card's options (none: the defaults).
fn pitfall_request(
    state: &AppState,
    headers: &HeaderMap,
    id: &str,
    body: &[u8],
) -> Result<protocol::PitfallOptions, ApiError> {
    state.guard.authorize(headers)?;
    if !engine::pitfalls::exists(id) {
        return Err(ApiError::UnknownPitfall(id.chars().take(100).collect()));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Default::default());
    }
    let options: protocol::PitfallOptions =
        parse_object(body, "PitfallOptions", r#"{"device": "cpu", "prediction": {"value": 0.5}}"#)?;
    if let (Some(p), Some(card)) = (&options.prediction, engine::pitfalls::card(id)) {
        card.question.check(p).map_err(|message| {
            ApiError::InvalidSpec(SpecError {
                field: "prediction".into(),
                message: format!("{message} (the question: {})", card.question.text),
            })
        })?;
    }
    Ok(options)
}

/// The body of `POST /api/records/{id}/prediction`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LatePrediction {
    #[allow(dead_code)]
    prediction: protocol::Prediction,
}

/// `POST /api/records/{id}/prediction`: a prediction for a result whose run has started.
/// Always refused (409) for a record that exists: a prediction is locked by the request
/// that starts its run (`POST /api/pitfalls/{id}` with `prediction`), so one made after
/// the run began, or a change to the one locked, is never recorded.
#[utoipa::path(post, path = "/records/{id}/prediction", tag = "pitfalls",
    params(("id" = String, Path, description = "A recorded result's id")),
    request_body(content = crate::openapi::LatePrediction, description = "`{\"prediction\": {\"value\": 0.5}}`"),
    responses(
        (status = 400, description = "Not a prediction (the field is named)", body = protocol::ApiErrorBody),
        (status = 403, description = "A page of another origin may not send it", body = protocol::ApiErrorBody),
        (status = 404, description = "No such record", body = protocol::ApiErrorBody),
        (status = 415, description = "A body that is not `application/json`", body = protocol::ApiErrorBody),
        (status = 409, description = "Its run has started: a prediction is locked by the request that starts the run (`POST /api/pitfalls/{id}` with `prediction`) and cannot be sent or changed later", body = protocol::ApiErrorBody),
    ))]
pub async fn late_prediction(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let _: LatePrediction = parse_object(&body, "prediction", r#"{"prediction": {"value": 0.5}}"#)?;
    let record = find_record(&state, &id).await?;
    let locked = match &record.body {
        RecordBody::Pitfall(p) => match &p.prediction {
            Some(s) if s.predicted != protocol::Prediction::Skipped => format!("it locked “{}”", s.predicted_text()),
            Some(_) => "it was run without predicting, and is recorded so".into(),
            None => "it was run without a question".into(),
        },
        RecordBody::Run(_) => "a run of the Lab records no prediction of its own".into(),
        RecordBody::Unfinished(u) => format!("it is {}", match u.status {
            RecordStatus::Failed => "failed",
            RecordStatus::Interrupted => "interrupted",
            _ => "running",
        }),
    };
    Err(ApiError::PredictionLocked(format!(
        "the run of {id} has already started, so its prediction is locked ({locked}): a prediction is sent with the request that starts the run, POST /api/pitfalls/{{card}} with \"prediction\""
    )))
}

/// Keeps an experiment's report as record `record_id` and answers it with that id, or
/// without one when it could not be kept (the report itself is still the answer).
async fn record_pitfall(
    state: &AppState,
    record_id: String,
    mut report: protocol::PitfallReport,
) -> protocol::PitfallReport {
    report.record_id = Some(record_id.clone());
    let record = Record {
        id: record_id,
        body: RecordBody::Pitfall(Box::new(report.clone())),
    };
    // Through the recorder, like runs: shutdown waits for this write.
    if let Err(e) = state.recorder.save(record).await {
        tracing::error!("could not record the experiment: {e:#}");
        report.record_id = None;
    }
    report
}
