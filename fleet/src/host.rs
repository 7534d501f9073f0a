//! A worker host's loop (`gradless worker`): one device of a fleet, its side of the bus as
//! [`crate::front`] is a front's. (Named `host` so it is not taken for the engine's device
//! thread, `engine::Worker`, which it drives.) It owns the device through the same
//! [`engine::Worker`] as the single-process server (same measurement, queue, deadline,
//! memory budget and leak check), announces itself in the workers bucket every third of
//! its heartbeat TTL, and takes jobs from its subject of the runs stream one at a time:
//! a job is acknowledged only once its last event is stored, so a worker killed mid-run
//! leaves the job to be redelivered — and skipped, since a front has by then published its
//! failure (see [`crate::front`]).
//!
//! While it holds a job the worker keeps a lease on it ([`bus::Lease`], renewed every
//! third of its heartbeat TTL, deleted once the job's end is stored), so that a worker that
//! dies while no front follows its job still has that job ended (as "worker gone") by any
//! front, once the lease runs out ([`crate::front::Front::sweep_leases`]). A worker handed
//! a job whose lease another process of its name holds (its predecessor, killed mid-run)
//! ends it the same way instead of running it again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use async_nats::jetstream::consumer::{pull, AckPolicy};
use async_nats::jetstream::AckKind;
use futures::StreamExt;
use protocol::{DeviceChoice, DeviceKind, Event, FailureKind, RunFailure};
use tracing::Instrument as _;

use crate::bus::{self, Body, Bus, Job, Message, Task, WorkerCard};
use crate::metrics::{self, RunMeter};

pub struct WorkerOptions {
    pub name: String,
    pub heartbeat_ttl: Duration,
    /// A job still waiting this long after it was queued fails as expired.
    pub run_timeout: Duration,
    /// `--device cpu`: measure on the CPU only, even on a host with a GPU.
    pub cpu_only: bool,
    /// How its results name it (`NAME on HOST`, [`measurer`]): the stamp's `worker`.
    pub measurer: String,
    /// This process's start, as its card says ([`WorkerCard::started_ms`]): every message
    /// it emits names it, so a front knows which process runs a job.
    pub started_ms: u64,
}

/// What the heartbeat says besides the static card.
#[derive(Default)]
struct Live {
    running: Option<String>,
}

/// Runs the worker until `shutdown` resolves; then finishes the current job and returns.
pub async fn run(
    bus: Bus,
    engine: Arc<engine::Worker>,
    card: WorkerCard,
    options: WorkerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let options = Arc::new(options);
    bus.ensure_patiently(options.heartbeat_ttl).await;
    let live = Arc::new(Mutex::new(Live::default()));
    // Listed before taking a job: a front that sees this process start a job and then
    // reads the list finds it there unless it has gone.
    let (listed, first_put) = tokio::sync::oneshot::channel();
    let beat = tokio::spawn(heartbeat(bus.clone(), engine.clone(), card, live.clone(), options.clone(), listed));
    let _ = first_put.await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: finishing the current job, taking no more");
        stopping.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let result = jobs(bus.clone(), engine, live, options.clone(), stop).await;
    beat.abort();
    // Leave the list at once rather than a TTL later.
    if let Ok(kv) = bus.workers().await {
        let _ = kv.delete(&options.name).await;
    }
    result
}

/// How long JetStream waits for the worker's word on a job before handing it out again:
/// short, because a worker restarted after a crash gets nothing else (one job in flight)
/// until its dead predecessor's job comes back to it; a live worker says "in progress"
/// every third of it.
fn ack_wait(heartbeat_ttl: Duration) -> Duration {
    (heartbeat_ttl * 2).max(Duration::from_secs(4))
}

fn durable(name: &str) -> String {
    format!("worker-{name}")
}

async fn heartbeat(
    bus: Bus,
    engine: Arc<engine::Worker>,
    mut card: WorkerCard,
    live: Arc<Mutex<Live>>,
    options: Arc<WorkerOptions>,
    listed: tokio::sync::oneshot::Sender<()>,
) {
    let mut listed = Some(listed);
    let period = (options.heartbeat_ttl / 3).max(Duration::from_millis(200));
    let mut tick = tokio::time::interval(period);
    let mut bucket: Option<async_nats::jetstream::kv::Store> = None;
    loop {
        tick.tick().await;
        let health = engine.health();
        card.memory_in_use = health
            .last_checks
            .iter()
            .map(|c| (c.device.as_str().to_string(), c.held_bytes))
            .collect();
        card.running = live.lock().unwrap_or_else(|e| e.into_inner()).running.clone();
        // The queue depth is news, the beat is not optional: a JetStream slow to answer
        // (a loaded host) leaves last beat's depth on the card rather than delaying the
        // beat past its TTL.
        let depth = async {
            let stream = bus.js.get_stream_no_info(bus::RUNS_STREAM).await?;
            anyhow::Ok(stream.consumer_info(durable(&card.name)).await?.num_pending)
        };
        if let Ok(Ok(queued)) = tokio::time::timeout(period / 2, depth).await {
            card.queued = queued;
        }
        let m = metrics::global();
        m.set_queue_depths([(card.name.clone(), card.queued)]);
        m.set_device_memory(card.memory_in_use.clone());
        card.heartbeat_ms = bus::now_ms();
        let put = async {
            // The bucket's handle is kept between beats (opening it is a request of its
            // own); a failed put opens it afresh.
            let kv = match bucket.take() {
                Some(kv) => kv,
                None => bus.workers().await?,
            };
            kv.put(&card.name, serde_json::to_vec(&card)?.into()).await?;
            bucket = Some(kv);
            anyhow::Ok(())
        };
        match put.await {
            Ok(()) => {
                if let Some(tx) = listed.take() {
                    let _ = tx.send(());
                }
            }
            Err(e) => tracing::warn!("heartbeat not stored (NATS at {}): {e:#}", bus.url),
        }
    }
}

async fn jobs(
    bus: Bus,
    engine: Arc<engine::Worker>,
    live: Arc<Mutex<Live>>,
    options: Arc<WorkerOptions>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    let consumer = loop {
        if stopped() {
            return Ok(());
        }
        let created = async {
            let stream = bus.js.get_stream(bus::RUNS_STREAM).await?;
            let consumer: async_nats::jetstream::consumer::PullConsumer = stream
                .get_or_create_consumer(
                    &durable(&options.name),
                    pull::Config {
                        durable_name: Some(durable(&options.name)),
                        filter_subject: bus::job_subject(&options.name),
                        ack_policy: AckPolicy::Explicit,
                        max_ack_pending: 1,
                        ack_wait: ack_wait(options.heartbeat_ttl),
                        ..Default::default()
                    },
                )
                .await?;
            anyhow::Ok(consumer)
        };
        match created.await {
            Ok(c) => break c,
            Err(e) => {
                tracing::warn!("waiting for the runs stream: {e:#}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    tracing::info!(worker = %options.name, "taking jobs from {}", bus::job_subject(&options.name));
    while !stopped() {
        let batch = consumer
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(2))
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!("fetching a job: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        while let Some(message) = batch.next().await {
            let message = match message {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!("fetching a job: {e}");
                    break;
                }
            };
            let job: Job = match serde_json::from_slice(&message.payload) {
                Ok(j) => j,
                Err(e) => {
                    tracing::error!("a job this build cannot read, dropped: {e}");
                    let _ = message.ack_with(AckKind::Term).await;
                    continue;
                }
            };
            live.lock().unwrap_or_else(|e| e.into_inner()).running = Some(job.id.clone());
            // The job's span: the engine runs it in the span it was submitted in, so every
            // line about this run, the device thread's included, carries its id.
            let outcome = handle(&bus, &engine, &job, &options, &message)
                .instrument(tracing::info_span!("run", id = %job.id))
                .await;
            live.lock().unwrap_or_else(|e| e.into_inner()).running = None;
            if let Err(e) = outcome {
                // Not acknowledged: it comes back after the ack wait and is tried again
                // (or skipped, if its end made it to the stream after all).
                tracing::error!(job = %job.id, "job not finished: {e:#}");
                continue;
            }
            if let Err(e) = message.double_ack().await {
                tracing::warn!(job = %job.id, "acknowledging the job: {e}");
            }
        }
    }
    Ok(())
}

/// Publishes `event` for the job, retrying while NATS is away (events must arrive in
/// order, so the next one waits).
async fn emit(bus: &Bus, job: &Job, options: &WorkerOptions, body: Body) -> Result<()> {
    emit_measured(bus, job, options, body, None).await
}

/// [`emit`], with what a failed run measured before it failed.
async fn emit_measured(
    bus: &Bus,
    job: &Job,
    options: &WorkerOptions,
    body: Body,
    measured: Option<Box<protocol::PartialRun>>,
) -> Result<()> {
    let message = Message {
        worker: job.worker.clone(),
        process_started_ms: Some(options.started_ms),
        emitted_us: bus::now_us(),
        measured,
        body,
    };
    let dedup = message.is_last().then(|| format!("{}-end", job.id));
    let mut tries = 0;
    loop {
        match bus.publish_event(&job.id, &message, dedup.as_deref()).await {
            Ok(()) => return Ok(()),
            Err(e) if tries < 120 => {
                tries += 1;
                tracing::warn!(job = %job.id, "publishing an event failed, retrying: {e:#}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn failed(kind: FailureKind, message: String) -> Body {
    Body::Event {
        event: Event::Failed {
            failure: RunFailure { kind, message },
        },
    }
}

async fn handle(
    bus: &Bus,
    engine: &Arc<engine::Worker>,
    job: &Job,
    options: &WorkerOptions,
    message: &async_nats::jetstream::Message,
) -> Result<()> {
    if bus.has_ended(&job.id).await.context("reading the job's events")? {
        tracing::info!(job = %job.id, "already ended (a front declared it failed): skipped");
        return Ok(());
    }
    match claim(bus, &job.id, options).await? {
        None => {}
        // A front found it waiting past the run time limit first, and ends it as expired.
        Some(held) if held.expired_by.is_some() => {
            tracing::info!(job = %job.id, "expired by a front before this worker took it: skipped");
            return Ok(());
        }
        // Held by an earlier process of this worker (killed mid-run, its end not declared
        // yet): that run is gone with it, and is never run a second time.
        Some(held) => {
            metrics::global().count_failure("worker_gone");
            let text = format!("worker {} went away during the run", held.worker);
            tracing::warn!(job = %job.id, "held by an earlier process of this worker: ended as worker gone, not run again");
            return emit(bus, job, options, failed(FailureKind::WorkerGone, text)).await;
        }
    }
    let lease = hold(bus, &job.id, options);
    let outcome = handle_held(bus, engine, job, options, message).await;
    lease.abort();
    // Released only once the end is stored (or not at all when it was not: the lease
    // then runs out, and a front ends the job).
    if outcome.is_ok() {
        if let Ok(kv) = bus.leases().await {
            let _ = kv.delete(&job.id).await;
        }
    }
    outcome
}

/// This worker process's lease on a job, renewed at `renewed_ms`.
fn lease(options: &WorkerOptions, renewed_ms: u64) -> bus::Lease {
    bus::Lease {
        worker: options.name.clone(),
        process_started_ms: options.started_ms,
        renewed_ms,
        ttl_ms: options.heartbeat_ttl.as_millis() as u64,
        expired_by: None,
    }
}

/// Claims job `id`'s lease for this process ([`Bus::claim`]), retrying while NATS is away
/// (a job never runs unleased): `None` once held, else what holds it instead.
async fn claim(bus: &Bus, id: &str, options: &WorkerOptions) -> Result<Option<bus::Lease>> {
    let mut tries = 0;
    loop {
        match bus.claim(id, &lease(options, bus::now_ms())).await {
            Ok(held) => return Ok(held),
            Err(e) if tries < 120 => {
                tries += 1;
                tracing::warn!(job = %id, "claiming the job's lease failed, retrying: {e:#}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.context("claiming the job's lease")),
        }
    }
}

/// Renews job `id`'s lease (claimed by [`claim`]) every third of the TTL until the
/// returned task is aborted.
fn hold(bus: &Bus, id: &str, options: &WorkerOptions) -> tokio::task::JoinHandle<()> {
    let ttl = options.heartbeat_ttl;
    let put = |bus: Bus, lease: bus::Lease, id: String| async move {
        let kv = bus.leases().await?;
        kv.put(&id, serde_json::to_vec(&lease)?.into()).await?;
        anyhow::Ok(())
    };
    let (bus, id) = (bus.clone(), id.to_string());
    let template = lease(options, 0);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval((ttl / 3).max(Duration::from_millis(200)));
        tick.tick().await;
        loop {
            tick.tick().await;
            let renewed = bus::Lease { renewed_ms: bus::now_ms(), ..template.clone() };
            if let Err(e) = put(bus.clone(), renewed, id.clone()).await {
                tracing::warn!(job = %id, "renewing the job's lease (NATS at {}): {e:#}", bus.url);
            }
        }
    })
}

async fn handle_held(
    bus: &Bus,
    engine: &Arc<engine::Worker>,
    job: &Job,
    options: &WorkerOptions,
    message: &async_nats::jetstream::Message,
) -> Result<()> {
    let waited_ms = bus::now_ms().saturating_sub(job.submitted_ms);
    if waited_ms > options.run_timeout.as_millis() as u64 {
        metrics::global().count_failure("timeout");
        let text = format!(
            "it waited {:.0} s for worker {}, longer than the run time limit ({} s): expired without running",
            waited_ms as f64 / 1000.0,
            options.name,
            options.run_timeout.as_secs()
        );
        return emit(bus, job, options, failed(FailureKind::Timeout, text)).await;
    }
    match &job.task {
        Task::Run { spec } => run_job(bus, engine, job, spec.clone(), options, message).await,
        Task::Pitfall { pitfall, options: p } => {
            let mut p = p.clone();
            if options.cpu_only {
                if p.device == DeviceChoice::Cuda {
                    return emit(bus, job, options, failed(FailureKind::Invalid, cpu_only(&options.name))).await;
                }
                p.device = DeviceChoice::Cpu;
            }
            let engine = engine.clone();
            let id = pitfall.clone();
            let span = tracing::Span::current();
            let work = tokio::task::spawn_blocking(move || span.in_scope(|| engine.run_experiment(&id, p)));
            let result = with_progress(message, options, work).await;
            let body = match result {
                Ok(Ok(mut report)) => {
                    report.record_id = Some(job.id.clone());
                    report.env.worker = Some(options.measurer.clone());
                    Body::Pitfall { report: Box::new(report) }
                }
                Ok(Err(engine::ExperimentError::Failed(f))) => Body::Event { event: Event::Failed { failure: f } },
                Ok(Err(engine::ExperimentError::Rejected(e))) => failed(FailureKind::Invalid, e.to_string()),
                Err(_) => failed(FailureKind::Internal, "the experiment's thread panicked".into()),
            };
            emit(bus, job, options, body).await
        }
    }
}

fn cpu_only(name: &str) -> String {
    format!("worker {name} measures on the CPU only (started with --device cpu)")
}

/// Awaits `work`, telling JetStream every few seconds that the job is in progress (so it is
/// not handed out again while it still runs).
async fn with_progress<T>(
    message: &async_nats::jetstream::Message,
    options: &WorkerOptions,
    work: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(work);
    let mut tick = tokio::time::interval(ack_wait(options.heartbeat_ttl) / 3);
    tick.tick().await;
    loop {
        tokio::select! {
            r = &mut work => return r,
            _ = tick.tick() => { let _ = message.ack_with(AckKind::Progress).await; }
        }
    }
}

async fn run_job(
    bus: &Bus,
    engine: &Arc<engine::Worker>,
    job: &Job,
    mut spec: protocol::RunSpec,
    options: &WorkerOptions,
    message: &async_nats::jetstream::Message,
) -> Result<()> {
    if options.cpu_only {
        if spec.device == DeviceChoice::Cuda {
            return emit(bus, job, options, failed(FailureKind::Invalid, cpu_only(&options.name))).await;
        }
        spec.device = DeviceChoice::Cpu;
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    // The engine's sink runs on the device thread: it only hands the event over.
    let ticket = match engine.submit(spec, Box::new(move |e| drop(tx.send(e)))) {
        Ok(ticket) => ticket,
        Err(e) => return emit(bus, job, options, failed(FailureKind::Invalid, e.to_string())).await,
    };
    let mut meter = RunMeter::default();
    let mut measured = protocol::PartialRun::default();
    // A worker cut off from NATS for longer than its heartbeat is declared gone by the
    // fronts, which end its run; once it is back it would go on measuring a run nobody
    // records, while the jobs behind it wait (and expire). So it looks, every few seconds,
    // whether its run has ended without it, and stops it if so.
    let mut ended_check = tokio::time::interval((options.heartbeat_ttl / 2).max(Duration::from_secs(1)));
    ended_check.tick().await;
    let relay = async {
        loop {
            let event = tokio::select! {
                event = rx.recv() => event,
                _ = ended_check.tick() => {
                    if matches!(bus.has_ended(&job.id).await, Ok(true)) {
                        tracing::info!(job = %job.id, "a front ended this run while this worker was away: stopped");
                        ticket.cancel();
                        return Ok(());
                    }
                    continue;
                }
            };
            let Some(event) = event else { break };
            // The fleet's queue position was said by the front; the engine's own queue
            // holds this one job only.
            if matches!(event, Event::Queued { .. }) {
                continue;
            }
            meter.observe(&event);
            measured.observe(&event);
            let last = event.is_terminal();
            let event = match event {
                Event::Done { mut report } => {
                    report.env.worker = Some(options.measurer.clone());
                    Event::Done { report }
                }
                other => other,
            };
            let kept = matches!(event, Event::Failed { .. }).then(|| Box::new(std::mem::take(&mut measured)));
            emit_measured(bus, job, options, Body::Event { event }, kept).await?;
            if last {
                return Ok(());
            }
        }
        // The engine dropped the sink without a last event: it stopped.
        emit(bus, job, options, failed(FailureKind::Internal, "the device worker stopped".into())).await
    };
    with_progress(message, options, relay).await
}

/// How a worker's results name it: its fleet name and the host it runs on.
pub fn measurer(card: &WorkerCard) -> String {
    format!("{} on {}", card.name, card.host)
}

/// The card for this worker, from what its engine found.
pub fn card(name: &str, engine: &engine::Worker, models: Vec<protocol::ModelInfo>, cpu_only: bool) -> WorkerCard {
    let devices: Vec<_> = engine
        .devices()
        .into_iter()
        .filter(|d| !cpu_only || d.kind == DeviceKind::Cpu)
        .collect();
    let machine = engine.machine();
    WorkerCard {
        name: name.to_string(),
        host: hostname(),
        devices,
        models,
        limits: engine.limits().clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        libtorch_version: engine::LIBTORCH_VERSION.to_string(),
        driver_version: machine.cuda.as_ref().and_then(|c| c.driver_version.clone()),
        cuda_version: machine.cuda.as_ref().and_then(|c| c.cuda_version.clone()),
        started_ms: bus::now_ms(),
        heartbeat_ms: 0,
        heartbeat_ttl_ms: 0,
        queued: 0,
        running: None,
        memory_in_use: Vec::new(),
    }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown host".into())
}
