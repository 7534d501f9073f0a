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

/// The question and its answer controls: native inputs inside one fieldset, read when the
/// run is started ([`read`]), so the page keeps no state per answer (the wasm's size
/// matters); `answered` turns true once a choice is picked (a slider always has a value),
/// and nothing can be changed while `locked`.
#[component]
pub fn PredictControls(question: Question, answered: RwSignal<bool>, locked: Signal<bool>, id: String) -> impl IntoView {
    let choices: &[Choice] = match question.ask {
        Ask::Choice { .. } => &[Choice::Lower, Choice::Same, Choice::Higher],
        Ask::YesNo => &[Choice::Yes, Choice::No],
        _ => &[],
    };
    let scale = match question.ask {
        Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. } => Some((min, max)),
        _ => None,
    };
    let q = question.clone();
    let shown = RwSignal::new(scale.map(|(min, max)| question.format(at(min, max, STEPS / 2.0))).unwrap_or_default());
    let name = format!("predict-{id}");
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
                {choices.iter().map(|c| view! { <label class="choice"><input type="radio" name=name.clone() value=c.as_str() />{c.as_str()}</label> }).collect_view()}
                {scale.map(|(min, max)| view! {
                    <label class="scale">
                        <span class="ends">{question.format(min)}</span>
                        <input type="range" min="0" max=STEPS step="1" value=STEPS / 2.0 aria-label="Your prediction" data-testid=format!("predict-slider-{id}") />
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

/// The prediction and the measurement on one axis, a marker each, with right or wrong, as
/// markup (one element for the page to keep, whatever the question's kind).
pub fn scored_html(s: &Scored) -> String {
    let q = &s.question;
    // The axis: a log scale (min, max), and the predicted span on it.
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
        // yes / no: two halves, no before yes.
        (Ask::YesNo, p) => (1.0, 100.0, match p {
            Prediction::Choice(Choice::No) => Some((1.0, 10.0)),
            Prediction::Choice(Choice::Yes) => Some((10.0, 100.0)),
            _ => None,
        }),
    };
    let mut marks = String::new();
    if let Some((a, b)) = predicted {
        let (a, b) = (position(min, max, a), position(min, max, b));
        let (class, width) = if b - a < 1.0 { ("marker", String::new()) } else { ("span", format!(";width:{:.1}%", b - a)) };
        marks += &format!(r#"<span class="{class} predicted" style="left:{a:.1}%{width}"></span>"#);
    }
    if let Some(v) = s.measured {
        let p = if q.ask == Ask::YesNo { if v > 0.0 { 75.0 } else { 25.0 } } else { position(min, max, v) };
        marks += &format!(r#"<span class="marker measured" style="left:{p:.1}%"></span>"#);
    }
    let (class, word) = match s.right {
        Some(true) => ("scored right", "Right"),
        Some(false) => ("scored wrong", "Wrong"),
        None => ("scored", "Not scored"),
    };
    let (lo, hi) = match q.ask {
        Ask::YesNo => ("no".to_string(), "yes".to_string()),
        _ => (q.format(min), q.format(max)),
    };
    let sentence = escape(&s.sentence());
    let said = sentence.trim_end_matches(": right").trim_end_matches(": wrong");
    format!(
        r#"<div class="{class}" data-testid="scored"><p><strong>{word}</strong> — {said} ({}).</p><div class="axis" role="img" aria-label="{sentence}">{marks}</div><p class="axis-ends"><span>{}</span><span><span class="dot predicted"></span> predicted <span class="dot measured"></span> measured</span><span>{}</span></p></div>"#,
        escape(&q.tolerance()),
        escape(&lo),
        escape(&hi)
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
        assert!(html.contains(r#"class="scored wrong""#) && html.contains("predicted ×1, measured ×0.1 ("), "{html}");
        assert!(html.contains(r#"marker predicted" style="left:66.7%"#) && html.contains(r#"marker measured" style="left:33.3%"#), "{html}");
        assert!(!html.contains("<b>"));
    }
}
