//! The built browser assets under `/pkg/` (wasm, its js glue, css, ECharts), served so a
//! cold visit downloads as few bytes as possible and a second visit none at all.
//!
//! scripts/build-site.sh gives each asset a content-hashed name
//! (`pkg/gradless_bg.<16 hex>.wasm`) and writes brotli (`.br`) and gzip (`.gz`) copies beside
//! it. This module answers:
//! - the brotli copy to browsers that accept `br`, else the gzip copy, else the file itself,
//!   always with the original file's `Content-Type` (`application/wasm` for the wasm, which
//!   streaming compilation needs) and `Vary: Accept-Encoding`;
//! - `Cache-Control: public, max-age=31536000, immutable` on hashed names (a changed file
//!   gets a new name, so a cached one never goes stale), `no-cache` on anything else there.
//!
//! Mounted with `Router::merge(assets::static_files(site_root))`; everything else (the
//! favicon, pages) stays with the router's fallback.

use std::path::Path;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use tower_http::services::ServeDir;

/// How long browsers may keep a content-hashed asset: a year, without asking again.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The router serving `site_root/pkg` at `/pkg/` (see the module docs). A missing file is a
/// plain 404.
pub fn static_files<S>(site_root: &Path) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let pkg = ServeDir::new(site_root.join("pkg"))
        .precompressed_br()
        .precompressed_gzip();
    Router::new()
        .nest_service("/pkg", pkg)
        .layer(axum::middleware::from_fn(cache_policy))
}

/// Adds the caching headers to what [`ServeDir`] answered.
async fn cache_policy(request: Request, next: Next) -> Response {
    let hashed = is_content_hashed(request.uri().path());
    let mut response = next.run(request).await;
    let status = response.status();
    if !(status.is_success() || status == axum::http::StatusCode::NOT_MODIFIED) {
        return response;
    }
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if hashed { IMMUTABLE } else { "no-cache" }),
    );
    // The same URL answers brotli, gzip or plain bytes: caches must key on the encoding.
    headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    response
}

/// Whether the last segment of `path` carries a content hash as build-site.sh writes it:
/// `name.<16 lowercase hex>.ext`.
pub fn is_content_hashed(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or("");
    let parts: Vec<&str> = file.split('.').collect();
    // name, hash, extension at least; the hash is never the first or the last part.
    parts.len() >= 3
        && parts[1..parts.len() - 1].iter().any(|p| {
            p.len() == 16
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::StatusCode;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    #[test]
    fn only_build_site_hashes_count_as_content_hashed() {
        assert!(is_content_hashed("/pkg/gradless_bg.0123456789abcdef.wasm"));
        assert!(is_content_hashed("/pkg/echarts.0123456789abcdef.js"));
        assert!(!is_content_hashed("/pkg/gradless.js"));
        assert!(!is_content_hashed("/pkg/gradless.min.js"));
        assert!(
            !is_content_hashed("/pkg/0123456789abcdef.js"),
            "a hash must follow a name"
        );
        assert!(
            !is_content_hashed("/pkg/a.0123456789ABCDEF.js"),
            "uppercase"
        );
        assert!(!is_content_hashed("/pkg/a.0123456789abcde.js"), "15 digits");
        assert!(
            !is_content_hashed("/pkg/a.0123456789abcdef"),
            "no extension"
        );
    }

    /// A site root holding one hashed wasm with its compressed copies (distinct bytes, so
    /// the test sees which one was sent) and one unhashed file.
    fn site() -> std::path::PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "gradless-assets-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let pkg = root.join("pkg");
        std::fs::create_dir_all(&pkg).unwrap();
        let wasm = pkg.join("app.0123456789abcdef.wasm");
        std::fs::write(&wasm, b"\0asm plain").unwrap();
        std::fs::write(pkg.join("app.0123456789abcdef.wasm.br"), b"brotli bytes").unwrap();
        std::fs::write(pkg.join("app.0123456789abcdef.wasm.gz"), b"gzip bytes").unwrap();
        std::fs::write(pkg.join("notes.css"), b"body {}").unwrap();
        root
    }

    async fn get(root: &Path, path: &str, accept: Option<&str>) -> (Response, Vec<u8>) {
        let mut request = Request::get(path);
        if let Some(a) = accept {
            request = request.header(header::ACCEPT_ENCODING, a);
        }
        let response = static_files::<()>(root)
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes().to_vec();
        (Response::from_parts(parts, Body::empty()), bytes)
    }

    #[tokio::test]
    async fn browsers_get_the_smallest_encoding_they_accept() {
        let root = site();
        let path = "/pkg/app.0123456789abcdef.wasm";
        for (accept, encoding, body) in [
            (
                Some("gzip, deflate, br, zstd"),
                Some("br"),
                &b"brotli bytes"[..],
            ),
            (Some("gzip"), Some("gzip"), b"gzip bytes"),
            (None, None, b"\0asm plain"),
        ] {
            let (response, bytes) = get(&root, path, accept).await;
            assert_eq!(response.status(), StatusCode::OK, "{accept:?}");
            assert_eq!(bytes, body, "{accept:?}");
            let headers = response.headers();
            assert_eq!(
                headers
                    .get(header::CONTENT_ENCODING)
                    .and_then(|v| v.to_str().ok()),
                encoding,
                "{accept:?}"
            );
            // Streaming compilation needs the wasm type whatever the encoding.
            assert_eq!(headers[header::CONTENT_TYPE], "application/wasm");
            assert_eq!(headers[header::CACHE_CONTROL], IMMUTABLE);
            assert_eq!(headers[header::VARY], "accept-encoding");
        }
        std::fs::remove_dir_all(root).unwrap();
    }

    #[tokio::test]
    async fn only_hashed_names_are_cached_for_good() {
        let root = site();
        let (response, bytes) = get(&root, "/pkg/notes.css", Some("br")).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(bytes, b"body {}", "no compressed copy: the file itself");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-cache");
        let (response, _) = get(&root, "/pkg/missing.0123456789abcdef.js", Some("br")).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(
            !response.headers().contains_key(header::CACHE_CONTROL),
            "a 404 must not be cached for a year"
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
