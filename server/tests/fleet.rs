//! The fleet, as processes: 2 fronts (`gradless serve --nats --database`) and 3 CPU workers
//! (`gradless worker`), on the NATS and PostgreSQL that `scripts/test.sh` starts on loopback
//! (scripts/services.sh). Ignored by a plain `cargo test`: it needs those services, named by
//! `GRADLESS_TEST_NATS`, `GRADLESS_TEST_DATABASE`, `GRADLESS_TEST_SERVICES` and
//! `GRADLESS_TEST_NATS_PORT`; `scripts/test.sh` runs it with `--ignored`.
//!
//! In order: runs submitted to either front complete on the worker they name; a viewer on
//! front A follows a run submitted on front B; each record is written exactly once; a worker
//! killed mid-run fails its run with "worker NAME went away during the run" within its
//! heartbeat, and records nothing, while the runs queued behind it stay queued and start when
//! it returns, or expire after the submitting front's `--run-timeout-s` (kept as failed); a front killed mid-run loses no record;
//! a worker killed while no front follows its run has that run marked interrupted within its
//! lease by the other front's sweep, and never runs it again once back; NATS stopped gives
//! 503 naming it, and runs go again once it is back; PostgreSQL stopped likewise (a front
//! started meanwhile serves pages and gives the same 503; the run after its return
//! recorded once); then ~200 viewers across both fronts
//! follow 3 runs and the emit-to-viewer delay is reported (`gradless-fleet-load.json`).
//!
//! A second test runs a front and a worker on a nats-server started with the operator's
//! guide's hardened configuration (`deploy/nats-gradless.conf`: TLS, a user per role). The two share
//! the machine's cores and ports: `scripts/test.sh` runs them one after the other
//! (`--test-threads=1`).

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use http_body_util::BodyExt;
use hyper::Request;
use hyper_util::rt::TokioIo;
use protocol::stats::percentile;
use protocol::{Event, RunCreated};

const HEARTBEAT_S: f64 = 2.0;
const WORKERS: [&str; 3] = ["w1", "w2", "w3"];

struct Env {
    nats: String,
    database: String,
    services: String,
    nats_port: String,
    pg_port: String,
    base_port: u16,
}

fn env() -> Env {
    let var = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} is not set: run the fleet test through scripts/test.sh, which starts NATS and PostgreSQL")
        })
    };
    Env {
        nats: var("GRADLESS_TEST_NATS"),
        database: var("GRADLESS_TEST_DATABASE"),
        services: var("GRADLESS_TEST_SERVICES"),
        nats_port: var("GRADLESS_TEST_NATS_PORT"),
        pg_port: var("GRADLESS_TEST_PG_PORT"),
        base_port: std::env::var("GRADLESS_FLEET_PORT")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(3305),
    }
}

fn log_dir() -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()),
    )
    .join("fleet-logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Fleet {
    env: Env,
    fronts: Vec<(SocketAddr, Option<Child>)>,
    workers: HashMap<&'static str, (Child, SocketAddr)>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for (_, child) in self.fronts.iter_mut() {
            if let Some(c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for (child, _) in self.workers.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(args: &[String], log: &str) -> Child {
    let file = std::fs::File::create(log_dir().join(log)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("starting gradless")
}

impl Fleet {
    fn start_worker(&mut self, name: &'static str) {
        let index = WORKERS.iter().position(|w| *w == name).unwrap() as u16;
        let metrics: SocketAddr = format!("127.0.0.1:{}", self.env.base_port + 2 + index)
            .parse()
            .unwrap();
        let args = [
            "worker", "--nats", &self.env.nats, "--name", name, "--device", "cpu",
            "--heartbeat-s", &HEARTBEAT_S.to_string(), "--default-threads", "1",
            "--metrics-addr", &metrics.to_string(), "--run-timeout-s", "120",
        ]
        .map(String::from);
        let child = spawn(&args, &format!("{name}.log"));
        self.workers.insert(name, (child, metrics));
    }

    fn start_front(&mut self, i: usize) {
        self.start_front_with(i, 120);
    }

    /// Front `i` with its own run time limit (`--run-timeout-s`): how long a run it submitted
    /// may wait for its worker before the front declares it expired.
    fn start_front_with(&mut self, i: usize, run_timeout_s: u32) {
        let addr = self.fronts[i].0;
        let args = [
            "serve", "--addr", &addr.to_string(), "--nats", &self.env.nats,
            "--database", &self.env.database, "--heartbeat-s", &HEARTBEAT_S.to_string(),
            "--rate-limit", "0", "--run-timeout-s", &run_timeout_s.to_string(), "--site-root", "target/site",
        ]
        .map(String::from);
        self.fronts[i].1 = Some(spawn(&args, &format!("front{i}.log")));
    }

    fn kill_front(&mut self, i: usize) {
        if let Some(mut c) = self.fronts[i].1.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    fn front(&self, i: usize) -> SocketAddr {
        self.fronts[i].0
    }
}

async fn request(addr: SocketAddr, req: Request<Body>) -> Option<(u16, HashMap<String, String>, hyper::body::Incoming)> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.set_nodelay(true).ok();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    let res = sender.send_request(req).await.ok()?;
    let headers = res
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    Some((res.status().as_u16(), headers, res.into_body()))
}

async fn get_text(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let req = Request::get(path).header("host", addr.to_string()).body(Body::empty()).unwrap();
    let (status, _, body) = request(addr, req).await?;
    let bytes = body.collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&bytes).into_owned()))
}

async fn post(addr: SocketAddr, path: &str, json: &str) -> (u16, HashMap<String, String>, String) {
    let req = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Body::from(json.to_string()))
        .unwrap();
    let (status, headers, body) = request(addr, req).await.expect("front reachable");
    let bytes = body.collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&bytes).into_owned())
}

async fn submit(addr: SocketAddr, worker: &str, spec: &str) -> RunCreated {
    let (status, _, body) = post(addr, &format!("/api/runs?worker={worker}"), spec).await;
    assert_eq!(status, 202, "POST /api/runs?worker={worker} on {addr}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Submits QUICK to `worker` on `addr` until it is accepted (a service coming back).
async fn submit_once_accepted(what: &str, addr: SocketAddr, worker: &str) -> RunCreated {
    let mut created = None;
    wait_for(what, Duration::from_secs(60), async || {
        let (status, _, body) = post(addr, &format!("/api/runs?worker={worker}"), QUICK).await;
        if status == 202 {
            created = Some(serde_json::from_str::<RunCreated>(&body).unwrap());
        }
        status == 202
    })
    .await;
    created.unwrap()
}

fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

/// Follows a run's events to the end: each event with when it was read (Unix µs), and
/// when the viewer connected.
async fn follow(addr: SocketAddr, id: &str, mut on_event: impl FnMut(&Event)) -> (u64, Vec<(u64, Event)>) {
    let connected = unix_us();
    let req = Request::get(format!("/api/runs/{id}/events"))
        .header("host", addr.to_string())
        .body(Body::empty())
        .unwrap();
    let (status, _, mut body) = request(addr, req).await.expect("front reachable");
    assert_eq!(status, 200, "events of {id} on {addr}");
    let (mut reader, mut out) = (common::SseReader::default(), Vec::new());
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        let Ok(data) = frame.into_data() else { continue };
        let now = unix_us();
        for event in reader.push(&data) {
            on_event(&event);
            out.push((now, event));
        }
        if out.last().is_some_and(|(_, e)| e.is_terminal()) {
            break;
        }
    }
    (connected, out)
}

async fn live_workers(addr: SocketAddr) -> Vec<String> {
    match get_text(addr, "/api/workers").await {
        Some((200, body)) => serde_json::from_str::<Vec<serde_json::Value>>(&body)
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// A counter of a worker's metrics.
async fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (_, text) = get_text(addr, "/metrics").await.expect("worker metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// Completed rows of `id` in the fronts' database (the blocking client, off the test's
/// async threads): a run's row exists from its start as `running`; "recorded" means
/// completed with its report.
async fn rows_with_id(database: &str, id: &str) -> i64 {
    let (database, id) = (database.to_string(), id.to_string());
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&database, postgres::NoTls).unwrap();
        client
            .query_one("SELECT COUNT(*) FROM records WHERE id = $1 AND status = 'completed'", &[&id])
            .unwrap()
            .get::<_, i64>(0)
    })
    .await
    .unwrap()
}

/// The status of record `id`'s row, if it has one.
async fn status_of(database: &str, id: &str) -> Option<String> {
    let (database, id) = (database.to_string(), id.to_string());
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&database, postgres::NoTls).unwrap();
        client
            .query_opt("SELECT status FROM records WHERE id = $1", &[&id])
            .unwrap()
            .map(|r| r.get::<_, String>(0))
    })
    .await
    .unwrap()
}

fn services(env: &Env, command: &str) {
    let mut args = vec![command.to_string(), env.services.clone()];
    if command == "nats" {
        args.push(env.nats_port.clone());
    }
    if command == "pg" {
        args.push(env.pg_port.clone());
    }
    let status = Command::new("scripts/services.sh")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(&args)
        .status()
        .unwrap();
    assert!(status.success(), "scripts/services.sh {args:?}");
}

/// Front B's run time limit while w3 is away (step 3): long enough for the runs ahead of
/// the expiring one to be submitted, short enough to wait for in a test.
const SHORT_TIMEOUT_S: u32 = 6;

const QUICK: &str = r#"{"model": "tiny_mlp", "batch": 4, "iters": 5, "warmup": 1, "device": "cpu"}"#;
/// Long enough to be killed mid-way: a few seconds on one CPU thread.
const LONG: &str = r#"{"model": "resnet18", "batch": 2, "iters": 200, "warmup": 1, "device": "cpu"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs NATS and PostgreSQL: scripts/test.sh runs it"]
async fn two_fronts_three_workers_and_their_faults() {
    let env = env();
    let base = env.base_port;
    let mut fleet = Fleet {
        fronts: vec![
            (format!("127.0.0.1:{base}").parse().unwrap(), None),
            (format!("127.0.0.1:{}", base + 1).parse().unwrap(), None),
        ],
        workers: HashMap::new(),
        env,
    };
    for w in WORKERS {
        fleet.start_worker(w);
    }
    fleet.start_front(0);
    fleet.start_front(1);
    let (a, b) = (fleet.front(0), fleet.front(1));
    for front in [a, b] {
        wait_for("3 live workers on each front", Duration::from_secs(120), async || {
            live_workers(front).await.len() == 3
        })
        .await;
    }

    // 1. Runs submitted to either front complete on the worker they name.
    for (i, w) in WORKERS.iter().enumerate() {
        let front = if i % 2 == 0 { a } else { b };
        let metrics = fleet.workers[w].1;
        let before = metric(metrics, "gradless_runs_finished_total").await;
        let created = submit(front, w, QUICK).await;
        let (_, events) = follow(front, &created.id, |_| {}).await;
        assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "{w}: {events:?}");
        assert_eq!(metric(metrics, "gradless_runs_finished_total").await, before + 1.0, "ran on {w}");
        // Recorded, readable on the other front, exactly once.
        let other = if front == a { b } else { a };
        let (status, _) = get_text(other, &format!("/api/records/{}", created.id)).await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(rows_with_id(&fleet.env.database, &created.id).await, 1);
    }

    // 2. A viewer on front A follows a run submitted on front B, from its first event.
    let created = submit(b, "w2", QUICK).await;
    let (_, events) = follow(a, &created.id, |_| {}).await;
    assert!(matches!(events.first(), Some((_, Event::Queued { .. }))), "{events:?}");
    assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "{events:?}");
    assert_eq!(rows_with_id(&fleet.env.database, &created.id).await, 1);

    // 3. A worker killed mid-run: its run fails within the heartbeat, nothing is recorded;
    // the runs queued behind it stay queued. Front B is restarted with a short run time
    // limit first, so that one of them (submitted there) expires while w3 is away.
    fleet.kill_front(1);
    fleet.start_front_with(1, SHORT_TIMEOUT_S);
    wait_for("front B back (short run time limit)", Duration::from_secs(60), async || {
        live_workers(b).await.len() == 3
    })
    .await;
    let created = submit(a, "w3", LONG).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut tx = Some(tx);
    let viewer = tokio::spawn({
        let id = created.id.clone();
        async move {
            follow(a, &id, move |e| {
                if matches!(e, Event::Sample { .. }) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
            })
            .await
        }
    });
    tokio::time::timeout(Duration::from_secs(60), rx).await.expect("the long run started").unwrap();
    // Queued behind it: one through front A (limit 120 s), one through front B (limit 6 s).
    let waits = submit(a, "w3", QUICK).await;
    let expires = submit(b, "w3", QUICK).await;
    let expires_submitted = Instant::now();
    let (mut w3, _) = fleet.workers.remove("w3").unwrap();
    w3.kill().unwrap();
    let killed = Instant::now();
    w3.wait().unwrap();
    let (_, events) = viewer.await.unwrap();
    let noticed = killed.elapsed();
    match events.last() {
        Some((_, Event::Failed { failure })) => {
            assert_eq!(failure.message, "worker w3 went away during the run");
            assert_eq!(failure.kind, protocol::FailureKind::WorkerGone);
        }
        other => panic!("expected the worker-gone failure, got {other:?}"),
    }
    // Stated bound: the heartbeat TTL, plus one refresh of the list (a third of it), plus
    // slack for a loaded CI machine.
    assert!(noticed < Duration::from_secs_f64(HEARTBEAT_S * 3.0 + 2.0), "noticed after {noticed:?}");
    println!("worker killed mid-run: failure seen by the viewer after {:.2} s (heartbeat {HEARTBEAT_S} s)", noticed.as_secs_f64());
    // The lease sweep may end the run before the list drops w3 (its lease and its card
    // lapse after the same TTL, the list is re-read a third of it later): it leaves soon.
    wait_for("w3 to leave the list", Duration::from_secs_f64(HEARTBEAT_S * 2.0 + 2.0), async || {
        live_workers(a).await.iter().all(|w| w != "w3")
    })
    .await;
    assert_eq!(rows_with_id(&fleet.env.database, &created.id).await, 0, "a failed run is not recorded");
    // Its row, written when it was accepted, is marked interrupted by the fleet's recorder
    // (the worker's loss is what interrupts a fleet run), and its permalink says so.
    let t = Instant::now();
    while status_of(&fleet.env.database, &created.id).await.as_deref() != Some("interrupted") {
        assert!(t.elapsed() < Duration::from_secs(20), "the worker-gone run was not marked interrupted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = get_text(a, &format!("/api/records/{}", created.id)).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""status":"interrupted""#), "{body}");
    assert!(body.contains("interrupted by the loss of its fleet worker (worker w3 went away during the run) at"), "{body}");
    // With w3 away, the run submitted on front B expires after that front's limit, with a
    // failure saying so; it never ran.
    let (_, events) = tokio::time::timeout(Duration::from_secs(60), follow(b, &expires.id, |_| {}))
        .await
        .expect("the queued run on front B expired");
    let expired_after = expires_submitted.elapsed();
    match events.last() {
        Some((_, Event::Failed { failure })) => {
            assert_eq!(failure.kind, protocol::FailureKind::Timeout, "{failure:?}");
            assert!(
                failure.message.contains("for worker w3") && failure.message.contains("expired without running"),
                "{}",
                failure.message
            );
        }
        other => panic!("expected the expiry, got {other:?}"),
    }
    assert!(!events.iter().any(|(_, e)| matches!(e, Event::Started { .. })), "it never started: {events:?}");
    assert!(expired_after >= Duration::from_secs(SHORT_TIMEOUT_S as u64), "expired after {expired_after:?}");
    println!("a run queued for a dead worker expired after {:.1} s (limit {SHORT_TIMEOUT_S} s)", expired_after.as_secs_f64());
    // The one submitted on front A is still queued: no end, no start, while w3 is away.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let watching = {
        let seen = seen.clone();
        follow(a, &waits.id, move |e| seen.lock().unwrap().push(e.clone()))
    };
    assert!(
        tokio::time::timeout(Duration::from_secs_f64(HEARTBEAT_S * 2.0), watching).await.is_err(),
        "the run queued on front A ended while its worker was away: {:?}",
        seen.lock().unwrap()
    );
    let seen = seen.lock().unwrap().clone();
    assert!(matches!(seen.first(), Some(Event::Queued { .. })), "{seen:?}");
    assert!(!seen.iter().any(|e| matches!(e, Event::Started { .. }) || e.is_terminal()), "{seen:?}");
    // Back again: its unacknowledged job comes back to it and is skipped (already ended),
    // the waiting run starts and finishes, and the expired one is skipped, not run.
    fleet.start_worker("w3");
    wait_for("w3 back", Duration::from_secs(60), async || live_workers(a).await.len() == 3).await;
    let (_, events) = tokio::time::timeout(Duration::from_secs(90), follow(a, &waits.id, |_| {}))
        .await
        .expect("the waiting run finished once w3 returned");
    assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "{events:?}");
    let database = fleet.env.database.clone();
    wait_for("the waiting run recorded once", Duration::from_secs(20), async || {
        rows_with_id(&database, &waits.id).await == 1
    })
    .await;
    assert_eq!(rows_with_id(&fleet.env.database, &expires.id).await, 0, "an expired run has no report");
    assert_eq!(status_of(&fleet.env.database, &expires.id).await.as_deref(), Some("failed"), "an expired run is kept as failed");
    let w3_metrics = fleet.workers["w3"].1;
    assert_eq!(
        metric(w3_metrics, "gradless_runs_finished_total").await,
        1.0,
        "the returned w3 ran the waiting run only (not the killed one, not the expired one)"
    );
    let created = submit(a, "w3", QUICK).await;
    let (_, events) = follow(a, &created.id, |_| {}).await;
    assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "{events:?}");

    // 4. A front killed mid-run loses no record.
    let long = r#"{"model": "resnet18", "batch": 2, "iters": 40, "warmup": 1, "device": "cpu"}"#;
    let created = submit(b, "w1", long).await;
    fleet.kill_front(1);
    fleet.start_front(1);
    // Its row exists from the start (`running`); what must not be lost is its completion.
    let database = fleet.env.database.clone();
    wait_for("the record of the run whose front was killed", Duration::from_secs(90), async || {
        rows_with_id(&database, &created.id).await == 1
    })
    .await;
    wait_for("front B back", Duration::from_secs(60), async || live_workers(b).await.len() == 3).await;
    assert_eq!(rows_with_id(&fleet.env.database, &created.id).await, 1);
    let (status, _) = get_text(b, &format!("/api/records/{}", created.id)).await.unwrap();
    assert_eq!(status, 200, "the restarted front reads it too");

    // 4b. The run a dead worker held while no front followed it: front B (which accepted
    // it, and so followed it) is killed, then its worker; its lease runs out, front A's
    // sweep ends it as "worker gone", and its row reads interrupted within the lease.
    let created = submit(b, "w1", LONG).await;
    wait_for("w1 holding the run", Duration::from_secs(60), async || {
        let Some((200, body)) = get_text(a, "/api/workers").await else { return false };
        let cards: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
        cards.iter().any(|c| c["name"] == "w1" && c["running"] == created.id.as_str())
    })
    .await;
    // Its lease is put as the job is taken, before the heartbeat says so; the model built
    // and timing under way a moment later.
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet.kill_front(1);
    let (mut w1, _) = fleet.workers.remove("w1").unwrap();
    w1.kill().unwrap();
    let killed = Instant::now();
    w1.wait().unwrap();
    assert_eq!(status_of(&fleet.env.database, &created.id).await.as_deref(), Some("running"));
    while status_of(&fleet.env.database, &created.id).await.as_deref() != Some("interrupted") {
        assert!(killed.elapsed() < Duration::from_secs(30), "the unfollowed run of a dead worker was not marked interrupted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let marked = killed.elapsed();
    println!("a dead worker's unfollowed run marked interrupted after {:.2} s (lease {HEARTBEAT_S} s)", marked.as_secs_f64());
    // Stated bound: the lease TTL (the heartbeat's), plus one sweep (half of it), plus the
    // recorder's write and slack for a loaded CI machine.
    assert!(marked < Duration::from_secs_f64(HEARTBEAT_S * 1.5 + 4.0), "marked after {marked:?}");
    let (status, body) = get_text(a, &format!("/api/records/{}", created.id)).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("interrupted by the loss of its fleet worker (worker w1 went away during the run) at"), "{body}");
    // Its viewers, late, are told the same; the worker back runs it no second time.
    let (_, events) = follow(a, &created.id, |_| {}).await;
    match events.last() {
        Some((_, Event::Failed { failure })) => assert_eq!(failure.kind, protocol::FailureKind::WorkerGone, "{failure:?}"),
        other => panic!("expected the worker-gone failure, got {other:?}"),
    }
    fleet.start_worker("w1");
    fleet.start_front(1);
    for front in [a, b] {
        wait_for("w1 and front B back", Duration::from_secs(60), async || live_workers(front).await.len() == 3).await;
    }
    let w1_metrics = fleet.workers["w1"].1;
    tokio::time::sleep(Duration::from_secs_f64(HEARTBEAT_S * 2.0)).await;
    assert_eq!(metric(w1_metrics, "gradless_runs_finished_total").await, 0.0, "the returned w1 did not run it again");
    assert_eq!(metric(w1_metrics, "gradless_runs_started_total").await, 0.0, "the returned w1 did not start it again");

    // 5. NATS stopped: 503 naming it, with Retry-After; runs go again once it is back.
    services(&fleet.env, "stop-nats");
    wait_for("a 503 naming NATS", Duration::from_secs(20), async || {
        let (status, headers, body) = post(a, "/api/runs?worker=w1", QUICK).await;
        status == 503 && headers.contains_key("retry-after") && body.contains("NATS")
    })
    .await;
    let (status, _) = get_text(a, "/").await.unwrap();
    assert_eq!(status, 200, "pages keep working without NATS");
    services(&fleet.env, "nats");
    for front in [a, b] {
        wait_for("3 live workers after NATS returned", Duration::from_secs(60), async || {
            live_workers(front).await.len() == 3
        })
        .await;
    }
    let created = submit_once_accepted("runs accepted again after NATS returned", a, "w2").await;
    let (_, events) = follow(b, &created.id, |_| {}).await;
    assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "{events:?}");

    // 6. PostgreSQL stopped: 503 naming it (a run now could not be recorded), with
    // Retry-After; recorded runs go again once it is back.
    services(&fleet.env, "stop-pg");
    wait_for("a 503 naming PostgreSQL", Duration::from_secs(20), async || {
        let (status, headers, body) = post(a, "/api/runs?worker=w1", QUICK).await;
        status == 503 && headers.contains_key("retry-after") && body.contains("PostgreSQL")
    })
    .await;
    // A front started while PostgreSQL is away serves its pages and gives the same 503.
    fleet.kill_front(1);
    fleet.start_front(1);
    wait_for("front B serving pages without PostgreSQL", Duration::from_secs(60), async || {
        matches!(get_text(b, "/").await, Some((200, _)))
    })
    .await;
    wait_for("front B's 503 naming PostgreSQL (once it has reached NATS)", Duration::from_secs(20), async || {
        let (status, _, body) = post(b, "/api/runs?worker=w1", QUICK).await;
        status == 503 && body.contains("PostgreSQL")
    })
    .await;
    services(&fleet.env, "pg");
    let created = submit_once_accepted("runs accepted again after PostgreSQL returned", a, "w1").await;
    let (_, events) = follow(a, &created.id, |_| {}).await;
    assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "{events:?}");
    // The front started without it migrates and records once PostgreSQL is back.
    wait_for("front B takes runs after PostgreSQL returned", Duration::from_secs(60), async || {
        live_workers(b).await.len() == 3 && post(b, "/api/runs?worker=w2", QUICK).await.0 == 202
    })
    .await;
    let database = fleet.env.database.clone();
    wait_for("the run after PostgreSQL's return recorded once", Duration::from_secs(20), async || {
        rows_with_id(&database, &created.id).await == 1
    })
    .await;

    // 7. Load: ~200 viewers across both fronts follow 3 runs, one per worker.
    load(a, b).await;
}

const VIEWERS: usize = 198;

async fn load(a: SocketAddr, b: SocketAddr) {
    // A blocker first on each worker, so the measured runs wait while their viewers connect
    // and every event they emit is live for every viewer.
    let blocker = r#"{"model": "resnet18", "batch": 2, "iters": 25, "warmup": 0, "device": "cpu"}"#;
    let measured = r#"{"model": "tiny_mlp", "batch": 8, "iters": 60, "warmup": 2, "device": "cpu"}"#;
    let mut runs = Vec::new();
    for (i, w) in WORKERS.iter().enumerate() {
        let front = if i % 2 == 0 { a } else { b };
        submit(front, w, blocker).await;
        runs.push(submit(front, w, measured).await.id);
    }
    let started = Instant::now();
    let mut viewers = Vec::new();
    for v in 0..VIEWERS {
        let front = if v % 2 == 0 { a } else { b };
        let id = runs[v % runs.len()].clone();
        viewers.push(tokio::spawn(async move {
            let (connected, events) = follow(front, &id, |_| {}).await;
            (front, id, connected, events)
        }));
    }
    let mut delays_ms = Vec::new();
    let mut emitted: HashMap<(SocketAddr, String), Vec<u64>> = HashMap::new();
    for v in viewers {
        let (front, id, connected, events) =
            tokio::time::timeout(Duration::from_secs(180), v).await.expect("viewer finished").unwrap();
        assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "viewer of {id}");
        let stamps = match emitted.entry((front, id.clone())) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let (status, body) = get_text(front, &format!("/api/runs/{id}/emitted")).await.unwrap();
                assert_eq!(status, 200);
                e.insert(serde_json::from_str(&body).unwrap())
            }
        };
        assert_eq!(stamps.len(), events.len(), "one stamp per event");
        for ((read, _), sent) in events.iter().zip(stamps) {
            // Live events only: a replayed one was emitted before this viewer connected.
            if *sent >= connected {
                delays_ms.push(read.saturating_sub(*sent) as f64 / 1000.0);
            }
        }
    }
    assert!(delays_ms.len() > VIEWERS * 20, "most events were seen live ({})", delays_ms.len());
    delays_ms.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let (p50, p99) = (percentile(&delays_ms, 50.0), percentile(&delays_ms, 99.0));
    let figures = serde_json::json!({
        "viewers": VIEWERS, "fronts": 2, "workers": 3, "runs": runs.len(),
        "live_events_measured": delays_ms.len(),
        "emit_to_viewer_ms": {"p50": p50, "p99": p99, "max": delays_ms.last()},
        "wall_s": started.elapsed().as_secs_f64(),
    });
    println!("fleet load figures: {figures}");
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let _ = std::fs::write(format!("{target}/gradless-fleet-load.json"), figures.to_string());
}

/// Kills its processes when dropped (a failed assertion must not leave them running).
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn run_ok(program: &str, args: &[&str], dir: &std::path::Path) {
    let out = Command::new(program).args(args).current_dir(dir).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a certificate for 127.0.0.1 signed by it, in `dir`: `ca.pem`, `server.pem`,
/// `server-key.pem`.
fn make_certificates(dir: &std::path::Path) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "1", "-subj", "/CN=gradless test CA"]);
    run_ok("openssl", &ca, dir);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend(["-keyout", "server-key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
    run_ok("openssl", &csr, dir);
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n").unwrap();
    run_ok(
        "openssl",
        &["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
          "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf"],
        dir,
    );
}

/// The operator's guide's hardened nats-server configuration, `deploy/nats-gradless.conf` itself with
/// its address, store and certificate paths moved into `dir`: TLS with the CA above and one
/// user per role. A front and a worker with their own users run a recorded run end to end; a
/// front holding the worker's user cannot queue a run; a front that does not trust the CA
/// does not connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs NATS and PostgreSQL: scripts/test.sh runs it"]
async fn the_hardened_nats_config_lets_each_role_do_its_part_and_no_more() {
    let env = env();
    let dir = log_dir().join("hardened-nats");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("store")).unwrap();
    make_certificates(&dir);
    let port = env.base_port + 10;
    let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut config = std::fs::read_to_string(repo.join("deploy/nats-gradless.conf")).unwrap();
    let d = dir.display();
    for (from, to) in [
        ("listen: 0.0.0.0:4222".to_string(), format!("listen: 127.0.0.1:{port}")),
        ("store_dir: /var/lib/nats".into(), format!("store_dir: \"{d}/store\"")),
        ("cert_file: /etc/nats/server.pem".into(), format!("cert_file: \"{d}/server.pem\"")),
        ("key_file: /etc/nats/server-key.pem".into(), format!("key_file: \"{d}/server-key.pem\"")),
    ] {
        assert!(config.contains(&from), "deploy/nats-gradless.conf no longer has `{from}`");
        config = config.replace(&from, &to);
    }
    std::fs::write(dir.join("nats.conf"), config).unwrap();
    let (front_pass, worker_pass) = ("front-secret", "worker-secret");
    let nats = Command::new("nats-server")
        .args(["-c", "nats.conf", "-l", "nats.log"])
        .current_dir(&dir)
        .env("FRONT_PASS", front_pass)
        .env("WORKER_PASS", worker_pass)
        .spawn()
        .expect("starting nats-server");
    let mut procs = Processes(vec![nats]);
    wait_for("the hardened nats-server", Duration::from_secs(20), async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
    })
    .await;
    let ca = dir.join("ca.pem").display().to_string();
    let url = |user: &str, pass: &str| format!("tls://{user}:{pass}@127.0.0.1:{port}");
    let front_args = |addr: SocketAddr, nats: String, ca: Option<&str>| {
        let mut a: Vec<String> = [
            "serve", "--addr", &addr.to_string(), "--nats", &nats, "--database", &env.database,
            "--heartbeat-s", &HEARTBEAT_S.to_string(), "--rate-limit", "0", "--site-root", "target/site",
        ]
        .map(String::from)
        .to_vec();
        if let Some(ca) = ca {
            a.extend(["--nats-ca".to_string(), ca.to_string()]);
        }
        a
    };
    let metrics: SocketAddr = format!("127.0.0.1:{}", port + 1).parse().unwrap();
    let worker_args = [
        "worker", "--nats", &url("worker", worker_pass), "--nats-ca", &ca, "--name", "hw1", "--device", "cpu",
        "--heartbeat-s", &HEARTBEAT_S.to_string(), "--default-threads", "1", "--metrics-addr", &metrics.to_string(),
    ]
    .map(String::from);
    procs.0.push(spawn(&worker_args, "hardened-worker.log"));
    let front: SocketAddr = format!("127.0.0.1:{}", port + 2).parse().unwrap();
    procs.0.push(spawn(&front_args(front, url("front", front_pass), Some(&ca)), "hardened-front.log"));

    // Each role with its own user: a run goes through and is recorded.
    wait_for("worker hw1 listed by the front", Duration::from_secs(90), async || {
        live_workers(front).await == ["hw1"]
    })
    .await;
    let created = submit(front, "hw1", QUICK).await;
    let (_, events) = follow(front, &created.id, |_| {}).await;
    assert!(matches!(events.last(), Some((_, Event::Done { .. }))), "{events:?}");
    let database = env.database.clone();
    wait_for("the run recorded once", Duration::from_secs(20), async || {
        rows_with_id(&database, &created.id).await == 1
    })
    .await;
    assert_eq!(metric(metrics, "gradless_runs_finished_total").await, 1.0);

    // The worker's user may not queue runs: a front holding it is refused by NATS.
    let posing: SocketAddr = format!("127.0.0.1:{}", port + 3).parse().unwrap();
    procs.0.push(spawn(&front_args(posing, url("worker", worker_pass), Some(&ca)), "hardened-posing-front.log"));
    wait_for("the posing front lists hw1", Duration::from_secs(60), async || {
        live_workers(posing).await == ["hw1"]
    })
    .await;
    let (status, _, body) = post(posing, "/api/runs?worker=hw1", QUICK).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("handing the run to worker hw1 failed"), "{body}");
    tokio::time::sleep(Duration::from_secs_f64(HEARTBEAT_S)).await;
    assert_eq!(metric(metrics, "gradless_runs_finished_total").await, 1.0, "nothing more ran on hw1");

    // A front that does not trust the fleet's CA does not connect: 503 naming NATS.
    let untrusting: SocketAddr = format!("127.0.0.1:{}", port + 4).parse().unwrap();
    procs.0.push(spawn(&front_args(untrusting, url("front", front_pass), None), "hardened-untrusting-front.log"));
    wait_for("the untrusting front serving", Duration::from_secs(60), async || {
        matches!(get_text(untrusting, "/healthz").await, Some((200, _)))
    })
    .await;
    let (status, _, body) = post(untrusting, "/api/runs?worker=hw1", QUICK).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("NATS"), "{body}");
    assert!(!body.contains(front_pass), "{body}");
    drop(procs);
    // No process wrote a password to its log.
    for log in ["hardened-worker.log", "hardened-front.log", "hardened-posing-front.log", "hardened-untrusting-front.log"] {
        let text = std::fs::read_to_string(log_dir().join(log)).unwrap();
        assert!(!text.contains(front_pass) && !text.contains(worker_pass), "{log} shows a password");
    }
}
