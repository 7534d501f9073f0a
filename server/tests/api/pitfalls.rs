//! The pitfall cards and their experiments through the API.

use axum::body::Body;
use axum::http::{Request, StatusCode};

use crate::*;

#[tokio::test]
async fn pitfalls_are_listed_and_run_with_a_verdict() {
    let (status, _, body) = send(
        app(),
        Request::get("/api/pitfalls").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let cards: Vec<protocol::PitfallInfo> = serde_json::from_slice(&body).unwrap();
    // Counted from the catalogue, not a copied number.
    assert_eq!(cards.len(), engine::pitfalls::CARDS.len());
    let req = post_json("/api/pitfalls/nograd-and-dropout", r#"{"device": "cpu"}"#);
    let (status, _, body) = send(app(), req).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let report: protocol::PitfallReport = serde_json::from_slice(&body).unwrap();
    assert_eq!(report.verdict, protocol::Verdict::Confirmed);
    assert!(!report.figures.is_empty());
    let (status, _, body) = send(app(), post_json("/api/pitfalls/nope", "")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let err = error_of(&body);
    assert_eq!(err.code, "not_found");
    // Its own message: a missing card, not a missing run.
    assert!(
        err.message.contains("pitfall `nope`") && !err.message.contains("run"),
        "{}",
        err.message
    );
    let req = post_json("/api/pitfalls/warm-up", r#"{"devise": "cpu"}"#);
    let (status, _, body) = send(app(), req).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).message.contains("devise"));
}

#[tokio::test]
async fn experiment_bodies_must_be_one_json_object() {
    for body in [
        "[]",
        r#"{"device": "cpu"} trailing"#,
        r#"{"device": "cpu"}{}"#,
        "3",
    ] {
        let (status, _, bytes) = send(app(), post_json("/api/pitfalls/warm-up", body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(error_of(&bytes).code, "bad_request", "{body}");
    }
}

/// A client that goes away while its experiment runs (a closed tab, `curl -m 1`) leaves a
/// finished record: the experiment is the server's once accepted, and its row never stays
/// `running`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_mid_experiment_leaves_a_finished_record() {
    use tower::ServiceExt;
    let records = |body: Vec<u8>| -> Vec<protocol::RecordSummary> { serde_json::from_slice(&body).unwrap() };
    let (_, _, body) = send(app(), get("/api/records?kind=pitfall&limit=1000")).await;
    let before: Vec<String> = records(body).into_iter().map(|r| r.id).collect();
    // seed-table measures six rows of a ResNet: seconds on the CPU. The client leaves first.
    let req = post_json("/api/pitfalls/seed-table", r#"{"device": "cpu"}"#);
    let gone = tokio::time::timeout(std::time::Duration::from_millis(300), app().oneshot(req)).await;
    assert!(gone.is_err(), "the experiment answered within 300 ms: too quick to leave in the middle of");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (_, _, body) = send(app(), get("/api/records?kind=pitfall&limit=1000")).await;
        let new: Vec<protocol::RecordSummary> = records(body).into_iter().filter(|r| !before.contains(&r.id)).collect();
        let ours: Vec<&protocol::RecordSummary> = new.iter().filter(|r| r.label.contains("seed-table")).collect();
        assert!(ours.len() <= 1, "{new:?}");
        if let Some(r) = ours.first() {
            if r.status != protocol::RecordStatus::Running {
                assert_eq!(r.status, protocol::RecordStatus::Completed, "{r:?}");
                assert!(r.verdict.is_some(), "a completed experiment without its verdict: {r:?}");
                break;
            }
        }
        assert!(std::time::Instant::now() < deadline, "the experiment's record is still {new:?} after 120 s");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A prediction rides on the request that starts its run: scored in the report and the
/// record (JSON, CSV), refused with the field named when malformed or off its scale, and
/// refused with 409 when sent after its run started.
#[tokio::test]
async fn predictions_are_locked_by_the_run_and_refused_after_it() {
    let req = post_json("/api/pitfalls/gqa", r#"{"device": "cpu", "prediction": {"value": 0.5}}"#);
    let (status, _, body) = send(app(), req).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let report: protocol::PitfallReport = serde_json::from_slice(&body).unwrap();
    let scored = report.prediction.clone().expect("scored");
    // 2 of 8 KV heads hold exactly a quarter: ×0.5 is off by more than ×1.5.
    assert_eq!((scored.measured, scored.right), (Some(0.25), Some(false)));
    let id = report.record_id.expect("recorded");
    let (_, _, body) = send(app(), get(&format!("/api/records/{id}"))).await;
    let record: protocol::Record = serde_json::from_slice(&body).unwrap();
    match record.body {
        protocol::RecordBody::Pitfall(p) => assert_eq!(p.prediction, Some(scored)),
        other => panic!("{other:?}"),
    }
    let (_, _, csv) = send(app(), get(&format!("/api/records/{id}/export/csv"))).await;
    let csv = String::from_utf8(csv).unwrap();
    assert!(csv.contains("predicted ×0.5, measured ×0.25: wrong"), "{csv}");

    // After its run started, no prediction is taken: not a change, not a first one.
    let late = post_json(&format!("/api/records/{id}/prediction"), r#"{"prediction": {"value": 0.25}}"#);
    let (status, _, body) = send(app(), late).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let err = error_of(&body);
    assert_eq!(err.code, "prediction_locked");
    assert!(err.message.contains("×0.5"), "{}", err.message);
    let unknown = post_json("/api/records/0123456789abcdef/prediction", r#"{"prediction": "skipped"}"#);
    assert_eq!(send(app(), unknown).await.0, StatusCode::NOT_FOUND);

    // Malformed: 400 naming the field; off the scale or the wrong kind: 422 naming it.
    for (body, status) in [
        (r#"{"prediction": {"value": "half"}}"#, StatusCode::BAD_REQUEST),
        (r#"{"prediction": {"guess": 1}}"#, StatusCode::BAD_REQUEST),
        (r#"{"prediction": {"value": 50}}"#, StatusCode::UNPROCESSABLE_ENTITY),
        (r#"{"prediction": {"choice": "lower"}}"#, StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let (got, _, bytes) = send(app(), post_json("/api/pitfalls/gqa", body)).await;
        assert_eq!(got, status, "{body}: {}", String::from_utf8_lossy(&bytes));
        let field = error_of(&bytes).field.unwrap_or_default();
        assert!(field.starts_with("prediction"), "{body}: {field}");
    }
    // Run without predicting: recorded as such.
    let req = post_json("/api/pitfalls/gqa", r#"{"device": "cpu", "prediction": "skipped"}"#);
    let (_, _, body) = send(app(), req).await;
    let report: protocol::PitfallReport = serde_json::from_slice(&body).unwrap();
    assert_eq!(report.prediction.map(|p| p.predicted), Some(protocol::Prediction::Skipped));
}
