//! Who may start work: the token, the rate limit per client, and (see the new tests)
//! which pages and hosts may drive the server.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use protocol::{Event, RunCreated};

use crate::*;

#[tokio::test]
async fn starting_work_can_need_a_token_but_reading_never_does() {
    let mut state = state();
    state.guard = std::sync::Arc::new(server::access::Guard::new(Some("let-me-in".into()), 0, 0));
    let router = server::router(state);
    let (status, headers, body) = send(router.clone(), post_run("{}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.contains_key(header::WWW_AUTHENTICATE));
    assert_eq!(error_of(&body).code, "unauthorized");
    let wrong = Request::post("/api/runs")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, "Bearer let-me-out")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        send(router.clone(), wrong).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (status, _, _) = send(router.clone(), post_json("/api/pitfalls/warm-up", "")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let right = Request::post("/api/runs")
        .header(header::CONTENT_TYPE, "application/json")
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
    // One proxy in front, appending the address it saw.
    state.guard = std::sync::Arc::new(server::access::Guard::new(None, 2, 1));
    let router = server::router(state);
    let from = |ip: &str, body: &str| {
        Request::post("/api/runs")
            .header(header::CONTENT_TYPE, "application/json")
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

/// The shared state, answering to `localhost:3000` (and its loopback forms) and letting
/// pages of `https://docs.example.com` drive it.
fn named_router(token: Option<&str>) -> axum::Router {
    let mut state = state();
    state.origins = std::sync::Arc::new(
        server::origin::Origins::new(
            "127.0.0.1:3000".parse().unwrap(),
            Some("https://lab.example.com"),
            "https://docs.example.com",
        )
        .unwrap(),
    );
    state.guard = std::sync::Arc::new(server::access::Guard::new(token.map(Into::into), 0, 0));
    server::router(state)
}

fn drive(uri: &str, host: &str, origin: Option<&str>, content_type: Option<&str>) -> Request<Body> {
    let mut req = Request::post(uri).header(header::HOST, host);
    if let Some(o) = origin {
        req = req.header(header::ORIGIN, o);
    }
    if let Some(c) = content_type {
        req = req.header(header::CONTENT_TYPE, c);
    }
    req.body(Body::from(r#"{"batch": 1, "iters": 1, "warmup": 0}"#))
        .unwrap()
}

#[tokio::test]
async fn only_this_servers_pages_may_start_work() {
    let router = named_router(None);
    let run = "/api/runs";
    let experiment = "/api/pitfalls/warm-up";
    // A cross-site "simple" request (no preflight): text/plain, a form, no type at all.
    for uri in [run, experiment] {
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let (status, _, body) =
                send(router.clone(), drive(uri, "localhost:3000", None, ct)).await;
            assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{uri} {ct:?}");
            assert_eq!(error_of(&body).code, "unsupported_media_type");
        }
        // Another site's page, even with the right type.
        for origin in ["http://evil.example", "null", "http://localhost:3001"] {
            let (status, _, body) = send(
                router.clone(),
                drive(
                    uri,
                    "localhost:3000",
                    Some(origin),
                    Some("application/json"),
                ),
            )
            .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{uri} from {origin}");
            assert_eq!(error_of(&body).code, "foreign_origin");
        }
    }
    // The server's own page (by any of its names), an allowed origin, and no browser at all.
    for (host, origin) in [
        ("localhost:3000", Some("http://localhost:3000")),
        ("127.0.0.1:3000", Some("http://127.0.0.1:3000")),
        ("lab.example.com", Some("https://lab.example.com")),
        ("localhost:3000", Some("https://docs.example.com")),
        ("localhost:3000", None),
    ] {
        let (status, _, body) = send(
            router.clone(),
            drive(run, host, origin, Some("application/json; charset=utf-8")),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::ACCEPTED,
            "{host} {origin:?}: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

#[tokio::test]
async fn a_host_that_is_not_this_server_is_refused() {
    let router = named_router(None);
    // DNS rebinding: a page on evil.example whose name now points here.
    for uri in ["/", "/api/info", "/runs", "/healthz"] {
        let req = Request::get(uri)
            .header(header::HOST, "evil.example:3000")
            .body(Body::empty())
            .unwrap();
        let (status, _, body) = send(router.clone(), req).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{uri}");
        assert_eq!(error_of(&body).code, "unknown_host");
    }
    let (status, _, _) = send(
        router.clone(),
        drive(
            "/api/runs",
            "evil.example:3000",
            Some("http://evil.example:3000"),
            Some("application/json"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
    for host in [
        "localhost:3000",
        "127.0.0.1:3000",
        "[::1]:3000",
        "lab.example.com",
    ] {
        let req = Request::get("/api/info")
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        assert_eq!(send(router.clone(), req).await.0, StatusCode::OK, "{host}");
    }
}

#[tokio::test]
async fn the_token_still_works_behind_the_origin_checks() {
    let router = named_router(Some("let-me-in"));
    let mut req = drive(
        "/api/runs",
        "localhost:3000",
        None,
        Some("application/json"),
    );
    assert_eq!(send(router.clone(), req).await.0, StatusCode::UNAUTHORIZED);
    req = drive(
        "/api/runs",
        "localhost:3000",
        Some("http://localhost:3000"),
        Some("application/json"),
    );
    req.headers_mut()
        .insert(header::AUTHORIZATION, "Bearer let-me-in".parse().unwrap());
    assert_eq!(send(router.clone(), req).await.0, StatusCode::ACCEPTED);
    // A token does not let another site's page in.
    req = drive(
        "/api/runs",
        "localhost:3000",
        Some("http://evil.example"),
        Some("application/json"),
    );
    req.headers_mut()
        .insert(header::AUTHORIZATION, "Bearer let-me-in".parse().unwrap());
    assert_eq!(send(router, req).await.0, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn forwarded_for_is_read_from_the_right() {
    // One trusted proxy: only its entry (the last) names the client.
    let mut state = state();
    state.guard = std::sync::Arc::new(server::access::Guard::new(None, 1, 1));
    let router = server::router(state);
    let from = |xff: &str| {
        Request::post("/api/runs")
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-forwarded-for", xff)
            .body(Body::from(r#"{"batch": 1, "iters": 1, "warmup": 0}"#))
            .unwrap()
    };
    assert_eq!(
        send(router.clone(), from("198.51.100.1, 203.0.113.9"))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    // The client varies what it wrote itself: still the same client, still limited.
    for forged in [
        "198.51.100.2, 203.0.113.9",
        "10.0.0.1, 1.2.3.4, 203.0.113.9",
    ] {
        assert_eq!(
            send(router.clone(), from(forged)).await.0,
            StatusCode::TOO_MANY_REQUESTS,
            "{forged}"
        );
    }
}
