//! Predictions on the page: the controls that answer a card's question before its run
//! (a choice, or a log-scale slider), and the axis that shows the prediction beside the
//! measurement afterwards. Scoring is `protocol`'s, the same the server recorded.

use leptos::prelude::*;
use protocol::{Ask, Choice, Prediction, Question, Scored};

/// Slider steps: the position 0..=STEPS maps onto the question's log scale. Coarse enough
/// that an arrow key moves visibly (×1.08 a step on three decades), finer than any tolerance.
const STEPS: f64 = 90.0;

// The browser's Math, not Rust's libm: the wasm stays without a copy of it.
#[cfg(feature = "hydrate")]
use js_sys::Math::{exp, log as ln};
#[cfg(not(feature = "hydrate"))]
fn exp(x: f64) -> f64 {
    x.exp()
}
#[cfg(not(feature = "hydrate"))]
fn ln(x: f64) -> f64 {
    x.ln()
}

/// The value at slider position `t` of a log scale `min..max`.
fn at(min: f64, max: f64, t: f64) -> f64 {
    min * exp(ln(max / min) * t / STEPS)
}

/// Where `v` sits on a log scale `min..max`, in percent, clamped to the axis.
fn position(min: f64, max: f64, v: f64) -> f64 {
    (100.0 * ln(v / min) / ln(max / min)).clamp(0.0, 100.0)
}

/// The slider position of `v` on a log scale `min..max`.
fn step_of(min: f64, max: f64, v: f64) -> u32 {
    (position(min, max, v) * STEPS / 100.0).round() as u32
}

/// The question and its answer controls: native inputs inside one fieldset, read when the
/// run is started ([`read`]), so the page keeps no state per answer (the wasm's size
/// matters); `answered` turns true once a choice is picked or the slider is moved (it starts
/// at no answer: its value reads "not set" and its thumb is faint until then), and nothing
/// can be changed while `locked`. `restored`: an answer locked earlier in this browser,
/// put back into the controls.
#[component]
pub fn PredictControls(
    question: Question,
    answered: RwSignal<bool>,
    locked: Signal<bool>,
    id: String,
    #[prop(optional)] restored: Option<Signal<Option<Prediction>>>,
) -> impl IntoView {
    let choices: &[Choice] = match question.ask {
        Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. } => &[Choice::Lower, Choice::Same, Choice::Higher],
        Ask::YesNo => &[Choice::Yes, Choice::No],
        _ => &[],
    };
    let scale = match question.ask {
        Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. } => Some((min, max)),
        _ => None,
    };
    let q = question.clone();
    // The middle is an answer like any other: pressing the thumb where it sits (or a key on
    // it) picks it, so it never takes a move away and back.
    let unset = scale.map(|(min, max)| format!("not set: drag the slider, or press its thumb to pick {}", question.format(at(min, max, STEPS / 2.0)))).unwrap_or_default();
    let shown = RwSignal::new(unset);
    let restored = restored.unwrap_or_else(|| Signal::derive(|| None));
    let q2 = question.clone();
    // An answer put back: the controls show it, and it counts as answered.
    Effect::new(move |_| {
        if let Some(p) = restored.get() {
            answered.set(true);
            if let Prediction::Value(v) = p {
                shown.set(q2.format(v));
            }
        }
    });
    let name = format!("predict-{id}");
    let q3 = StoredValue::new(question.clone());
    // The slider pressed (or a key on it) without a move: its value now is the answer.
    let pick = move |value: String| {
        if locked.get_untracked() {
            return;
        }
        answered.set(true);
        if let (Some((min, max)), Ok(t)) = (scale, value.parse::<u32>()) {
            shown.set(q3.with_value(|q| q.format(at(min, max, f64::from(t)))));
        }
    };
    view! {
        <fieldset class="predict" data-testid=name.clone() prop:disabled=locked
            on:input=move |ev| {
                answered.set(true);
                // Integer steps: parsing them needs no float parser in the wasm.
                if let (Some((min, max)), Ok(t)) = (scale, event_target_value(&ev).parse::<u32>()) {
                    shown.set(q.format(at(min, max, f64::from(t))));
                }
            }
        >
            <legend>"Predict first"</legend>
            <p class="question">{question.text.to_string()}</p>
            <div class="answers">
                {choices.iter().map(|&c| view! {
                    <label class="choice"><input type="radio" name=name.clone() value=c.as_str()
                        prop:checked=move || restored.get() == Some(Prediction::Choice(c)) />{c.as_str()}</label>
                }).collect_view()}
                {scale.map(|(min, max)| view! {
                    <label class="scale" class:unset=move || !answered.get()>
                        <span class="ends">{question.format(min)}</span>
                        <input type="range" min="0" max=STEPS step="1" value=STEPS / 2.0 aria-label="Your prediction" data-testid=format!("predict-slider-{id}")
                            on:pointerdown=move |ev| pick(event_target_value(&ev)) on:keydown=move |ev| pick(event_target_value(&ev))
                            prop:value=move || match restored.get() {
                                Some(Prediction::Value(v)) => step_of(min, max, v).to_string(),
                                _ => (STEPS / 2.0).to_string(),
                            } />
                        <span class="ends">{question.format(max)}</span>
                        <output data-testid=format!("predict-value-{id}")>{move || shown.get()}</output>
                    </label>
                })}
            </div>
            <p class="explain">{format!("Counted right: {}.", question.tolerance())}</p>
        </fieldset>
    }
}

/// The answer in card `id`'s controls as the page shows it now: the slider's value or the
/// choice picked (none yet: `None`).
#[cfg(feature = "hydrate")]
pub fn read(id: &str, q: &Question) -> Option<Prediction> {
    use wasm_bindgen::JsCast;
    let selector = format!("[data-testid=predict-{id}] input:checked, [data-testid=predict-{id}] input[type=range]");
    let input: web_sys::HtmlInputElement = web_sys::window()?.document()?.query_selector(&selector).ok()??.dyn_into().ok()?;
    let value = input.value();
    match q.ask {
        Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. } => Some(Prediction::Value(at(min, max, f64::from(value.parse::<u32>().ok()?)))),
        _ => [Choice::Lower, Choice::Same, Choice::Higher, Choice::Yes, Choice::No]
            .into_iter()
            .find(|c| c.as_str() == value)
            .map(Prediction::Choice),
    }
}

/// Text for HTML markup.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Where a value sits on the axis, and which edge it is past: `(percent, None)` on it,
/// `(0 or 100, Some(false | true))` below or above, drawn at that edge with an arrow and
/// its number so ×21 is never read as the axis's ×10.
fn placed(min: f64, max: f64, v: f64) -> (f64, Option<bool>) {
    if v < min {
        (0.0, Some(false))
    } else if v > max {
        (100.0, Some(true))
    } else {
        (position(min, max, v), None)
    }
}

/// One marker on the axis: a dot, or past the axis an arrow at its edge with the value.
fn marker(class: &str, (at, past): (f64, Option<bool>), label: &str) -> String {
    match past {
        None => format!(r#"<span class="marker {class}" style="left:{at:.1}%"></span>"#),
        Some(above) => format!(
            r#"<span class="marker {class} past {}" style="left:{at:.1}%" data-testid="past-{class}">{}</span>"#,
            if above { "above" } else { "below" },
            if above { format!("{} →", escape(label)) } else { format!("← {}", escape(label)) }
        ),
    }
}

/// The prediction and the measurement on one axis, a marker each, headed by the grade
/// ("Your prediction: right", "… off by ×2.0", "… not graded here") as markup: one
/// element for the page to keep, whatever the question's kind. The claim's own verdict is
/// drawn apart from it (`widgets::outcome_view`).
pub fn scored_html(s: &Scored) -> String {
    let q = &s.question;
    // The axis: a log scale (min, max), and the predicted span on it.
    let (min, max, predicted) = match (q.ask, s.predicted) {
        (Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. }, p) => {
            (min, max, match p { Prediction::Value(v) => Some((v, v)), _ => None })
        }
        (Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. }, p) => {
            // Three equal thirds: lower, about the same, higher.
            let span = match p {
                Prediction::Choice(Choice::Lower) => Some((1.0, 10.0)),
                Prediction::Choice(Choice::Same) => Some((10.0, 100.0)),
                Prediction::Choice(Choice::Higher) => Some((100.0, 1000.0)),
                _ => None,
            };
            (1.0, 1000.0, span)
        }
        // yes / no: two halves, no before yes.
        (Ask::YesNo, p) => (1.0, 100.0, match p {
            Prediction::Choice(Choice::No) => Some((1.0, 10.0)),
            Prediction::Choice(Choice::Yes) => Some((10.0, 100.0)),
            _ => None,
        }),
    };
    let mut marks = String::new();
    if let Some((a, b)) = predicted {
        if a == b {
            marks += &marker("predicted", placed(min, max, a), &q.format(a));
        } else {
            let (a, b) = (position(min, max, a), position(min, max, b));
            marks += &format!(r#"<span class="span predicted" style="left:{a:.1}%;width:{:.1}%"></span>"#, b - a);
        }
    }
    if let Some(v) = s.measured {
        let at = match (q.ask, s.measured_band()) {
            (Ask::YesNo, _) => Some((if v > 0.0 { 75.0 } else { 25.0 }, None)),
            (Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. }, Some(Choice::Lower)) => Some((16.7, None)),
            (Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. }, Some(Choice::Higher)) => Some((83.3, None)),
            (Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. }, Some(_)) => Some((50.0, None)),
            // Not decided: the measurement is in no one band, so it marks none.
            (Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. }, None) => None,
            _ => Some(placed(min, max, v)),
        };
        if let Some(at) = at {
            marks += &marker("measured", at, &q.format(v));
        }
    }
    let class = match s.right {
        Some(true) => "scored right",
        Some(false) => "scored wrong",
        None => "scored",
    };
    let (lo, hi) = match q.ask {
        Ask::YesNo => ("no".to_string(), "yes".to_string()),
        Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. } => ("lower".to_string(), "higher".to_string()),
        _ => (q.format(min), q.format(max)),
    };
    let sentence = escape(&s.sentence());
    let said = sentence.trim_end_matches(": right").trim_end_matches(": wrong");
    // The legend names only what the axis marks: nothing predicted, no "predicted" dot.
    let legend = match (predicted.is_some(), marks.contains("measured")) {
        (true, true) => r#"<span class="dot predicted"></span> predicted <span class="dot measured"></span> measured"#,
        (true, false) => r#"<span class="dot predicted"></span> predicted"#,
        (false, true) => r#"<span class="dot measured"></span> measured"#,
        (false, false) => "",
    };
    format!(
        r#"<div class="{class}" data-testid="scored"><p><strong data-testid="grade">Your prediction: {}</strong> — {said}.</p><div class="axis" role="img" aria-label="{sentence}">{marks}</div><p class="axis-ends"><span>{}</span><span data-testid="axis-legend">{legend}</span><span>{}</span></p><p class="explain">Counted right: {}.</p></div>"#,
        escape(&s.grade()),
        escape(&lo),
        escape(&hi),
        escape(&q.tolerance()),
    )
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

    #[test]
    fn the_scored_axis_marks_both_and_escapes_its_text() {
        let q = Question {
            text: "a <b> & c?".into(),
            figure: "f".into(),
            over: None,
            unit: "ratio".into(),
            ask: Ask::LogScale { min: 0.01, max: 10.0, within: 2.0 },
        };
        let f = protocol::Figure { name: "f".into(), value: 0.1, unit: "ratio".into() };
        let html = scored_html(&q.score(Prediction::Value(1.0), &[f]));
        assert!(html.contains(r#"class="scored wrong""#) && html.contains("predicted ×1, measured ×0.1."), "{html}");
        assert!(html.contains("Your prediction: off by ×10.0"), "{html}");
        assert!(html.contains(r#"marker predicted" style="left:66.7%"#) && html.contains(r#"marker measured" style="left:33.3%"#), "{html}");
        assert!(!html.contains("<b>"));
        // Past the axis: at its edge, with an arrow and the number.
        let far = protocol::Figure { name: "f".into(), value: 21.3, unit: "ratio".into() };
        let html = scored_html(&q.score(Prediction::Value(4.0), &[far]));
        assert!(html.contains(r#"past above" style="left:100.0%" data-testid="past-measured">×21.3 →"#), "{html}");
    }

    /// Run without predicting: the axis marks the measurement alone, and its legend names
    /// nothing that is not on it (no "● predicted").
    #[test]
    fn an_unpredicted_run_shows_no_predicted_legend() {
        let q = Question { text: "q?".into(), figure: "f".into(), over: None, unit: "ratio".into(), ask: Ask::LogScale { min: 0.01, max: 10.0, within: 2.0 } };
        let f = protocol::Figure { name: "f".into(), value: 0.1, unit: "ratio".into() };
        let html = scored_html(&q.score(Prediction::Skipped, &[f.clone()]));
        assert!(!html.contains("predicted <") && !html.contains("dot predicted") && html.contains("dot measured"), "{html}");
        let html = scored_html(&q.score(Prediction::Value(0.2), &[f]));
        assert!(html.contains("dot predicted") && html.contains("dot measured"), "{html}");
    }

    /// A direction the noise cannot decide marks no band as measured and heads "not decided".
    #[test]
    fn an_undecided_direction_marks_no_band() {
        let q = Question { text: "q?".into(), figure: "a".into(), over: Some("b".into()), unit: "ratio".into(), ask: Ask::Direction { timed: true } };
        let (l, h) = q.interval_names();
        let fig = |n: &str, v: f64| protocol::Figure { name: n.into(), value: v, unit: "ratio".into() };
        let html = scored_html(&q.score(Prediction::Choice(Choice::Lower), &[fig("a", 0.78), fig("b", 1.0), fig(&l, 0.295), fig(&h, 2.06)]));
        assert!(html.contains("Your prediction: not decided") && !html.contains("marker measured"), "{html}");
    }
}
