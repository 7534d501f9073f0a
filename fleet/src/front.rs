//! What a device-less front does with the fleet: keeps the list of live workers (the
//! bucket, re-read every third of a heartbeat TTL; a card older than its TTL is dropped
//! even before NATS expires it), hands jobs to a worker, relays a job's events from the
//! stream (from the first, so a late viewer on any front replays them) while watching over
//! the job, and records every job's last event through a durable consumer all fronts share.
//!
//! Watching over a job: a worker's messages name its process (its start time). Once one
//! has arrived, that process vanishing from the list (a list read begun after the message
//! was read lacks the worker, which is listed before it takes any job) or a newer process
//! under the same name fails the job with "worker NAME went away during the run"; a stale
//! list still showing an older process does not, and neither does a list read within a
//! heartbeat TTL of the front's own trouble with NATS (after a NATS restart every card has
//! lapsed, and the workers need a beat to be listed again). A job no worker has spoken for fails as
//! expired after the run timeout. Either
//! failure is published to the job's stream with the job's end message id, so however many
//! fronts notice, the stream holds one last event.
//!
//! A job nobody follows (its front gone, no viewer) is watched through its lease instead
//! ([`Front::sweep_leases`]): every front looks over the unfinished jobs of the record
//! store, and ends as "worker gone" any whose lease lapsed without an end, and as expired
//! any that was never handed to a worker.

use protocol::settings::SettingId;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::AckKind;
use futures::StreamExt;
use protocol::{DeviceChoice, DeviceKind, Event, FailureKind, RunFailure, RunSpec, SpecError};
use tokio::sync::mpsc;

use crate::bus::{self, Body, Bus, Job, Message, Task, WorkerCard};
use crate::metrics;

mod leases;

pub struct Front {
    pub bus: Bus,
    workers: RwLock<Listing>,
    /// When each relayed message was emitted, per job (the newest jobs only): the load
    /// test measures emit-to-viewer delays from it.
    stamps: std::sync::Mutex<Stamps>,
    pub heartbeat_ttl: Duration,
    pub run_timeout: Duration,
    /// Names this front process in the expiry claims it writes ([`bus::Lease::expired_by`]).
    name: String,
}

/// The live workers as last read from the bucket, and when that read began.
#[derive(Default)]
struct Listing {
    cards: Vec<WorkerCard>,
    read_at: Option<Instant>,
    /// A worker missing from the list proves nothing before this: the front itself was cut
    /// from NATS (a restart, a partition) until a heartbeat TTL earlier, and the workers'
    /// cards lapsed while nobody could store or read them.
    absence_proves_from: Option<Instant>,
}

#[derive(Default)]
struct Stamps {
    by_job: std::collections::HashMap<String, Vec<u64>>,
    order: std::collections::VecDeque<String>,
}

/// Why a job was not handed over.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("NATS is unreachable ({0}): no run can be handed to a worker until it is back")]
    NatsDown(String),
    #[error("{0}")]
    Spec(SpecError),
    #[error("no live worker can run this: {0}")]
    NoWorker(String),
    #[error("handing the run to worker {worker} failed: {reason}")]
    Publish { worker: String, reason: String },
}

impl Front {
    /// Connects the front's side of the fleet and starts keeping the worker list.
    pub async fn start(bus: Bus, heartbeat_ttl: Duration, run_timeout: Duration) -> Arc<Front> {
        let front = Arc::new(Front {
            bus,
            workers: RwLock::new(Listing::default()),
            stamps: Default::default(),
            heartbeat_ttl,
            run_timeout,
            name: format!("front {} (pid {}, started {})", crate::host::hostname(), std::process::id(), bus::now_ms()),
        });
        let watcher = Arc::downgrade(&front);
        tokio::spawn(async move {
            let period = (heartbeat_ttl / 3).max(Duration::from_millis(200));
            let mut said = false;
            // From the start, as after an outage: the workers get a TTL to be heard.
            let mut trouble_at = Instant::now();
            loop {
                let Some(front) = watcher.upgrade() else { return };
                let read_at = Instant::now();
                // The connection's own record: a read can fail long after the connection
                // dropped (its timeout), or not at all within a short outage.
                match front.bus.connected_since() {
                    None => trouble_at = read_at,
                    Some(since) => trouble_at = trouble_at.max(since),
                }
                match front.read_workers().await {
                    Ok(cards) => {
                        said = false;
                        let m = metrics::global();
                        m.set_workers_live(cards.len() as u64);
                        m.set_queue_depths(cards.iter().map(|c| (c.name.clone(), c.queued)));
                        *front.workers.write().unwrap_or_else(|e| e.into_inner()) = Listing {
                            cards,
                            read_at: Some(read_at),
                            absence_proves_from: Some(trouble_at + heartbeat_ttl),
                        };
                    }
                    Err(e) => {
                        trouble_at = Instant::now();
                        // Absences stop proving anything now, not at the next good read.
                        front.workers.write().unwrap_or_else(|e| e.into_inner()).absence_proves_from =
                            Some(trouble_at + heartbeat_ttl);
                        if !said {
                            said = true;
                            tracing::warn!("reading the workers bucket: {e:#}");
                        }
                    }
                }
                drop(front);
                tokio::time::sleep(period).await;
            }
        });
        front
    }

    async fn read_workers(&self) -> Result<Vec<WorkerCard>> {
        let kv = self.bus.workers().await?;
        let mut keys = kv.keys().await?;
        let now = bus::now_ms();
        let mut cards = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key?;
            if let Some(value) = kv.get(&key).await? {
                match serde_json::from_slice::<WorkerCard>(&value) {
                    Ok(card) if card.is_current(now) => cards.push(card),
                    Ok(_) => {}
                    Err(e) => tracing::debug!("worker card {key} unreadable: {e}"),
                }
            }
        }
        cards.sort_by(|a, b| a.name.cmp(&b.name));
        // The bucket's key listing can name a key twice when a heartbeat lands while it is
        // read (the page then listed a worker twice, and "run on every device" ran on it
        // twice): one card per worker.
        cards.dedup_by(|a, b| a.name == b.name);
        Ok(cards)
    }

    /// Worker `name`'s card straight from the bucket, if current (within a second: this
    /// answers a request).
    async fn read_worker(&self, name: &str) -> Option<WorkerCard> {
        let read = async {
            let kv = self.bus.workers().await?;
            anyhow::Ok(kv.get(name).await?)
        };
        let value = tokio::time::timeout(Duration::from_secs(1), read).await.ok()?.ok()??;
        let card = serde_json::from_slice::<WorkerCard>(&value).ok()?;
        (card.name == name && card.is_current(bus::now_ms())).then_some(card)
    }

    /// The live workers, by name.
    pub fn workers(&self) -> Vec<WorkerCard> {
        self.workers.read().unwrap_or_else(|e| e.into_inner()).cards.clone()
    }

    pub fn worker(&self, name: &str) -> Option<WorkerCard> {
        self.worker_listed(name).0
    }

    /// Worker `name`'s card if listed, and when the list's read began.
    /// Worker `name`'s card if listed, and when the list's read began if that read can
    /// prove an absence (see [`Listing::absence_proves_from`]).
    fn worker_listed(&self, name: &str) -> (Option<WorkerCard>, Option<Instant>) {
        let listing = self.workers.read().unwrap_or_else(|e| e.into_inner());
        let read_at = listing.read_at.filter(|t| listing.absence_proves_from.is_some_and(|from| *t >= from));
        (listing.cards.iter().find(|c| c.name == name).cloned(), read_at)
    }

    /// The worker for a job asking for `device`: the named one (which must be live and
    /// have the device), else the live one with the device and the shortest queue.
    /// A named worker missing from the list is looked up once more in the bucket itself:
    /// the list is up to a beat old, and a worker whose beat came late (a loaded host) has
    /// often beaten again since.
    pub async fn choose(&self, named: Option<&str>, device: DeviceChoice) -> Result<WorkerCard, SubmitError> {
        let has = |c: &WorkerCard| match device {
            DeviceChoice::Cuda => c.devices.iter().any(|d| d.kind == DeviceKind::Cuda),
            _ => !c.devices.is_empty(),
        };
        if let Some(name) = named {
            let listed = match self.worker(name) {
                Some(card) => Some(card),
                None => self.read_worker(name).await,
            };
            let card = listed.ok_or_else(|| {
                SubmitError::NoWorker(format!("worker `{}` is not live (no current heartbeat)", name.chars().take(64).collect::<String>()))
            })?;
            if !has(&card) {
                return Err(SubmitError::Spec(SpecError {
                    field: SettingId::Device.into(),
                    message: format!("worker {} has no CUDA device; use cpu or auto", card.name),
                }));
            }
            return Ok(card);
        }
        self.workers()
            .into_iter()
            .filter(has)
            .min_by_key(|c| c.queued)
            .ok_or_else(|| SubmitError::NoWorker(match device {
                DeviceChoice::Cuda => "no live worker has a CUDA device".into(),
                _ => "no worker is live; start one with `gradless worker --nats URL --name NAME`".into(),
            }))
    }

    /// Checks `spec` against the worker's limits and devices (the worker checks the rest
    /// and fails the run with the reason). Fleet workers serve the built-in models.
    pub fn check(&self, card: &WorkerCard, spec: &RunSpec) -> Result<(), SubmitError> {
        spec.check(&protocol::Catalog::built_in(), &card.limits).map_err(SubmitError::Spec)
    }

    /// Queues `task` as job `id` for `worker`: its `queued` event first (with the jobs ahead
    /// of it), then the job itself. Returns the position.
    pub async fn submit(&self, worker: &WorkerCard, id: &str, task: Task) -> Result<u32, SubmitError> {
        if !self.bus.is_connected() {
            return Err(SubmitError::NatsDown(self.bus.url.clone()));
        }
        let publish_error = |e: anyhow::Error| SubmitError::Publish {
            worker: worker.name.clone(),
            reason: format!("{e:#}"),
        };
        let position = self.queue_depth(&worker.name).await.unwrap_or(worker.queued) as u32;
        let queued = Message {
            worker: worker.name.clone(),
            process_started_ms: None,
            emitted_us: bus::now_us(),
            measured: None,
            body: Body::Event { event: Event::Queued { position } },
        };
        self.bus.publish_event(id, &queued, None).await.map_err(publish_error)?;
        let job = Job {
            id: id.to_string(),
            worker: worker.name.clone(),
            submitted_ms: bus::now_ms(),
            task,
        };
        let payload = serde_json::to_vec(&job).map_err(|e| publish_error(e.into()))?;
        let publish = async_nats::jetstream::context::Publish::build()
            .payload(payload.into())
            .message_id(id);
        async {
            self.bus
                .js
                .send_publish(bus::job_subject(&worker.name), publish)
                .await?
                .await?;
            anyhow::Ok(())
        }
        .await
        .map_err(publish_error)?;
        metrics::global().count_submitted(&worker.name);
        Ok(position)
    }

    /// Jobs waiting for `worker` and the one it runs.
    async fn queue_depth(&self, worker: &str) -> Result<u64> {
        let stream = self.bus.js.get_stream_no_info(bus::RUNS_STREAM).await?;
        let info = stream.consumer_info(format!("worker-{worker}")).await?;
        Ok(info.num_pending + info.num_ack_pending as u64)
    }

    /// Relays job `id`'s messages from the first, watching over it (see the module
    /// documentation); the channel closes after the last message.
    pub fn relay(self: &Arc<Self>, id: &str) -> mpsc::Receiver<Message> {
        let (tx, rx) = mpsc::channel(256);
        let front = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            if let Err(e) = front.relay_loop(&id, tx).await {
                tracing::warn!(job = %id, "relaying stopped: {e:#}");
            }
        });
        rx
    }

    async fn relay_loop(&self, id: &str, tx: mpsc::Sender<Message>) -> Result<()> {
        let mut next_seq: Option<u64> = None;
        let mut worker: Option<String> = None;
        let mut first_us: Option<u64> = None;
        let mut started = false;
        // The worker process (its start time) that emits this job's events, and when this
        // front first read one of them.
        let mut ran_on: Option<(u64, Instant)> = None;
        let mut declared = false;
        let mut tick = tokio::time::interval((self.heartbeat_ttl / 3).max(Duration::from_millis(200)));
        'follow: loop {
            let consumer = async {
                let stream = self.bus.js.get_stream_no_info(bus::EVENTS_STREAM).await?;
                let consumer = stream
                    .create_consumer(pull::OrderedConfig {
                        filter_subject: bus::all_events(id),
                        deliver_policy: match next_seq {
                            Some(seq) => DeliverPolicy::ByStartSequence { start_sequence: seq },
                            None => DeliverPolicy::All,
                        },
                        ..Default::default()
                    })
                    .await?;
                anyhow::Ok(consumer.messages().await?)
            };
            let mut messages = match consumer.await {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(job = %id, "following: {e:#}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            loop {
                tokio::select! {
                    next = messages.next() => {
                        let Some(next) = next else { continue 'follow };
                        let Ok(raw) = next else {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            continue 'follow;
                        };
                        if let Ok(info) = raw.info() {
                            next_seq = Some(info.stream_sequence + 1);
                        }
                        let Ok(message) = serde_json::from_slice::<Message>(&raw.payload) else {
                            tracing::warn!(job = %id, "an event this build cannot read, skipped");
                            continue;
                        };
                        worker.get_or_insert_with(|| message.worker.clone());
                        first_us.get_or_insert(message.emitted_us);
                        if matches!(message.body, Body::Event { event: Event::Started { .. } }) {
                            started = true;
                        }
                        if let Some(process) = message.process_started_ms {
                            if ran_on.is_none_or(|(p, _)| p != process) {
                                ran_on = Some((process, Instant::now()));
                            }
                        }
                        self.stamp(id, message.emitted_us);
                        let last = message.is_last();
                        if tx.send(message).await.is_err() || last {
                            return Ok(());
                        }
                    }
                    _ = tick.tick() => {
                        let Some(name) = worker.as_deref() else { continue };
                        if declared { continue }
                        let (card, listed_at) = self.worker_listed(name);
                        let failure = match ran_on {
                            // Its process is gone when a newer one holds the name, or when a
                            // list read that began after this front saw it at work lacks it
                            // (a worker is listed before it takes a job, and unlisted a TTL
                            // after its last heartbeat).
                            Some((process, seen)) => {
                                let mut gone = match &card {
                                    Some(c) => c.started_ms > process,
                                    None => listed_at.is_some_and(|t| t > seen),
                                };
                                // Unlisted is not gone while that process still renews the
                                // job's lease: on a lossy link a heartbeat can come too late
                                // while the run goes on (the fault test's 5% loss ended two
                                // finishing runs as "worker gone").
                                if gone && card.is_none() {
                                    if let Ok(Some(lease)) = self.bus.lease(id).await {
                                        gone = !(lease.process_started_ms == process && lease.is_current(bus::now_ms()));
                                    }
                                }
                                gone.then(|| {
                                    metrics::global().count_failure("worker_gone");
                                    (FailureKind::WorkerGone, format!("worker {name} went away during the run"))
                                })
                            }
                            None => {
                                let waited = bus::now_us().saturating_sub(first_us.unwrap_or(u64::MAX)) / 1000;
                                (waited > self.run_timeout.as_millis() as u64).then(|| {
                                    metrics::global().count_failure("timeout");
                                    let text = if started {
                                        // A worker from before messages named their process.
                                        format!("worker {name} sent no end within the run time limit ({} s)", self.run_timeout.as_secs())
                                    } else {
                                        format!(
                                            "it waited {} s for worker {name}, longer than the run time limit ({} s): expired without running",
                                            waited / 1000, self.run_timeout.as_secs())
                                    };
                                    (FailureKind::Timeout, text)
                                })
                            }
                        };
                        // "Expired without running" only once this front holds the job's
                            // lease key: a worker that took the job first holds it instead,
                            // and the job goes on (its lease, if it lapses, ends it).
                            let failure = match failure {
                                Some((FailureKind::Timeout, text)) if !started => match self.claim_expiry(id, name).await {
                                    Ok(true) => Some((FailureKind::Timeout, text)),
                                    Ok(false) => None,
                                    Err(e) => {
                                        tracing::debug!(job = %id, "claiming the job's expiry: {e:#}");
                                        None
                                    }
                                },
                                other => other,
                            };
                        if let Some((kind, text)) = failure {
                            let message = Message {
                                worker: name.to_string(),
                                process_started_ms: None,
                                emitted_us: bus::now_us(),
                                measured: None,
                                body: Body::Event { event: Event::Failed { failure: RunFailure { kind, message: text } } },
                            };
                            match self.bus.publish_event(id, &message, Some(&format!("{id}-end"))).await {
                                Ok(()) => declared = true,
                                Err(e) => tracing::warn!(job = %id, "could not publish the job's failure: {e:#}"),
                            }
                        }
                    }
                }
            }
        }
    }

    fn stamp(&self, id: &str, emitted_us: u64) {
        let mut s = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        if !s.by_job.contains_key(id) {
            s.order.push_back(id.to_string());
            if s.order.len() > 2000 {
                if let Some(old) = s.order.pop_front() {
                    s.by_job.remove(&old);
                }
            }
        }
        s.by_job.entry(id.to_string()).or_default().push(emitted_us);
    }

    /// When each of job `id`'s messages relayed here was emitted ([`bus::now_us`]), in order.
    pub fn emitted(&self, id: &str) -> Option<Vec<u64>> {
        self.stamps.lock().unwrap_or_else(|e| e.into_inner()).by_job.get(id).cloned()
    }

    /// Hands every job's last message to `save`, once per fleet: a durable consumer all
    /// fronts share, acknowledged after `save` succeeded (a failed save is retried, also
    /// by another front). Runs until the process ends.
    pub async fn record_ends<F, Fut>(self: Arc<Self>, save: F)
    where
        F: Fn(String, Message) -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        loop {
            let consumer = async {
                let stream = self.bus.js.get_stream(bus::EVENTS_STREAM).await?;
                let consumer: async_nats::jetstream::consumer::PullConsumer = stream
                    .get_or_create_consumer(
                        "recorder",
                        pull::Config {
                            durable_name: Some("recorder".into()),
                            filter_subject: bus::ALL_ENDS.into(),
                            ack_policy: AckPolicy::Explicit,
                            ack_wait: Duration::from_secs(30),
                            ..Default::default()
                        },
                    )
                    .await?;
                anyhow::Ok(consumer)
            };
            let consumer = match consumer.await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!("the recorder's consumer: {e:#}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            loop {
                let batch = consumer.fetch().max_messages(16).expires(Duration::from_secs(2)).messages().await;
                let Ok(mut batch) = batch else {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    break;
                };
                while let Some(Ok(raw)) = batch.next().await {
                    let job = raw
                        .subject
                        .as_str()
                        .strip_prefix("gradless.events.")
                        .and_then(|s| s.strip_suffix(".end"))
                        .unwrap_or_default()
                        .to_string();
                    let Ok(message) = serde_json::from_slice::<Message>(&raw.payload) else {
                        let _ = raw.ack_with(AckKind::Term).await;
                        continue;
                    };
                    match save(job.clone(), message).await {
                        Ok(()) => {
                            let _ = raw.ack().await;
                        }
                        Err(e) => {
                            tracing::warn!(job = %job, "recording failed, will retry: {e:#}");
                            let _ = raw.ack_with(AckKind::Nak(Some(Duration::from_secs(2)))).await;
                        }
                    }
                }
            }
        }
    }

    /// Waits for job `id`'s last message (an experiment's report, or why it failed).
    pub async fn last_message(self: &Arc<Self>, id: &str) -> Result<Message> {
        let mut rx = self.relay(id);
        let mut last = None;
        while let Some(m) = rx.recv().await {
            last = Some(m);
        }
        last.filter(Message::is_last).context("the job's events stopped before its end")
    }
}
