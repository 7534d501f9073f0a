//! Drawing in the browser (hydrate builds only): options handed to ECharts at the next
//! animation frame, every call into JavaScript caught, and PNG export. A page served
//! without the wasm draws with `app/js/record-embed.js` instead, which follows the same
//! rules (theme, a fresh chart per theme, the failure sentence, the PNG's background):
//! a change here belongs there too.
//!
//! ECharts on demand: the Lab and the Generate page at their bare addresses load no
//! ECharts (the shell names its file in `<meta name="gradless-echarts">` instead of a
//! script), since their first view is a recorded run, which the server draws as pictures
//! ([`show_pictures`]: `/runs/{id}.svg?chart=...` at each element's size). The charts'
//! options wait here, newest kept, until the visitor acts ([`want_echarts`]: a run starts,
//! a pointer or key press anywhere, a pointer over a chart) or the page leaves; then
//! ECharts is fetched and every waiting chart is drawn over its picture. A visit that only
//! looks transfers 149 KB less (docs/ARCHITECTURE.md, "How the site is split").

use super::ChartOption;

/// Draws `chart` into the element `id` at the next animation frame. Samples can arrive
/// faster than ECharts redraws (a tiny model streams 50 in a few milliseconds); drawing
/// each one would block the page, so bursts collapse into one redraw per frame, always
/// with the newest data.
///
/// Drawing never panics and never leaves state borrowed: every call into ECharts goes
/// through `Reflect::apply`, which turns a JavaScript exception into an `Err` (an exception
/// escaping through wasm would skip Rust's unwinding and leave a `RefCell` borrowed for
/// the rest of the page's life). A chart ECharts refuses is replaced by a sentence saying
/// why, and the next render of that element starts afresh.
pub fn render(id: impl Into<String>, chart: ChartOption) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    PENDING.with(|p| p.borrow_mut().insert(id.into(), chart));
    if !SCHEDULED.with(|s| s.replace(true)) {
        let flush = Closure::once_into_js(flush);
        let asked = web_sys::window()
            .map(|w| w.request_animation_frame(flush.unchecked_ref()).is_ok())
            .unwrap_or(false);
        if !asked {
            SCHEDULED.with(|s| s.set(false));
        }
    }
}

thread_local! {
    /// The newest chart per element, waiting for the next frame.
    static PENDING: std::cell::RefCell<std::collections::HashMap<String, ChartOption>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// The chart last drawn in each element: drawn again when the colour scheme changes.
    static DRAWN: std::cell::RefCell<std::collections::HashMap<String, ChartOption>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    /// Whether a frame callback is already asked for.
    static SCHEDULED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether the resize and colour-scheme listeners are installed.
    static WATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether a flush waits for the window's `load` event (ECharts not run yet).
    static WAITING_FOR_LOAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether the page's charts wait for [`want_echarts`] (a first view shown as pictures).
    static DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether the on-demand ECharts script was added to the page, and whether it failed.
    static FETCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static FETCH_FAILED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// ECharts' file, where the shell left it to be fetched on demand.
fn on_demand_url() -> Option<String> {
    web_sys::window()?
        .document()?
        .query_selector("meta[name=gradless-echarts]")
        .ok()??
        .get_attribute("content")
}

fn echarts_loaded(window: &web_sys::Window) -> bool {
    js_sys::Reflect::get(window, &"echarts".into()).is_ok_and(|e| !e.is_undefined())
}

/// Holds this page's charts back until the visitor acts ([`want_echarts`]), where the
/// shell left ECharts to be fetched on demand and it has not come yet; says whether it
/// does. Until then a chart shows the picture [`show_pictures`] put there, if any. The
/// first press of a key or pointer anywhere on the page ends the wait.
pub fn defer_until_wanted() -> bool {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let Some(window) = web_sys::window() else {
        return false;
    };
    if echarts_loaded(&window) || on_demand_url().is_none() || FETCHING.with(|f| f.get()) {
        return false;
    }
    if !DEFERRED.with(|d| d.replace(true)) {
        let once = web_sys::AddEventListenerOptions::new();
        once.set_once(true);
        once.set_passive(true);
        for event in ["pointerdown", "keydown", "touchstart"] {
            let act = Closure::once_into_js(want_echarts);
            let _ = window.add_event_listener_with_callback_and_add_event_listener_options(
                event,
                act.unchecked_ref(),
                &once,
            );
        }
    }
    true
}

/// Fetches ECharts now, if the page left it to be fetched on demand, and draws every
/// waiting chart once it has run. Called when a run starts (its samples need it), on
/// intent (a pointer over a chart's picture) and when a deferring page leaves.
pub fn want_echarts() {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    DEFERRED.with(|d| d.set(false));
    let Some(window) = web_sys::window() else {
        return;
    };
    if echarts_loaded(&window) {
        flush();
        return;
    }
    let Some(url) = on_demand_url() else {
        return;
    };
    if FETCHING.with(|f| f.replace(true)) {
        return;
    }
    let script = window.document().and_then(|d| d.create_element("script").ok());
    let Some(script) = script else {
        FETCH_FAILED.with(|f| f.set(true));
        flush();
        return;
    };
    let _ = script.set_attribute("src", &url);
    let _ = script.set_attribute("async", "");
    let loaded = Closure::once_into_js(flush);
    let _ = script.add_event_listener_with_callback("load", loaded.unchecked_ref());
    // A failed fetch leaves each waiting chart a sentence saying so (`draw`).
    let failed = Closure::once_into_js(|| {
        FETCH_FAILED.with(|f| f.set(true));
        flush();
    });
    let _ = script.add_event_listener_with_callback("error", failed.unchecked_ref());
    if let Some(head) = window
        .document()
        .and_then(|d| d.query_selector("head").ok().flatten())
    {
        let _ = head.append_child(&script);
    }
}

/// Whether drawing must wait for ECharts fetched on demand (asked for or held back).
fn waits_on_demand() -> bool {
    let Some(window) = web_sys::window() else {
        return false;
    };
    if echarts_loaded(&window) || FETCH_FAILED.with(|f| f.get()) || on_demand_url().is_none() {
        return false;
    }
    if !DEFERRED.with(|d| d.get()) {
        want_echarts();
    }
    true
}

/// Puts pictures of recorded run `record`'s charts in the charts' places while ECharts is
/// held back: for each `(element id, chart name)`, `/runs/{record}.svg?chart=NAME` at the
/// element's size, in both themes (the page's scheme picks one), described by the chart's
/// own accessible sentence. A pointer over one fetches ECharts, which draws over it. Does
/// nothing once ECharts is there.
pub fn show_pictures(record: &str, charts: &[(&'static str, &'static str)]) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let Some(window) = web_sys::window() else {
        return;
    };
    // At the next frame: the record's charts have been handed to `render` by then (their
    // effects run after the change that shows the record), so each picture is described
    // by its chart's own sentence, and the elements are laid out.
    let (record, charts) = (record.to_string(), charts.to_vec());
    let later = Closure::once_into_js(move || put_pictures(&record, &charts));
    if window.request_animation_frame(later.unchecked_ref()).is_err() {
        leptos::logging::warn!("no animation frame: the recorded run's pictures are not shown");
    }
}

fn put_pictures(record: &str, charts: &[(&str, &str)]) {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let Some(window) = web_sys::window() else {
        return;
    };
    if !DEFERRED.with(|d| d.get()) || echarts_loaded(&window) {
        return;
    }
    let Some(document) = window.document() else {
        return;
    };
    for (id, chart) in charts {
        let Some(el) = document.get_element_by_id(id) else {
            continue;
        };
        let (w, h) = (el.client_width().max(0) as u32, el.client_height().max(0) as u32);
        if w == 0 || h == 0 {
            continue;
        }
        // The server draws 300..=2400 px wide and 150..=1600 high; the image is scaled to
        // the element by CSS where that is narrower.
        let size = format!(
            "chart={chart}&width={}&height={}",
            w.clamp(render_limits::MIN_WIDTH, render_limits::MAX_WIDTH),
            h.clamp(render_limits::MIN_HEIGHT, render_limits::MAX_HEIGHT)
        );
        let alt = PENDING
            .with(|p| p.borrow().get(*id).and_then(|c| c.description().map(str::to_string)))
            .unwrap_or_else(|| format!("The recorded run's {chart} chart"));
        let html = format!(
            "<picture class=\"chart-picture\" data-testid=\"chart-picture\">\
             <source srcset=\"/runs/{record}.svg?theme=dark&amp;{size}\" media=\"(prefers-color-scheme: dark)\">\
             <img src=\"/runs/{record}.svg?{size}\" alt=\"{}\" width=\"{w}\" height=\"{h}\" decoding=\"async\"></picture>",
            attr_escape(&alt)
        );
        // The element is ECharts' (or empty): a drawn chart would clear it (`draw`).
        el.set_inner_html(&html);
        let once = web_sys::AddEventListenerOptions::new();
        once.set_once(true);
        let hover = Closure::once_into_js(want_echarts);
        let _ = el.add_event_listener_with_callback_and_add_event_listener_options(
            "pointerenter",
            hover.unchecked_ref(),
            &once,
        );
    }
}

/// The server's limits on a chart's picture (render/src/lib.rs: MIN_WIDTH..MAX_HEIGHT),
/// which the browser build does not link.
mod render_limits {
    pub const MIN_WIDTH: u32 = 300;
    pub const MAX_WIDTH: u32 = 2400;
    pub const MIN_HEIGHT: u32 = 150;
    pub const MAX_HEIGHT: u32 = 1600;
}

fn attr_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;")
}

/// ECharts is loaded `async` (see the page shell in `lib.rs`), so the app may hydrate and
/// want to draw before it has run. Until the window's `load` event (which waits for every
/// async script, loaded or failed) the charts stay pending and are drawn then; after it, a
/// missing ECharts is an error the chart says in words. Returns whether drawing must wait.
fn wait_for_echarts() -> bool {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let Some(window) = web_sys::window() else {
        return false;
    };
    let loaded = js_sys::Reflect::get(&window, &"echarts".into()).is_ok_and(|e| !e.is_undefined());
    let complete = window
        .document()
        .is_none_or(|d| d.ready_state() == "complete");
    if loaded || complete {
        return false;
    }
    if !WAITING_FOR_LOAD.with(|w| w.replace(true)) {
        let on_load = Closure::once_into_js(|| {
            WAITING_FOR_LOAD.with(|w| w.set(false));
            flush();
        });
        let once = web_sys::AddEventListenerOptions::new();
        once.set_once(true);
        if window
            .add_event_listener_with_callback_and_add_event_listener_options(
                "load",
                on_load.unchecked_ref(),
                &once,
            )
            .is_err()
        {
            WAITING_FOR_LOAD.with(|w| w.set(false));
            return false;
        }
    }
    true
}

/// Whether the page is dark: the theme an embed pins (`data-theme` on `<html>`, from its
/// `?theme=`), else the system's setting.
fn is_dark(window: &web_sys::Window) -> bool {
    let pinned = window
        .document()
        .and_then(|d| d.document_element())
        .and_then(|e| e.get_attribute("data-theme"));
    match pinned.as_deref() {
        Some("dark") => true,
        Some("light") => false,
        _ => window
            .match_media("(prefers-color-scheme: dark)")
            .ok()
            .flatten()
            .is_some_and(|m| m.matches()),
    }
}

/// Keeps drawn charts in step with the window: a canvas keeps the width it was drawn at,
/// so a narrower window would scroll sideways unless every chart is resized; and a change
/// of the system's light/dark setting redraws every chart in the matching theme.
fn watch_window() {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    if WATCHING.with(|w| w.replace(true)) {
        return;
    }
    let Some(window) = web_sys::window() else {
        return;
    };
    let on_resize = Closure::<dyn FnMut()>::new(|| {
        let ids: Vec<String> = DRAWN.with(|d| d.borrow().keys().cloned().collect());
        let Some(window) = web_sys::window() else {
            return;
        };
        let Ok(echarts) = js_sys::Reflect::get(&window, &"echarts".into()) else {
            return;
        };
        for id in ids {
            let Some(el) = window.document().and_then(|d| d.get_element_by_id(&id)) else {
                continue;
            };
            let el: wasm_bindgen::JsValue = el.into();
            if let Ok(chart) = js_call(&echarts, "getInstanceByDom", &[&el]) {
                if !(chart.is_undefined() || chart.is_null()) {
                    let _ = js_call(&chart, "resize", &[]);
                }
            }
        }
    });
    let _ = window.add_event_listener_with_callback("resize", on_resize.as_ref().unchecked_ref());
    on_resize.forget();
    if let Ok(Some(query)) = window.match_media("(prefers-color-scheme: dark)") {
        let on_scheme = Closure::<dyn FnMut()>::new(|| {
            let all: Vec<(String, ChartOption)> = DRAWN.with(|d| {
                d.borrow()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            });
            for (id, chart) in all {
                render(id, chart);
            }
        });
        let _ =
            query.add_event_listener_with_callback("change", on_scheme.as_ref().unchecked_ref());
        on_scheme.forget();
    }
}

fn flush() {
    SCHEDULED.with(|s| s.set(false));
    if waits_on_demand() || wait_for_echarts() {
        return;
    }
    watch_window();
    // Take the work out first: nothing stays borrowed while JavaScript runs.
    let pending: Vec<(String, ChartOption)> = PENDING.with(|p| p.borrow_mut().drain().collect());
    for (id, chart) in pending {
        DRAWN.with(|d| d.borrow_mut().insert(id.clone(), chart.clone()));
        if let Err(message) = draw(&id, &chart) {
            leptos::logging::warn!("could not draw chart {id}: {message}");
            say_not_drawn(&id, &message);
        }
    }
}

/// Calls `target[name](...args)`, with a JavaScript exception as `Err`.
fn js_call(
    target: &wasm_bindgen::JsValue,
    name: &str,
    args: &[&wasm_bindgen::JsValue],
) -> Result<wasm_bindgen::JsValue, String> {
    use wasm_bindgen::JsCast;
    let f = js_sys::Reflect::get(target, &name.into())
        .map_err(js_message)?
        .dyn_into::<js_sys::Function>()
        .map_err(|_| format!("{name} is not a function"))?;
    let list = js_sys::Array::new();
    for a in args {
        list.push(a);
    }
    js_sys::Reflect::apply(&f, target, &list).map_err(js_message)
}

fn js_message(e: wasm_bindgen::JsValue) -> String {
    use wasm_bindgen::JsCast;
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| "an unknown JavaScript error".into())
}

fn draw(id: &str, chart: &ChartOption) -> Result<(), String> {
    use wasm_bindgen::JsValue;
    let window = web_sys::window().ok_or("no window")?;
    // A page change may have removed the element: nothing to draw then.
    let Some(element) = window.document().and_then(|d| d.get_element_by_id(id)) else {
        return Ok(());
    };
    let echarts = js_sys::Reflect::get(&window, &"echarts".into()).map_err(js_message)?;
    if echarts.is_undefined() {
        return Err("the chart library (ECharts) did not load".into());
    }
    // Laid out for the width it is drawn at (legends wrap on a phone: see fit.rs).
    let fitted = super::fit::fit_to_width(&chart.0, f64::from(element.client_width()));
    let json = serde_json::to_string(&fitted).map_err(|e| e.to_string())?;
    let option = js_sys::JSON::parse(&json).map_err(js_message)?;
    // The theme follows the system's light or dark setting; a chart drawn before the
    // setting changed is made afresh in the new one.
    let dark = is_dark(&window);
    let theme_name = if dark { "dark" } else { "light" };
    let drawn_in = element.get_attribute("data-chart-theme");
    let element: JsValue = element.into();
    let mut existing = js_call(&echarts, "getInstanceByDom", &[&element])?;
    if !(existing.is_undefined() || existing.is_null()) && drawn_in.as_deref() != Some(theme_name) {
        js_call(&echarts, "dispose", &[&element])?;
        existing = JsValue::UNDEFINED;
    }
    let instance = if existing.is_undefined() || existing.is_null() {
        if let Some(el) = wasm_bindgen::JsCast::dyn_ref::<web_sys::Element>(&element) {
            // The sentence a previous failure left there.
            el.set_inner_html("");
            let _ = el.class_list().remove_1("chart-error");
            let _ = el.set_attribute("data-chart-theme", theme_name);
        }
        let theme = if dark {
            JsValue::from("dark")
        } else {
            JsValue::NULL
        };
        js_call(&echarts, "init", &[&element, &theme])?
    } else {
        existing
    };
    // Not merged into the previous option: a series that is gone must not linger.
    let settings = js_sys::Object::new();
    js_sys::Reflect::set(&settings, &"notMerge".into(), &JsValue::TRUE).map_err(js_message)?;
    js_call(&instance, "setOption", &[&option, &settings])
        .map(|_| ())
        .inspect_err(|_| {
            // Half-drawn state is worse than none: start afresh next time.
            let _ = js_call(&echarts, "dispose", &[&element]);
        })
}

/// Puts a sentence where a chart could not be drawn, so the reader is not left with a
/// blank box.
fn say_not_drawn(id: &str, message: &str) {
    if let Some(el) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
    {
        let _ = el.class_list().add_1("chart-error");
        el.set_text_content(Some(&format!("This chart could not be drawn: {message}")));
    }
}

/// Saves the chart drawn in element `id` as a PNG (ECharts renders it at twice the
/// screen's resolution, on the page's background).
pub fn download_png(id: &str, filename: &str) {
    use js_sys::{Function, Object, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    let url = (|| -> Option<String> {
        let window = web_sys::window()?;
        let document = window.document()?;
        let element = document.get_element_by_id(id)?;
        let echarts = Reflect::get(&window, &"echarts".into()).ok()?;
        let get = Reflect::get(&echarts, &"getInstanceByDom".into())
            .ok()?
            .dyn_into::<Function>()
            .ok()?;
        let chart = get
            .call1(&echarts, &element)
            .ok()
            .filter(|c| !c.is_undefined())?;
        let to_url = Reflect::get(&chart, &"getDataURL".into())
            .ok()?
            .dyn_into::<Function>()
            .ok()?;
        let dark = is_dark(&window);
        let options = Object::new();
        Reflect::set(&options, &"type".into(), &"png".into()).ok()?;
        Reflect::set(&options, &"pixelRatio".into(), &JsValue::from(2)).ok()?;
        Reflect::set(
            &options,
            &"backgroundColor".into(),
            &(if dark { "#1c1f24" } else { "#ffffff" }).into(),
        )
        .ok()?;
        to_url.call1(&chart, &options).ok()?.as_string()
    })();
    let Some(url) = url else {
        leptos::logging::warn!("chart {id} is not drawn yet: nothing to save");
        return;
    };
    let link = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.create_element("a").ok())
        .and_then(|a| a.dyn_into::<web_sys::HtmlElement>().ok());
    if let Some(a) = link {
        let _ = a.set_attribute("href", &url);
        let _ = a.set_attribute("download", filename);
        a.click();
    }
}

/// Brings the element `id` into view when it is not: a run's results, when the button that
/// started it sits a screen or more away from them (the Generate page's long settings, the
/// Lab's settings under its charts on a phone). A reader who can see the results is not
/// moved.
pub fn bring_into_view(id: &str) {
    let Some(window) = web_sys::window() else {
        return;
    };
    let Some(el) = window.document().and_then(|d| d.get_element_by_id(id)) else {
        return;
    };
    let height = window
        .inner_height()
        .ok()
        .and_then(|h| h.as_f64())
        .unwrap_or(0.0);
    let rect = el.get_bounding_client_rect();
    // In view: its top on screen with at least 200 px of it showing.
    let seen = rect.top() >= 0.0 && rect.top() + 200.0_f64.min(rect.height()) <= height;
    if !seen {
        el.scroll_into_view_with_bool(true);
    }
}
