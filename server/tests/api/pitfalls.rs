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
    let req = post_json("/api/pitfalls/nograd-not-eval", r#"{"device": "cpu"}"#);
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
