//! Predictions on the page: the controls that answer a card's question before its run
//! (a choice, or a log-scale slider), and the axis that shows the prediction beside the
//! measurement afterwards. Scoring is `protocol`'s, the same the server recorded.

use leptos::prelude::*;
use protocol::{Ask, Choice, Prediction, Question, Scored};

/// Slider steps: the position 0..=STEPS maps onto the question's log scale. Coarse enough
/// that an arrow key moves visibly (×1.08 a step on three decades), finer than any tolerance.
const STEPS: f64 = 90.0;

/// The value at slider position `t` of a log scale `min..max`.
fn at(min: f64, max: f64, t: f64) -> f64 {
    min * (max / min).powf(t / STEPS)
}

/// Where `v` sits on a log scale `min..max`, in percent, clamped to the axis.
fn position(min: f64, max: f64, v: f64) -> f64 {
    (100.0 * (v / min).ln() / (max / min).ln()).clamp(0.0, 100.0)
}

/// The answer a question starts with: the middle of a scale (a slider always has a
/// value), nothing for a choice (one must be picked before locking in).
pub fn initial(q: &Question) -> Option<Prediction> {
    match q.ask {
        Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. } => Some(Prediction::Value(at(min, max, STEPS / 2.0))),
        _ => None,
    }
}

/// The question and its answer controls; `answer` holds what is chosen (none yet for a
/// choice), and nothing can be changed while `locked`.
#[component]
pub fn PredictControls(question: Question, answer: RwSignal<Option<Prediction>>, locked: Signal<bool>, id: String) -> impl IntoView {
    let choices: &[Choice] = match question.ask {
        Ask::Choice { .. } => &[Choice::Lower, Choice::Same, Choice::Higher],
        Ask::YesNo => &[Choice::Yes, Choice::No],
        _ => &[],
    };
    let control = match question.ask {
        Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. } => {
            let q = question.clone();
            let shown = move || match answer.get() {
                Some(Prediction::Value(v)) => q.format(v),
                _ => "move the slider".into(),
            };
            view! {
                <label class="scale">
                    <span class="ends">{question.format(min)}</span>
                    <input type="range" min="0" max=STEPS step="1" value=STEPS / 2.0
                        aria-label="Your prediction" data-testid=format!("predict-slider-{id}")
                        prop:disabled=locked
                        on:input=move |ev| answer.set(event_target_value(&ev).parse::<f64>().ok().map(|t| Prediction::Value(at(min, max, t))))
                    />
                    <span class="ends">{question.format(max)}</span>
                    <output data-testid=format!("predict-value-{id}")>{shown}</output>
                </label>
            }
            .into_any()
        }
        _ => {
            let name = format!("predict-{id}");
            choices
                .iter()
                .map(|&c| {
                    let name = name.clone();
                    view! {
                        <label class="choice">
                            <input type="radio" name=name value=c.as_str() prop:disabled=locked
                                prop:checked=move || answer.get() == Some(Prediction::Choice(c))
                                on:change=move |_| answer.set(Some(Prediction::Choice(c)))
                            />
                            {c.as_str()}
                        </label>
                    }
                })
                .collect_view()
                .into_any()
        }
    };
    view! {
        <fieldset class="predict" data-testid=format!("predict-{id}")>
            <legend>"Predict first"</legend>
            <p class="question">{question.text.to_string()}</p>
            <div class="answers">{control}</div>
            <p class="explain">{format!("Counted right: {}.", question.tolerance())}</p>
        </fieldset>
    }
}

/// The prediction and the measurement on one axis, a marker each, with the verdict.
pub fn scored_view(s: &Scored) -> impl IntoView + use<> {
    let q = &s.question;
    let m = s.measured;
    // The axis: (min, max) of a log scale, and the predicted span on it.
    let (min, max, predicted) = match (q.ask, s.predicted) {
        (Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. }, p) => {
            (min, max, match p { Prediction::Value(v) => Some((v, v)), _ => None })
        }
        (Ask::Choice { below, above }, p) => {
            let (lo, hi) = (below / 4.0, above * 4.0);
            let span = match p {
                Prediction::Choice(Choice::Lower) => Some((lo, below)),
                Prediction::Choice(Choice::Same) => Some((below, above)),
                Prediction::Choice(Choice::Higher) => Some((above, hi)),
                _ => None,
            };
            (lo, hi, span)
        }
        // yes / no: two halves, no above yes.
        (Ask::YesNo, p) => (1.0, 100.0, match p {
            Prediction::Choice(Choice::No) => Some((1.0, 10.0)),
            Prediction::Choice(Choice::Yes) => Some((10.0, 100.0)),
            _ => None,
        }),
    };
    let measured_at = m.map(|v| match q.ask {
        Ask::YesNo => if v > 0.0 { 75.0 } else { 25.0 },
        _ => position(min, max, v),
    });
    let predicted = predicted.map(|(a, b)| {
        let (a, b) = (position(min, max, a), position(min, max, b));
        let style = if b - a < 1.0 { format!("left:{a:.1}%") } else { format!("left:{a:.1}%;width:{:.1}%", b - a) };
        let class = if b - a < 1.0 { "marker predicted" } else { "span predicted" };
        view! { <span class=class style=style title=format!("predicted {}", s.predicted_text())></span> }
    });
    let (class, word) = match s.right {
        Some(true) => ("scored right", "Right"),
        Some(false) => ("scored wrong", "Wrong"),
        None => ("scored", "Not scored"),
    };
    let ends = match q.ask {
        Ask::YesNo => ("no".to_string(), "yes".to_string()),
        _ => (q.format(min), q.format(max)),
    };
    view! {
        <div class=class data-testid="scored">
            <p><strong>{word}</strong>" — "{s.sentence().trim_end_matches(": right").trim_end_matches(": wrong").to_string()}{format!(" ({}).", q.tolerance())}</p>
            <div class="axis" role="img" aria-label=s.sentence()>
                {predicted}
                {measured_at.map(|p| view! { <span class="marker measured" style=format!("left:{p:.1}%") title="measured"></span> })}
            </div>
            <p class="axis-ends"><span>{ends.0}</span><span class="key"><span class="dot predicted"></span>" predicted "<span class="dot measured"></span>" measured"</span><span>{ends.1}</span></p>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slider_and_the_axis_share_one_log_scale() {
        assert!((at(0.01, 10.0, 0.0) - 0.01).abs() < 1e-12);
        assert!((at(0.01, 10.0, STEPS) - 10.0).abs() < 1e-9);
        let mid = at(0.01, 10.0, STEPS / 2.0);
        assert!((position(0.01, 10.0, mid) - 50.0).abs() < 1e-9);
        assert_eq!(position(0.01, 10.0, 100.0), 100.0);
    }
}
