//! The learn pages: an onboarding path, step by step, each step predicted before it runs
//! (`/learn/{id}`, `/embed/learn/{id}`), what a team's learners predicted
//! (`/learn/{id}/answers`, [`answers`]), the list of paths (`/learn`) and composing one
//! (`/learn/new`, [`compose`]). Each page is one route component, entered from `lib.rs`,
//! so each can become a lazy route on its own.
//!
//! What a page shows comes from the server ([`protocol::learn::LearnPageData`], in context
//! on the server, embedded in the page for the browser); a learner's progress lives in this
//! browser only (localStorage, one key per path), no account.

pub mod answers;
pub mod compose;
mod path;

pub use answers::AnswersRoute;
pub use compose::{IndexRoute, NewRoute};
pub use path::{EmbedLearnRoute, LearnRoute};

use protocol::learn::LearnPageData;

/// The id of the `<script type="application/json">` carrying the page's data.
const DATA_ELEMENT: &str = "gradless-learn";

/// The page's data: from context on the server, from the page in the browser.
fn page_data() -> LearnPageData {
    #[cfg(feature = "hydrate")]
    {
        if let Some(d) = crate::page_json(DATA_ELEMENT).and_then(|t| serde_json::from_str::<LearnPageData>(&t).ok()) {
            return d;
        }
    }
    leptos::prelude::use_context::<LearnPageData>().unwrap_or_default()
}

/// The element that carries `data` to the hydrating page.
fn data_script(data: &LearnPageData) -> impl leptos::IntoView + use<> {
    use leptos::prelude::*;
    let json = crate::script_json(data);
    view! { <script type="application/json" id=DATA_ELEMENT inner_html=json></script> }
}
