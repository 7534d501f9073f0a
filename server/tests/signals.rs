//! `gradless serve` and signals: the first SIGTERM lets the current run finish (the process
//! stays up for it), a second one stops the process at once; a SIGKILL mid-run leaves the
//! run recorded as interrupted for the next process on the same database.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// `gradless serve` on `db`, with its port; the log is drained on a thread (and kept
/// in `log` when given) so the server never blocks on a full pipe.
fn serve(db: &std::path::Path, log: Option<std::sync::Arc<std::sync::Mutex<String>>>) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(["serve", "--addr", "127.0.0.1:0", "--default-threads", "1"])
        .arg("--db")
        .arg(db)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start gradless serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    let mut port = None;
    let mut line = String::new();
    while port.is_none() && lines.read_line(&mut line).unwrap() > 0 {
        if let Some(log) = &log {
            log.lock().unwrap().push_str(&line);
        }
        if let Some(at) = line.find("serving at http://127.0.0.1:") {
            let rest = &line[at + "serving at http://127.0.0.1:".len()..];
            port = rest
                .trim()
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse::<u16>()
                .ok();
        }
        line.clear();
    }
    let port = port.expect("the server said where it serves");
    std::thread::spawn(move || {
        for l in lines.lines().map_while(Result::ok) {
            if let Some(log) = &log {
                log.lock().unwrap().push_str(&l);
            }
        }
    });
    (child, port)
}

/// Starts a run long enough to be going when the signals come, and waits for its
/// `started` event.
fn start_long_run(port: u16) -> protocol::RunCreated {
    let spec = r#"{"model": "resnet18", "batch": 8, "warmup": 0, "iters": 500}"#;
    let answer = common::exchange(
        port,
        &format!(
            "POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{spec}",
            spec.len()
        ),
        "}",
        Duration::from_secs(120),
    );
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let created: protocol::RunCreated = serde_json::from_str(body.trim()).unwrap();
    let events = common::exchange(
        port,
        &format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n",
            created.events_url
        ),
        "\"type\":\"started\"",
        Duration::from_secs(120),
    );
    assert!(events.contains("\"type\":\"started\""), "{events}");
    created
}

/// `GET path` on a fresh connection: the status line and the body.
fn get(port: u16, path: &str) -> (String, String) {
    let answer = common::exchange(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
        "\u{0}", // read to the end
        Duration::from_secs(120),
    );
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    let body = if chunked { dechunk(body) } else { body.to_string() };
    (head.lines().next().unwrap_or_default().to_string(), body)
}

/// A body sent with `Transfer-Encoding: chunked`, de-chunked (good enough for JSON and
/// SSE text: the chunk-size lines are dropped).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut lines = body.split("\r\n");
    while let Some(size) = lines.next() {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 {
            break;
        }
        let mut chunk = String::new();
        for l in lines.by_ref() {
            if !chunk.is_empty() {
                chunk.push_str("\r\n");
            }
            chunk.push_str(l);
            if chunk.len() >= n {
                break;
            }
        }
        out.push_str(&chunk);
    }
    out
}

#[test]
fn a_second_sigterm_stops_the_server_at_once() {
    let dir = std::env::temp_dir().join(format!("gradless-signals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut child, port) = serve(&dir.join("runs.sqlite3"), None);
    start_long_run(port);

    signal(&child, "TERM");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first SIGTERM must let the current run finish"
    );
    let t = Instant::now();
    signal(&child, "TERM");
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("a second SIGTERM did not stop the server");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The issue: a run in progress when the server is killed left nothing, and its permalink
/// answered 404 after the restart. Now its start is recorded, and the next server on the
/// same database marks it interrupted, with the time, everywhere the run is read.
#[test]
fn a_run_killed_mid_way_reads_as_interrupted_after_the_restart() {
    let dir = std::env::temp_dir().join(format!("gradless-sigkill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("runs.sqlite3");
    let (mut child, port) = serve(&db, None);
    let created = start_long_run(port);
    let id = created.id.clone();
    // While it runs, the API says it has not finished (from the live run).
    let (status, _) = get(port, &format!("/api/runs/{id}"));
    assert!(status.contains(" 409 "), "{status}");
    signal(&child, "KILL");
    child.wait().unwrap();

    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (mut child, port) = serve(&db, Some(log.clone()));
    let said = log.lock().unwrap().clone();
    assert!(said.contains(&format!("run {id} was interrupted")), "the restart logs what it marked: {said}");

    // The permalink's API: 410 with code `interrupted`, saying when.
    let (status, body) = get(port, &format!("/api/runs/{id}"));
    println!("GET /api/runs/{id} after the SIGKILL: {status}\n{body}");
    assert!(status.contains(" 410 "), "{status} {body}");
    let error: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
    assert_eq!(error["error"]["code"], "interrupted", "{body}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("interrupted by a server restart at 20"), "{message}");
    assert!(message.contains("nothing was measured after it started at 20"), "{message}");

    // The record itself: kind unfinished, status interrupted, with both times and the spec.
    let (status, body) = get(port, &format!("/api/records/{id}"));
    println!("GET /api/records/{id}: {status}\n{body}");
    assert!(status.contains(" 200 "), "{status} {body}");
    let record: protocol::Record = serde_json::from_str(&body).unwrap();
    assert_eq!(record.status(), protocol::RecordStatus::Interrupted);
    let u = record.unfinished().unwrap();
    assert!(u.interrupted_at.as_deref().is_some_and(|t| t.ends_with('Z')), "{u:?}");
    assert!(u.started_at <= *u.interrupted_at.as_ref().unwrap(), "{u:?}");
    assert_eq!(u.spec.as_ref().map(|s| s.iters), Some(500));
    assert_eq!(u.message, message);

    // Its events: a stream whose one event is `failed`, kind `interrupted`, not 404.
    let (status, body) = get(port, &created.events_url);
    assert!(status.contains(" 200 "), "{status} {body}");
    let events = common::events_in(&body);
    assert_eq!(events.len(), 1, "{events:?}");
    match &events[0] {
        protocol::Event::Failed { failure } => {
            assert_eq!(failure.kind, protocol::FailureKind::Interrupted);
            assert_eq!(failure.message, message);
        }
        other => panic!("{other:?}"),
    }

    // The listing (API and page) and the exports say so.
    let (_, body) = get(port, "/api/records?kind=run");
    let list: Vec<protocol::RecordSummary> = serde_json::from_str(&body).unwrap();
    let listed = list.iter().find(|s| s.id == id).expect("listed");
    assert_eq!(listed.status, protocol::RecordStatus::Interrupted);
    assert_eq!(listed.note.as_deref(), Some(message));
    let (status, page) = get(port, "/runs");
    assert!(status.contains(" 200 "), "{status}");
    assert!(page.contains("data-status=\"interrupted\""), "the /runs page marks the row");
    let (status, page) = get(port, &format!("/runs/{id}"));
    assert!(status.contains(" 200 "), "{status}");
    assert!(page.contains("data-testid=\"record-status\""), "the permalink page says it: {page}");
    // "<strong>Interrupted</strong> by a server restart at T; ...": one sentence.
    // (`<!>`: the markers Leptos writes between a view's text nodes for hydration.)
    assert!(page.replace("<!>", "").contains("Interrupted</strong> by a server restart at"), "{page}");
    let (status, body) = get(port, &format!("/api/records/{id}/export/csv"));
    assert!(status.contains(" 422 "), "{status}");
    assert!(body.contains("interrupted by a server restart"), "{body}");
    let (status, body) = get(port, &format!("/api/records/{id}/export/py"));
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("interrupted by a server restart"), "{body}");

    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

mod common;

/// One server per database file: a second `gradless serve` on a file another one serves
/// refuses to start and names the holder; once the first has stopped, the file is free.
#[test]
fn a_second_server_on_a_held_database_refuses_and_names_the_holder() {
    let dir = std::env::temp_dir().join(format!("gradless-one-server-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = dir.join("runs.sqlite3");
    let (mut first, port) = serve(&db, None);
    let second = Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(["serve", "--addr", "127.0.0.1:0", "--default-threads", "1"])
        .arg("--db")
        .arg(&db)
        .env("NO_COLOR", "1")
        .output()
        .expect("run gradless serve");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "the second server started: {stderr}");
    assert!(stderr.contains("in use by another gradless serve"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", first.id())), "the holder is not named: {stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "the holder's address is not named: {stderr}");
    // The first one still serves.
    let (status, _) = get(port, "/healthz");
    assert!(status.contains(" 200 "), "{status}");
    first.kill().unwrap();
    first.wait().unwrap();
    // A killed holder leaves no lock behind: the kernel released it.
    let (mut third, _) = serve(&db, None);
    third.kill().unwrap();
    third.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
