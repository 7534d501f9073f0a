//! The browser's side of the run API (hydrate builds only): start a run with
//! `POST /api/runs` and follow its Server-Sent Events until it ends.

use std::cell::RefCell;
use std::rc::Rc;

use protocol::{ApiErrorBody, Event, FailureKind, RunCreated, RunFailure, RunSpec};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{EventSource, Headers, MessageEvent, Request, RequestInit, Response};

fn js_error(e: JsValue) -> String {
    e.as_string()
        .or_else(|| js_sys::JSON::stringify(&e).ok().and_then(|s| s.as_string()))
        .unwrap_or_else(|| "unknown browser error".into())
}

/// Where the access token a person typed is kept in this browser.
pub const TOKEN_KEY: &str = "gradless-token";

/// The access token saved in this browser, if any.
pub fn saved_token() -> Option<String> {
    web_sys::window()
        .and_then(|w| w.local_storage().ok().flatten())
        .and_then(|s| s.get_item(TOKEN_KEY).ok().flatten())
        .filter(|t| !t.is_empty())
}

/// Saves (or, when empty, forgets) the access token.
pub fn save_token(token: &str) {
    if let Some(s) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = if token.trim().is_empty() {
            s.remove_item(TOKEN_KEY)
        } else {
            s.set_item(TOKEN_KEY, token.trim())
        };
    }
}

/// POSTs `body` as JSON to `url` (with the saved access token) and reads the JSON answer;
/// the error is the server's message (or why the server could not be reached).
pub async fn post_json<B: serde::Serialize, T: serde::de::DeserializeOwned>(
    url: &str,
    body: &B,
) -> Result<T, String> {
    let body = serde_json::to_string(body).map_err(|e| e.to_string())?;
    let init = RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(&body));
    let headers = Headers::new().map_err(js_error)?;
    headers
        .set("content-type", "application/json")
        .map_err(js_error)?;
    if let Some(token) = saved_token() {
        headers
            .set("authorization", &format!("Bearer {token}"))
            .map_err(js_error)?;
    }
    init.set_headers(&headers);
    fetch_json(url, &init).await
}

/// GETs `url` and reads the JSON answer.
pub async fn get_json<T: serde::de::DeserializeOwned>(url: &str) -> Result<T, String> {
    let init = RequestInit::new();
    init.set_method("GET");
    fetch_json(url, &init).await
}

async fn fetch_json<T: serde::de::DeserializeOwned>(
    url: &str,
    init: &RequestInit,
) -> Result<T, String> {
    let window = web_sys::window().ok_or("no window")?;
    let request = Request::new_with_str_and_init(url, init).map_err(js_error)?;
    let response: Response = JsFuture::from(window.fetch_with_request(&request))
        .await
        .map_err(|_| "the Gradless server cannot be reached; is it still running?".to_string())?
        .dyn_into()
        .map_err(js_error)?;
    let text = JsFuture::from(response.text().map_err(js_error)?)
        .await
        .map_err(js_error)?
        .as_string()
        .unwrap_or_default();
    if response.ok() {
        serde_json::from_str(&text).map_err(|e| format!("unexpected answer from the server: {e}"))
    } else {
        Err(serde_json::from_str::<ApiErrorBody>(&text)
            .map(|b| b.error.message)
            .unwrap_or_else(|_| format!("the server answered {}", response.status())))
    }
}

/// Queues a run. Its `events_url` comes back carrying the run's cancel secret, so the
/// viewer this page opens is the owner's: closing it cancels the run while it waits
/// (a stranger following the same run without the secret never does).
pub async fn start_run(spec: &RunSpec) -> Result<RunCreated, String> {
    start_run_on(spec, None).await
}

/// [`start_run`] on a fleet worker by name (`None`: the front chooses).
pub async fn start_run_on(spec: &RunSpec, worker: Option<&str>) -> Result<RunCreated, String> {
    let url = match worker {
        Some(w) => format!("/api/runs?worker={}", String::from(js_sys::encode_uri_component(w))),
        None => "/api/runs".to_string(),
    };
    let mut created: RunCreated = post_json(&url, spec).await?;
    if let Some(secret) = &created.cancel_token {
        let joiner = if created.events_url.contains('?') {
            '&'
        } else {
            '?'
        };
        let encoded: String = js_sys::encode_uri_component(secret).into();
        created.events_url = format!("{}{joiner}cancel_token={encoded}", created.events_url);
    }
    Ok(created)
}

/// Follows a run's events, calling `on_event` for each; resolves after the terminal one.
/// A dropped connection ends the run on this page with a readable failure. `model`: the
/// run's model as this page's catalog resolved it, which the report's spec gets back (read
/// from JSON, a team model's id is its name).
pub async fn follow(events_url: &str, model: protocol::ModelId, on_event: impl Fn(Event) + 'static) {
    let (done_tx, done_rx) = futures::channel::oneshot::channel::<()>();
    let done_tx = Rc::new(RefCell::new(Some(done_tx)));
    let on_event = Rc::new(on_event);
    let source = match EventSource::new(events_url) {
        Ok(s) => s,
        Err(e) => {
            on_event(Event::Failed {
                failure: RunFailure {
                    kind: FailureKind::Internal,
                    message: js_error(e),
                },
            });
            return;
        }
    };
    let finish = {
        let source = source.clone();
        let done_tx = done_tx.clone();
        move || {
            // Closing matters: an EventSource reconnects by itself after the server ends it.
            source.close();
            if let Some(tx) = done_tx.borrow_mut().take() {
                let _ = tx.send(());
            }
        }
    };
    let on_message = {
        let on_event = on_event.clone();
        let finish = finish.clone();
        Closure::<dyn FnMut(MessageEvent)>::new(move |m: MessageEvent| {
            let Some(text) = m.data().as_string() else {
                return;
            };
            if let Ok(mut event) = serde_json::from_str::<Event>(&text) {
                if let Event::Done { report } = &mut event {
                    report.spec.model = report.spec.model.or_resolved(model);
                }
                let terminal = event.is_terminal();
                on_event(event);
                if terminal {
                    finish();
                }
            }
        })
    };
    let on_error = {
        let on_event = on_event.clone();
        let finish = finish.clone();
        let done_tx = done_tx.clone();
        Closure::<dyn FnMut(web_sys::Event)>::new(move |_| {
            if done_tx.borrow().is_some() {
                on_event(Event::Failed {
                    failure: RunFailure {
                        kind: FailureKind::Internal,
                        message:
                            "lost the connection to the Gradless server while the run was going"
                                .into(),
                    },
                });
                finish();
            }
        })
    };
    source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    let _ = done_rx.await;
    source.set_onmessage(None);
    source.set_onerror(None);
    drop(on_message);
    drop(on_error);
}

/// Copies `text` to the clipboard.
pub async fn copy_text(text: &str) -> Result<(), String> {
    let window = web_sys::window().ok_or("no window")?;
    JsFuture::from(window.navigator().clipboard().write_text(text))
        .await
        .map(|_| ())
        .map_err(js_error)
}
