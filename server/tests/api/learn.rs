//! Onboarding paths: the shipped path is served, a step runs with its locked prediction and
//! keeps an anonymous answer (a table with no identifying column), malformed or off-scale
//! predictions get a 4xx naming the field, the answers page counts them, and a composed path
//! is checked field by field and served.

use axum::http::StatusCode;
use protocol::learn::{AnswersView, LearnPath, PathSummary, StepOutcome};

use crate::{app, error_of, get, post_json, send, state};

const SHIPPED: &str = "inference-settings";

#[tokio::test]
async fn the_shipped_path_is_listed_and_unknown_ones_are_404() {
    let (status, _, body) = send(app(), get("/api/learn")).await;
    assert_eq!(status, StatusCode::OK);
    let list: Vec<PathSummary> = serde_json::from_slice(&body).unwrap();
    assert!(list.iter().any(|p| p.id == SHIPPED && p.title == "Inference settings in ten minutes"));
    let (_, _, body) = send(app(), get(&format!("/api/learn/{SHIPPED}"))).await;
    let path: LearnPath = serde_json::from_slice(&body).unwrap();
    assert_eq!(path.steps.len(), 6);
    let (status, _, body) = send(app(), get("/api/learn/nope")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_of(&body).code, "not_found");
    // The pages: the path, its answers; an unknown path's page says so with a 404.
    for page in [format!("/learn/{SHIPPED}"), format!("/learn/{SHIPPED}/answers"), format!("/embed/learn/{SHIPPED}"), "/learn".into(), "/learn/new".into()] {
        let (status, _, body) = send(app(), get(&page)).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let html = String::from_utf8_lossy(&body);
        assert!(html.contains("gradless-learn"), "{page}");
    }
    let (status, _, body) = send(app(), get("/learn/nope")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&body).contains("There is no such path"));
}

/// The change step (batch 1 → 16 on the MLP): two recorded runs, the peak above the weights
/// and input grows with the batch (activations scale with it), the locked answer is scored
/// and kept, the answers page and the CSV count it.
#[tokio::test]
async fn a_locked_prediction_is_scored_kept_and_counted() {
    let before = answers().await;
    let step = before.steps.iter().find(|s| s.title == "A bigger batch").expect("the batch step").step;
    let req = post_json(&format!("/api/learn/{SHIPPED}/steps/{step}"), r#"{"prediction": {"choice": "higher"}}"#);
    let (status, _, body) = send(app(), req).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let outcome: StepOutcome = serde_json::from_slice(&body).unwrap();
    assert_eq!(outcome.runs.len(), 2);
    let (b, a) = (outcome.values[0], outcome.values[1]);
    assert!(b > 0.0 && a > 2.0 * b, "peak above baseline: batch 1 {b} B, batch 16 {a} B");
    assert_eq!(outcome.scored.measured, Some(a / b));
    assert_eq!(outcome.scored.right, Some(true));
    assert!(outcome.counted);
    for id in &outcome.runs {
        assert_eq!(send(app(), get(&format!("/api/records/{id}"))).await.0, StatusCode::OK);
    }
    // A wrong one, and one run without predicting (not counted).
    let req = post_json(&format!("/api/learn/{SHIPPED}/steps/{step}"), r#"{"prediction": {"choice": "same"}}"#);
    let outcome: StepOutcome = serde_json::from_slice(&send(app(), req).await.2).unwrap();
    assert_eq!((outcome.scored.right, outcome.counted), (Some(false), true));
    let req = post_json(&format!("/api/learn/{SHIPPED}/steps/{step}"), r#"{"prediction": "skipped"}"#);
    let outcome: StepOutcome = serde_json::from_slice(&send(app(), req).await.2).unwrap();
    assert_eq!((outcome.scored.right, outcome.counted), (None, false));

    let after = answers().await;
    let (s0, s1) = (&before.steps[step - 1], &after.steps[step - 1]);
    assert_eq!(s1.answers, s0.answers + 2);
    assert_eq!(s1.right, s0.right + 1);
    assert_eq!(after.kept, before.kept + 2);
    let higher = s1.bars.iter().find(|b| b.label == "higher").unwrap();
    assert!(higher.truth, "{:?}", s1.bars);
    assert!(s1.common_wrong.as_ref().is_some_and(|(answer, _)| answer == "about the same"), "{:?}", s1.common_wrong);
    let (status, headers, csv) = send(app(), get(&format!("/api/learn/{SHIPPED}/answers?format=csv"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers[axum::http::header::CONTENT_TYPE].to_str().unwrap().starts_with("text/csv"));
    let csv = String::from_utf8(csv).unwrap();
    assert!(csv.starts_with("path,step,question,prediction,measured,right,at_s\n"), "{csv}");
    assert!(csv.lines().any(|l| l.starts_with(&format!("{SHIPPED},{step},")) && l.contains(",higher,") && l.ends_with(&format!(",true,{}", l.rsplit(',').next().unwrap()))));
    let (status, _, body) = send(app(), get(&format!("/api/learn/{SHIPPED}/answers?format=xml"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&body).field.as_deref(), Some("format"));
}

async fn answers() -> AnswersView {
    let (status, _, body) = send(app(), get(&format!("/api/learn/{SHIPPED}/answers"))).await;
    assert_eq!(status, StatusCode::OK);
    serde_json::from_slice(&body).unwrap()
}

/// What a kept answer holds: nothing that could tell who gave it.
#[test]
fn the_answers_table_has_no_identifying_column() {
    let columns = state().learn.db.answer_columns().unwrap();
    assert_eq!(columns, ["path", "step", "question", "prediction", "measured", "right", "at_s"]);
    for c in &columns {
        for word in ["ip", "addr", "agent", "cookie", "user", "name", "session", "client", "id", "token", "host"] {
            assert!(!c.contains(word) || c == "path", "{c} looks like an identifier ({word})");
        }
    }
}

#[tokio::test]
async fn malformed_and_off_scale_predictions_name_the_field() {
    // Step 5 (the KV cache) asks for bytes; step 1 a choice.
    for (step, body, status) in [
        (5, r#"{"prediction": {"value": "lots"}}"#, StatusCode::BAD_REQUEST),
        (5, r#"{"prediction": {"guess": 1}}"#, StatusCode::BAD_REQUEST),
        (5, r#"{"prediction": {"value": 1e30}}"#, StatusCode::UNPROCESSABLE_ENTITY),
        (5, r#"{"prediction": {"value": -4}}"#, StatusCode::UNPROCESSABLE_ENTITY),
        (5, r#"{"prediction": {"choice": "lower"}}"#, StatusCode::UNPROCESSABLE_ENTITY),
        (4, r#"{"prediction": {"value": 2}}"#, StatusCode::UNPROCESSABLE_ENTITY),
        (4, r#"{"prediction": {"choice": "yes"}}"#, StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let (got, _, bytes) = send(app(), post_json(&format!("/api/learn/{SHIPPED}/steps/{step}"), body)).await;
        assert_eq!(got, status, "{body}: {}", String::from_utf8_lossy(&bytes));
        let field = error_of(&bytes).field.unwrap_or_default();
        assert!(field.starts_with("prediction"), "{body}: {field}");
    }
    let (got, _, bytes) = send(app(), post_json(&format!("/api/learn/{SHIPPED}/steps/1"), r#"{"prediction": "skipped", "who": "me"}"#)).await;
    assert_eq!(got, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&bytes).field.as_deref(), Some("who"));
    for step in ["0", "7", "two"] {
        let (got, _, _) = send(app(), post_json(&format!("/api/learn/{SHIPPED}/steps/{step}"), r#"{"prediction": "skipped"}"#)).await;
        assert_eq!(got, StatusCode::NOT_FOUND, "step {step}");
    }
}

#[tokio::test]
async fn a_composed_path_is_checked_by_field_then_served() {
    let toml = "id = \"composed-test\"\ntitle = \"Ours\"\nnote = \"Read me\"\n\n[[step]]\ntitle = \"Warm-up\"\ncard = \"warm-up\"\n";
    let body = serde_json::json!({ "toml": toml, "check": true }).to_string();
    let (status, _, _) = send(app(), post_json("/api/learn", &body)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(send(app(), get("/api/learn/composed-test")).await.0, StatusCode::NOT_FOUND, "a check keeps nothing");
    let body = serde_json::json!({ "toml": toml }).to_string();
    let (status, _, bytes) = send(app(), post_json("/api/learn", &body)).await;
    assert_eq!(status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&bytes));
    let (status, _, bytes) = send(app(), get("/api/learn/composed-test")).await;
    assert_eq!(status, StatusCode::OK);
    let path: LearnPath = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((path.source.as_str(), path.steps.len()), ("composed", 1));
    // Its id is taken now; a broken step names its field.
    assert_eq!(send(app(), post_json("/api/learn", &body)).await.0, StatusCode::CONFLICT);
    let broken = serde_json::json!({ "toml": toml.replace("composed-test", "other").replace("warm-up", "no-such-card") }).to_string();
    let (status, _, bytes) = send(app(), post_json("/api/learn", &broken)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&bytes).field.as_deref(), Some("toml.step[1].card"));
}
