//! `GET /api/openapi.json`: a valid OpenAPI 3.1 document (by `openapi-spec-validator`, the
//! reference validator, from the project's venv), whose every operation is routed, and
//! which describes every route the API reference (docs/api.md) lists, and no other.

use std::collections::BTreeSet;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::Value;

use super::{app, get, send};

async fn document() -> Value {
    let (status, headers, body) = send(app(), get("/api/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    serde_json::from_slice(&body).expect("the document is JSON")
}

/// `(METHOD, path)` of every operation in the document.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = vec![];
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            ops.push((method.to_uppercase(), path.clone()));
        }
    }
    ops
}

/// The venv's Python (scripts/test.sh exports GRADLESS_PYTHON; scripts/setup.sh installs the
/// validator there).
fn python() -> String {
    std::env::var("GRADLESS_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/gradless/venv/bin/python")
    })
}

#[tokio::test]
async fn the_document_is_valid_openapi_3_1() {
    let doc = document().await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."), "{}", doc["openapi"]);
    // The schemas come from the types: a report's latency percentiles and an event's tags.
    let schemas = &doc["components"]["schemas"];
    for name in ["RunSpec", "Report", "Event", "Record", "ServerInfo", "PitfallReport", "ApiErrorBody"] {
        assert!(schemas.get(name).is_some(), "no schema {name}");
    }
    let file = std::env::temp_dir().join(format!("gradless-openapi-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = std::process::Command::new(python())
        .args([
            "-c",
            "import json, sys\n\
             from openapi_spec_validator import validate\n\
             from openapi_spec_validator.versions import consts, get_spec_version\n\
             doc = json.load(open(sys.argv[1]))\n\
             validate(doc)\n\
             print(get_spec_version(doc))",
        ])
        .arg(&file)
        .output()
        .expect("the venv's Python runs (set GRADLESS_PYTHON; scripts/setup.sh installs openapi-spec-validator)");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "openapi-spec-validator refused the document:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("3.1"), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Every operation reaches a handler: never 405, never the API's "no such path" answer nor
/// the site's page fallback. Path parameters get ids that do not exist and bodies that are
/// refused, so nothing runs.
#[tokio::test]
async fn every_documented_operation_is_routed() {
    let doc = document().await;
    let ops = operations(&doc);
    assert!(ops.len() >= 15, "{ops:?}");
    for (method, path) in ops {
        let uri = path
            .replace("{id}", "r0000000000000000")
            .replace("{format}", "json")
            .replace("{step}", "1");
        let uri = match uri.as_str() {
            "/oembed" => "/oembed?url=http://127.0.0.1/runs/r0000000000000000".to_string(),
            u if u.starts_with("/compare.") => format!("{u}?runs=r0000000000000000"),
            _ => uri,
        };
        let request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(&uri)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(if method == "POST" { "[]" } else { "" }))
            .unwrap();
        let (status, headers, body) = send(app(), request).await;
        let text = String::from_utf8_lossy(&body);
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert!(!text.contains("this API path"), "{method} {uri} is not routed: {text}");
        let html = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t.to_str().unwrap_or("").starts_with("text/html"));
        assert!(!html, "{method} {uri} fell through to the pages: {status}");
    }
}

/// The paths of the API reference's table ("| `GET /api/...` | ..."), with parameters and
/// alternatives reduced to one shape: `{x}` → `{}`, the query dropped, `a\|b` → `a`.
fn reference_routes(markdown: &str) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for row in markdown.lines().filter(|l| l.starts_with("| `")) {
        let first = row.split(" | ").next().unwrap();
        for item in first.split('`').skip(1).step_by(2) {
            let Some((method, path)) = item.split_once(' ') else { continue };
            if !["GET", "POST", "PUT", "DELETE", "PATCH"].contains(&method) {
                continue;
            }
            routes.insert((method.to_string(), shape(path)));
        }
    }
    routes
}

fn shape(path: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in path.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    out.push_str("{}");
                }
            }
            '}' => depth -= 1,
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    let out = out.split('?').next().unwrap();
    out.split("\\|").next().unwrap().to_string()
}

#[tokio::test]
async fn the_api_reference_and_the_document_name_the_same_routes() {
    let doc = document().await;
    let documented: BTreeSet<_> = operations(&doc).into_iter().map(|(m, p)| (m, shape(&p))).collect();
    let markdown = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md")).unwrap();
    let mut reference = reference_routes(&markdown);
    // The table writes `GET /runs/{id}.png\|svg` as one row: both are operations.
    for (m, p) in reference.clone() {
        if p.ends_with(".png") {
            reference.insert((m, p.replace(".png", ".svg")));
        }
    }
    assert!(reference.len() >= 15, "{reference:?}");
    let missing: Vec<_> = reference.difference(&documented).collect();
    let unlisted: Vec<_> = documented.difference(&reference).collect();
    assert!(missing.is_empty(), "in docs/api.md but not in /api/openapi.json: {missing:?}");
    assert!(unlisted.is_empty(), "in /api/openapi.json but not in docs/api.md: {unlisted:?}");
}
