//! The HTTP API driven through the router without a socket: good input gets runs and
//! reports, bad input gets 4xx JSON that names what is wrong, and the server keeps serving.

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use protocol::{ApiErrorBody, Event, Report, RunCreated, ServerInfo};
use server::config::EngineArgs;
use server::state::AppState;
use tower::ServiceExt;

fn engine_args() -> EngineArgs {
    EngineArgs {
        threads: Some(1),
        max_batch: 256,
        memory_limit_mib: None,
    }
}

/// One worker for the whole test binary: building every model for /api/info takes a while.
fn state() -> AppState {
    static STATE: OnceLock<AppState> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let worker =
                server::start_worker(server::worker_config(&engine_args(), 8, None)).unwrap();
            server::build_state(
                worker,
                std::path::Path::new("target/site"),
                "127.0.0.1:0".parse().unwrap(),
                server::state::Services::ephemeral().unwrap(),
            )
            .unwrap()
        })
        .clone()
}

fn app() -> Router {
    server::web::app(state())
}

async fn send(app: Router, req: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let res = app.oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, headers, body)
}

fn post_run(body: &str) -> Request<Body> {
    Request::post("/api/runs")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn error_of(body: &[u8]) -> protocol::ApiError {
    serde_json::from_slice::<ApiErrorBody>(body)
        .unwrap_or_else(|e| panic!("not a JSON error ({e}): {}", String::from_utf8_lossy(body)))
        .error
}

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
    assert_eq!(info.models.len(), protocol::ModelId::ALL.len());
    assert!(info.models.iter().all(|m| m.parameters > 0));
    assert_eq!(info.limits.max_batch, 256);
}

#[tokio::test]
async fn bad_input_gets_4xx_json_naming_the_problem() {
    let cases: [(&str, StatusCode, Option<&str>); 6] = [
        ("{not json", StatusCode::BAD_REQUEST, None),
        ("", StatusCode::BAD_REQUEST, None),
        (
            r#"{"model": "resnet9000"}"#,
            StatusCode::BAD_REQUEST,
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
    state.worker = std::sync::Arc::new(worker);
    let (status, headers, body) = send(server::web::app(state), post_run("{}")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert_eq!(error_of(&body).code, "queue_full");
}

#[tokio::test]
async fn the_page_is_readable_before_hydration() {
    let (status, _, body) = send(
        app(),
        Request::get("/?model=resnet18&grad=no_grad&batch=16")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let html = String::from_utf8(body).unwrap();
    // The settings from the URL are rendered, and so are the explanation and the snippet.
    assert!(html.contains("torch.no_grad()"), "grad explanation missing");
    assert!(
        html.contains("torch.randn(16, 3, 224, 224"),
        "snippet does not follow the URL"
    );
    assert!(
        html.contains("/echarts.min.js") && html.contains("/pkg/gradless"),
        "assets not linked"
    );
    assert!(!html.contains("cdn."), "no CDN anywhere");
    // Pages go out compressed to browsers that ask.
    let req = Request::get("/")
        .header(header::ACCEPT_ENCODING, "gzip")
        .body(Body::empty())
        .unwrap();
    let (_, headers, _) = send(app(), req).await;
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
}

#[tokio::test]
async fn pitfalls_are_listed_and_run_with_a_verdict() {
    let (status, _, body) = send(
        app(),
        Request::get("/api/pitfalls").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let cards: Vec<protocol::PitfallInfo> = serde_json::from_slice(&body).unwrap();
    assert_eq!(cards.len(), 13);
    let req = Request::post("/api/pitfalls/nograd-not-eval")
        .body(Body::from(r#"{"device": "cpu"}"#))
        .unwrap();
    let (status, _, body) = send(app(), req).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let report: protocol::PitfallReport = serde_json::from_slice(&body).unwrap();
    assert_eq!(report.verdict, protocol::Verdict::Confirmed);
    assert!(!report.figures.is_empty());
    let (status, _, body) = send(
        app(),
        Request::post("/api/pitfalls/nope")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_of(&body).code, "not_found");
    let req = Request::post("/api/pitfalls/warm-up")
        .body(Body::from(r#"{"devise": "cpu"}"#))
        .unwrap();
    let (status, _, body) = send(app(), req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).message.contains("devise"));
}

/// A small deterministic generator, so a failure names a reproducible case.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.next() as usize % items.len()]
    }
}

#[tokio::test]
async fn thousands_of_generated_bodies_get_json_answers_and_the_server_keeps_serving() {
    // A queue of 0: every well-formed spec is refused with 503 instead of running, so the
    // test exercises parsing and validation only.
    let worker = server::start_worker(server::worker_config(&engine_args(), 0, None)).unwrap();
    let mut state = state();
    state.worker = std::sync::Arc::new(worker);
    let router = server::web::app(state);
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
        let body = match rng.next() % 8 {
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
                (0..rng.next() % 12)
                    .map(|_| rng.pick(&noise))
                    .collect::<String>()
            }
            _ => {
                let fields: Vec<String> = (0..rng.next() % 5)
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

/// Follows a run's events to the end (through the router) and returns them.
async fn follow(router: Router, events_url: &str) -> Vec<Event> {
    let res = router
        .oneshot(Request::get(events_url).body(Body::empty()).unwrap())
        .await
        .unwrap();
    events_of(res).await
}

/// The events of an SSE response, read until the terminal one.
async fn events_of(res: axum::response::Response) -> Vec<Event> {
    let mut body = res.into_body();
    let (mut text, mut events) = (String::new(), vec![]);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
        while let Some(end) = text.find("\n\n") {
            let message: String = text.drain(..end + 2).collect();
            events.extend(
                message
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .map(|j| serde_json::from_str::<Event>(j).unwrap()),
            );
        }
        if events.last().is_some_and(Event::is_terminal) {
            break;
        }
    }
    events
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

#[tokio::test]
async fn finished_runs_are_recorded_and_exported() {
    let (status, _, body) = send(
        app(),
        post_run(r#"{"model": "tiny_mlp", "batch": 4, "warmup": 1, "iters": 3}"#),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    let events = follow(app(), &created.events_url).await;
    let Some(Event::Done { report }) = events.last() else {
        panic!("{events:?}")
    };

    // The record is in the database under the run's id, whole.
    let record = state().store.get(&created.id).unwrap().expect("recorded");
    assert_eq!(record.run(), Some(report.as_ref()));
    let (status, _, body) = send(app(), get(&format!("/api/records/{}", created.id))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<protocol::Record>(&body).unwrap(),
        record
    );
    let (status, _, body) = send(app(), get("/api/records?kind=run&limit=1000")).await;
    assert_eq!(status, StatusCode::OK);
    let list: Vec<protocol::RecordSummary> = serde_json::from_slice(&body).unwrap();
    assert!(list
        .iter()
        .any(|s| s.id == created.id && s.p50_ms == Some(report.latency_ms.p50)));

    // Exports: a download each, with the run's numbers in it.
    let (status, headers, body) = send(
        app(),
        get(&format!("/api/records/{}/export/csv", created.id)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers[header::CONTENT_DISPOSITION]
        .to_str()
        .unwrap()
        .contains(".csv"));
    let csv = String::from_utf8(body).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 1 + 3,
        "header, one warm-up row, three timed rows:\n{csv}"
    );
    assert!(csv.lines().skip(2).all(|l| l.starts_with("timed,")));
    let (status, _, body) = send(
        app(),
        get(&format!("/api/records/{}/export/py", created.id)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let script = String::from_utf8(body).unwrap();
    assert!(
        script.contains("\"--model=tiny_mlp\", \"--batch=4\"") && script.contains("\"--iters=3\""),
        "{}",
        &script[..400]
    );
    assert_eq!(
        script.matches("sys.exit(main(").count(),
        0,
        "the peer's own main call is replaced"
    );

    // Reading the page needs no hydration: the figures are in the HTML.
    let (status, _, body) = send(app(), get(&format!("/runs/{}", created.id))).await;
    assert_eq!(status, StatusCode::OK);
    let html = String::from_utf8(body).unwrap();
    assert!(html.contains(&format!(
        "{:.3} / {:.3} / {:.3} ms",
        report.latency_ms.p50, report.latency_ms.p95, report.latency_ms.p99
    )));
    assert!(html.contains(&report.env.device_name) && html.contains("Recorded "));
    let (status, _, body) = send(app(), get("/runs")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        String::from_utf8(body)
            .unwrap()
            .contains(&format!("href=\"/runs/{}\"", created.id)),
        "listed on /runs"
    );

    // Bad ids and formats are 4xx JSON.
    for (uri, want) in [
        ("/api/records/0123456789abcdef", StatusCode::NOT_FOUND),
        ("/api/records/..%2F..%2Fetc", StatusCode::NOT_FOUND),
        ("/api/records?limit=0", StatusCode::BAD_REQUEST),
        ("/api/records?kind=cat", StatusCode::BAD_REQUEST),
    ] {
        let (status, _, body) = send(app(), get(uri)).await;
        assert_eq!(status, want, "{uri}");
        error_of(&body);
    }
    let (status, _, body) = send(
        app(),
        get(&format!("/api/records/{}/export/xml", created.id)),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&body).field.as_deref(), Some("format"));
}

#[tokio::test]
async fn experiments_are_recorded_with_a_permalink() {
    let req = Request::post("/api/pitfalls/empty-cache")
        .body(Body::from(r#"{"device": "cpu"}"#))
        .unwrap();
    let (status, _, body) = send(app(), req).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let report: protocol::PitfallReport = serde_json::from_slice(&body).unwrap();
    let id = report.record_id.clone().expect("a record id");
    let (status, _, body) = send(app(), get(&format!("/api/records/{id}"))).await;
    assert_eq!(status, StatusCode::OK);
    let record: protocol::Record = serde_json::from_slice(&body).unwrap();
    assert_eq!(record.kind(), protocol::RecordKind::Pitfall);
    // A run's endpoint says what it is instead; an experiment has no single script.
    let (status, _, body) = send(app(), get(&format!("/api/runs/{id}"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(error_of(&body).message.contains("pitfall"));
    let (status, _, _) = send(app(), get(&format!("/api/records/{id}/export/py"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _, body) = send(app(), get(&format!("/api/records/{id}/export/csv"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(String::from_utf8(body)
        .unwrap()
        .starts_with("series,unit,x,y\n"));
}

#[tokio::test]
async fn starting_work_can_need_a_token_but_reading_never_does() {
    let mut state = state();
    state.guard = std::sync::Arc::new(server::guard::Guard::new(
        Some("let-me-in".into()),
        0,
        false,
    ));
    let router = server::web::app(state);
    let (status, headers, body) = send(router.clone(), post_run("{}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.contains_key(header::WWW_AUTHENTICATE));
    assert_eq!(error_of(&body).code, "unauthorized");
    let wrong = Request::post("/api/runs")
        .header(header::AUTHORIZATION, "Bearer let-me-out")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        send(router.clone(), wrong).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (status, _, _) = send(
        router.clone(),
        Request::post("/api/pitfalls/warm-up")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let right = Request::post("/api/runs")
        .header(header::AUTHORIZATION, "Bearer let-me-in")
        .body(Body::from(r#"{"batch": 2, "iters": 1, "warmup": 0}"#))
        .unwrap();
    let (status, _, body) = send(router.clone(), right).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    assert!(follow(router.clone(), &created.events_url)
        .await
        .last()
        .is_some_and(|e| matches!(e, Event::Done { .. })));
    for uri in [
        "/api/info",
        "/api/records",
        "/",
        "/embed/lab",
        &format!("/api/runs/{}", created.id),
    ] {
        assert_eq!(
            send(router.clone(), get(uri)).await.0,
            StatusCode::OK,
            "{uri}"
        );
    }
}

#[tokio::test]
async fn each_client_gets_its_share_of_runs() {
    let mut state = state();
    state.guard = std::sync::Arc::new(server::guard::Guard::new(None, 2, true));
    let router = server::web::app(state);
    let from = |ip: &str, body: &str| {
        Request::post("/api/runs")
            .header("x-forwarded-for", ip)
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let spec = r#"{"batch": 1, "iters": 1, "warmup": 0}"#;
    assert_eq!(
        send(router.clone(), from("192.0.2.1", spec)).await.0,
        StatusCode::ACCEPTED
    );
    // Invalid specs are not charged: they never reach the device.
    assert_eq!(
        send(router.clone(), from("192.0.2.1", r#"{"batch": 0}"#))
            .await
            .0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        send(router.clone(), from("192.0.2.1", spec)).await.0,
        StatusCode::ACCEPTED
    );
    let (status, headers, body) = send(router.clone(), from("192.0.2.1", spec)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        headers[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert!(error_of(&body).message.contains("per minute"));
    assert_eq!(
        send(router.clone(), from("192.0.2.2", spec)).await.0,
        StatusCode::ACCEPTED,
        "another client"
    );
}

#[tokio::test]
async fn only_embeds_may_be_framed_by_other_origins() {
    let mut state = state();
    state.embed_csp = server::config::frame_ancestors("https://docs.example.com")
        .unwrap()
        .into();
    let router = server::web::app(state);
    for uri in [
        "/embed/lab?lock=model&hide=snippet",
        "/embed/pitfalls/warm-up",
        "/embed/runs/0123456789abcdef",
    ] {
        let (status, headers, _) = send(router.clone(), get(uri)).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            "frame-ancestors 'self' https://docs.example.com",
            "{uri}"
        );
    }
    for uri in ["/", "/pitfalls", "/api/info"] {
        let (_, headers, _) = send(router.clone(), get(uri)).await;
        assert_eq!(
            headers[header::CONTENT_SECURITY_POLICY],
            "frame-ancestors 'self'",
            "{uri}"
        );
    }
    // The embed renders without the site's navigation, with its controls locked.
    let (_, _, body) = send(router, get("/embed/lab?lock=model&hide=snippet")).await;
    let html = String::from_utf8(body).unwrap();
    assert!(
        !html.contains("class=\"top\""),
        "no site header in an embed"
    );
    assert!(html.contains("open the full page"));
    assert!(!html.contains("The same in PyTorch"), "hidden snippet");
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
