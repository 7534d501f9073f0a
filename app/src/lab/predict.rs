//! Predict, then measure, in the Lab and on the Generate page: once a run is on the charts
//! and the reader changes exactly one setting, the page asks what the change will do to
//! peak memory and to p50 (per token, for a generation) before the next run, then scores
//! both against the two runs. The questions are the
//! onboarding paths' own for a change of one setting ([`protocol::learn`]): "lower / about
//! the same / higher", graded as the page reads the two runs: memory exactly (it repeats to
//! the byte), latency by the comparison's noise interval, "about the same" when the change
//! is within the runs' noise. Answering is optional: Run without a choice runs as before.
//! While a prediction is asked, the changed setting's explanation stays folded until the
//! run. Nothing is sent: these predictions live on the page.
//!
//! The box and the scoring are lazy functions (their own wasm chunk, as the embed dialog's):
//! fetched once a run is on the charts, so a cold visit to the Lab does not carry them.

use leptos::prelude::*;
use protocol::learn::{ChangeFigure, Step, StepKind};
use protocol::settings::SettingId;
use protocol::{Prediction, Question, Report, RunSpec, Scored};


/// Settings that are not a lesson's change: where the run goes (device, threads) and how
/// long it is timed (warm-up, iterations). The model is no setting of a model, and neither
/// what a generation is fed (its text) nor the quality measurement beside it.
const NOT_A_CHANGE: [SettingId; 7] = [
    SettingId::Device,
    SettingId::Threads,
    SettingId::Warmup,
    SettingId::Iters,
    SettingId::Model,
    SettingId::PromptText,
    SettingId::Quality,
];

/// The one setting that differs between `before` (the run on the charts) and `now` (the
/// settings shown), as `(setting, from, to)`: the address's key and its values as the
/// page's controls hold them (a setting left at its default reads as that default, never
/// "unset"; one that applies only with another's value follows it). `None` when none or
/// more than one differ, or when the model does. A count the page leaves to the run (the
/// input size, a text prompt's length) is no change while one side leaves it.
pub fn one_change(now: &RunSpec, before: &RunSpec, generate: bool) -> Option<(String, String, String)> {
    use protocol::settings::{on_page, Page, SETTINGS};
    if now.model != before.model {
        return None;
    }
    let page = if generate { Page::Generate } else { Page::Lab };
    let value = |row: &protocol::settings::Setting, s: &RunSpec| row.in_use(s).then(|| row.shown(s)).flatten();
    let changed: Vec<(String, String, String)> = on_page(SETTINGS, page)
        .filter(|row| !NOT_A_CHANGE.contains(&row.id))
        .filter_map(|row| match (value(row, before), value(row, now)) {
            (Some(from), Some(to)) if from != to => Some((row.key.to_string(), from, to)),
            _ => None,
        })
        .collect();
    match changed.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// A value of setting `key` as its control names it ("model.eval()", "int4, a scale and a
/// zero per group"), for the box's first line.
fn control_text(key: &str, value: &str, generate: bool) -> String {
    use protocol::settings::{on_page, Page, SETTINGS};
    let page = if generate { Page::Generate } else { Page::Lab };
    on_page(SETTINGS, page).find(|row| row.key == key).map_or_else(|| value.to_string(), |row| row.text(value))
}

/// A setting's name as its control is labelled ("Quantization"), else its key.
fn control_label(key: &str, generate: bool) -> String {
    use protocol::settings::{on_page, Page, SETTINGS};
    let page = if generate { Page::Generate } else { Page::Lab };
    on_page(SETTINGS, page).find(|row| row.key == key).map_or_else(|| key.to_string(), |row| row.label.to_string())
}

/// The two questions of a change: peak memory, then p50, the new run's over the old's.
pub fn questions(change: &(String, String, String), spec: &RunSpec, generate: bool) -> [Question; 2] {
    // Named as the controls name them: "Switching Grad mode from enabled (no context) to
    // torch.no_grad()".
    let (key, from, to) = change;
    let (setting, from, to) = (control_label(key, generate), control_text(key, from, generate), control_text(key, to, generate));
    let ask = |figure| {
        let step = Step {
            title: String::new(),
            note: String::new(),
            after: String::new(),
            kind: StepKind::Change {
                generate,
                model: spec.model.clone(),
                device: spec.device,
                setting: setting.clone(),
                from: from.clone(),
                to: to.clone(),
                figure,
            },
        };
        step.question(&[]).expect("a change step always has its question")
    };
    [ask(ChangeFigure::Peak), ask(ChangeFigure::P50)]
}

/// The predictions scored against the run before the change and the run after it, by the
/// rule a learning path's change step is scored by ([`protocol::learn::score_change`]).
pub fn score(questions: &[Question; 2], predicted: &[Prediction; 2], before: &Report, after: &Report) -> [Scored; 2] {
    let scored = |figure, i: usize| protocol::learn::score_change(figure, &questions[i], predicted[i], before, after);
    [scored(ChangeFigure::Peak, 0), scored(ChangeFigure::P50, 1)]
}

/// The latency reading against the runs' noise, under the scored latency answer, where the
/// comparison decided: the same comparison graded it, so the two never disagree (where it
/// decided nothing, the scored answer already says why, in the same words).
fn latency_note(after: &Report, before: &Report) -> Option<String> {
    let comparison = protocol::noise::Comparison::of_runs(after, before)?;
    comparison.decided()?;
    Some(format!("Against the runs' noise, the median latency: {}.", comparison.latency_reading()))
}

/// A prediction waiting for its run: what was asked and answered, and the run before.
#[derive(Clone, Debug)]
pub struct Pending {
    pub questions: [Question; 2],
    pub predicted: [Prediction; 2],
    pub before: Report,
    /// The setting that changed.
    pub setting: String,
}

/// The ids of the two questions' controls.
pub const IDS: [&str; 2] = ["lab-peak", "lab-p50"];

/// What the reader answered in the controls now (`Skipped` where nothing was picked).
fn read(questions: &[Question; 2]) -> [Prediction; 2] {
    #[cfg(feature = "hydrate")]
    {
        let one = |i: usize| crate::prediction::read(IDS[i], &questions[i]).unwrap_or(Prediction::Skipped);
        [one(0), one(1)]
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = questions;
        [Prediction::Skipped, Prediction::Skipped]
    }
}

/// What the box reads and keeps.
#[derive(Clone, Copy)]
pub struct BoxArgs {
    /// The settings shown now.
    pub spec: Memo<RunSpec>,
    /// The run on the charts (finished), if any.
    pub shown: Signal<Option<Report>>,
    /// Set when Run starts with this box's answers; scored once its run is on the charts.
    pub pending: RwSignal<Option<Pending>>,
    pub locked: Signal<bool>,
    /// The box's code is here ([`LazyPrediction`]).
    pub loaded: RwSignal<bool>,
    /// On the Generate page (its settings, its button).
    pub generate: bool,
}

/// The box, once its code is here: fetched when a setting changes while a run is on the
/// charts (before that there is nothing to predict), so a visit that changes nothing
/// never downloads it (a cold Lab visit shows a recorded run: fetching it then would put
/// its bytes in every first visit).
#[component]
pub fn LazyPrediction(args: BoxArgs) -> impl IntoView {
    #[cfg(feature = "hydrate")]
    {
        let asked = StoredValue::new(false);
        Effect::new(move |before: Option<RunSpec>| {
            let now = args.spec.get();
            let changed = before.is_some_and(|b| b != now);
            if changed && !asked.get_value() && args.shown.with_untracked(|r| r.is_some()) {
                asked.set_value(true);
                leptos::task::spawn_local(async move {
                    __preload_prediction_box().await;
                    __preload_pending_for().await;
                    args.loaded.set(true);
                });
            }
            now
        });
    }
    move || {
        args.loaded.get().then(|| {
            #[cfg(feature = "hydrate")]
            {
                use futures::FutureExt;
                // Loaded above: the call is answered at once.
                prediction_box(args).now_or_never()
            }
            #[cfg(not(feature = "hydrate"))]
            None::<AnyView>
        })
    }
}

/// What goes with a run about to start from `spec`: the box's answers, when it asks (a
/// change of one setting from `before`, the run on the charts) and one was picked.
pub fn pending(args: BoxArgs, spec: &RunSpec) -> Option<Pending> {
    if !args.loaded.get_untracked() {
        return None;
    }
    #[cfg(feature = "hydrate")]
    {
        use futures::FutureExt;
        pending_for((args.shown.get_untracked(), spec.clone(), args.generate)).now_or_never().flatten()
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = spec;
        None
    }
}

#[leptos::lazy]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn pending_for(args: (Option<Report>, RunSpec, bool)) -> Option<Pending> {
    let (before, spec, generate) = args;
    let before = before?;
    let change = one_change(&spec, &before.spec, generate)?;
    let questions = questions(&change, &spec, generate);
    let predicted = read(&questions);
    predicted.iter().any(|p| *p != Prediction::Skipped).then(|| Pending { questions, predicted, before, setting: change.0 })
}

#[leptos::lazy]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn prediction_box(args: BoxArgs) -> AnyView {
    let BoxArgs { spec, shown, pending, locked, generate, .. } = args;
    view! { <LabPrediction spec shown pending locked generate /> }.into_any()
}

/// The box above the Run button: the two questions when one setting changed since the run
/// on the charts, then, once the next run is done, both predictions against it.
#[component]
fn LabPrediction(spec: Memo<RunSpec>, shown: Signal<Option<Report>>, pending: RwSignal<Option<Pending>>, locked: Signal<bool>, generate: bool) -> impl IntoView {
    let asked = Memo::new(move |_| {
        let now = spec.get();
        shown.with(|r| r.as_ref().and_then(|r| one_change(&now, &r.spec, generate).map(|c| (questions(&c, &now, generate), c))))
    });
    let button = if generate { "Generate" } else { "Run" };
    // The scores, once the run started with a prediction is the one on the charts.
    let scored = move || {
        let p = pending.get()?;
        let after = shown.get()?;
        let same_change = one_change(&after.spec, &p.before.spec, generate).is_some_and(|(s, ..)| s == p.setting);
        (after != p.before && same_change).then(|| (score(&p.questions, &p.predicted, &p.before, &after), p))
    };
    view! {
        {move || scored().and_then(|(s, p)| {
            let html = s.iter().map(crate::prediction::scored_html).collect::<String>();
            let right = s.iter().filter(|s| s.right == Some(true)).count();
            let asked = s.iter().filter(|s| s.right.is_some()).count();
            let latency = latency_note(&shown.get_untracked()?, &p.before);
            Some(view! {
                <section class="lab-predict scored-box" data-testid="lab-predict-scored" aria-live="polite">
                    <h2>{format!("Your prediction: {right} of {asked} right")}</h2>
                    <div inner_html=html></div>
                    {latency.map(|l| view! { <p class="explain">{l}</p> })}
                </section>
            })
        })}
        {move || asked.get().map(|(q, (setting, from, to))| {
            let [peak, p50] = q;
            let (a1, a2) = (RwSignal::new(false), RwSignal::new(false));
            view! {
                <section class="lab-predict" data-testid="lab-predict" aria-label="Predict first">
                    <p class="explain">
                        <strong>{format!(
                            "You changed one setting: {} from {} to {}.",
                            control_label(&setting, generate),
                            control_text(&setting, &from, generate),
                            control_text(&setting, &to, generate)
                        )}</strong>
                        {format!(" Predict what it does against the run on the charts, then press {button} (or just run it).")}
                    </p>
                    <crate::prediction::PredictControls question=peak answered=a1 locked id=IDS[0].to_string() />
                    <crate::prediction::PredictControls question=p50 answered=a2 locked id=IDS[1].to_string() />
                </section>
            }
        })}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{Choice, GradMode, ModelId};

    fn spec() -> RunSpec {
        RunSpec { model: ModelId::TinyMlp, batch: 4, ..RunSpec::default() }
    }

    #[test]
    fn one_setting_changed_is_named_and_two_are_not() {
        let before = spec();
        assert_eq!(one_change(&before, &before, false), None);
        let now = RunSpec { grad: GradMode::NoGrad, ..before.clone() };
        assert_eq!(one_change(&now, &before, false), Some(("grad".into(), "enabled".into(), "no_grad".into())));
        let now = RunSpec { eval: !before.eval, ..before.clone() };
        let (setting, from, to) = one_change(&now, &before, false).unwrap();
        assert_eq!(setting, "eval");
        assert_ne!(from, to);
        // Two at once, or another model: no single change to predict.
        let two = RunSpec { grad: GradMode::NoGrad, batch: 8, ..before.clone() };
        assert_eq!(one_change(&two, &before, false), None);
        let other = RunSpec { model: ModelId::Resnet18, ..before.clone() };
        assert_eq!(one_change(&other, &before, false), None);
        // A report's spec has the input size filled in: that is no change either.
        let resolved = RunSpec { input_size: Some(64), ..before.clone() };
        assert_eq!(one_change(&before, &resolved, false), None);
        // Timing and placement are not lessons: iterations alone is no change.
        let longer = RunSpec { iters: before.iters + 10, threads: Some(1), ..before.clone() };
        assert_eq!(one_change(&longer, &before, false), None);
    }

    #[test]
    fn on_the_generate_page_its_own_settings_are_the_changes() {
        let before = crate::gen_settings::spec_from_query(&[], &protocol::Catalog::built_in(), |_| None);
        let mut now = before.clone();
        now.generate.as_mut().unwrap().cache = protocol::KvCacheKind::Static;
        assert_eq!(one_change(&now, &before, true), Some(("cache".into(), "dynamic".into(), "static".into())));
        let q = questions(&one_change(&now, &before, true).unwrap(), &now, true);
        assert!(q[0].text.starts_with("Switching KV cache from dynamic (grows) to static (allocated once)"), "{}", q[0].text);
        let mut both = now.clone();
        both.generate.as_mut().unwrap().new_tokens += 8;
        assert_eq!(one_change(&both, &before, true), None);
    }

    /// Issue 68: on the trained model, a typed prompt is no setting to predict (the report's
    /// resolved prompt length against the page's "from the text" is no change either), and
    /// a quiet setting at its default reads as the control's value, never "unset".
    #[test]
    fn a_typed_prompt_raises_no_box_and_defaults_read_as_the_controls_do() {
        let llama = crate::gen_settings::spec_from_query(&[], &protocol::Catalog::built_in(), |_| None);
        let trained = crate::gen_settings::with_model(&llama, protocol::decoder::TRAINED_PRESET.parse().unwrap());
        // The run on the charts: its prompt's length resolved (25 bytes), its text as typed.
        let mut ran = trained.clone();
        ran.input_size = Some(25);
        let mut typed = trained.clone();
        typed.generate.as_mut().unwrap().prompt_text = Some("class Linear(Module):".into());
        assert_eq!(one_change(&typed, &ran, true), None);
        assert_eq!(one_change(&trained, &ran, true), None);
        // int4 from the default: "none", as the select names it, and its group size follows.
        let mut int4 = trained.clone();
        let g = int4.generate.as_mut().unwrap();
        (g.weights, g.group_size) = (protocol::WeightQuant::Int4, Some(32));
        let change = one_change(&int4, &ran, true).expect("one setting");
        assert_eq!(change, ("quant".into(), "none".into(), "int4".into()));
        let q = questions(&change, &int4, true);
        assert!(q[0].text.starts_with("Switching Quantized linear layers from none (as the weights) to int4, a scale and a zero per group"), "{}", q[0].text);
        assert!(!q[0].text.contains("unset"));
    }

    #[test]
    fn predictions_are_scored_on_the_new_run_over_the_old() {
        let before = spec();
        let now = RunSpec { grad: GradMode::NoGrad, ..before.clone() };
        let q = questions(&one_change(&now, &before, false).unwrap(), &now, false);
        assert!(q[0].text.contains("peak memory") && q[1].text.contains("p50"), "{:?}", q);
        let old = crate::explain::tests::report("tiny_mlp", 4, 1000, &[2.0; 20]);
        let new = crate::explain::tests::report("tiny_mlp", 4, 400, &[1.0; 20]);
        let lower = Prediction::Choice(Choice::Lower);
        let s = score(&q, &[lower, lower], &old, &new);
        assert_eq!(s[0].measured, Some(0.4));
        assert_eq!((s[0].right, s[1].right), (Some(true), Some(true)));
        let s = score(&q, &[Prediction::Skipped, Prediction::Choice(Choice::Same)], &old, &new);
        assert_eq!((s[0].right, s[1].right), (None, Some(false)));
    }

    #[test]
    fn a_latency_change_the_noise_cannot_decide_is_not_graded_and_says_why() {
        let before = spec();
        let now = RunSpec { grad: GradMode::NoGrad, ..before.clone() };
        let q = questions(&one_change(&now, &before, false).unwrap(), &now, false);
        // Half the iterations three times slower than the rest: medians ×0.8 apart, and
        // an interval that spans far more. Neither answer is graded; the page says why.
        let noisy = |f: f64| (0..20).map(|i| if i % 2 == 0 { f } else { 3.0 * f }).collect::<Vec<_>>();
        let old = crate::explain::tests::report("tiny_mlp", 4, 1000, &noisy(1.0));
        let new = crate::explain::tests::report("tiny_mlp", 4, 400, &noisy(0.8));
        for c in [Choice::Lower, Choice::Same, Choice::Higher] {
            let s = score(&q, &[Prediction::Skipped, Prediction::Choice(c)], &old, &new);
            assert_eq!((s[1].right, s[1].grade().as_str()), (None, "not decided"), "{}", s[1].sentence());
            assert!(s[1].sentence().contains(": not decided: ") && s[1].sentence().contains("rerun on a quieter machine, or with more iterations"), "{}", s[1].sentence());
        }
        assert_eq!(latency_note(&new, &old), None, "said once, in the scored answer");
        // A change the runs decide: the note reads the direction the grade is given by.
        let fast = crate::explain::tests::report("tiny_mlp", 4, 400, &[1.0; 20]);
        let slow = crate::explain::tests::report("tiny_mlp", 4, 1000, &[2.0; 20]);
        let s = score(&q, &[Prediction::Skipped, Prediction::Choice(Choice::Lower)], &slow, &fast);
        assert_eq!(s[1].right, Some(true), "{}", s[1].sentence());
        let note = latency_note(&fast, &slow).unwrap();
        assert!(note.contains("2.00× faster"), "{note}");
    }
}
