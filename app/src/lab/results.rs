//! The Lab's results column: the run's status, its live charts (the previous run faintly
//! behind, the reading against it on the chart), its figures and actions, which run is
//! shown, every run of the page side by side (each can be brought back with its
//! settings), and the Python that does what the settings do.

use leptos::prelude::*;
use protocol::{python_snippet, RunSpec};

use super::{LabCtx, Runs};
use crate::charts::MemoryScale;
use crate::explain;
use crate::run_view::{Phase, RunView};
use crate::widgets::{summary_table, RecordActions};

/// The results column of the Lab.
#[component]
pub fn Results(
    lab: LabCtx,
    runs: Runs,
    embed: bool,
    /// The address had no settings: the first view looks for a recorded run.
    bare: bool,
    memory_scale: RwSignal<MemoryScale>,
) -> impl IntoView {
    let spec = lab.spec;
    let hidden = move |c: &str| lab.hidden(c);
    let Runs {
        view_state,
        history,
        current_id,
        previous,
        ..
    } = runs;
    view! {
        <section class="results" id="results" aria-label="Results">
            <Status runs bare=bare && !embed />
            <div class="charts">
                <figure>
                    <div id="latency-chart" class="chart" data-testid="latency-chart" role="img" aria-label="Latency per iteration: nothing measured yet."></div>
                </figure>
                <figure data-guide="1 2">
                    <div id="memory-chart" class="chart" data-testid="memory-chart" role="img" aria-label="Memory per forward pass: nothing measured yet."></div>
                    <figcaption>
                        <label class="toggle">
                            <input
                                type="checkbox"
                                data-testid="memory-absolute"
                                prop:checked=move || memory_scale.get() == MemoryScale::Absolute
                                on:change=move |ev| {
                                    memory_scale.set(if event_target_checked(&ev) { MemoryScale::Absolute } else { MemoryScale::AboveBaseline })
                                }
                            />
                            "Plot absolute memory (the baseline included)"
                        </label>
                    </figcaption>
                </figure>
            </div>
            <Shown lab runs />
            <Summary view_state />
            <super::inside::Inside runs />
            {move || {
                let done = view_state.with(|v| v.phase == Phase::Done);
                current_id.get().filter(|_| done && !embed).map(|id| view! { <RecordActions id run=true charts=vec![("latency-chart", "latency"), ("memory-chart", "memory")] /> })
            }}
            <p class="reading" data-testid="reading">
                {move || {
                    view_state.with(|v| {
                        v.report.as_ref().map(|r| previous.with(|p| explain::reading(r, p.as_ref())))
                    })
                }}
            </p>
            <figure class="wide" class:hidden=hidden("history") data-guide="3">
                <div id="compare-chart" class="chart" data-testid="compare-chart" role="img" aria-label="Runs on this page: no finished run yet."></div>
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
                <PageRuns lab runs />
            </figure>
            {(!hidden("snippet")).then(|| view! { <Snippet spec view_state /> })}
        </section>
    }
}

/// Queue position, progress and errors of the current run, and what a run shown without
/// being run here is.
#[component]
fn Status(runs: Runs, bare: bool) -> impl IntoView {
    let Runs {
        view_state,
        shown_note,
        automatic,
        ..
    } = runs;
    view! {
        <div class="status" id="run-status" data-testid="status" aria-live="polite">
            {move || shown_note.get().map(|n| view! { <p class="shown-note" data-testid="shown-note">{n}</p> })}
            {move || {
                // A run shown, not run here, has no progress to tell.
                let quiet = shown_note.with(|n| n.is_some()) && !automatic.get();
                view_state.with(|v| match &v.phase {
                    _ if quiet => String::new(),
                    Phase::Idle if bare => "Looking for a recorded run of the default settings…".to_string(),
                    Phase::Idle => "Choose settings and press Run: the server measures them live.".to_string(),
                    Phase::Submitting => "Sending the run to the server…".to_string(),
                    Phase::Queued(0) => "Queued: next on the device.".to_string(),
                    Phase::Queued(n) => format!("Queued: {n} run(s) ahead of yours."),
                    Phase::Running { done, total } => format!(
                        "Running on {}: iteration {done} of {total}.",
                        v.device_name.clone().unwrap_or_default()
                    ),
                    Phase::Working { what, done, total } => format!("{what}, part {} of {total}.", done + 1),
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

/// Which run the charts and the summary show — after Compare all modes, the last of the
/// comparison, not what the controls say — and a way to load its settings.
#[component]
fn Shown(lab: LabCtx, runs: Runs) -> impl IntoView {
    let Runs {
        view_state,
        history,
        current_id,
        ..
    } = runs;
    move || {
        let report = view_state.with(|v| v.report.clone())?;
        let id = current_id.get();
        let number = history.with(|h| {
            id.as_ref()
                .and_then(|id| h.iter().position(|(i, _)| i == id))
                .map(|i| i + 1)
        });
        let which = match number {
            Some(n) => format!(
                "Showing run #{n} of this page: {}",
                explain::run_name(&report)
            ),
            None => format!("Showing a recorded run: {}", explain::run_name(&report)),
        };
        let differs = lab.spec.with(|s| !same_settings(s, &report.spec));
        let load = report.spec.clone();
        Some(view! {
            <p class="shown" data-testid="shown">
                {which}
                {differs.then(|| view! {
                    " — the settings on the left differ. "
                    <button class="link" data-testid="load-shown" on:click=move |_| lab.update(&|s| *s = load.clone())>
                        "Load its settings"
                    </button>
                })}
            </p>
        })
    }
}

/// Whether two specs are the same settings as the controls show them. An input size not
/// set is the model's default (the server records the size it used).
pub fn same_settings(a: &RunSpec, b: &RunSpec) -> bool {
    let size = |s: &RunSpec| s.input_size.unwrap_or(s.model.input().default);
    (
        a.model,
        a.batch,
        a.eval,
        a.grad,
        a.autocast,
        a.warmup,
        a.iters,
        size(a),
    ) == (
        b.model,
        b.batch,
        b.eval,
        b.grad,
        b.autocast,
        b.warmup,
        b.iters,
        size(b),
    )
}

/// The page's runs as a list: each can be put back on the charts, its settings loaded.
#[component]
fn PageRuns(lab: LabCtx, runs: Runs) -> impl IntoView {
    let Runs {
        history,
        current_id,
        view_state,
        ..
    } = runs;
    move || {
        let items = history.get();
        (!items.is_empty()).then(|| {
            let busy = move || view_state.with(|v| v.phase.busy());
            view! {
                <ol class="page-runs" data-testid="page-runs">
                    {items
                        .into_iter()
                        .enumerate()
                        .map(|(i, (id, report))| {
                            let shown = {
                                let id = id.clone();
                                Signal::derive(move || current_id.with(|c| c.as_deref() == Some(id.as_str())))
                            };
                            let line = format!(
                                "#{} {}: peak {} above baseline, p50 {:.2} ms",
                                i + 1,
                                explain::run_name(&report),
                                protocol::format_bytes(report.memory.peak_above_baseline_bytes),
                                report.latency_ms.p50
                            );
                            let on_show = move |_| {
                                if busy() {
                                    return;
                                }
                                let spec = report.spec.clone();
                                lab.update(&|s| *s = spec.clone());
                                runs.show(
                                    Some(id.clone()),
                                    report.clone(),
                                    format!("Run #{} of this page, brought back with its settings.", i + 1),
                                );
                            };
                            view! {
                                <li class:shown=shown>
                                    {line}
                                    " "
                                    <button class="link" data-testid=format!("show-run-{}", i + 1) on:click=on_show aria-disabled=move || busy().to_string()>
                                        {move || if shown.get() { "shown" } else { "show it and load its settings" }}
                                    </button>
                                </li>
                            }
                        })
                        .collect_view()}
                </ol>
            }
        })
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
            Phase::Working { what, .. } => Some(what.clone()),
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
            {move || view_state.with(|v| v.phase == Phase::Done).then(|| view! { " " <a href="#run-status">"See the results"</a> })}
        </p>
    }
}

/// The finished run's figures, with where they come from.
#[component]
fn Summary(view_state: RwSignal<RunView>) -> impl IntoView {
    move || view_state.with(|v| v.report.as_ref().map(summary_table))
}

/// The Python that does what the run on the charts did (before any run: what the settings
/// would do), with a copy button: after Compare all modes the charts show its last row, not
/// what the controls say.
#[component]
fn Snippet(spec: Memo<RunSpec>, view_state: RwSignal<RunView>) -> impl IntoView {
    let shown = Memo::new(move |_| {
        view_state
            .with(|v| v.report.as_ref().map(|r| r.spec.clone()))
            .unwrap_or_else(|| spec.get())
    });
    let copied = RwSignal::new(false);
    let on_copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let text = python_snippet(&shown.get_untracked());
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
            <pre tabindex="0"><code data-testid="snippet">{move || python_snippet(&shown.get())}</code></pre>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::GradMode;

    #[test]
    fn settings_are_the_same_only_when_every_taught_setting_is() {
        let a = RunSpec::default();
        assert!(same_settings(&a, &a.clone()));
        let b = RunSpec {
            grad: GradMode::NoGrad,
            ..a.clone()
        };
        assert!(!same_settings(&a, &b));
        // The device choice "auto" and what it resolved to are the same setting here.
        let c = RunSpec {
            device: protocol::DeviceChoice::Cpu,
            ..a.clone()
        };
        assert!(same_settings(&a, &c));
        // A recorded run carries the input size the server used: the default is "not set".
        let recorded = RunSpec {
            input_size: Some(a.model.input().default),
            ..a.clone()
        };
        assert!(same_settings(&a, &recorded));
        let smaller = RunSpec {
            input_size: Some(a.model.input().default / 2),
            ..a.clone()
        };
        assert!(!same_settings(&a, &smaller));
    }
}
