//! What the server records: runs and experiments, their API, exports and pages.

use axum::http::{header, StatusCode};
use protocol::{Event, RunCreated};

use crate::*;

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
        1,
        "the peer's own main call is replaced by the one with the recorded run"
    );
    assert!(script.contains("sys.exit(main(RECORDED_ARGS + sys.argv[1:], recorded=RECORDED))"));
    assert!(script.contains(&format!("\\\"run_id\\\":\\\"{}\\\"", created.id)));

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
    let req = post_json("/api/pitfalls/empty-cache", r#"{"device": "cpu"}"#);
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

/// The run-to-run noise a comparison is decided against is measured by this server, also
/// across a restart: a worker started on a database of recorded repeats stamps its first run
/// with the noise measured from them.
#[test]
fn recorded_repeats_count_towards_the_next_workers_run_to_run_noise() {
    use protocol::{GradMode, ModelId, Record, RecordBody, RunSpec};
    use server::store::{RecordStore, Store};
    let spec = RunSpec {
        model: ModelId::TinyMlp,
        device: protocol::DeviceChoice::Cpu,
        batch: 4,
        grad: GradMode::NoGrad,
        warmup: 1,
        iters: 8,
        threads: Some(1),
        ..RunSpec::default()
    };
    let path = std::env::temp_dir().join(format!("gradless-noise-{}.db", std::process::id()));
    let store = Store::open(&path).unwrap();
    let first = server::start_worker(server::worker_config(&engine_args(), 4, None)).unwrap();
    for i in 0..3 {
        let report = first.measure(spec.clone(), |_| {}).unwrap();
        let record = Record { id: format!("r{i}"), body: RecordBody::Run(Box::new(report)) };
        store.save(&record).unwrap();
    }
    first.shutdown();
    // "Restart": a new worker, told what this server recorded.
    let second = server::start_worker(server::worker_config(&engine_args(), 4, None)).unwrap();
    server::dispatch::local::remember_recorded_runs(&second, &store as &dyn RecordStore);
    let report = second.measure(spec, |_| {}).unwrap();
    let noise = report.run_to_run.expect("measured from the recorded repeats");
    assert_eq!((noise.runs, noise.df), (3, 2), "{noise:?}");
    assert!(noise.sigma_log.is_finite() && noise.sigma_log >= 0.0);
    store.close();
    let _ = std::fs::remove_file(&path);
}
