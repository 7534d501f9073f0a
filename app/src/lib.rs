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
mod page_data;
mod prediction;
pub mod records;
pub mod routes;
pub mod run_view;
pub mod settings;
mod shell;
pub mod static_page;
pub mod widgets;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::hooks::use_location;
use leptos_router::{Lazy, ParamSegment, StaticSegment};
use protocol::ServerInfo;

#[cfg(feature = "hydrate")]
pub(crate) use page_data::page_json;
pub(crate) use page_data::script_json;
pub use shell::{shell, AssetNames};

/// The id of the `<script type="application/json">` carrying the ServerInfo.
const INFO_ELEMENT: &str = "gradless-info";

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
pub(crate) fn page_path() -> String {
    path_of(&page_url()).to_string()
}

/// Whether this page is the Lab's or the Generate page's bare address: its first view is a
/// recorded run, drawn as the server's pictures, so ECharts is fetched on demand
/// (charts::defer_until_wanted) rather than with the page.
pub(crate) fn draws_first_view_as_pictures() -> bool {
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
