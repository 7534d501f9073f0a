//! The Lab's results column: the run's status, its live charts, its figures and actions,
//! the reading against the previous run, every run of the page side by side, and the
//! Python that does what the settings do.

use leptos::prelude::*;
use protocol::{python_snippet, RunSpec};

use super::{History, LabCtx};
use crate::explain;
use crate::run_view::{Phase, RunView};
use crate::widgets::{summary_table, RecordActions};

/// The results column of the Lab.
#[component]
pub fn Results(
    lab: LabCtx,
    view_state: RwSignal<RunView>,
    history: History,
    current_id: RwSignal<Option<String>>,
    embed: bool,
) -> impl IntoView {
    let spec = lab.spec;
    let hidden = move |c: &str| lab.hidden(c);
    view! {
        <section class="results" id="results" aria-label="Results">
            <Status view_state />
            <div class="charts">
                <figure>
                    <div id="latency-chart" class="chart" data-testid="latency-chart"></div>
                </figure>
                <figure>
                    <div id="memory-chart" class="chart" data-testid="memory-chart"></div>
                </figure>
            </div>
            <Summary view_state />
            {move || {
                let done = view_state.with(|v| v.phase == Phase::Done);
                current_id.get().filter(|_| done && !embed).map(|id| view! { <RecordActions id run=true charts=vec![("latency-chart", "latency"), ("memory-chart", "memory")] /> })
            }}
            <p class="reading" data-testid="reading">
                {move || {
                    history.with(|h| {
                        h.last().map(|(_, last)| explain::reading(last, h.len().checked_sub(2).and_then(|i| h.get(i)).map(|(_, r)| r)))
                    })
                }}
            </p>
            <figure class="wide" class:hidden=hidden("history")>
                <div id="compare-chart" class="chart" data-testid="compare-chart"></div>
                <figcaption>
                    "Every finished run on this page, side by side. Each is recorded: "
                    {move || {
                        history.with(|h| {
                            let ids: Vec<&str> = h.iter().map(|(id, _)| id.as_str()).collect();
                            (h.len() >= 2 && !embed).then(|| view! {
                                <a href=format!("/compare?runs={}", ids.iter().rev().take(crate::records::MAX_COMPARED).rev().cloned().collect::<Vec<_>>().join(",")) rel="external" data-testid="compare-link">
                                    "open them side by side from their permalinks"
                                </a>
                            })
                        })
                    }}
                    {move || history.with(|h| h.len() < 2).then_some("run twice to compare them from their permalinks.")}
                </figcaption>
            </figure>
            {(!hidden("snippet")).then(|| view! { <Snippet spec /> })}
        </section>
    }
}

/// Queue position, progress and errors of the current run.
#[component]
fn Status(view_state: RwSignal<RunView>) -> impl IntoView {
    view! {
        <div class="status" data-testid="status" aria-live="polite">
            {move || {
                view_state.with(|v| match &v.phase {
                    Phase::Idle => "Choose settings and press Run: the server measures them live.".to_string(),
                    Phase::Submitting => "Sending the run to the server…".to_string(),
                    Phase::Queued(0) => "Queued: next on the device.".to_string(),
                    Phase::Queued(n) => format!("Queued: {n} run(s) ahead of yours."),
                    Phase::Running { done, total } => format!(
                        "Running on {}: iteration {done} of {total}.",
                        v.device_name.clone().unwrap_or_default()
                    ),
                    Phase::Done => format!("Done on {}.", v.device_name.clone().unwrap_or_default()),
                    Phase::Failed(_) => "The run did not finish.".to_string(),
                })
            }}
            <progress max="1" value=move || view_state.with(|v| v.progress()) aria-label="Run progress"></progress>
            {move || {
                view_state.with(|v| match &v.phase {
                    Phase::Failed(msg) => Some(view! { <p class="error" role="alert" data-testid="run-error">{msg.clone()}</p> }),
                    _ => None,
                })
            }}
        </div>
    }
}

/// One line beside the Run button with the run's progress and, once done, its headline
/// figures: on a laptop screen the charts may be out of view of the button that started
/// the run, and the reader must still see that it runs and what it found.
#[component]
pub fn RunProgress(view_state: RwSignal<RunView>) -> impl IntoView {
    let line = move || {
        view_state.with(|v| match &v.phase {
            Phase::Idle => None,
            Phase::Submitting => Some("Sending…".to_string()),
            Phase::Queued(n) => Some(format!("Queued ({n} ahead)")),
            Phase::Running { done, total } => Some(format!("Iteration {done} of {total}…")),
            Phase::Done => v.report.as_ref().map(|r| {
                format!(
                    "Done: p50 {:.2} ms, peak {} above baseline.",
                    r.latency_ms.p50,
                    protocol::format_bytes(r.memory.peak_above_baseline_bytes)
                )
            }),
            Phase::Failed(m) => Some(format!("Failed: {m}")),
        })
    };
    view! {
        <p class="run-progress" data-testid="run-progress" aria-live="polite">
            {line}
            {move || view_state.with(|v| v.phase == Phase::Done).then(|| view! { " " <a href="#results">"See the results"</a> })}
        </p>
    }
}

/// The finished run's figures, with where they come from.
#[component]
fn Summary(view_state: RwSignal<RunView>) -> impl IntoView {
    move || view_state.with(|v| v.report.as_ref().map(summary_table))
}

/// The Python that does what the settings do, with a copy button.
#[component]
fn Snippet(spec: Memo<RunSpec>) -> impl IntoView {
    let copied = RwSignal::new(false);
    let on_copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let text = python_snippet(&spec.get_untracked());
            leptos::task::spawn_local(async move {
                let ok = crate::client::copy_text(&text).await.is_ok();
                copied.set(ok);
            });
        }
    };
    view! {
        <div class="snippet">
            <div class="snippet-head">
                <h2>"The same in PyTorch"</h2>
                <button data-testid="copy-snippet" on:click=on_copy>{move || if copied.get() { "Copied" } else { "Copy" }}</button>
            </div>
            <pre><code data-testid="snippet">{move || python_snippet(&spec.get())}</code></pre>
        </div>
    }
}
