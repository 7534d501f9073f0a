//! `/learn`: the paths this server has; `/learn/new`: a lead composes one, as the TOML a
//! `paths/` file holds (a step added from the list of cards, or typed), checked by the server
//! with errors naming the field, then kept and served at `/learn/{id}`. Saving needs the
//! access token when the server has one.

use leptos::prelude::*;
use protocol::ServerInfo;

use crate::widgets::TokenField;

/// `/learn`.
#[component]
pub fn IndexRoute() -> impl IntoView {
    let data = super::page_data();
    let script = super::data_script(&data);
    let rows = data
        .paths
        .iter()
        .map(|p| {
            view! {
                <li>
                    <a href=format!("/learn/{}", p.id) rel="external">{p.title.clone()}</a>
                    {format!(" — {} steps ({}) · ", p.steps, p.source)}
                    <a href=format!("/learn/{}/answers", p.id) rel="external">"answers"</a>
                </li>
            }
        })
        .collect_view();
    view! {
        {script}
        <div class="learn">
            <section class="tour">
                <h1>"Onboarding paths"</h1>
                <p>"A path is a few experiments in order, each asking for a prediction before it runs. A lead composes one for the team; the answers page shows which ideas newcomers got wrong."</p>
                <ul data-testid="paths">{rows}</ul>
                <p><a href="/learn/new" rel="external">"Compose a path"</a></p>
            </section>
        </div>
    }
}

/// `POST /api/learn`'s body and answer.
#[derive(serde::Serialize)]
struct Compose {
    toml: String,
    check: bool,
}

#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
#[derive(serde::Deserialize)]
struct Composed {
    url: String,
    steps: usize,
}

const TEMPLATE: &str = "id = \"our-serving-path\"\ntitle = \"Serving our models\"\nnote = \"Read this before your first on-call.\"\n";

/// `/learn/new`.
#[component]
pub fn NewRoute() -> impl IntoView {
    let data = super::page_data();
    let script = super::data_script(&data);
    let info = expect_context::<ServerInfo>();
    let text = RwSignal::new(TEMPLATE.to_string());
    let pick = RwSignal::new(String::new());
    let message = RwSignal::new(None::<(bool, String)>);
    let saved = RwSignal::new(None::<String>);
    let add_card = move |_| {
        let card = pick.get_untracked();
        if !card.is_empty() {
            text.update(|t| *t += &format!("\n[[step]]\ntitle = \"{card}\"\ncard = \"{card}\"\nnote = \"\"\n"));
        }
    };
    let add_change = move |_| {
        text.update(|t| *t += "\n[[step]]\ntitle = \"no_grad on the MLP\"\nsetting = \"grad\"\nfrom = \"enabled\"\nto = \"no_grad\"\nmodel = \"tiny_mlp\"\nfigure = \"peak\"\nnote = \"\"\n")
    };
    let send = Callback::new(move |check: bool| {
        let body = Compose { toml: text.get_untracked(), check };
        message.set(None);
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            match crate::client::post_json::<_, Composed>("/api/learn", &body).await {
                Ok(Composed { url, steps }) => {
                    if check {
                        message.set(Some((true, format!("The path reads well: {steps} steps; it will be at {url}.", ))));
                    } else {
                        message.set(Some((true, "Saved.".into())));
                        saved.set(Some(url));
                    }
                }
                Err(m) => message.set(Some((false, m))),
            }
        });
        #[cfg(not(feature = "hydrate"))]
        let _ = (body, saved);
    });
    let cards = info.pitfalls.iter().map(|c| view! { <option value=c.id.clone()>{c.title.clone()}</option> }).collect_view();
    view! {
        {script}
        <div class="learn compose">
            <section class="tour">
                <h1>"Compose a path"</h1>
                <p>
                    "A path is written as the TOML a file in the server's " <code>"paths/"</code>
                    " folder holds (docs/guide.md has every field). Add steps from the cards, or a change of one setting (from → to on a model), write your own notes, check it, then save: it is served at "
                    <code>"/learn/{id}"</code>"."
                </p>
                {info.auth_required.then(|| view! { <TokenField /> })}
            </section>
            <div class="compose-tools">
                <label>"Card " <select on:change=move |ev| pick.set(event_target_value(&ev)) data-testid="compose-card">
                    <option value="">"choose a card…"</option>
                    {cards}
                </select></label>
                " " <button on:click=add_card>"Add the card as a step"</button>
                " " <button on:click=add_change>"Add a change of one setting"</button>
            </div>
            <label class="compose-text">"The path"
                <textarea rows="18" spellcheck="false" data-testid="compose-toml" prop:value=move || text.get() on:input=move |ev| text.set(event_target_value(&ev))></textarea>
            </label>
            <p>
                <button on:click=move |_| send.run(true) data-testid="compose-check">"Check"</button>
                " " <button class="primary" on:click=move |_| send.run(false) data-testid="compose-save">"Save"</button>
            </p>
            <div aria-live="polite">
                {move || message.get().map(|(ok, m)| view! { <p class=if ok { "explain" } else { "error" } data-testid="compose-message">{m}</p> })}
                {move || saved.get().map(|url| view! { <p><a href=url.clone() rel="external" data-testid="compose-link">{format!("Open {url}")}</a></p> })}
            </div>
        </div>
    }
}
