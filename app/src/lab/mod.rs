//! The Lab page: controls for every setting with its explanation beside it, the Python
//! snippet, and the live charts of the run. The settings live in the URL (see
//! [`crate::settings`]); the run's state is folded from its streamed events
//! ([`crate::run_view`]).

use leptos::prelude::*;
use leptos_router::hooks::{use_location, use_navigate, use_query_map};
use leptos_router::NavigateOptions;
use protocol::{Autocast, DeviceChoice, DeviceKind, Report, RunSpec, ServerInfo};

use crate::embed::EmbedOptions;
use crate::run_view::RunView;
use crate::settings::{ignored_in_query, query_from_spec, spec_from_query};
use crate::widgets::{EmbedSnippet, TokenField};

pub mod controls;
pub mod results;
pub mod run;

use controls::{
    AdvancedControl, AutocastControl, BatchControl, DeviceControl, GradControl, ModeControl,
    ModelControl, Validity,
};
use results::{Results, RunProgress};
use run::{start_run, start_sequence, History};

/// The device `auto` resolves to on this server: the GPU when there is one.
fn resolved_device(info: &ServerInfo, choice: DeviceChoice) -> DeviceKind {
    let has_cuda = info.devices.iter().any(|d| d.kind == DeviceKind::Cuda);
    // A CUDA choice on a server without CUDA keeps naming CUDA: the autocast note then
    // says there is no such device.
    choice.resolve(has_cuda).unwrap_or(DeviceKind::Cuda)
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
    set: Callback<RunSpec>,
    opts: StoredValue<EmbedOptions>,
    pub info: StoredValue<ServerInfo>,
}

impl LabCtx {
    /// Changes the settings: every change is a navigation (see [`LabPage`]).
    pub fn update(&self, f: &dyn Fn(&mut RunSpec)) {
        let mut s = self.spec.get_untracked();
        f(&mut s);
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
    let query = use_query_map();
    let spec = Memo::new(move |_| query.with(|q| spec_from_query(|k| q.get(k))));
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
        set: set_spec,
        opts,
        info,
    };
    let hidden = move |c: &str| lab.hidden(c);

    let view_state = RwSignal::new(RunView::default());
    // Every finished run on this page, with its permanent id.
    let history: History = RwSignal::new(Vec::<(String, Report)>::new());
    let current_id = RwSignal::new(None::<String>);
    let busy = Memo::new(move |_| view_state.with(|v| v.phase.busy()));
    let comparing = RwSignal::new(false);

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

    let run_one = move |s: RunSpec| start_run(s, view_state, history, current_id);
    // The buttons stay focusable while a run goes on (a disabled button drops keyboard
    // focus to the page body): a click then does nothing, and aria-disabled says so.
    let on_run = move |_| {
        if busy.get_untracked() || validity.problem_untracked().is_some() {
            return;
        }
        run_one(spec.get_untracked());
    };
    let on_compare = move |_| {
        if busy.get_untracked()
            || comparing.get_untracked()
            || validity.problem_untracked().is_some()
        {
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

    view! {
        <div class="lab">
            <section class="controls" aria-label="Settings">
                {move || {
                    let ignored = query.with(|q| ignored_in_query(|k| q.get(k)));
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
                <div class="actions">
                    <button
                        class="primary"
                        data-testid="run"
                        on:click=on_run
                        aria-disabled=move || busy.get().to_string()
                        aria-describedby="run-blocked"
                        prop:disabled=move || validity.problem().is_some()
                    >
                        {move || if busy.get() { "Running…" } else { "Run" }}
                    </button>
                    <button
                        data-testid="compare-all"
                        class:hidden=hidden("compare")
                        on:click=on_compare
                        aria-disabled=move || (busy.get() || comparing.get()).to_string()
                        prop:disabled=move || validity.problem().is_some()
                    >
                        "Compare all modes"
                    </button>
                    <RunProgress view_state />
                    <p id="run-blocked" class="error" data-testid="run-blocked">
                        {move || validity.problem().map(|p| format!("Fix this to run: {p}"))}
                    </p>
                    {(!embed).then(|| view! {
                        <EmbedSnippet
                            path=Signal::derive(move || format!("/embed/lab?{}", query_from_spec(&spec.get())))
                            title="Gradless: PyTorch inference settings, measured live"
                        />
                    })}
                </div>
            </section>

            <Results lab view_state history current_id embed />
        </div>
    }
}
