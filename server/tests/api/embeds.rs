//! Recorded results where teams write: pictures (`/runs/{id}.png|svg`, `/compare.png|svg`),
//! link previews in permalink pages, oEmbed, an embed's pinned theme, and the 4xx answers
//! for what does not exist or is malformed — after which the server keeps serving.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use protocol::{format_bytes, Record, RecordBody, Report, Sample};

use crate::*;

/// A recorded run with samples shaped like a measured one's (figures from a fixed seed:
/// these tests check how figures are drawn and printed, not what they are).
fn saved_run(grad: &str, median_ms: f64, peak_mib: f64, seed: u64) -> (String, Report) {
    let mut r = protocol::testing::report(grad, 8, vec![]);
    let mut x = seed;
    let mut unit = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let baseline = 46u64 << 20;
    let mut sample = |i: u32, slow: f64| Sample {
        iteration: i,
        latency_ms: median_ms * (1.0 + 0.08 * (unit() - 0.5)) * slow,
        allocated_bytes: baseline + 40_000,
        peak_bytes: baseline + (peak_mib * 1048576.0 * (1.0 + 0.002 * unit())) as u64,
        reserved_bytes: None,
    };
    r.warmup = (0..2).map(|i| sample(i, 1.6)).collect();
    r.samples = (0..20).map(|i| sample(i, 1.0)).collect();
    let mut lat: Vec<f64> = r.samples.iter().map(|s| s.latency_ms).collect();
    lat.sort_by(f64::total_cmp);
    r.latency_ms.p50 = (lat[9] + lat[10]) / 2.0;
    r.latency_ms.p95 = lat[18];
    r.latency_ms.p99 = lat[19];
    r.memory.baseline_bytes = baseline;
    r.memory.peak_allocated_bytes = r.samples.iter().map(|s| s.peak_bytes).max().unwrap();
    r.memory.peak_above_baseline_bytes = r.memory.peak_allocated_bytes - baseline;
    let id = format!("{:016x}", 0xe3bd_0000_0000_0000u64 | seed);
    let record = Record {
        id: id.clone(),
        body: RecordBody::Run(Box::new(r.clone())),
    };
    state().store.save(&record).unwrap();
    (id, r)
}

fn saved_pitfall() -> String {
    let id = "e3bdfeedfeed0001".to_string();
    let report: protocol::PitfallReport = serde_json::from_value(serde_json::json!({
        "id": "nograd-and-dropout", "claim": "no_grad does not switch off dropout",
        "verdict": "confirmed", "reason": "two passes differed by 0.31 under no_grad in train mode",
        "threshold": "confirmed when outputs differ", "figures": [{"name": "difference", "value": 0.31, "unit": "ratio"}],
        "chart": "bar", "series": [{"name": "difference", "unit": "ratio", "x": ["train", "eval"], "y": [0.31, 0.0]}],
        "notes": [],
        "env": {"device": "cpu", "device_name": "cpu", "device_total_memory_bytes": null, "driver_version": null,
                "cuda_version": null, "cudnn_version": null, "libtorch_version": "2.11.0", "cpu_model": "test cpu",
                "threads": 1, "measured_at": "2026-11-30T00:00:00Z", "gradless_version": "0"},
        "record_id": id
    }))
    .unwrap();
    state()
        .store
        .save(&Record {
            id: id.clone(),
            body: RecordBody::Pitfall(Box::new(report)),
        })
        .unwrap();
    id
}

/// A GET as a browser sends it to `localhost:3000`.
fn get_on_host(uri: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::HOST, "localhost:3000")
        .body(Body::empty())
        .unwrap()
}

fn png_size(bytes: &[u8]) -> (u32, u32) {
    let info = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG")
        .info()
        .clone();
    (info.width, info.height)
}

/// The text of the element after `marker` in `html` (up to the next `<`).
fn text_after<'a>(html: &'a str, marker: &str) -> &'a str {
    let start = html.find(marker).unwrap_or_else(|| panic!("no {marker}")) + marker.len();
    let rest = &html[start..];
    let rest = &rest[rest.find('>').unwrap() + 1..];
    &rest[..rest.find('<').unwrap()]
}

#[tokio::test]
async fn a_run_has_a_picture_with_the_figures_its_page_prints() {
    let (id, report) = saved_run("no_grad", 9.1, 24.5, 1);
    let (status, headers, png) = send(app(), get(&format!("/runs/{id}.png"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "image/png");
    assert_eq!(png_size(&png), (1200, 630));
    assert!(headers[header::CACHE_CONTROL]
        .to_str()
        .unwrap()
        .contains("immutable"));
    let etag = headers[header::ETAG].clone();
    let again = Request::get(format!("/runs/{id}.png"))
        .header(header::IF_NONE_MATCH, etag.clone())
        .body(Body::empty())
        .unwrap();
    let (status, headers, body) = send(app(), again).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(headers[header::ETAG], etag);
    assert!(body.is_empty());

    let (_, _, sharp) = send(app(), get(&format!("/runs/{id}.png?width=600&scale=2"))).await;
    assert_eq!(
        png_size(&sharp),
        (1200, 630),
        "600 px at 2 device pixels per px"
    );
    let (_, _, small) = send(app(), get(&format!("/runs/{id}.png?width=320"))).await;
    assert_eq!(png_size(&small), (320, 168));

    // The SVG's text: p50 and peak exactly as the permalink page prints them.
    let (_, _, page) = send(app(), get(&format!("/runs/{id}"))).await;
    let page = String::from_utf8(page).unwrap();
    let p50 = text_after(&page, "data-testid=\"p50\"")
        .split(" / ")
        .next()
        .unwrap()
        .to_string();
    let peak = text_after(&page, "data-testid=\"peak\"").to_string();
    assert_eq!(peak, format_bytes(report.memory.peak_above_baseline_bytes));
    let (status, headers, svg) = send(app(), get(&format!("/runs/{id}.svg"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "image/svg+xml");
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains(&format!(">{p50} ms</text>")), "p50 {p50} ms");
    assert!(svg.contains(&format!(">{peak}</text>")), "peak {peak}");
    assert!(svg.contains("measured by Gradless"));

    // Dark is not light; the same record and options give the same bytes.
    let (_, _, dark) = send(app(), get(&format!("/runs/{id}.png?theme=dark"))).await;
    assert_ne!(dark, png);
    let (_, _, light) = send(app(), get(&format!("/runs/{id}.png?theme=light"))).await;
    assert_eq!(light, png);
}

#[tokio::test]
async fn a_pitfall_result_and_a_comparison_have_pictures() {
    let pit = saved_pitfall();
    let (status, _, png) = send(app(), get(&format!("/runs/{pit}.png"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(png_size(&png), (1200, 630));
    let (_, _, svg) = send(app(), get(&format!("/runs/{pit}.svg?theme=dark"))).await;
    let svg = String::from_utf8(svg).unwrap();
    assert!(
        svg.contains(">Confirmed</text>") && svg.contains("0.31"),
        "{svg}"
    );

    let (a, ra) = saved_run("enabled", 11.2, 98.0, 2);
    let (b, rb) = saved_run("inference_mode", 8.9, 24.4, 3);
    let (status, headers, png) =
        send(app(), get(&format!("/compare.png?runs={a},{b}&scale=2"))).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&png));
    assert_eq!(headers[header::CONTENT_TYPE], "image/png");
    assert_eq!(png_size(&png), (2400, 1260));
    let (_, _, svg) = send(app(), get(&format!("/compare.svg?runs={a},{b}"))).await;
    let svg = String::from_utf8(svg).unwrap();
    let ratio = rb.latency_ms.p50 / ra.latency_ms.p50;
    assert!(svg.contains(&format!("{:.3} ms ({ratio:.2}×)", rb.latency_ms.p50)));

    for (uri, status, field) in [
        (
            format!("/compare.png?runs={a},{pit}"),
            StatusCode::BAD_REQUEST,
            Some("runs"),
        ),
        (
            "/compare.png".to_string(),
            StatusCode::BAD_REQUEST,
            Some("runs"),
        ),
        (
            format!("/compare.svg?runs={a},nope"),
            StatusCode::BAD_REQUEST,
            Some("runs"),
        ),
        (
            format!("/compare.png?runs={a},ffffffffffffffff"),
            StatusCode::NOT_FOUND,
            None,
        ),
    ] {
        let (got, _, body) = send(app(), get(&uri)).await;
        assert_eq!(got, status, "{uri}");
        assert_eq!(error_of(&body).field.as_deref(), field, "{uri}");
    }
}

#[tokio::test]
async fn missing_records_and_malformed_options_are_4xx_and_the_server_goes_on() {
    let (id, _) = saved_run("no_grad", 9.1, 24.5, 4);
    for (uri, status, field) in [
        (
            "/runs/ffffffffffffffff.png".to_string(),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            "/runs/ffffffffffffffff.svg".to_string(),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            "/runs/not-an-id.png".to_string(),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            format!("/runs/{id}.png?theme=blue"),
            StatusCode::BAD_REQUEST,
            Some("theme"),
        ),
        (
            format!("/runs/{id}.png?width=99999"),
            StatusCode::BAD_REQUEST,
            Some("width"),
        ),
        (
            format!("/runs/{id}.png?width=-5"),
            StatusCode::BAD_REQUEST,
            Some("width"),
        ),
        (
            format!("/runs/{id}.svg?scale=3"),
            StatusCode::BAD_REQUEST,
            Some("scale"),
        ),
    ] {
        let (got, headers, body) = send(app(), get(&uri)).await;
        assert_eq!(got, status, "{uri}");
        assert!(headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let e = error_of(&body);
        assert_eq!(e.field.as_deref(), field, "{uri}: {e:?}");
        assert!(
            headers.get(header::CACHE_CONTROL).is_none(),
            "errors are not cached forever"
        );
    }
    let (status, _, png) = send(app(), get(&format!("/runs/{id}.png"))).await;
    assert_eq!(status, StatusCode::OK);
    png_size(&png);
    // The page of that id is still the page.
    let (status, headers, _) = send(app(), get(&format!("/runs/{id}"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
}

/// `content` of the `<meta {attr}="{key}" content=...>` in `head` (attributes in any order).
fn meta(head: &str, attr: &str, key: &str) -> String {
    let at = head
        .find(&format!("{attr}=\"{key}\""))
        .unwrap_or_else(|| panic!("no {key} in {head}"));
    let start = head[..at].rfind("<meta").expect("a meta tag");
    let tag = &head[start..at + head[at..].find('>').unwrap()];
    let content = tag.find("content=\"").expect("content") + "content=\"".len();
    tag[content..content + tag[content..].find('"').unwrap()].replace("&amp;", "&")
}

/// The page's `<head>`, which must lie within its first 32 KB (what unfurlers read).
async fn head_of(uri: &str) -> String {
    let (status, _, body) = send(app(), get_on_host(uri)).await;
    assert_eq!(status, StatusCode::OK, "{uri}");
    let html = String::from_utf8(body).unwrap();
    let end = html.find("</head>").expect("a head");
    assert!(end < 32 * 1024, "{uri}: the head ends at byte {end}");
    html[..end].to_string()
}

#[tokio::test]
async fn permalinks_carry_link_previews_that_point_at_their_picture() {
    let (id, report) = saved_run("no_grad", 9.1, 24.5, 5);
    let head = head_of(&format!("/runs/{id}")).await;
    let image = meta(&head, "property", "og:image");
    assert_eq!(image, format!("http://localhost:3000/runs/{id}.png"));
    assert_eq!(meta(&head, "property", "og:image:width"), "1200");
    assert_eq!(meta(&head, "property", "og:image:height"), "630");
    assert_eq!(
        meta(&head, "property", "og:url"),
        format!("http://localhost:3000/runs/{id}")
    );
    assert_eq!(
        meta(&head, "property", "og:title"),
        "ResNet-18 · eval · no_grad · batch 8"
    );
    let description = meta(&head, "property", "og:description");
    assert!(
        description.contains(&format!("{:.3} ms", report.latency_ms.p50)),
        "{description}"
    );
    assert!(description.contains(&format_bytes(report.memory.peak_above_baseline_bytes)));
    assert_eq!(meta(&head, "name", "twitter:card"), "summary_large_image");
    assert_eq!(meta(&head, "name", "twitter:image"), image);
    // The picture it names is there, at the size it states.
    let (status, _, png) = send(
        app(),
        get_on_host(image.strip_prefix("http://localhost:3000").unwrap()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(png_size(&png), (1200, 630));
    // And so is its oEmbed answer.
    let marker = "<link rel=\"alternate\" type=\"application/json+oembed\" href=\"";
    let start = head.find(marker).expect("an oEmbed link") + marker.len();
    let href = head[start..start + head[start..].find('"').unwrap()].replace("&amp;", "&");
    let (status, _, body) = send(
        app(),
        get_on_host(href.strip_prefix("http://localhost:3000").unwrap()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{href}");
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["type"], "rich");

    // A pitfall result and a comparison preview too; other pages carry no preview.
    let pit = saved_pitfall();
    let head = head_of(&format!("/runs/{pit}")).await;
    assert!(meta(&head, "property", "og:title").ends_with(": Confirmed"));
    assert_eq!(
        meta(&head, "property", "og:image"),
        format!("http://localhost:3000/runs/{pit}.png")
    );
    let (b, _) = saved_run("enabled", 11.2, 98.0, 6);
    let head = head_of(&format!("/compare?runs={id},{b}")).await;
    assert_eq!(
        meta(&head, "property", "og:image"),
        format!("http://localhost:3000/compare.png?runs={id},{b}")
    );
    assert!(!head_of("/pitfalls").await.contains("og:image"));
}

#[tokio::test]
async fn oembed_answers_rich_and_photo_and_refuses_what_it_does_not_serve() {
    let (id, _) = saved_run("no_grad", 9.1, 24.5, 7);
    let oembed = |query: String| async move {
        let (status, _, body) = send(app(), get_on_host(&format!("/oembed?{query}"))).await;
        (
            status,
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
        )
    };
    let url = format!("http%3A%2F%2Flocalhost%3A3000%2Fruns%2F{id}");
    let (status, rich) = oembed(format!("url={url}&format=json")).await;
    assert_eq!(status, StatusCode::OK, "{rich}");
    for f in [
        "version",
        "type",
        "html",
        "width",
        "height",
        "thumbnail_url",
        "thumbnail_width",
        "thumbnail_height",
    ] {
        assert!(!rich[f].is_null(), "{f}: {rich}");
    }
    assert_eq!(rich["version"], "1.0");
    assert!(rich["html"]
        .as_str()
        .unwrap()
        .contains(&format!("src=\"http://localhost:3000/embed/runs/{id}\"")));
    let (status, photo) = oembed(format!("url={url}&type=photo&maxwidth=600&maxheight=400")).await;
    assert_eq!(status, StatusCode::OK);
    for f in ["version", "type", "url", "width", "height"] {
        assert!(!photo[f].is_null(), "{f}: {photo}");
    }
    assert_eq!(photo["type"], "photo");
    assert!(photo["width"].as_u64().unwrap() <= 600 && photo["height"].as_u64().unwrap() <= 400);
    // The URL it names draws at the size it says.
    let image = photo["url"]
        .as_str()
        .unwrap()
        .strip_prefix("http://localhost:3000")
        .unwrap()
        .to_string();
    let (_, _, png) = send(app(), get_on_host(&image)).await;
    assert_eq!(png_size(&png), (600, 315));
    // A URL of the picture itself asks for the photo.
    let (_, photo) = oembed(format!("url=http://localhost:3000/runs/{id}.png")).await;
    assert_eq!(photo["type"], "photo");

    for (query, status, field) in [
        (
            format!("url={url}&format=xml"),
            StatusCode::BAD_REQUEST,
            Some("format"),
        ),
        (
            "url=http%3A%2F%2Flocalhost%3A3000%2Fruns%2Fffffffffffffffff".to_string(),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            format!("url=https%3A%2F%2Fevil.example%2Fruns%2F{id}"),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            "url=http%3A%2F%2Flocalhost%3A3000%2Fpitfalls".to_string(),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            format!("url={url}&maxwidth=100"),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            format!("url={url}&maxwidth=wide"),
            StatusCode::BAD_REQUEST,
            Some("maxwidth"),
        ),
        (
            "format=json".to_string(),
            StatusCode::BAD_REQUEST,
            Some("url"),
        ),
    ] {
        let (got, body) = oembed(query.clone()).await;
        assert_eq!(got, status, "{query}: {body}");
        assert_eq!(body["error"]["field"].as_str(), field, "{query}: {body}");
    }
}

#[tokio::test]
async fn an_embed_pins_the_theme_it_is_asked_for() {
    let (id, _) = saved_run("no_grad", 9.1, 24.5, 8);
    let head = head_of(&format!("/embed/runs/{id}?theme=dark")).await;
    assert!(
        head.contains("<html lang=\"en\" data-theme=\"dark\">"),
        "{head}"
    );
    assert!(
        head.contains("<meta name=\"color-scheme\" content=\"dark\">"),
        "{head}"
    );
    let head = head_of(&format!("/embed/runs/{id}?theme=light")).await;
    assert!(head.contains("<meta name=\"color-scheme\" content=\"light\">"));
    let head = head_of(&format!("/embed/runs/{id}?theme=purple")).await;
    assert!(
        head.contains("<meta name=\"color-scheme\" content=\"light dark\">")
            && !head.contains("data-theme")
    );
    // A full page follows the reader's system whatever its query says.
    let head = head_of(&format!("/runs/{id}?theme=dark")).await;
    assert!(!head.contains("data-theme"));
}

/// The p50 of one CPU run of resnet18 on one thread, through the API.
async fn measured_p50() -> f64 {
    let spec = r#"{"model": "resnet18", "device": "cpu", "batch": 2, "warmup": 3, "iters": 40, "threads": 1}"#;
    let (status, _, body) = send(app(), post_run(spec)).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let created: protocol::RunCreated = serde_json::from_slice(&body).unwrap();
    match follow(app(), &created.events_url).await.last() {
        Some(protocol::Event::Done { report }) => report.latency_ms.p50,
        other => panic!("{other:?}"),
    }
}

/// Pictures are drawn off the device thread: a run measured while pictures are drawn in a
/// loop (each at a new width, so none comes from the cache) against the same run alone,
/// before and after. Prints the figures as JSON; fails only past a 1.5× slowdown (the
/// machine's other load moves the figures by more than drawing should).
/// `cargo test --release --workspace --test api -- --ignored drawing_does_not_slow --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn drawing_does_not_slow_a_run() {
    let (id, _) = saved_run("no_grad", 9.1, 24.5, 9);
    let before = measured_p50().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drawer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut drawn, mut width, started) = (0u32, 300u32, std::time::Instant::now());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (status, _, _) =
                    send(app(), get(&format!("/runs/{id}.png?width={width}"))).await;
                assert_eq!(status, StatusCode::OK);
                drawn += 1;
                width = if width >= 2400 { 300 } else { width + 1 };
            }
            (drawn, started.elapsed().as_secs_f64())
        })
    };
    let during = measured_p50().await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (drawn, seconds) = drawer.await.unwrap();
    let after = measured_p50().await;
    let alone = (before + after) / 2.0;
    println!(
        "{}",
        serde_json::json!({
            "run": "resnet18 cpu batch 2, 1 thread, 40 iterations",
            "p50_ms_alone_before": before, "p50_ms_alone_after": after,
            "p50_ms_while_drawing": during, "ratio": during / alone,
            "pictures_drawn": drawn, "pictures_per_s": f64::from(drawn) / seconds,
        })
    );
    assert!(drawn > 0);
    assert!(
        during / alone < 1.5,
        "{during} ms while drawing against {alone} ms alone"
    );
}

/// A site as scripts/build-site.sh leaves it, as far as the page shell reads it: its
/// manifest (the files themselves are not needed to render a page).
fn built_site(record_embed: bool) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gradless-site-{}-{record_embed}", std::process::id()));
    std::fs::create_dir_all(dir.join("pkg")).unwrap();
    let mut manifest = serde_json::json!({
        "js": "/pkg/gradless.0123abcd.js", "wasm": "/pkg/gradless_bg.0123abcd.wasm",
        "css": "/pkg/gradless.0123abcd.css", "echarts": "/pkg/echarts.0123abcd.js",
    });
    if record_embed {
        manifest["record_embed"] = "/pkg/record-embed.0123abcd.js".into();
    }
    std::fs::write(dir.join("asset-manifest.json"), manifest.to_string()).unwrap();
    dir
}

async fn page_on_site(site: &std::path::Path, uri: &str) -> String {
    let mut state = state();
    state.leptos.site_root = site.to_string_lossy().to_string().into();
    let (status, _, body) = send(server::router(state), get_on_host(uri)).await;
    assert_eq!(status, StatusCode::OK, "{uri}");
    String::from_utf8(body).unwrap()
}

#[tokio::test]
async fn an_embedded_run_is_drawn_without_the_wasm_where_the_site_has_its_script() {
    let (id, _) = saved_run("no_grad", 9.1, 24.5, 12);
    let site = built_site(true);
    let embed = page_on_site(&site, &format!("/embed/runs/{id}")).await;
    // ECharts and the script that draws; no wasm, and nothing only a hydrating app reads.
    // Deferred: it reads the document, so it must not run before the parser has read it.
    let tag = embed.split(r#"<script src="/pkg/record-embed.0123abcd.js""#).nth(1).expect("the script").split('>').next().unwrap();
    assert!(tag.contains("defer") && !tag.contains("async"), "{tag}");
    assert!(embed.contains(r#"<script src="/pkg/echarts.0123abcd.js""#));
    assert!(!embed.contains(".wasm") && !embed.contains("/pkg/gradless.0123abcd.js"), "{embed}");
    for only_for_the_app in ["gradless-info", "gradless-records", "gradless-card-titles", "data-testid=\"embed\""] {
        assert!(!embed.contains(only_for_the_app), "{only_for_the_app} in {embed}");
    }
    // Each chart's options, fitted to widths narrowest first, beside the element it is drawn in.
    for chart in ["latency-chart", "memory-chart"] {
        let marker = format!(r#"data-chart-for="{chart}">"#);
        let json = embed.split(&marker).nth(1).unwrap_or_else(|| panic!("no {marker}")).split("</script>").next().unwrap();
        let fits: Vec<(u32, serde_json::Value)> = serde_json::from_str(json).unwrap_or_else(|e| panic!("{chart}: {e}: {json}"));
        assert!(!fits.is_empty() && fits.windows(2).all(|w| w[0].0 < w[1].0), "{chart}");
        assert!(fits.iter().all(|(_, o)| o["series"].as_array().is_some_and(|s| !s.is_empty())), "{chart}");
        assert!(embed.contains(&format!(r#"id="{chart}""#)));
    }
    // Its PNG buttons name what they save, for the script.
    assert!(embed.contains(&format!(r#"data-png-of="latency-chart" data-png-file="gradless-{id}-latency.png""#)), "{embed}");
    // The full page hydrates as before, and carries no options for a script.
    let full = page_on_site(&site, &format!("/runs/{id}")).await;
    assert!(full.contains("/pkg/gradless_bg.0123abcd.wasm") && full.contains("gradless-records"));
    assert!(!full.contains("data-chart-for") && !full.contains("record-embed"));
    // A site built without the script (an older build) hydrates the embed as before.
    let older = page_on_site(&built_site(false), &format!("/embed/runs/{id}")).await;
    assert!(older.contains("/pkg/gradless_bg.0123abcd.wasm") && !older.contains("data-chart-for"));
}

/// One chart of a run alone, at the size of the page's element it stands in for (the Lab's
/// first view of a recorded run, until ECharts has come); what does not apply is a 400
/// naming `chart` or `height`.
#[tokio::test]
async fn a_runs_charts_are_drawn_alone_at_the_size_asked_for() {
    let (id, report) = saved_run("no_grad", 9.1, 24.5, 13);
    let (_, whole_headers, _) = send(app(), get(&format!("/runs/{id}.svg"))).await;
    for chart in ["latency", "memory"] {
        let (status, headers, svg) = send(app(), get(&format!("/runs/{id}.svg?chart={chart}&width=640&height=300"))).await;
        assert_eq!(status, StatusCode::OK, "{chart}");
        assert_eq!(headers[header::CONTENT_TYPE], "image/svg+xml");
        assert_ne!(headers[header::ETAG], whole_headers[header::ETAG], "{chart}: its own ETag");
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("width=\"640\" height=\"300\""), "{chart}");
        // Only the chart: no headline figures or provenance line.
        assert!(!svg.contains("measured by Gradless"), "{chart}");
        let (_, _, png) = send(app(), get(&format!("/runs/{id}.png?chart={chart}&width=640&height=300"))).await;
        assert_eq!(png_size(&png), (640, 300), "{chart}");
    }
    let (_, _, latency) = send(app(), get(&format!("/runs/{id}.svg?chart=latency&width=640&height=300"))).await;
    let latency = String::from_utf8(latency).unwrap();
    assert!(latency.contains(&format!("p50 {:.3} ms", report.latency_ms.p50)), "the run's own p50");

    let pitfall = saved_pitfall();
    let (a, _) = saved_run("enabled", 9.0, 30.0, 14);
    for (uri, field) in [
        (format!("/runs/{id}.svg?chart=pie"), "chart"),
        (format!("/runs/{id}.svg?chart=step-latency"), "chart"),
        (format!("/runs/{id}.svg?height=300"), "height"),
        (format!("/runs/{id}.svg?chart=memory&height=20"), "height"),
        (format!("/runs/{pitfall}.svg?chart=latency"), "chart"),
        (format!("/compare.svg?runs={a},{id}&chart=latency"), "chart"),
    ] {
        let (status, _, body) = send(app(), get(&uri)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(error_of(&body).field.as_deref(), Some(field), "{uri}");
    }
}

/// The Lab's and Generate's bare addresses name ECharts for the app to fetch on demand
/// (their first view is a recorded run, shown as the pictures above); every other page,
/// and those pages with settings in the address, load it with the page.
#[tokio::test]
async fn a_bare_lab_or_generate_page_leaves_echarts_to_be_fetched_on_demand() {
    let site = built_site(false);
    let meta = r#"<meta name="gradless-echarts" content="/pkg/echarts.0123abcd.js""#;
    let script = r#"<script src="/pkg/echarts.0123abcd.js" async"#;
    for uri in ["/", "/generate"] {
        let page = page_on_site(&site, uri).await;
        assert!(page.contains(meta) && !page.contains(script), "{uri}: {page}");
    }
    for uri in ["/?grad=no_grad", "/generate?model=llama_tiny", "/runs", "/pitfalls", "/embed/lab"] {
        let page = page_on_site(&site, uri).await;
        assert!(page.contains(script) && !page.contains(meta), "{uri}");
    }
}
