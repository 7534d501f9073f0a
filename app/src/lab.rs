//! The Lab page: controls for every setting with its explanation beside it, the Python
//! snippet, and the live charts of the run. The settings live in the URL (see
//! [`crate::settings`]); the run's state is folded from its streamed events
//! ([`crate::run_view`]).

use leptos::prelude::*;
use leptos_router::hooks::{use_location, use_navigate, use_query_map};
use leptos_router::NavigateOptions;
use protocol::{
    format_bytes, python_snippet, Autocast, DeviceChoice, DeviceKind, GradMode, ModelId, Report,
    RunSpec, ServerInfo,
};

use crate::embed::EmbedOptions;
use crate::explain;
use crate::records::{summary_table, EmbedSnippet, RecordActions};
use crate::run_view::{Phase, RunView};
use crate::settings::{batch_stops, parse_batch, query_from_spec, spec_from_query};

/// The device `auto` resolves to on this server: the GPU when there is one.
fn resolved_device(info: &ServerInfo, choice: DeviceChoice) -> DeviceKind {
    match choice {
        DeviceChoice::Cpu => DeviceKind::Cpu,
        DeviceChoice::Cuda => DeviceKind::Cuda,
        DeviceChoice::Auto => info
            .devices
            .first()
            .map(|d| d.kind)
            .unwrap_or(DeviceKind::Cpu),
    }
}

/// Whether `autocast` can run on the spec's device, and the note to show.
fn autocast_support(info: &ServerInfo, spec: &RunSpec, autocast: Autocast) -> (bool, String) {
    let device = resolved_device(info, spec.device);
    info.devices
        .iter()
        .find(|d| d.kind == device)
        .and_then(|d| d.autocast.iter().find(|a| a.autocast == autocast))
        .map(|a| (a.supported, a.note.clone()))
        .unwrap_or((
            false,
            format!("this server has no {} device", device.as_str()),
        ))
}

/// The Lab: at `/`, and at `/embed/lab` for doc pages, where `hide=` and `lock=` in the
/// address remove or fix controls (see [`crate::embed`]).
#[component]
pub fn LabPage(#[prop(optional)] embed: bool) -> impl IntoView {
    let info = expect_context::<ServerInfo>();
    let auth_required = info.auth_required;
    let info = StoredValue::new(info);
    let query = use_query_map();
    let spec = Memo::new(move |_| query.with(|q| spec_from_query(|k| q.get(k))));
    let opts = StoredValue::new(if embed {
        query.with_untracked(|q| EmbedOptions::from_query(|k| q.get(k)))
    } else {
        EmbedOptions::default()
    });
    let hidden = move |c: &str| opts.with_value(|o| o.hides(c));
    let locked = move |c: &str| opts.with_value(|o| o.locks(c));
    let location = use_location();
    let navigate = use_navigate();
    // Every change of a setting is a navigation: the URL is the single source of truth, so
    // links restore settings and back/forward step through them. An embed keeps its
    // hide/lock options.
    let set_spec = Callback::new(move |next: RunSpec| {
        let path = location.pathname.get_untracked();
        let keep = opts.with_value(|o| o.to_query());
        navigate(
            &format!("{path}?{}{keep}", query_from_spec(&next)),
            NavigateOptions {
                scroll: false,
                ..Default::default()
            },
        );
    });
    let update = move |f: &dyn Fn(&mut RunSpec)| {
        let mut s = spec.get_untracked();
        f(&mut s);
        set_spec.run(s);
    };

    let view_state = RwSignal::new(RunView::default());
    // Every finished run on this page, with its permanent id.
    let history = RwSignal::new(Vec::<(String, Report)>::new());
    let current_id = RwSignal::new(None::<String>);
    let busy = Memo::new(move |_| view_state.with(|v| v.phase.busy()));
    let comparing = RwSignal::new(false);

    let limits = info.with_value(|i| i.limits.clone());
    let stops = StoredValue::new(batch_stops(&limits));
    let (max_warmup, max_iters) = (limits.max_warmup, limits.max_iters);
    let batch_text = RwSignal::new(spec.get_untracked().batch.to_string());
    let batch_error = RwSignal::new(None::<String>);
    // Keep the typed text in step when the batch changes from elsewhere (slider, URL).
    Effect::new(move |_| {
        let b = spec.get().batch;
        if batch_error.get_untracked().is_none() {
            batch_text.set(b.to_string());
        }
    });

    let run_one = move |s: RunSpec| start_run(s, view_state, history, current_id);
    let on_run = move |_| {
        if batch_error.get_untracked().is_some() {
            return;
        }
        run_one(spec.get_untracked());
    };
    let on_compare = move |_| {
        if batch_error.get_untracked().is_some() {
            return;
        }
        let base = spec.get_untracked();
        let rows: Vec<RunSpec> = base
            .classic_modes()
            .into_iter()
            .filter(|s| info.with_value(|i| autocast_support(i, s, s.autocast).0))
            .collect();
        start_sequence(rows, view_state, history, current_id, comparing);
    };

    // `&run=1` in a shared link starts the run once the page is live.
    Effect::new(move |done: Option<bool>| {
        if done == Some(true) {
            return true;
        }
        if query.with_untracked(|q| q.get("run").as_deref() == Some("1")) {
            run_one(spec.get_untracked());
        }
        true
    });

    #[cfg(feature = "hydrate")]
    {
        use crate::charts;
        Effect::new(move |_| {
            view_state.with(|v| {
                let r = v.report.as_ref();
                charts::render(
                    "latency-chart",
                    charts::latency_chart(
                        &v.warmup,
                        &v.samples,
                        r.map(|r| r.latency_ms.p50),
                        r.map(|r| r.latency_ms.p95),
                    ),
                );
                charts::render(
                    "memory-chart",
                    charts::memory_chart(&v.warmup, &v.samples, v.baseline_bytes),
                );
            })
        });
        Effect::new(move |_| {
            let reports: Vec<Report> = history.with(|h| h.iter().map(|(_, r)| r.clone()).collect());
            charts::render(
                "compare-chart",
                charts::comparison_chart("Runs on this page", &reports),
            )
        });
    }

    let models = info.with_value(|i| i.models.clone());
    let devices = info.with_value(|i| i.devices.clone());

    view! {
        <div class="lab">
            <section class="controls" aria-label="Settings">
                {(!opts.with_value(|o| o.lock.is_empty())).then(|| view! {
                    <p class="explain note" data-testid="locked-note">"Greyed-out settings are fixed by the page that embeds this."</p>
                })}
                <div class="control" class:hidden=hidden("model")>
                    <label for="model">"Model"</label>
                    <select
                        id="model"
                        data-testid="model"
                        prop:disabled=locked("model")
                        prop:value=move || spec.get().model.as_str()
                        on:change=move |ev| {
                            if let Ok(m) = event_target_value(&ev).parse::<ModelId>() {
                                update(&|s| {
                                    s.model = m;
                                    s.input_size = None;
                                });
                            }
                        }
                    >
                        {models
                            .into_iter()
                            .map(|m| {
                                let id = m.id;
                                view! {
                                    <option value=id.as_str() selected=move || spec.get().model == id>
                                        {format!("{} — {:.1}M params", m.name, m.parameters as f64 / 1e6)}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                    <p class="explain">
                        {move || {
                            let m = spec.get().model;
                            format!("Input: {} (default {}).", m.input().meaning, m.input().default)
                        }}
                    </p>
                </div>

                <div class="control" class:hidden=hidden("device")>
                    <label for="device">"Device"</label>
                    <select
                        id="device"
                        data-testid="device"
                        prop:disabled=locked("device")
                        prop:value=move || match spec.get().device {
                            DeviceChoice::Auto => "auto",
                            DeviceChoice::Cpu => "cpu",
                            DeviceChoice::Cuda => "cuda",
                        }
                        on:change=move |ev| {
                            if let Ok(d) = event_target_value(&ev).parse::<DeviceChoice>() {
                                update(&|s| s.device = d);
                            }
                        }
                    >
                        <option value="auto" selected=move || spec.get().device == DeviceChoice::Auto>
                            "auto (GPU when present)"
                        </option>
                        {devices
                            .into_iter()
                            .map(|d| {
                                let choice = match d.kind {
                                    DeviceKind::Cpu => DeviceChoice::Cpu,
                                    DeviceKind::Cuda => DeviceChoice::Cuda,
                                };
                                let mem = d.total_memory_bytes.map(|b| format!(", {}", format_bytes(b))).unwrap_or_default();
                                view! {
                                    <option value=d.kind.as_str() selected=move || spec.get().device == choice>
                                        {format!("{}: {}{}", d.kind.as_str(), d.name, mem)}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                    {move || {
                        info.with_value(|i| {
                            (!i.devices.iter().any(|d| d.kind == DeviceKind::Cuda))
                                .then(|| view! {
                                    <p class="explain note" data-testid="no-gpu">
                                        "No GPU on this server: libtorch found no CUDA device, so every figure here is measured on the CPU. CUDA-only figures (reserved memory, device-level use) are absent, not zero."
                                    </p>
                                })
                        })
                    }}
                </div>

                <div class="control" class:hidden=hidden("eval")>
                    <span class="label" id="eval-label">"Module mode"</span>
                    <label class="toggle">
                        <input
                            type="checkbox"
                            data-testid="eval"
                            prop:disabled=locked("eval")
                            aria-labelledby="eval-label"
                            prop:checked=move || spec.get().eval
                            on:change=move |ev| {
                                let on = event_target_checked(&ev);
                                update(&|s| s.eval = on);
                            }
                        />
                        <code>{move || if spec.get().eval { "model.eval()" } else { "model.train()" }}</code>
                    </label>
                    <p class="explain" data-testid="eval-explain">{move || explain::eval_text(spec.get().eval, spec.get().model)}</p>
                </div>

                <fieldset class="control" class:hidden=hidden("grad") prop:disabled=locked("grad")>
                    <legend>"Grad mode"</legend>
                    {GradMode::ALL
                        .into_iter()
                        .map(|g| {
                            let label = match g {
                                GradMode::Enabled => "enabled (default)",
                                GradMode::NoGrad => "torch.no_grad()",
                                GradMode::InferenceMode => "torch.inference_mode()",
                            };
                            view! {
                                <label class="choice">
                                    <input
                                        type="radio"
                                        name="grad"
                                        value=g.as_str()
                                        data-testid=format!("grad-{}", g.as_str())
                                        prop:checked=move || spec.get().grad == g
                                        on:change=move |_| update(&|s| s.grad = g)
                                    />
                                    {label}
                                </label>
                            }
                        })
                        .collect_view()}
                    <p class="explain" data-testid="grad-explain">{move || explain::grad_text(spec.get().grad)}</p>
                </fieldset>

                <fieldset class="control" class:hidden=hidden("autocast") prop:disabled=locked("autocast")>
                    <legend>"Autocast"</legend>
                    {Autocast::ALL
                        .into_iter()
                        .map(|a| {
                            let support = move || info.with_value(|i| autocast_support(i, &spec.get(), a));
                            view! {
                                <label class="choice" title=move || support().1>
                                    <input
                                        type="radio"
                                        name="autocast"
                                        value=a.as_str()
                                        data-testid=format!("autocast-{}", a.as_str())
                                        prop:checked=move || spec.get().autocast == a
                                        prop:disabled=move || !support().0
                                        on:change=move |_| update(&|s| s.autocast = a)
                                    />
                                    {a.as_str()}
                                    {move || (!support().1.is_empty()).then(|| view! { <span class="warn" aria-hidden="true">" ⚠"</span> })}
                                </label>
                            }
                        })
                        .collect_view()}
                    <p class="explain">{move || explain::autocast_text(spec.get().autocast)}</p>
                    <p class="explain note">
                        {move || {
                            let s = spec.get();
                            if s.autocast == Autocast::Off { String::new() } else { info.with_value(|i| autocast_support(i, &s, s.autocast).1) }
                        }}
                    </p>
                </fieldset>

                <fieldset class="control plain" class:hidden=hidden("batch") prop:disabled=locked("batch")>
                    <label for="batch">"Batch size"</label>
                    <div class="batch">
                        <input
                            type="range"
                            aria-label="Batch size (powers of two)"
                            min="0"
                            max=move || stops.with_value(|s| s.len().saturating_sub(1))
                            step="1"
                            prop:value=move || {
                                let b = spec.get().batch;
                                stops.with_value(|s| s.iter().position(|x| *x >= b).unwrap_or(s.len() - 1))
                            }
                            on:input=move |ev| {
                                if let Ok(i) = event_target_value(&ev).parse::<usize>() {
                                    if let Some(b) = stops.with_value(|s| s.get(i).copied()) {
                                        batch_error.set(None);
                                        update(&|s| s.batch = b);
                                    }
                                }
                            }
                        />
                        <input
                            id="batch"
                            type="text"
                            inputmode="numeric"
                            data-testid="batch"
                            aria-describedby="batch-error"
                            prop:value=move || batch_text.get()
                            on:change=move |ev| {
                                let text = event_target_value(&ev);
                                batch_text.set(text.clone());
                                match parse_batch(&text, &limits) {
                                    Ok(b) => {
                                        batch_error.set(None);
                                        update(&|s| s.batch = b);
                                    }
                                    Err(e) => batch_error.set(Some(e)),
                                }
                            }
                        />
                    </div>
                    <p id="batch-error" class="error" role="alert" data-testid="batch-error">{move || batch_error.get()}</p>
                    <p class="explain">{explain::batch_text()}</p>
                </fieldset>

                <details class="control" class:hidden=hidden("advanced")>
                    <summary>"Advanced: iterations"</summary>
                    <NumberSetting
                        label="Warm-up iterations (not in the statistics) "
                        testid="warmup"
                        min=0
                        max=max_warmup
                        value=Signal::derive(move || spec.get().warmup)
                        on_set=Callback::new(move |w: u32| update(&|s| s.warmup = w))
                    />
                    <NumberSetting
                        label="Timed iterations "
                        testid="iters"
                        min=1
                        max=max_iters
                        value=Signal::derive(move || spec.get().iters)
                        on_set=Callback::new(move |n: u32| update(&|s| s.iters = n))
                    />
                </details>

                {auth_required.then(|| view! { <TokenField /> })}
                <div class="actions">
                    <button class="primary" data-testid="run" on:click=on_run prop:disabled=move || busy.get()>
                        "Run"
                    </button>
                    <button
                        data-testid="compare-all"
                        class:hidden=hidden("compare")
                        on:click=on_compare
                        prop:disabled=move || busy.get() || comparing.get()
                    >
                        "Compare all modes"
                    </button>
                    {(!embed).then(|| view! {
                        <EmbedSnippet
                            path=Signal::derive(move || format!("/embed/lab?{}", query_from_spec(&spec.get())))
                            title="Gradless: PyTorch inference settings, measured live"
                        />
                    })}
                </div>
            </section>

            <section class="results" aria-label="Results">
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
        </div>
    }
}

/// A whole-number setting, clamped to `min..=max` before it reaches the URL.
#[component]
fn NumberSetting(
    label: &'static str,
    testid: &'static str,
    min: u32,
    max: u32,
    value: Signal<u32>,
    on_set: Callback<u32>,
) -> impl IntoView {
    view! {
        <label>
            {label}
            <input
                type="number"
                min=min
                max=max
                data-testid=testid
                prop:value=move || value.get()
                on:change=move |ev| {
                    if let Ok(n) = event_target_value(&ev).parse::<u32>() {
                        on_set.run(n.clamp(min, max));
                    }
                }
            />
        </label>
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

/// The finished run's figures, with where they come from.
#[component]
fn Summary(view_state: RwSignal<RunView>) -> impl IntoView {
    move || view_state.with(|v| v.report.as_ref().map(summary_table))
}

/// The access token for a server that asks for one, kept in this browser.
#[component]
pub fn TokenField() -> impl IntoView {
    let initial = {
        #[cfg(feature = "hydrate")]
        {
            crate::client::saved_token().unwrap_or_default()
        }
        #[cfg(not(feature = "hydrate"))]
        {
            String::new()
        }
    };
    view! {
        <div class="control">
            <label for="token">"Access token"</label>
            <input
                id="token"
                type="password"
                autocomplete="off"
                data-testid="token"
                prop:value=initial
                on:change=move |ev| {
                    let _t = event_target_value(&ev);
                    #[cfg(feature = "hydrate")]
                    crate::client::save_token(&_t);
                }
            />
            <p class="explain">"This server asks for a token to start runs (reading results needs none). It stays in this browser."</p>
        </div>
    }
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

type History = RwSignal<Vec<(String, Report)>>;

/// Starts one run from the browser and streams it into the page.
fn start_run(
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
fn start_sequence(
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
