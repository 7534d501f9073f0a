//! Gradless's user interface, rendered on the server (`ssr`) and hydrated in the browser
//! (`hydrate`). Server-only code needs the `ssr` feature; browser-only code the `hydrate`
//! feature, which pulls in no tch, tokio or axum.
//!
//! What the server offers (devices, models, limits) reaches the page as a
//! [`protocol::ServerInfo`] in context: on the server from the caller, in the browser from
//! the JSON the server embedded in the page, so both render the same controls.

// The Lab's view is one deeply nested type; the compiler's default depth is too shallow for it.
#![recursion_limit = "256"]

pub mod cards;
pub mod charts;
#[cfg(feature = "hydrate")]
mod client;
pub mod embed;
pub mod explain;
pub mod fleet;
pub mod gen_quality;
pub mod gen_results;
pub mod gen_settings;
pub mod generate;
pub mod lab;
pub mod learn;
pub mod pitfalls;
mod prediction;
pub mod records;
pub mod routes;
pub mod run_view;
pub mod settings;
pub mod static_page;
pub mod widgets;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::hooks::use_location;
use leptos_router::{Lazy, ParamSegment, StaticSegment};
use protocol::ServerInfo;

/// The id of the `<script type="application/json">` carrying the ServerInfo.
const INFO_ELEMENT: &str = "gradless-info";

/// The HTML document around the app.
///
/// What it loads, in the order a cold visit needs it (scripts/build-site.sh builds it all;
/// nothing comes from a CDN):
/// - the stylesheet, the one render-blocking file, so the server-rendered page paints at once;
/// - the wasm, fetched from the first bytes of `<head>` (`preload`) and compiled while it
///   downloads (wasm-bindgen's init uses `WebAssembly.instantiateStreaming`, which needs
///   the server's `application/wasm`), and its js glue (`modulepreload`);
/// - ECharts `async`: downloaded in parallel and run whenever it arrives, so neither the
///   parse, the first paint nor hydration waits for it; a chart the app draws before it has
///   run waits for the window's `load` event (`charts::render`). The Lab's and Generate's
///   bare addresses name it in a `<meta>` instead: their first view is a recorded run, shown
///   as the server's pictures, and the app fetches ECharts when the visitor acts;
/// - the module script that instantiates the wasm and hydrates.
///
/// With `asset-manifest.json` in the site root (written by scripts/build-site.sh) the files
/// have content-hashed names, which the server may let browsers keep for a year; without one
/// (e.g. a `cargo leptos` build), Leptos' own unhashed hydration scripts.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    let assets = AssetNames::of_site(&options.site_root);
    let path = page_path();
    let page = routes::Page::of(&path);
    // An embedded recorded run is drawn by a small script instead of the wasm
    // (static_page.rs), where the build made that script.
    let record_embed = assets
        .as_ref()
        .and_then(|a| a.record_embed.clone())
        .filter(|_| page.is_some_and(routes::Page::is_static));
    let head = match (assets, record_embed) {
        (Some(a), Some(script)) => {
            provide_context(static_page::StaticPage);
            // Deferred, not async: it reads the charts' options and the page's body, so it
            // runs once the document is parsed; ECharts may come before or after it.
            view! {
                <link rel="stylesheet" href=a.css />
                <script src=a.echarts async></script>
                <script src=script defer></script>
            }
            .into_any()
        }
        (Some(a), None) => {
            let boot = hydration_module(&a);
            // The page's CSP allows inline scripts by the per-page nonce only (the server
            // puts it in context, as Leptos' own hydration scripts use it).
            let nonce = leptos::nonce::use_nonce();
            // A visit that lands on a lazy page needs its chunks before it hydrates: fetched
            // beside the main module rather than after it.
            let chunks: Vec<String> = page
                .and_then(|p| a.chunks.get(p.split_name()).cloned())
                .unwrap_or_default();
            let chunks = chunks
                .into_iter()
                .map(|href| view! { <link rel="preload" href=href r#as="fetch" r#type="application/wasm" crossorigin="" /> })
                .collect_view();
            let split = a.split.clone().map(|href| view! { <link rel="modulepreload" href=href /> });
            // ECharts with the page, or named for the app to fetch when the visitor acts.
            let echarts = if draws_first_view_as_pictures() {
                view! { <meta name="gradless-echarts" content=a.echarts /> }.into_any()
            } else {
                view! { <script src=a.echarts async></script> }.into_any()
            };
            view! {
                <link rel="stylesheet" href=a.css />
                <link rel="preload" href=a.wasm r#as="fetch" r#type="application/wasm" crossorigin="" />
                {chunks}
                <link rel="modulepreload" href=a.js />
                {split}
                {echarts}
                <script type="module" nonce=nonce inner_html=boot></script>
            }
            .into_any()
        }
        (None, _) => view! {
            <link rel="stylesheet" href="/pkg/gradless.css" />
            <script src="/echarts.min.js" defer></script>
            <HydrationScripts options />
        }
        .into_any(),
    };
    // Link previews and a pinned theme, when the server put them in context (a
    // permalink's Open Graph tags go first, well inside what unfurlers read).
    let extra = use_context::<embed::HeadTags>().unwrap_or_default();
    let theme = extra.theme;
    let previews = embed::head_view(extra);
    view! {
        <!DOCTYPE html>
        <html lang="en" data-theme=theme>
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content=theme.unwrap_or("light dark") />
                {previews}
                <meta name="description" content="See what model.eval(), torch.no_grad(), torch.inference_mode() and autocast really do to memory and latency, measured live with libtorch." />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                {head}
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// The browser assets' paths as scripts/build-site.sh named them (content-hashed), read
/// from `asset-manifest.json` in the site root.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct AssetNames {
    /// wasm-bindgen's js glue, an ES module exporting `default` (init) and `hydrate`.
    pub js: String,
    pub wasm: String,
    pub css: String,
    /// ECharts; sets `window.echarts`.
    pub echarts: String,
    /// The split wasm's loader, which the glue imports (absent from an unsplit build).
    #[serde(default)]
    pub split: Option<String>,
    /// The script that draws a page served without the wasm (`app/js/record-embed.js`,
    /// see [`static_page`]); absent, such a page hydrates like the others.
    #[serde(default)]
    pub record_embed: Option<String>,
    /// The wasm modules each lazy function needs (its own and the shared ones), by the
    /// function's name ([`routes::Page::split_name`]).
    #[serde(default)]
    pub chunks: std::collections::BTreeMap<String, Vec<String>>,
}

impl AssetNames {
    /// The manifest of the site at `site_root`, `None` without a readable one. Read again
    /// only when the file changes (one `stat` per page), so a server keeps serving the
    /// right names across `scripts/build-site.sh` runs.
    #[cfg(feature = "ssr")]
    pub fn of_site(site_root: &str) -> Option<AssetNames> {
        use std::sync::Mutex;
        type Cached = (
            std::path::PathBuf,
            std::time::SystemTime,
            Option<AssetNames>,
        );
        static CACHE: Mutex<Option<Cached>> = Mutex::new(None);
        let path = std::path::Path::new(site_root).join("asset-manifest.json");
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok()?;
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((p, m, names)) = cache.as_ref() {
            if *p == path && *m == modified {
                return names.clone();
            }
        }
        let names = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| AssetNames::parse(&text));
        *cache = Some((path, modified, names.clone()));
        names
    }

    /// In the browser the shell is never rendered.
    #[cfg(not(feature = "ssr"))]
    pub fn of_site(_site_root: &str) -> Option<AssetNames> {
        None
    }

    /// The manifest's JSON, `None` unless every path is a plain absolute path (it goes
    /// into attributes and a script).
    pub fn parse(text: &str) -> Option<AssetNames> {
        let names: AssetNames = serde_json::from_str(text).ok()?;
        let plain = |p: &str| {
            p.starts_with('/')
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b))
        };
        let all_plain = [&names.js, &names.wasm, &names.css, &names.echarts]
            .into_iter()
            .chain(&names.split)
            .chain(&names.record_embed)
            .chain(names.chunks.values().flatten())
            .all(|p| plain(p));
        all_plain.then_some(names)
    }
}

/// The module script that starts the app: instantiate the wasm (streaming, from the
/// preloaded response) and hydrate.
fn hydration_module(assets: &AssetNames) -> String {
    format!(
        "import init, {{ hydrate }} from {js};\ninit({{ module_or_path: {wasm} }}).then(() => hydrate());",
        js = script_json(&assets.js),
        wasm = script_json(&assets.wasm),
    )
}

/// `value` as JSON to put inside a `<script type="application/json">` element. The HTML
/// parser ends that element at `</script`, and `<!--` / `<script` switch it into "escaped"
/// states that can swallow the rest of the page; `&` matters if the text is ever read as
/// markup, and U+2028/U+2029 end a line in older JavaScript. So `<`, `>`, `&`, U+2028 and
/// U+2029 go out as JSON `\uXXXX` escapes (inside JSON strings, the only place they can
/// occur): the same value reads back, and no data can reach the HTML parser as markup.
pub(crate) fn script_json<T: serde::Serialize>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The text of the `<script type="application/json" id=...>` the server rendered into the
/// page: how data read on the server reaches the hydrating app without a second request.
#[cfg(feature = "hydrate")]
pub(crate) fn page_json(id: &str) -> Option<String> {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
        .and_then(|e| e.text_content())
}

/// The models this page knows ([`protocol::Catalog`]): the server's, in context (the
/// server provides its own; the browser the one [`App`] read from the page's /api/info).
/// Names read from an address, a picker or a record are resolved in it.
pub fn catalog() -> protocol::Catalog {
    use_context::<protocol::Catalog>().unwrap_or_default()
}

/// The ServerInfo for this render, and the catalog of its models: from context on the
/// server, from the page in the browser.
fn server_info() -> (ServerInfo, protocol::Catalog) {
    #[cfg(feature = "hydrate")]
    {
        // The catalog is read from the info's own models (the team's sidecars and
        // decoders), and the info's ids resolved in it, so names parse and display here
        // as they do on the server: a team decoder's name left unresolved would not be the
        // model it is, and the page would list other models than the server rendered
        // (hydration then fails).
        let info = page_json(INFO_ELEMENT).and_then(|t| serde_json::from_str::<ServerInfo>(&t).ok());
        if let Some(mut info) = info {
            let catalog = info.catalog();
            info.resolve(&catalog);
            return (info, catalog);
        }
    }
    let info = use_context::<ServerInfo>().unwrap_or_else(|| ServerInfo {
        version: String::new(),
        libtorch_version: String::new(),
        devices: vec![],
        models: vec![],
        limits: Default::default(),
        pitfalls: vec![],
        auth_required: false,
        workers: vec![],
    });
    (info, catalog())
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let (info, catalog) = server_info();
    provide_context(catalog);
    let path = page_path();
    // What the hydrating app reads from the page; a page that does not hydrate needs none.
    let hydrates = !static_page::is_static();
    let info_json = hydrates.then(|| script_json(&cards::for_page(&info, &path)));
    let info_element = info_json
        .map(|json| view! { <script type="application/json" id=INFO_ELEMENT inner_html=json></script> });
    // A permalink names an experiment by its card's title: the titles only, not the cards.
    let titles = cards::titles_for_page(&info, &path)
        .filter(|_| hydrates)
        .map(|json| view! { <script type="application/json" id=cards::TITLES_ELEMENT inner_html=json></script> });
    // A CUDA build of libtorch on a server without a GPU is said to be one.
    let no_gpu = !info.devices.iter().any(|d| d.kind == protocol::DeviceKind::Cuda);
    let libtorch = widgets::libtorch_line(&info.libtorch_version, no_gpu.then_some("this server has no GPU"));
    let version = info.version.clone();
    provide_context(info);
    view! {
        <Title text="Gradless — what PyTorch's inference settings really do" />
        {info_element}
        {titles}
        <Router>
            <TopBar />
            <main>
                <Routes fallback=|| view! { <p class="error">"Page not found."</p> }>
                    <Route path=StaticSegment("") view=|| view! { <lab::LabPage /> } />
                    // The Lab is in the main wasm module; every other page is a lazy route, its
                    // code a chunk of its own (app/src/routes.rs says how to add one).
                    <Route path=StaticSegment("generate") view={Lazy::<routes::GenerateRoute>::new()} />
                    <Route path=StaticSegment("pitfalls") view={Lazy::<routes::PitfallsRoute>::new()} />
                    <Route path=(StaticSegment("runs"), ParamSegment("id")) view={Lazy::<routes::RecordRoute>::new()} />
                    <Route path=StaticSegment("compare") view={Lazy::<routes::CompareRoute>::new()} />
                    <Route path=StaticSegment("runs") view={Lazy::<routes::RecordsRoute>::new()} />
                    <Route path=(StaticSegment("embed"), StaticSegment("lab")) view=|| view! { <lab::LabPage embed=true /> } />
                    <Route
                        path=(StaticSegment("embed"), StaticSegment("runs"), ParamSegment("id"))
                        view={Lazy::<routes::EmbedRecordRoute>::new()}
                    />
                    <Route path=(StaticSegment("embed"), StaticSegment("pitfalls"), ParamSegment("id")) view={Lazy::<routes::EmbedPitfallRoute>::new()} />
                    <Route path=StaticSegment("learn") view={Lazy::<routes::LearnIndexRoute>::new()} />
                    <Route path=(StaticSegment("learn"), StaticSegment("new")) view={Lazy::<routes::LearnNewRoute>::new()} />
                    <Route path=(StaticSegment("learn"), ParamSegment("id")) view={Lazy::<routes::LearnRoute>::new()} />
                    <Route path=(StaticSegment("learn"), ParamSegment("id"), StaticSegment("answers")) view={Lazy::<routes::LearnAnswersRoute>::new()} />
                    <Route path=(StaticSegment("embed"), StaticSegment("learn"), ParamSegment("id")) view={Lazy::<routes::EmbedLearnRoute>::new()} />
                </Routes>
            </main>
            <BottomBar version libtorch />
        </Router>
    }
}

/// The path of the page being rendered (the request's on the server).
fn page_path() -> String {
    path_of(&page_url()).to_string()
}

/// Whether this page is the Lab's or the Generate page's bare address: its first view is a
/// recorded run, drawn as the server's pictures, so ECharts is fetched on demand
/// (charts::defer_until_wanted) rather than with the page.
fn draws_first_view_as_pictures() -> bool {
    let url = page_url();
    let bare = url.split_once('?').is_none_or(|(_, q)| q.split('#').next().unwrap_or_default().is_empty());
    bare && matches!(path_of(&url), "/" | "/generate")
}

/// The page's URL, as Leptos's server gives it (a full URL with its query) or as the
/// browser's location has it.
fn page_url() -> String {
    #[cfg(feature = "ssr")]
    let path = use_context::<leptos_router::location::RequestUrl>()
        .map(|u| u.as_ref().to_string())
        .unwrap_or_default();
    #[cfg(not(feature = "ssr"))]
    let path = {
        #[cfg(feature = "hydrate")]
        let p = web_sys::window()
            .and_then(|w| {
                let l = w.location();
                Some(format!("{}{}", l.pathname().ok()?, l.search().ok()?))
            })
            .unwrap_or_default();
        #[cfg(not(feature = "hydrate"))]
        let p = String::new();
        p
    };
    path
}

/// The path of `url`: Leptos's server gives the request's as a full URL
/// (`http://leptos.dev/pitfalls?x`), the browser a path.
fn path_of(url: &str) -> &str {
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => url,
    };
    path.split(['?', '#']).next().unwrap_or_default()
}

/// Whether the page is an `/embed/...` page (minimal chrome, sized to its iframe).
fn is_embed(path: &str) -> bool {
    path.starts_with("/embed/")
}

/// The full page an embed stands for: `/embed/lab?q` → `/?q`, `/embed/runs/x` → `/runs/x`,
/// `/embed/pitfalls/x` → `/pitfalls#x`. Always a path on this server: anything that is not
/// one of the embed routes (e.g. `/embed//evil.example`, which a browser would read as
/// another site) links to the Lab instead.
pub fn full_page(embed_path: &str, query: &str) -> String {
    let rest = embed_path.strip_prefix("/embed").unwrap_or("");
    let safe_segment = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    let query_ok = query.is_empty() || (query.starts_with('?') && !query.contains(['\\', '#']));
    if rest == "/lab" {
        if query_ok {
            format!("/{query}")
        } else {
            "/".to_string()
        }
    } else if let Some(card) = rest.strip_prefix("/pitfalls/").filter(|c| safe_segment(c)) {
        format!("/pitfalls#{card}")
    } else if let Some(id) = rest.strip_prefix("/learn/").filter(|c| safe_segment(c)) {
        format!("/learn/{id}")
    } else if let Some(id) = rest.strip_prefix("/runs/").filter(|c| safe_segment(c)) {
        format!("/runs/{id}")
    } else {
        "/".to_string()
    }
}

/// The navigation, except in embeds.
#[component]
fn TopBar() -> impl IntoView {
    let location = use_location();
    move || {
        (!is_embed(&location.pathname.get())).then(|| view! {
            <header class="top">
                <nav>
                    <a class="brand" href="/">"Gradless"</a>
                    <a href="/" class="nav">"Lab"</a>
                    <a href="/generate" class="nav">"Generate"</a>
                    <a href="/pitfalls" class="nav">"Pitfalls"</a>
                    <a href="/learn" class="nav" rel="external">"Learn"</a>
                    <a href="/runs" class="nav" rel="external">"Recorded"</a>
                </nav>
                <p class="tagline">
                    "Toggle "<code>"model.eval()"</code>", "<code>"torch.no_grad()"</code>", "
                    <code>"torch.inference_mode()"</code>" and autocast, and watch memory and latency measured live."
                </p>
            </header>
        })
    }
}

/// What measured the numbers; in an embed, also a way out to the full page.
#[component]
fn BottomBar(version: String, libtorch: String) -> impl IntoView {
    let location = use_location();
    move || {
        let path = location.pathname.get();
        if is_embed(&path) {
            let search = location.search.get();
            let query = search.trim_start_matches('?');
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{query}")
            };
            let full = full_page(&path, &query);
            view! {
                <footer class="embed-footer">
                    {format!("Measured by Gradless {version} · {libtorch} · ")}
                    <a href=full target="_blank" rel="noopener">"open the full page ↗"</a>
                </footer>
            }
            .into_any()
        } else {
            view! {
                <footer>
                    {format!("Gradless {version} · {libtorch} · every number on this page was measured by this server, or recorded by it and labelled with the hardware and date")}
                </footer>
            }
            .into_any()
        }
    }
}

/// The browser's entry point, called by the hydration script.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    let path = web_sys::window()
        .and_then(|w| w.location().pathname().ok())
        .unwrap_or_default();
    // A page that is a lazy route hydrates once its chunk is here: the server rendered it,
    // and hydrating synchronously (below) needs its code. The Lab starts at once.
    match routes::Page::of(&path) {
        Some(page) => wasm_bindgen_futures::spawn_local(async move {
            page.preload().await;
            start();
        }),
        None => start(),
    }
}

/// Hydrates the page (synchronously: `hydrate_body`, whose async twin build-site.sh
/// removes from the wasm) and starts what runs beside it.
#[cfg(feature = "hydrate")]
fn start() {
    leptos::mount::hydrate_body(App);
    // A marker for people and browser tests: from here on the page is live.
    if let Some(root) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.document_element())
    {
        let _ = root.set_attribute("data-hydrated", "true");
    }
    let path = web_sys::window()
        .and_then(|w| w.location().pathname().ok())
        .unwrap_or_default();
    if is_embed(&path) {
        embed::watch_height();
    } else {
        routes::prefetch_on_intent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_json_cannot_close_its_script_element() {
        let json = script_json(&"</script><script>alert(1)</script>");
        assert!(!json.contains("</"), "{json}");
        assert_eq!(
            serde_json::from_str::<String>(&json).unwrap(),
            "</script><script>alert(1)</script>"
        );
    }

    #[test]
    fn page_json_carries_no_markup_and_reads_back_the_same() {
        let hostile = "<!--<script>a & b > c\u{2028}d\u{2029}e</SCRIPT>";
        let json = script_json(&vec![hostile.to_string()]);
        for c in ['<', '>', '&', '\u{2028}', '\u{2029}'] {
            assert!(!json.contains(c), "{c:?} in {json}");
        }
        assert_eq!(
            serde_json::from_str::<Vec<String>>(&json).unwrap(),
            [hostile]
        );
    }

    #[test]
    fn a_page_path_is_read_from_a_full_url_or_a_path() {
        assert_eq!(path_of("http://leptos.dev/pitfalls?x=1"), "/pitfalls");
        assert_eq!(path_of("http://leptos.dev/embed/runs/abc#top"), "/embed/runs/abc");
        assert_eq!(path_of("http://leptos.dev"), "/");
        assert_eq!(path_of("/generate?model=x"), "/generate");
        assert_eq!(path_of(""), "");
    }

    #[test]
    fn embed_links_stay_on_this_server() {
        for (path, query) in [
            ("/embed//evil.example", ""),
            ("/embed/runs//evil.example", ""),
            ("/embed/runs/x/../../evil", ""),
            ("/embed/pitfalls/a\\b", ""),
            ("/embed/lab", "?x#y"),
            ("/embed/lab", "/evil.example"),
            ("/embedded", ""),
        ] {
            let link = full_page(path, query);
            assert!(link.starts_with('/'), "{path}{query} -> {link}");
            assert!(
                !link.starts_with("//") && !link.contains('\\'),
                "{path}{query} -> {link}"
            );
        }
    }

    #[test]
    fn the_asset_manifest_names_only_plain_paths() {
        let good = r#"{"js": "/pkg/gradless.0123abcd.js", "wasm": "/pkg/gradless_bg.0123abcd.wasm",
                       "css": "/pkg/gradless.0123abcd.css", "echarts": "/pkg/echarts.0123abcd.js"}"#;
        let names = AssetNames::parse(good).expect("a manifest build-site.sh writes");
        let module = hydration_module(&names);
        assert!(
            module.contains(r#"from "/pkg/gradless.0123abcd.js""#),
            "{module}"
        );
        assert!(module.contains(r#"module_or_path: "/pkg/gradless_bg.0123abcd.wasm""#));
        // Anything that could leave an attribute or the script is refused, as is a relative path.
        for bad in [
            "x.js",
            "/pkg/a\"onload=\"x.js",
            "/pkg/</script>.js",
            "/pkg/a b.js",
        ] {
            let mut manifest: serde_json::Value = serde_json::from_str(good).unwrap();
            manifest["js"] = bad.into();
            assert_eq!(AssetNames::parse(&manifest.to_string()), None, "{bad}");
            // The split build's loader and chunks are held to the same rule.
            let mut manifest: serde_json::Value = serde_json::from_str(good).unwrap();
            manifest["split"] = bad.into();
            assert_eq!(AssetNames::parse(&manifest.to_string()), None, "split {bad}");
            let mut manifest: serde_json::Value = serde_json::from_str(good).unwrap();
            manifest["chunks"] = serde_json::json!({ "__generate_route_view": ["/pkg/chunk_1.0123abcd.wasm", bad] });
            assert_eq!(AssetNames::parse(&manifest.to_string()), None, "chunk {bad}");
        }
        let split = r#"{"js": "/pkg/gradless.0123abcd.js", "wasm": "/pkg/gradless_bg.0123abcd.wasm",
                        "css": "/pkg/gradless.0123abcd.css", "echarts": "/pkg/echarts.0123abcd.js",
                        "split": "/pkg/__wasm_split.0123abcd.js",
                        "chunks": {"__generate_route_view": ["/pkg/chunk_1_x.0123abcd.wasm", "/pkg/split_generate_route_view.0123abcd.wasm"]}}"#;
        let names = AssetNames::parse(split).expect("a split build's manifest");
        assert_eq!(names.split.as_deref(), Some("/pkg/__wasm_split.0123abcd.js"));
        assert_eq!(names.chunks[routes::Page::Generate.split_name()].len(), 2);
        assert_eq!(
            AssetNames::parse(r#"{"js": "/pkg/a.js"}"#),
            None,
            "incomplete"
        );
        assert_eq!(AssetNames::parse("not json"), None);
    }

    #[test]
    fn embeds_link_to_their_full_page() {
        assert_eq!(
            full_page("/embed/lab", "?model=resnet18&lock=model"),
            "/?model=resnet18&lock=model"
        );
        assert_eq!(
            full_page("/embed/runs/0123456789abcdef", ""),
            "/runs/0123456789abcdef"
        );
        assert_eq!(
            full_page("/embed/pitfalls/warm-up", ""),
            "/pitfalls#warm-up"
        );
        assert!(is_embed("/embed/lab") && !is_embed("/embedded") && !is_embed("/"));
    }
}
