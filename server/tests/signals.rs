//! `gradless serve` and signals: the first SIGTERM lets the current run finish (the process
//! stays up for it), a second one stops the process at once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Sends `request` and reads until `until` appears in the answer (or the socket closes).
fn exchange(port: u16, request: &str, until: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let mut buf = [0u8; 4096];
    while !out.contains(until) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.push_str(&String::from_utf8_lossy(&buf[..n])),
        }
    }
    out
}

#[test]
fn a_second_sigterm_stops_the_server_at_once() {
    let dir = std::env::temp_dir().join(format!("gradless-signals-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gradless"))
        .args(["serve", "--addr", "127.0.0.1:0", "--default-threads", "1"])
        .arg("--db")
        .arg(dir.join("runs.sqlite3"))
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start gradless serve");
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut port = None;
    let mut line = String::new();
    while port.is_none() && log.read_line(&mut line).unwrap() > 0 {
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
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in log.lines() {});

    // A run long enough to be going when the signals come.
    let spec = r#"{"model": "resnet18", "batch": 8, "warmup": 0, "iters": 500}"#;
    let answer = exchange(
        port,
        &format!(
            "POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{spec}",
            spec.len()
        ),
        "}",
    );
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let created: protocol::RunCreated = serde_json::from_str(body.trim()).unwrap();
    let events = exchange(
        port,
        &format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n",
            created.events_url
        ),
        "\"type\":\"started\"",
    );
    assert!(events.contains("\"type\":\"started\""), "{events}");

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
