//! Connections over loopback: idle and slow ones cannot exhaust the server, excess ones are
//! told to come back, and shutdown is not held up by a request that never finishes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use server::conn::ConnLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::*;

/// A server on a free loopback port; returns its address, the trigger for shutdown, and
/// its task (which ends when the server has stopped).
async fn start(
    limits: ConnLimits,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = server::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut state = state();
    state.origins = std::sync::Arc::new(server::origin::Origins::local().with_port(addr.port()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::conn::serve(
        listener,
        server::router(state),
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    (addr, stop, task)
}

/// One plain HTTP/1.1 GET; the whole answer as text.
async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\n\r\n",
        addr.port()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out)).await;
    out
}

/// Whether the server closes `s` (EOF or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // a 408 or similar before closing
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_stop_the_server() {
    let limits = ConnLimits {
        header_timeout: Duration::from_secs(2),
        max_connections: 1024,
        drain_timeout: Duration::from_secs(5),
    };
    let (addr, stop, task) = start(limits).await;
    let mut idle = vec![];
    for _ in 0..400 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let t = Instant::now();
    let answer = http_get(addr, "/healthz").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "answered in {:?}",
        t.elapsed()
    );
    // The idle ones are closed by the header timeout, not held forever.
    for s in idle.iter_mut().step_by(40) {
        assert!(
            closed_within(s, Duration::from_secs(5)).await,
            "an idle connection stayed open"
        );
    }
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_header_is_closed() {
    let limits = ConnLimits {
        header_timeout: Duration::from_secs(1),
        ..ConnLimits::default()
    };
    let (addr, stop, task) = start(limits).await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        .await
        .unwrap();
    assert!(
        closed_within(&mut slow, Duration::from_secs(4)).await,
        "a half-sent header held its connection"
    );
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_get_503_with_retry_after() {
    let limits = ConnLimits {
        header_timeout: Duration::from_secs(30),
        max_connections: 4,
        drain_timeout: Duration::from_secs(5),
    };
    let (addr, stop, task) = start(limits).await;
    let mut held = vec![];
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = http_get(addr, "/healthz").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    assert_eq!(error_of(body.as_bytes()).code, "too_many_connections");
    // A slot freed is a slot for the next one.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = http_get(addr, "/healthz").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_not_delayed_by_idle_or_half_sent_requests() {
    let limits = ConnLimits {
        header_timeout: Duration::from_secs(60),
        max_connections: 64,
        drain_timeout: Duration::from_secs(60),
    };
    let (addr, stop, task) = start(limits).await;
    let _idle = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"POST /api/runs HTTP/1.1\r\nHost: localhost\r\nContent-Le")
        .await
        .unwrap();
    // A kept-alive connection that has finished one request.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(
        format!(
            "GET /healthz HTTP/1.1\r\nHost: localhost:{}\r\n\r\n",
            addr.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = [0u8; 256];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(3), task)
        .await
        .expect("shutdown waited for connections that had nothing under way")
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(closed_within(&mut half, Duration::from_secs(1)).await);
}
