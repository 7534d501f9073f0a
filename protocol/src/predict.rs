//! Predictions: the question a card (or a guided step) asks before its experiment runs,
//! what a person answered, and how that answer is scored against the measured figures.
//!
//! A [`Question`] names a figure the experiment reports, or the ratio of two, and how it is
//! asked ([`Ask`]): a choice of band around a threshold, yes or no, or a value on a log
//! scale with the factor within which it counts as right. Scoring ([`Question::score`]) is
//! pure and shared: the browser draws the same verdict the server recorded.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::Figure;

/// How a question is answered, and when an answer counts as right.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Ask {
    /// Lower, about the same or higher, decided by the same statistic as the verdict: the
    /// measured ratio's 95% noise interval (figures named by [`Question::interval_names`]).
    /// "About the same" is right when the interval includes ×1, "lower" or "higher" when it
    /// lies wholly below or above. `timed`: latencies, whose interval comes from the runs'
    /// own samples; otherwise byte counts, which repeat to the byte, so the interval is the
    /// measured point itself.
    Direction { timed: bool },
    /// Lower, about the same or higher for a ratio of byte counts, with a physical
    /// tolerance: "about the same" is right when the ratio is within `within` of ×1
    /// (relative: `0.01` is 1%), "lower" or "higher" beyond it. The same rule words the
    /// verdicts of the cards that ask it ([`bytes_direction`]), so a lesson that says "no
    /// difference" grades "about the same" right. Byte counts repeat to the byte on a CPU;
    /// the tolerance covers what may differ without the lesson changing (the CUDA caching
    /// allocator's rounding, a train-mode BatchNorm's saved statistics).
    SameBytes { within: f64 },
    /// Lower (measured below `below`), about the same (between, a fixed band) or higher
    /// (above `above`): how answers were graded before [`Ask::Direction`]; kept so records
    /// made then read back as they were scored.
    Choice { below: f64, above: f64 },
    /// Yes or no: yes when the figure is above zero (a flag that is 1, a difference that
    /// is not nothing).
    YesNo,
    /// A value on a log scale from `min` to `max`; right within a factor of `within`.
    LogScale { min: f64, max: f64, within: f64 },
    /// A number of bytes on a log scale from `min` to `max`; right within a factor of
    /// `within`.
    Bytes { min: f64, max: f64, within: f64 },
}

/// The tolerance of a byte ratio's "about the same" ([`Ask::SameBytes`]): 1%. It covers the
/// CUDA caching allocator rounding every block up to 512 bytes, and the few hundred KiB a
/// train-mode BatchNorm keeps of each batch's statistics, against peaks of tens of MiB and
/// more; an effect a lesson teaches (a copy of the weights, the activations autograd keeps,
/// a halved cache that matters) moves a peak by far more.
pub const SAME_BYTES_WITHIN: f64 = 0.01;

/// Lower, about the same or higher for a measured byte ratio, by the rule of
/// [`Ask::SameBytes`] with tolerance `within`: the one rule for the grade and the verdict's
/// words alike.
pub fn bytes_direction(ratio: f64, within: f64) -> Choice {
    if ratio < 1.0 - within {
        Choice::Lower
    } else if ratio > 1.0 + within {
        Choice::Higher
    } else {
        Choice::Same
    }
}

/// The one question asked before an experiment; its own report decides it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Question {
    /// The question as a person reads it.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub text: Cow<'static, str>,
    /// The figure it asks about. A name beginning with `*` matches the first figure whose
    /// name ends with the rest (for names that carry the model or dtype of the run).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub figure: Cow<'static, str>,
    /// When set, the question is about `figure / over`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub over: Option<Cow<'static, str>>,
    /// `ratio`, `bytes`, `ms`, `bool`, ... (as [`Figure::unit`]).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub unit: Cow<'static, str>,
    pub ask: Ask,
}

/// A banded or yes/no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    Lower,
    Same,
    Higher,
    Yes,
    No,
}

impl Choice {
    pub fn as_str(self) -> &'static str {
        match self {
            Choice::Lower => "lower",
            Choice::Same => "about the same",
            Choice::Higher => "higher",
            Choice::Yes => "yes",
            Choice::No => "no",
        }
    }
}

/// What a person answered before the run: `"skipped"` (ran without predicting),
/// `{"value": 0.5}` or `{"choice": "lower"}`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Prediction {
    Skipped,
    Value(f64),
    Choice(Choice),
}

/// A prediction next to what was measured: part of the record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Scored {
    pub question: Question,
    pub predicted: Prediction,
    /// The measured value the question asks about; absent when the report lacks the
    /// figures (an effect that cannot show on this device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<f64>,
    /// Right by the question's tolerance; absent when skipped, not measured, or not graded
    /// here ([`Scored::not_graded`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub right: Option<bool>,
    /// The measured ratio's 95% noise interval `[low, high]`, for a direction question:
    /// the statistic that decided the grade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<[f64; 2]>,
    /// Why the answer was not graded although it was given: the effect cannot show on
    /// this device, so its figure here answers a different question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_graded: Option<String>,
}

impl Question {
    /// The measured value this question asks about, from a report's figures.
    pub fn measured(&self, figures: &[Figure]) -> Option<f64> {
        let find = |name: &str| {
            let f = match name.strip_prefix('*') {
                Some(suffix) => figures.iter().find(|f| f.name.ends_with(suffix)),
                None => figures.iter().find(|f| f.name == name),
            };
            f.map(|f| f.value).filter(|v| v.is_finite())
        };
        let value = find(&self.figure)?;
        match &self.over {
            None => Some(value),
            Some(over) => {
                let d = find(over)?;
                (d != 0.0).then(|| value / d).filter(|v| v.is_finite())
            }
        }
    }

    /// The names of the figures that carry the 95% noise interval of this question's ratio
    /// (`figure / over`), low then high: an experiment reports them beside its arms.
    pub fn interval_names(&self) -> (String, String) {
        let of = match &self.over {
            Some(over) => format!("{} / {over}", self.figure),
            None => self.figure.to_string(),
        };
        (format!("{of}, 95% interval low"), format!("{of}, 95% interval high"))
    }

    /// The measured value's 95% noise interval from a report's figures, for a direction
    /// question: the reported interval of a timed ratio, the point itself for byte counts
    /// (they repeat exactly). `None` when not measured, or a timed ratio reports no
    /// interval.
    pub fn interval(&self, figures: &[Figure]) -> Option<[f64; 2]> {
        let m = self.measured(figures)?;
        match self.ask {
            Ask::Direction { timed: true } => {
                let (lo, hi) = self.interval_names();
                let find = |n: &str| figures.iter().find(|f| f.name == n).map(|f| f.value).filter(|v| v.is_finite() && *v > 0.0);
                let (lo, hi) = (find(&lo)?, find(&hi)?);
                Some([lo.min(m), hi.max(m)])
            }
            Ask::Direction { timed: false } | Ask::SameBytes { .. } => Some([m, m]),
            _ => None,
        }
    }

    /// The band a direction question's figures fall in: lower when the whole interval is
    /// below ×1, higher when above, about the same when it includes ×1.
    pub fn band_of(&self, figures: &[Figure]) -> Option<Choice> {
        match self.ask {
            Ask::Direction { .. } => self.interval(figures).map(|[lo, hi]| direction(lo, hi)),
            _ => self.measured(figures).and_then(|m| self.band(m)),
        }
    }

    /// Whether `p` is a possible answer to this question; the message says what is.
    pub fn check(&self, p: &Prediction) -> Result<(), String> {
        match (self.ask, p) {
            (_, Prediction::Skipped) => Ok(()),
            (Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. }, Prediction::Choice(Choice::Lower | Choice::Same | Choice::Higher)) => Ok(()),
            (Ask::YesNo, Prediction::Choice(Choice::Yes | Choice::No)) => Ok(()),
            (Ask::LogScale { min, max, .. } | Ask::Bytes { min, max, .. }, Prediction::Value(v)) => {
                if v.is_finite() && (min..=max).contains(v) {
                    Ok(())
                } else {
                    Err(format!(
                        "the prediction must be between {} and {}",
                        self.format(min),
                        self.format(max)
                    ))
                }
            }
            (Ask::Choice { .. } | Ask::Direction { .. } | Ask::SameBytes { .. }, _) => Err("this question takes a choice: lower, same or higher".into()),
            (Ask::YesNo, _) => Err("this question takes a choice: yes or no".into()),
            _ => Err("this question takes a value".into()),
        }
    }

    /// The band a measured value falls in (for a choice or yes/no question; a direction
    /// question's point, as if it had no noise: see [`Question::band_of`]).
    pub fn band(&self, measured: f64) -> Option<Choice> {
        match self.ask {
            Ask::Direction { .. } => Some(direction(measured, measured)),
            Ask::SameBytes { within } => Some(bytes_direction(measured, within)),
            Ask::Choice { below, .. } if measured < below => Some(Choice::Lower),
            Ask::Choice { above, .. } if measured > above => Some(Choice::Higher),
            Ask::Choice { .. } => Some(Choice::Same),
            Ask::YesNo => Some(if measured > 0.0 { Choice::Yes } else { Choice::No }),
            _ => None,
        }
    }

    /// Scores `predicted` against `figures`, the report of this question's own run.
    pub fn score(&self, predicted: Prediction, figures: &[Figure]) -> Scored {
        let measured = self.measured(figures);
        let interval = self.interval(figures);
        let right = match (predicted, measured, self.ask) {
            (Prediction::Skipped, ..) | (_, None, _) => None,
            (Prediction::Choice(c), Some(_), Ask::Direction { .. }) => interval.map(|[lo, hi]| direction(lo, hi) == c),
            (Prediction::Choice(c), Some(m), _) => Some(self.band(m) == Some(c)),
            (Prediction::Value(p), Some(m), Ask::LogScale { within, .. } | Ask::Bytes { within, .. }) => {
                Some(p > 0.0 && m > 0.0 && (p / m).max(m / p) <= within)
            }
            (Prediction::Value(_), Some(_), _) => Some(false),
        };
        Scored {
            question: self.clone(),
            predicted,
            measured,
            right,
            interval,
            not_graded: None,
        }
    }

    /// When an answer counts as right, as the card states it.
    pub fn tolerance(&self) -> String {
        match self.ask {
            Ask::Direction { timed: true } => "each side is timed many times, and the spread of those times gives a range the true ratio lies in (95% of the time). “About the same” is right when that range includes ×1: the difference is smaller than the runs' own noise. “Lower” or “higher” is right when the whole range is below or above ×1".into(),
            Ask::Direction { timed: false } => "memory repeats to the byte from run to run here, so “about the same” is right only when the two are equal; “lower” or “higher” when the measured ratio is below or above ×1".into(),
            Ask::SameBytes { within } => format!(
                "“about the same” is right when the two are within {}% of each other (×{}–×{}); “lower” or “higher” when the ratio is beyond that. On a CPU byte counts repeat to the byte; the {}% allows for the CUDA allocator rounding each block up to 512 bytes and the few hundred KiB a train-mode BatchNorm keeps, never for an effect a lesson teaches",
                significant(100.0 * within),
                significant(1.0 - within),
                significant(1.0 + within),
                significant(100.0 * within)
            ),
            Ask::Choice { below, above } => format!(
                "“about the same” means between {} and {} (the noise band); right when the measurement falls in the band you chose",
                self.format(below),
                self.format(above)
            ),
            Ask::YesNo => "right when the measurement says the same".into(),
            Ask::LogScale { within, .. } | Ask::Bytes { within, .. } => {
                format!("right within a factor of {within} either way")
            }
        }
    }

    /// A value of this question's unit as a person reads it: `×0.15`, `12 MiB`, `3.2 ms`.
    pub fn format(&self, v: f64) -> String {
        match self.unit.as_ref() {
            "ratio" => format!("×{}", significant(v)),
            "bytes" => crate::format_bytes(v.max(0.0) as u64),
            "bool" => (if v > 0.5 { "yes" } else { "no" }).into(),
            "abs" | "" => significant(v),
            unit => format!("{} {unit}", significant(v)),
        }
    }

    /// Reads a prediction typed on the command line: `lower`, `same`, `higher`, `yes`, `no`,
    /// `skip`, or a number (`0.5`, `x0.5`, `×0.5`; bytes may end in KiB, MiB, GiB, KB, MB,
    /// GB or B), checked against this question.
    pub fn parse(&self, text: &str) -> Result<Prediction, String> {
        let t = text.trim().to_ascii_lowercase();
        let p = match t.as_str() {
            "skip" | "skipped" | "none" => Prediction::Skipped,
            "lower" => Prediction::Choice(Choice::Lower),
            "same" | "about the same" => Prediction::Choice(Choice::Same),
            "higher" => Prediction::Choice(Choice::Higher),
            "yes" => Prediction::Choice(Choice::Yes),
            "no" => Prediction::Choice(Choice::No),
            _ => {
                let number = t.trim_start_matches(['x', '×']);
                let (digits, scale) = [("kib", 1024.0), ("mib", 1048576.0), ("gib", 1073741824.0), ("kb", 1e3), ("mb", 1e6), ("gb", 1e9), ("b", 1.0)]
                    .iter()
                    .find_map(|(s, f)| number.strip_suffix(s).map(|d| (d, *f)))
                    .unwrap_or((number, 1.0));
                let v: f64 = digits
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{text}` is not a prediction: give a number, or lower, same, higher, yes, no or skip"))?;
                Prediction::Value(v * scale)
            }
        };
        self.check(&p).map(|()| p)
    }
}

impl Scored {
    /// How far a value prediction was from the measurement, as a factor of at least 1
    /// (`2.0`: off by ×2, either way); `None` for choices, skips and unmeasured runs.
    pub fn off_by(&self) -> Option<f64> {
        match (self.predicted, self.measured) {
            (Prediction::Value(p), Some(m)) if p > 0.0 && m > 0.0 => Some((p / m).max(m / p)),
            _ => None,
        }
    }

    /// The grade alone, as the page heads it: "right", "off by ×2.0", "wrong: it was
    /// lower", "not graded here", "not predicted".
    pub fn grade(&self) -> String {
        if matches!(self.predicted, Prediction::Skipped) {
            return "not predicted".into();
        }
        if self.not_graded.is_some() {
            return "not graded here".into();
        }
        match (self.right, self.off_by()) {
            (Some(true), _) => "right".into(),
            (Some(false), Some(f)) => format!("off by ×{f:.1}"),
            (Some(false), None) => match self.measured_band() {
                Some(band) => format!("wrong: it was {}", band.as_str()),
                None => "wrong".into(),
            },
            (None, _) => "not measured on this device".into(),
        }
    }

    /// The band the measurement fell in, by the statistic that graded it.
    pub fn measured_band(&self) -> Option<Choice> {
        match (self.question.ask, self.interval, self.measured) {
            (Ask::Direction { .. }, Some([lo, hi]), _) => Some(direction(lo, hi)),
            (_, _, Some(m)) => self.question.band(m),
            _ => None,
        }
    }

    /// The prediction as a person reads it: `×0.5`, `lower`, `not predicted`.
    pub fn predicted_text(&self) -> String {
        match self.predicted {
            Prediction::Skipped => "not predicted".into(),
            Prediction::Value(v) => self.question.format(v),
            Prediction::Choice(c) => c.as_str().into(),
        }
    }

    /// One line for records, pictures and exports: "predicted ×0.5, measured ×0.15: wrong".
    pub fn sentence(&self) -> String {
        let measured = match self.measured {
            Some(m) => match (self.measured_band(), self.interval) {
                (Some(band), Some([lo, hi])) if lo < hi => format!(
                    "measured {} (95% interval {}–{}: {})",
                    self.question.format(m),
                    self.question.format(lo),
                    self.question.format(hi),
                    band.as_str()
                ),
                (Some(band), _) if self.question.ask != Ask::YesNo => {
                    format!("measured {} ({})", self.question.format(m), band.as_str())
                }
                _ => format!("measured {}", self.question.format(m)),
            },
            None => "not measured on this device".into(),
        };
        let verdict = match (self.right, &self.not_graded) {
            (_, Some(why)) => format!(" ({why})"),
            (Some(true), _) => ": right".into(),
            (Some(false), _) => ": wrong".into(),
            (None, _) => String::new(),
        };
        match self.predicted {
            Prediction::Skipped => format!("run without predicting; {measured}"),
            _ => format!("predicted {}, {measured}{verdict}", self.predicted_text()),
        }
    }
}

/// Lower, about the same or higher for an interval against ×1.
fn direction(lo: f64, hi: f64) -> Choice {
    if hi < 1.0 {
        Choice::Lower
    } else if lo > 1.0 {
        Choice::Higher
    } else {
        Choice::Same
    }
}

/// Three significant figures, without a trailing zero run: 0.153, 1.5, 42, 1234.
fn significant(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    // The decimal exponent by division, not log10: the browser build then needs no libm.
    let (mut m, mut exponent) = (v.abs(), 0i32);
    while m >= 10.0 {
        m /= 10.0;
        exponent += 1;
    }
    while m < 1.0 {
        m *= 10.0;
        exponent -= 1;
    }
    let digits = (2 - exponent).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(name: &str, value: f64) -> Figure {
        Figure {
            name: name.into(),
            value,
            unit: "bytes".into(),
        }
    }

    fn ratio(ask: Ask) -> Question {
        Question {
            text: "no_grad's peak as a multiple of grad's?".into(),
            figure: "no_grad peak".into(),
            over: Some("grad peak".into()),
            unit: "ratio".into(),
            ask,
        }
    }

    const LOG: Ask = Ask::LogScale { min: 0.01, max: 10.0, within: 2.0 };

    #[test]
    fn a_ratio_is_scored_within_its_factor() {
        let q = ratio(LOG);
        let figures = [fig("grad peak", 40e6), fig("no_grad peak", 6e6)];
        assert_eq!(q.measured(&figures), Some(0.15));
        let s = q.score(Prediction::Value(0.5), &figures);
        assert_eq!(s.right, Some(false));
        assert_eq!(s.sentence(), "predicted ×0.5, measured ×0.15: wrong");
        assert_eq!(q.score(Prediction::Value(0.25), &figures).right, Some(true));
        assert_eq!(q.score(Prediction::Value(0.075), &figures).right, Some(true));
        assert_eq!(q.score(Prediction::Value(0.07), &figures).right, Some(false));
        let skipped = q.score(Prediction::Skipped, &figures);
        assert_eq!(skipped.right, None);
        assert_eq!(skipped.sentence(), "run without predicting; measured ×0.15");
    }

    #[test]
    fn a_choice_is_right_in_its_band_only() {
        let q = ratio(Ask::Choice { below: 0.95, above: 1.05 });
        let at = |m: f64| [fig("grad peak", 1.0), fig("no_grad peak", m)];
        assert_eq!(q.score(Prediction::Choice(Choice::Same), &at(1.04)).right, Some(true));
        assert_eq!(q.score(Prediction::Choice(Choice::Lower), &at(0.5)).right, Some(true));
        assert_eq!(q.score(Prediction::Choice(Choice::Higher), &at(1.04)).right, Some(false));
        assert_eq!(q.score(Prediction::Choice(Choice::Same), &at(0.5)).sentence(), "predicted about the same, measured ×0.5 (lower): wrong");
        assert!(q.tolerance().contains("×0.95") && q.tolerance().contains("×1.05"));
    }

    /// A byte ratio within the stated tolerance is "about the same", and only that: the
    /// cards whose verdict says "no difference" at ×0.997 grade that answer right.
    #[test]
    fn a_byte_ratio_is_the_same_within_its_stated_tolerance() {
        let q = ratio(Ask::SameBytes { within: crate::SAME_BYTES_WITHIN });
        let at = |m: f64| [fig("grad peak", 1.0), fig("no_grad peak", m)];
        for (m, band) in [(0.997, Choice::Same), (1.0, Choice::Same), (1.009, Choice::Same), (0.98, Choice::Lower), (1.5, Choice::Higher)] {
            for c in [Choice::Lower, Choice::Same, Choice::Higher] {
                assert_eq!(q.score(Prediction::Choice(c), &at(m)).right, Some(c == band), "{m}: {c:?}");
            }
            assert_eq!(crate::bytes_direction(m, crate::SAME_BYTES_WITHIN), band);
        }
        assert_eq!(q.score(Prediction::Choice(Choice::Same), &at(0.997)).sentence(), "predicted about the same, measured ×0.997 (about the same): right");
        assert!(q.tolerance().contains("within 1%") && q.tolerance().contains("×0.99–×1.01"), "{}", q.tolerance());
        // Records made before the tolerance read back graded as they were: exact.
        let exact = ratio(Ask::Direction { timed: false });
        assert_eq!(exact.score(Prediction::Choice(Choice::Same), &at(0.997)).right, Some(false));
    }

    /// The figures of a timed ratio `m` with its interval, named as the question reads them.
    fn timed(q: &Question, m: f64, lo: f64, hi: f64) -> Vec<Figure> {
        let (l, h) = q.interval_names();
        vec![fig("grad peak", 1.0), fig("no_grad peak", m), fig(&l, lo), fig(&h, hi)]
    }

    #[test]
    fn a_direction_is_graded_by_the_verdicts_own_interval() {
        let q = ratio(Ask::Direction { timed: true });
        // ×0.96 whose whole interval is below ×1 is lower, beyond noise: "lower" is right,
        // "about the same" is wrong, however close to 1 it is.
        let tight = timed(&q, 0.96, 0.96, 0.96);
        assert_eq!(q.score(Prediction::Choice(Choice::Lower), &tight).right, Some(true));
        assert_eq!(q.score(Prediction::Choice(Choice::Same), &tight).right, Some(false));
        // ×0.8 whose interval reaches past ×1 is within the runs' noise: "about the same".
        let wide = timed(&q, 0.8, 0.6, 1.02);
        assert_eq!(q.score(Prediction::Choice(Choice::Same), &wide).right, Some(true));
        assert_eq!(q.score(Prediction::Choice(Choice::Lower), &wide).right, Some(false));
        let s = q.score(Prediction::Choice(Choice::Higher), &timed(&q, 1.3, 1.2, 1.4));
        assert_eq!((s.right, s.interval), (Some(true), Some([1.2, 1.4])));
        assert!(s.sentence().contains("95% interval ×1.2–×1.4: higher"), "{}", s.sentence());
        // A timed ratio without its interval is not graded (never by a made-up band).
        let bare = [fig("grad peak", 1.0), fig("no_grad peak", 0.5)];
        assert_eq!(q.score(Prediction::Choice(Choice::Lower), &bare).right, None);
        // Bytes repeat exactly: the point is the interval.
        let b = ratio(Ask::Direction { timed: false });
        assert_eq!(b.score(Prediction::Choice(Choice::Same), &[fig("grad peak", 8.0), fig("no_grad peak", 8.0)]).right, Some(true));
        assert_eq!(b.score(Prediction::Choice(Choice::Lower), &[fig("grad peak", 8.0), fig("no_grad peak", 7.9)]).right, Some(true));
        assert!(q.tolerance().contains("includes ×1") && b.tolerance().contains("to the byte"));
    }

    #[test]
    fn the_grade_reads_apart_from_the_verdict() {
        let q = ratio(LOG);
        let figures = [fig("grad peak", 40e6), fig("no_grad peak", 6e6)];
        assert_eq!(q.score(Prediction::Value(0.45), &figures).grade(), "off by ×3.0");
        assert_eq!(q.score(Prediction::Value(0.15), &figures).grade(), "right");
        assert_eq!(q.score(Prediction::Skipped, &figures).grade(), "not predicted");
        let d = ratio(Ask::Direction { timed: false });
        assert_eq!(d.score(Prediction::Choice(Choice::Higher), &figures).grade(), "wrong: it was lower");
    }

    #[test]
    fn missing_figures_are_not_scored_and_wildcards_match_suffixes() {
        let q = Question {
            text: "".into(),
            figure: "* weights parameters".into(),
            over: Some("fp32 parameters".into()),
            unit: "ratio".into(),
            ask: LOG,
        };
        let figures = [fig("fp32 parameters", 8.0), fig("bf16 weights parameters", 4.0)];
        assert_eq!(q.measured(&figures), Some(0.5));
        let s = q.score(Prediction::Value(0.5), &figures[..1]);
        assert_eq!((s.measured, s.right), (None, None));
        assert!(s.sentence().contains("not measured"));
        // A zero denominator is no measurement, not infinity.
        assert_eq!(q.measured(&[fig("fp32 parameters", 0.0), fig("bf16 weights parameters", 4.0)]), None);
    }

    #[test]
    fn answers_of_the_wrong_kind_or_out_of_range_are_refused() {
        let q = ratio(LOG);
        assert!(q.check(&Prediction::Value(0.5)).is_ok());
        assert!(q.check(&Prediction::Skipped).is_ok());
        let e = q.check(&Prediction::Value(20.0)).unwrap_err();
        assert!(e.contains("×0.01") && e.contains("×10"), "{e}");
        assert!(q.check(&Prediction::Value(f64::NAN)).is_err());
        assert!(q.check(&Prediction::Choice(Choice::Lower)).is_err());
        let yes_no = Question { unit: "bool".into(), over: None, ask: Ask::YesNo, ..ratio(LOG) };
        assert!(yes_no.check(&Prediction::Choice(Choice::Yes)).is_ok());
        assert!(yes_no.check(&Prediction::Choice(Choice::Same)).is_err());
        assert_eq!(yes_no.score(Prediction::Choice(Choice::Yes), &[fig("no_grad peak", 1.0)]).right, Some(true));
    }

    #[test]
    fn the_command_line_forms_parse() {
        let q = ratio(LOG);
        assert_eq!(q.parse("x0.5"), Ok(Prediction::Value(0.5)));
        assert_eq!(q.parse("×2"), Ok(Prediction::Value(2.0)));
        assert_eq!(q.parse("skip"), Ok(Prediction::Skipped));
        assert!(q.parse("lower").is_err() && q.parse("half").is_err() && q.parse("100").is_err());
        let bytes = Question { unit: "bytes".into(), ask: Ask::Bytes { min: 1.0, max: 1e12, within: 2.0 }, ..ratio(LOG) };
        assert_eq!(bytes.parse("12MiB"), Ok(Prediction::Value(12.0 * 1048576.0)));
        assert_eq!(bytes.format(12.0 * 1048576.0), "12.0 MiB");
    }

    #[test]
    fn predictions_read_as_the_api_documents_them() {
        let p: Prediction = serde_json::from_str(r#"{"value": 0.5}"#).unwrap();
        assert_eq!(p, Prediction::Value(0.5));
        let p: Prediction = serde_json::from_str(r#"{"choice": "lower"}"#).unwrap();
        assert_eq!(p, Prediction::Choice(Choice::Lower));
        let p: Prediction = serde_json::from_str(r#""skipped""#).unwrap();
        assert_eq!(p, Prediction::Skipped);
        assert!(serde_json::from_str::<Prediction>(r#"{"value": "half"}"#).is_err());
        let q = ratio(LOG);
        let json = serde_json::to_string(&q).unwrap();
        assert!(json.contains(r#""ask":{"log_scale":{"min":0.01"#), "{json}");
        let back: Question = serde_json::from_str(&json).unwrap();
        assert_eq!(back, q);
    }

    #[test]
    fn values_read_with_three_significant_figures() {
        assert_eq!(significant(0.153_42), "0.153");
        assert_eq!(significant(1.5), "1.5");
        assert_eq!(significant(4.0), "4");
        assert_eq!(significant(1234.6), "1235");
        assert_eq!(significant(0.0123), "0.0123");
    }
}
