//! Connections: accepting them, bounding them, and closing them at shutdown. `axum::serve`
//! has no header timeout, no connection limit and waits for every connection at shutdown,
//! so this is the per-connection loop it recommends writing instead, on hyper's HTTP/1.1
//! connection builder:
//!
//! - **Header timeout**: a connection that has not sent a complete request head within
//!   `header_timeout` is closed (hyper's `header_read_timeout`). hyper starts that timer
//!   whenever the connection waits for a request, so it is also the idle keep-alive
//!   timeout: a slowloris or an idle socket holds a descriptor that long at most.
//! - **Connection limit**: at most `max_connections` at once; the next ones get a
//!   `503` with `Retry-After` and a JSON body, written directly, and are closed.
//! - **Shutdown**: when `shutdown` resolves, the listener closes; connections with no
//!   response under way (idle, or a half-sent request) are dropped at once; the others
//!   finish their response (an event stream ends with its run) and close. [`serve`]
//!   returns when the last one has, or after `drain_timeout`.
//!
//! A response is "under way" from the moment the router is called until its body has been
//! sent (or dropped): [`Tracked`] counts it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// The bounds on connections (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_timeout: Duration,
    pub max_connections: usize,
    /// After shutdown begins, how long responses under way may take to finish.
    pub drain_timeout: Duration,
}

/// Connections open at once, by default: room for the default event streams
/// ([`DEFAULT_MAX_STREAMS`]) and as many page loads and API calls beside them.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(10),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            drain_timeout: Duration::from_secs(310),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves and the connections have closed
/// (see the module docs). Each request carries its peer as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) {
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors (EMFILE) and the like: wait instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Without TCP_NODELAY, Nagle's algorithm and the browser's delayed ACK hold small
        // responses (a run id, one SSE event) for ~40 ms each.
        let _ = tcp.set_nodelay(true);
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(tcp));
            continue;
        };
        let app = app.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let in_flight = Arc::new(AtomicUsize::new(0));
            let counter = in_flight.clone();
            let service = tower::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                // Counted from here, so a request the router is still working on (an
                // experiment running) is not cut off at shutdown.
                let guard = InFlight::new(counter.clone());
                let answer = app.clone().oneshot(req.map(Body::new));
                async move {
                    let res: Response<Body> = answer.await?;
                    Ok::<_, std::convert::Infallible>(res.map(|body| {
                        Body::new(Tracked {
                            body,
                            _guard: guard,
                        })
                    }))
                }
            });
            // HTTP/1.1 only: browsers speak HTTP/2 only over TLS, which a proxy in front
            // terminates (and speaks HTTP/1.1 to us); hyper's `auto` builder would wait for
            // the first bytes without any timeout to tell the versions apart.
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service))
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                    // Nothing under way (idle, or a request head still arriving): close now.
                    // Otherwise finish the response and close after it.
                    if in_flight.load(Ordering::SeqCst) > 0 {
                        conn.as_mut().graceful_shutdown();
                        let _ = conn.await;
                    }
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it has closed.
    if tokio::time::timeout(limits.drain_timeout, slots.acquire_many(max as u32))
        .await
        .is_err()
    {
        tracing::warn!("responses still under way after the drain time: closing them");
    }
}

/// The process's limit on open files (the soft `RLIMIT_NOFILE`), read from
/// `/proc/self/limits`; `None` where that file does not exist or says "unlimited".
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The answer to a connection over the limit: it is not read, only told to come back.
async fn refuse(mut tcp: TcpStream) {
    let body = crate::error::error_json(
        "too_many_connections",
        "this server has as many connections open as it allows; try again shortly",
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = tcp.write_all(response.as_bytes()).await;
        let _ = tcp.shutdown().await;
    })
    .await;
}

/// Counts a response from the router's call until its body is done.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(counter: Arc<AtomicUsize>) -> InFlight {
        counter.fetch_add(1, Ordering::SeqCst);
        InFlight(counter)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that holds its [`InFlight`] until hyper has sent (or dropped) it.
struct Tracked {
    body: Body,
    _guard: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Event streams open at once, by default: server/tests/load.rs holds a thousand viewers
/// of one run on a 2-core machine, every one admitted and served to the end (each stream
/// costs a task, a socket and hyper's buffers: tens of KB). Delivery then lags: p99 1.2 s
/// for a tiny model's burst of 104 events, clients on the same cores.
pub const DEFAULT_MAX_STREAMS: usize = 2048;

/// Connections the kernel may hold for us before we accept them. std's (and so tokio's
/// `bind`) is 128: a team's burst of page loads and event streams beyond that had SYNs
/// dropped and retried a second later (the load test saw 1 s event delays from it).
const LISTEN_BACKLOG: u32 = 1024;

/// A listening socket on `addr` with a backlog for a team (see [`LISTEN_BACKLOG`]).
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Resolves at Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
