//! Running from the Lab: one run, or the classic rows one after another, streamed into
//! the page's state and kept in its history.

use leptos::prelude::*;
use protocol::{Report, RunSpec};

#[cfg(feature = "hydrate")]
use crate::run_view::Phase;
use crate::run_view::RunView;

/// Every finished run on this page, with its permanent id.
pub type History = RwSignal<Vec<(String, Report)>>;

/// The page's run state, shared by everything that starts or shows a run.
#[derive(Clone, Copy)]
pub struct Runs {
    /// The run on the charts (streaming, finished, or recorded and shown on arrival).
    pub view_state: RwSignal<RunView>,
    pub history: History,
    /// The permanent id of the run on the charts, once the server has given it one.
    pub current_id: RwSignal<Option<String>>,
    /// The run that was on the charts before this one: drawn faintly behind it.
    pub previous: RwSignal<Option<Report>>,
    /// What the status line says about a run shown without being run here (the first
    /// view's recorded run, or a run of the page brought back).
    pub shown_note: RwSignal<Option<String>>,
    /// Compare all modes is going.
    pub comparing: RwSignal<bool>,
    /// The run going (or last finished) was started by the page itself, not the reader
    /// (the first visit's default run): the guided start does not count it.
    pub automatic: RwSignal<bool>,
}

impl Runs {
    pub fn new() -> Runs {
        Runs {
            view_state: RwSignal::new(RunView::default()),
            history: RwSignal::new(vec![]),
            current_id: RwSignal::new(None),
            previous: RwSignal::new(None),
            shown_note: RwSignal::new(None),
            comparing: RwSignal::new(false),
            automatic: RwSignal::new(false),
        }
    }

    /// Puts a finished run on the charts without running it, `note` saying what it is.
    pub fn show(&self, id: Option<String>, report: Report, note: String) {
        if let Some(shown) = self.view_state.with_untracked(|v| v.report.clone()) {
            self.previous.set(Some(shown));
        }
        self.view_state.set(RunView {
            phase: crate::run_view::Phase::Done,
            device_name: Some(report.env.device_name.clone()),
            memory_source: Some(report.memory.source),
            baseline_bytes: Some(report.memory.baseline_bytes),
            warmup: report.warmup.clone(),
            samples: report.samples.clone(),
            steps: report
                .generation
                .as_ref()
                .map(|g| g.steps.clone())
                .unwrap_or_default(),
            report: Some(report),
        });
        self.current_id.set(id);
        self.shown_note.set(Some(note));
    }
}

impl Default for Runs {
    fn default() -> Self {
        Runs::new()
    }
}

/// Starts one run from the browser and streams it into the page.
pub fn start_run(spec: RunSpec, runs: Runs) {
    #[cfg(feature = "hydrate")]
    bring_results_into_view();
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(execute(spec, runs, None));
    #[cfg(not(feature = "hydrate"))]
    let _ = (spec, runs);
}

/// Starts a run the page itself chose (not the reader), with `note` on the status line
/// while it is shown.
pub fn start_automatic_run(spec: RunSpec, runs: Runs, note: String) {
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(execute(spec, runs, Some(note)));
    #[cfg(not(feature = "hydrate"))]
    let _ = (spec, runs, note);
}

/// Runs `rows` one after another (Compare all modes).
pub fn start_sequence(rows: Vec<RunSpec>, runs: Runs) {
    #[cfg(feature = "hydrate")]
    bring_results_into_view();
    #[cfg(feature = "hydrate")]
    leptos::task::spawn_local(async move {
        runs.comparing.set(true);
        for spec in rows {
            execute(spec, runs, None).await;
        }
        runs.comparing.set(false);
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (rows, runs);
}

/// A run the reader starts brings its status and charts into view: on a phone they sit
/// above the settings, so the Run button is a screen or more below them. (A run the page
/// starts by itself moves nothing.)
#[cfg(feature = "hydrate")]
fn bring_results_into_view() {
    crate::charts::bring_into_view("run-status");
}

#[cfg(feature = "hydrate")]
async fn execute(spec: RunSpec, runs: Runs, automatic: Option<String>) {
    let Runs {
        view_state,
        history,
        current_id,
        previous,
        shown_note,
        ..
    } = runs;
    // A run's samples are drawn live: ECharts, if the first view held it back, comes now.
    crate::charts::want_echarts();
    // What was on the charts becomes the faint "previous run" behind the new one.
    if let Some(shown) = view_state.with_untracked(|v| v.report.clone()) {
        previous.set(Some(shown));
    }
    runs.automatic.set(automatic.is_some());
    shown_note.set(automatic);
    view_state.set(RunView::submitting());
    current_id.set(None);
    match crate::client::start_run(&spec).await {
        Err(message) => view_state.update(|v| v.phase = Phase::Failed(message)),
        Ok(created) => {
            let id = created.id.clone();
            current_id.set(Some(id.clone()));
            crate::client::follow(&created.events_url, spec.model, move |event| {
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
