//! Embedding in internal docs: which lab controls an `/embed/...` page hides or locks (from
//! its query string), the iframe snippet the Embed button hands out, and the height message
//! an embed posts to its parent page so the iframe fits. Pure, except [`post_height`].

/// The lab's controls, by the names `hide=` and `lock=` take.
pub const CONTROLS: [&str; 10] = [
    "model", "device", "eval", "grad", "autocast", "batch", "advanced", "compare", "snippet",
    "history",
];

/// The `type` of the message an embed posts to its parent: `{type, height}`.
pub const HEIGHT_MESSAGE: &str = "gradless:height";

/// What an embed shows: `hide=snippet,history` removes controls, `lock=model,batch` shows
/// them but fixes their value (`all` means every control).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmbedOptions {
    pub hide: Vec<String>,
    pub lock: Vec<String>,
}

fn list(value: Option<String>) -> Vec<String> {
    let mut out: Vec<String> = value
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| s == "all" || CONTROLS.contains(&s.as_str()))
        .collect();
    if out.iter().any(|s| s == "all") {
        out = CONTROLS.iter().map(|s| s.to_string()).collect();
    }
    out.dedup();
    out
}

impl EmbedOptions {
    pub fn from_query(get: impl Fn(&str) -> Option<String>) -> EmbedOptions {
        EmbedOptions {
            hide: list(get("hide")),
            lock: list(get("lock")),
        }
    }

    pub fn hides(&self, control: &str) -> bool {
        self.hide.iter().any(|c| c == control)
    }

    pub fn locks(&self, control: &str) -> bool {
        self.lock.iter().any(|c| c == control)
    }

    /// The query parameters (with a leading `&`) that keep these options across the
    /// navigations a settings change makes; empty when there are none.
    pub fn to_query(&self) -> String {
        let mut q = String::new();
        if !self.hide.is_empty() {
            q.push_str(&format!("&hide={}", self.hide.join(",")));
        }
        if !self.lock.is_empty() {
            q.push_str(&format!("&lock={}", self.lock.join(",")));
        }
        q
    }
}

fn html_attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The HTML to paste into a doc page: the iframe, and a few lines of script that resize it
/// to the height the embed reports (only messages from `origin`, only for its own frame).
pub fn embed_snippet(origin: &str, path_and_query: &str, title: &str) -> String {
    let src = format!("{origin}{path_and_query}");
    let origin_js = serde_json::to_string(origin).unwrap_or_default();
    format!(
        "<iframe src=\"{}\" title=\"{}\" style=\"width:100%;border:0\" height=\"720\" loading=\"lazy\"></iframe>\n\
         <script>\n\
         addEventListener(\"message\", (e) => {{\n  \
           if (e.origin !== {origin_js} || !e.data || e.data.type !== \"{HEIGHT_MESSAGE}\") return;\n  \
           for (const f of document.querySelectorAll(\"iframe\"))\n    \
             if (f.contentWindow === e.source) f.style.height = e.data.height + \"px\";\n\
         }});\n\
         </script>\n",
        html_attr(&src),
        html_attr(title)
    )
}

/// Tells the parent page how tall this embed is now (browser builds only; a page that is
/// not framed posts to itself, harmlessly).
#[cfg(feature = "hydrate")]
pub fn post_height(height: f64) {
    let Some(window) = web_sys::window() else {
        return;
    };
    let Ok(Some(parent)) = window.parent() else {
        return;
    };
    let message = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&message, &"type".into(), &HEIGHT_MESSAGE.into());
    let _ = js_sys::Reflect::set(&message, &"height".into(), &height.ceil().into());
    // The message carries only a height, so any parent may read it.
    let _ = parent.post_message(&message, "*");
}

/// Posts the page's height to the parent now and whenever it changes.
#[cfg(feature = "hydrate")]
pub fn watch_height() {
    use wasm_bindgen::closure::Closure;
    use wasm_bindgen::JsCast;
    let Some(body) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.body())
    else {
        return;
    };
    let target = body.clone();
    let last = std::cell::Cell::new(0.0f64);
    let on_resize = Closure::<dyn FnMut()>::new(move || {
        let h = target.scroll_height() as f64;
        if (h - last.get()).abs() >= 1.0 {
            last.set(h);
            post_height(h);
        }
    });
    if let Ok(observer) = web_sys::ResizeObserver::new(on_resize.as_ref().unchecked_ref()) {
        observer.observe(&body);
        // Lives as long as the page.
        std::mem::forget(observer);
    }
    on_resize.forget();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(hide: Option<&str>, lock: Option<&str>) -> EmbedOptions {
        EmbedOptions::from_query(|k| match k {
            "hide" => hide.map(String::from),
            "lock" => lock.map(String::from),
            _ => None,
        })
    }

    #[test]
    fn hide_and_lock_read_known_controls_only() {
        let o = opts(Some("snippet, History,bogus"), Some("model,batch"));
        assert!(o.hides("snippet") && o.hides("history") && !o.hides("bogus") && !o.hides("model"));
        assert!(o.locks("model") && o.locks("batch") && !o.locks("grad"));
        assert_eq!(o.to_query(), "&hide=snippet,history&lock=model,batch");
        let all = opts(None, Some("all"));
        assert!(CONTROLS.iter().all(|c| all.locks(c)));
        assert_eq!(opts(None, None).to_query(), "");
    }

    #[test]
    fn the_snippet_frames_the_page_and_listens_only_to_it() {
        let s = embed_snippet(
            "https://gradless.corp",
            "/embed/lab?model=resnet18&lock=model",
            "Gradless \"lab\"",
        );
        assert!(
            s.contains("src=\"https://gradless.corp/embed/lab?model=resnet18&amp;lock=model\""),
            "{s}"
        );
        assert!(s.contains("title=\"Gradless &quot;lab&quot;\""));
        assert!(s.contains("e.origin !== \"https://gradless.corp\""));
        assert!(s.contains(HEIGHT_MESSAGE));
    }
}
