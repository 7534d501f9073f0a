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
use protocol::{Prediction, Question, Report, RunSpec, Scored};


/// Settings that are not a lesson's change: where the run goes (device, threads) and how
/// long it is timed (warm-up, iterations). The model is no setting of a model.
const NOT_A_CHANGE: [&str; 5] = ["device", "threads", "warmup", "iters", "model"];

/// The one setting that differs between `before` (the run on the charts) and `now` (the
/// settings shown), as `(setting, from, to)` in the link's words (the Lab's, or with
/// `generate` the Generate page's); `None` when none or more than one differ, or when the
/// model does.
pub fn one_change(now: &RunSpec, before: &RunSpec, generate: bool) -> Option<(String, String, String)> {
    if now.model != before.model {
        return None;
    }
    let query: fn(&RunSpec) -> String = if generate { crate::gen_settings::query_from_spec } else { crate::settings::query_from_spec };
    let pairs = |s: &RunSpec| -> Vec<(String, String)> {
        query(s)
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| !NOT_A_CHANGE.contains(k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let (a, b) = (pairs(before), pairs(now));
    let value = |list: &[(String, String)], key: &str| list.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let mut keys: Vec<&String> = a.iter().chain(b.iter()).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    let changed: Vec<(String, String, String)> = keys
        .into_iter()
        .filter_map(|k| {
            let (from, to) = (value(&a, k), value(&b, k));
            // A report's spec has its input size filled in where the Lab's may leave it to
            // the model's default: only two sizes both given differ.
            if k == "input_size" && (from.is_none() || to.is_none()) {
                return None;
            }
            (from != to).then(|| (k.clone(), words(k, from), words(k, to)))
        })
        .collect();
    match changed.as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

/// A setting's value as the Lab's controls name it.
fn words(key: &str, value: Option<String>) -> String {
    match (key, value.as_deref()) {
        ("eval", Some("1")) => "eval()".into(),
        ("eval", Some("0")) => "train()".into(),
        (_, Some(v)) => v.to_string(),
        (_, None) => "unset".into(),
    }
}

/// The two questions of a change: peak memory, then p50, the new run's over the old's.
pub fn questions(change: &(String, String, String), spec: &RunSpec, generate: bool) -> [Question; 2] {
    let (setting, from, to) = change.clone();
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

/// The predictions scored against the run before the change and the run after it.
pub fn score(questions: &[Question; 2], predicted: &[Prediction; 2], before: &Report, after: &Report) -> [Scored; 2] {
    let figures = |figure, q| protocol::learn::change_figures(figure, before, after, q);
    [
        questions[0].score(predicted[0], &figures(ChangeFigure::Peak, &questions[0])),
        questions[1].score(predicted[1], &figures(ChangeFigure::P50, &questions[1])),
    ]
}

/// The latency reading against the runs' noise, under the scored latency answer: the same
/// comparison graded it ([`protocol::learn::change_figures`]), so the two never disagree.
fn latency_note(after: &Report, before: &Report) -> Option<String> {
    let comparison = protocol::noise::Comparison::of_runs(after, before)?;
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
                        <strong>{format!("You changed one setting: {setting} from {from} to {to}.")}</strong>
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
        let before = crate::gen_settings::spec_from_query(&[], |_| None);
        let mut now = before.clone();
        now.generate.as_mut().unwrap().cache = protocol::KvCacheKind::Static;
        assert_eq!(one_change(&now, &before, true), Some(("cache".into(), "dynamic".into(), "static".into())));
        let q = questions(&one_change(&now, &before, true).unwrap(), &now, true);
        assert!(q[0].text.starts_with("Switching cache from dynamic to static"), "{}", q[0].text);
        let mut both = now.clone();
        both.generate.as_mut().unwrap().new_tokens += 8;
        assert_eq!(one_change(&both, &before, true), None);
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
    fn a_latency_change_inside_the_noise_is_graded_about_the_same_as_the_reading_says() {
        let before = spec();
        let now = RunSpec { grad: GradMode::NoGrad, ..before.clone() };
        let q = questions(&one_change(&now, &before, false).unwrap(), &now, false);
        // Half the iterations three times slower than the rest: medians ×0.8 apart, and
        // an interval that spans far more. The grade and the reading beside it agree.
        let noisy = |f: f64| (0..20).map(|i| if i % 2 == 0 { f } else { 3.0 * f }).collect::<Vec<_>>();
        let old = crate::explain::tests::report("tiny_mlp", 4, 1000, &noisy(1.0));
        let new = crate::explain::tests::report("tiny_mlp", 4, 400, &noisy(0.8));
        let s = score(&q, &[Prediction::Skipped, Prediction::Choice(Choice::Lower)], &old, &new);
        assert_eq!(s[1].right, Some(false), "×0.8 within the noise is not lower: {}", s[1].sentence());
        let s = score(&q, &[Prediction::Skipped, Prediction::Choice(Choice::Same)], &old, &new);
        assert_eq!(s[1].right, Some(true), "{}", s[1].sentence());
        let note = latency_note(&new, &old).unwrap();
        assert!(note.contains("no difference beyond"), "{note}");
    }
}
