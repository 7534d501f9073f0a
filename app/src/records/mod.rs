//! Recorded results in the page: the permalink page of one run or experiment
//! ([`page`]: `/runs/{id}`, and `/embed/runs/{id}` for docs), the list of what the server
//! recorded ([`list`]: `/runs`) and runs side by side from their permalinks ([`compare`]:
//! `/compare?runs=a,b`). This module owns how a page gets its records: the server renders
//! a recorded page with its figures in it (looked up through [`RecordLookup`] in context)
//! and embeds the same JSON for hydration; a page reached by client-side navigation
//! fetches it from `/api/records/{id}` instead.

pub mod compare;
pub mod list;
pub mod page;

pub use compare::ComparePage;
pub use list::RecordsPage;
pub use page::RecordPage;

use leptos::prelude::*;
use protocol::Record;
#[cfg(feature = "ssr")]
use protocol::RecordSummary;
use serde::{Deserialize, Serialize};

/// The `<script type="application/json">` carrying the records of the page.
const RECORDS_ELEMENT: &str = "gradless-records";

/// At most this many runs side by side.
pub const MAX_COMPARED: usize = 8;

/// How the server finds a recorded result while rendering (provided in context by it).
#[cfg(feature = "ssr")]
#[derive(Clone)]
pub struct RecordLookup(pub std::sync::Arc<LookupFn>);

/// Record `id`, `None` when there is none, `Err` with a message when it cannot be read.
#[cfg(feature = "ssr")]
pub type LookupFn = dyn Fn(&str) -> Result<Option<Record>, String> + Send + Sync;

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
/// A record's models are resolved in the page's catalog ([`crate::catalog`]).
fn load(ids: Vec<String>) -> (RwSignal<Option<Vec<Loaded>>>, String) {
    let catalog = crate::catalog();
    let found = move |mut r: Record| {
        r.resolve(&catalog);
        Loaded::Found(Box::new(r))
    };
    #[cfg(feature = "ssr")]
    {
        let lookup = use_context::<RecordLookup>();
        let loaded: Vec<Loaded> = ids
            .iter()
            .map(|id| match lookup.as_ref().map(|l| (l.0)(id)) {
                Some(Ok(Some(r))) => found(r),
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
                    let loaded = e.loaded.into_iter().map(|l| match l {
                        Loaded::Found(r) => found(*r),
                        missing => missing,
                    });
                    return (RwSignal::new(Some(loaded.collect())), text);
                }
            }
            // Reached without a server render: ask the API.
            let state = RwSignal::new(None);
            leptos::task::spawn_local(async move {
                let mut out = vec![];
                for id in &ids {
                    let url = format!("/api/records/{id}");
                    out.push(match crate::client::get_json::<Record>(&url).await {
                        Ok(r) => found(r),
                        Err(_) => missing(id),
                    });
                }
                state.set(Some(out));
            });
            (state, String::new())
        }
        #[cfg(not(feature = "hydrate"))]
        {
            let _ = (ids, found);
            (RwSignal::new(None), String::new())
        }
    }
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

/// The runs a `/compare?runs=...` list names, and a sentence for each entry it ignores
/// (not a record id, or past the first [`MAX_COMPARED`]), so nothing is dropped silently.
pub fn compare_ids(list: &str) -> (Vec<String>, Vec<String>) {
    let (mut ids, mut ignored) = (Vec::new(), Vec::new());
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match record_id_from(entry) {
            None => ignored.push(format!(
                "Ignored “{entry}”: not a run id (a run's id is the last part of its permalink, /runs/ID)."
            )),
            Some(id) if ids.contains(&id) => {
                ignored.push(format!("Ignored a second “{id}”: it is already compared."))
            }
            Some(_) if ids.len() == MAX_COMPARED => ignored.push(format!(
                "Ignored “{entry}”: at most {MAX_COMPARED} runs are compared at once."
            )),
            Some(id) => ids.push(id),
        }
    }
    (ids, ignored)
}

#[cfg(test)]
mod tests {
    #[test]
    fn compare_ids_name_what_they_ignore() {
        let (ids, ignored) =
            super::compare_ids("abcd1234abcd1234, resnet999,,/runs/ABCD1234ABCD1234,");
        assert_eq!(ids.len(), 1);
        assert_eq!(ignored.len(), 2, "{ignored:?}");
        assert!(ignored[0].contains("resnet999"));
        assert!(ignored[1].contains("already compared"));
        let many = (0..super::MAX_COMPARED + 2)
            .map(|i| format!("{i:016x}"))
            .collect::<Vec<_>>()
            .join(",");
        let (ids, ignored) = super::compare_ids(&many);
        assert_eq!(ids.len(), super::MAX_COMPARED);
        assert_eq!(ignored.len(), 2);
    }

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
