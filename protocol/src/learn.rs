//! Onboarding paths: an ordered list of steps a team lead composes, each a pitfall card
//! (with its model, batch and device) or a change of one Lab/Generate setting (A → B on a
//! model); and what the learners who walked a path predicted, step by step.
//!
//! Pure: the server reads paths from TOML files (or the `/learn/new` page) and checks them
//! with [`LearnPath::check`]; the browser draws a step's question and the answers' summary
//! ([`StepAnswers`]) the server computed with [`summarise`].

use serde::{Deserialize, Serialize};

use crate::predict::{Ask, Choice, Prediction, Question};
use crate::{DeviceChoice, ModelId};

/// The most steps one path may have.
pub const MAX_STEPS: usize = 30;

/// One onboarding path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LearnPath {
    /// Its address: `/learn/{id}` (lower-case letters, digits and `-`).
    pub id: String,
    pub title: String,
    /// The lead's own note, shown above the first step.
    #[serde(default)]
    pub note: String,
    pub steps: Vec<Step>,
    /// Where it came from: `shipped`, `paths/NAME.toml` or `composed`.
    #[serde(default)]
    pub source: String,
}

/// One step of a path. Its `title` and `note` are shown before the learner predicts, so
/// they may not give away what its card hides until then (its claim, its lesson's title:
/// [`LearnPath::check`]); `after` is shown once the learner has locked in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Step {
    pub title: String,
    /// The lead's note for this step, shown with its question.
    #[serde(default)]
    pub note: String,
    /// The lead's note shown after the lock-in, with the result.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub after: String,
    pub kind: StepKind,
}

/// What a step runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// A pitfall card's experiment, with its question.
    Card {
        card: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<ModelId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batch: Option<u32>,
        #[serde(default)]
        device: DeviceChoice,
    },
    /// Two runs of the Lab (or, with `generate`, of the Generate page) on `model`, the
    /// second with `setting` changed from `from` to `to`; the question is about `figure`
    /// of the second over the first.
    Change {
        #[serde(default)]
        generate: bool,
        model: ModelId,
        #[serde(default)]
        device: DeviceChoice,
        /// A top-level key of the run's settings (`grad`, `eval`, `autocast`, `batch`, ...),
        /// or `generate.cache` on the Generate page.
        setting: String,
        /// The setting's values as written: `no_grad`, `8`, `false` (a number or `true` /
        /// `false` is read as one; anything else as a string).
        from: String,
        to: String,
        figure: ChangeFigure,
    },
}

/// The figure a change step asks about, second run over first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChangeFigure {
    /// The forward pass's peak memory above the weights and input (`peak_above_baseline_bytes`).
    Peak,
    /// The median latency (per token for a generation).
    P50,
}

impl ChangeFigure {
    pub fn name(self) -> &'static str {
        match self {
            ChangeFigure::Peak => "peak memory above the weights and input",
            ChangeFigure::P50 => "median latency (p50)",
        }
    }
}

/// The figures a change step's question reads: the second run's value over the first's.
pub const CHANGE_AFTER: &str = "after";
pub const CHANGE_BEFORE: &str = "before";

/// The figures a change step's question is graded by, from the run before the change and
/// the run after it: the figure of each, and for the latency the comparison's noise
/// interval ([`crate::noise::Comparison::noise_interval`]), the rule the Lab reads "no
/// difference beyond run-to-run noise" by. Memory repeats to the byte: no interval.
pub fn change_figures(figure: ChangeFigure, before: &crate::Report, after: &crate::Report, question: &Question) -> Vec<crate::Figure> {
    let (value, unit): (fn(&crate::Report) -> f64, &str) = match figure {
        ChangeFigure::Peak => (|r| r.memory.peak_above_baseline_bytes as f64, "bytes"),
        ChangeFigure::P50 => (|r| r.latency_ms.p50, "ms"),
    };
    let fig = |name: &str, value: f64, unit: &str| crate::Figure { name: name.into(), value, unit: unit.into() };
    let mut figures = vec![fig(CHANGE_AFTER, value(after), unit), fig(CHANGE_BEFORE, value(before), unit)];
    if figure == ChangeFigure::P50 {
        if let Some(c) = crate::noise::Comparison::of_runs(after, before) {
            let [lo, hi] = c.noise_interval();
            let (l, h) = question.interval_names();
            figures.push(fig(&l, lo, "ratio"));
            figures.push(fig(&h, hi, "ratio"));
        }
    }
    figures
}

/// A change step's answer scored against the run before and the run after: by
/// [`change_figures`], and for the latency by the comparison's decision alone
/// ([`crate::noise::Comparison::decided`]): where it decides nothing (too few iterations,
/// no noise measured, a noise too wide) no answer is graded and the reading says why.
pub fn score_change(figure: ChangeFigure, question: &Question, predicted: crate::Prediction, before: &crate::Report, after: &crate::Report) -> crate::Scored {
    let mut scored = question.score(predicted, &change_figures(figure, before, after, question));
    let comparison = (figure == ChangeFigure::P50).then(|| crate::noise::Comparison::of_runs(after, before)).flatten();
    if let Some(c) = comparison.filter(|c| c.decided().is_none()) {
        (scored.right, scored.not_graded) = (None, Some(c.latency_reading()));
    }
    scored
}

/// A value of a setting as a person reads it: `no_grad`, `8`, `false`.
pub fn setting_text(v: &str) -> String {
    v.to_string()
}

impl Step {
    /// The question this step asks before it runs: a card's own, or for a change of one
    /// setting "lower / about the same / higher" for its figure, with the noise band stated.
    pub fn question(&self, cards: &[crate::PitfallInfo]) -> Option<Question> {
        match &self.kind {
            StepKind::Card { card, .. } => cards.iter().find(|c| &c.id == card).map(|c| c.question.clone()),
            StepKind::Change { setting, from, to, figure, model, .. } => {
                // Memory is deterministic to the byte; latency carries run-to-run noise, and
                // is graded by the comparison's noise interval (`change_figures`).
                let timed = *figure == ChangeFigure::P50;
                Some(Question {
                    text: format!(
                        "Switching {setting} from {} to {} on {}: what happens to the {}?",
                        setting_text(from),
                        setting_text(to),
                        model.display_name(),
                        figure.name()
                    )
                    .into(),
                    figure: CHANGE_AFTER.into(),
                    over: Some(CHANGE_BEFORE.into()),
                    unit: "ratio".into(),
                    ask: if timed { Ask::Direction { timed } } else { Ask::SameBytes { within: crate::SAME_BYTES_WITHIN } },
                })
            }
        }
    }
}

impl LearnPath {
    /// The structural rules every path keeps, whatever it was written in: `(field, message)`
    /// for the first broken one. `cards` are the pitfall cards this server has.
    pub fn check(&self, cards: &[crate::PitfallInfo]) -> Result<(), (String, String)> {
        let bad = |field: &str, message: String| Err((field.to_string(), message));
        if !is_path_id(&self.id) {
            return bad("id", format!("`{}` is not a path id: 1 to 64 lower-case letters, digits and `-`", self.id));
        }
        if self.title.trim().is_empty() || self.title.chars().count() > 120 {
            return bad("title", "a path needs a title of 1 to 120 characters".into());
        }
        if self.note.chars().count() > 2000 {
            return bad("note", "the note may have at most 2000 characters".into());
        }
        if self.steps.is_empty() || self.steps.len() > MAX_STEPS {
            return bad("step", format!("a path has 1 to {MAX_STEPS} steps; this one has {}", self.steps.len()));
        }
        for (i, step) in self.steps.iter().enumerate() {
            let n = i + 1;
            let field = |name: &str| format!("step[{n}].{name}");
            if step.title.trim().is_empty() || step.title.chars().count() > 120 {
                return bad(&field("title"), "a step needs a title of 1 to 120 characters".into());
            }
            if step.note.chars().count() > 2000 || step.after.chars().count() > 2000 {
                return bad(&field(if step.note.chars().count() > 2000 { "note" } else { "after" }), "the note may have at most 2000 characters".into());
            }
            match &step.kind {
                StepKind::Card { card, batch, .. } => {
                    let Some(info) = cards.iter().find(|c| &c.id == card) else {
                        return bad(&field("card"), format!("there is no pitfall card `{card}` (GET /api/pitfalls lists them)"));
                    };
                    // What is on screen before the lock-in may not answer the question.
                    for (name, text) in [("title", &step.title), ("note", &step.note)] {
                        let text = text.to_lowercase();
                        for (what, hidden) in [("claim", &info.claim), ("lesson's title", &info.title)] {
                            if !hidden.is_empty() && text.contains(&hidden.to_lowercase()) {
                                return bad(&field(name), format!("it gives away card `{card}`'s {what}, which the card hides until the learner predicts: put it in `after`, shown with the result"));
                            }
                        }
                    }
                    if batch.is_some_and(|b| b == 0) {
                        return bad(&field("batch"), "the batch must be at least 1".into());
                    }
                }
                StepKind::Change { setting, from, to, .. } => {
                    if from == to {
                        return bad(&field("to"), "`from` and `to` are the same: a change step changes its setting".into());
                    }
                    if setting.is_empty() || !setting.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c == '.') {
                        return bad(&field("setting"), format!("`{setting}` is not a setting's name"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether `id` can name a path (and so be part of its address).
pub fn is_path_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A path as the list shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PathSummary {
    pub id: String,
    pub title: String,
    pub steps: usize,
    pub source: String,
}

/// The body of `POST /api/learn/{id}/steps/{n}`: the answer locked by the request that runs
/// the step (`"skipped"`: run without predicting, and not counted among the answers).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StepRequest {
    pub prediction: Prediction,
}

/// What running a step answers: the prediction against the measurement, and what measured it
/// (a card's report, or the two runs of a change).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepOutcome {
    pub scored: crate::Scored,
    /// A card step's report (recorded: its `record_id` is its permalink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<crate::PitfallReport>>,
    /// A change step's two runs, before and after (their permalinks: `/runs/{id}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<String>,
    /// The two runs' figure, before and after, in the question's unit of the figure
    /// (bytes or ms).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<f64>,
    /// Whether the answer was kept among the path's answers (a skipped step or an
    /// unmeasured figure is not).
    pub counted: bool,
}

/// One kept answer, as the answers table holds it: no person, address or browser in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub step: usize,
    pub question: String,
    pub prediction: Prediction,
    pub measured: f64,
    pub right: bool,
    /// Seconds since 1970.
    pub at_s: i64,
}

/// One bar of a step's histogram of predictions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bar {
    pub label: String,
    pub count: u32,
    /// The measured value (the median of the runs) falls here.
    pub truth: bool,
}

/// What the learners predicted at one step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepAnswers {
    /// 1-based.
    pub step: usize,
    pub title: String,
    pub question: String,
    pub answers: u32,
    pub right: u32,
    /// The median of the measured values, as the question formats it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    pub bars: Vec<Bar>,
    /// The most common wrong answer and how many gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_wrong: Option<(String, u32)>,
}

/// `GET /api/learn/{id}/answers`: every step's summary, how many answers are kept and the
/// most a path keeps (past it the oldest are dropped).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswersView {
    pub steps: Vec<StepAnswers>,
    pub kept: usize,
    pub max: usize,
}

/// What the server gives a `/learn/...` page to render (and embeds in it for hydration).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LearnPageData {
    pub paths: Vec<PathSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<LearnPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<AnswersView>,
}

/// Bins of a value question's histogram on each side of the right answers' bin.
pub const VALUE_BINS_EACH_SIDE: i32 = 3;

/// The bin of `v` against the measured `m` for a rule "right within a factor of `within`":
/// 0 is the right answers' bin `[m / within, m × within]`; ±k are the bins a further factor
/// of `within` out on either side, the outermost open-ended.
fn bin(m: f64, within: f64, v: f64) -> i32 {
    let r = (v / m).ln() / within.ln();
    let k = if r.abs() <= 1.0 { 0 } else { (r.abs().ceil() as i32 - 1) * r.signum() as i32 };
    k.clamp(-VALUE_BINS_EACH_SIDE, VALUE_BINS_EACH_SIDE)
}

/// The answers at each step of `path`, summarised as the grading reads them: a histogram of
/// predictions (three bars for a choice, two for yes / no; for a value, bins as wide as its
/// tolerance around the measured median, so the middle bar holds exactly the answers within
/// the factor), the bar of the right answer marked, the count right, and the most common
/// wrong answer (never the marked bar).
pub fn summarise(path: &LearnPath, cards: &[crate::PitfallInfo], answers: &[Answer]) -> Vec<StepAnswers> {
    path.steps
        .iter()
        .enumerate()
        .filter_map(|(i, step)| {
            let q = step.question(cards)?;
            let mine: Vec<&Answer> = answers.iter().filter(|a| a.step == i + 1).collect();
            let mut measured: Vec<f64> = mine.iter().map(|a| a.measured).filter(|m| m.is_finite()).collect();
            measured.sort_by(f64::total_cmp);
            let median = (!measured.is_empty()).then(|| measured[measured.len() / 2]);
            let (labels, place, truth): (Vec<String>, Box<dyn Fn(&Prediction) -> Option<usize>>, Option<usize>) = match q.ask {
                Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. } | Ask::YesNo => {
                    let choices: Vec<Choice> = if q.ask == Ask::YesNo {
                        vec![Choice::Yes, Choice::No]
                    } else {
                        vec![Choice::Lower, Choice::Same, Choice::Higher]
                    };
                    // The right choice as the runs graded it (a timed direction is graded by
                    // each run's interval, which the answer does not keep): the choice most
                    // right answers made, else the median's band.
                    let mut right_by_choice = vec![0u32; choices.len()];
                    for a in mine.iter().filter(|a| a.right) {
                        if let Prediction::Choice(c) = a.prediction {
                            if let Some(k) = choices.iter().position(|x| *x == c) {
                                right_by_choice[k] += 1;
                            }
                        }
                    }
                    let truth = match right_by_choice.iter().enumerate().max_by_key(|(_, n)| **n) {
                        Some((k, n)) if *n > 0 => Some(k),
                        _ => median.and_then(|m| q.band(m)).and_then(|b| choices.iter().position(|x| *x == b)),
                    };
                    let labels = choices.iter().map(|c| c.as_str().to_string()).collect();
                    (labels, Box::new(move |p: &Prediction| match p {
                        Prediction::Choice(c) => choices.iter().position(|x| x == c),
                        _ => None,
                    }), truth)
                }
                Ask::LogScale { within, .. } | Ask::Bytes { within, .. } => {
                    let Some(m) = median.filter(|m| *m > 0.0) else {
                        return Some(StepAnswers {
                            step: i + 1,
                            title: step.title.clone(),
                            question: q.text.to_string(),
                            answers: mine.len() as u32,
                            right: 0,
                            measured: None,
                            bars: vec![],
                            common_wrong: None,
                        });
                    };
                    let edge = |k: i32| m * within.powi(k);
                    let labels = (-VALUE_BINS_EACH_SIDE..=VALUE_BINS_EACH_SIDE)
                        .map(|k| match k {
                            0 => format!("{}–{}", q.format(edge(-1)), q.format(edge(1))),
                            k if k == -VALUE_BINS_EACH_SIDE => format!("below {}", q.format(edge(k + 1))),
                            k if k == VALUE_BINS_EACH_SIDE => format!("above {}", q.format(edge(k - 1))),
                            k if k < 0 => format!("{}–{}", q.format(edge(k - 1)), q.format(edge(k))),
                            k => format!("{}–{}", q.format(edge(k)), q.format(edge(k + 1))),
                        })
                        .collect();
                    (labels, Box::new(move |p: &Prediction| match p {
                        Prediction::Value(v) if *v > 0.0 => Some((bin(m, within, *v) + VALUE_BINS_EACH_SIDE) as usize),
                        _ => None,
                    }), Some(VALUE_BINS_EACH_SIDE as usize))
                }
            };
            let mut counts = vec![0u32; labels.len()];
            for a in &mine {
                if let Some(k) = place(&a.prediction) {
                    counts[k] += 1;
                }
            }
            let common_wrong = counts
                .iter()
                .enumerate()
                .filter(|(k, n)| **n > 0 && Some(*k) != truth)
                .max_by_key(|(k, n)| (**n, std::cmp::Reverse(*k)))
                .map(|(k, n)| (labels[k].clone(), *n));
            Some(StepAnswers {
                step: i + 1,
                title: step.title.clone(),
                question: q.text.to_string(),
                answers: mine.len() as u32,
                // A choice is graded by each answer's own run (a timed direction by that run's
                // interval), as each learner was told; a value by the median's bin, which
                // holds exactly the answers within the factor.
                right: match q.ask {
                    Ask::LogScale { .. } | Ask::Bytes { .. } => truth.map_or(0, |k| counts[k]),
                    _ => mine.iter().filter(|a| a.right).count() as u32,
                },
                measured: median.map(|m| q.format(m)),
                bars: labels
                    .into_iter()
                    .zip(counts)
                    .enumerate()
                    .map(|(k, (label, count))| Bar { label, count, truth: truth == Some(k) })
                    .collect(),
                common_wrong,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change_path() -> LearnPath {
        LearnPath {
            id: "p".into(),
            title: "A path".into(),
            note: String::new(),
            steps: vec![Step {
                title: "no_grad".into(),
                note: String::new(),
                after: String::new(),
                kind: StepKind::Change {
                    generate: false,
                    model: ModelId::TinyMlp,
                    device: DeviceChoice::Cpu,
                    setting: "grad".into(),
                    from: "enabled".into(),
                    to: "no_grad".into(),
                    figure: ChangeFigure::Peak,
                },
            }],
            source: String::new(),
        }
    }

    fn answer(prediction: Prediction, measured: f64, right: bool) -> Answer {
        Answer { step: 1, question: "q".into(), prediction, measured, right, at_s: 0 }
    }

    #[test]
    fn a_change_step_asks_about_its_figure_after_over_before() {
        let path = change_path();
        let q = path.steps[0].question(&[]).unwrap();
        assert!(q.text.contains("grad from enabled to no_grad"), "{}", q.text);
        let figures = [
            crate::Figure { name: CHANGE_AFTER.into(), value: 50.0, unit: "bytes".into() },
            crate::Figure { name: CHANGE_BEFORE.into(), value: 100.0, unit: "bytes".into() },
        ];
        let s = q.score(Prediction::Choice(Choice::Lower), &figures);
        assert_eq!((s.measured, s.right), (Some(0.5), Some(true)));
        assert!(path.check(&[]).is_ok());
    }

    #[test]
    fn checks_name_the_field_that_breaks_a_rule() {
        let mut path = change_path();
        path.id = "Bad Id".into();
        assert_eq!(path.check(&[]).unwrap_err().0, "id");
        let mut path = change_path();
        if let StepKind::Change { to, .. } = &mut path.steps[0].kind {
            *to = "enabled".into();
        }
        assert_eq!(path.check(&[]).unwrap_err().0, "step[1].to");
        let mut path = change_path();
        path.steps[0].kind = StepKind::Card { card: "nope".into(), model: None, batch: None, device: DeviceChoice::Cpu };
        let (field, message) = path.check(&[]).unwrap_err();
        assert_eq!(field, "step[1].card");
        assert!(message.contains("nope"));
        let mut path = change_path();
        path.steps.clear();
        assert_eq!(path.check(&[]).unwrap_err().0, "step");
    }

    #[test]
    fn the_summary_counts_marks_the_truth_and_names_the_common_wrong_answer() {
        let path = change_path();
        let answers = [
            answer(Prediction::Choice(Choice::Lower), 0.5, true),
            answer(Prediction::Choice(Choice::Same), 0.5, false),
            answer(Prediction::Choice(Choice::Same), 0.4, false),
            answer(Prediction::Choice(Choice::Higher), 0.5, false),
        ];
        let s = &summarise(&path, &[], &answers)[0];
        assert_eq!((s.answers, s.right), (4, 1));
        // The header's count is the marked bar's.
        assert_eq!(s.right, s.bars.iter().find(|b| b.truth).unwrap().count);
        let counts: Vec<u32> = s.bars.iter().map(|b| b.count).collect();
        assert_eq!(counts, [1, 2, 1]);
        assert!(s.bars[0].truth && !s.bars[1].truth && !s.bars[2].truth);
        assert_eq!(s.common_wrong, Some(("about the same".to_string(), 2)));
        assert_eq!(s.measured.as_deref(), Some("×0.5"));
        // No answers: empty bars, nothing marked, no wrong answer.
        let empty = &summarise(&path, &[], &[])[0];
        assert_eq!(empty.answers, 0);
        assert!(empty.bars.iter().all(|b| b.count == 0 && !b.truth) && empty.common_wrong.is_none());
    }

    #[test]
    fn value_bins_follow_the_tolerance_and_the_right_bin_is_never_the_wrong_answer() {
        // Right within ×2: the middle bin is [m/2, 2m], the next ones a factor 2 further out.
        assert_eq!(bin(1.0, 2.0, 1.0), 0);
        assert_eq!(bin(1.0, 2.0, 1.99), 0);
        assert_eq!(bin(1.0, 2.0, 0.51), 0);
        assert_eq!(bin(1.0, 2.0, 2.01), 1);
        assert_eq!(bin(1.0, 2.0, 3.9), 1);
        assert_eq!(bin(1.0, 2.0, 4.1), 2);
        assert_eq!(bin(1.0, 2.0, 0.3), -1);
        assert_eq!(bin(1.0, 2.0, 1e-9), -VALUE_BINS_EACH_SIDE);
        assert_eq!(bin(1.0, 2.0, 1e9), VALUE_BINS_EACH_SIDE);
        let mut path = change_path();
        path.steps[0].kind = StepKind::Card { card: "c".into(), model: None, batch: None, device: DeviceChoice::Cpu };
        let card = crate::PitfallInfo {
            id: "c".into(),
            aliases: vec![],
            title: "T".into(),
            asks: "Q?".into(),
            setup: vec![],
            labels: vec![],
            fix_first: false,
            not_here: None,
            claim: "C".into(),
            why: String::new(),
            statements: vec![],
            source: String::new(),
            python_pitfall: String::new(),
            python_fix: String::new(),
            threshold: String::new(),
            question: Question { text: "bytes?".into(), figure: "f".into(), over: None, unit: "bytes".into(), ask: Ask::Bytes { min: 1.0, max: 1e12, within: 2.0 } },
        };
        let v = |p: f64, right: bool| answer(Prediction::Value(p), 8e6, right);
        // The runs' own grading marked one of the two near answers wrong (its run measured
        // another value): the summary grades by the median, and never calls it wrong.
        let answers = [v(7e6, true), v(12e6, false), v(32e6 * 1.5, false), v(40e6, false), v(1e3, false)];
        let s = &summarise(&path, &[card], &answers)[0];
        let truth = s.bars.iter().find(|b| b.truth).unwrap();
        assert_eq!(truth.count, 2);
        assert_eq!(s.right, 2, "the header's count is the marked bar's");
        assert_eq!(s.bars.iter().map(|b| b.count).sum::<u32>(), s.answers);
        let (wrong, n) = s.common_wrong.clone().unwrap();
        assert_ne!(wrong, truth.label);
        assert_eq!(n, 2);
        assert_eq!(s.bars.len(), 2 * VALUE_BINS_EACH_SIDE as usize + 1);
    }
}
