//! Recorded results in the page: the permalink page of one run or experiment (`/runs/{id}`,
//! and `/embed/runs/{id}` for docs), runs side by side from their permalinks
//! (`/compare?runs=a,b`), and the actions every result offers: exports (JSON, CSV, PNG,
//! Python script), its permalink and an embed snippet.
//!
//! The server renders a recorded page with its figures in it (looked up through
//! [`RecordLookup`] in context) and embeds the same JSON for hydration; a page reached by
//! client-side navigation fetches it from `/api/records/{id}` instead.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};
use protocol::{
    format_bytes, python_snippet, Record, RecordBody, RecordSummary, Report, ServerInfo,
};
use serde::{Deserialize, Serialize};

use crate::settings::query_from_spec;

/// The `<script type="application/json">` carrying the records of the page.
const RECORDS_ELEMENT: &str = "gradless-records";

/// At most this many runs side by side.
pub const MAX_COMPARED: usize = 8;

/// How the server finds a recorded result while rendering (provided in context by it).
#[cfg(feature = "ssr")]
#[derive(Clone)]
pub struct RecordLookup(
    pub std::sync::Arc<dyn Fn(&str) -> Result<Option<Record>, String> + Send + Sync>,
);

/// How the server lists the newest recorded results while rendering `/runs`.
#[cfg(feature = "ssr")]
#[derive(Clone)]
pub struct RecordIndex(
    pub std::sync::Arc<dyn Fn(usize) -> Result<Vec<RecordSummary>, String> + Send + Sync>,
);

/// The `<script type="application/json">` carrying the `/runs` listing.
const INDEX_ELEMENT: &str = "gradless-index";

/// How many results `/runs` lists.
pub const INDEX_LIMIT: usize = 200;

/// One id's lookup, as the page shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Loaded {
    Found(Box<Record>),
    Missing(String),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Embedded {
    ids: Vec<String>,
    loaded: Vec<Loaded>,
}

fn missing(id: &str) -> Loaded {
    Loaded::Missing(format!(
        "No recorded run or experiment with id “{id}” on this server."
    ))
}

/// The records for `ids` (`None` while loading) and the JSON to embed for hydration.
fn load(ids: Vec<String>) -> (RwSignal<Option<Vec<Loaded>>>, String) {
    #[cfg(feature = "ssr")]
    {
        let lookup = use_context::<RecordLookup>();
        let loaded: Vec<Loaded> = ids
            .iter()
            .map(|id| match lookup.as_ref().map(|l| (l.0)(id)) {
                Some(Ok(Some(r))) => Loaded::Found(Box::new(r)),
                Some(Ok(None)) | None => missing(id),
                Some(Err(e)) => Loaded::Missing(format!("The run database could not be read: {e}")),
            })
            .collect();
        let json = crate::script_json(&Embedded {
            ids,
            loaded: loaded.clone(),
        });
        (RwSignal::new(Some(loaded)), json)
    }
    #[cfg(not(feature = "ssr"))]
    {
        #[cfg(feature = "hydrate")]
        {
            let text = crate::page_json(RECORDS_ELEMENT).unwrap_or_default();
            if let Ok(e) = serde_json::from_str::<Embedded>(&text) {
                if e.ids == ids {
                    return (RwSignal::new(Some(e.loaded)), text);
                }
            }
            // Reached without a server render: ask the API.
            let state = RwSignal::new(None);
            leptos::task::spawn_local(async move {
                let mut out = vec![];
                for id in &ids {
                    let url = format!("/api/records/{id}");
                    out.push(match crate::client::get_json::<Record>(&url).await {
                        Ok(r) => Loaded::Found(Box::new(r)),
                        Err(_) => missing(id),
                    });
                }
                state.set(Some(out));
            });
            (state, String::new())
        }
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = ids;
            (RwSignal::new(None), String::new())
        }
    }
}

/// The line that says where and when a result was measured.
pub fn provenance(env: &protocol::EnvStamp) -> String {
    let mut parts = vec![
        format!("{} ({})", env.device_name, env.device.as_str()),
        format!("libtorch {}", env.libtorch_version),
    ];
    if let Some(c) = &env.cuda_version {
        parts.push(format!("CUDA {c}"));
    }
    if let Some(d) = &env.driver_version {
        parts.push(format!("driver {d}"));
    }
    parts.push(format!(
        "{} CPU thread{}",
        env.threads,
        if env.threads == 1 { "" } else { "s" }
    ));
    parts.push(format!("Gradless {}", env.gradless_version));
    format!("Recorded {} on {}", env.measured_at, parts.join(" · "))
}

/// A record id from what a person pastes: the id itself or any permalink ending in it.
pub fn record_id_from(text: &str) -> Option<String> {
    let t = text.trim();
    let t = t
        .split(['?', '#'])
        .next()
        .unwrap_or(t)
        .trim_end_matches('/');
    let last = t.rsplit('/').next().unwrap_or(t).to_ascii_lowercase();
    protocol::is_record_id(&last).then_some(last)
}

/// `/runs/{id}` and `/embed/runs/{id}`: one recorded result, exactly as measured.
#[component]
pub fn RecordPage(#[prop(optional)] embed: bool) -> impl IntoView {
    let id = use_params_map()
        .with_untracked(|p| p.get("id"))
        .unwrap_or_default();
    let (state, json) = load(vec![id]);
    view! {
        <script type="application/json" id=RECORDS_ELEMENT inner_html=json></script>
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
            let lab_link = format!("/?{}", query_from_spec(&report.spec));
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
                        {(!embed).then(|| view! { " " <a href=lab_link rel="external">"Run these settings again in the Lab"</a> })}
                    </p>
                </section>
                <RecordedCharts report=report.clone() />
                <section class="panel">{summary_table(&report)}</section>
                <RecordActions id=id.clone() run=true charts=vec![("latency-chart", "latency"), ("memory-chart", "memory")] />
                {(!embed).then(|| view! {
                    <CompareWith id=id.clone() />
                    <section class="panel snippet">
                        <h2>"The same in PyTorch"</h2>
                        <pre><code>{python_snippet(&report.spec)}</code></pre>
                    </section>
                })}
            }
            .into_any()
        }
        RecordBody::Pitfall(report) => {
            let report = (**report).clone();
            let info = use_context::<ServerInfo>();
            let title = info
                .and_then(|i| {
                    i.pitfalls
                        .iter()
                        .find(|c| c.id == report.id)
                        .map(|c| c.title.clone())
                })
                .unwrap_or_else(|| report.id.clone());
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
                    {crate::pitfalls::outcome_view(&report)}
                    <div id=chart_id class="chart" class:hidden=!has_chart></div>
                </section>
                <RecordActions id=id.clone() run=false charts=if has_chart { vec![("pitfall-chart", "chart")] } else { vec![] } />
            }
            .into_any()
        }
    }
}

/// The latency and memory charts of a recorded run.
#[component]
fn RecordedCharts(report: Report) -> impl IntoView {
    #[cfg(feature = "hydrate")]
    {
        use crate::charts;
        let r = report.clone();
        Effect::new(move |_| {
            charts::render(
                "latency-chart",
                charts::latency_chart(
                    &r.warmup,
                    &r.samples,
                    Some(r.latency_ms.p50),
                    Some(r.latency_ms.p95),
                ),
            );
            charts::render(
                "memory-chart",
                charts::memory_chart(&r.warmup, &r.samples, Some(r.memory.baseline_bytes)),
            );
        });
    }
    let _ = &report;
    view! {
        <div class="charts">
            <figure><div id="latency-chart" class="chart" data-testid="latency-chart"></div></figure>
            <figure><div id="memory-chart" class="chart" data-testid="memory-chart"></div></figure>
        </div>
    }
}

/// A finished run's figures, with where they come from.
pub fn summary_table(r: &Report) -> impl IntoView + use<> {
    let l = &r.latency_ms;
    let m = &r.memory;
    let reserved = m
        .peak_reserved_bytes
        .map(format_bytes)
        .unwrap_or_else(|| "absent: the CPU has no caching allocator".into());
    let leak = if m.leaked_bytes == 0 {
        format!("{} (back at baseline)", format_bytes(m.after_release_bytes))
    } else {
        format!(
            "{} — {} not returned",
            format_bytes(m.after_release_bytes),
            format_bytes(m.leaked_bytes)
        )
    };
    let device_used = m
        .device_used_bytes
        .map(format_bytes)
        .unwrap_or_else(|| "absent: only a GPU reports it".into());
    view! {
        <table class="summary" data-testid="summary">
            <caption>
                {format!(
                    "{} on {} · libtorch {} · {} thread{} · {}",
                    r.spec.label(),
                    r.env.device_name,
                    r.env.libtorch_version,
                    r.env.threads,
                    if r.env.threads == 1 { "" } else { "s" },
                    r.env.measured_at
                )}
            </caption>
            <tbody>
                <tr><th>"latency p50 / p95 / p99"</th><td data-testid="p50">{format!("{:.3} / {:.3} / {:.3} ms", l.p50, l.p95, l.p99)}</td></tr>
                <tr><th>"mean ± stddev (min – max)"</th><td>{format!("{:.3} ± {:.3} ms ({:.3} – {:.3})", l.mean, l.stddev, l.min, l.max)}</td></tr>
                <tr><th>"throughput"</th><td>{format!("{:.1} samples/s", r.throughput_per_s)}</td></tr>
                <tr><th>"peak above baseline"</th><td data-testid="peak">{format_bytes(m.peak_above_baseline_bytes)}</td></tr>
                <tr><th>"baseline (weights + input)"</th><td>{format_bytes(m.baseline_bytes)}</td></tr>
                <tr><th>"peak reserved"</th><td>{reserved}</td></tr>
                <tr><th>"device memory in use"</th><td>{device_used}</td></tr>
                <tr><th>"after the output is freed"</th><td>{leak}</td></tr>
                <tr><th>"output"</th><td>{format!("{} {:?}{}{}", r.output.dtype, r.output.shape, if r.output.requires_grad { ", requires_grad: graph kept alive" } else { "" }, if r.output.is_inference { ", inference tensor" } else { "" })}</td></tr>
                <tr><th>"memory figures"</th><td>{m.source.describe()}</td></tr>
            </tbody>
        </table>
    }
}

/// Exports, permalink and embed snippet of one recorded result.
#[component]
pub fn RecordActions(
    id: String,
    run: bool,
    charts: Vec<(&'static str, &'static str)>,
) -> impl IntoView {
    let export = |format: &str| format!("/api/records/{id}/export/{format}");
    let png_buttons = charts
        .into_iter()
        .map(|(chart, name)| {
            let filename = format!("gradless-{id}-{name}.png");
            let on_click = move |_| {
                #[cfg(feature = "hydrate")]
                crate::charts::download_png(chart, &filename);
                #[cfg(not(feature = "hydrate"))]
                let _ = (chart, &filename);
            };
            view! { <button data-testid=format!("png-{name}") on:click=on_click>{format!("PNG: {name}")}</button> }
        })
        .collect_view();
    view! {
        <section class="panel exports" data-testid="record-actions">
            <div class="actions">
                <a class="button" href=format!("/runs/{id}") rel="external" data-testid="permalink">"Permalink"</a>
                <a class="button" href=export("json") download="" data-testid="export-json">"JSON"</a>
                <a class="button" href=export("csv") download="" data-testid="export-csv">"CSV"</a>
                {run.then(|| view! { <a class="button" href=export("py") download="" data-testid="export-py" title="A standalone PyTorch script that measures this run again, the same way">"Export as Python script"</a> })}
                {png_buttons}
            </div>
            <EmbedSnippet path=Signal::derive({ let id = id.clone(); move || format!("/embed/runs/{id}") }) title="Gradless: a recorded run" />
        </section>
    }
}

/// The Embed button and, once pressed, the snippet to paste into a doc page.
#[component]
pub fn EmbedSnippet(path: Signal<String>, title: &'static str) -> impl IntoView {
    let open = RwSignal::new(false);
    let snippet = move || {
        let origin = {
            #[cfg(feature = "hydrate")]
            {
                web_sys::window()
                    .and_then(|w| w.location().origin().ok())
                    .unwrap_or_default()
            }
            #[cfg(not(feature = "hydrate"))]
            {
                String::new()
            }
        };
        crate::embed::embed_snippet(&origin, &path.get(), title)
    };
    view! {
        <button data-testid="embed" on:click=move |_| open.update(|o| *o = !*o)>{move || if open.get() { "Hide embed code" } else { "Embed" }}</button>
        {move || open.get().then(|| view! {
            <div class="embed-code">
                <p class="explain">
                    "Paste into a doc page. The frame resizes itself to fit. Add "<code>"&lock=model,batch"</code>" or "<code>"&hide=snippet,history"</code>
                    " to the lab's address to fix or hide controls. The server must allow the doc's origin (--embed-origins)."
                </p>
                <textarea readonly rows="9" data-testid="embed-code">{snippet()}</textarea>
            </div>
        })}
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
            match record_id_from(&text) {
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

/// The newest recorded results (`Err` with a message when they cannot be read), and the
/// JSON to embed for hydration; like [`load`], fetched from the API after client-side
/// navigation.
fn load_index() -> (RwSignal<Option<Result<Vec<RecordSummary>, String>>>, String) {
    #[cfg(feature = "ssr")]
    {
        let listed = match use_context::<RecordIndex>() {
            Some(index) => (index.0)(INDEX_LIMIT),
            None => Err("this server keeps no record".to_string()),
        };
        let json = crate::script_json(&listed);
        (RwSignal::new(Some(listed)), json)
    }
    #[cfg(not(feature = "ssr"))]
    {
        #[cfg(feature = "hydrate")]
        {
            let text = crate::page_json(INDEX_ELEMENT).unwrap_or_default();
            if let Ok(listed) = serde_json::from_str::<Result<Vec<RecordSummary>, String>>(&text) {
                return (RwSignal::new(Some(listed)), text);
            }
            let state = RwSignal::new(None);
            leptos::task::spawn_local(async move {
                let url = format!("/api/records?limit={INDEX_LIMIT}");
                state.set(Some(
                    crate::client::get_json::<Vec<RecordSummary>>(&url).await,
                ));
            });
            (state, String::new())
        }
        #[cfg(not(feature = "hydrate"))]
        {
            (RwSignal::new(None), String::new())
        }
    }
}

/// `/runs`: what this server has recorded, newest first; pick runs to see side by side.
#[component]
pub fn RecordsPage() -> impl IntoView {
    let (state, json) = load_index();
    let selected = RwSignal::new(Vec::<String>::new());
    let compare_href = move || format!("/compare?runs={}", selected.with(|s| s.join(",")));
    let rows = move || {
        state.with(|s| match s {
            None => view! { <p class="status">"Loading…"</p> }.into_any(),
            Some(Err(m)) => view! { <p class="error" role="alert">{m.clone()}</p> }.into_any(),
            Some(Ok(list)) if list.is_empty() => {
                view! { <p class="explain" data-testid="records-empty">"Nothing recorded yet: every run and experiment finished on this server appears here."</p> }.into_any()
            }
            Some(Ok(list)) => {
                let body = list
                    .iter()
                    .map(|r| {
                        let id = r.id.clone();
                        let pick = (r.kind == protocol::RecordKind::Run).then(|| {
                            let id = id.clone();
                            view! {
                                <input
                                    type="checkbox"
                                    aria-label=format!("compare {id}")
                                    data-testid=format!("pick-{id}")
                                    prop:disabled={
                                        let id = id.clone();
                                        move || selected.with(|s| s.len() >= MAX_COMPARED && !s.contains(&id))
                                    }
                                    on:change=move |ev| {
                                        let on = event_target_checked(&ev);
                                        selected.update(|s| {
                                            s.retain(|x| x != &id);
                                            if on {
                                                s.push(id.clone());
                                            }
                                        });
                                    }
                                />
                            }
                        });
                        let figures = match (r.p50_ms, r.peak_above_baseline_bytes, r.verdict) {
                            (Some(p50), Some(peak), _) => format!("p50 {p50:.3} ms · peak +{}", format_bytes(peak)),
                            (_, _, Some(v)) => v.as_str().replace('_', " "),
                            _ => String::new(),
                        };
                        view! {
                            <tr>
                                <td>{pick}</td>
                                <td><a href=format!("/runs/{id}") rel="external">{r.label.clone()}</a></td>
                                <td>{r.device_name.clone()}</td>
                                <td>{figures}</td>
                                <td class="when">{r.measured_at.clone()}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <div class="table-scroll">
                        <table class="summary records" data-testid="records">
                            <thead><tr><th></th><th>"what"</th><th>"device"</th><th>"result"</th><th>"measured (UTC)"</th></tr></thead>
                            <tbody>{body}</tbody>
                        </table>
                    </div>
                }
                .into_any()
            }
        })
    };
    view! {
        <script type="application/json" id=INDEX_ELEMENT inner_html=json></script>
        <div class="record">
            <section class="panel">
                <h1>"Recorded on this server"</h1>
                <p class="explain">
                    {format!("The newest {INDEX_LIMIT} runs and experiments, each with its permalink. Tick up to {MAX_COMPARED} runs to see them side by side.")}
                </p>
                <div class="actions">
                    <a
                        class="button"
                        data-testid="compare-selected"
                        href=compare_href
                        rel="external"
                        class:hidden=move || selected.with(|s| s.len() < 2)
                    >
                        {move || format!("Compare {} runs side by side", selected.with(|s| s.len()))}
                    </a>
                </div>
                {rows}
            </section>
        </div>
    }
}

/// `/compare?runs=a,b,...`: recorded runs side by side, each column linked to its permalink.
#[component]
pub fn ComparePage() -> impl IntoView {
    let ids: Vec<String> = use_query_map()
        .with_untracked(|q| q.get("runs"))
        .unwrap_or_default()
        .split(',')
        .filter_map(record_id_from)
        .take(MAX_COMPARED)
        .collect();
    let none = ids.is_empty();
    let (state, json) = load(ids);
    let runs = Memo::new(move |_| {
        state.with(|s| {
            s.as_ref()
                .map(|v| {
                    v.iter()
                        .filter_map(|l| match l {
                            Loaded::Found(r) => r.run().map(|rep| (r.id.clone(), rep.clone())),
                            Loaded::Missing(_) => None,
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    });
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        let reports: Vec<Report> = runs.with(|r| r.iter().map(|(_, rep)| rep.clone()).collect());
        if !reports.is_empty() {
            crate::charts::render(
                "compare-chart",
                crate::charts::comparison_chart("Recorded runs side by side", &reports),
            );
        }
    });
    let problems = move || {
        state.with(|s| {
            s.as_ref().map(|v| {
                v.iter()
                    .filter_map(|l| match l {
                        Loaded::Missing(m) => Some(m.clone()),
                        Loaded::Found(r) if r.run().is_none() => Some(format!(
                            "{} is a pitfall experiment, not a run: open /runs/{}",
                            r.id, r.id
                        )),
                        Loaded::Found(_) => None,
                    })
                    .map(|m| view! { <p class="error" role="alert">{m}</p> })
                    .collect_view()
            })
        })
    };
    view! {
        <script type="application/json" id=RECORDS_ELEMENT inner_html=json></script>
        <div class="record compare">
            <section class="panel">
                <h1>"Recorded runs side by side"</h1>
                {none.then(|| view! { <p class="explain">"Add runs with ?runs=ID,ID (from their permalinks), or use “Compare with another run” on a run's page."</p> })}
                {problems}
                {move || runs.with(|r| (!r.is_empty()).then(|| compare_table(r)))}
            </section>
            <section class="panel"><div id="compare-chart" class="chart" data-testid="compare-chart"></div></section>
        </div>
    }
}

fn compare_table(runs: &[(String, Report)]) -> impl IntoView + use<> {
    let first = runs[0].1.clone();
    let ratio = |x: f64, base: f64| {
        if base > 0.0 {
            format!(" ({:.2}×)", x / base)
        } else {
            String::new()
        }
    };
    type Row = (&'static str, Box<dyn Fn(&Report) -> String>);
    let f = first.clone();
    let g = first.clone();
    let rows: Vec<Row> = vec![
        (
            "model",
            Box::new(|r: &Report| r.spec.model.display_name().to_string()),
        ),
        ("settings", Box::new(|r: &Report| r.spec.label())),
        (
            "device",
            Box::new(|r: &Report| format!("{} ({})", r.env.device_name, r.env.device.as_str())),
        ),
        (
            "measured at",
            Box::new(|r: &Report| r.env.measured_at.clone()),
        ),
        (
            "libtorch · threads",
            Box::new(|r: &Report| format!("{} · {}", r.env.libtorch_version, r.env.threads)),
        ),
        (
            "p50 latency",
            Box::new(move |r: &Report| {
                format!(
                    "{:.3} ms{}",
                    r.latency_ms.p50,
                    ratio(r.latency_ms.p50, f.latency_ms.p50)
                )
            }),
        ),
        (
            "p95 / p99",
            Box::new(|r: &Report| format!("{:.3} / {:.3} ms", r.latency_ms.p95, r.latency_ms.p99)),
        ),
        (
            "throughput",
            Box::new(|r: &Report| format!("{:.1} samples/s", r.throughput_per_s)),
        ),
        (
            "peak above baseline",
            Box::new(move |r: &Report| {
                let (x, b) = (
                    r.memory.peak_above_baseline_bytes as f64,
                    g.memory.peak_above_baseline_bytes as f64,
                );
                format!(
                    "{}{}",
                    format_bytes(r.memory.peak_above_baseline_bytes),
                    ratio(x, b)
                )
            }),
        ),
        (
            "baseline",
            Box::new(|r: &Report| format_bytes(r.memory.baseline_bytes)),
        ),
        (
            "peak reserved",
            Box::new(|r: &Report| {
                r.memory
                    .peak_reserved_bytes
                    .map(format_bytes)
                    .unwrap_or_else(|| "absent (CPU)".into())
            }),
        ),
        (
            "memory figures",
            Box::new(|r: &Report| r.memory.source.short().to_string()),
        ),
    ];
    let head = runs
        .iter()
        .enumerate()
        .map(|(i, (id, _))| view! { <th><a href=format!("/runs/{id}") rel="external">{format!("#{} {id}", i + 1)}</a></th> })
        .collect_view();
    let body = rows
        .into_iter()
        .map(|(name, cell)| {
            let cells = runs
                .iter()
                .map(|(_, r)| view! { <td>{cell(r)}</td> })
                .collect_view();
            view! { <tr><th>{name}</th>{cells}</tr> }
        })
        .collect_view();
    view! {
        <div class="table-scroll">
            <table class="summary side-by-side" data-testid="compare-table">
                <thead><tr><th>"ratios against #1"</th>{head}</tr></thead>
                <tbody>{body}</tbody>
            </table>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_out_of_permalinks() {
        assert_eq!(
            record_id_from("0123456789abcdef").as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(
            record_id_from(" https://g.corp/runs/0123456789ABCDEF/ ").as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(
            record_id_from("https://g.corp/embed/runs/0123456789abcdef?x=1#y").as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(record_id_from("https://g.corp/runs/nope"), None);
        assert_eq!(record_id_from(""), None);
    }
}
