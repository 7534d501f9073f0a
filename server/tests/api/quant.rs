//! Quantized weights through the API: malformed choices are a 4xx naming the field and
//! why; a good one runs and reports the weights split, the memory split and the drift.

use axum::http::StatusCode;
use protocol::{Event, RunCreated};

use crate::*;

#[tokio::test]
async fn malformed_quantized_weights_get_4xx_naming_the_field() {
    let cases: [(&str, StatusCode, &str, &str); 5] = [
        (
            r#"{"model": "llama_tiny", "generate": {"quant": "int3"}}"#,
            StatusCode::BAD_REQUEST,
            "generate.quant",
            "int3",
        ),
        (
            r#"{"model": "llama_tiny", "generate": {"quant": "int4", "group_size": 128}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "generate.group_size",
            "704",
        ),
        (
            r#"{"model": "llama_tiny", "generate": {"quant": "int8", "group_size": 64}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "generate.group_size",
            "int4",
        ),
        (
            r#"{"model": "llama_tiny", "autocast": "bf16", "generate": {"quant": "int4"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "generate.quant",
            "autocast",
        ),
        (
            // 32 × 151,936 logits: above the 4,194,304 numbers a run returns.
            r#"{"model": "qwen2_5_0_5b", "batch": 32, "generate": {"prefill_logits": true}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "generate.prefill_logits",
            "smaller batch",
        ),
    ];
    for (body, want, field, why) in cases {
        let (status, _, bytes) = send(app(), post_run(body)).await;
        assert_eq!(status, want, "{body}");
        let err = error_of(&bytes);
        assert_eq!(err.field.as_deref(), Some(field), "{body}: {}", err.message);
        assert!(err.message.contains(why), "{body}: {}", err.message);
    }
}

/// The report of the run `body` asks for, run to its end.
async fn finished(body: &str) -> Box<protocol::Report> {
    let (status, _, bytes) = send(app(), post_run(body)).await;
    assert!(status.is_success(), "{status}: {}", String::from_utf8_lossy(&bytes));
    let created: RunCreated = serde_json::from_slice(&bytes).unwrap();
    let events = follow(app(), &created.events_url).await;
    let Some(Event::Done { report }) = events.last() else {
        panic!("no done event: {events:?}");
    };
    report.clone()
}

#[tokio::test]
async fn an_int4_generation_on_bf16_weights_runs() {
    // gpt-fast's setup: int4 linear layers, everything else (and the activations) in bf16.
    let body = r#"{"model": "llama_tiny", "device": "cpu", "batch": 1, "input_size": 8, "grad": "no_grad",
        "advanced": {"dtype": "bf16"}, "generate": {"new_tokens": 3, "quant": "int4", "group_size": 32}}"#;
    let report = finished(body).await;
    assert_eq!(report.spec.advanced.weights, protocol::WeightsDtype::Bf16);
    let g = report.generation.as_ref().unwrap();
    assert_eq!(report.spec.generate.as_ref().map(|g| (g.weights, g.group_size)), Some((protocol::WeightQuant::Int4, Some(32))));
    let w = g.weights_breakdown.unwrap();
    assert_eq!(Some(w), g.weights_formula, "int4 on bf16: the bytes are the formula's");
    assert!(report.spec.label().contains("bf16 weights") && report.spec.label().contains("int4 linear layers · group 32"));
}

#[tokio::test]
async fn an_int8_generation_reports_its_weights_memory_and_drift() {
    // The quantization's old name in the JSON (`weights`) still reads.
    let body = r#"{"model": "llama_tiny", "device": "cpu", "batch": 1, "input_size": 8, "grad": "no_grad",
        "generate": {"new_tokens": 4, "weights": "int8", "prefill_logits": true}}"#;
    let report = finished(body).await;
    let g = report.generation.as_ref().unwrap();
    let w = g.weights_breakdown.unwrap();
    assert_eq!(Some(w), g.weights_formula);
    // Asked for: one row of the vocabulary's logits per sequence, finite, whose argmax is
    // the first generated token (the same model, the same prompt).
    let logits = g.prefill_logits.as_ref().expect("prefill_logits asked for");
    assert_eq!(logits.len(), 1);
    assert_eq!(logits[0].len(), 8192);
    assert!(logits[0].iter().all(|x| x.is_finite()));
    let argmax = logits[0].iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    assert_eq!(argmax as i64, g.tokens[0][0], "the logits pick the first token");
    assert!(w.linear_bytes < w.linear_unquantized_bytes / 3);
    assert!(g.memory_peak.is_some() && g.memory_steady.is_some());
    let d = g.drift.as_ref().unwrap();
    assert_eq!(d.tokens_compared, 4);
}

#[tokio::test]
async fn the_openapi_document_carries_the_new_fields() {
    let (status, _, body) = send(app(), get("/api/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    // Every schema's properties, by name, wherever utoipa put them.
    let text = String::from_utf8(body).unwrap();
    for field in ["\"group_size\"", "\"kv_dtype\"", "\"weights_breakdown\"", "\"memory_peak\"", "\"drift\"", "\"greedy_agreement\"", "\"fp8_e4m3\"", "\"int4\""] {
        assert!(text.contains(field), "the OpenAPI document has no {field}");
    }
}

/// A recorded generation's charts alone, as the Generate page shows them until ECharts has
/// come: drawn from its measured steps; a forward run's charts refused for it by name.
#[tokio::test]
async fn a_recorded_generation_has_its_charts_as_pictures() {
    let body = r#"{"model": "llama_tiny", "device": "cpu", "batch": 1, "input_size": 8, "grad": "no_grad",
        "generate": {"new_tokens": 6}}"#;
    let (status, _, bytes) = send(app(), post_run(body)).await;
    assert!(status.is_success(), "{status}: {}", String::from_utf8_lossy(&bytes));
    let created: RunCreated = serde_json::from_slice(&bytes).unwrap();
    let events = follow(app(), &created.events_url).await;
    assert!(matches!(events.last(), Some(Event::Done { .. })), "{events:?}");
    for (chart, title) in [
        ("step-latency", "Latency per decode step"),
        ("step-memory", "Memory beyond weights + prompt"),
        ("prefill-decode", "Prefill and decode"),
    ] {
        let (status, headers, svg) =
            send(app(), get(&format!("/runs/{}.svg?chart={chart}&width=480&height=240&theme=dark", created.id))).await;
        let svg = String::from_utf8(svg).unwrap();
        assert_eq!(status, StatusCode::OK, "{chart}: {svg}");
        assert_eq!(headers[axum::http::header::CONTENT_TYPE], "image/svg+xml");
        assert!(svg.contains(title) && svg.contains("width=\"480\" height=\"240\""), "{chart}: {svg}");
    }
    let (status, _, body) = send(app(), get(&format!("/runs/{}.svg?chart=latency", created.id))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let e = error_of(&body);
    assert_eq!(e.field.as_deref(), Some("chart"));
    assert!(e.message.contains("is a generation"), "{e:?}");
}

/// A text prompt: empty, over the cap, invalid UTF-8 (raw, or a lone surrogate escape), or
/// on a model without a byte vocabulary, is a 4xx naming `generate.prompt_text`; a good one
/// runs on the trained preset and its report carries the text.
#[tokio::test]
async fn a_text_prompt_is_checked_and_its_text_comes_back() {
    let long = "x".repeat(protocol::MAX_PROMPT_TEXT_BYTES as usize + 1);
    let over = format!(r#"{{"model": "torch_bytes", "generate": {{"prompt_text": "{long}"}}}}"#);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (br#"{"model": "torch_bytes", "generate": {"prompt_text": ""}}"#.to_vec(), "empty"),
        (over.into_bytes(), "192"),
        (b"{\"model\": \"torch_bytes\", \"generate\": {\"prompt_text\": \"\xff\xfe\"}}".to_vec(), ""),
        (br#"{"model": "torch_bytes", "generate": {"prompt_text": "\ud800"}}"#.to_vec(), ""),
        (br#"{"model": "llama_tiny", "generate": {"prompt_text": "def f():"}}"#.to_vec(), "byte"),
    ];
    for (body, why) in cases {
        let request = axum::http::Request::post("/api/runs")
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body.clone()))
            .unwrap();
        let (status, _, bytes) = send(app(), request).await;
        let shown = String::from_utf8_lossy(&body);
        assert!(status.is_client_error(), "{shown}: {status}");
        let err = error_of(&bytes);
        assert_eq!(err.field.as_deref(), Some("generate.prompt_text"), "{shown}: {}", err.message);
        assert!(err.message.contains(why), "{shown}: {}", err.message);
    }
    let report = finished(r#"{"model": "torch_bytes", "device": "cpu", "batch": 1, "grad": "no_grad",
        "generate": {"new_tokens": 8, "prompt_text": "import torch"}}"#)
    .await;
    let g = report.generation.as_ref().unwrap();
    assert_eq!(g.prompt_len, 1 + "import torch".len() as u32);
    let text = g.text.as_ref().expect("a byte model's text");
    assert_eq!(text.prompt, "import torch");
    assert_eq!(text.generated[0], protocol::bytes_text(&g.tokens[0]));
}

/// `GET /api/quality-plan` says what a generation's quality measurement will score before it
/// runs: for the byte-level model, one unit per byte of its held-out text, several settings.
/// A model that reads no text, a missing or unknown parameter are 4xx naming the field.
#[tokio::test]
async fn the_quality_plan_says_what_will_be_scored_or_names_the_field() {
    let (status, _, bytes) = send(app(), get("/api/quality-plan?model=torch_bytes&device=cpu")).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&bytes));
    let plan: protocol::QualityPlan = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(plan.tokens, plan.text_bytes, "a byte-level model scores every byte once: {plan:?}");
    assert!(plan.settings > 1 && plan.text.contains("held out"), "{plan:?}");
    let cases = [
        ("/api/quality-plan?model=tiny_mlp", StatusCode::UNPROCESSABLE_ENTITY, "model"),
        ("/api/quality-plan?model=llama_tiny", StatusCode::UNPROCESSABLE_ENTITY, "generate.quality"),
        ("/api/quality-plan", StatusCode::BAD_REQUEST, "model"),
        ("/api/quality-plan?model=torch_bytes&batch=2", StatusCode::BAD_REQUEST, "batch"),
        ("/api/quality-plan?model=torch_bytes&device=tpu", StatusCode::BAD_REQUEST, "device"),
    ];
    for (uri, want, field) in cases {
        let (status, _, bytes) = send(app(), get(uri)).await;
        assert_eq!(status, want, "{uri}: {}", String::from_utf8_lossy(&bytes));
        assert_eq!(error_of(&bytes).field.as_deref(), Some(field), "{uri}");
    }
}
