//! `/runs`: what this server has recorded, newest first; tick runs to see them side by side.

use leptos::prelude::*;
use protocol::{format_bytes, RecordSummary};

#[cfg(feature = "ssr")]
use super::RecordIndex;
use super::{INDEX_ELEMENT, INDEX_LIMIT, MAX_COMPARED};

/// A listing of recorded results, or why it could not be read.
type Listed = Result<Vec<RecordSummary>, String>;

/// The newest recorded results (`Err` with a message when they cannot be read), and the
/// JSON to embed for hydration; like [`load`], fetched from the API after client-side
/// navigation.
fn load_index() -> (RwSignal<Option<Listed>>, String) {
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
                view! { <p class="explain" data-testid="records-empty">"Nothing recorded yet: every run and experiment started on this server appears here, with its figures once it finished."</p> }.into_any()
            }
            Some(Ok(list)) => {
                let body = list
                    .iter()
                    .map(|r| {
                        let id = r.id.clone();
                        // Only runs with figures can be compared.
                        let pick = (r.kind == protocol::RecordKind::Run && r.status.is_completed()).then(|| {
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
                            // Interrupted (or still going): the note says when and why.
                            _ => r.note.clone().unwrap_or_default(),
                        };
                        let unfinished = !r.status.is_completed();
                        view! {
                            <tr class:unfinished=unfinished data-status=r.status.as_str()>
                                <td>{pick}</td>
                                <td data-label="what"><a href=format!("/runs/{id}") rel="external">{shown_label(&r.label)}</a></td>
                                <td data-label="device">{r.device_name.clone()}</td>
                                <td data-label="result">{if unfinished {
                                    let (word, rest) = status_and_rest(r.status.as_str(), &figures);
                                    view! { <strong>{word}</strong>{rest} }.into_any()
                                } else {
                                    figures.into_any()
                                }}</td>
                                <td data-label="measured (UTC)" class="when">{r.measured_at.clone()}</td>
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

/// "interrupted" and " by a server restart at ..." when the note starts with the status (it
/// does for an interrupted run), so the row reads as one sentence; else "status: " and the
/// note.
/// A listed run's label with its model named as the pages name it ("MobileNet-V2 · eval ·
/// ..."): the record keeps the model's id (`mobilenet_v2`), which the first views match on.
fn shown_label(label: &str) -> String {
    label
        .split_once(" · ")
        .and_then(|(id, rest)| {
            let model = crate::catalog().resolve(id.parse().ok()?);
            Some(format!("{} · {rest}", model.display_name()))
        })
        .unwrap_or_else(|| label.to_string())
}

pub(crate) fn status_and_rest(status: &str, note: &str) -> (String, String) {
    match note.get(..status.len()) {
        Some(head) if head.eq_ignore_ascii_case(status) => (status.to_string(), note[status.len()..].to_string()),
        _ => (format!("{status}: "), note.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::{shown_label, status_and_rest};

    #[test]
    fn listed_runs_name_their_model_as_the_pages_do() {
        assert_eq!(shown_label("mobilenet_v2 · eval · enabled · batch 1"), "MobileNet-V2 · eval · enabled · batch 1");
        let tiny = protocol::decoder::CPU_PRESET;
        let shown = shown_label(&format!("{tiny} · eval · no_grad · batch 1"));
        assert!(!shown.starts_with(tiny) && shown.ends_with(" · eval · no_grad · batch 1"), "{shown}");
        // Not a model id (a pitfall, a removed team model): as recorded.
        assert_eq!(shown_label("pitfall warmup"), "pitfall warmup");
        assert_eq!(shown_label("gone_model · eval"), "gone_model · eval");
    }

    #[test]
    fn a_note_that_starts_with_its_status_reads_as_one_sentence() {
        let note = "interrupted by a server restart at T; nothing was measured after it started at S";
        let (word, rest) = status_and_rest("Interrupted", note);
        assert_eq!(word, "Interrupted");
        assert_eq!(rest, " by a server restart at T; nothing was measured after it started at S");
        assert_eq!(status_and_rest("running", "on worker gpu-1"), ("running: ".into(), "on worker gpu-1".into()));
        assert_eq!(status_and_rest("interrupted", "int"), ("interrupted: ".into(), "int".into()));
    }
}
