//! `/runs/{id}` and `/embed/runs/{id}`: one recorded run or experiment, exactly as it was
//! measured, with its exports, permalink, embed snippet and a way to compare it.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;
use protocol::{python_snippet, Record, RecordBody, RecordStatus, Report, RunSpec, Unfinished};

use super::{load, Loaded, RECORDS_ELEMENT};
use crate::charts;
use crate::settings::query_from_spec;
use crate::static_page::chart_data;
use crate::widgets::{provenance, summary_table, RecordActions};

/// `/runs/{id}` and `/embed/runs/{id}`: one recorded result, exactly as measured.
#[component]
pub fn RecordPage(#[prop(optional)] embed: bool) -> impl IntoView {
    let id = use_params_map()
        .with_untracked(|p| p.get("id"))
        .unwrap_or_default();
    let (state, json) = load(vec![id]);
    // The record's JSON is for the hydrating app; a page drawn without it needs none.
    let json = (!crate::static_page::is_static())
        .then(|| view! { <script type="application/json" id=RECORDS_ELEMENT inner_html=json></script> });
    view! {
        {json}
        <div class="record" class:embedded=embed>
            {move || {
                state.with(|s| match s.as_ref().and_then(|v| v.first()) {
                    None => view! { <p class="status">"Loading the recorded result…"</p> }.into_any(),
                    Some(Loaded::Missing(m)) => view! { <p class="error" role="alert" data-testid="record-missing">{m.clone()}</p> }.into_any(),
                    Some(Loaded::Found(r)) => record_view(r, embed).into_any(),
                })
            }}
        </div>
    }
}

fn record_view(record: &Record, embed: bool) -> impl IntoView + use<> {
    let id = record.id.clone();
    match &record.body {
        RecordBody::Run(report) => {
            let report = (**report).clone();
            let is_generation = report.generation.is_some();
            let (again_href, again_text) = again(&report.spec);
            let heading = format!(
                "{} · {}",
                report.spec.model.display_name(),
                report.spec.label()
            );
            view! {
                <section class="panel record-head">
                    <h1 data-testid="record-title">{heading}</h1>
                    <p class="provenance" data-testid="provenance">{provenance(&report.env)}</p>
                    <p class="explain">
                        "A recorded result: the figures below are what Gradless measured then, on that hardware. Nothing is re-run when this page opens."
                        {(!embed).then(|| view! { " " <a href=again_href rel="external" data-testid="run-again">{again_text}</a> })}
                    </p>
                </section>
                <RecordedCharts report=report.clone() />
                <section class="panel">{summary_table(&report)}</section>
                <RecordActions id=id.clone() run=true charts=if is_generation {
                    vec![("gen-latency-chart", "latency per step"), ("gen-memory-chart", "memory per step"), ("gen-prefill-chart", "prefill and decode")]
                } else {
                    vec![("latency-chart", "latency"), ("memory-chart", "memory")]
                } />
                {(!embed).then(|| view! {
                    <CompareWith id=id.clone() />
                    <section class="panel snippet">
                        <h2>"The same in PyTorch"</h2>
                        <pre tabindex="0"><code>{if is_generation { protocol::python_generate_loop(&report.spec) } else { python_snippet(&report.spec) }}</code></pre>
                    </section>
                })}
            }
            .into_any()
        }
        RecordBody::Pitfall(report) => {
            let report = (**report).clone();
            let title = crate::cards::title(&report.id).unwrap_or_else(|| report.id.clone());
            let chart_id = "pitfall-chart".to_string();
            #[cfg(feature = "hydrate")]
            {
                let r = report.clone();
                let chart_id = chart_id.clone();
                Effect::new(move |_| {
                    if let Some(chart) = crate::charts::pitfall_chart(&r) {
                        crate::charts::render(chart_id.clone(), chart)
                    }
                });
            }
            let has_chart = crate::charts::pitfall_chart(&report).is_some();
            view! {
                <section class="panel record-head">
                    <h1 data-testid="record-title">{title}</h1>
                    <p class="claim">{report.claim.clone()}</p>
                    <p class="provenance" data-testid="provenance">{provenance(&report.env)}</p>
                    {(!embed).then(|| view! { <p class="explain"><a href=format!("/pitfalls#{}", report.id) rel="external">"Run this experiment again"</a></p> })}
                </section>
                <section class="panel">
                    {crate::widgets::outcome_view(&report)}
                    <div id=chart_id class="chart" class:hidden=!has_chart></div>
                    {chart_data("pitfall-chart", || charts::pitfall_chart(&report))}
                </section>
                <RecordActions id=id.clone() run=false charts=if has_chart { vec![("pitfall-chart", "chart")] } else { vec![] } />
            }
            .into_any()
        }
        RecordBody::Unfinished(u) => unfinished_view(&id, u, embed).into_any(),
    }
}

/// A run or experiment that has no report: interrupted (its server stopped mid-way),
/// failed (the message says why and what it measured first), or still going on another
/// process. Says so first, then what was asked for.
fn unfinished_view(id: &str, u: &Unfinished, embed: bool) -> impl IntoView + use<> {
    let heading = match (&u.spec, &u.pitfall) {
        (Some(spec), _) => format!("{} · {}", spec.model.display_name(), spec.label()),
        (None, Some(card)) => crate::cards::title(card).unwrap_or_else(|| card.clone()),
        (None, None) => id.to_string(),
    };
    let status = match u.status {
        RecordStatus::Interrupted => "Interrupted",
        RecordStatus::Failed => "Failed",
        _ => "Not finished",
    };
    let kept = match &u.measured {
        Some(_) => "No report: it did not run to the end. What it measured before it failed is kept in its record (",
        None => "No figures were kept: nothing here was measured to the end. ",
    };
    let json = format!("/api/records/{id}/export/json");
    let again = match (&u.spec, &u.pitfall) {
        (Some(spec), _) => Some(again(spec)),
        (None, Some(card)) => Some((format!("/pitfalls#{card}"), "Run this experiment again")),
        (None, None) => None,
    };
    let snippet = u.spec.as_ref().map(python_snippet);
    view! {
        <section class="panel record-head">
            <h1 data-testid="record-title">{heading}</h1>
            <p class="error" role="status" data-testid="record-status" data-status=u.status.as_str()>
                {
                    let (word, rest) = super::list::status_and_rest(status, &u.message);
                    view! { <strong>{word}</strong>{rest} }
                }
            </p>
            <p class="explain">
                {kept}
                {u.measured.is_some().then(|| view! { <a href=json rel="external">"JSON"</a>"). " })}
                {(!embed).then(|| again.map(|(href, text)| view! { <a href=href rel="external">{text}</a> }))}
            </p>
        </section>
        {(!embed).then(|| snippet.map(|code| view! {
            <section class="panel snippet">
                <h2>"The same in PyTorch"</h2>
                <pre tabindex="0"><code>{code}</code></pre>
            </section>
        }))}
    }
}

/// Where a recorded run's settings run again, and the link's words: a generation on the
/// Generate page (its prompt, new tokens and cache in the address), a forward run in the Lab.
pub fn again(spec: &RunSpec) -> (String, &'static str) {
    match spec.generate {
        Some(_) => (
            format!("/generate?{}", crate::gen_settings::query_from_spec(spec)),
            "Run this generation again on the Generate page",
        ),
        None => (format!("/?{}", query_from_spec(spec)), "Run these settings again in the Lab"),
    }
}

/// The charts of a recorded run, by the element each is drawn in: a generation's per-step
/// charts (its prefill is a step, not a warm-up; drawn as the Generate page draws them),
/// or a forward run's latency and memory per iteration.
fn recorded_charts(r: &Report) -> Vec<(&'static str, charts::ChartOption)> {
    if let Some(g) = &r.generation {
        // One run: the heading names it; a short series name fits under the bar.
        let name = "this generation".to_string();
        let runs = [charts::GenRun { name: &name, steps: &g.steps, baseline: Some(r.memory.baseline_bytes) }];
        return vec![
            ("gen-latency-chart", charts::step_latency_chart(&runs)),
            ("gen-memory-chart", charts::step_memory_chart(&runs)),
            ("gen-prefill-chart", charts::prefill_decode_chart(&runs)),
        ];
    }
    vec![
        ("latency-chart", charts::latency_chart(&r.warmup, &r.samples, Some(r.latency_ms.p50), Some(r.latency_ms.p95))),
        ("memory-chart", charts::memory_chart(&r.warmup, &r.samples, Some(r.memory.baseline_bytes))),
    ]
}

/// The elements [`recorded_charts`] draws in; drawn by the app once hydrated, or by
/// `record-embed.js` from the options written beside them on a page that does not hydrate.
#[component]
fn RecordedCharts(report: Report) -> impl IntoView {
    #[cfg(feature = "hydrate")]
    {
        let r = report.clone();
        Effect::new(move |_| {
            for (id, chart) in recorded_charts(&r) {
                charts::render(id, chart);
            }
        });
    }
    let options = crate::static_page::is_static()
        .then(|| recorded_charts(&report))
        .unwrap_or_default();
    // A generation's third chart (prefill against decode, two bars) is drawn smaller.
    let figure = |id: &'static str, small: bool| {
        let chart = options.iter().find(|(i, _)| *i == id).map(|(_, c)| c.clone());
        view! {
            <figure>
                <div id=id class=if small { "chart chart-small" } else { "chart" } data-testid=id></div>
                {chart_data(id, || chart)}
            </figure>
        }
    };
    if report.generation.is_some() {
        view! {
            <div class="charts">
                {figure("gen-latency-chart", false)}
                {figure("gen-memory-chart", false)}
                {figure("gen-prefill-chart", true)}
            </div>
        }
        .into_any()
    } else {
        view! {
            <div class="charts">{figure("latency-chart", false)}{figure("memory-chart", false)}</div>
        }
        .into_any()
    }
}

/// Paste another permalink to see both side by side.
#[component]
fn CompareWith(id: String) -> impl IntoView {
    let error = RwSignal::new(None::<String>);
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        #[cfg(feature = "hydrate")]
        {
            use wasm_bindgen::JsCast;
            let text = ev
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlFormElement>().ok())
                .and_then(|f| f.elements().named_item("other"))
                .and_then(|e| e.dyn_into::<web_sys::HtmlInputElement>().ok())
                .map(|i| i.value())
                .unwrap_or_default();
            match super::record_id_from(&text) {
                Some(other) => {
                    let _ = web_sys::window().map(|w| {
                        w.location()
                            .set_href(&format!("/compare?runs={},{other}", id))
                    });
                }
                None => error.set(Some(format!(
                    "“{}” is not a permalink or run id (16 hex digits).",
                    text.trim()
                ))),
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &id;
    };
    view! {
        <section class="panel">
            <form class="compare-with" on:submit=on_submit>
                <label>"Compare with another run: "<input name="other" type="text" placeholder="permalink or id" data-testid="compare-with" /></label>
                <button type="submit">"Side by side"</button>
            </form>
            <p class="error" role="alert">{move || error.get()}</p>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_runs_again_on_the_generate_page_with_its_settings() {
        let spec = crate::gen_settings::spec_from_query(&[], &protocol::Catalog::built_in(), |k| match k {
            "prompt" => Some("24".into()),
            "new_tokens" => Some("17".into()),
            "cache" => Some("static".into()),
            _ => None,
        });
        let (href, text) = again(&spec);
        assert!(href.starts_with("/generate?"), "{href}");
        assert!(text.contains("Generate"));
        // The address brings back what was generated: the prompt, the new tokens, the cache.
        let back = crate::gen_settings::spec_from_query(&[], &protocol::Catalog::built_in(), |k| {
            href.split_once('?').unwrap().1.split('&').find_map(|kv| kv.split_once('=').filter(|(key, _)| *key == k).map(|(_, v)| v.to_string()))
        });
        assert_eq!(back.generate, spec.generate);
        assert_eq!(back.resolved_input_size(), 24);
        // A forward run goes back to the Lab.
        let (href, text) = again(&RunSpec::default());
        assert!(href.starts_with("/?") && text.contains("Lab"), "{href}");
    }
}
