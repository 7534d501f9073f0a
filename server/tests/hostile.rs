//! The hostile neighbour: 10,000 generated requests mixing valid and invalid runs and
//! experiments, oversized batches and bodies, cross-origin pages, wrong `Host`s and wrong
//! content types, against a server with a 2 GiB memory budget. Every request must get a
//! JSON answer, the server must be alive afterwards, its resident memory (sampled from
//! /proc/self/status) must stay under budget + 1 GiB, and a normal run afterwards must
//! give the same figures as before (its peak above baseline identical).
//!
//! Tractable on 2 cores: valid runs use the tiny model with few iterations, the queue
//! holds 2, the rate limit bounds how much work is accepted, and the requests go through
//! the router 32 at a time. `GRADLESS_SOAK_BOMBS=1` adds large image-model runs and
//! experiments with huge batches, which only a budget that refuses up front keeps cheap.
//!
//! The figures are printed and written to `$CARGO_TARGET_DIR/gradless-hostile.json`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use futures::StreamExt;
use http_body_util::BodyExt;
use protocol::{Event, RunCreated};
use server::config::EngineArgs;
use tower::ServiceExt;

const REQUESTS: usize = 10_000;
const BUDGET_MIB: u64 = 2048;
const IN_FLIGHT: usize = 32;
/// Nothing may take longer than this; a hang fails the test instead of stalling CI.
const DEADLINE: Duration = Duration::from_secs(600);

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

use common::Lcg;

/// One generated request and what kind it is (for the tally).
fn generate(rng: &mut Lcg, bombs: bool) -> (&'static str, Request<Body>) {
    let models: &[&str] = if bombs {
        &[
            "\"tiny_mlp\"",
            "\"resnet50\"",
            "\"transformer\"",
            "\"nope\"",
            "7",
        ]
    } else {
        &["\"tiny_mlp\"", "\"nope\"", "7"]
    };
    let batches = ["0", "1", "8", "65", "1024", "100000", "-3", "\"8\""];
    let cards = [
        "warm-up",
        "empty-cache",
        "nograd-and-dropout",
        "nope",
        "..%2F..%2Fetc",
    ];
    let (kind, uri, body) = match rng.next_u64() % 10 {
        0..=3 => {
            let mut fields = vec![format!("\"model\": {}", rng.pick(models))];
            if !rng.next_u64().is_multiple_of(4) {
                fields.push(format!("\"batch\": {}", rng.pick(&batches)));
            }
            fields.push(format!("\"iters\": {}", rng.next_u64() % 3 + 1));
            fields.push(format!("\"warmup\": {}", rng.next_u64() % 2));
            if rng.next_u64().is_multiple_of(3) {
                fields.push("\"grad\": \"enabled\", \"eval\": false".into());
            }
            if rng.next_u64().is_multiple_of(8) {
                fields.push(format!("\"threads\": {}", rng.pick(&["1", "256", "0"])));
            }
            (
                "run",
                "/api/runs".to_string(),
                format!("{{{}}}", fields.join(", ")),
            )
        }
        4 | 5 => {
            let card = rng.pick(&cards);
            let batch = if bombs {
                rng.pick(&batches)
            } else {
                rng.pick(&["0", "-3", "\"8\""])
            };
            let body = match rng.next_u64() % 3 {
                0 => String::new(),
                1 => r#"{"device": "cpu"}"#.into(),
                _ => format!(r#"{{"device": "cpu", "batch": {batch}}}"#),
            };
            ("experiment", format!("/api/pitfalls/{card}"), body)
        }
        6 => {
            let body = rng.pick(&["[]", "{} trailing", "{\"batch\":", "null", "{\"bogus\": 1}"]);
            ("malformed", "/api/runs".into(), body.to_string())
        }
        7 => (
            "oversized",
            "/api/runs".into(),
            format!("{{\"model\": \"{}\"}}", "x".repeat(70 * 1024)),
        ),
        _ => (
            "foreign",
            "/api/runs".into(),
            r#"{"batch": 1, "iters": 1}"#.into(),
        ),
    };
    let mut req = Request::post(uri);
    req = match (kind, rng.next_u64() % 4) {
        ("foreign", 0) => req.header(header::ORIGIN, "http://evil.example"),
        ("foreign", 1) => req.header(header::HOST, "evil.example:3000"),
        ("foreign", 2) => req.header(header::CONTENT_TYPE, "text/plain"),
        ("foreign", _) => req
            .header(header::ORIGIN, "null")
            .header(header::CONTENT_TYPE, "application/json"),
        _ => req.header(header::CONTENT_TYPE, "application/json"),
    };
    (kind, req.body(Body::from(body)).unwrap())
}

/// A normal run, through a router without a rate limit: its peak above baseline.
async fn reference_run(router: axum::Router) -> u64 {
    let spec = r#"{"model": "tiny_mlp", "batch": 8, "warmup": 1, "iters": 3, "grad": "enabled"}"#;
    let req = Request::post("/api/runs")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(spec))
        .unwrap();
    let res = router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    let created: RunCreated =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    // The queue may be full of the soak's runs: wait for this one like a viewer would.
    let res = router
        .oneshot(
            Request::get(&created.events_url)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let (mut body, mut reader, mut last) = (res.into_body(), common::SseReader::default(), None);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            last = reader.push(&data).pop().or(last);
        }
        if last.as_ref().is_some_and(Event::is_terminal) {
            break;
        }
    }
    match last {
        Some(Event::Done { report }) => report.memory.peak_above_baseline_bytes,
        other => panic!("the reference run ended with {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_neighbour_cannot_take_the_server_down() {
    let bombs = std::env::var("GRADLESS_SOAK_BOMBS").is_ok_and(|v| v == "1");
    let engine = EngineArgs {
        threads: Some(1),
        max_batch: 64,
        memory_limit_mib: Some(BUDGET_MIB),
        models_dir: None,
        hf_cache: false,
        quality_text: None,
        python: None,
    };
    let worker = server::start_worker(server::worker_config(
        &engine,
        2,
        Some(Duration::from_secs(20)),
    ))
    .unwrap();
    let mut services = server::state::Services::ephemeral().unwrap();
    services.guard = server::access::Guard::new(None, 30, 0);
    let state = server::build_state(
        worker,
        std::path::Path::new("target/site"),
        "127.0.0.1:0".parse().unwrap(),
        services,
    )
    .unwrap();
    let hostile = server::router(state.clone());
    let mut calm_state = state.clone();
    calm_state.guard = Arc::new(server::access::Guard::open());
    let calm = server::router(calm_state);

    let peak = Arc::new(AtomicU64::new(rss_bytes()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_bytes(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let before = reference_run(calm.clone()).await;
    let rss_before = rss_bytes();

    let started = Instant::now();
    let mut rng = Lcg(0x5eed);
    let requests: Vec<_> = (0..REQUESTS).map(|_| generate(&mut rng, bombs)).collect();
    let answers = tokio::time::timeout(
        DEADLINE,
        futures::stream::iter(requests.into_iter().enumerate())
            .map(|(i, (kind, req))| {
                let router = hostile.clone();
                async move {
                    let res = router.oneshot(req).await.unwrap();
                    let status = res.status().as_u16();
                    let json = res
                        .headers()
                        .get(header::CONTENT_TYPE)
                        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
                    let bytes = res.into_body().collect().await.unwrap().to_bytes();
                    let parsed = serde_json::from_slice::<serde_json::Value>(&bytes).is_ok();
                    assert!(
                        json && parsed,
                        "request {i} ({kind}) got {status} without a JSON answer: {}",
                        String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                    );
                    // Accepted runs are left to run; nobody follows them.
                    (kind, status)
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the soak went past its deadline: something hung");
    let soak = started.elapsed();

    // Alive: it answers, and a normal run gives the same figures as before the soak.
    let res = calm
        .clone()
        .oneshot(Request::get("/api/health").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let after = reference_run(calm).await;
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak_rss = peak.load(Ordering::Relaxed);

    let mut tally = std::collections::BTreeMap::<String, u32>::new();
    for (kind, status) in &answers {
        *tally.entry(format!("{kind} {status}")).or_default() += 1;
    }
    let report = serde_json::json!({
        "requests": answers.len(), "bombs": bombs, "budget_mib": BUDGET_MIB,
        "answers": tally, "soak_s": soak.as_secs_f64(),
        "rss_mib": {"before": rss_before / (1 << 20), "peak": peak_rss / (1 << 20)},
        "reference_peak_above_baseline_bytes": {"before": before, "after": after},
    });
    println!("hostile: {report}");
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        let _ = std::fs::write(
            std::path::Path::new(&dir).join("gradless-hostile.json"),
            report.to_string(),
        );
    }
    assert_eq!(answers.len(), REQUESTS);
    assert_eq!(before, after, "a normal run's peak changed after the soak");
    assert!(
        peak_rss <= (BUDGET_MIB + 1024) << 20,
        "resident memory reached {} MiB (budget {BUDGET_MIB} MiB + 1 GiB)",
        peak_rss >> 20
    );
    // Every kind of refusal was exercised, and some work was accepted.
    for (needle, what) in [
        (" 400", "malformed bodies"),
        (" 413", "oversized bodies"),
        (" 403", "foreign origins"),
        (" 421", "wrong hosts"),
        (" 415", "wrong content types"),
        (" 422", "oversized batches"),
        (" 404", "unknown pitfalls"),
        ("run 202", "accepted runs"),
    ] {
        assert!(
            tally.keys().any(|k| k.contains(needle)),
            "no {what}: {tally:?}"
        );
    }
}
