//! `/learn/{id}` and `/embed/learn/{id}`: a path's steps in order, each in two states as a
//! pitfall card is: first its question (the step's neutral title and note, what will be
//! measured, the question; "Lock in and run", or "Show the result without predicting"),
//! then the lesson (the card's claim, the lead's `after` note), the prediction beside the
//! measurement, the verdict and its permalink. Progress is kept in this browser: a step
//! done before opens in its lesson state, its answer back in its control.

use leptos::prelude::*;
use protocol::learn::{setting_text, LearnPath, Step, StepKind, StepOutcome, StepRequest};
use protocol::{Prediction, Scored, ServerInfo};

use crate::widgets::{outcome_view, rich_text, EmbedSnippet, TokenField};

/// Steps scored in this browser: (step from 1, what was scored).
type Progress = Vec<(usize, Scored)>;

#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn progress_key(id: &str) -> String {
    format!("gradless-learn-{id}")
}

#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn record(progress: &mut Progress, n: usize, scored: Scored) {
    progress.retain(|(m, _)| *m != n);
    progress.push((n, scored));
    progress.sort_by_key(|(m, _)| *m);
}

fn save(_id: &str, _progress: &Progress) {
    #[cfg(feature = "hydrate")]
    if let Some(s) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = s.set_item(&progress_key(_id), &serde_json::to_string(_progress).unwrap_or_default());
    }
}

#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
enum StepState {
    Idle,
    Running,
    Done(Box<StepOutcome>),
    Failed(String),
}

/// `/learn/{id}`.
#[component]
pub fn LearnRoute() -> impl IntoView {
    view! { <LearnPage embed=false /> }
}

/// `/embed/learn/{id}`: the path without the site's chrome, for a doc page.
#[component]
pub fn EmbedLearnRoute() -> impl IntoView {
    view! { <LearnPage embed=true /> }
}

#[component]
fn LearnPage(embed: bool) -> impl IntoView {
    let data = super::page_data();
    let script = super::data_script(&data);
    let Some(path) = data.path else {
        return view! { {script} <p class="error" role="alert">"There is no such path. " <a href="/learn" rel="external">"The paths this server has"</a></p> }.into_any();
    };
    let info = expect_context::<ServerInfo>();
    let progress = RwSignal::new(Progress::new());
    #[cfg(feature = "hydrate")]
    {
        let key = progress_key(&path.id);
        Effect::new(move |_| {
            let stored = web_sys::window()
                .and_then(|w| w.local_storage().ok().flatten())
                .and_then(|s| s.get_item(&key).ok().flatten())
                .and_then(|t| serde_json::from_str::<Progress>(&t).ok())
                .unwrap_or_default();
            progress.set(stored);
        });
    }
    let total = path.steps.len();
    let id = path.id.clone();
    let reset_id = id.clone();
    let reset = move |_| {
        progress.set(vec![]);
        save(&reset_id, &[].to_vec());
    };
    let summary = move || {
        progress.with(|p| {
            let right = p.iter().filter(|(_, s)| s.right == Some(true)).count();
            let predicted = p.iter().filter(|(_, s)| s.right.is_some()).count();
            format!("{} of {total} steps done · {right} of {predicted} predictions right", p.len())
        })
    };
    let answers_href = format!("/learn/{}/answers", path.id);
    let finished = {
        let answers_href = answers_href.clone();
        move || {
            (progress.with(|p| p.len()) == total).then(|| {
                view! {
                    <p class="finished" role="status" data-testid="path-finished">
                        <strong>"Path finished. "</strong>{summary()}". "
                        <a href=answers_href.clone() rel="external">"See what everyone predicted"</a>
                    </p>
                }
            })
        }
    };
    let embed_path = format!("/embed/learn/{}", path.id);
    let steps = path
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| view! { <StepCard path=path.clone() step=step.clone() n=i + 1 progress info=info.clone() /> })
        .collect_view();
    view! {
        {script}
        <div class="learn" class:embedded=embed>
            <section class="tour" aria-label="About this path">
                <h1>{path.title.clone()}</h1>
                {(!path.note.is_empty()).then(|| view! { <p class="claim">{rich_text(&path.note)}</p> })}
                <p class="progress-line">
                    <span data-testid="path-progress">{summary}</span>
                    " · " <button class="link" on:click=reset>"Start over"</button>
                </p>
                <p class="explain">"Your progress stays in this browser. A prediction you lock in is kept anonymously with the path's answers (no name, address or cookie); one run without predicting is not."</p>
                {info.auth_required.then(|| view! { <TokenField /> })}
            </section>
            <ol class="steps">{steps}</ol>
            {finished}
            {(!embed).then(|| view! {
                <div class="actions"><EmbedSnippet path=Signal::derive(move || embed_path.clone()) title="Gradless: an onboarding path, measured live" /></div>
            })}
        </div>
    }
    .into_any()
}

/// What a step runs, in words.
fn describe(step: &Step, info: &ServerInfo) -> String {
    match &step.kind {
        StepKind::Card { card, model, batch, .. } => {
            // The card's question, never its lesson's title: that would answer it.
            let asks = info.pitfalls.iter().find(|c| &c.id == card).map(|c| c.asks.clone()).unwrap_or_else(|| card.clone());
            let mut s = format!("The pitfall card “{asks}”");
            if let Some(m) = model {
                s += &format!(" on {}", m.display_name());
            }
            if let Some(b) = batch {
                s += &format!(", batch {b}");
            }
            s + ", measured on this server."
        }
        StepKind::Change { generate, model, setting, from, to, .. } => format!(
            "Two runs of the {} on {}: {setting} = {}, then {setting} = {}; everything else the same.",
            if *generate { "Generate page" } else { "Lab" },
            model.display_name(),
            setting_text(from),
            setting_text(to)
        ),
    }
}

#[component]
fn StepCard(path: LearnPath, step: Step, n: usize, progress: RwSignal<Progress>, info: ServerInfo) -> impl IntoView {
    let state = RwSignal::new(StepState::Idle);
    let Some(question) = step.question(&info.pitfalls) else {
        return view! { <li class="card step"><p class="error">{format!("Step {n}: this server has no such card.")}</p></li> }.into_any();
    };
    let key = format!("step{n}");
    let answered = RwSignal::new(false);
    let running = Signal::derive(move || state.with(|s| *s == StepState::Running));
    // The lesson shows once this step ran here (now, or on an earlier visit).
    let revealed = Signal::derive(move || state.with(|s| *s != StepState::Idle) || progress.with(|p| p.iter().any(|(m, _)| *m == n)));
    let restored = Signal::derive(move || {
        progress.with(|p| p.iter().find(|(m, _)| *m == n).map(|(_, s)| s.predicted)).filter(|p| *p != Prediction::Skipped)
    });
    let run_key = key.clone();
    let q = question.clone();
    let path_id = path.id.clone();
    let run = Callback::new(move |predicted: bool| {
        let prediction = if predicted { read_answer(&run_key, &q) } else { None }.unwrap_or(Prediction::Skipped);
        let request = StepRequest { prediction };
        state.set(StepState::Running);
        #[cfg(feature = "hydrate")]
        {
            let id = path_id.clone();
            leptos::task::spawn_local(async move {
                let url = format!("/api/learn/{id}/steps/{n}");
                match crate::client::post_json::<_, StepOutcome>(&url, &request).await {
                    Ok(outcome) => {
                        progress.update(|p| record(p, n, outcome.scored.clone()));
                        save(&id, &progress.get_untracked());
                        state.set(StepState::Done(Box::new(outcome)));
                    }
                    Err(m) => state.set(StepState::Failed(m)),
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (&path_id, request, progress);
    });
    let path_id2 = path.id.clone();
    let earlier = move || {
        (state.with(|s| *s == StepState::Idle))
            .then(|| progress.with(|p| p.iter().find(|(m, _)| *m == n).map(|(_, s)| s.clone())))
            .flatten()
            .map(|s| view! {
                <div class="outcome earlier" data-testid=format!("earlier-{n}")>
                    <p class="explain">"From your earlier visit:"</p>
                    <div inner_html=crate::prediction::scored_html(&s)></div>
                    <p class="explain"><a href=format!("/learn/{path_id2}/answers#answers-{n}") rel="external" data-testid="team-answers">"What the team predicted at this step"</a></p>
                </div>
            })
    };
    let answers_at = format!("/learn/{}/answers#answers-{n}", path.id);
    let result = move || {
        state.with(|s| match s {
            StepState::Idle => None,
            StepState::Running => Some(view! { <p class="verdict running" role="status">"Measuring on the server…"</p> }.into_any()),
            StepState::Failed(m) => Some(view! { <p class="error" role="alert">{m.clone()}</p> }.into_any()),
            StepState::Done(o) => Some(outcome(o, answers_at.clone()).into_any()),
        })
    };
    let card = match &step.kind {
        StepKind::Card { card, model: None, batch: None, .. } => info.pitfalls.iter().find(|c| &c.id == card).cloned(),
        StepKind::Card { card, .. } => info.pitfalls.iter().find(|c| &c.id == card).map(|c| protocol::PitfallInfo { setup: vec![], ..c.clone() }),
        StepKind::Change { .. } => None,
    };
    let claim = card.as_ref().map(|c| c.claim.clone());
    // What the card will measure, from its own settings (a step that picks its own model
    // or batch says so in `describe` instead).
    let setup = card.as_ref().filter(|c| !c.setup.is_empty()).map(|c| {
        let lines = c.setup.iter().map(|l| view! { <li>{l.clone()}</li> }).collect_view();
        view! { <div class="setup"><h3>"What is measured"</h3><ul>{lines}</ul></div> }
    });
    let not_here = card.as_ref().and_then(|c| c.not_here.clone()).map(|why| view! {
        <p class="not-here"><strong>"This server cannot show the effect. "</strong>{why}" Predict what a GPU would show: your answer is kept, and never graded against this server's figure."</p>
    });
    let after = step.after.clone();
    let lesson = move || revealed.get().then(|| view! {
        {claim.clone().map(|c| view! { <p class="claim" data-testid=format!("claim-step-{n}")>{rich_text(&c)}</p> })}
        {(!after.is_empty()).then(|| view! { <p class="lead-note">{rich_text(&after)}</p> })}
    });
    view! {
        <li class="card step" data-testid=format!("step-{n}")>
            <h2>{format!("Step {n}. {}", step.title)}</h2>
            {(!step.note.is_empty()).then(|| view! { <p class="lead-note">{rich_text(&step.note)}</p> })}
            <p class="explain">{describe(&step, &info)}</p>
            {setup}
            {not_here}
            {lesson}
            <crate::prediction::PredictControls question=question.clone() answered locked=Signal::derive(move || running.get() || revealed.get()) id=key.clone() restored />
            <button class="primary" data-testid=format!("lock-{n}") on:click=move |_| run.run(true) prop:disabled=move || running.get() || revealed.get() || !answered.get()>
                "Lock in and run"
            </button>
            " "
            <button data-testid=format!("skip-{n}") on:click=move |_| run.run(false) prop:disabled=running>
                {move || if revealed.get() { "Run again (not predicted)" } else { "Show the result without predicting" }}
            </button>
            <div aria-live="polite">{result}</div>
            {earlier}
        </li>
    }
    .into_any()
}

/// A step's result: the prediction against the measurement, then what measured it.
fn outcome(o: &StepOutcome, answers_at: String) -> impl IntoView + use<> {
    let scored = crate::prediction::scored_html(&o.scored);
    // Two timings of the same thing on screen (Gradless's and Python's): which one graded.
    let graded_by = o.report.as_ref().and_then(|r| r.graded_by()).map(|g| view! { <p class="explain graded-by" data-testid="graded-by">{g}</p> });
    let report = o.report.as_ref().map(|r| {
        // Its prediction is the one shown above, on its axis: not a second time.
        let r = &protocol::PitfallReport { prediction: None, ..(**r).clone() };
        let permalink = r.record_id.clone().map(|rid| view! {
            <p class="explain"><a href=format!("/runs/{rid}") rel="external">"Permalink to this result"</a></p>
        });
        view! { {outcome_view(r)}{permalink} }
    });
    let runs = (o.runs.len() == 2).then(|| {
        let unit = if o.scored.question.text.contains("latency") { "ms" } else { "bytes" };
        let shown = |v: f64| if unit == "bytes" { protocol::format_bytes(v as u64) } else { format!("{v:.3} ms") };
        let (before, after) = (shown(o.values[0]), shown(o.values[1]));
        view! {
            <p class="explain" data-testid="change-runs">
                {format!("Measured: {before} before, {after} after. The runs: ")}
                <a href=format!("/runs/{}", o.runs[0]) rel="external">"before"</a>", "
                <a href=format!("/runs/{}", o.runs[1]) rel="external">"after"</a>
            </p>
        }
    });
    let counted = o.counted.then(|| view! { <p class="explain">"Your prediction was added to the path's answers."</p> });
    // The team's answers hold the measured value: linked from a step once it is done.
    let team = view! {
        <p class="explain"><a href=answers_at rel="external" data-testid="team-answers">"What the team predicted at this step"</a></p>
    };
    view! { <div class="outcome" data-testid="step-outcome"><div inner_html=scored></div>{graded_by}{report}{runs}{counted}{team}</div> }
}

/// What step `key`'s controls hold now.
fn read_answer(_key: &str, _q: &protocol::Question) -> Option<Prediction> {
    #[cfg(feature = "hydrate")]
    {
        crate::prediction::read(_key, _q)
    }
    #[cfg(not(feature = "hydrate"))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_replaces_its_step_and_keeps_the_order() {
        let q = protocol::Question { text: "q".into(), figure: "f".into(), over: None, unit: "ratio".into(), ask: protocol::Ask::YesNo };
        let s = |p| q.score(p, &[protocol::Figure { name: "f".into(), value: 1.0, unit: "ratio".into() }]);
        let mut p = Progress::new();
        record(&mut p, 3, s(Prediction::Choice(protocol::Choice::No)));
        record(&mut p, 1, s(Prediction::Skipped));
        record(&mut p, 3, s(Prediction::Choice(protocol::Choice::Yes)));
        assert_eq!(p.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(p[1].1.right, Some(true));
        let back: Progress = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
