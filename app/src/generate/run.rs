//! How the Generate page runs: a row or a comparison's rows one after another, each
//! followed live ([`execute`]), and a bare address's first view, the newest recorded
//! generation of the default settings or, on a fresh server, one generation of them.

#[cfg(feature = "hydrate")]
use leptos::prelude::*;
use protocol::{Report, RunSpec};

#[cfg(feature = "hydrate")]
use crate::run_view::{Phase, RunView};

#[cfg(feature = "hydrate")]
pub(super) async fn execute(
    rows: Vec<RunSpec>,
    view_state: RwSignal<RunView>,
    finished: RwSignal<Vec<(String, Report)>>,
    compared: RwSignal<Vec<(String, Report)>>,
) {
    // A generation's steps are drawn live: ECharts, if the first view held it back, comes now.
    crate::charts::want_echarts();
    let comparing = rows.len() > 1;
    compared.set(vec![]);
    for spec in rows {
        view_state.set(RunView::submitting());
        match crate::client::start_run(&spec).await {
            Err(message) => {
                view_state.update(|v| v.phase = Phase::Failed(message));
                return;
            }
            Ok(created) => {
                let id = created.id.clone();
                crate::client::follow(&created.events_url, spec.model, move |event| {
                    if let protocol::Event::Done { report } = &event {
                        let report = (**report).clone();
                        finished.update(|h| h.push((id.clone(), report.clone())));
                        if comparing {
                            compared.update(|c| c.push((id.clone(), report)));
                        }
                    }
                    view_state.update(|v| v.apply(event));
                })
                .await;
            }
        }
        if view_state.with_untracked(|v| matches!(v.phase, Phase::Failed(_))) {
            return;
        }
    }
}

/// A bare address: the newest recorded run of the default generation, labelled; on a
/// fresh server, the default generation once.
#[cfg(feature = "hydrate")]
pub(super) async fn first_view(
    default: RunSpec,
    view_state: RwSignal<RunView>,
    finished: RwSignal<Vec<(String, Report)>>,
    note: RwSignal<Option<String>>,
) {
    use protocol::{Record, RecordSummary};
    // The list's labels name the model first, as the Lab's first view reads them.
    let label = crate::lab::guide::summary_label(&default);
    let listed = crate::client::get_json::<Vec<RecordSummary>>("/api/records?kind=run&limit=200")
        .await
        .unwrap_or_default();
    for summary in listed.iter().filter(|s| s.label == label).take(5) {
        let url = format!("/api/records/{}", summary.id);
        if let Ok(record) = crate::client::get_json::<Record>(&url).await {
            if let Some(report) = record.run().filter(|r| is_default_generation(r, &default)) {
                if view_state.with_untracked(|v| v.report.is_none() && !v.phase.busy()) {
                    note.set(Some(format!(
                        "Recorded generation (the default settings), measured on {} on {}: press Generate to measure it again now.",
                        report.env.device_label(),
                        report.env.measured_at.get(..10).unwrap_or(&report.env.measured_at)
                    )));
                    let mut v = RunView::default();
                    v.phase = Phase::Done;
                    v.baseline_bytes = Some(report.memory.baseline_bytes);
                    v.steps = report.generation.as_ref().map(|g| g.steps.clone()).unwrap_or_default();
                    v.report = Some(report.clone());
                    view_state.set(v);
                    finished.update(|h| h.push((record.id.clone(), report.clone())));
                    crate::charts::show_pictures(
                        &record.id,
                        &[
                            ("gen-latency-chart", "step-latency"),
                            ("gen-memory-chart", "step-memory"),
                            ("gen-prefill-chart", "prefill-decode"),
                        ],
                    );
                }
                return;
            }
        }
    }
    crate::charts::want_echarts();
    if view_state.with_untracked(|v| v.report.is_none() && !v.phase.busy()) {
        note.set(Some("First visit on this server: nothing is recorded yet, so the page generates once with the default settings.".into()));
        execute(vec![default], view_state, finished, RwSignal::new(vec![])).await;
    }
}

/// Whether recorded run `r` is a generation of the `default` settings (the label narrows
/// the list; the record itself must match every setting the page shows).
#[cfg_attr(not(any(feature = "hydrate", test)), allow(dead_code))]
pub(super) fn is_default_generation(r: &Report, default: &RunSpec) -> bool {
    let (s, d) = (&r.spec, default);
    r.generation.is_some()
        && s.model == d.model
        && s.generate == d.generate
        && (s.batch, s.eval, s.grad, s.autocast) == (d.batch, d.eval, d.grad, d.autocast)
        && s.resolved_input_size() == d.resolved_input_size()
}
