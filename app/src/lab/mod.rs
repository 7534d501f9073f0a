//! The Lab page: controls for every setting with its explanation beside it, the Python
//! snippet, and the live charts of the run. The settings live in the URL (see
//! [`crate::settings`]); the run's state is folded from its streamed events
//! ([`crate::run_view`]).

use leptos::prelude::*;
use leptos_router::hooks::{use_location, use_navigate, use_query_map};
use leptos_router::NavigateOptions;
use protocol::{Autocast, DeviceChoice, DeviceKind, RunSpec, ServerInfo};

use crate::embed::EmbedOptions;
use crate::settings::{ignored_in_query, query_from_spec, resolve_device, spec_from_query};
use crate::widgets::{EmbedSnippet, TokenField};

pub mod advanced;
pub mod controls;
pub mod guide;
pub mod inside;
pub mod predict;
pub mod results;
pub mod run;

use controls::{
    AdvancedControl, AutocastControl, BatchControl, DeviceControl, GradControl, ModeControl,
    ModelControl, Validity,
};
use guide::{Guide, GuidePanel, Happened};
use results::{Results, RunProgress};
use run::{start_run, start_sequence, Runs};

/// The device `auto` resolves to on this server: the GPU when there is one.
fn resolved_device(info: &ServerInfo, choice: DeviceChoice) -> DeviceKind {
    resolve_device(&info.devices, choice)
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

/// What every control of the Lab needs: the settings (from the URL), a way to change them,
/// the embedding page's hide/lock options and the server's facts.
#[derive(Clone, Copy)]
pub struct LabCtx {
    pub spec: Memo<RunSpec>,
    /// The setting changed since the run on the charts, while its prediction is asked: its
    /// explanation stays folded until the run, since it would answer the question.
    pub awaiting: RwSignal<Option<String>>,
    set: Callback<RunSpec>,
    opts: StoredValue<EmbedOptions>,
    pub info: StoredValue<ServerInfo>,
}

impl LabCtx {
    /// Changes the settings: every change is a navigation (see [`LabPage`]).
    pub fn update(&self, f: &dyn Fn(&mut RunSpec)) {
        let mut s = self.spec.get_untracked();
        f(&mut s);
        // channels_last belongs to convolution models: another model drops it rather than
        // leave a setting that would refuse every run.
        if !s.model.is_conv() {
            s.advanced.memory_format = protocol::MemoryFormat::Contiguous;
        }
        self.set.run(s);
    }

    /// Whether the embedding page removed control `c`.
    pub fn hidden(&self, c: &str) -> bool {
        self.opts.with_value(|o| o.hides(c))
    }

    /// Whether the embedding page fixed control `c`.
    pub fn locked(&self, c: &str) -> bool {
        self.opts.with_value(|o| o.locks(c))
    }
}

/// The Lab: at `/`, and at `/embed/lab` for doc pages, where `hide=` and `lock=` in the
/// address remove or fix controls (see [`crate::embed`]).
#[component]
pub fn LabPage(#[prop(optional)] embed: bool) -> impl IntoView {
    let info = expect_context::<ServerInfo>();
    let auth_required = info.auth_required;
    let info = StoredValue::new(info);
    let catalog = StoredValue::new(crate::catalog());
    let query = use_query_map();
    let spec = Memo::new(move |_| {
        info.with_value(|i| query.with(|q| spec_from_query(&i.devices, &catalog.get_value(), |k| q.get(k))))
    });
    let opts = StoredValue::new(if embed {
        query.with_untracked(|q| EmbedOptions::from_query(|k| q.get(k)))
    } else {
        EmbedOptions::default()
    });
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
    let lab = LabCtx {
        spec,
        awaiting: RwSignal::new(None),
        set: set_spec,
        opts,
        info,
    };
    let hidden = move |c: &str| lab.hidden(c);

    let runs = Runs::new();
    let memory_scale = RwSignal::new(crate::charts::MemoryScale::default());
    let Runs {
        view_state,
        history,
        comparing,
        ..
    } = runs;
    let busy = Memo::new(move |_| view_state.with(|v| v.phase.busy()));

    let validity = Validity::new(spec.get_untracked().batch);
    let batch_state = validity.batch;
    let (batch_text, batch_error) = (batch_state.text, batch_state.error);
    // Keep the typed text in step when the batch changes from elsewhere (slider, URL).
    Effect::new(move |_| {
        let b = spec.get().batch;
        if batch_error.get_untracked().is_none() {
            batch_text.set(b.to_string());
        }
    });

    // The finished run on the charts: what a change of one setting is predicted against.
    let shown = Signal::derive(move || {
        view_state.with(|v| v.report.clone().filter(|_| v.phase == crate::run_view::Phase::Done))
    });
    // Client-side only, like the prediction box: the server renders no change to predict.
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let now = spec.get();
        // While the run that answers it is under way, the explanation stays folded: it
        // opens with the result, not with the press of Run.
        if busy.get() {
            return;
        }
        let changed = shown.with(|r| r.as_ref().and_then(|r| predict::one_change(&now, &r.spec, false)).map(|c| c.0));
        if lab.awaiting.get_untracked() != changed {
            lab.awaiting.set(changed);
        }
    });
    let prediction = predict::BoxArgs {
        spec,
        shown,
        pending: RwSignal::new(None),
        locked: Signal::derive(move || busy.get()),
        loaded: RwSignal::new(false),
        generate: false,
    };
    let run_one = move |s: RunSpec| {
        // The answers in the prediction box, if it asks, go with this run.
        prediction.pending.set(predict::pending(prediction, &s));
        start_run(s, runs)
    };
    let can_start = move || !busy.get_untracked() && validity.problem_untracked().is_none();
    // The buttons stay focusable while a run goes on (a disabled button drops keyboard
    // focus to the page body): a click then does nothing, and aria-disabled says so.
    let on_run = move |_| {
        if can_start() {
            run_one(spec.get_untracked());
        }
    };
    let compare_all = move || {
        if !can_start() || comparing.get_untracked() {
            return;
        }
        let base = spec.get_untracked();
        let rows: Vec<RunSpec> = base
            .classic_modes()
            .into_iter()
            .filter(|s| info.with_value(|i| autocast_support(i, s, s.autocast).0))
            .collect();
        prediction.pending.set(None);
        start_sequence(rows, runs);
    };
    let on_compare = move |_| compare_all();
    // The run on the charts once it is recorded (finished here, or the first view's): its
    // picture is the Lab's in the embed snippets.
    let picture = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        let done = view_state.with(|v| v.phase == crate::run_view::Phase::Done);
        picture.set(runs.current_id.get().filter(|_| done).map(|id| format!("/runs/{id}.png")));
    });

    // The guided start (not in embeds): progress follows what the reader does, and a
    // step's button does the step.
    let guide = RwSignal::new(Guide::default());
    let on_step = Callback::new(move |i: usize| {
        if i == 2 {
            // The grad modes the step teaches, ending on the pair its conclusion is about.
            if can_start() && !comparing.get_untracked() {
                start_sequence(Guide::comparison_rows(&spec.get_untracked()), runs);
            }
        } else if can_start() {
            let next = Guide::spec_for(i, &spec.get_untracked());
            lab.update(&|s| *s = next.clone());
            run_one(next);
        }
    });
    Effect::new(move |prev: Option<(usize, bool)>| {
        let len = history.with(|h| h.len());
        let cmp = comparing.get();
        if let Some((prev_len, prev_cmp)) = prev {
            let happened = if prev_cmp && !cmp {
                Some(Happened::ComparisonFinished)
            } else if len > prev_len && !cmp && !runs.automatic.get_untracked() {
                history
                    .with_untracked(|h| h.last().map(|(_, r)| Happened::RunFinished(r.spec.grad)))
            } else {
                None
            };
            if let Some(what) = happened {
                guide.update(|g| *g = g.after(what));
            }
        }
        (len, cmp)
    });
    #[cfg(feature = "hydrate")]
    if !embed {
        let storage = || web_sys::window().and_then(|w| w.local_storage().ok().flatten());
        // Read once the page is live; saved on every change after that.
        Effect::new(move |read: Option<bool>| {
            if read.is_none() {
                if let Some(saved) =
                    storage().and_then(|s| s.get_item(guide::GUIDE_KEY).ok().flatten())
                {
                    guide.set(Guide::parse(&saved));
                }
            } else if let Some(s) = storage() {
                let _ = s.set_item(
                    guide::GUIDE_KEY,
                    &serde_json::to_string(&guide.get()).unwrap_or_default(),
                );
            }
            guide.track();
            true
        });
    }
    let guide_step = move || {
        (!embed)
            .then(|| guide.with(|g| g.current()))
            .flatten()
            .map(|c| (c + 1).to_string())
    };

    // `&run=1` in a shared link starts the run once the page is live. The first view of a
    // bare address is never empty: the newest recorded run of the default settings, or, on
    // a fresh server, the default run once, said so.
    let bare = location
        .search
        .get_untracked()
        .trim_start_matches('?')
        .is_empty();
    // That first view is a recorded run, shown as the server's pictures until the visitor
    // acts (charts::defer_until_wanted); leaving the page lets its charts draw.
    #[cfg(feature = "hydrate")]
    if bare && !embed && crate::charts::defer_until_wanted() {
        on_cleanup(crate::charts::want_echarts);
    }
    Effect::new(move |done: Option<bool>| {
        if done == Some(true) {
            return true;
        }
        if query.with_untracked(|q| q.get("run").as_deref() == Some("1")) {
            run_one(spec.get_untracked());
        } else if bare && !embed {
            #[cfg(feature = "hydrate")]
            {
                let default = spec.get_untracked();
                let device = info.with_value(|i| resolved_device(i, default.device));
                // A fleet front with no live worker has no device: show a recorded run if
                // there is one, but start none (it would only be refused).
                let can_run = info.with_value(|i| !i.devices.is_empty());
                leptos::task::spawn_local(first_view(default, device, runs, can_run));
            }
        }
        true
    });

    #[cfg(feature = "hydrate")]
    {
        use crate::charts;
        Effect::new(move |_| {
            let scale = memory_scale.get();
            runs.previous.with(|previous| {
                view_state.with(|v| {
                    let r = v.report.as_ref();
                    let readings = r
                        .zip(previous.as_ref())
                        .map(|(r, p)| crate::explain::chart_readings(r, p));
                    let overlay = previous.as_ref().map(charts::Previous::of);
                    charts::render(
                        "latency-chart",
                        charts::latency_chart_with(
                            &v.warmup,
                            &v.samples,
                            r.map(|r| r.latency_ms.p50),
                            r.map(|r| r.latency_ms.p95),
                            overlay,
                            readings.as_ref().map(|(_, l)| l.as_str()),
                        ),
                    );
                    charts::render(
                        "memory-chart",
                        charts::memory_chart_with(
                            &v.warmup,
                            &v.samples,
                            v.baseline_bytes,
                            scale,
                            overlay,
                            readings.as_ref().map(|(m, _)| m.as_str()),
                        ),
                    );
                })
            })
        });
        Effect::new(move |_| {
            let reports: Vec<protocol::Report> =
                history.with(|h| h.iter().map(|(_, r)| r.clone()).collect());
            charts::render(
                "compare-chart",
                charts::comparison_chart("Runs on this page", &reports),
            )
        });
    }

    view! {
        {(!embed).then(|| view! { <GuidePanel guide on_step /> })}
        <div class="lab" data-guide-step=guide_step>
            <section class="controls" id="settings" aria-label="Settings">
                {move || {
                    let ignored = info.with_value(|i| query.with(|q| ignored_in_query(&i.devices, &catalog.get_value(), |k| q.get(k))));
                    (!ignored.is_empty()).then(|| view! {
                        <p class="explain note" role="status" data-testid="ignored">
                            {format!("From the link: {}.", ignored.join("; "))}
                        </p>
                    })
                }}
                {(!opts.with_value(|o| o.lock.is_empty())).then(|| view! {
                    <p class="explain note" data-testid="locked-note">"Greyed-out settings are fixed by the page that embeds this."</p>
                })}
                <ModelControl lab />
                <DeviceControl lab />
                <ModeControl lab />
                <GradControl lab />
                <AutocastControl lab />
                <BatchControl lab batch_state />
                <AdvancedControl lab validity />

                {auth_required.then(|| view! { <TokenField /> })}
                {(!embed).then(|| view! { <predict::LazyPrediction args=prediction /> })}
                <div class="actions">
                    <button
                        class="primary"
                        data-testid="run"
                        data-guide="1 2"
                        on:click=on_run
                        aria-disabled=move || busy.get().to_string()
                        aria-describedby="run-blocked"
                        prop:disabled=move || validity.problem().is_some()
                    >
                        {move || if busy.get() { "Running…" } else { "Run" }}
                    </button>
                    <button
                        data-testid="compare-all"
                        data-guide="3"
                        class:hidden=hidden("compare")
                        on:click=on_compare
                        aria-disabled=move || (busy.get() || comparing.get()).to_string()
                        prop:disabled=move || validity.problem().is_some()
                    >
                        "Compare all modes"
                    </button>
                    <RunProgress view_state />
                    <crate::fleet::FleetRun spec=Signal::derive(move || spec.get()) />
                    <p id="run-blocked" class="error" data-testid="run-blocked">
                        {move || validity.problem().map(|p| format!("Fix this to run: {p}"))}
                    </p>
                    {(!embed).then(|| view! {
                        <EmbedSnippet
                            path=Signal::derive(move || format!("/embed/lab?{}", query_from_spec(&spec.get())))
                            title="Gradless: PyTorch inference settings, measured live"
                            image=picture
                        />
                    })}
                    {(!embed).then(|| view! {
                        <button class="link" data-testid="guide-show" class:hidden=move || !guide.with(|g| g.dismissed) on:click=move |_| guide.update(|g| g.dismissed = false)>
                            "Show the guided start"
                        </button>
                    })}
                </div>
            </section>

            <Results lab runs embed bare memory_scale />
        </div>
        {(!embed).then(|| view! {
            // On a phone the charts come first and the settings below: Run in a bar at the
            // screen's foot (CSS shows it under 900 px), the same button's action.
            <div class="run-bar" data-testid="run-bar">
                <button class="primary" data-testid="run-bar-run" on:click=on_run
                    aria-disabled=move || busy.get().to_string() prop:disabled=move || validity.problem().is_some()>
                    {move || if busy.get() { "Running…" } else { "Run" }}
                </button>
                <span class="run-bar-state">{move || spec.with(|s| format!("{} · {}", s.model.display_name(), s.label()))}</span>
                <a href="#settings">"Settings"</a>
            </div>
        })}
    }
}

/// The first view of a bare address: the newest recorded run of the default settings on
/// this server's device, labelled as recorded; on a fresh server, the default run once
/// (when it `can_run`).
#[cfg(feature = "hydrate")]
async fn first_view(default: RunSpec, device: DeviceKind, runs: Runs, can_run: bool) {
    use protocol::{Record, RecordSummary};
    let label = guide::summary_label(&default);
    let listed = crate::client::get_json::<Vec<RecordSummary>>("/api/records?kind=run&limit=200")
        .await
        .unwrap_or_default();
    // The label narrows the list; the record itself must match every setting and the device.
    for summary in listed.iter().filter(|s| s.label == label).take(5) {
        let url = format!("/api/records/{}", summary.id);
        if let Ok(record) = crate::client::get_json::<Record>(&url).await {
            if let Some(report) = record
                .run()
                .filter(|r| guide::is_run_of(r, &default, device))
            {
                // The reader may have started a run meanwhile: theirs wins.
                if runs
                    .view_state
                    .with_untracked(|v| v.report.is_none() && !v.phase.busy())
                {
                    let note = guide::recorded_label(report);
                    runs.show(Some(record.id.clone()), report.clone(), note);
                    crate::charts::show_pictures(
                        &record.id,
                        &[("latency-chart", "latency"), ("memory-chart", "memory")],
                    );
                }
                return;
            }
        }
    }
    // Nothing recorded to show as pictures: the charts draw (empty, or the run below).
    crate::charts::want_echarts();
    if can_run
        && runs
            .view_state
            .with_untracked(|v| v.report.is_none() && !v.phase.busy())
    {
        run::start_automatic_run(
            default,
            runs,
            "First visit on this server: nothing is recorded yet, so the page runs the default settings once to fill the charts.".into(),
        );
    }
}
