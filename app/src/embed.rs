//! Embedding in internal docs: which lab controls an `/embed/...` page hides or locks (from
//! its query string), the snippets the Embed dialog hands out for each docs tool
//! ([`snippet`]: Markdown, HTML, Notion, Confluence, Jupyter, Slack/Teams, with what each
//! needs to show), an embed's pinned theme, the tags the server adds to a page's `<head>`
//! ([`HeadTags`]: link previews, the pinned colour scheme), and the height message an embed
//! posts to its parent page so the iframe fits. Pure, except [`post_height`].

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
    /// `theme=light|dark`: the pinned theme, kept across navigations like the others.
    pub theme: Option<&'static str>,
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
            theme: pinned_theme(get("theme").as_deref()),
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
        if let Some(t) = self.theme {
            q.push_str(&format!("&theme={t}"));
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
    frame_snippet(&format!("{origin}{path_and_query}"), origin, title, "")
}

/// The iframe of `src` with `fallback` as its content (shown where iframes are stripped),
/// and the resize script listening to `origin`.
fn frame_snippet(src: &str, origin: &str, title: &str, fallback: &str) -> String {
    let origin_js = serde_json::to_string(origin).unwrap_or_default();
    format!(
        "<iframe src=\"{}\" title=\"{}\" style=\"width:100%;border:0\" height=\"720\" loading=\"lazy\">{fallback}</iframe>\n\
         <script>\n\
         addEventListener(\"message\", (e) => {{\n  \
           if (e.origin !== {origin_js} || !e.data || e.data.type !== \"{HEIGHT_MESSAGE}\") return;\n  \
           for (const f of document.querySelectorAll(\"iframe\"))\n    \
             if (f.contentWindow === e.source) f.style.height = e.data.height + \"px\";\n\
         }});\n\
         </script>\n",
        html_attr(src),
        html_attr(title)
    )
}

/// What the server adds to a page's `<head>` (in context while it renders the shell): the
/// link-preview tags of a permalink and an embed's pinned theme. Absent: nothing added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeadTags {
    /// `(attribute, key, content)`: `property` for Open Graph, `name` for Twitter cards.
    pub meta: Vec<(&'static str, &'static str, String)>,
    /// The oEmbed discovery link: `(href, title)`.
    pub oembed: Option<(String, String)>,
    /// `light` or `dark` when the page's `?theme=` pins it (embeds only).
    pub theme: Option<&'static str>,
}

/// The `<meta>` and `<link>` elements of `tags` (rendered by the shell, on the server).
pub fn head_view(tags: HeadTags) -> impl leptos::prelude::IntoView {
    use leptos::prelude::*;
    let meta = tags
        .meta
        .into_iter()
        .map(|(attr, key, content)| {
            if attr == "property" {
                // Open Graph's attribute is not HTML's, so it has no builder method.
                use leptos::tachys::html::attribute::custom::CustomAttribute;
                view! { <meta content=content /> }.attr("property", key).into_any()
            } else {
                view! { <meta name=key content=content /> }.into_any()
            }
        })
        .collect_view();
    let link = tags.oembed.map(|(href, title)| {
        view! { <link rel="alternate" r#type="application/json+oembed" href=href title=title /> }
    });
    view! { {meta}{link} }
}

/// The theme an embed's `?theme=` pins: `light` or `dark`, anything else follows the
/// reader's system.
pub fn pinned_theme(value: Option<&str>) -> Option<&'static str> {
    match value? {
        "light" => Some("light"),
        "dark" => Some("dark"),
        _ => None,
    }
}

/// The docs tools the Embed dialog writes a snippet for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// An iframe with the picture as its fallback content: Docusaurus, Sphinx raw HTML,
    /// MkDocs, any page that takes HTML.
    Html,
    /// The picture linked to the permalink: GitHub and GitLab READMEs and wikis, MkDocs.
    Markdown,
    /// The embed URL, for an Embed block.
    Notion,
    /// The picture with its link (wiki markup), and the iframe for an HTML macro.
    Confluence,
    /// `IPython.display` of the frame and the picture.
    Jupyter,
    /// The permalink: Slack and Teams unfurl it from its preview tags.
    Chat,
}

impl Target {
    pub const ALL: [Target; 6] = [
        Target::Html,
        Target::Markdown,
        Target::Notion,
        Target::Confluence,
        Target::Jupyter,
        Target::Chat,
    ];

    /// The value of its `<option>`.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Html => "html",
            Target::Markdown => "markdown",
            Target::Notion => "notion",
            Target::Confluence => "confluence",
            Target::Jupyter => "jupyter",
            Target::Chat => "chat",
        }
    }

    pub fn parse(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// What the dialog lists it as; without a `picture` (nothing recorded to draw yet) the
    /// choices that would carry one say what they give instead.
    pub fn label(self, picture: bool) -> &'static str {
        match self {
            Target::Html if picture => "HTML: Docusaurus, Sphinx, MkDocs (iframe, picture as fallback)",
            Target::Html => "HTML: Docusaurus, Sphinx, MkDocs (iframe, a link as fallback)",
            Target::Markdown if picture => "Markdown: GitHub, GitLab, MkDocs (picture + link)",
            Target::Markdown => "Markdown: GitHub, GitLab, MkDocs (a link)",
            Target::Notion => "Notion (embed block)",
            Target::Confluence if picture => "Confluence (picture + link; iframe with a macro)",
            Target::Confluence => "Confluence (a link; iframe with a macro)",
            Target::Jupyter => "Jupyter (IPython.display)",
            Target::Chat => "Slack / Teams (link preview)",
        }
    }

    /// Where to paste it, and what it needs to show: said plainly, since an internal
    /// server is invisible to the services that render some of these.
    pub fn note(self) -> &'static str {
        match self {
            Target::Html => "Paste into the page's HTML. The frame shows only on docs sites this server's operator allows; where iframes are stripped, what is inside it (the picture, or a link) shows instead.",
            Target::Markdown => "GitHub and GitLab fetch pictures through their own proxy: it shows only if this server is reachable from the internet. MkDocs and other sites load it from the reader's browser.",
            Target::Notion => "Type /embed in Notion and paste the address. The frame loads in the reader's browser, and only if this server's operator allows Notion (https://www.notion.so) to frame it.",
            Target::Confluence => "Insert › Markup (Confluence wiki) for the linked picture. The iframe needs an HTML or iframe macro an administrator enabled (off by default on Data Center).",
            Target::Jupyter => "Run in a cell. A live notebook shows the frame; GitHub's and nbviewer's static previews strip it and show the picture.",
            Target::Chat => "Paste the link: Slack and Teams unfurl it into the picture and figures, but only if their services can reach this server (an internal host will not unfurl).",
        }
    }
}

/// What a snippet links: every address absolute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Links {
    /// The full page (`/runs/{id}`, the Lab with its settings).
    pub permalink: String,
    /// The page to frame (`/embed/...`), with the pinned theme.
    pub embed: String,
    /// The PNG (`/runs/{id}.png`), with the pinned theme; none for the Lab and the cards.
    pub image: Option<String>,
    pub title: String,
}

fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

impl Links {
    /// The links of the embed at `embed_path` (path and query) on `origin`, its picture
    /// at `image_path` if it has one, `theme` pinned (`light`/`dark`) or not.
    pub fn new(
        origin: &str,
        embed_path: &str,
        image_path: Option<&str>,
        title: &str,
        theme: Option<&str>,
    ) -> Links {
        let origin = origin.trim_end_matches('/');
        let (path, query) = match embed_path.split_once('?') {
            Some((p, q)) => (p, format!("?{q}")),
            None => (embed_path, String::new()),
        };
        let themed = |url: String| match pinned_theme(theme) {
            Some(t) => with_param(&url, &format!("theme={t}")),
            None => url,
        };
        Links {
            permalink: format!("{origin}{}", crate::full_page(path, &query)),
            embed: themed(format!("{origin}{embed_path}")),
            image: image_path.map(|p| themed(format!("{origin}{p}"))),
            title: title.to_string(),
        }
    }
}

/// Text for Markdown's link and image brackets.
fn markdown_text(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('[', "\\[")
        .replace(']', "\\]")
}

/// A Python string literal.
fn python_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The snippet for `target`. `origin` is this server's, for the resize script's check.
pub fn snippet(target: Target, origin: &str, links: &Links) -> String {
    let title = &links.title;
    match target {
        Target::Html => {
            let fallback = match &links.image {
                Some(img) => format!(
                    "\n  <a href=\"{}\"><img src=\"{}\" alt=\"{}\" width=\"1200\" height=\"630\" style=\"max-width:100%;height:auto\"></a>\n",
                    html_attr(&links.permalink),
                    html_attr(img),
                    html_attr(title)
                ),
                None => format!(
                    "\n  <a href=\"{}\">{}</a>\n",
                    html_attr(&links.permalink),
                    html_attr(title)
                ),
            };
            frame_snippet(&links.embed, origin.trim_end_matches('/'), title, &fallback)
        }
        Target::Markdown => match &links.image {
            Some(img) => format!(
                "[![{}]({img})]({})\n",
                markdown_text(title),
                links.permalink
            ),
            None => format!("[{}]({})\n", markdown_text(title), links.permalink),
        },
        Target::Notion => format!("{}\n", links.embed),
        Target::Confluence => {
            let picture = match &links.image {
                Some(img) => format!("[!{img}!|{}]", links.permalink),
                None => format!("[{}|{}]", title.replace(['|', ']', '['], " "), links.permalink),
            };
            format!(
                "{picture}\n\n<iframe src=\"{}\" title=\"{}\" style=\"width:100%;border:0\" height=\"720\"></iframe>\n",
                html_attr(&links.embed),
                html_attr(title)
            )
        }
        Target::Jupyter => {
            let mut s = String::from("from IPython.display import IFrame, Image, display\n\n");
            s.push_str(&format!(
                "# Live notebooks: the page itself.\ndisplay(IFrame({}, width=\"100%\", height=720))\n",
                python_str(&links.embed)
            ));
            if let Some(img) = &links.image {
                s.push_str(&format!(
                    "# Static previews (GitHub, nbviewer): the picture.\ndisplay(Image(url={}))\n",
                    python_str(img)
                ));
            }
            s
        }
        Target::Chat => format!("{}\n", links.permalink),
    }
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
        let dark = EmbedOptions::from_query(|k| (k == "theme").then(|| "dark".to_string()));
        assert_eq!(dark.to_query(), "&theme=dark", "a pinned theme survives the Lab's navigations");
        let odd = EmbedOptions::from_query(|k| (k == "theme").then(|| "sepia".to_string()));
        assert_eq!(odd.theme, None);
    }

    fn run_links(theme: Option<&str>) -> Links {
        Links::new(
            "https://g.corp",
            "/embed/runs/0123456789abcdef",
            Some("/runs/0123456789abcdef.png"),
            "ResNet-18 · eval · no_grad [batch 8]",
            theme,
        )
    }

    #[test]
    fn links_are_absolute_and_carry_the_pinned_theme() {
        let l = run_links(Some("dark"));
        assert_eq!(l.permalink, "https://g.corp/runs/0123456789abcdef");
        assert_eq!(l.embed, "https://g.corp/embed/runs/0123456789abcdef?theme=dark");
        assert_eq!(l.image.as_deref(), Some("https://g.corp/runs/0123456789abcdef.png?theme=dark"));
        let lab = Links::new("https://g.corp/", "/embed/lab?model=resnet18", None, "Lab", Some("light"));
        assert_eq!(lab.permalink, "https://g.corp/?model=resnet18");
        assert_eq!(lab.embed, "https://g.corp/embed/lab?model=resnet18&theme=light");
        assert_eq!(run_links(Some("blue")).embed, "https://g.corp/embed/runs/0123456789abcdef");
        assert_eq!(pinned_theme(Some("dark")), Some("dark"));
        assert_eq!(pinned_theme(Some("DARK")), None);
    }

    #[test]
    fn each_tool_gets_its_snippet() {
        let l = run_links(None);
        let o = "https://g.corp";
        assert_eq!(
            snippet(Target::Markdown, o, &l),
            "[![ResNet-18 · eval · no_grad \\[batch 8\\]](https://g.corp/runs/0123456789abcdef.png)](https://g.corp/runs/0123456789abcdef)\n"
        );
        let html = snippet(Target::Html, o, &l);
        assert!(html.starts_with(
            "<iframe src=\"https://g.corp/embed/runs/0123456789abcdef\" title=\"ResNet-18 · eval · no_grad [batch 8]\" style=\"width:100%;border:0\" height=\"720\" loading=\"lazy\">\n  \
             <a href=\"https://g.corp/runs/0123456789abcdef\"><img src=\"https://g.corp/runs/0123456789abcdef.png\" alt=\"ResNet-18 · eval · no_grad [batch 8]\" width=\"1200\" height=\"630\" style=\"max-width:100%;height:auto\"></a>\n</iframe>\n<script>"
        ), "{html}");
        assert!(html.contains("e.origin !== \"https://g.corp\""));
        assert_eq!(snippet(Target::Notion, o, &l), "https://g.corp/embed/runs/0123456789abcdef\n");
        assert_eq!(
            snippet(Target::Confluence, o, &l),
            "[!https://g.corp/runs/0123456789abcdef.png!|https://g.corp/runs/0123456789abcdef]\n\n\
             <iframe src=\"https://g.corp/embed/runs/0123456789abcdef\" title=\"ResNet-18 · eval · no_grad [batch 8]\" style=\"width:100%;border:0\" height=\"720\"></iframe>\n"
        );
        assert_eq!(
            snippet(Target::Jupyter, o, &l),
            "from IPython.display import IFrame, Image, display\n\n\
             # Live notebooks: the page itself.\ndisplay(IFrame(\"https://g.corp/embed/runs/0123456789abcdef\", width=\"100%\", height=720))\n\
             # Static previews (GitHub, nbviewer): the picture.\ndisplay(Image(url=\"https://g.corp/runs/0123456789abcdef.png\"))\n"
        );
        assert_eq!(snippet(Target::Chat, o, &l), "https://g.corp/runs/0123456789abcdef\n");
        // Without a picture (the Lab, a card): links and the frame only.
        let lab = Links::new(o, "/embed/lab?model=resnet18", None, "Gradless lab", None);
        assert_eq!(snippet(Target::Markdown, o, &lab), "[Gradless lab](https://g.corp/?model=resnet18)\n");
        assert!(!snippet(Target::Jupyter, o, &lab).contains("Image(url"));
        assert!(snippet(Target::Html, o, &lab).contains("<a href=\"https://g.corp/?model=resnet18\">Gradless lab</a>"));
        // The Lab with a recorded run on its charts: that run's picture, linking to the Lab.
        let pictured = Links::new(o, "/embed/lab?model=resnet18", Some("/runs/0123456789abcdef.png"), "Gradless lab", None);
        assert_eq!(
            snippet(Target::Markdown, o, &pictured),
            "[![Gradless lab](https://g.corp/runs/0123456789abcdef.png)](https://g.corp/?model=resnet18)\n"
        );
        assert!(snippet(Target::Html, o, &pictured).contains("<img src=\"https://g.corp/runs/0123456789abcdef.png\""));
        for t in Target::ALL {
            assert_eq!(Target::parse(t.as_str()), Some(t));
            assert!(!t.note().is_empty() && !t.label(true).is_empty() && !t.label(false).is_empty());
            // A reader cannot act on an operator's flag: the dialog never names one.
            assert!(!t.note().contains("--"), "{}", t.note());
            assert!(!t.label(false).contains("picture"), "{}", t.label(false));
        }
        assert!(Target::Chat.note().contains("internal host will not unfurl"));
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
