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
