//! `/learn/{id}/answers`: what the learners who walked a path predicted, step by step — a
//! histogram of the predictions with the measured value's bar marked, the share right, and
//! the most common wrong answer; the answers as CSV. Computed by the server
//! (`protocol::learn::summarise`), drawn here as plain markup.

use leptos::prelude::*;
use protocol::learn::StepAnswers;

/// `/learn/{id}/answers`.
#[component]
pub fn AnswersRoute() -> impl IntoView {
    let data = super::page_data();
    let script = super::data_script(&data);
    let (Some(path), Some(view)) = (data.path, data.answers) else {
        return view! { {script} <p class="error" role="alert">"There is no such path. " <a href="/learn" rel="external">"The paths this server has"</a></p> }.into_any();
    };
    let csv = format!("/api/learn/{}/answers?format=csv", path.id);
    let steps = view.steps.iter().map(step_view).collect_view();
    view! {
        {script}
        <div class="learn answers">
            <section class="tour" aria-label="About these answers">
                <h1>{format!("What the team predicted: {}", path.title)}</h1>
                <p>
                    {format!("{} answer{} kept", view.kept, if view.kept == 1 { "" } else { "s" })}
                    {format!(" (at most {} per path: past that the oldest are dropped). ", view.max)}
                    "Each is a prediction locked in before its run, with what that run measured: no name, address or browser is kept. "
                    <a href=format!("/learn/{}", path.id) rel="external">"Walk the path"</a>" · "
                    <a href=csv rel="external" download="" data-testid="answers-csv">"Download the answers (CSV)"</a>
                </p>
            </section>
            <ol class="steps">{steps}</ol>
        </div>
    }
    .into_any()
}

fn step_view(s: &StepAnswers) -> impl IntoView + use<> {
    let most = s.bars.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    let share = if s.answers == 0 {
        "no answers yet".to_string()
    } else {
        format!("{} answer{}, {} right ({:.0}%)", s.answers, if s.answers == 1 { "" } else { "s" }, s.right, 100.0 * f64::from(s.right) / f64::from(s.answers))
    };
    let bars = s
        .bars
        .iter()
        .map(|b| {
            let width = format!("width:{:.1}%", 100.0 * f64::from(b.count) / f64::from(most));
            view! {
                <li class="bar-row" class:truth=b.truth>
                    <span class="bar-label">{b.label.clone()}{b.truth.then_some(" (right: the measured value)")}</span>
                    <span class="bar-track"><span class="bar" style=width></span></span>
                    <span class="bar-count">{b.count}</span>
                </li>
            }
        })
        .collect_view();
    let label = format!("Predictions at step {}", s.step);
    view! {
        <li class="card step" id=format!("answers-{}", s.step) data-testid=format!("answers-{}", s.step)>
            <h2>{format!("Step {}. {}", s.step, s.title)}</h2>
            <p class="question">{s.question.clone()}</p>
            <p data-testid=format!("share-{}", s.step)>
                <strong>{share}</strong>
                {s.measured.clone().map(|m| format!(" · measured (median of the runs): {m}"))}
            </p>
            <ul class="histogram" aria-label=label>{bars}</ul>
            {s.common_wrong.clone().map(|(answer, n)| view! {
                <p class="explain" data-testid=format!("common-wrong-{}", s.step)>{format!("Most common wrong answer: {answer} ({n})")}</p>
            })}
        </li>
    }
}
