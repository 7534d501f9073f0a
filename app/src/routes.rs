//! The pages that are not the Lab, as lazy routes: in the browser each one's code is a
//! separate wasm chunk (scripts/build-site.sh splits the app at these points with
//! `wasm_split_cli_support`), fetched when the visitor goes there, or earlier when a link to
//! it is hovered, focused or touched ([`prefetch_on_intent`]). The Lab, the page chrome and what
//! they share stay in the main module. On the server a lazy route renders like any other.
//!
//! Making a page lazy (docs/ARCHITECTURE.md, "How the site is split"):
//! 1. a unit struct here and a `#[lazy_route] impl LazyRoute` whose `view` renders the
//!    page's component (the macro turns `view` into a split point);
//! 2. its route in [`crate::App`] takes `view=Lazy::<ThatStruct>::new()`;
//! 3. its paths in [`preload`] (so a visit that lands on it loads the chunk before
//!    hydrating) and [`prefetch`] (so the Lab fetches it early).
//!
//! Nothing else changes: the page's module, its component and its tests stay where they are.

use leptos::prelude::*;
use leptos_router::{lazy_route, LazyRoute};

use crate::{generate, learn, pitfalls, records};

/// `/generate`.
pub struct GenerateRoute;

#[lazy_route]
impl LazyRoute for GenerateRoute {
    fn data() -> Self {
        GenerateRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <generate::GeneratePage /> }.into_any()
    }
}

/// `/pitfalls`: the tour and the cards.
pub struct PitfallsRoute;

#[lazy_route]
impl LazyRoute for PitfallsRoute {
    fn data() -> Self {
        PitfallsRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <pitfalls::PitfallsPage /> }.into_any()
    }
}

/// `/embed/pitfalls/{id}`: one card in a doc page.
pub struct EmbedPitfallRoute;

#[lazy_route]
impl LazyRoute for EmbedPitfallRoute {
    fn data() -> Self {
        EmbedPitfallRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <pitfalls::EmbedPitfallPage /> }.into_any()
    }
}

/// `/runs/{id}`: a permalink.
pub struct RecordRoute;

#[lazy_route]
impl LazyRoute for RecordRoute {
    fn data() -> Self {
        RecordRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <records::RecordPage /> }.into_any()
    }
}

/// `/embed/runs/{id}`: a permalink in a doc page.
pub struct EmbedRecordRoute;

#[lazy_route]
impl LazyRoute for EmbedRecordRoute {
    fn data() -> Self {
        EmbedRecordRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <records::RecordPage embed=true /> }.into_any()
    }
}

/// `/runs`: what the server recorded.
pub struct RecordsRoute;

#[lazy_route]
impl LazyRoute for RecordsRoute {
    fn data() -> Self {
        RecordsRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <records::RecordsPage /> }.into_any()
    }
}

/// `/compare?runs=a,b`.
pub struct CompareRoute;

#[lazy_route]
impl LazyRoute for CompareRoute {
    fn data() -> Self {
        CompareRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <records::ComparePage /> }.into_any()
    }
}

/// `/learn`: the paths this server has.
pub struct LearnIndexRoute;

#[lazy_route]
impl LazyRoute for LearnIndexRoute {
    fn data() -> Self {
        LearnIndexRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <learn::IndexRoute /> }.into_any()
    }
}

/// `/learn/new`: composing a path.
pub struct LearnNewRoute;

#[lazy_route]
impl LazyRoute for LearnNewRoute {
    fn data() -> Self {
        LearnNewRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <learn::NewRoute /> }.into_any()
    }
}

/// `/learn/{id}`: a path, step by step.
pub struct LearnRoute;

#[lazy_route]
impl LazyRoute for LearnRoute {
    fn data() -> Self {
        LearnRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <learn::LearnRoute /> }.into_any()
    }
}

/// `/learn/{id}/answers`: what the team predicted.
pub struct LearnAnswersRoute;

#[lazy_route]
impl LazyRoute for LearnAnswersRoute {
    fn data() -> Self {
        LearnAnswersRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <learn::AnswersRoute /> }.into_any()
    }
}

/// `/embed/learn/{id}`: a path in a doc page.
pub struct EmbedLearnRoute;

#[lazy_route]
impl LazyRoute for EmbedLearnRoute {
    fn data() -> Self {
        EmbedLearnRoute
    }
    fn view(_this: Self) -> AnyView {
        view! { <learn::EmbedLearnRoute /> }.into_any()
    }
}

/// The lazy route a path lands on, `None` for the Lab's (main-module) pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Generate,
    Pitfalls,
    EmbedPitfall,
    Record,
    EmbedRecord,
    Records,
    Compare,
    LearnIndex,
    LearnNew,
    Learn,
    LearnAnswers,
    EmbedLearn,
}

impl Page {
    /// The lazy page at `path` (the router's paths, in [`crate::App`]), if any.
    pub fn of(path: &str) -> Option<Page> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segments.as_slice() {
            ["generate"] => Some(Page::Generate),
            ["pitfalls"] => Some(Page::Pitfalls),
            ["compare"] => Some(Page::Compare),
            ["runs"] => Some(Page::Records),
            ["runs", id] if !id.is_empty() => Some(Page::Record),
            ["embed", "runs", id] if !id.is_empty() => Some(Page::EmbedRecord),
            ["embed", "pitfalls", id] if !id.is_empty() => Some(Page::EmbedPitfall),
            ["learn"] => Some(Page::LearnIndex),
            ["learn", "new"] => Some(Page::LearnNew),
            ["learn", id] if !id.is_empty() => Some(Page::Learn),
            ["learn", id, "answers"] if !id.is_empty() => Some(Page::LearnAnswers),
            ["embed", "learn", id] if !id.is_empty() => Some(Page::EmbedLearn),
            _ => None,
        }
    }

    /// The name of the page's split point: the `#[lazy]` function `#[lazy_route]` makes of
    /// its `view` (`__{Struct}_View`, in snake case: `__generate_route_view`), which names its wasm module and its
    /// entry in asset-manifest.json's `chunks`.
    pub fn split_name(self) -> &'static str {
        match self {
            Page::Generate => "__generate_route_view",
            Page::Pitfalls => "__pitfalls_route_view",
            Page::EmbedPitfall => "__embed_pitfall_route_view",
            Page::Record => "__record_route_view",
            Page::EmbedRecord => "__embed_record_route_view",
            Page::Records => "__records_route_view",
            Page::Compare => "__compare_route_view",
            Page::LearnIndex => "__learn_index_route_view",
            Page::LearnNew => "__learn_new_route_view",
            Page::Learn => "__learn_route_view",
            Page::LearnAnswers => "__learn_answers_route_view",
            Page::EmbedLearn => "__embed_learn_route_view",
        }
    }

    /// Whether the page is served without the wasm where the site can ([`crate::static_page`]):
    /// an embedded recorded run, which a reader reads and does not operate.
    pub fn is_static(self) -> bool {
        matches!(self, Page::EmbedRecord)
    }

    /// Loads the page's chunk (at once when it is already loaded).
    pub async fn preload(self) {
        match self {
            Page::Generate => GenerateRoute::preload().await,
            Page::Pitfalls => PitfallsRoute::preload().await,
            Page::EmbedPitfall => EmbedPitfallRoute::preload().await,
            Page::Record => RecordRoute::preload().await,
            Page::EmbedRecord => EmbedRecordRoute::preload().await,
            Page::Records => RecordsRoute::preload().await,
            Page::Compare => CompareRoute::preload().await,
            Page::LearnIndex => LearnIndexRoute::preload().await,
            Page::LearnNew => LearnNewRoute::preload().await,
            Page::Learn => LearnRoute::preload().await,
            Page::LearnAnswers => LearnAnswersRoute::preload().await,
            Page::EmbedLearn => EmbedLearnRoute::preload().await,
        }
    }
}

/// Starts fetching the chunk of the page `href` links to, if it is a lazy one; a chunk
/// fetched once is not fetched again.
#[cfg(feature = "hydrate")]
pub fn prefetch(href: &str) {
    let path = href.split(['?', '#']).next().unwrap_or_default();
    if let Some(page) = Page::of(path) {
        leptos::task::spawn_local(page.preload());
    }
}

/// Prefetches a lazy page's chunk when a link to it is hovered, focused or touched: a click
/// follows within a few hundred milliseconds, time enough to fetch it. Not on idle: what a
/// visitor never opens would be part of every cold visit's bytes.
#[cfg(feature = "hydrate")]
pub fn prefetch_on_intent() {
    use wasm_bindgen::{closure::Closure, JsCast};
    let Some(window) = web_sys::window() else {
        return;
    };
    let Some(document) = window.document() else {
        return;
    };
    let on_intent = Closure::<dyn Fn(web_sys::Event)>::new(|ev: web_sys::Event| {
        let link = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .and_then(|e| e.closest("a[href]").ok().flatten());
        if let Some(href) = link.and_then(|a| a.get_attribute("href")) {
            // Links on this server only ("/generate"), not another site's ("//x/generate").
            if href.starts_with('/') && !href.starts_with("//") {
                prefetch(&href);
            }
        }
    });
    for event in ["mouseover", "focusin", "touchstart"] {
        let _ = document
            .add_event_listener_with_callback(event, on_intent.as_ref().unchecked_ref());
    }
    // Listens for the page's lifetime.
    on_intent.forget();
}

#[cfg(test)]
mod tests {
    use super::Page;

    #[test]
    fn every_lazy_path_is_found_and_the_lab_is_not() {
        assert_eq!(Page::of("/generate"), Some(Page::Generate));
        assert_eq!(Page::of("/pitfalls"), Some(Page::Pitfalls));
        assert_eq!(Page::of("/compare"), Some(Page::Compare));
        assert_eq!(Page::of("/runs"), Some(Page::Records));
        assert_eq!(Page::of("/runs/"), Some(Page::Records));
        assert_eq!(Page::of("/runs/abc"), Some(Page::Record));
        assert_eq!(Page::of("/embed/runs/abc"), Some(Page::EmbedRecord));
        assert_eq!(Page::of("/embed/pitfalls/eval"), Some(Page::EmbedPitfall));
        assert_eq!(Page::of("/learn"), Some(Page::LearnIndex));
        assert_eq!(Page::of("/learn/new"), Some(Page::LearnNew));
        assert_eq!(Page::of("/learn/ten-minutes"), Some(Page::Learn));
        assert_eq!(Page::of("/learn/ten-minutes/answers"), Some(Page::LearnAnswers));
        assert_eq!(Page::of("/embed/learn/ten-minutes"), Some(Page::EmbedLearn));
        for main in ["/", "", "/embed/lab", "/nowhere", "/runs/a/b", "/embed/runs/", "/generate/x"] {
            assert_eq!(Page::of(main), None, "{main}");
        }
    }
}
