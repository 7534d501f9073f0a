//! Runs on this process's device worker (`gradless serve` without `--nats`): the worker's
//! configuration from the flags, starting it, what it offers ([`server_info`]), and handing
//! it runs and experiments. A run's events come from a sink the device thread calls, which
//! must not block: the record is handed to the recorder's thread, which sends the final
//! event once the save is done.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use engine::{LabConfig, Worker, WorkerConfig};
use protocol::{Event, Limits, PitfallOptions, PitfallReport, RunSpec, ServerInfo};

use crate::config::EngineArgs;
use crate::error::ApiError;
use crate::model_counts::CountCache;
use crate::recorder::{started_run, Recorder};
use crate::runs::RunState;

/// The worker configuration these settings describe.
pub fn worker_config(
    engine: &EngineArgs,
    queue_capacity: usize,
    run_timeout: Option<Duration>,
) -> WorkerConfig {
    let mut lab = LabConfig::default();
    if let Some(t) = engine.threads {
        lab.threads = t.max(1);
    }
    lab.memory_limit_bytes = engine.memory_limit_mib.map(|m| m * 1024 * 1024);
    lab.quality_text = engine.quality_text.clone();
    lab.python = engine.python();
    WorkerConfig {
        lab,
        limits: Limits {
            max_batch: engine.max_batch,
            ..Limits::default()
        },
        queue_capacity,
        run_timeout,
        python: engine.python().map(engine::pitfalls::PythonPeer::new),
        // The built-in models; a caller that loaded a models directory puts its catalog
        // here (`team::load`).
        catalog: protocol::Catalog::built_in(),
    }
}

/// Starts the device worker ("could not ..." errors for people, not backtraces).
pub fn start_worker(config: WorkerConfig) -> Result<Worker> {
    Worker::start(config).context("could not start the measurement worker (libtorch)")
}

/// Recorded runs handed to a new device thread: as many as its run-to-run record keeps.
const REMEMBERED_RUNS: usize = 400;

/// Hands the device thread the runs this server recorded before it started (the newest,
/// oldest first), so two runs compared after a restart are decided against the repeats
/// measured before it too. A record that cannot be read is left out: the noise is then
/// measured from fewer runs, never invented.
pub fn remember_recorded_runs(worker: &Worker, store: &dyn crate::store::RecordStore) {
    let summaries = match store.list(Some(protocol::RecordKind::Run), REMEMBERED_RUNS) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("could not read the recorded runs for the run-to-run noise: {e:#}");
            return;
        }
    };
    let reports: Vec<protocol::Report> = summaries
        .iter()
        .rev()
        .filter_map(|s| store.get(&s.id).ok().flatten())
        .filter_map(|r| r.run().cloned())
        .collect();
    tracing::info!(runs = reports.len(), "recorded runs read for the run-to-run noise");
    if let Err(e) = worker.remember_runs(reports) {
        tracing::warn!("the device thread did not take the recorded runs: {e}");
    }
}

/// What a single server offers: the worker's devices, models (parameter counts measured
/// by the engine, or this executable's earlier counts from `counts`), limits and cards.
pub fn server_info(worker: &Worker, counts: Option<&CountCache>, auth_required: bool) -> Result<ServerInfo> {
    let models = match counts {
        Some(cache) => crate::model_counts::model_infos_cached(worker, cache)?,
        None => crate::model_counts::model_infos(worker)?,
    };
    Ok(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        libtorch_version: engine::LIBTORCH_VERSION.to_string(),
        devices: worker.devices(),
        models,
        limits: worker.limits().clone(),
        pitfalls: engine::pitfalls::catalogue(engine::pitfalls::default_device(&worker.devices())),
        auth_required,
        workers: Vec::new(),
    })
}

/// Submits run `id` to `worker`, its start recorded first. The sink, called on the device
/// thread, hands the report to the recorder, which sends `done` once it is saved (or
/// `failed` with kind `storage`: a result that is gone on reload is not `done`); a run
/// that fails is recorded `failed` with what it measured, then its `failed` goes out.
pub(super) fn start_run(
    worker: &Worker,
    recorder: &Arc<Recorder>,
    id: &str,
    run: Arc<RunState>,
    spec: RunSpec,
) -> Result<(), ApiError> {
    // The intent first: if this process dies before the run ends, the row says so.
    recorder.started(started_run(id, &spec));
    let sink_run = run.clone();
    let mut meter = ::fleet::metrics::RunMeter::default();
    let sink_recorder = recorder.clone();
    let record_id = id.to_string();
    // What it measured so far, kept with its record if it fails.
    let mut measured = protocol::PartialRun::default();
    let sink = move |event: Event| {
        meter.observe(&event);
        measured.observe(&event);
        match event {
            Event::Done { report } => {
                let run = sink_run.clone();
                sink_recorder.finish_run(&record_id, report, move |last| run.push(last));
            }
            Event::Failed { failure } => {
                let run = sink_run.clone();
                let measured = std::mem::take(&mut measured);
                sink_recorder.fail_run(&record_id, failure, measured, move |last| run.push(last));
            }
            event => sink_run.push(event),
        }
    };
    // In the run's span: the engine runs the task in the span it was submitted in, and
    // the recorder writes in the span it was handed the record in, so every line logged
    // about this run, on whichever thread, carries its id.
    match run.span().in_scope(|| worker.submit(spec, Box::new(sink))) {
        Ok(ticket) => {
            run.set_ticket(ticket);
            Ok(())
        }
        Err(e) => {
            recorder.discard(id);
            Err(e.into())
        }
    }
}

/// Runs experiment `card` through the engine's one checked path for experiments: the same
/// batch ceiling, queue bound, deadline, memory budget and panic barrier as runs.
pub(super) async fn run_pitfall(
    worker: &Arc<Worker>,
    card: String,
    options: PitfallOptions,
) -> Result<PitfallReport, ApiError> {
    let worker = worker.clone();
    let span = tracing::info_span!("pitfall", card = %card);
    let result = tokio::task::spawn_blocking(move || span.in_scope(|| worker.run_experiment(&card, options)))
        .await
        .map_err(|_| ApiError::Unavailable)?;
    result.map_err(|e| match e {
        engine::ExperimentError::Rejected(e) => ApiError::from(e),
        engine::ExperimentError::Failed(f) => ApiError::experiment_failed(f),
    })
}
