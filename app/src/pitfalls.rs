//! The Pitfalls page: one card per lesson, in two states. First the question: a neutral
//! title, what will be measured, the two code variants under neutral labels (in the order
//! `PitfallInfo::fix_first` gives), and the
//! question to predict. Then, once the learner locks in (or asks for the lesson without
//! predicting), the lesson: the claim, why it happens (with the PyTorch doc it rests on),
//! the code that falls in and the code that avoids it, the rule, and a live experiment
//! whose verdict is computed from what it measured. Nothing shown before the lock-in gives
//! the answer away (`end2end/tests/unspoiled.spec.ts` reads the page's visible text).
//!
//! A guided tour walks the cards in order and remembers, in this browser, which ones were
//! run and what was predicted: a card answered before opens in its lesson state, its
//! answer back in its control. "Show every lesson" opens them all, for reading later. A
//! contents list (sticky beside the cards on wide screens) names every card with its
//! verdict once run.

use leptos::prelude::*;
use protocol::{PitfallInfo, PitfallReport, ServerInfo, Verdict};

use crate::widgets::{outcome_view, rich_text, EmbedSnippet, TokenField};

/// Where the tour's progress is kept in the browser.
#[cfg(feature = "hydrate")]
const TOUR_KEY: &str = "gradless-tour";
/// Where each card's locked answer is kept in the browser (`"skipped"`: the lesson was
/// opened without predicting).
#[cfg(feature = "hydrate")]
const ANSWERS_KEY: &str = "gradless-answers";

/// The answers locked in this browser, card by card.
type Answers = Vec<(String, protocol::Prediction)>;

fn answer_of(answers: &Answers, id: &str) -> Option<protocol::Prediction> {
    answers.iter().find(|(card, _)| card == id).map(|(_, p)| *p)
}

/// Keeps `p` as card `id`'s answer (a new lock-in replaces the old) and saves them all.
fn keep_answer(answers: RwSignal<Answers>, id: &str, p: protocol::Prediction) {
    answers.update(|a| match a.iter_mut().find(|(card, _)| card == id) {
        Some(entry) => entry.1 = p,
        None => a.push((id.to_string(), p)),
    });
    #[cfg(feature = "hydrate")]
    if let Some(storage) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = storage.set_item(ANSWERS_KEY, &serde_json::to_string(&answers.get_untracked()).unwrap_or_default());
    }
}

/// Whether card `id` has been answered (locked in, or its lesson opened) in this browser:
/// other pages hold back a figure that card asks for until then.
/// Read as text (the entry `["ID",` of the stored JSON): another page need not carry the
/// answers' deserializer for it.
#[cfg(feature = "hydrate")]
pub fn answered_here(id: &str) -> bool {
    web_sys::window()
        .and_then(|w| w.local_storage().ok().flatten())
        .and_then(|s| s.get_item(ANSWERS_KEY).ok().flatten())
        .is_some_and(|text| text.contains(&format!("[\"{id}\",")))
}

/// The answers kept in this browser (none on the server, or when unreadable).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn stored_answers() -> Answers {
    #[cfg(feature = "hydrate")]
    if let Some(text) = web_sys::window()
        .and_then(|w| w.local_storage().ok().flatten())
        .and_then(|s| s.get_item(ANSWERS_KEY).ok().flatten())
    {
        return serde_json::from_str(&text).unwrap_or_default();
    }
    Answers::new()
}

/// What the cards of one page share: the tour's progress, the answers kept, and whether
/// every lesson was opened at once.
#[derive(Clone, Copy)]
struct Shared {
    done: RwSignal<Tour>,
    answers: RwSignal<Answers>,
    reveal_all: RwSignal<bool>,
}

impl Shared {
    fn new() -> Shared {
        let shared = Shared { done: RwSignal::new(Tour::new()), answers: RwSignal::new(Answers::new()), reveal_all: RwSignal::new(false) };
        // Read once the page is live: the server rendered every card in its question state.
        #[cfg(feature = "hydrate")]
        Effect::new(move |_| shared.answers.set(stored_answers()));
        shared
    }

    /// Whether card `id` shows its lesson.
    fn revealed(self, id: &str) -> bool {
        self.reveal_all.get() || self.answers.with(|a| answer_of(a, id).is_some())
    }
}

// Only the browser build reaches Done and Failed: experiments run from a click.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
#[derive(Clone, Debug, PartialEq)]
enum CardState {
    Idle,
    Running,
    Done(Box<PitfallReport>),
    Failed(String),
}

#[component]
pub fn PitfallsPage() -> impl IntoView {
    crate::cards::with_cards(|cards| view! { <PitfallsTour cards /> })
}

#[component]
fn PitfallsTour(cards: Vec<PitfallInfo>) -> impl IntoView {
    let info = expect_context::<ServerInfo>();
    let auth_required = info.auth_required;
    let total = cards.len();
    let shared = Shared::new();
    let done = shared.done;
    #[cfg(feature = "hydrate")]
    {
        // Progress lives in localStorage; read it once the page is live.
        Effect::new(move |_| {
            let stored = web_sys::window()
                .and_then(|w| w.local_storage().ok().flatten())
                .and_then(|s| s.get_item(TOUR_KEY).ok().flatten())
                .map(|t| parse_tour(&t))
                .unwrap_or_default();
            done.set(stored);
        });
    }
    // The tour names each card by its question: its title would answer it.
    let order: Vec<(String, String)> = cards
        .iter()
        .map(|c| (c.id.clone(), c.asks.clone()))
        .collect();
    let next = move || done.with(|d| order.iter().find(|(id, _)| !ran(d, id)).cloned());
    let reset = move |_| {
        done.set(vec![]);
        save_progress(&[]);
    };
    let contents = cards
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let id = c.id.clone();
            let (title, asks, shown_id) = (c.title.clone(), c.asks.clone(), c.id.clone());
            let name = move || format!("{}. {}", index + 1, if shared.revealed(&shown_id) { &title } else { &asks });
            let verdict = move || {
                done.with(|d| d.iter().find(|(done_id, _)| *done_id == id).map(|(_, v)| *v))
                    .map(|v| match v {
                        Some(v) => {
                            let (class, word) = verdict_mark(v);
                            view! { <span class=class>{word}</span> }.into_any()
                        }
                        None => view! { <span class="mark ran">"run"</span> }.into_any(),
                    })
            };
            view! {
                <li>
                    <a href=format!("#{}", c.id) data-testid=format!("contents-{}", c.id)>{name}</a>
                    " "
                    {verdict}
                </li>
            }
        })
        .collect_view();
    // On a narrow screen the list is folded under its heading (forty-odd questions would
    // push the first card screens down); beside the cards on a wide one it is always open.
    let contents_open = RwSignal::new(false);
    view! {
        <div class="pitfalls-page">
        <nav class="contents" class:open=contents_open aria-label="Pitfall cards" data-testid="contents">
            <h2>
                "Cards"
                <button class="link contents-toggle" data-testid="contents-toggle" aria-controls="contents-list"
                    aria-expanded=move || contents_open.get().to_string()
                    on:click=move |_| contents_open.update(|o| *o = !*o)>
                    {move || if contents_open.get() { "hide the list".to_string() } else { format!("show all {total}") }}
                </button>
            </h2>
            <ol id="contents-list">{contents}</ol>
        </nav>
        <div class="pitfalls">
            <section class="tour" data-testid="tour" aria-label="Guided tour">
                <h1>"Pitfalls, tested live"</h1>
                <p>
                    "Each card states a claim about PyTorch's inference settings and tests it on this server's hardware. The verdict comes from the measured figures by the rule shown under each card: "
                    <strong>"confirmed"</strong>", "<strong>"refuted"</strong>" (it did not hold here) or "<strong>"not applicable"</strong>" (the effect needs other hardware)."
                </p>
                <p class="progress-line">
                    <span data-testid="tour-progress">{move || format!("Guided tour: {} of {total} cards run", done.with(|d| d.len()))}</span>
                    {move || next().map(|(id, title)| view! { " · " <a href=format!("#{id}") data-testid="tour-next">{format!("Next: {title}")}</a> })}
                    " · " <button class="link" on:click=reset>"Start over"</button>
                </p>
                <p class="explain">
                    "Each card first asks its question: what is measured, the two pieces of code, and your prediction. Its lesson (the claim, why, and which code is the mistake) opens when you lock in, or when you ask for it. "
                    <button class="link" data-testid="reveal-all" on:click=move |_| shared.reveal_all.set(true)>"Show every lesson"</button>
                    " (for reading: nothing is predicted or run)."
                </p>
                {auth_required.then(|| view! { <TokenField /> })}
            </section>
            {cards
                .into_iter()
                .enumerate()
                .map(|(index, card)| view! { <PitfallCard card index shared /> })
                .collect_view()}
        </div>
        </div>
    }
}

/// `/embed/pitfalls/{id}`: one card, for a doc page.
#[component]
pub fn EmbedPitfallPage() -> impl IntoView {
    let id = leptos_router::hooks::use_params_map()
        .with_untracked(|p| p.get("id"))
        .unwrap_or_default();
    crate::cards::with_cards(move |cards| embedded_card(&cards, &id))
}

fn embedded_card(cards: &[PitfallInfo], id: &str) -> AnyView {
    let shared = Shared::new();
    // An old id (`PitfallInfo::aliases`) still embeds its card: pages that embed one keep working.
    match cards.iter().position(|c| c.id == id || c.aliases.iter().any(|a| a == id)) {
        Some(index) => {
            let card = cards[index].clone();
            view! { <div class="pitfalls embedded"><PitfallCard card index shared embedded=true /></div> }.into_any()
        }
        None => view! { <p class="error" role="alert">{format!("There is no pitfall card “{id}”.")}</p> }.into_any(),
    }
}

/// The cards run in this browser, in the order they were run, each with the verdict it got
/// (unknown for progress saved before verdicts were kept).
type Tour = Vec<(String, Option<Verdict>)>;

fn ran(tour: &Tour, id: &str) -> bool {
    tour.iter().any(|(done, _)| done == id)
}

/// Reads saved progress: today's `[[id, verdict], ...]`, or the older list of ids.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn parse_tour(text: &str) -> Tour {
    serde_json::from_str::<Tour>(text)
        .or_else(|_| {
            serde_json::from_str::<Vec<String>>(text)
                .map(|ids| ids.into_iter().map(|id| (id, None)).collect())
        })
        .unwrap_or_default()
}

/// Records that card `id` ran with `verdict` (a rerun replaces the verdict, keeps its place).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn record_run(tour: &mut Tour, id: &str, verdict: Verdict) {
    match tour.iter_mut().find(|(done, _)| done == id) {
        Some(entry) => entry.1 = Some(verdict),
        None => tour.push((id.to_string(), Some(verdict))),
    }
}

/// How a verdict reads on the card's heading: the word, never a bare tick, so "not
/// applicable" cannot be taken for a pass.
fn verdict_mark(verdict: Verdict) -> (&'static str, &'static str) {
    match verdict {
        Verdict::Confirmed => ("mark confirmed", "confirmed"),
        Verdict::Refuted => ("mark refuted", "refuted here"),
        Verdict::NotApplicable => ("mark na", "not applicable here"),
        Verdict::Inconclusive => ("mark inconclusive", "inconclusive here"),
    }
}

fn save_progress(_done: &[(String, Option<Verdict>)]) {
    #[cfg(feature = "hydrate")]
    if let Some(storage) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = storage.set_item(TOUR_KEY, &serde_json::to_string(_done).unwrap_or_default());
    }
}

/// What card `id`'s controls hold when its run starts (nothing when run without predicting).
fn read_answer(predicted: bool, _id: &str, _question: &protocol::Question) -> Option<protocol::Prediction> {
    #[cfg(feature = "hydrate")]
    if predicted {
        return crate::prediction::read(_id, _question);
    }
    let _ = predicted;
    None
}

#[component]
fn PitfallCard(
    card: PitfallInfo,
    index: usize,
    shared: Shared,
    /// Shown inside another page: no Embed button of its own.
    #[prop(optional)]
    embedded: bool,
) -> impl IntoView {
    let state = RwSignal::new(CardState::Idle);
    let done = shared.done;
    let id = card.id.clone();
    let revealed_id = id.clone();
    let revealed = Signal::derive(move || shared.revealed(&revealed_id));
    let restored_id = id.clone();
    let restored = Signal::derive(move || shared.answers.with(|a| answer_of(a, &restored_id)).filter(|p| *p != protocol::Prediction::Skipped));
    let chart_id = format!("pitfall-chart-{id}");
    #[cfg(feature = "hydrate")]
    {
        let chart_id = chart_id.clone();
        Effect::new(move |_| {
            state.with(|s| {
                if let CardState::Done(report) = s {
                    if let Some(chart) = crate::charts::pitfall_chart(report) {
                        crate::charts::render(chart_id.clone(), chart);
                    }
                    if let Some(chart) = crate::charts::named_traces_chart(&report.traces) {
                        crate::charts::render(format!("{chart_id}-trace"), chart);
                    }
                }
            })
        });
    }
    // batch-scaling sweeps up to a memory budget: the device's own by default, or a card's.
    let budget = RwSignal::new(None::<u64>);
    let budget_picker = (card.id == "batch-scaling").then(|| {
        let presets: [(&str, Option<u64>); 5] = [
            ("this device (free memory; 160 MiB on a CPU)", None),
            ("1 GiB", Some(1 << 30)),
            ("16 GiB card", Some(16 << 30)),
            ("24 GiB card", Some(24 << 30)),
            ("80 GiB card", Some(80 << 30)),
        ];
        view! {
            <label class="budget">
                "Memory budget "
                <select
                    data-testid="budget"
                    on:change=move |ev| budget.set(event_target_value(&ev).parse::<u64>().ok())
                >
                    {presets
                        .into_iter()
                        .map(|(label, bytes)| view! { <option value=bytes.map(|b| b.to_string()).unwrap_or_default()>{label}</option> })
                        .collect_view()}
                </select>
            </label>
        }
    });
    // Nothing is answered until a choice is picked or the slider is moved.
    let answered = RwSignal::new(false);
    let question = card.question.clone();
    let run_id = id.clone();
    // Locking in and running are one request: the server scores what it was sent with.
    // One callback for every button: its future is compiled once, not once per button.
    // `predicted`: the lock-in (the answer in the controls is sent and kept); otherwise the
    // run is sent as not predicted (the lesson is on screen by then, or is being opened).
    let run = Callback::new(move |predicted: bool| {
        let id = run_id.clone();
        let prediction = match read_answer(predicted, &id, &question) {
            Some(p) => p,
            None => protocol::Prediction::Skipped,
        };
        if predicted || !revealed.get_untracked() {
            keep_answer(shared.answers, &id, prediction);
        }
        let options = protocol::PitfallOptions {
            budget_bytes: budget.get_untracked(),
            prediction: Some(prediction),
            ..Default::default()
        };
        state.set(CardState::Running);
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            let url = format!("/api/pitfalls/{id}");
            match crate::client::post_json::<_, PitfallReport>(&url, &options).await {
                Ok(report) => {
                    // Progress first: it must count even if showing the result goes wrong.
                    done.update(|d| record_run(d, &id, report.verdict));
                    save_progress(&done.get_untracked());
                    state.set(CardState::Done(Box::new(report)));
                }
                Err(message) => state.set(CardState::Failed(message)),
            }
        });
        #[cfg(not(feature = "hydrate"))]
        let _ = (id, done, options);
    });
    let running = Signal::derive(move || state.with(|s| *s == CardState::Running));
    let verdict_view = move || {
        state.with(|s| match s {
            CardState::Idle => None,
            CardState::Running => Some(view! { <p class="verdict running">"Measuring on the server…"</p> }.into_any()),
            CardState::Failed(m) => Some(view! { <p class="error" role="alert">{m.clone()}</p> }.into_any()),
            CardState::Done(r) => {
                let permalink = r.record_id.clone().map(|rid| {
                    view! {
                        <p class="explain">
                            <a href=format!("/runs/{rid}") rel="external" data-testid=format!("permalink-{}", r.id)>"Permalink to this result"</a>
                            " (recorded: it shows these figures without running again)"
                        </p>
                    }
                });
                Some(view! { <div class="outcome">{outcome_view(r)}{permalink}</div> }.into_any())
            }
        })
    };
    let has_chart = move || {
        state.with(|s| matches!(s, CardState::Done(r) if crate::charts::pitfall_chart(r).is_some()))
    };
    let seen_id = id.clone();
    let show_id = id.clone();
    let button_id = id.clone();
    let setup = card.setup.iter().map(|line| view! { <li>{line.clone()}</li> }).collect_view();
    let label = |i: usize| card.labels.get(i).cloned().unwrap_or_default();
    // The two variants in the card's own order (`fix_first`, fixed by its id): "A" and "B"
    // before the lock-in, "Falls in" / "Avoids it" after it.
    let mut variants = [("Falls in", label(0), card.python_pitfall.clone()), ("Avoids it", label(1), card.python_fix.clone())];
    if card.fix_first {
        variants.swap(0, 1);
    }
    let [(lesson_a, label_a, code_a), (lesson_b, label_b, code_b)] = variants;
    let not_here = card.not_here.clone().map(|why| view! {
        <p class="not-here" data-testid=format!("not-here-{}", card.id)>
            <strong>"This server cannot show the effect. "</strong>{why}
            " Predict what a GPU would show: your answer is kept, and never graded against this server's figure."
        </p>
    });
    // The lesson's parts, rendered only once the learner has predicted (or asked for it).
    let lesson_top = {
        let (claim, why, source) = (card.claim.clone(), card.why.clone(), card.source.clone());
        let statements = card.statements.clone();
        move || revealed.get().then(|| {
            let explained = if statements.is_empty() {
                view! { <p class="explain">{rich_text(&why)}" "<a href=source.clone() target="_blank" rel="noopener">"PyTorch docs"</a></p> }.into_any()
            } else {
                let items = statements.iter().map(|s| {
                    let (kind, how) = known_badge(&s.known);
                    view! {
                        <li class=format!("known-{kind}")>
                            {rich_text(&s.text)}" "
                            <span class="known" title=s.known.describe()>{how}</span>
                        </li>
                    }
                }).collect_view();
                view! {
                    <ul class="statements" data-testid=format!("statements-{show_id}")>{items}</ul>
                    <p class="explain"><a href=source.clone() target="_blank" rel="noopener">"PyTorch docs"</a></p>
                }.into_any()
            };
            view! {
                <p class="claim" data-testid=format!("claim-{show_id}")>{rich_text(&claim)}</p>
                {explained}
            }
        })
    };
    let threshold = card.threshold.clone();
    let (title, asks) = (card.title.clone(), card.asks.clone());
    let embed_path = format!("/embed/pitfalls/{}", card.id);
    let buttons = move || {
        let id = button_id.clone();
        if revealed.get() {
            view! {
                <button class="primary" data-testid=format!("rerun-{id}") on:click=move |_| run.run(false) prop:disabled=running>
                    "Run the experiment"
                </button>
            }
            .into_any()
        } else {
            view! {
                <button
                    class="primary"
                    data-testid=format!("run-{id}")
                    on:click=move |_| run.run(true)
                    prop:disabled=move || running.get() || !answered.get()
                >
                    "Lock in and run"
                </button>
                " "
                <button data-testid=format!("skip-{id}") on:click=move |_| run.run(false) prop:disabled=running>
                    "Show the lesson without predicting"
                </button>
            }
            .into_any()
        }
    };
    view! {
        <article class="card" id=card.id.clone() data-testid=format!("card-{}", card.id) class:lesson=move || revealed.get()>
            // Links made with an id the card had before still land here.
            {card.aliases.iter().map(|a| view! { <span id=a.clone()></span> }).collect_view()}
            <h2>
                {move || format!("{}. {}", index + 1, if revealed.get() { &title } else { &asks })}
                {move || {
                    done.with(|d| d.iter().find(|(id, _)| *id == seen_id).map(|(_, v)| *v)).map(|verdict| {
                        let verdict = verdict.map(|v| {
                            let (class, word) = verdict_mark(v);
                            view! { " " <span class=class data-testid=format!("mark-{seen_id}")>{word}</span> }
                        });
                        view! {
                            " "
                            <span class="mark ran" title="this card's experiment was run in this browser" data-testid=format!("ran-{seen_id}")>"run"</span>
                            {verdict}
                        }
                    })
                }}
            </h2>
            {lesson_top}
            <div class="setup" data-testid=format!("setup-{}", card.id)>
                <h3>"What is measured"</h3>
                <ul>{setup}</ul>
            </div>
            {not_here}
            <div class="code-pair">
                <div>
                    <h3>{move || if revealed.get() { lesson_a } else { "A" }}": "{label_a}</h3>
                    <pre tabindex="0"><code>{code_a}</code></pre>
                </div>
                <div>
                    <h3>{move || if revealed.get() { lesson_b } else { "B" }}": "{label_b}</h3>
                    <pre tabindex="0"><code>{code_b}</code></pre>
                </div>
            </div>
            {budget_picker}
            <crate::prediction::PredictControls question=card.question.clone() answered locked=Signal::derive(move || running.get() || revealed.get()) id=card.id.clone() restored />
            {buttons}
            <crate::fleet::FleetPitfall id=card.id.clone() />
            {verdict_view}
            <div id=chart_id.clone() class="chart" class:hidden=move || !has_chart()></div>
            <div
                id=format!("{chart_id}-trace")
                class="chart tall"
                data-testid=format!("trace-{}", card.id)
                class:hidden=move || !state.with(|s| matches!(s, CardState::Done(r) if !r.traces.is_empty()))
            ></div>
            {move || revealed.get().then(|| view! {
                <details class="rule">
                    <summary>"How the verdict is decided"</summary>
                    <p>{threshold.clone()}</p>
                </details>
            })}
            <div class="actions">
                {(!embedded).then(|| view! {
                    <EmbedSnippet path=Signal::derive(move || embed_path.clone()) title="Gradless: a pitfall, tested live" />
                })}
            </div>
        </article>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_saved_before_verdicts_were_kept_still_counts() {
        let tour = parse_tour(r#"["warm-up","eval-and-autograd"]"#);
        assert_eq!(tour.len(), 2);
        assert!(ran(&tour, "warm-up") && tour.iter().all(|(_, v)| v.is_none()));
        assert!(parse_tour("not json").is_empty());
    }

    #[test]
    fn a_rerun_replaces_its_verdict_and_keeps_the_count() {
        let mut tour = Tour::new();
        record_run(&mut tour, "empty-cache", Verdict::NotApplicable);
        record_run(&mut tour, "warm-up", Verdict::Refuted);
        record_run(&mut tour, "warm-up", Verdict::Confirmed);
        assert_eq!(tour.len(), 2);
        let saved = serde_json::to_string(&tour).unwrap();
        let back = parse_tour(&saved);
        assert_eq!(back, tour);
        assert_eq!(back[1], ("warm-up".to_string(), Some(Verdict::Confirmed)));
        // "Not applicable" never reads like a pass.
        assert_ne!(
            verdict_mark(Verdict::NotApplicable).1,
            verdict_mark(Verdict::Confirmed).1
        );
    }
}

/// How a lesson's statement is known, as its badge reads: a class suffix and the words.
fn known_badge(known: &protocol::Known) -> (&'static str, String) {
    match known {
        protocol::Known::Run { .. } => ("run", "measured in this run".into()),
        protocol::Known::Pytorch { .. } => ("pytorch", "observed in PyTorch by Gradless's tests".into()),
        protocol::Known::Source { file, .. } => {
            let name = file.rsplit('/').next().unwrap_or(file);
            ("source", format!("PyTorch source ({name}); measured on a GPU by the GPU check"))
        }
    }
}
