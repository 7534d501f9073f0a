//! Pages: rendered before hydration, framed only where allowed, and safe from their data.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};

use crate::*;

#[tokio::test]
async fn the_page_is_readable_before_hydration() {
    let (status, _, body) = send(
        app(),
        Request::get("/?model=resnet18&grad=no_grad&batch=16")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let html = String::from_utf8(body).unwrap();
    // The settings from the URL are rendered, and so are the explanation and the snippet.
    assert!(html.contains("torch.no_grad()"), "grad explanation missing");
    assert!(
        html.contains("torch.randn(16, 3, 224, 224"),
        "snippet does not follow the URL"
    );
    assert!(
        html.contains("/echarts.min.js") && html.contains("/pkg/gradless"),
        "assets not linked"
    );
    assert!(!html.contains("cdn."), "no CDN anywhere");
    // Pages go out compressed to browsers that ask.
    let req = Request::get("/")
        .header(header::ACCEPT_ENCODING, "gzip")
        .body(Body::empty())
        .unwrap();
    let (_, headers, _) = send(app(), req).await;
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
}

#[tokio::test]
async fn only_embeds_may_be_framed_by_other_origins() {
    let mut state = state();
    state.embed_csp = server::config::frame_ancestors("https://docs.example.com")
        .unwrap()
        .into();
    let router = server::router(state);
    for uri in [
        "/embed/lab?lock=model&hide=snippet",
        "/embed/pitfalls/warm-up",
        "/embed/runs/0123456789abcdef",
    ] {
        let (status, headers, _) = send(router.clone(), get(uri)).await;
        // No record with that id: 404, still under the embed policy.
        assert!(
            status == StatusCode::OK
                || (uri.starts_with("/embed/runs/") && status == StatusCode::NOT_FOUND),
            "{uri}: {status}"
        );
        assert!(
            csp_of(&headers).ends_with("frame-ancestors 'self' https://docs.example.com"),
            "{uri}: {}",
            csp_of(&headers)
        );
    }
    for uri in ["/", "/pitfalls", "/api/info"] {
        let (_, headers, _) = send(router.clone(), get(uri)).await;
        assert!(
            csp_of(&headers).ends_with("; frame-ancestors 'self'"),
            "{uri}: {}",
            csp_of(&headers)
        );
    }
    // The embed renders without the site's navigation, with its controls locked.
    let (_, _, body) = send(router, get("/embed/lab?lock=model&hide=snippet")).await;
    let html = String::from_utf8(body).unwrap();
    assert!(
        !html.contains("class=\"top\""),
        "no site header in an embed"
    );
    assert!(html.contains("open the full page"));
    assert!(!html.contains("The same in PyTorch"), "hidden snippet");
}

fn csp_of(headers: &axum::http::HeaderMap) -> String {
    headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string()
}

/// The text of every `<script type="application/json">` element in a page.
fn json_scripts(html: &str) -> Vec<&str> {
    html.match_indices("<script type=\"application/json\"")
        .map(|(at, _)| {
            let open = at + html[at..].find('>').unwrap() + 1;
            let close = open + html[open..].find("</script>").unwrap();
            &html[open..close]
        })
        .collect()
}

#[tokio::test]
async fn data_in_a_page_cannot_break_it() {
    // An id that, put verbatim into the page's JSON, switches the HTML parser into a
    // state where the script element swallows the rest of the page.
    let (status, _, body) = send(app(), get("/runs/%3C!--%3Cscript%3E")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let html = String::from_utf8(body).unwrap();
    let scripts = json_scripts(&html);
    assert!(!scripts.is_empty(), "no embedded JSON");
    for text in scripts {
        for c in ['<', '>', '&', '\u{2028}', '\u{2029}'] {
            assert!(!text.contains(c), "{c:?} in embedded JSON: {text}");
        }
        serde_json::from_str::<serde_json::Value>(text).expect("embedded JSON reads back");
    }
    assert!(html.contains("</footer>"), "the page ends as rendered");
}

#[tokio::test]
async fn pages_for_unknown_records_are_404() {
    for uri in [
        "/runs/0123456789abcdef",
        "/embed/runs/0123456789abcdef",
        "/runs/not-an-id",
    ] {
        let (status, _, body) = send(app(), get(uri)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert!(
            String::from_utf8(body).unwrap().contains("No recorded run"),
            "{uri}: the page still says what is missing"
        );
    }
}

#[tokio::test]
async fn embed_links_and_policy_follow_the_served_path() {
    let mut state = state();
    state.embed_csp = server::config::frame_ancestors("https://docs.example.com")
        .unwrap()
        .into();
    let router = server::router(state);
    // The "open the full page" link is a path on this server, never another site.
    let (_, _, body) = send(router.clone(), get("/embed//evil.example")).await;
    let html = String::from_utf8(body).unwrap();
    let at = html.find("open the full page").expect("embed footer");
    let href_at = html[..at].rfind("href=\"").expect("a link") + 6;
    let href = &html[href_at..href_at + html[href_at..].find('"').unwrap()];
    assert!(href.starts_with('/') && !href.starts_with("//"), "{href}");
    // Dot segments never reach the router: no normal page under the embed policy.
    for uri in [
        "/embed/%2e%2e/pitfalls",
        "/embed/%2E%2E/pitfalls",
        "/embed/../pitfalls",
        "/embed/lab/%2e%2e/%2e%2e/runs",
        "/embed%2f..%2fpitfalls",
        "/api/%2e%2e/healthz",
    ] {
        let (status, headers, _) = send(router.clone(), get(uri)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert!(
            !csp_of(&headers).contains("docs.example.com"),
            "{uri}: {}",
            csp_of(&headers)
        );
    }
}

#[tokio::test]
async fn every_response_is_nosniff_and_pages_carry_a_strict_csp() {
    for uri in [
        "/",
        "/pitfalls",
        "/embed/lab",
        "/api/info",
        "/api/nope",
        "/healthz",
        "/favicon.svg",
        "/no-such-file.js",
    ] {
        let (_, headers, body) = send(app(), get(uri)).await;
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{uri}");
        let csp = csp_of(&headers);
        let html = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/html"));
        if !html {
            assert!(csp.starts_with("default-src 'none'"), "{uri}: {csp}");
            continue;
        }
        assert!(csp.starts_with("default-src 'self';"), "{uri}: {csp}");
        assert!(
            csp.contains("'wasm-unsafe-eval'") && csp.contains("object-src 'none'"),
            "{csp}"
        );
        assert!(
            !csp.contains("'unsafe-eval'") && !csp.contains("script-src 'self' 'unsafe-inline'"),
            "{csp}"
        );
        // Every inline script the page runs carries the nonce the policy allows.
        let nonce = csp
            .split("'nonce-")
            .nth(1)
            .and_then(|r| r.split('\'').next())
            .expect("a nonce");
        let page = String::from_utf8(body).unwrap();
        for (at, _) in page.match_indices("<script") {
            let tag = &page[at..at + page[at..].find('>').unwrap()];
            if tag.contains("type=\"application/json\"") || tag.contains(" src=") {
                continue;
            }
            assert!(tag.contains(&format!("nonce=\"{nonce}\"")), "{uri}: {tag}");
        }
    }
    // A fresh nonce per page.
    let (_, a, _) = send(app(), get("/")).await;
    let (_, b, _) = send(app(), get("/")).await;
    assert_ne!(csp_of(&a), csp_of(&b));
}
