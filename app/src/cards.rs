//! The pitfall cards' texts (claims, code, thresholds, questions: about 58 KB of JSON, 17 KB
//! of it gzip'd) go into the page only where it shows them: the Pitfalls pages and the learn
//! pages, whose steps ask the cards' questions. The permalinks (`/runs/{id}`,
//! `/embed/runs/{id}`) name a recorded experiment by its card's title, and carry only the
//! titles ([`TITLES_ELEMENT`], 2 KB). Other pages carry the ServerInfo without them, and a
//! page reached from there by client-side navigation reads them once from
//! `GET /api/pitfalls` ([`with_cards`]).

use leptos::prelude::*;
use protocol::{PitfallInfo, ServerInfo};

/// The id of the `<script type="application/json">` carrying the cards' titles on the
/// pages that need only those ([`needs_titles`]).
pub const TITLES_ELEMENT: &str = "gradless-card-titles";

/// Whether the page at `path` names cards by their titles only: a permalink, whose record
/// may be an experiment. Its ServerInfo carries no cards, the page their `(id, title)`s.
pub fn needs_titles(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    path.starts_with("/runs/") || path.starts_with("/embed/runs/")
}

/// The cards' `(id, title)`s as JSON for the page at `path`, if it needs them
/// ([`needs_titles`]): from the server's cards when rendering, from the page in the browser
/// (so hydration finds the text the server wrote).
pub fn titles_for_page(info: &ServerInfo, path: &str) -> Option<String> {
    if !needs_titles(path) {
        return None;
    }
    #[cfg(feature = "hydrate")]
    if let Some(text) = crate::page_json(TITLES_ELEMENT) {
        return Some(text);
    }
    let titles: Vec<(&str, &str)> = info
        .pitfalls
        .iter()
        .map(|c| (c.id.as_str(), c.title.as_str()))
        .collect();
    Some(crate::script_json(&titles))
}

#[cfg(feature = "hydrate")]
thread_local! {
    /// The titles the page carries, read once.
    static TITLES: std::cell::OnceCell<Vec<(String, String)>> = const { std::cell::OnceCell::new() };
}

/// Whether the page at `path` shows the cards (its ServerInfo carries them).
pub fn needs_cards(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    path == "/pitfalls"
        || path.starts_with("/embed/pitfalls/")
        // A path's steps ask the cards' questions, and the composer lists the cards (the
        // learn pages load in full: their data comes with the page). Without them a step
        // rendered "no such card" in the browser where the server had rendered the card,
        // and the page never hydrated.
        || path.starts_with("/learn/")
        || path.starts_with("/embed/learn/")
}

/// The ServerInfo to put into the page at `path`: without the cards where it does not
/// show them.
pub fn for_page(info: &ServerInfo, path: &str) -> ServerInfo {
    let mut info = info.clone();
    if !needs_cards(path) {
        info.pitfalls.clear();
    }
    info
}

#[cfg(feature = "hydrate")]
thread_local! {
    /// The cards read from `/api/pitfalls`, once a page needed them.
    static FETCHED: std::cell::RefCell<Vec<PitfallInfo>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The cards this page has: the ServerInfo's, or those read since.
pub fn known() -> Vec<PitfallInfo> {
    let from_info = use_context::<ServerInfo>()
        .map(|i| i.pitfalls)
        .unwrap_or_default();
    #[cfg(feature = "hydrate")]
    if from_info.is_empty() {
        return FETCHED.with(|f| f.borrow().clone());
    }
    from_info
}

/// Card `id`'s title, if this page knows the cards or their titles.
pub fn title(id: &str) -> Option<String> {
    let from_cards = known().into_iter().find(|c| c.id == id).map(|c| c.title);
    #[cfg(feature = "hydrate")]
    if from_cards.is_none() {
        return TITLES.with(|t| {
            t.get_or_init(|| {
                crate::page_json(TITLES_ELEMENT)
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .unwrap_or_default()
            })
            .iter()
            .find(|(card, _)| card == id)
            .map(|(_, title)| title.clone())
        });
    }
    from_cards
}

/// `body` with the cards: at once where the page has them (always on the server), else
/// once they are read.
pub fn with_cards<V: IntoView + 'static>(
    body: impl Fn(Vec<PitfallInfo>) -> V + Send + Sync + 'static,
) -> AnyView {
    let cards = known();
    #[cfg(not(feature = "hydrate"))]
    {
        body(cards).into_any()
    }
    #[cfg(feature = "hydrate")]
    {
        if !cards.is_empty() {
            return body(cards).into_any();
        }
        let read = LocalResource::new(|| async {
            let cards = crate::client::get_json::<Vec<PitfallInfo>>("/api/pitfalls").await?;
            FETCHED.with(|f| *f.borrow_mut() = cards.clone());
            Ok::<_, String>(cards)
        });
        let body = std::sync::Arc::new(body);
        view! {
            <Suspense fallback=|| view! { <p class="explain" data-testid="cards-loading">"Reading the cards…"</p> }>
                {move || {
                    let body = body.clone();
                    Suspend::new(async move {
                        match read.await {
                            Ok(cards) => body(cards).into_any(),
                            Err(e) => view! { <p class="error" role="alert">{format!("The cards could not be read: {e}")}</p> }.into_any(),
                        }
                    })
                }}
            </Suspense>
        }
        .into_any()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pages_that_show_cards_carry_them() {
        for yes in ["/pitfalls", "/pitfalls/", "/embed/pitfalls/eval-and-autograd", "/learn/inference-settings", "/embed/learn/x", "/learn/new"] {
            assert!(needs_cards(yes), "{yes}");
            assert!(!needs_titles(yes), "{yes}");
        }
        for no in ["/", "/generate", "/compare", "/runs", "/embed/lab", "/pitfallsx", "/learn", "/runs/abc", "/embed/runs/abc"] {
            assert!(!needs_cards(no), "{no}");
        }
        // A permalink carries the titles only.
        for titles in ["/runs/abc", "/embed/runs/abc"] {
            assert!(needs_titles(titles), "{titles}");
        }
        for no in ["/", "/runs", "/pitfalls", "/compare"] {
            assert!(!needs_titles(no), "{no}");
        }
    }
}
