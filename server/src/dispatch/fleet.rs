//! Runs on a fleet's workers (`gradless serve --nats URL --database postgres://...`, a
//! front): the same page, API and event streams as the single-process server, without a
//! device. Runs and experiments go to the workers announced in NATS ([`fleet::front`]),
//! their events come back from JetStream into the same [`RunState`]s the SSE handler
//! reads, and records go to PostgreSQL (`crate::pg_store`), all through the recorder.
//!
//! Faults: NATS or PostgreSQL unreachable → `POST /api/runs` (and experiments) answer 503
//! with `Retry-After` and a message naming the service; both clients reconnect by
//! themselves. A run's record is written by whichever front sees its end first (its relay,
//! or the fleet-wide recorder consumer when nobody watches); the store keeps one row per id.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use fleet::bus::{Body, Bus, Message, Task, WorkerCard};
use fleet::front::{Front, SubmitError};
use protocol::{
    DeviceChoice, DeviceInfo, Event, FailureKind, PitfallOptions, PitfallReport, Record, RecordBody, RunFailure,
    RunSpec, ServerInfo, WorkerSummary,
};

use super::{InfoCell, Target};
use crate::config::ServeArgs;
use crate::error::ApiError;
use crate::pg_store::{redact, PgStore};
use crate::recorder::{started_run, Recorder};
use crate::runs::{RunState, Runs};
use crate::store::RecordStore;

/// A front's link to the fleet: the worker list, submitting and relaying ([`Front`]).
pub struct FleetLink {
    pub front: Arc<Front>,
}

/// What a front's start-up makes: its link to the workers and its record store. Neither
/// NATS nor PostgreSQL is waited for: a front started before them serves its pages and
/// recorded runs, and answers runs with 503 naming what is down until they answer.
pub async fn start(args: &ServeArgs) -> Result<(FleetLink, Arc<dyn RecordStore>)> {
    let nats = args.fleet.nats.clone().context("a front needs --nats")?;
    let database = args.fleet.database.clone().context(
        "a fleet front keeps its records in PostgreSQL: add --database postgres://user:pass@host/db",
    )?;
    let heartbeat = Duration::from_secs_f64(args.fleet.heartbeat_s.max(0.5));
    let run_timeout = Duration::from_secs(args.run_timeout_s);
    // The store migrates the schema on its first connection, before anything is recorded.
    let store = Arc::new(PgStore::open(&database)?);
    tokio::spawn({
        let store = store.clone();
        async move {
            let mut said = std::time::Instant::now() - Duration::from_secs(10);
            loop {
                let s = store.clone();
                match tokio::task::spawn_blocking(move || s.ready()).await {
                    Ok(Ok(())) => {
                        tracing::info!(database = %store.describe(), "run database open (PostgreSQL)");
                        return;
                    }
                    Ok(Err(e)) if said.elapsed() > Duration::from_secs(5) => {
                        tracing::warn!("waiting for PostgreSQL: {e:#}");
                        said = std::time::Instant::now();
                    }
                    _ => {}
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    let bus = Bus::connect(&nats, "gradless-front", &args.fleet.nats_auth.auth()).await?;
    // Its worker list and recorder retry until the streams exist (NATS away, or refusing
    // this front: credentials, TLS).
    tokio::spawn({
        let bus = bus.clone();
        async move { bus.ensure_patiently(heartbeat).await }
    });
    let front = Front::start(bus, heartbeat, run_timeout).await;
    Ok((FleetLink { front }, store))
}

impl FleetLink {
    /// What the page shows before any worker has announced itself.
    pub fn initial_info(auth_required: bool) -> ServerInfo {
        fleet_info(&[], auth_required, None)
    }

    /// The front's background work, once the state exists: the page's [`ServerInfo`]
    /// kept from the live workers, the fleet-wide recorder consumer, and the lease sweep
    /// that ends the jobs of dead workers nobody follows (their rows then marked
    /// interrupted by the recorder).
    pub fn spawn_background(&self, info: Arc<InfoCell>, auth_required: bool, recorder: Arc<Recorder>) {
        tokio::spawn(keep_info(self.front.clone(), info, auth_required));
        let store = recorder.store().clone();
        tokio::spawn(self.front.clone().sweep_leases(move || {
            let store = store.clone();
            async move {
                let running = tokio::task::spawn_blocking(move || store.running()).await??;
                anyhow::Ok(running.into_iter().map(|r| r.id).collect())
            }
        }));
        tokio::spawn(
            self.front
                .clone()
                .record_ends(move |job, message| record_end(recorder.clone(), job, message)),
        );
        tracing::info!(nats = %self.front.bus.url, "serving as a fleet front");
    }

    /// 503 naming the service that is down, if one is.
    pub(super) async fn services_up(&self, store: &Arc<dyn RecordStore>) -> Result<(), ApiError> {
        if !self.front.bus.is_connected() {
            return Err(nats_down(&self.front.bus.url));
        }
        let store = store.clone();
        let ping = tokio::task::spawn_blocking(move || store.ping()).await;
        if !matches!(ping, Ok(Ok(()))) {
            return Err(postgres_down());
        }
        Ok(())
    }

    pub(super) async fn choose(&self, worker: Option<&str>, device: DeviceChoice) -> Result<Target, ApiError> {
        self.front.choose(worker, device).await.map(Target::Worker).map_err(submit_error)
    }

    pub(super) async fn prepare_run(
        &self,
        store: &Arc<dyn RecordStore>,
        worker: Option<&str>,
        spec: &RunSpec,
    ) -> Result<Target, ApiError> {
        self.services_up(store).await?;
        let card = self.front.choose(worker, spec.device).await.map_err(submit_error)?;
        self.front.check(&card, spec).map_err(submit_error)?;
        Ok(Target::Worker(card))
    }

    pub(super) async fn start_run(
        &self,
        card: &WorkerCard,
        recorder: &Arc<Recorder>,
        id: &str,
        run: Arc<RunState>,
        spec: RunSpec,
    ) -> Result<(), ApiError> {
        // The intent first, before a worker can have it: the job's end completes this
        // row, whichever front records it.
        if let Err(e) = recorder.save(started_run(id, &spec)).await {
            tracing::error!("could not record the start of a run: {e:#}");
            return Err(postgres_down());
        }
        attach(&self.front, recorder, id, run);
        if let Err(e) = self.front.submit(card, id, Task::Run { spec }).await {
            recorder.discard(id);
            return Err(submit_error(e));
        }
        Ok(())
    }

    /// A run submitted on another front is followed from the stream, from its first event.
    pub(super) async fn follow(&self, runs: &Runs, recorder: &Arc<Recorder>, id: &str) -> Result<Option<Arc<RunState>>, ApiError> {
        if !protocol::is_record_id(id) {
            return Err(ApiError::NotFound(id.to_string()));
        }
        let exists = self.front.bus.job_exists(id).await.map_err(|e| {
            ApiError::ServiceDown(format!("NATS is unreachable, so this run's events cannot be read: {e:#}"))
        })?;
        if !exists {
            return Ok(None);
        }
        let (run, fresh) = runs.adopt(id);
        if fresh {
            attach(&self.front, recorder, id, run.clone());
        }
        Ok(Some(run))
    }

    pub(super) async fn run_pitfall(
        &self,
        card: &WorkerCard,
        job: &str,
        pitfall: String,
        options: PitfallOptions,
    ) -> Result<PitfallReport, ApiError> {
        let front = &self.front;
        let task = Task::Pitfall { pitfall, options };
        // Followed from before the job exists, so its end cannot be missed.
        let last = {
            let front = front.clone();
            let job = job.to_string();
            tokio::spawn(async move { front.last_message(&job).await })
        };
        front.submit(card, job, task).await.map_err(submit_error)?;
        let wait = front.run_timeout + front.heartbeat_ttl * 3;
        let message = tokio::time::timeout(wait, last)
            .await
            .map_err(|_| ApiError::NoReport("the experiment did not end within the run time limit".into()))?
            .map_err(|_| ApiError::Unavailable)?
            .map_err(|e| ApiError::NoReport(format!("{e:#}")))?;
        match message.body {
            Body::Pitfall { report } => Ok(*report),
            Body::Event { event: Event::Failed { failure } } => Err(ApiError::experiment_failed(failure)),
            Body::Event { .. } => Err(ApiError::NoReport("the experiment ended without a report".into())),
        }
    }
}

fn nats_down(url: &str) -> ApiError {
    ApiError::ServiceDown(format!(
        "NATS ({}) is unreachable: runs cannot be handed to workers until it is back; the front reconnects by itself",
        redact(url)
    ))
}

fn postgres_down() -> ApiError {
    ApiError::ServiceDown(
        "PostgreSQL (the run database) is unreachable: a run now could not be recorded; the front reconnects by itself".into(),
    )
}

fn submit_error(e: SubmitError) -> ApiError {
    match e {
        SubmitError::NatsDown(url) => nats_down(&url),
        SubmitError::Publish { .. } => ApiError::ServiceDown(e.to_string()),
        SubmitError::Spec(s) => ApiError::InvalidSpec(s),
        SubmitError::NoWorker(m) => ApiError::NoWorker(m),
    }
}

/// Starts relaying job `id`'s events into `run` (once per run per front). Records the
/// report before `done` goes out, as the single-process server does.
fn attach(front: &Arc<Front>, recorder: &Arc<Recorder>, id: &str, run: Arc<RunState>) {
    let mut messages = front.relay(id);
    let recorder = recorder.clone();
    let id = id.to_string();
    tokio::spawn(async move {
        while let Some(message) = messages.recv().await {
            match message.body {
                Body::Event { event: Event::Done { report } } => {
                    // Waited for: the relay's end below must not overtake `done`.
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let run = run.clone();
                    recorder.finish_run(&id, report, move |last| {
                        run.push(last);
                        let _ = tx.send(());
                    });
                    let _ = rx.await;
                }
                Body::Event { event } => run.push(event),
                Body::Pitfall { .. } => {}
            }
        }
        if !run.is_finished() {
            run.push(Event::Failed {
                failure: RunFailure {
                    kind: FailureKind::Internal,
                    message: "this front stopped receiving the run's events".into(),
                },
            });
        }
    });
}

/// Records a job's end from its last message, once per fleet (the shared recorder
/// consumer): a run's `done` or an experiment's report completes its row; a run whose
/// worker went away is marked interrupted — in a fleet that is what interrupts a run, not
/// a front's restart (the job lives on in JetStream and on its worker, and any front can
/// follow and record it), so fronts never mark `running` rows at start-up; any other
/// failure marks the row `failed` with its reason and what the worker measured before, as
/// on a single server.
async fn record_end(recorder: Arc<Recorder>, job: String, message: Message) -> Result<()> {
    let body = match message.body {
        Body::Event { event: Event::Done { report } } => RecordBody::Run(report),
        Body::Pitfall { report } => RecordBody::Pitfall(report),
        Body::Event { event: Event::Failed { failure } } if failure.kind == FailureKind::WorkerGone => {
            let cause = format!("the loss of its fleet worker ({})", failure.message);
            return recorder
                .write(move |store| {
                    let Some(RecordBody::Unfinished(u)) = store.get(&job)?.map(|r| r.body) else {
                        return Ok(());
                    };
                    let at = engine::device::rfc3339_now();
                    let interrupted = RecordBody::Unfinished(Box::new(u.interrupted(at, Some(&cause))));
                    store.save(&Record { id: job, body: interrupted })
                })
                .await;
        }
        Body::Event { event: Event::Failed { failure } } => {
            let measured = message.measured.map(|m| *m).unwrap_or_default();
            return recorder.write(move |store| crate::recorder::save_failure(store, &job, failure, measured)).await;
        }
        Body::Event { .. } => return Ok(()),
    };
    recorder.save(Record { id: job, body }).await
}

/// What the page shows, from the live workers: every worker's devices, the models and
/// limits the workers announce (the first one's: a fleet runs one build), the cards.
fn fleet_info(cards: &[WorkerCard], auth_required: bool, previous: Option<&ServerInfo>) -> ServerInfo {
    let mut devices: Vec<DeviceInfo> = Vec::new();
    for d in cards.iter().flat_map(|c| c.devices.iter()) {
        if !devices.iter().any(|x| x.kind == d.kind) {
            devices.push(d.clone());
        }
    }
    let first = cards.first();
    let card_device = engine::pitfalls::default_device(&devices);
    ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        libtorch_version: first
            .map(|c| c.libtorch_version.clone())
            .or_else(|| previous.map(|p| p.libtorch_version.clone()))
            .unwrap_or_default(),
        devices,
        // Kept from the last worker seen when none is live: the pages still describe the
        // models (runs are refused until a worker returns).
        models: first
            .map(|c| c.models.clone())
            .or_else(|| previous.map(|p| p.models.clone()))
            .unwrap_or_default(),
        limits: first
            .map(|c| c.limits.clone())
            .or_else(|| previous.map(|p| p.limits.clone()))
            .unwrap_or_default(),
        pitfalls: engine::pitfalls::catalogue(card_device),
        auth_required,
        workers: cards
            .iter()
            .map(|c| WorkerSummary {
                name: c.name.clone(),
                host: c.host.clone(),
                label: c.label(),
                devices: c.devices.clone(),
                queued: c.queued,
            })
            .collect(),
    }
}

/// Refreshes the page's [`ServerInfo`] from the live workers.
async fn keep_info(front: Arc<Front>, info: Arc<InfoCell>, auth_required: bool) {
    let mut tick = tokio::time::interval((front.heartbeat_ttl / 3).max(Duration::from_millis(200)));
    loop {
        tick.tick().await;
        let previous = info.current();
        let next = fleet_info(&front.workers(), auth_required, Some(&previous));
        if next != *previous {
            info.set(next);
        }
    }
}
