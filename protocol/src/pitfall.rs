//! The pitfall experiments' vocabulary: what a card claims, what its experiment measured,
//! and the verdict computed from those figures.

use serde::{Deserialize, Serialize};

use crate::{EnvStamp, Figure};

/// Whether the claim held on this hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The figures show what the claim says.
    Confirmed,
    /// The figures contradict the claim here; the reason says how.
    Refuted,
    /// The effect cannot show on this device (for example a CUDA-only effect on a CPU).
    NotApplicable,
    /// The measured interval straddles the rule's threshold: the noise is too large to
    /// confirm or refute here; the reason says about how many more iterations would
    /// likely decide it.
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Confirmed => "confirmed",
            Verdict::Refuted => "refuted",
            Verdict::NotApplicable => "not_applicable",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

/// A line or bar series for the card's chart: `x` labels with `y` values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Series {
    pub name: String,
    pub unit: String,
    pub x: Vec<String>,
    pub y: Vec<Option<f64>>,
}

/// A small table of text cells.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// How the card's chart is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChartKind {
    Line,
    Bar,
}

/// The result of one pitfall experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PitfallReport {
    pub id: String,
    pub claim: String,
    pub verdict: Verdict,
    /// Why this verdict, with the deciding numbers.
    pub reason: String,
    /// The rule the verdict applies, written down before the experiment ran.
    pub threshold: String,
    pub figures: Vec<Figure>,
    pub chart: ChartKind,
    pub series: Vec<Series>,
    /// Extra observations in words (errors raised, dtypes seen, ...).
    pub notes: Vec<String>,
    /// A table for the cards that read best as one (the seed table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<Table>,
    /// The traced forward pass of each row, for the cards about memory: drawn overlaid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<crate::NamedTrace>,
    pub env: EnvStamp,
    /// The permanent id the server recorded this result under (its permalink is
    /// `/runs/{record_id}`); absent when nothing was recorded (the CLI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_id: Option<String>,
    /// What was predicted before the run (or that it ran without a prediction), scored
    /// against this report's figures; absent for results recorded before cards asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<crate::Scored>,
}

/// A card as listed. It has two states, and carries both:
///
/// - **the question**, shown before the learner predicts: `asks` (a neutral title posed as
///   a question), `setup` (what will be measured), the two code variants under their
///   neutral `labels`, the `question`, and `not_here` where this device cannot show the
///   effect. None of these tells the outcome.
/// - **the lesson**, shown after the lock-in (or "Show the lesson without predicting"):
///   `title` (the assertive one), `claim`, `why`, `source`, the code under "Falls in" /
///   "Avoids it", and the verdict's rule `threshold` with its magnitudes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PitfallInfo {
    pub id: String,
    /// Ids the card had before (they stated its answer): links and embeds made with one
    /// still reach it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// The lesson's title, which states the answer: shown after the lock-in.
    pub title: String,
    /// The question state's title: neutral, posed as a question.
    pub asks: String,
    /// What the experiment measures on this server's default device, from its own
    /// settings: model and shape, batch, dtype, device, what the two arms are, and the
    /// inputs a formula needs (layers, KV heads, head_dim, bytes per element, tokens).
    pub setup: Vec<String>,
    /// Neutral labels of the two code variants, `python_pitfall` then `python_fix`, shown
    /// before the lock-in in place of "Falls in" / "Avoids it": each says what its code
    /// does, never which one is recommended.
    pub labels: Vec<String>,
    /// Whether the page shows `python_fix` first (as "A") and `python_pitfall` second:
    /// [`shows_fix_first`] of the id, so the order tells nothing of which is recommended,
    /// and is the same on every render of the card. The setup's line naming the two
    /// variants follows the same order.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fix_first: bool,
    /// Why this server's default device cannot show the effect (a CUDA-only effect on a
    /// CPU): said before the lock-in; an answer is then kept but never graded here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_here: Option<String>,
    pub claim: String,
    /// The lesson's explanation as one paragraph: its [`PitfallInfo::statements`] joined.
    pub why: String,
    /// The statements the claim and the explanation make, each with how it is known: this
    /// run's figures, PyTorch itself observed by a test, or PyTorch's source for a fact
    /// only a GPU can show. Shown after the lock-in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statements: Vec<Statement>,
    /// The PyTorch documentation the explanation rests on.
    pub source: String,
    pub python_pitfall: String,
    pub python_fix: String,
    pub threshold: String,
    /// The question asked before the experiment runs; its own report decides it.
    pub question: crate::Question,
}

/// Whether the card `id` shows its two code variants fix first: a fixed function of the id
/// (the FNV-1a hash of `"variants:"` and the id, its bit 32), so about half the cards show
/// the recommended code first and half second, and a card shows the same order on the
/// server's render, after hydration, in the CLI and in docs/questions.md. Integer
/// arithmetic only (never std's per-process randomised hasher).
pub fn shows_fix_first(id: &str) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "variants:".bytes().chain(id.bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h >> 32) & 1 == 1
}

/// One statement of a lesson, and how it is known.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Statement {
    pub text: String,
    pub known: Known,
}

/// How a statement of a lesson is known. No statement rests on nothing: each is decided by
/// the run, observed in PyTorch by a test, or read in PyTorch's source and measured by the
/// GPU check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum Known {
    /// Decided by this run's figures (their names in the report).
    Run { figures: Vec<String> },
    /// Observed in PyTorch itself (the PyTorch Gradless links) by a test that every build
    /// runs on the CPU: `engine/mechanisms/FILE::TEST`.
    Pytorch { test: String },
    /// A fact only a CUDA device shows: the PyTorch v2.11.0 source that decides it (a file
    /// of pytorch/pytorch and a function in it), and the step of the GPU check
    /// (`scripts/gpu-check.sh`) that measures it.
    Source { file: String, function: String, gpu_step: String },
}

impl Known {
    /// How it is known, in a few words for the page and the CLI.
    pub fn describe(&self) -> String {
        match self {
            Known::Run { figures } => format!("measured in this run ({})", figures.join(", ")),
            Known::Pytorch { test } => format!("observed in PyTorch by a test Gradless runs ({test})"),
            Known::Source { file, function, gpu_step } => {
                format!("PyTorch v2.11.0 source ({file}, {function}); measured on a GPU by the GPU check's {gpu_step} step")
            }
        }
    }
}

/// Knobs a person may set on an experiment; each has a sensible per-device default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct PitfallOptions {
    pub device: crate::DeviceChoice,
    pub model: Option<crate::ModelId>,
    pub batch: Option<u32>,
    /// batch-scaling: the memory budget in bytes (default: [`DEFAULT_CUDA_BUDGET_BYTES`] on a
    /// GPU, [`DEFAULT_CPU_BUDGET_BYTES`] on a CPU).
    pub budget_bytes: Option<u64>,
    /// The answer to the card's question, locked by the request that starts the run:
    /// `"skipped"`, `{"value": 0.5}` or `{"choice": "lower"}`. Absent: not asked (a script).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction: Option<crate::Prediction>,
}

/// batch-scaling's budget on a GPU unless one is chosen: a common card's size, stated, and
/// never the device's free memory — on a large GPU (139 GB on an H200) both grad modes would
/// reach the largest batch tried and tie.
pub const DEFAULT_CUDA_BUDGET_BYTES: u64 = 16 << 30;

/// batch-scaling's budget on a CPU unless one is chosen: keeps the sweep to seconds.
pub const DEFAULT_CPU_BUDGET_BYTES: u64 = 160 << 20;

/// Budgets a person may pick for batch-scaling, as (label, bytes): common device sizes.
pub const BUDGET_PRESETS: [(&str, u64); 5] = [
    ("1 GiB", 1 << 30),
    ("8 GiB card", 8 << 30),
    ("16 GiB card", 16 << 30),
    ("24 GiB card", 24 << 30),
    ("80 GiB card", 80 << 30),
];
/// The prefix of a card's figure timed from the server's Python (`Python: NAME` is `NAME`
/// timed from Python; the engine's `pitfalls::python`).
pub const PYTHON_FIGURE: &str = "Python: ";

impl PitfallReport {
    /// Where the report also timed the question's figure from Python, which timing grades
    /// and why, with both values: said once under the grade, so a learner who sees ×0.909
    /// graded and ×1.015 in the figures below knows which one counted. `None` without a
    /// prediction or a Python figure of the same thing.
    pub fn graded_by(&self) -> Option<String> {
        let q = &self.prediction.as_ref()?.question;
        let ours = q.measured(&self.figures)?;
        let python: Vec<Figure> = self
            .figures
            .iter()
            .filter_map(|f| f.name.strip_prefix(PYTHON_FIGURE).map(|name| Figure { name: name.into(), ..f.clone() }))
            .collect();
        let theirs = q.measured(&python)?;
        Some(format!(
            "Graded by Gradless's timing ({}): libtorch called from Rust, the run the card's rule reads. The Python timing of the same experiment ({}, in the figures as \"Python: …\") pays the interpreter on every op, as a team's code does, and is shown beside it, not graded.",
            q.format(ours),
            q.format(theirs)
        ))
    }
}

/// Grading a card's question lives with the card, whose verdict decides whether it grades.
impl crate::Question {
    /// [`Question::score`] for a card whose verdict is `verdict`: where the effect cannot
    /// show on this device (not applicable), the answer is kept but never graded, since the
    /// figure measured here answers another question than the one asked.
    pub fn score_card(&self, predicted: crate::Prediction, figures: &[crate::Figure], verdict: Verdict, why: &str) -> crate::Scored {
        let mut scored = self.score(predicted, figures);
        if verdict == Verdict::NotApplicable {
            scored.right = None;
            scored.not_graded = Some(format!("not graded here: {}", why.trim_end_matches('.')));
        }
        scored
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ask, Prediction, Question};

    /// The order is a fixed function of the id: pinned here, so a change to it (which
    /// would reorder every card a link points at) is deliberate.
    #[test]
    fn the_variants_order_is_fixed_by_the_id() {
        assert!(shows_fix_first("eval-and-autograd"));
        assert!(shows_fix_first("nograd-and-dropout"));
        assert!(shows_fix_first("gqa"));
        assert!(!shows_fix_first("compiled-outputs"));
        for id in ["eval-and-autograd", "gqa", ""] {
            assert_eq!(shows_fix_first(id), shows_fix_first(&id.to_string()));
        }
    }

    fn fig(name: &str, value: f64) -> Figure {
        Figure { name: name.into(), value, unit: "bytes".into() }
    }

    #[test]
    fn a_card_that_cannot_show_its_effect_here_never_grades_wrong() {
        let q = Question {
            text: "no_grad's peak as a multiple of grad's?".into(),
            figure: "no_grad peak".into(),
            over: Some("grad peak".into()),
            unit: "ratio".into(),
            ask: Ask::LogScale { min: 0.01, max: 10.0, within: 2.0 },
        };
        let figures = [fig("grad peak", 1.0), fig("no_grad peak", 1.04)];
        for p in [Prediction::Value(0.1), Prediction::Value(1.0)] {
            let s = q.score_card(p, &figures, Verdict::NotApplicable, "CPU ops are synchronous.");
            assert_eq!(s.right, None);
            assert_eq!(s.grade(), "not graded here");
            assert!(s.sentence().ends_with("(not graded here: CPU ops are synchronous)"), "{}", s.sentence());
        }
        // Where it applies, the same answer is graded.
        assert_eq!(q.score_card(Prediction::Value(0.1), &figures, Verdict::Confirmed, "").right, Some(false));
    }

    /// A card timed twice (Gradless's run and the server's Python): the page says which
    /// timing grades, with both values.
    #[test]
    fn a_card_timed_from_python_too_says_which_timing_grades() {
        let q = Question {
            text: "inference_mode's p50 over no_grad's?".into(),
            figure: "* latency ratio inference_mode / no_grad".into(),
            over: None,
            unit: "ratio".into(),
            ask: Ask::Direction { timed: true },
        };
        let ratio = |name: &str, value: f64| Figure { name: name.into(), value, unit: "ratio".into() };
        let mut figures = vec![ratio("tiny_mlp b1 latency ratio inference_mode / no_grad", 0.909)];
        let report = |figures: Vec<Figure>| PitfallReport {
            id: "x".into(),
            claim: String::new(),
            verdict: Verdict::Confirmed,
            reason: String::new(),
            threshold: String::new(),
            prediction: Some(q.score(Prediction::Choice(crate::Choice::Lower), &figures)),
            figures,
            chart: ChartKind::Bar,
            series: vec![],
            notes: vec![],
            table: None,
            traces: vec![],
            env: crate::testing::report("no_grad", 1, vec![]).env,
            record_id: None,
        };
        assert_eq!(report(figures.clone()).graded_by(), None, "no Python figure: nothing to say");
        figures.push(ratio("Python: tiny_mlp b1 latency ratio inference_mode / no_grad", 1.02));
        let said = report(figures).graded_by().unwrap();
        assert!(said.starts_with("Graded by Gradless's timing (×0.909)") && said.contains("(×1.02,") && said.contains("not graded"), "{said}");
    }
}
