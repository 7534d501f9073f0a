//! Load on loopback, bounded in time and count: many browsers follow runs over SSE while
//! more runs are submitted than the queue holds. Every request must be served or refused
//! with 503 (never hang), every viewer must see its run to the end, and the delay from the
//! worker emitting an event to a viewer reading it off the socket is reported (p50/p99).
//!
//! A second test holds a thousand viewers of one run on one server (as many as the stream
//! limit it configures, all admitted; the next ones refused with 503) and reports the
//! delivery delay and the number held.
//!
//! The figures are printed and written to `$CARGO_TARGET_DIR/gradless-load.json` and
//! `gradless-viewers.json`. The two tests take turns (they share the machine's two cores).

mod common;

use std::time::{Duration, Instant};

use axum::body::Body;
use http_body_util::BodyExt;
use hyper::Request;
use hyper_util::rt::TokioIo;
use protocol::stats::percentile;
use protocol::{Event, RunCreated};
use server::config::EngineArgs;

const RUNS: usize = 24;
const QUEUE: usize = 6;
const VIEWERS_PER_RUN: usize = 24;
const ITERS: usize = 40;
const LATE_VIEWERS: usize = 32;
/// Nothing may take longer than this; a hang fails the test instead of stalling CI.
const DEADLINE: Duration = Duration::from_secs(120);

async fn request(addr: std::net::SocketAddr, req: Request<Body>) -> (u16, hyper::body::Incoming) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).ok();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let res = sender.send_request(req).await.expect("response");
    (res.status().as_u16(), res.into_body())
}

/// Reads an SSE stream to its terminal event; returns when it connected, and each event's
/// index and arrival time.
async fn view(addr: std::net::SocketAddr, id: String) -> (Instant, Vec<(usize, Instant, Event)>) {
    let connected = Instant::now();
    let req = Request::get(format!("/api/runs/{id}/events"))
        .header("host", "localhost")
        .body(Body::empty())
        .unwrap();
    let (status, mut body) = request(addr, req).await;
    assert_eq!(status, 200, "viewer of {id}");
    let (mut reader, mut out) = (common::SseReader::default(), Vec::new());
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("stream");
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let now = Instant::now();
        for event in reader.push(&data) {
            out.push((out.len(), now, event));
        }
        if out.last().is_some_and(|(_, _, e)| e.is_terminal()) {
            break;
        }
    }
    (connected, out)
}

/// The tests in this file take turns: each measures delays, which the other would inflate.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A server's state with a one-thread CPU worker whose queue holds `queue` runs.
fn state(queue: usize, services: server::state::Services) -> server::state::AppState {
    let engine = EngineArgs {
        threads: Some(1),
        max_batch: 64,
        memory_limit_mib: None,
        models_dir: None,
        hf_cache: false,
        quality_text: None,
        python: None,
    };
    let worker = server::start_worker(server::worker_config(
        &engine,
        queue,
        Some(Duration::from_secs(60)),
    ))
    .unwrap();
    server::build_state(
        worker,
        std::path::Path::new("target/site"),
        "127.0.0.1:0".parse().unwrap(),
        services,
    )
    .unwrap()
}

/// Serves `state` on a loopback port (for the rest of the test) and returns the address.
fn serve(state: server::state::AppState, limits: server::conn::ConnLimits) -> std::net::SocketAddr {
    let listener = server::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server::conn::serve(
        listener,
        server::router(state),
        limits,
        std::future::pending(),
    ));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_viewers_and_a_full_queue_on_loopback() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let state = state(QUEUE, server::state::Services::ephemeral().unwrap());
    let runs = state.runs.clone();
    let addr = serve(state, server::conn::ConnLimits::default());

    let started = Instant::now();
    let outcome = tokio::time::timeout(DEADLINE, async move {
        // All runs at once: the queue takes QUEUE (plus the one running), the rest get 503.
        let spec =
            format!(r#"{{"model": "tiny_mlp", "batch": 64, "warmup": 2, "iters": {ITERS}}}"#);
        let posts = (0..RUNS).map(|_| {
            let spec = spec.clone();
            async move {
                let req = Request::post("/api/runs")
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .body(Body::from(spec))
                    .unwrap();
                let (status, body) = request(addr, req).await;
                let bytes = body.collect().await.unwrap().to_bytes();
                (status, bytes)
            }
        });
        let answers = futures::future::join_all(posts).await;
        let mut accepted = vec![];
        let mut refused = 0;
        for (status, bytes) in answers {
            match status {
                202 => accepted.push(serde_json::from_slice::<RunCreated>(&bytes).unwrap().id),
                503 => {
                    let e: protocol::ApiErrorBody = serde_json::from_slice(&bytes).unwrap();
                    assert_eq!(e.error.code, "queue_full");
                    refused += 1;
                }
                other => panic!("POST answered {other}: {}", String::from_utf8_lossy(&bytes)),
            }
        }
        // Viewers for every accepted run, all connected at once, plus late ones that
        // join runs already under way (they get the replay, then live events).
        let mut tasks = vec![];
        for id in &accepted {
            for _ in 0..VIEWERS_PER_RUN {
                tasks.push(tokio::spawn(view(addr, id.clone())));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in 0..LATE_VIEWERS {
            tasks.push(tokio::spawn(view(
                addr,
                accepted[i % accepted.len()].clone(),
            )));
        }
        let mut seen = vec![];
        for t in tasks {
            seen.push(t.await.expect("viewer task"));
        }
        (accepted, refused, seen)
    })
    .await;
    let (accepted, refused, seen) =
        outcome.expect("the load test went past its deadline: something hung");
    let wall = started.elapsed();

    assert_eq!(accepted.len() + refused, RUNS);
    assert!(
        refused > 0,
        "more runs than the queue holds must be refused"
    );
    assert!(
        accepted.len() > QUEUE / 2,
        "the queue accepted only {}",
        accepted.len()
    );

    // Every viewer saw its run finish, with the same events in the same order; the delay of
    // live events (not the replayed backlog) goes into the figures.
    let mut delays = vec![];
    let mut events = 0;
    for (i, (connected, stream)) in seen.iter().enumerate() {
        let id = &accepted[if i < accepted.len() * VIEWERS_PER_RUN {
            i / VIEWERS_PER_RUN
        } else {
            (i - accepted.len() * VIEWERS_PER_RUN) % accepted.len()
        }];
        let run = runs.get(id).expect("run known");
        let last = &stream.last().expect("events").2;
        assert!(
            matches!(last, Event::Done { .. }),
            "viewer {i} of {id} ended with {last:?}"
        );
        let samples = stream
            .iter()
            .filter(|(_, _, e)| matches!(e, Event::Sample { .. }))
            .count();
        assert_eq!(samples, ITERS, "viewer {i} missed samples");
        for (index, received, event) in stream {
            assert_eq!(
                Some(event),
                run.get(*index).as_ref(),
                "viewer {i}: event {index} differs"
            );
            let pushed = run.pushed_at(*index).expect("pushed");
            // Replayed events were pushed before the viewer connected: not a delivery delay.
            if pushed >= *connected {
                delays.push(received.saturating_duration_since(pushed).as_secs_f64() * 1000.0);
            }
            events += 1;
        }
    }
    delays.sort_by(f64::total_cmp);
    let (p50, p99, max) = (
        percentile(&delays, 50.0),
        percentile(&delays, 99.0),
        *delays.last().unwrap(),
    );
    let report = serde_json::json!({
        "runs_submitted": RUNS, "accepted": accepted.len(), "refused_503": refused,
        "viewers": seen.len(), "events_delivered": events,
        "event_delay_ms": {"p50": p50, "p99": p99, "max": max},
        "wall_s": wall.as_secs_f64(),
    });
    println!("load: {report}");
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        let _ = std::fs::write(
            std::path::Path::new(&dir).join("gradless-load.json"),
            report.to_string(),
        );
    }
    // Generous against the ~10-60 ms seen on a busy 2-core machine, and well under the 1 s a
    // dropped SYN costs: with std's listen backlog of 128 this burst overflowed the accept
    // queue and p99 went to ~900 ms (see server::listen).
    assert!(p99 < 500.0, "p99 event delay {p99:.1} ms");
}

/// Viewers of one run, all connected before it starts.
const VIEWERS: usize = 1000;
/// Viewers beyond the stream limit: each must be refused with 503.
const OVER_LIMIT: usize = 8;
const VIEWERS_ITERS: usize = 100;

/// Reads an SSE stream to its end; returns each message's `data` with its arrival time.
async fn view_raw(addr: std::net::SocketAddr, id: String) -> Result<Vec<(String, Instant)>, u16> {
    let req = Request::get(format!("/api/runs/{id}/events"))
        .header("host", "localhost")
        .body(Body::empty())
        .unwrap();
    let (status, mut body) = request(addr, req).await;
    if status != 200 {
        return Err(status);
    }
    // The payloads only, parsed later: the thousand clients share the two cores with the
    // server, so the client's own parsing must not be what the delay measures.
    let (mut reader, mut out) = (common::SseReader::default(), Vec::new());
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("stream").into_data() else {
            continue;
        };
        let now = Instant::now();
        out.extend(reader.push_data(&data).into_iter().map(|json| (json, now)));
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_viewers_of_one_run() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let services = server::state::Services {
        max_streams: VIEWERS,
        ..server::state::Services::ephemeral().unwrap()
    };
    let state = state(4, services);
    let runs = state.runs.clone();
    let worker = state.dispatch.local().cloned().expect("a single-process server has its worker");
    let addr = serve(
        state,
        server::conn::ConnLimits {
            // Room for every viewer and the requests beside them: only the stream limit
            // may refuse a viewer here.
            max_connections: VIEWERS + OVER_LIMIT + 64,
            ..server::conn::ConnLimits::default()
        },
    );

    // The device thread is held until every viewer is connected, so the run's events are
    // all delivered live to a thousand open streams.
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let holding = tokio::task::spawn_blocking(move || worker.call(move |_| {
        let _ = hold.recv();
    }));
    let outcome = tokio::time::timeout(DEADLINE, async move {
        let spec = format!(
            r#"{{"model": "tiny_mlp", "batch": 64, "warmup": 2, "iters": {VIEWERS_ITERS}}}"#
        );
        let req = Request::post("/api/runs")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Body::from(spec))
            .unwrap();
        let (status, body) = request(addr, req).await;
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(status, 202, "{}", String::from_utf8_lossy(&bytes));
        let id = serde_json::from_slice::<RunCreated>(&bytes).unwrap().id;
        let run = runs.get(&id).expect("run known");

        let connecting = Instant::now();
        let viewers: Vec<_> = (0..VIEWERS)
            .map(|_| tokio::spawn(view_raw(addr, id.clone())))
            .collect();
        // Every viewer has its stream once it has read the `queued` event: wait for the
        // server to count them all.
        while run.viewers() < VIEWERS {
            assert!(
                connecting.elapsed() < Duration::from_secs(60),
                "only {} viewers connected",
                run.viewers()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let connect_s = connecting.elapsed().as_secs_f64();
        let all_connected = Instant::now();
        assert!(
            !run.has_started(),
            "the run started before its viewers were connected"
        );
        // At the limit, the next viewers are refused, in words, and the held ones stay.
        for _ in 0..OVER_LIMIT {
            assert_eq!(
                view_raw(addr, id.clone()).await.err(),
                Some(503),
                "a viewer over the stream limit"
            );
        }
        let held_at_start = run.viewers();
        release.send(()).unwrap();
        let mut seen = vec![];
        for v in viewers {
            seen.push(
                v.await
                    .expect("viewer task")
                    .expect("every viewer below the limit is admitted"),
            );
        }
        (id, run, connect_s, all_connected, held_at_start, seen)
    })
    .await;
    let (id, run, connect_s, all_connected, held, seen) =
        outcome.expect("the viewers test went past its deadline: something hung");
    holding.await.unwrap().unwrap();

    // Every viewer saw the whole run, byte for byte the events the server recorded; the
    // delay counts the events pushed after all viewers were connected (the run's own, from
    // `started` on): live, not replayed.
    let mut delays = vec![];
    let total = seen[0].len();
    assert!(total >= VIEWERS_ITERS + 3, "{id}: only {total} events");
    for (i, stream) in seen.iter().enumerate() {
        assert_eq!(
            stream.len(),
            total,
            "viewer {i} saw {} events of {total}",
            stream.len()
        );
        for (index, (json, received)) in stream.iter().enumerate() {
            let sent = run.json(index).expect("event recorded");
            assert_eq!(json, &sent, "viewer {i}: event {index} differs");
            let pushed = run.pushed_at(index).expect("pushed");
            if pushed >= all_connected {
                delays.push(received.saturating_duration_since(pushed).as_secs_f64() * 1000.0);
            }
        }
        assert!(
            stream.last().unwrap().0.contains(r#""type":"done""#),
            "viewer {i} did not see the run finish"
        );
    }
    // started, the warm-up and timed samples, done: each delivered live to every viewer.
    assert!(
        delays.len() >= VIEWERS * (VIEWERS_ITERS + 2),
        "only {} live deliveries",
        delays.len()
    );
    delays.sort_by(f64::total_cmp);
    let (p50, p99, max) = (
        percentile(&delays, 50.0),
        percentile(&delays, 99.0),
        *delays.last().unwrap(),
    );
    let report = serde_json::json!({
        "viewers_held": held, "stream_limit": VIEWERS, "refused_over_limit": OVER_LIMIT,
        "connect_all_s": connect_s, "events_per_viewer": total, "live_events_delivered": delays.len(),
        "event_delay_ms": {"p50": p50, "p99": p99, "max": max},
    });
    println!("viewers: {report}");
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        let _ = std::fs::write(
            std::path::Path::new(&dir).join("gradless-viewers.json"),
            report.to_string(),
        );
    }
    assert_eq!(held, VIEWERS, "viewers held at once");
    // A hang guard, not a benchmark (timings are reported, not asserted): a stalled stream
    // shows as tens of seconds. (Measured with the test's own thousand clients on the
    // same two cores: p99 ~0.4 s when each event was a write of its own per viewer,
    // 84–160 ms at load 8 once a viewer behind catches up in one write.)
    assert!(p99 < 10_000.0, "p99 event delay {p99:.1} ms");
}
