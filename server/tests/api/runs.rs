//! Starting runs and following them: events, reports, refusals.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use protocol::{Event, Report, RunCreated, ServerInfo};
use tower::ServiceExt;

use crate::*;

#[tokio::test]
async fn info_lists_the_cpu_and_every_model() {
    let (status, _, body) = send(
        app(),
        Request::get("/api/info").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let info: ServerInfo = serde_json::from_slice(&body).unwrap();
    assert!(info
        .devices
        .iter()
        .any(|d| d.kind == protocol::DeviceKind::Cpu));
    assert_eq!(info.models.len(), protocol::Catalog::built_in().models().len());
    assert!(info.models.iter().all(|m| m.parameters > 0));
    // The decoders come with their shape (the browser's catalog reads team ones from it).
    let decoders: Vec<_> = info.models.iter().filter(|m| m.id.is_decoder()).collect();
    assert_eq!(decoders.len(), protocol::decoder::presets().len());
    assert!(decoders.iter().all(|m| m.decoder.as_ref().is_some_and(|d| d.config.parameters() == m.parameters)));
    assert_eq!(info.limits.max_batch, 256);
}

#[tokio::test]
async fn bad_input_gets_4xx_json_naming_the_problem() {
    let cases: [(&str, StatusCode, Option<&str>); 6] = [
        ("{not json", StatusCode::BAD_REQUEST, None),
        ("", StatusCode::BAD_REQUEST, None),
        // A well-formed name that is not served reads (a record of a removed team model
        // must still open) and is refused by the spec check.
        (
            r#"{"model": "resnet9000"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("model"),
        ),
        (r#"{"batch": -1}"#, StatusCode::BAD_REQUEST, Some("batch")),
        (
            r#"{"batch": 0}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("batch"),
        ),
        (
            r#"{"batch": 100000}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("batch"),
        ),
    ];
    for (body, want, field) in cases {
        let (status, _, bytes) = send(app(), post_run(body)).await;
        assert_eq!(status, want, "{body}");
        let err = error_of(&bytes);
        assert!(!err.message.is_empty());
        assert_eq!(err.field.as_deref(), field, "{body}: {}", err.message);
    }
    let (status, _, bytes) = send(
        app(),
        Request::get("/api/runs/nope").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_of(&bytes).code, "not_found");
    let (status, _, bytes) = send(
        app(),
        Request::get("/api/no-such-thing")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_of(&bytes).code, "not_found");
    // What axum refuses by itself is JSON too: a body over the limit, a wrong method.
    let huge = format!("{{\"model\": \"{}\"}}", "x".repeat(100 * 1024));
    let (status, _, bytes) = send(app(), post_run(&huge)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_of(&bytes).code, "body_too_large");
    let (status, headers, bytes) = send(
        app(),
        Request::delete("/api/runs").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(headers.contains_key(header::ALLOW));
    assert_eq!(error_of(&bytes).code, "method_not_allowed");
    // Still serving.
    let (status, _, _) = send(app(), Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_run_streams_its_events_and_leaves_its_report() {
    let (status, _, body) = send(
        app(),
        post_run(
            r#"{"model": "tiny_mlp", "batch": 8, "warmup": 2, "iters": 4, "grad": "no_grad"}"#,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let created: RunCreated = serde_json::from_slice(&body).unwrap();

    let req = Request::get(&created.events_url)
        .header(header::ACCEPT_ENCODING, "gzip")
        .body(Body::empty())
        .unwrap();
    let res = app().oneshot(req).await.unwrap();
    assert_eq!(res.headers()[header::CONTENT_TYPE], "text/event-stream");
    // A compressor would hold events back in its buffer: the stream must go out plain.
    assert!(!res.headers().contains_key(header::CONTENT_ENCODING));
    let events = events_of(res).await;
    let warmups = events
        .iter()
        .filter(|e| matches!(e, Event::Warmup { .. }))
        .count();
    let samples = events
        .iter()
        .filter(|e| matches!(e, Event::Sample { .. }))
        .count();
    assert_eq!((warmups, samples), (2, 4));
    let Some(Event::Done { report }) = events.last() else {
        panic!("no report: {events:?}")
    };
    assert_eq!(
        report.memory.after_release_bytes,
        report.memory.baseline_bytes
    );

    let (status, _, body) = send(
        app(),
        Request::get(format!("/api/runs/{}", created.id))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let stored: Report = serde_json::from_slice(&body).unwrap();
    assert_eq!(&stored, report.as_ref());
}

#[tokio::test]
async fn a_full_queue_answers_503_with_retry_after() {
    let worker = server::start_worker(server::worker_config(&engine_args(), 0, None)).unwrap();
    let mut state = state();
    state.dispatch = server::dispatch::Dispatch::Local(std::sync::Arc::new(worker));
    let (status, headers, body) = send(server::router(state), post_run("{}")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert_eq!(error_of(&body).code, "queue_full");
}

#[tokio::test]
async fn thousands_of_generated_bodies_get_json_answers_and_the_server_keeps_serving() {
    // A queue of 0: every well-formed spec is refused with 503 instead of running, so the
    // test exercises parsing and validation only.
    let worker = server::start_worker(server::worker_config(&engine_args(), 0, None)).unwrap();
    let mut state = state();
    state.dispatch = server::dispatch::Dispatch::Local(std::sync::Arc::new(worker));
    let router = server::router(state);
    let keys = [
        "model",
        "device",
        "batch",
        "input_size",
        "eval",
        "grad",
        "autocast",
        "warmup",
        "iters",
        "threads",
        "bogus",
    ];
    let values = [
        "0",
        "1",
        "-1",
        "8",
        "4097",
        "1e9",
        "18446744073709551616",
        "3.5",
        "true",
        "null",
        "\"\"",
        "\"tiny_mlp\"",
        "\"resnet50\"",
        "\"cuda\"",
        "\"cpu\"",
        "\"no_grad\"",
        "\"bf16\"",
        "[]",
        "{}",
        "\"\\u0000\"",
        "\"🙂\"",
    ];
    let mut rng = Lcg(42);
    let mut answered = std::collections::BTreeMap::new();
    for case in 0..3000 {
        let body = match rng.next_u64() % 8 {
            0 => {
                // Raw noise, cut JSON, nesting.
                let noise = [
                    "{",
                    "}",
                    "[",
                    "\"",
                    ":",
                    ",",
                    "null",
                    "{\"batch\":",
                    "\\",
                    " ",
                ];
                (0..rng.next_u64() % 12)
                    .map(|_| rng.pick(&noise))
                    .collect::<String>()
            }
            _ => {
                let fields: Vec<String> = (0..rng.next_u64() % 5)
                    .map(|_| format!("\"{}\": {}", rng.pick(&keys), rng.pick(&values)))
                    .collect();
                format!("{{{}}}", fields.join(", "))
            }
        };
        let (status, _, bytes) = send(router.clone(), post_run(&body)).await;
        let code = error_of(&bytes).code;
        assert!(
            status.is_client_error()
                || (status == StatusCode::SERVICE_UNAVAILABLE && code == "queue_full"),
            "case {case}: {body} -> {status} {code}"
        );
        *answered.entry((status.as_u16(), code)).or_insert(0) += 1;
    }
    // Every kind of answer was seen, and the server still serves.
    assert!(
        answered.keys().any(|(s, _)| *s == 400) && answered.keys().any(|(s, _)| *s == 422),
        "{answered:?}"
    );
    let (status, _, _) = send(
        router,
        Request::get("/healthz").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_worker_reports_memory_back_at_baseline() {
    let (_, _, body) = send(
        app(),
        post_run(r#"{"batch": 3, "iters": 2, "warmup": 1, "grad": "enabled", "eval": false}"#),
    )
    .await;
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    follow(app(), &created.events_url).await;
    let (status, _, body) = send(app(), get("/api/health")).await;
    assert_eq!(status, StatusCode::OK);
    let health: protocol::WorkerHealth = serde_json::from_slice(&body).unwrap();
    assert!(health.tasks >= 1 && health.memory_checks >= 1);
    assert_eq!(health.memory_check_failures, 0, "{health:?}");
    assert!(
        health
            .last_checks
            .iter()
            .all(|c| c.ok && c.held_bytes == c.expected_bytes),
        "{health:?}"
    );
}

#[tokio::test]
async fn run_bodies_must_be_exactly_one_json_object() {
    for body in [
        "[]",
        "[8]",
        "\"tiny_mlp\"",
        "null",
        r#"{"batch": 2} trailing"#,
        r#"{"batch": 2}{"batch": 3}"#,
        r#"{"batch": 2},"#,
    ] {
        let (status, _, bytes) = send(app(), post_run(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error_of(&bytes).code, "bad_request", "{body}");
    }
    // Whitespace around the one object is fine.
    let (status, _, _) = send(
        app(),
        post_run(" \n{\"batch\": 1, \"iters\": 1, \"warmup\": 0}\n "),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_run_that_cannot_be_recorded_fails_with_storage() {
    let dir = std::env::temp_dir().join(format!("gradless-api-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("runs.sqlite3");
    let store = std::sync::Arc::new(server::store::Store::open(&path).unwrap());
    // The disk fills up behind the server's back: every insert now fails as SQLite does
    // when it cannot grow the file.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER full BEFORE INSERT ON records
             BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END;",
        )
        .unwrap();
    let state = state().with_store(store);
    let router = server::router(state);
    let (status, _, body) = send(
        router.clone(),
        post_run(r#"{"batch": 2, "iters": 2, "warmup": 0}"#),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    let events = follow(router.clone(), &created.events_url).await;
    match events.last() {
        Some(Event::Failed { failure }) => {
            assert_eq!(failure.kind, protocol::FailureKind::Storage, "{failure:?}");
            // It says so, and why (the database's own words follow the colon).
            let (what, why) = failure.message.split_once(": ").unwrap_or_default();
            assert!(
                what.contains("could not be recorded") && !why.trim().is_empty(),
                "{}",
                failure.message
            );
        }
        other => panic!("the viewer was told {other:?}, not that the record was lost"),
    }
    // Nobody is told `done` later either: there will never be a report (410, code `failed`).
    let (status, _, body) = send(router, get(&format!("/api/runs/{}", created.id))).await;
    assert_eq!(status, StatusCode::GONE);
    let error = error_of(&body);
    assert_eq!(error.code, "failed");
    assert!(error.message.contains("could not be recorded"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run that runs out of memory keeps its record (status failed, kind out_of_memory), and
/// its permalink says so: "Failed", and why, in the budget's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_out_of_memory_keeps_a_permalink_that_says_so() {
    // A 160 MiB budget: ResNet-50 training at 448 px, batch 4, keeps gigabytes of
    // activations, and is at or below the probe batch, so it is stopped during its pass.
    let args = server::config::EngineArgs { memory_limit_mib: Some(160), ..engine_args() };
    let worker = server::start_worker(server::worker_config(&args, 4, None)).unwrap();
    let mut state = state();
    state.dispatch = server::dispatch::Dispatch::Local(std::sync::Arc::new(worker));
    let router = server::router(state);
    let (status, _, body) = send(
        router.clone(),
        post_run(r#"{"model": "resnet50", "batch": 4, "input_size": 448, "eval": false, "grad": "enabled", "warmup": 0, "iters": 1, "device": "cpu"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{}", String::from_utf8_lossy(&body));
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    let events = follow(router.clone(), &created.events_url).await;
    let message = match events.last() {
        Some(Event::Failed { failure }) if failure.kind == protocol::FailureKind::OutOfMemory => failure.message.clone(),
        other => panic!("expected out of memory, got {other:?}"),
    };
    let (status, _, body) = send(router.clone(), get(&format!("/api/records/{}", created.id))).await;
    assert_eq!(status, StatusCode::OK);
    let record: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(record["report"]["status"], "failed", "{record}");
    assert_eq!(record["report"]["failure"]["kind"], "out_of_memory", "{record}");
    let (status, _, body) = send(router, get(&format!("/runs/{}", created.id))).await;
    assert_eq!(status, StatusCode::OK);
    let page = String::from_utf8_lossy(&body);
    assert!(page.contains(r#"data-status="failed""#), "the permalink does not say failed");
    assert!(page.contains("out of memory"), "the permalink does not say out of memory");
    assert!(message.contains("out of memory"), "{message}");
}

/// Holds the device for `secs` (a long task ahead of the queue), so runs submitted now wait.
fn occupy_device(state: &server::state::AppState, secs: f64) -> tokio::task::JoinHandle<()> {
    let worker = state.dispatch.local().cloned().expect("a single-process state");
    tokio::task::spawn_blocking(move || {
        let _ = worker.call(move |_| std::thread::sleep(std::time::Duration::from_secs_f64(secs)));
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_submitters_viewer_cancels_a_queued_run() {
    let state = state_with_worker(4);
    let router = server::router(state.clone());
    let busy = occupy_device(&state, 1.5);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let spec = r#"{"batch": 1, "iters": 1, "warmup": 0}"#;
    let submit = |router: axum::Router| async move {
        let (status, _, body) = send(router, post_run(spec)).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        serde_json::from_slice::<RunCreated>(&body).unwrap()
    };
    let theirs = submit(router.clone()).await;
    let mine = submit(router.clone()).await;
    let secret = mine
        .cancel_token
        .clone()
        .expect("the submitter gets a secret");
    assert_ne!(Some(secret.as_str()), theirs.cancel_token.as_deref());
    // A stranger opens and closes the first run's stream while it waits (with a wrong
    // secret, too): nothing happens to it.
    for url in [
        theirs.events_url.clone(),
        format!("{}?cancel_token={secret}", theirs.events_url),
    ] {
        let res = router.clone().oneshot(get(&url)).await.unwrap();
        let seen = read_events(res, 1).await;
        assert!(matches!(seen[0], Event::Queued { .. }), "{seen:?}");
    }
    // The submitter of the second closes its tab while it waits: it is cancelled.
    let res = router
        .clone()
        .oneshot(get(&format!("{}?cancel_token={secret}", mine.events_url)))
        .await
        .unwrap();
    let seen = read_events(res, 1).await;
    assert!(matches!(seen[0], Event::Queued { .. }), "{seen:?}");
    busy.await.unwrap();
    let theirs_end = follow(router.clone(), &theirs.events_url).await;
    assert!(
        matches!(theirs_end.last(), Some(Event::Done { .. })),
        "a stranger's viewer cancelled someone's run: {theirs_end:?}"
    );
    let mine_end = follow(router, &mine.events_url).await;
    match mine_end.last() {
        Some(Event::Failed { failure }) => {
            assert_eq!(failure.kind, protocol::FailureKind::Cancelled)
        }
        other => panic!("the owner left but the run went on: {other:?}"),
    }
}

#[tokio::test]
async fn event_streams_are_bounded() {
    let mut state = state();
    state.streams = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
    state.max_streams = 1;
    let router = server::router(state);
    let (_, _, body) = send(
        router.clone(),
        post_run(r#"{"batch": 1, "iters": 1, "warmup": 0}"#),
    )
    .await;
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    let first = router
        .clone()
        .oneshot(get(&created.events_url))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let (status, headers, body) = send(router.clone(), get(&created.events_url)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert_eq!(error_of(&body).code, "too_many_streams");
    // The slot comes back when the stream ends.
    events_of(first).await;
    let again = router.oneshot(get(&created.events_url)).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
}
