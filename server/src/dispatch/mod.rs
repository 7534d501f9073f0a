//! Where runs go: [`Dispatch`], the one object in the server's state that puts work on a
//! device — this process's device worker ([`local`], `gradless serve`) or a fleet's workers
//! over NATS ([`fleet`], `gradless serve --nats ...`, a front). Handlers call its methods
//! and never ask which it is, so the router has one set of handlers.
//!
//! A dispatch takes the parts of the server it needs as arguments (the runs, the recorder,
//! the store) rather than the whole state: the state holds the dispatch, not the other way
//! round. It also owns what the server offers ([`InfoCell`]): the local worker's models
//! and devices, or the live workers' announcements.

pub mod fleet;
pub mod local;

use std::sync::Arc;

use ::fleet::bus::WorkerCard;
use protocol::{DeviceChoice, PitfallOptions, PitfallReport, RunSpec, ServerInfo};

use crate::error::ApiError;
use crate::recorder::Recorder;
use crate::runs::{RunState, Runs};
use crate::store::RecordStore;

/// Where runs go (see the module docs).
#[derive(Clone)]
pub enum Dispatch {
    /// This process's device worker.
    Local(Arc<engine::Worker>),
    /// A fleet front's link to the workers.
    Fleet(Arc<fleet::FleetLink>),
}

/// Where one accepted request goes, chosen before the caller is charged for it: the
/// local worker, or the fleet worker picked for it.
pub enum Target {
    Local,
    Worker(WorkerCard),
}

impl Dispatch {
    /// The local worker, on a single server (`None` on a fleet front).
    pub fn local(&self) -> Option<&Arc<engine::Worker>> {
        match self {
            Dispatch::Local(worker) => Some(worker),
            Dispatch::Fleet(_) => None,
        }
    }

    /// Checks that `spec` can run and picks where (the worker named by `?worker=` on a
    /// fleet, else the live one with the device it asks for and the shortest queue).
    pub async fn prepare_run(
        &self,
        store: &Arc<dyn RecordStore>,
        worker: Option<&str>,
        spec: &RunSpec,
    ) -> Result<Target, ApiError> {
        match self {
            Dispatch::Local(w) => {
                w.check(spec.clone()).map_err(ApiError::InvalidSpec)?;
                Ok(Target::Local)
            }
            Dispatch::Fleet(link) => link.prepare_run(store, worker, spec).await,
        }
    }

    /// Hands accepted run `id` to `target`: its start recorded first, its events pushed
    /// into `run`, its end recorded before `done` goes out. On an error the caller forgets
    /// the run (its row is discarded here).
    pub async fn start_run(
        &self,
        target: Target,
        recorder: &Arc<Recorder>,
        id: &str,
        run: Arc<RunState>,
        spec: RunSpec,
    ) -> Result<(), ApiError> {
        match (self, target) {
            (Dispatch::Local(w), _) => local::start_run(w, recorder, id, run, spec),
            (Dispatch::Fleet(link), Target::Worker(card)) => link.start_run(&card, recorder, id, run, spec).await,
            (Dispatch::Fleet(_), Target::Local) => Err(ApiError::Unavailable),
        }
    }

    /// The live events of run `id` that this process does not know yet: on a fleet, a
    /// run another front submitted, followed from the stream; `None` when there is none
    /// (then the record may say what became of it).
    pub async fn follow(&self, runs: &Runs, recorder: &Arc<Recorder>, id: &str) -> Result<Option<Arc<RunState>>, ApiError> {
        match self {
            Dispatch::Local(_) => Ok(None),
            Dispatch::Fleet(link) => link.follow(runs, recorder, id).await,
        }
    }

    /// Picks where experiment requests with `device` go (see [`Dispatch::prepare_run`]).
    pub async fn prepare_pitfall(
        &self,
        store: &Arc<dyn RecordStore>,
        worker: Option<&str>,
        device: DeviceChoice,
    ) -> Result<Target, ApiError> {
        match self {
            Dispatch::Local(_) => Ok(Target::Local),
            Dispatch::Fleet(link) => {
                link.services_up(store).await?;
                link.choose(worker, device).await
            }
        }
    }

    /// How many experiments may wait, as the "queue full" answer states it.
    pub fn experiment_capacity(&self, experiments: &tokio::sync::Semaphore) -> usize {
        match self {
            Dispatch::Local(w) => w.queue_capacity(),
            Dispatch::Fleet(_) => experiments.available_permits(),
        }
    }

    /// Runs pitfall `card` as job `record_id` and answers its report (not yet recorded).
    pub async fn run_pitfall(
        &self,
        target: Target,
        record_id: &str,
        card: String,
        options: PitfallOptions,
    ) -> Result<PitfallReport, ApiError> {
        match (self, target) {
            (Dispatch::Local(w), _) => local::run_pitfall(w, card, options).await,
            (Dispatch::Fleet(link), Target::Worker(worker)) => link.run_pitfall(&worker, record_id, card, options).await,
            (Dispatch::Fleet(_), Target::Local) => Err(ApiError::Unavailable),
        }
    }

    /// `GET /api/health`: the local worker's tasks, queue and leak checks, or on a front
    /// whether NATS answers and the live workers.
    pub fn health(&self) -> serde_json::Value {
        match self {
            Dispatch::Local(w) => serde_json::to_value(w.health()).unwrap_or_default(),
            Dispatch::Fleet(link) => serde_json::json!({
                "nats_connected": link.front.bus.is_connected(),
                "workers": link.front.workers(),
            }),
        }
    }

    /// The live fleet workers (none on a single server).
    pub fn workers(&self) -> Vec<WorkerCard> {
        match self {
            Dispatch::Local(_) => Vec::new(),
            Dispatch::Fleet(link) => link.front.workers(),
        }
    }

    /// When each event of run `id` was emitted by its fleet worker (µs since the epoch).
    pub fn emitted(&self, id: &str) -> Result<Vec<u64>, ApiError> {
        match self {
            Dispatch::Local(_) => Err(ApiError::FleetOnly(
                "GET /api/runs/{id}/emitted is a fleet front's: when a fleet worker emitted each event, and this is a single server, whose runs no worker relays".into(),
            )),
            Dispatch::Fleet(link) => link.front.emitted(id).ok_or_else(|| ApiError::NotFound(id.to_string())),
        }
    }

    /// Reads what `/metrics` shows of the device at each scrape: the local worker's queue
    /// depth and device memory (a fleet's workers report their own).
    pub fn observe(&self) {
        if let Dispatch::Local(worker) = self {
            let m = ::fleet::metrics::global();
            let health = worker.health();
            m.set_queue_depths([("local".to_string(), health.queued as u64)]);
            m.set_device_memory(
                health
                    .last_checks
                    .iter()
                    .map(|c| (c.device.as_str().to_string(), c.held_bytes)),
            );
        }
    }

    /// At the first shutdown signal: a local worker refuses new work and cancels what waits,
    /// so every open event stream reaches its end; the current run goes on. A front's runs
    /// go on on their workers.
    pub fn close(&self) {
        match self {
            Dispatch::Local(w) => w.close(),
            Dispatch::Fleet(_) => {}
        }
    }

    /// After serving: waits for the local worker's current run (blocking), before the
    /// recorder writes its record and closes the store.
    pub fn shutdown(&self) {
        if let Dispatch::Local(w) = self {
            w.shutdown();
        }
    }
}

/// The [`ServerInfo`] pages and `/api/info` show now.
pub struct InfoCell(std::sync::RwLock<Arc<ServerInfo>>);

impl InfoCell {
    pub fn new(info: ServerInfo) -> InfoCell {
        InfoCell(std::sync::RwLock::new(Arc::new(info)))
    }

    pub fn current(&self) -> Arc<ServerInfo> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set(&self, info: ServerInfo) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(info);
    }
}
