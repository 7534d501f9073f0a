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
        ["\"--model=tiny_mlp\"", "\"--batch=4\"", "\"--iters=3\""].iter().all(|a| script.contains(a)),
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

/// A run that fails keeps its record: status `failed`, its spec, the reason, and exactly
/// the figures it streamed before (here: a run on a worker whose time limit it exceeds).
/// Its permalink, its API and its replayed events say so.
#[tokio::test]
async fn a_run_past_its_time_limit_is_kept_as_failed_with_what_it_measured() {
    // Long enough for the model's first pass on a loaded machine, far shorter than 1000
    // passes of it (about 40 ms each on one idle core).
    let limit = std::time::Duration::from_secs(12);
    let worker = server::start_worker(server::worker_config(&engine_args(), 4, Some(limit))).unwrap();
    let mut state = state();
    state.dispatch = server::dispatch::Dispatch::Local(std::sync::Arc::new(worker));
    let router = server::router(state.clone());
    // The model built once within the limit, so the long run's limit is spent measuring.
    let warm = r#"{"model": "resnet18", "batch": 1, "warmup": 0, "iters": 1, "device": "cpu"}"#;
    let (status, _, body) = send(router.clone(), post_run(warm)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{}", String::from_utf8_lossy(&body));
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    let events = follow(router.clone(), &created.events_url).await;
    assert!(events.last().is_some_and(Event::is_terminal), "{events:?}");

    let long = r#"{"model": "resnet18", "batch": 2, "warmup": 1, "iters": 1000, "device": "cpu"}"#;
    let (status, _, body) = send(router.clone(), post_run(long)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let created: RunCreated = serde_json::from_slice(&body).unwrap();
    let id = created.id.clone();
    let events = follow(router.clone(), &created.events_url).await;
    let Some(Event::Failed { failure }) = events.last() else { panic!("{events:?}") };
    assert_eq!(failure.kind, protocol::FailureKind::Timeout, "{failure:?}");
    let streamed: Vec<protocol::Sample> = events
        .iter()
        .filter_map(|e| match e { Event::Sample { sample } => Some(sample.clone()), _ => None })
        .collect();
    assert!(!streamed.is_empty() && streamed.len() < 1000, "{} timed passes before the limit", streamed.len());

    // The record, written before the viewer was told: failed, the spec, the reason, and
    // the very samples the viewer saw (none invented, none lost).
    let (status, _, body) = send(router.clone(), get(&format!("/api/records/{id}"))).await;
    assert_eq!(status, StatusCode::OK);
    let record: protocol::Record = serde_json::from_slice(&body).unwrap();
    assert_eq!(record.status(), protocol::RecordStatus::Failed);
    let u = record.unfinished().expect("a record without a report");
    assert_eq!(u.spec.as_ref().map(|s| s.iters), Some(1000));
    assert_eq!(u.failure.as_ref(), Some(failure));
    let measured = u.measured.as_ref().expect("what it measured");
    assert_eq!(measured.samples, streamed);
    assert_eq!(measured.warmup.len(), 1);
    assert_eq!(measured.planned, Some(1001), "one warm-up and 1000 timed passes were planned");
    // Physical: every pass took time, and its peak holds at least the weights and input
    // (the baseline) plus the output alive after it.
    let baseline = measured.baseline_bytes.expect("its start was kept");
    assert!(
        measured.samples.iter().all(|s| s.latency_ms > 0.0 && s.peak_bytes >= s.allocated_bytes && s.allocated_bytes > baseline),
        "baseline {baseline}: {:?}",
        measured.samples
    );
    assert!(u.started_at <= *u.failed_at.as_ref().unwrap(), "{u:?}");
    assert!(u.message.starts_with("failed at 20") && u.message.contains("(timeout): the run went past the server's time limit"), "{}", u.message);
    assert!(u.message.contains(&format!("it measured {} timed passes after 1 warm-up pass", streamed.len())), "{}", u.message);

    // The report API: gone for good, code `failed`, saying why (live, and from the record).
    let (status, _, body) = send(router.clone(), get(&format!("/api/runs/{id}"))).await;
    assert_eq!(status, StatusCode::GONE);
    assert_eq!(error_of(&body).code, "failed");
    state.runs.remove(&id);
    let (status, _, body) = send(router.clone(), get(&format!("/api/runs/{id}"))).await;
    assert_eq!(status, StatusCode::GONE);
    let error = error_of(&body);
    assert_eq!((error.code.as_str(), error.message.as_str()), ("failed", u.message.as_str()));
    // Its events, from the record: what it measured, then its failure, as first streamed.
    let replayed = follow(router.clone(), &created.events_url).await;
    let live: Vec<&Event> = events.iter().filter(|e| !matches!(e, Event::Queued { .. })).collect();
    assert_eq!(replayed.iter().collect::<Vec<_>>(), live);

    // The listing and the permalink page.
    let (_, _, body) = send(router.clone(), get("/api/records?kind=run&limit=1000")).await;
    let list: Vec<protocol::RecordSummary> = serde_json::from_slice(&body).unwrap();
    let listed = list.iter().find(|s| s.id == id).expect("listed");
    assert_eq!(listed.status, protocol::RecordStatus::Failed);
    assert_eq!(listed.note.as_deref(), Some(u.message.as_str()));
    let (status, _, page) = send(router.clone(), get(&format!("/runs/{id}"))).await;
    assert_eq!(status, StatusCode::OK);
    let page = String::from_utf8(page).unwrap().replace("<!>", "");
    assert!(page.contains("data-status=\"failed\""), "{page}");
    assert!(page.contains("Failed</strong> at 20"), "{page}");
    assert!(page.contains("the run went past the server&#x27;s time limit") || page.contains("the run went past the server's time limit"), "{page}");
    assert!(page.contains(&format!("/api/records/{id}/export/json")), "the page links what it measured: {page}");
    // The JSON export carries the figures; the table export says where they are.
    let (status, _, body) = send(router.clone(), get(&format!("/api/records/{id}/export/csv"))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(error_of(&body).message.contains("`measured`"));
}
