//! A fleet front's extras for the Lab and the pitfall cards: the live workers' devices
//! ("H200 · gpu-host-3") and **Run on every device** — the same spec (or experiment) sent to
//! each worker, the runs then side by side in `/compare` with ratios against the first, the
//! experiments' verdicts side by side in the card. Renders nothing on a single-process
//! server (its `ServerInfo::workers` is empty).

use leptos::prelude::*;
use protocol::{PitfallReport, RunSpec, ServerInfo};

/// The live workers' labels, or `None` on a single-process server.
fn fleet_labels(info: &ServerInfo) -> Option<Vec<(String, String)>> {
    (!info.workers.is_empty()).then(|| {
        info.workers
            .iter()
            .map(|w| (w.name.clone(), w.label.clone()))
            .collect()
    })
}

/// The `/compare` link for runs in this order.
pub fn compare_url(ids: &[String]) -> String {
    format!("/compare?runs={}", ids.join(","))
}

/// The Lab's fleet line: the devices, and Run on every device.
#[component]
pub fn FleetRun(spec: Signal<RunSpec>) -> impl IntoView {
    let info = expect_context::<ServerInfo>();
    let Some(workers) = fleet_labels(&info) else {
        // A single server always has a device (its CPU at least); no device at all is a
        // fleet front that no worker has announced itself to (yet, or any more).
        return info
            .devices
            .is_empty()
            .then(|| {
                view! {
                    <p class="explain note" role="status" data-testid="fleet-empty">
                        "No device worker is live in this fleet: this front measures nothing itself, so runs are refused until one announces itself ("
                        <code>"gradless worker --nats URL --name NAME"</code>
                        "). Reload the page once it has."
                    </p>
                }
            })
            .into_any();
    };
    let status = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let names: Vec<String> = workers.iter().map(|(n, _)| n.clone()).collect();
    let on_click = move |_| {
        if busy.get_untracked() {
            return;
        }
        #[cfg(feature = "hydrate")]
        {
            let names = names.clone();
            let spec = spec.get_untracked();
            busy.set(true);
            leptos::task::spawn_local(async move {
                let ids = run_everywhere(&spec, &names, status).await;
                busy.set(false);
                if let Some(ids) = ids {
                    if let Some(w) = web_sys::window() {
                        let _ = w.location().set_href(&compare_url(&ids));
                    }
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (&names, spec);
    };
    view! {
        <div class="fleet" data-testid="fleet">
            <p class="explain">
                "Devices in this fleet: "
                {workers.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>().join(", ")}
            </p>
            <button data-testid="run-everywhere" on:click=on_click aria-disabled=move || busy.get().to_string()>
                "Run on every device"
            </button>
            <span class="explain" data-testid="run-everywhere-status" aria-live="polite">{move || status.get()}</span>
        </div>
    }
    .into_any()
}

/// Starts `spec` on each worker, follows each to its end; the ids of the runs that
/// finished, in worker order, or `None` (the status says why).
#[cfg(feature = "hydrate")]
async fn run_everywhere(spec: &RunSpec, names: &[String], status: RwSignal<String>) -> Option<Vec<String>> {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut created = Vec::new();
    for name in names {
        match crate::client::start_run_on(spec, Some(name)).await {
            Ok(c) => created.push((name.clone(), c)),
            Err(e) => {
                status.set(format!("{name}: {e}"));
                return None;
            }
        }
    }
    let total = created.len();
    status.set(format!("Running on {total} devices…"));
    let finished = Rc::new(RefCell::new(Vec::<(String, Result<String, String>)>::new()));
    let model = spec.model;
    let follows = created.into_iter().map(|(name, c)| {
        let finished = finished.clone();
        async move {
            let id = c.id.clone();
            let outcome = Rc::new(RefCell::new(None));
            let seen = outcome.clone();
            crate::client::follow(&c.events_url, model, move |event| match event {
                protocol::Event::Done { .. } => *seen.borrow_mut() = Some(Ok(id.clone())),
                protocol::Event::Failed { failure } => *seen.borrow_mut() = Some(Err(failure.message)),
                _ => {}
            })
            .await;
            let outcome = outcome.borrow_mut().take().unwrap_or_else(|| Err("its events stopped".into()));
            finished.borrow_mut().push((name, outcome));
            status.set(format!("{} of {total} devices done…", finished.borrow().len()));
        }
    });
    futures::future::join_all(follows).await;
    let finished = finished.borrow();
    let mut ids = Vec::new();
    for name in names {
        match finished.iter().find(|(n, _)| n == name).map(|(_, o)| o) {
            Some(Ok(id)) => ids.push(id.clone()),
            Some(Err(e)) => {
                status.set(format!("on {name}: {e}"));
                return None;
            }
            None => return None,
        }
    }
    Some(ids)
}

/// A pitfall card's fleet line: the experiment on every worker, verdicts side by side.
#[component]
pub fn FleetPitfall(id: String) -> impl IntoView {
    let info = expect_context::<ServerInfo>();
    let Some(workers) = fleet_labels(&info) else {
        // The Lab says when a front has no worker; each card need not say it again.
        return ().into_any();
    };
    let results = RwSignal::new(Vec::<(String, Result<PitfallReport, String>)>::new());
    let busy = RwSignal::new(false);
    let on_click = {
        let workers = workers.clone();
        move |_| {
            if busy.get_untracked() {
                return;
            }
            #[cfg(feature = "hydrate")]
            {
                let workers = workers.clone();
                let id = id.clone();
                busy.set(true);
                results.set(Vec::new());
                leptos::task::spawn_local(async move {
                    for (name, label) in workers {
                        let url = format!("/api/pitfalls/{id}?worker={name}");
                        let r = crate::client::post_json::<_, PitfallReport>(&url, &serde_json::json!({})).await;
                        results.update(|v| v.push((label, r)));
                    }
                    busy.set(false);
                });
            }
            #[cfg(not(feature = "hydrate"))]
            let _ = (&workers, &id);
        }
    };
    view! {
        <div class="fleet" data-testid="fleet-pitfall">
            <button on:click=on_click aria-disabled=move || busy.get().to_string()>"Run on every device"</button>
            <table class="fleet-verdicts">
                <tbody>
                    {move || results.get().into_iter().map(|(label, r)| match r {
                        Ok(report) => view! {
                            <tr>
                                <th scope="row">{label}</th>
                                <td>{report.verdict.as_str()}</td>
                                <td>{report.reason.clone()}</td>
                                <td>{report.record_id.map(|rid| view! { <a href=format!("/runs/{rid}")>"permalink"</a> })}</td>
                            </tr>
                        }.into_any(),
                        Err(e) => view! { <tr><th scope="row">{label}</th><td colspan="3" class="error">{e}</td></tr> }.into_any(),
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_link_keeps_the_worker_order() {
        assert_eq!(compare_url(&["b".into(), "a".into()]), "/compare?runs=b,a");
    }
}
