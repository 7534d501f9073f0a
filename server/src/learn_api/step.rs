//! Running one step of a path with the prediction its request locks: a card's experiment
//! (through the same handler as `POST /api/pitfalls/{id}`, so it is recorded with its
//! prediction and has a permalink), or the two runs of a change of one setting (queued like
//! any Lab run, each recorded). The measured value scores the prediction, and a locked one
//! is kept among the path's answers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::HeaderMap;
use protocol::learn::{Answer, LearnPath, StepKind, StepOutcome};
use protocol::{Event, Prediction, Report, RunSpec, SpecError};

use crate::api::{self, ClientAddr};
use crate::error::ApiError;
use crate::state::AppState;

/// Runs step `n` (1-based) of `path` with `prediction` locked; keeps the answer unless skipped.
pub async fn run(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<ConnectInfo<SocketAddr>>,
    path: Arc<LearnPath>,
    n: usize,
    prediction: Prediction,
) -> Result<StepOutcome, ApiError> {
    state.guard.authorize(headers)?;
    let step = n
        .checked_sub(1)
        .and_then(|i| path.steps.get(i))
        .ok_or_else(|| ApiError::NotFound(format!("step {n} of path `{}` (it has {} steps)", path.id, path.steps.len())))?;
    let cards = state.info.current().pitfalls.clone();
    let question = step
        .question(&cards)
        .ok_or_else(|| ApiError::NoReport(format!("this server has no card for step {n}")))?;
    question.check(&prediction).map_err(|message| {
        ApiError::InvalidSpec(SpecError { field: "prediction".into(), message: format!("{message} (the question: {})", question.text) })
    })?;
    let locked = prediction != Prediction::Skipped;
    if locked {
        state.learn.admit_answer(state.guard.client(headers, peer.as_ref())).map_err(|retry_after| ApiError::RateLimited {
            retry_after,
            per_minute: crate::learn::ANSWERS_PER_MINUTE,
        })?;
    }
    let mut outcome = match &step.kind {
        StepKind::Card { card, model, batch, device } => {
            let options = protocol::PitfallOptions {
                device: *device,
                model: *model,
                batch: *batch,
                budget_bytes: None,
                prediction: Some(prediction),
            };
            let body = Bytes::from(serde_json::to_vec(&options).unwrap_or_default());
            let axum::Json(report) = api::run_pitfall(
                State(state.clone()),
                ClientAddr(peer),
                Query(HashMap::new()),
                headers.clone(),
                Path(card.clone()),
                body,
            )
            .await?;
            let scored = report.prediction.clone().unwrap_or_else(|| question.score(prediction, &report.figures));
            StepOutcome { scored, report: Some(Box::new(report)), runs: vec![], values: vec![], counted: false }
        }
        StepKind::Change { figure, .. } => {
            let (before, after) = crate::learn::paths::change_specs(&step.kind, &state.catalog).map_err(|(f, message)| ApiError::InvalidSpec(SpecError { field: format!("step[{n}].{f}").into(), message }))?;
            let (id_before, r_before) = run_once(state, headers, peer, before).await?;
            let (id_after, r_after) = run_once(state, headers, peer, after).await?;
            let figures = protocol::learn::change_figures(*figure, &r_before, &r_after, &question);
            let (va, vb) = (figures[0].value, figures[1].value);
            let scored = protocol::learn::score_change(*figure, &question, prediction, &r_before, &r_after);
            StepOutcome { scored, report: None, runs: vec![id_before, id_after], values: vec![vb, va], counted: false }
        }
    };
    if let (true, Some(measured), Some(right)) = (locked, outcome.scored.measured, outcome.scored.right) {
        let answer = Answer { step: n, question: question.text.to_string(), prediction, measured, right, at_s: crate::learn::now_s() };
        let db = state.learn.db.clone();
        let id = path.id.clone();
        match tokio::task::spawn_blocking(move || db.add(&id, &answer)).await {
            Ok(Ok(())) => outcome.counted = true,
            Ok(Err(e)) => tracing::error!("could not keep a path's answer: {e:#}"),
            Err(e) => tracing::error!("keeping a path's answer panicked: {e}"),
        }
    }
    Ok(outcome)
}

/// One run through the queue like `POST /api/runs` (recorded; its permalink is `/runs/{id}`),
/// awaited to its end: its id and report.
async fn run_once(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<ConnectInfo<SocketAddr>>,
    spec: RunSpec,
) -> Result<(String, Report), ApiError> {
    let target = state.dispatch.prepare_run(&state.store, None, &spec).await?;
    state.guard.charge(headers, peer.as_ref())?;
    let (id, run) = state.runs.create();
    if let Err(e) = state.dispatch.start_run(target, &state.recorder, &id, run.clone(), spec).await {
        state.runs.remove(&id);
        return Err(e);
    }
    let mut changed = run.subscribe();
    while !run.is_finished() {
        if changed.changed().await.is_err() {
            break;
        }
    }
    match run.outcome() {
        Some(Event::Done { report }) => Ok((id, *report)),
        Some(Event::Failed { failure }) => Err(ApiError::NoReport(format!("the run {id} failed: {}", failure.message))),
        _ => Err(ApiError::NoReport(format!("the run {id} ended without a report"))),
    }
}
