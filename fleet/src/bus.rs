//! What fronts and workers say to each other over NATS JetStream, and where:
//!
//! | what | where | kept |
//! |---|---|---|
//! | a job (a run or a pitfall experiment) for one worker | stream `GRADLESS_RUNS`, subject `gradless.runs.<worker>` | work queue: until that worker acknowledges it |
//! | a job's events | stream `GRADLESS_EVENTS`, subjects `gradless.events.<job>.ev` and, for the last one, `gradless.events.<job>.end` | a day (late viewers replay them) |
//! | the live workers | key-value bucket `gradless-workers`, key `<worker>` | one heartbeat TTL after the last put |
//! | the job each worker holds now (its lease) | key-value bucket `gradless-leases`, key `<job>` | renewed every third of the worker's heartbeat TTL; created by the worker as it takes the job (or by a front expiring the job first: whoever creates the key decides), renewed every third of the worker's heartbeat TTL, deleted at the job's end; [`LEASES_KEPT`] after the last put |
//!
//! Every message body is JSON. Job and final-event publishes carry a `Nats-Msg-Id`, so a
//! retried publish (or two fronts declaring the same worker gone) is stored once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use async_nats::jetstream::{self, kv, stream};

use protocol::{
    DeviceInfo, Event, Limits, ModelInfo, PitfallOptions, PitfallReport, RunSpec,
};
use serde::{Deserialize, Serialize};

pub const RUNS_STREAM: &str = "GRADLESS_RUNS";
pub const EVENTS_STREAM: &str = "GRADLESS_EVENTS";
pub const WORKERS_BUCKET: &str = "gradless-workers";
pub const LEASES_BUCKET: &str = "gradless-leases";
/// How long a lease that was not renewed stays readable (as lapsed) before JetStream drops
/// it: long past any lease TTL, so a front sweeping late still tells "held, then lost"
/// from "never taken".
pub const LEASES_KEPT: Duration = Duration::from_secs(3600);
/// How long a job's events stay replayable.
pub const EVENTS_KEPT: Duration = Duration::from_secs(24 * 3600);

pub fn job_subject(worker: &str) -> String {
    format!("gradless.runs.{worker}")
}

pub fn event_subject(job: &str, last: bool) -> String {
    format!("gradless.events.{job}.{}", if last { "end" } else { "ev" })
}

pub fn all_events(job: &str) -> String {
    format!("gradless.events.{job}.>")
}

/// The subject every job's last event goes to (the fronts' recorder reads it).
pub const ALL_ENDS: &str = "gradless.events.*.end";

/// A worker's name: what it is called in subjects, keys and the page. Letters, digits,
/// `-` and `_`, at most 64 (a subject token cannot hold `.`, `*`, `>` or spaces).
pub fn check_worker_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "worker name `{}` must be 1 to 64 letters, digits, `-` or `_`",
            name.chars().take(80).collect::<String>()
        ))
    }
}

/// Milliseconds since the Unix epoch (all roles stamp with it; on one host, or hosts with
/// synchronised clocks, stamps compare).
pub fn now_ms() -> u64 {
    now_us() / 1000
}

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// What a worker is asked to do.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Task {
    Run { spec: RunSpec },
    Pitfall { pitfall: String, options: PitfallOptions },
}

/// A job in the runs stream.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// The run id (its permalink) or the experiment's record id.
    pub id: String,
    pub worker: String,
    /// When the front queued it ([`now_ms`]); a job older than the run timeout when its
    /// worker reaches it fails as expired instead of running.
    pub submitted_ms: u64,
    pub task: Task,
}

/// One message of a job's event stream.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Message {
    /// The worker the job is for (so any front can watch over it).
    pub worker: String,
    /// The worker process that emitted it ([`WorkerCard::started_ms`]); none from a front.
    /// A front watching the job tells from it whether that process is still listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_started_ms: Option<u64>,
    /// When the worker (or front) emitted it, [`now_us`]: the load test measures delivery
    /// delay from it.
    pub emitted_us: u64,
    /// On a run's `failed` from its worker: what it measured before it failed (the
    /// recorder keeps it with the failed record; viewers have seen it as events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Box<protocol::PartialRun>>,
    #[serde(flatten)]
    pub body: Body,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Body {
    /// A run's event, exactly as the single-process server streams it (experiments stream
    /// `queued` and, on failure, `failed`).
    Event { event: Event },
    /// An experiment's report (its last message).
    Pitfall { report: Box<PitfallReport> },
}

impl Message {
    pub fn is_last(&self) -> bool {
        match &self.body {
            Body::Event { event } => event.is_terminal(),
            Body::Pitfall { .. } => true,
        }
    }
}

/// What a worker announces in the bucket, refreshed every heartbeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerCard {
    pub name: String,
    pub host: String,
    /// The devices this worker measures on (with `--device cpu`, the CPU only).
    pub devices: Vec<DeviceInfo>,
    pub models: Vec<ModelInfo>,
    pub limits: Limits,
    pub version: String,
    pub libtorch_version: String,
    /// The GPU driver and CUDA runtime, when the worker has a GPU.
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// When this worker process started ([`now_ms`]): a different value under the same name
    /// is a restarted worker, which no longer runs what the old one had started.
    pub started_ms: u64,
    /// The last heartbeat ([`now_ms`]).
    pub heartbeat_ms: u64,
    /// How long after `heartbeat_ms` the entry is stale.
    pub heartbeat_ttl_ms: u64,
    /// Jobs waiting for it (in the stream, not yet taken).
    pub queued: u64,
    /// The job it is running, if any.
    pub running: Option<String>,
    /// Memory the device holds after its last task, per device kind.
    pub memory_in_use: Vec<(String, u64)>,
}

impl WorkerCard {
    /// "H200 · gpu-host-3": the device the page names, and where it is.
    pub fn label(&self) -> String {
        let device = self
            .devices
            .iter()
            .find(|d| d.kind == protocol::DeviceKind::Cuda)
            .or(self.devices.first())
            .map(|d| d.name.clone())
            .unwrap_or_else(|| "no device".into());
        format!("{device} · {}", self.name)
    }

    pub fn is_current(&self, now_ms: u64) -> bool {
        now_ms <= self.heartbeat_ms + self.heartbeat_ttl_ms
    }
}

/// A worker's hold on the job it runs (bucket [`LEASES_BUCKET`], key the job id): put
/// before the job starts, renewed every third of `ttl_ms`, deleted once the job's last
/// event is stored. A lease past its TTL whose job has no end means the worker holding it
/// is gone (killed, cut off): any front then ends the job as "worker gone", and the
/// recorder marks its row interrupted, whether or not anyone follows the job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub worker: String,
    /// The worker process holding it ([`WorkerCard::started_ms`]).
    pub process_started_ms: u64,
    /// The last renewal ([`now_ms`]).
    pub renewed_ms: u64,
    pub ttl_ms: u64,
    /// Set (to the front's name) when this is no worker's lease but a front's claim that
    /// the job expired before any worker took it. Job and front race for the key: the
    /// one that creates it decides the job's fate, so a job is never both run and
    /// declared "expired without running".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_by: Option<String>,
}

impl Lease {
    pub fn is_current(&self, now_ms: u64) -> bool {
        now_ms <= self.renewed_ms + self.ttl_ms
    }

    /// The same holder: one worker process, or one front's expiry claim.
    fn same_holder(&self, other: &Lease) -> bool {
        self.worker == other.worker
            && self.process_started_ms == other.process_started_ms
            && self.expired_by == other.expired_by
    }
}

/// How a process proves itself to NATS and checks NATS in turn, beyond the URL (which may
/// carry a user and password).
#[derive(Clone, Debug, Default)]
pub struct NatsAuth {
    /// A NATS credentials file (JWT + nkey).
    pub creds: Option<std::path::PathBuf>,
    /// PEM certificates of the CA that signed the server's (an internal CA): TLS is then
    /// required, and the server's certificate must chain to them.
    pub ca: Option<std::path::PathBuf>,
}

/// The user and password (`nats://user:pass@host`), or the token (`nats://token@host`), of a
/// NATS URL, percent-decoded.
pub fn url_credentials(url: &str) -> Result<Option<(String, Option<String>)>> {
    let addr: async_nats::ServerAddr = url.parse().with_context(|| format!("not a NATS URL: {}", redact(url, true)))?;
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
    Ok(addr.username().map(|user| (decode(user), addr.password().map(decode))))
}

/// `url` without its password (`scheme://user:***@host`), for messages and logs. A user
/// without a password is a secret too where `bare_user_is_secret` (a NATS token,
/// `nats://TOKEN@host`), a plain user name otherwise (PostgreSQL).
pub fn redact(url: &str, bare_user_is_secret: bool) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let shown = match url[scheme + 3..at].split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None if bare_user_is_secret => "***".to_string(),
                None => return url.to_string(),
            };
            format!("{}{shown}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// A NATS connection with the streams and bucket in place.
#[derive(Clone)]
pub struct Bus {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    /// The server's URL without its password or token ([`redact`]): what messages name.
    pub url: String,
    /// When the connection was last made (first or again); `None` while it is down.
    connected_since: Arc<Mutex<Option<Instant>>>,
}

impl Bus {
    /// Connects to `url` (credentials in the URL, or in `auth`'s credentials file; TLS
    /// when the URL says `tls://` or the server requires it, the server's certificate
    /// checked against the system's roots or `auth`'s CA) and goes on reconnecting by
    /// itself: the first connection too is retried in the background, so a process starts
    /// while NATS is still down and catches up when it is back.
    pub async fn connect(url: &str, name: &str, auth: &NatsAuth) -> Result<Bus> {
        let mut options = async_nats::ConnectOptions::new()
            .name(name)
            .retry_on_initial_connect()
            // Back within a second or two of NATS returning, not after exponential waits.
            .reconnect_delay_callback(|attempt| {
                Duration::from_millis((250 * attempt as u64).min(2000))
            })
            .connection_timeout(Duration::from_secs(3));
        let connected_since = Arc::new(Mutex::new(None));
        let since = connected_since.clone();
        options = options.event_callback(move |event| {
            let since = since.clone();
            async move {
                let mut since = since.lock().unwrap_or_else(|e| e.into_inner());
                match event {
                    async_nats::Event::Connected => *since = Some(Instant::now()),
                    async_nats::Event::Disconnected => *since = None,
                    _ => {}
                }
            }
        });
        // async-nats does not send a URL's user and password (or token) itself: taken from
        // the URL here, so `nats://user:pass@host` authenticates as docs/operating.md says.
        if let Some((user, pass)) = url_credentials(url)? {
            options = match pass {
                Some(pass) => options.user_and_password(user, pass),
                None => options.token(user),
            };
        }
        if let Some(path) = &auth.creds {
            options = options
                .credentials_file(path)
                .await
                .with_context(|| format!("reading the NATS credentials {}", path.display()))?;
        }
        if let Some(path) = &auth.ca {
            // Read here so that a wrong path is this message at start, not a TLS failure
            // retried forever in the background.
            std::fs::metadata(path).with_context(|| format!("reading the NATS CA certificates {}", path.display()))?;
            options = options.add_root_certificates(path.clone()).require_tls(true);
        }
        let client = options
            .connect(url)
            .await
            .with_context(|| format!("connecting to NATS at {}", redact(url, true)))?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(Duration::from_secs(3));
        Ok(Bus {
            client,
            js,
            url: redact(url, true),
            connected_since,
        })
    }

    /// When this process's connection to NATS last came up, `None` while it is down. What
    /// a front concludes from absences (a lapsed lease, a worker missing from the list)
    /// waits a TTL past it: while the connection was down nothing could be renewed or read.
    pub fn connected_since(&self) -> Option<Instant> {
        if !self.is_connected() {
            return None;
        }
        // Connected, but the event not handled yet (events come through a channel): now,
        // the cautious answer.
        let since = *self.connected_since.lock().unwrap_or_else(|e| e.into_inner());
        Some(since.unwrap_or_else(Instant::now))
    }

    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Creates the streams and the bucket if missing (every role calls it at start; the
    /// first one creates, the others find them).
    pub async fn ensure(&self, heartbeat_ttl: Duration) -> Result<()> {
        self.js
            .get_or_create_stream(stream::Config {
                name: RUNS_STREAM.into(),
                subjects: vec!["gradless.runs.*".into()],
                retention: stream::RetentionPolicy::WorkQueue,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .context("creating the runs stream")?;
        self.js
            .get_or_create_stream(stream::Config {
                name: EVENTS_STREAM.into(),
                subjects: vec!["gradless.events.>".into()],
                max_age: EVENTS_KEPT,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .context("creating the events stream")?;
        for (bucket, kept) in [(WORKERS_BUCKET, heartbeat_ttl), (LEASES_BUCKET, LEASES_KEPT)] {
            if self.js.get_key_value(bucket).await.is_ok() {
                continue;
            }
            // The bucket's stream, as a key-value bucket is laid out (one message per key,
            // expiring after `kept`), created directly: the client's `create_key_value`
            // first reads the account's limits in a form nats-server 2.9 does not answer.
            self.js
                .get_or_create_stream(stream::Config {
                    name: format!("KV_{bucket}"),
                    subjects: vec![format!("$KV.{bucket}.>")],
                    max_messages_per_subject: 1,
                    max_age: kept,
                    duplicate_window: kept.min(Duration::from_secs(120)),
                    discard: stream::DiscardPolicy::New,
                    allow_rollup: true,
                    deny_delete: true,
                    allow_direct: true,
                    ..Default::default()
                })
                .await
                .with_context(|| format!("creating the bucket {bucket}"))?;
        }
        Ok(())
    }

    pub async fn leases(&self) -> Result<kv::Store> {
        self.js
            .get_key_value(LEASES_BUCKET)
            .await
            .context("opening the leases bucket")
    }

    /// Claims job `job`'s lease key with `lease`: `None` when the key now holds it (it was
    /// free, or held by this same holder already: a create whose answer was lost to the
    /// network), else the lease or claim that holds the key. Atomic in JetStream (a create
    /// expects no revision), so of a worker starting the job and a front expiring it,
    /// exactly one wins.
    pub async fn claim(&self, job: &str, lease: &Lease) -> Result<Option<Lease>> {
        let kv = self.leases().await?;
        match kv.create(job, serde_json::to_vec(lease)?.into()).await {
            Ok(_) => Ok(None),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let held = kv.get(job).await?.context("the lease vanished while it was claimed")?;
                let held: Lease = serde_json::from_slice(&held).context("an unreadable lease")?;
                Ok((!held.same_holder(lease)).then_some(held))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Job `job`'s lease, if one is in the bucket (current or lapsed).
    pub async fn lease(&self, job: &str) -> Result<Option<Lease>> {
        let value = self.leases().await?.get(job).await?;
        Ok(value.and_then(|v| serde_json::from_slice(&v).ok()))
    }

    /// The last of job `job`'s events before its end, if any.
    pub async fn last_event(&self, job: &str) -> Result<Option<Message>> {
        let stream = self.js.get_stream_no_info(EVENTS_STREAM).await?;
        match stream.get_last_raw_message_by_subject(&event_subject(job, false)).await {
            Ok(raw) => Ok(serde_json::from_slice(&raw.payload).ok()),
            Err(e) if e.kind() == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until [`Bus::ensure`] succeeds, saying why every few seconds.
    pub async fn ensure_patiently(&self, heartbeat_ttl: Duration) {
        let mut said = std::time::Instant::now() - Duration::from_secs(10);
        loop {
            match self.ensure(heartbeat_ttl).await {
                Ok(()) => return,
                Err(e) => {
                    if said.elapsed() > Duration::from_secs(5) {
                        tracing::warn!("NATS at {} not ready yet: {e:#}", self.url);
                        said = std::time::Instant::now();
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    pub async fn workers(&self) -> Result<kv::Store> {
        self.js
            .get_key_value(WORKERS_BUCKET)
            .await
            .context("opening the workers bucket")
    }

    /// Publishes one event message and waits for JetStream to store it. `dedup`: a
    /// message id, for messages that more than one process may send.
    pub async fn publish_event(&self, job: &str, message: &Message, dedup: Option<&str>) -> Result<()> {
        let payload = serde_json::to_vec(message)?;
        let mut publish = jetstream::context::Publish::build().payload(payload.into());
        if let Some(id) = dedup {
            publish = publish.message_id(id);
        }
        self.js
            .send_publish(event_subject(job, message.is_last()), publish)
            .await
            .context("publishing an event")?
            .await
            .context("storing an event")?;
        Ok(())
    }

    /// Whether the job's last event is already in the stream.
    pub async fn has_ended(&self, job: &str) -> Result<bool> {
        let stream = self.js.get_stream_no_info(EVENTS_STREAM).await?;
        match stream
            .get_last_raw_message_by_subject(&event_subject(job, true))
            .await
        {
            Ok(_) => Ok(true),
            Err(e)
                if e.kind()
                    == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether any event of the job is in the stream (it was submitted through some front).
    pub async fn job_exists(&self, job: &str) -> Result<bool> {
        let stream = self.js.get_stream_no_info(EVENTS_STREAM).await?;
        for last in [false, true] {
            match stream
                .get_last_raw_message_by_subject(&event_subject(job, last))
                .await
            {
                Ok(_) => return Ok(true),
                Err(e)
                    if e.kind()
                        == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_names_fit_in_a_subject_token() {
        assert!(check_worker_name("gpu-host-3").is_ok());
        assert!(check_worker_name("a_1").is_ok());
        for bad in ["", "a.b", "a b", "a*", "a>", &"x".repeat(65)] {
            assert!(check_worker_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn messages_round_trip_and_know_their_last() {
        let m = Message {
            worker: "w".into(),
            process_started_ms: None,
            emitted_us: 5,
            measured: None,
            body: Body::Event { event: Event::Queued { position: 2 } },
        };
        let text = serde_json::to_string(&m).unwrap();
        let back: Message = serde_json::from_str(&text).unwrap();
        assert!(!back.is_last());
        assert!(matches!(back.body, Body::Event { event: Event::Queued { position: 2 } }));
        assert_eq!(event_subject("abc", false), "gradless.events.abc.ev");
        assert_eq!(event_subject("abc", true), "gradless.events.abc.end");
    }

    #[test]
    fn a_urls_credentials_are_read_decoded_and_never_shown() {
        let creds = |u: &str| url_credentials(u).unwrap();
        assert_eq!(creds("nats://127.0.0.1:4222"), None);
        assert_eq!(creds("tls://front:s%40cret@nats.internal:4222"), Some(("front".into(), Some("s@cret".into()))));
        assert_eq!(creds("nats://T0KEN@nats.internal"), Some(("T0KEN".into(), None)));
        assert!(url_credentials("not a url").is_err());
        assert_eq!(redact("tls://front:s%40cret@nats.internal:4222", true), "tls://front:***@nats.internal:4222");
        assert_eq!(redact("nats://T0KEN@nats.internal", true), "nats://***@nats.internal");
        assert_eq!(redact("postgres://g@db/gradless", false), "postgres://g@db/gradless");
        assert_eq!(redact("nats://127.0.0.1:4222", true), "nats://127.0.0.1:4222");
    }
}
