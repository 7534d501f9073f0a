//! Running from the Lab: one run, or the classic rows one after another, streamed into
//! the page's state and kept in its history.

use leptos::prelude::*;
use protocol::{Report, RunSpec};

#[cfg(feature = "hydrate")]
use crate::run_view::Phase;
use crate::run_view::RunView;

/// Every finished run on this page, with its permanent id.
pub type History = RwSignal<Vec<(String, Report)>>;

/// Starts one run from the browser and streams it into the page.
pub fn start_run(
    spec: RunSpec,
    view_state: RwSignal<RunView>,
    history: History,
    current_id: RwSignal<Option<String>>,
) {
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(execute(spec, view_state, history, current_id));
    #[cfg(not(feature = "hydrate"))]
    let _ = (spec, view_state, history, current_id);
}

/// Runs `rows` one after another (Compare all modes).
pub fn start_sequence(
    rows: Vec<RunSpec>,
    view_state: RwSignal<RunView>,
    history: History,
    current_id: RwSignal<Option<String>>,
    comparing: RwSignal<bool>,
) {
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(async move {
        comparing.set(true);
        for spec in rows {
            execute(spec, view_state, history, current_id).await;
        }
        comparing.set(false);
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (rows, view_state, history, current_id, comparing);
}

#[cfg(feature = "hydrate")]
async fn execute(
    spec: RunSpec,
    view_state: RwSignal<RunView>,
    history: History,
    current_id: RwSignal<Option<String>>,
) {
    view_state.set(RunView::submitting());
    current_id.set(None);
    match crate::client::start_run(&spec).await {
        Err(message) => view_state.update(|v| v.phase = Phase::Failed(message)),
        Ok(created) => {
            let id = created.id.clone();
            current_id.set(Some(id.clone()));
            crate::client::follow(&created.events_url, move |event| {
                if let protocol::Event::Done { report } = &event {
                    let report = (**report).clone();
                    history.update(|h| h.push((id.clone(), report)));
                }
                view_state.update(|v| v.apply(event));
            })
            .await
        }
    }
}
