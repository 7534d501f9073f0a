//! The fleet under real network faults. NATS, PostgreSQL, two fronts and three CPU workers
//! each run in a network namespace of their own, joined to a hub namespace by veth pairs,
//! so every link is a real interface: the test cuts one (nftables drop rules in the hub),
//! loses a share of its packets (`numgen random`), or slows it (each worker reaches NATS
//! through a delaying proxy in the hub, `faults/delay_proxy.py`: this kernel has no netem).
//! The test itself (the viewers, the checks) reaches the fronts and PostgreSQL from the root
//! namespace through one more pair.
//!
//! Scenarios, one after another on one fleet, each with a bounded count of runs and a time
//! limit: delay and loss on every worker link while runs and viewers go on; a worker cut
//! from NATS mid-run and healed; a worker cut for good; a front cut from PostgreSQL mid-run;
//! a front killed with its viewers moving to the other; NATS restarted during runs. For
//! every scenario: every accepted run ends in exactly one terminal state, in PostgreSQL and
//! in every viewer's stream; no run is executed twice; no finished record is lost or
//! changed afterwards; every viewer is told within [`TELL_BOUND`]; the fronts answer
//! `/healthz` throughout (the killed one apart). The table is printed and written to
//! `gradless-faults.json` in the target folder.
//!
//! Needs root (`CAP_NET_ADMIN`), `ip`, `nft`, nats-server, PostgreSQL and python3; ignored by
//! a plain `cargo test`, run by `scripts/test.sh`. Where it cannot build the namespaces it
//! fails saying why, rather than skipping.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use http_body_util::BodyExt;
use hyper::Request;
use hyper_util::rt::TokioIo;
use protocol::{Event, RunCreated};

/// Every viewer must have its run's end (or an error naming the fault) within this of the
/// scenario's start.
const TELL_BOUND: Duration = Duration::from_secs(90);
const HEARTBEAT_S: &str = "5";
const FRONT_RUN_TIMEOUT_S: &str = "40";
const PREFIX: &str = "glf";

const QUICK: &str = r#"{"model": "tiny_mlp", "batch": 4, "iters": 3, "warmup": 1, "device": "cpu"}"#;
/// A few seconds on one CPU thread: long enough to be cut mid-way.
const LONG: &str = r#"{"model": "resnet18", "batch": 2, "iters": 80, "warmup": 1, "device": "cpu"}"#;

/// The namespaces, their hub-side interface and address: node `i` is 10.77.i.2, its hub
/// side 10.77.i.1; the root namespace is 10.77.0.1.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Node {
    Nats = 1,
    Pg = 2,
    Front0 = 3,
    Front1 = 4,
    W1 = 5,
    W2 = 6,
    W3 = 7,
}

const NODES: [Node; 7] = [Node::Nats, Node::Pg, Node::Front0, Node::Front1, Node::W1, Node::W2, Node::W3];
const WORKERS: [(Node, &str); 3] = [(Node::W1, "w1"), (Node::W2, "w2"), (Node::W3, "w3")];

impl Node {
    fn ns(self) -> String {
        format!("{PREFIX}-{}", self as u8)
    }
    fn hub_if(self) -> String {
        format!("{PREFIX}h{}", self as u8)
    }
    fn addr(self) -> String {
        format!("10.77.{}.2", self as u8)
    }
    fn hub_addr(self) -> String {
        format!("10.77.{}.1", self as u8)
    }
}

fn hub() -> String {
    format!("{PREFIX}-hub")
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{}`: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn must(args: &[&str]) {
    sh(args).unwrap_or_else(|e| panic!("building the test network: {e}"));
}

/// The namespaces and links; removed on drop (and any left by an earlier run at the start).
struct Net;

impl Net {
    fn build() -> Net {
        Net::remove();
        if let Err(e) = sh(&["ip", "netns", "add", &hub()]) {
            panic!(
                "the fault test builds network namespaces and needs root (CAP_NET_ADMIN) and iproute2: {e}"
            );
        }
        sh(&["nft", "--version"]).unwrap_or_else(|e| panic!("the fault test needs nftables (scripts/setup.sh --fleet installs it): {e}"));
        let hub = hub();
        must(&["ip", "-n", &hub, "link", "set", "lo", "up"]);
        must(&["ip", "netns", "exec", &hub, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        // The root namespace's own link, for the test's viewers and checks.
        let (root_if, root_hub_if) = (format!("{PREFIX}0r"), format!("{PREFIX}h0"));
        must(&["ip", "link", "add", &root_if, "type", "veth", "peer", "name", &root_hub_if, "netns", &hub]);
        must(&["ip", "addr", "add", "10.77.0.1/24", "dev", &root_if]);
        must(&["ip", "link", "set", &root_if, "up"]);
        must(&["ip", "-n", &hub, "addr", "add", "10.77.0.2/24", "dev", &root_hub_if]);
        must(&["ip", "-n", &hub, "link", "set", &root_hub_if, "up"]);
        must(&["ip", "route", "add", "10.77.0.0/16", "via", "10.77.0.2"]);
        for node in NODES {
            let (ns, i) = (node.ns(), node as u8);
            let inner = format!("{PREFIX}n{i}");
            must(&["ip", "netns", "add", &ns]);
            must(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            must(&["ip", "link", "add", &node.hub_if(), "netns", &hub, "type", "veth", "peer", "name", &inner, "netns", &ns]);
            must(&["ip", "-n", &hub, "addr", "add", &format!("{}/24", node.hub_addr()), "dev", &node.hub_if()]);
            must(&["ip", "-n", &hub, "link", "set", &node.hub_if(), "up"]);
            must(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", node.addr()), "dev", &inner]);
            must(&["ip", "-n", &ns, "link", "set", &inner, "up"]);
            must(&["ip", "-n", &ns, "route", "add", "default", "via", &node.hub_addr()]);
        }
        let net = Net;
        net.faults(&[]);
        net
    }

    fn remove() {
        let _ = sh(&["ip", "link", "del", &format!("{PREFIX}0r")]);
        let _ = sh(&["ip", "netns", "del", &hub()]);
        for node in NODES {
            let _ = sh(&["ip", "netns", "del", &node.ns()]);
        }
    }

    /// Replaces the hub's fault rules with `faults`, atomically.
    fn faults(&self, faults: &[Fault]) {
        let mut rules = String::new();
        for f in faults {
            let (matches, verdict) = match f {
                Fault::Cut(node) => (vec![format!("iifname \"{0}\"", node.hub_if()), format!("oifname \"{0}\"", node.hub_if())], "drop".to_string()),
                Fault::Loss(node, pct) => (
                    vec![format!("iifname \"{0}\"", node.hub_if()), format!("oifname \"{0}\"", node.hub_if())],
                    format!("numgen random mod 100 < {pct} drop"),
                ),
                Fault::CutBetween(a, b) => (
                    vec![
                        format!("iifname \"{}\" oifname \"{}\"", a.hub_if(), b.hub_if()),
                        format!("iifname \"{}\" oifname \"{}\"", b.hub_if(), a.hub_if()),
                    ],
                    "drop".to_string(),
                ),
            };
            for m in matches {
                rules.push_str(&format!("    {m} {verdict}\n"));
            }
        }
        // The same rules on the forwarded path and on the hub's own (the proxies live there).
        let table = format!(
            "table inet {PREFIX}\ndelete table inet {PREFIX}\ntable inet {PREFIX} {{\n  chain forwarded {{ type filter hook forward priority 0; policy accept;\n{rules}  }}\n  chain incoming {{ type filter hook input priority 0; policy accept;\n{rules}  }}\n  chain outgoing {{ type filter hook output priority 0; policy accept;\n{rules}  }}\n}}\n"
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &hub(), "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        nft.stdin.take().unwrap().write_all(table.as_bytes()).unwrap();
        let out = nft.wait_with_output().unwrap();
        assert!(out.status.success(), "nft: {}\n{table}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        Net::remove();
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Cut(Node),
    Loss(Node, u8),
    CutBetween(Node, Node),
}

fn log_dir() -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into())).join("fault-logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Runs `program args` inside `node`'s namespace, its stderr to `log`.
fn spawn_in(ns: &str, program: &str, args: &[String], log: &str) -> Child {
    let file = std::fs::File::create(log_dir().join(log)).unwrap();
    Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .current_dir(repo())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {program} in {ns}: {e}"))
}

/// `scripts/services.sh` inside a namespace, listening on its address.
fn services(node: Node, dir: &str, args: &[&str]) {
    let status = Command::new("ip")
        .args(["netns", "exec", &node.ns(), "scripts/services.sh"])
        .args(args.iter().take(1))
        .arg(dir)
        .args(args.iter().skip(1))
        .current_dir(repo())
        .env("GRADLESS_SERVICES_ADDR", node.addr())
        .env("GRADLESS_SERVICES_TRUST", "10.77.0.0/16")
        .status()
        .unwrap();
    assert!(status.success(), "scripts/services.sh {args:?} in {}", node.ns());
}

struct Fleet {
    net: Net,
    scratch: tempdir::Scratch,
    fronts: [Option<Child>; 2],
    workers: Vec<Child>,
    proxy: Option<Child>,
}

mod tempdir {
    /// A scratch folder, removed on drop.
    pub struct Scratch(pub std::path::PathBuf);
    impl Scratch {
        pub fn new() -> Scratch {
            let p = std::env::temp_dir().join(format!("gradless-faults-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
        pub fn path(&self) -> String {
            self.0.display().to_string()
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

const NATS_PORT: &str = "4222";
const PG_PORT: &str = "5432";
const FRONT_PORT: u16 = 8080;

fn database() -> String {
    format!("postgres://gradless@{}:{PG_PORT}/gradless", Node::Pg.addr())
}

fn front_addr(i: usize) -> SocketAddr {
    let node = if i == 0 { Node::Front0 } else { Node::Front1 };
    format!("{}:{FRONT_PORT}", node.addr()).parse().unwrap()
}

impl Fleet {
    fn start() -> Fleet {
        let net = Net::build();
        let scratch = tempdir::Scratch::new();
        services(Node::Nats, &scratch.path(), &["nats", NATS_PORT]);
        services(Node::Pg, &scratch.path(), &["pg-init", PG_PORT]);
        let mut fleet = Fleet { net, scratch, fronts: [None, None], workers: Vec::new(), proxy: None };
        // Each worker reaches NATS through the hub's proxy on its own link.
        let links: Vec<String> = WORKERS
            .iter()
            .map(|(w, _)| format!("{}:{NATS_PORT}={}:{NATS_PORT}", w.hub_addr(), Node::Nats.addr()))
            .collect();
        let mut args = vec![repo().join("server/tests/faults/delay_proxy.py").display().to_string(), fleet.delay_control()];
        args.extend(links);
        fleet.proxy = Some(spawn_in(&hub(), "python3", &args, "proxy.log"));
        for (node, name) in WORKERS {
            let nats = format!("nats://{}:{NATS_PORT}", node.hub_addr());
            let args = [
                "worker", "--nats", &nats, "--name", name, "--device", "cpu", "--heartbeat-s", HEARTBEAT_S,
                "--default-threads", "1", "--metrics-addr", &format!("{}:9100", node.addr()), "--run-timeout-s", "120",
            ]
            .map(String::from);
            fleet.workers.push(spawn_in(&node.ns(), env!("CARGO_BIN_EXE_gradless"), &args, &format!("{name}.log")));
        }
        fleet.start_front(0);
        fleet.start_front(1);
        fleet
    }

    fn delay_control(&self) -> String {
        format!("{}/delay", self.scratch.path())
    }

    /// Delay on every worker's NATS link (both directions), in ms.
    fn set_delay(&self, mean_ms: u32, jitter_ms: u32) {
        for n in 0..WORKERS.len() {
            std::fs::write(format!("{}.{n}", self.delay_control()), format!("{mean_ms} {jitter_ms}")).unwrap();
        }
    }

    fn start_front(&mut self, i: usize) {
        let node = if i == 0 { Node::Front0 } else { Node::Front1 };
        let args = [
            "serve", "--addr", &front_addr(i).to_string(), "--nats", &format!("nats://{}:{NATS_PORT}", Node::Nats.addr()),
            "--database", &database(), "--heartbeat-s", HEARTBEAT_S, "--rate-limit", "0",
            "--run-timeout-s", FRONT_RUN_TIMEOUT_S, "--site-root", "target/site",
        ]
        .map(String::from);
        self.fronts[i] = Some(spawn_in(&node.ns(), env!("CARGO_BIN_EXE_gradless"), &args, &format!("front{i}.log")));
    }

    fn kill_front(&mut self, i: usize) {
        if let Some(mut c) = self.fronts[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for c in self.fronts.iter_mut().flatten().chain(self.workers.iter_mut()).chain(self.proxy.iter_mut()) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let dir = self.scratch.path();
        let _ = Command::new("scripts/services.sh").args(["stop", &dir]).current_dir(repo()).status();
    }
}

// ---- HTTP, from the root namespace ----

async fn request(addr: SocketAddr, req: Request<Body>) -> Option<(u16, hyper::body::Incoming)> {
    let connect = tokio::net::TcpStream::connect(addr);
    let stream = tokio::time::timeout(Duration::from_secs(3), connect).await.ok()?.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    let res = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req)).await.ok()?.ok()?;
    Some((res.status().as_u16(), res.into_body()))
}

async fn get_text(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let req = Request::get(path).header("host", addr.to_string()).body(Body::empty()).unwrap();
    let (status, body) = request(addr, req).await?;
    let bytes = tokio::time::timeout(Duration::from_secs(10), body.collect()).await.ok()?.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Submits `spec` to `worker` on front `front`, retrying a 503 (a service coming back, a
/// worker not listed yet) until `limit`; the run and where it was accepted.
async fn submit(front: usize, worker: &str, spec: &str, limit: Duration) -> Option<RunCreated> {
    let start = Instant::now();
    while start.elapsed() < limit {
        let addr = front_addr(front);
        let req = Request::post(format!("/api/runs?worker={worker}"))
            .header("host", addr.to_string())
            .header("content-type", "application/json")
            .body(Body::from(spec.to_string()))
            .unwrap();
        if let Some((status, body)) = request(addr, req).await {
            let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            if status == 202 {
                return Some(serde_json::from_slice(&bytes).unwrap());
            }
            assert_eq!(status, 503, "POST /api/runs?worker={worker}: {}", String::from_utf8_lossy(&bytes));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    None
}

async fn live_workers(front: usize) -> usize {
    match get_text(front_addr(front), "/api/workers").await {
        Some((200, body)) => serde_json::from_str::<Vec<serde_json::Value>>(&body).map(|v| v.len()).unwrap_or(0),
        _ => 0,
    }
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

/// What one viewer saw of its run.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// The run's last event (`done` or `failed`), if it came.
    end: Option<Event>,
    /// When it came, from the scenario's start.
    told_after: Option<Duration>,
    /// `started` events in the last connection's stream (each replays from the first).
    starts: usize,
    reconnects: u32,
}

/// Follows run `id` from front `front`, moving to the other front when its connection
/// ends without the run's end, until the end or `deadline`.
async fn view(id: String, mut front: usize, t0: Instant, deadline: Instant, started: Option<Arc<tokio::sync::Notify>>) -> Seen {
    let mut seen = Seen::default();
    while Instant::now() < deadline {
        let addr = front_addr(front);
        let req = Request::get(format!("/api/runs/{id}/events")).header("host", addr.to_string()).body(Body::empty()).unwrap();
        if let Some((200, mut body)) = request(addr, req).await {
            let mut reader = common::SseReader::default();
            seen.starts = 0;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let Ok(Some(Ok(frame))) = tokio::time::timeout(left, body.frame()).await else { break };
                let Ok(data) = frame.into_data() else { continue };
                for event in reader.push(&data) {
                    if matches!(event, Event::Started { .. }) {
                        seen.starts += 1;
                        if let Some(n) = &started {
                            n.notify_one();
                        }
                    }
                    if event.is_terminal() {
                        seen.told_after = Some(t0.elapsed());
                        seen.end = Some(event);
                        return seen;
                    }
                }
            }
        }
        seen.reconnects += 1;
        front = 1 - front;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    seen
}

/// Polls both fronts' `/healthz` until stopped; counts the answers that were not `ok`, per
/// front, except while that front is deliberately down.
struct Health {
    stop: Arc<std::sync::atomic::AtomicBool>,
    down: Arc<Mutex<[bool; 2]>>,
    failures: Arc<Mutex<[u32; 2]>>,
    task: tokio::task::JoinHandle<()>,
}

impl Health {
    fn watch() -> Health {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let down = Arc::new(Mutex::new([false; 2]));
        let failures = Arc::new(Mutex::new([0u32; 2]));
        let (s, d, f) = (stop.clone(), down.clone(), failures.clone());
        let task = tokio::spawn(async move {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                for i in 0..2 {
                    if d.lock().unwrap()[i] {
                        continue;
                    }
                    let ok = matches!(get_text(front_addr(i), "/healthz").await, Some((200, _)));
                    if !ok && !d.lock().unwrap()[i] {
                        f.lock().unwrap()[i] += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Health { stop, down, failures, task }
    }
}

/// The database's view of a run: its row's status and body, if it has a row.
async fn row_of(id: &str) -> Option<(String, String)> {
    let id = id.to_string();
    tokio::task::spawn_blocking(move || {
        let mut client = postgres::Client::connect(&database(), postgres::NoTls).ok()?;
        client
            .query_opt("SELECT status, body::text FROM records WHERE id = $1", &[&id])
            .ok()?
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
    })
    .await
    .unwrap()
}

/// A worker's `gradless_runs_started_total`.
async fn runs_started(worker: Node) -> f64 {
    let addr: SocketAddr = format!("{}:9100", worker.addr()).parse().unwrap();
    let Some((_, text)) = get_text(addr, "/metrics").await else { return f64::NAN };
    text.lines()
        .find_map(|l| l.strip_prefix("gradless_runs_started_total").and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

/// One row of the table.
#[derive(Debug, serde::Serialize)]
struct Row {
    scenario: &'static str,
    accepted: usize,
    done: usize,
    failed: usize,
    interrupted: usize,
    lost: usize,
    duplicated: usize,
    viewers: usize,
    viewers_told: usize,
    worst_tell_s: f64,
    health_failures: u32,
    /// Why each lost or duplicated run counts as such.
    problems: Vec<String>,
    /// What each failed or interrupted run's end said.
    failures: Vec<String>,
}

/// A scenario's runs and viewers, checked once they end.
struct Scenario {
    name: &'static str,
    t0: Instant,
    runs: Vec<String>,
    viewers: Vec<(String, tokio::task::JoinHandle<Seen>)>,
    started_before: f64,
}

impl Scenario {
    async fn begin(name: &'static str) -> Scenario {
        let mut started_before = 0.0;
        for (w, _) in WORKERS {
            started_before += runs_started(w).await;
        }
        Scenario { name, t0: Instant::now(), runs: Vec::new(), viewers: Vec::new(), started_before }
    }

    fn accepted(&mut self, created: Option<RunCreated>) -> Option<String> {
        let id = created?.id;
        self.runs.push(id.clone());
        Some(id)
    }

    /// `n` viewers of `id`, alternating fronts from `front`; the first one's `started`
    /// wakes `started`.
    fn watch(&mut self, id: &str, n: usize, front: usize, started: Option<Arc<tokio::sync::Notify>>) {
        for k in 0..n {
            let deadline = self.t0 + TELL_BOUND;
            let notify = if k == 0 { started.clone() } else { None };
            let task = tokio::spawn(view(id.to_string(), (front + k) % 2, self.t0, deadline, notify));
            self.viewers.push((id.to_string(), task));
        }
    }

    /// Waits for every viewer, then checks each run against the database and a fresh
    /// viewer's replay.
    async fn check(self, health: &Health, health_before: [u32; 2], finished: &mut HashMap<String, String>) -> Row {
        let mut seen_by_run: HashMap<String, Vec<Seen>> = HashMap::new();
        for (id, task) in self.viewers {
            seen_by_run.entry(id).or_default().push(task.await.unwrap());
        }
        let (mut done, mut failed, mut interrupted, mut lost, mut duplicated) = (0, 0, 0, 0, 0);
        let mut problems = Vec::new();
        let mut failures = Vec::new();
        let mut viewers = 0;
        let mut told = 0;
        let mut worst = Duration::ZERO;
        for id in &self.runs {
            // The run's end as a fresh viewer reads it (the stream replays from the first
            // event): exactly one end, at most one start.
            let replay = view(id.clone(), 1, self.t0, Instant::now() + Duration::from_secs(30), None).await;
            let Some(end) = replay.end.clone() else {
                lost += 1;
                problems.push(format!("{id}: no end in its stream"));
                continue;
            };
            if replay.starts > 1 {
                duplicated += 1;
                problems.push(format!("{id}: started {} times", replay.starts));
            }
            for s in seen_by_run.get(id).map(Vec::as_slice).unwrap_or(&[]) {
                viewers += 1;
                if let (Some(e), Some(at)) = (&s.end, s.told_after) {
                    told += 1;
                    worst = worst.max(at);
                    if e != &end {
                        duplicated += 1;
                        problems.push(format!("{id}: two viewers saw different ends"));
                    }
                }
            }
            // The database agrees: a done run is recorded as completed, and no run is left
            // `running`. (Read a few times: the recording front may be reconnecting.)
            let mut row = row_of(id).await;
            let settle = Instant::now();
            while settle.elapsed() < Duration::from_secs(30)
                && (row.as_ref().is_some_and(|(s, _)| s == "running") || (matches!(end, Event::Done { .. }) && row.is_none()))
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
                row = row_of(id).await;
            }
            match (&end, &row) {
                (Event::Done { .. }, Some((status, body))) if status == "completed" => {
                    done += 1;
                    finished.insert(id.clone(), body.clone());
                }
                (Event::Failed { failure }, row) if !row.as_ref().is_some_and(|(s, _)| s == "running" || s == "completed") => {
                    failures.push(format!("{id}: {:?}: {}", failure.kind, failure.message));
                    if failure.kind == protocol::FailureKind::Interrupted || row.as_ref().is_some_and(|(s, _)| s == "interrupted") {
                        interrupted += 1;
                    } else {
                        failed += 1;
                    }
                }
                (end, row) => {
                    lost += 1;
                    let kind = if matches!(end, Event::Done { .. }) { "done" } else { "failed" };
                    problems.push(format!("{id}: ended {kind} but its row is {:?}", row.as_ref().map(|(s, _)| s)));
                }
            }
        }
        let mut started_after = 0.0;
        for (w, _) in WORKERS {
            started_after += runs_started(w).await;
        }
        let executions = started_after - self.started_before;
        if executions > self.runs.len() as f64 {
            duplicated += 1;
            problems.push(format!("the workers started {executions} runs for {} accepted", self.runs.len()));
        }
        let now = *health.failures.lock().unwrap();
        Row {
            scenario: self.name,
            accepted: self.runs.len(),
            done,
            failed,
            interrupted,
            lost,
            duplicated,
            viewers,
            viewers_told: told,
            worst_tell_s: worst.as_secs_f64(),
            health_failures: now[0] - health_before[0] + now[1] - health_before[1],
            problems,
            failures,
        }
    }
}

/// Waits until `n` notifications came (the runs' `started`), or `limit`.
async fn started(n: &tokio::sync::Notify, limit: Duration) {
    let _ = tokio::time::timeout(limit, n.notified()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root, nftables, NATS and PostgreSQL: scripts/test.sh runs it"]
async fn the_fleet_under_network_faults_loses_and_duplicates_nothing() {
    let mut fleet = Fleet::start();
    for i in 0..2 {
        wait_for("3 live workers on each front", Duration::from_secs(120), async || live_workers(i).await == 3).await;
    }
    let health = Health::watch();
    let mut finished: HashMap<String, String> = HashMap::new();
    let mut rows = Vec::new();
    let snapshot = |h: &Health| *h.failures.lock().unwrap();

    // 1. 200 ± 50 ms of delay and 5% loss on every worker link, while 30 runs and 100
    //    viewers go on.
    let before = snapshot(&health);
    let mut s = Scenario::begin("delay 200±50 ms + 5% loss on every worker link").await;
    fleet.set_delay(200, 50);
    fleet.net.faults(&WORKERS.map(|(w, _)| Fault::Loss(w, 5)));
    for k in 0..30 {
        let (_, worker) = WORKERS[k % 3];
        if let Some(id) = s.accepted(submit(k % 2, worker, QUICK, Duration::from_secs(20)).await) {
            s.watch(&id, if k < 10 { 4 } else { 3 }, k % 2, None);
        }
    }
    let row = s.check(&health, before, &mut finished).await;
    fleet.set_delay(0, 0);
    fleet.net.faults(&[]);
    rows.push(row);

    // 2. A worker cut from NATS mid-run for 10 s, then healed; it runs again afterwards.
    let before = snapshot(&health);
    let mut s = Scenario::begin("a worker cut from NATS for 10 s mid-run, healed").await;
    let go = Arc::new(tokio::sync::Notify::new());
    if let Some(id) = s.accepted(submit(0, "w1", LONG, Duration::from_secs(20)).await) {
        s.watch(&id, 4, 0, Some(go.clone()));
        started(&go, Duration::from_secs(30)).await;
        fleet.net.faults(&[Fault::Cut(Node::W1)]);
        tokio::time::sleep(Duration::from_secs(10)).await;
        fleet.net.faults(&[]);
    }
    wait_for("w1 back", Duration::from_secs(60), async || live_workers(0).await == 3).await;
    if let Some(id) = s.accepted(submit(1, "w1", QUICK, Duration::from_secs(30)).await) {
        s.watch(&id, 2, 1, None);
    }
    rows.push(s.check(&health, before, &mut finished).await);

    // 3. A front cut from PostgreSQL mid-run for 8 s: the run's record is written once.
    let before = snapshot(&health);
    let mut s = Scenario::begin("a front cut from PostgreSQL for 8 s mid-run").await;
    let go = Arc::new(tokio::sync::Notify::new());
    if let Some(id) = s.accepted(submit(0, "w3", LONG, Duration::from_secs(20)).await) {
        s.watch(&id, 4, 0, Some(go.clone()));
        started(&go, Duration::from_secs(30)).await;
        fleet.net.faults(&[Fault::CutBetween(Node::Front0, Node::Pg)]);
        tokio::time::sleep(Duration::from_secs(8)).await;
        fleet.net.faults(&[]);
    }
    rows.push(s.check(&health, before, &mut finished).await);

    // 4. A front killed mid-run: its viewers move to the other front and are told.
    let before = snapshot(&health);
    let mut s = Scenario::begin("a front killed mid-run, viewers move").await;
    let go = Arc::new(tokio::sync::Notify::new());
    if let Some(id) = s.accepted(submit(0, "w2", LONG, Duration::from_secs(20)).await) {
        // Every viewer on the front that will be killed.
        for _ in 0..10 {
            s.watch(&id, 1, 0, Some(go.clone()));
        }
        started(&go, Duration::from_secs(30)).await;
        health.down.lock().unwrap()[0] = true;
        fleet.kill_front(0);
        tokio::time::sleep(Duration::from_secs(3)).await;
        fleet.start_front(0);
        wait_for("front 0 back", Duration::from_secs(60), async || live_workers(0).await == 3).await;
        health.down.lock().unwrap()[0] = false;
    }
    rows.push(s.check(&health, before, &mut finished).await);

    // 5. NATS restarted (its JetStream store on disk) while a run goes on for each worker.
    let before = snapshot(&health);
    let mut s = Scenario::begin("NATS restarted during runs").await;
    let go = Arc::new(tokio::sync::Notify::new());
    for (k, (_, worker)) in WORKERS.iter().enumerate() {
        if let Some(id) = s.accepted(submit(k % 2, worker, LONG, Duration::from_secs(20)).await) {
            s.watch(&id, 3, k % 2, (k == 0).then(|| go.clone()));
        }
    }
    started(&go, Duration::from_secs(30)).await;
    let dir = fleet.scratch.path();
    services(Node::Nats, &dir, &["stop-nats"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    services(Node::Nats, &dir, &["nats", NATS_PORT]);
    rows.push(s.check(&health, before, &mut finished).await);

    // 6. A worker cut for good mid-run (last: it does not come back).
    let before = snapshot(&health);
    let mut s = Scenario::begin("a worker cut for good mid-run").await;
    let go = Arc::new(tokio::sync::Notify::new());
    if let Some(id) = s.accepted(submit(1, "w2", LONG, Duration::from_secs(30)).await) {
        s.watch(&id, 4, 1, Some(go.clone()));
        started(&go, Duration::from_secs(30)).await;
        fleet.net.faults(&[Fault::Cut(Node::W2)]);
    }
    rows.push(s.check(&health, before, &mut finished).await);

    // No finished record was lost or changed by the faults that came after it.
    let mut changed = Vec::new();
    for (id, body) in &finished {
        match row_of(id).await {
            Some((status, now)) if status == "completed" && &now == body => {}
            other => changed.push(format!("{id}: {:?}", other.map(|(s, _)| s))),
        }
    }
    health.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = health.task.await;

    println!("\n{:<52} {:>8} {:>5} {:>6} {:>11} {:>4} {:>10} {:>7} {:>5} {:>11} {:>7}", "scenario", "accepted", "done", "failed", "interrupted", "lost", "duplicated", "viewers", "told", "worst tell", "health");
    for r in &rows {
        println!(
            "{:<52} {:>8} {:>5} {:>6} {:>11} {:>4} {:>10} {:>7} {:>5} {:>9.1} s {:>7}",
            r.scenario, r.accepted, r.done, r.failed, r.interrupted, r.lost, r.duplicated, r.viewers, r.viewers_told, r.worst_tell_s, r.health_failures
        );
    }
    let json = serde_json::json!({ "scenarios": rows, "records_changed": changed, "tell_bound_s": TELL_BOUND.as_secs() });
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    std::fs::write(format!("{target}/gradless-faults.json"), serde_json::to_string_pretty(&json).unwrap()).unwrap();
    for r in rows.iter().filter(|r| !r.failures.is_empty()) {
        println!("{}: {}", r.scenario, r.failures.join("; "));
    }
    for r in &rows {
        assert!(r.accepted > 0, "{}: no run was accepted", r.scenario);
        assert_eq!((r.lost, r.duplicated), (0, 0), "{}: {:?}", r.scenario, r.problems);
        assert_eq!(r.viewers_told, r.viewers, "{}: every viewer is told within {TELL_BOUND:?}", r.scenario);
        assert_eq!(r.health_failures, 0, "{}: the fronts answered /healthz throughout", r.scenario);
    }
    assert!(changed.is_empty(), "finished records lost or changed: {changed:?}");
}
