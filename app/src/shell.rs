//! The HTML document around the app ([`shell`]): what a cold visit loads and in which
//! order, and the content-hashed asset names scripts/build-site.sh wrote.

use leptos::prelude::*;
use leptos_meta::MetaTags;

use crate::page_data::script_json;
use crate::{draws_first_view_as_pictures, embed, page_path, routes, static_page, App};

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

#[cfg(test)]
mod tests {
    use super::*;
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
}
