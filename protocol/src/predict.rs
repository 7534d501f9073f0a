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

mod rule;
mod scored;
pub use rule::{decided, not_decided, SAME_WITHIN_FACTOR};
pub(crate) use rule::significant;
pub use scored::Scored;

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

    /// The band a direction question's figures fall in, by [`decided`]: lower when the whole
    /// interval is below ×1, higher when above, about the same when it includes ×1 within
    /// ×0.8–×1.25; `None` when it decides nothing.
    pub fn band_of(&self, figures: &[Figure]) -> Option<Choice> {
        match self.ask {
            Ask::Direction { .. } => self.interval(figures).and_then(|[lo, hi]| decided(lo, hi)),
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
            Ask::Direction { .. } => decided(measured, measured),
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
        // A direction whose interval decides nothing grades nothing, and says why.
        let undecided = matches!(self.ask, Ask::Direction { .. }) && interval.is_some_and(|[lo, hi]| decided(lo, hi).is_none());
        let right = match (predicted, measured, self.ask) {
            (Prediction::Skipped, ..) | (_, None, _) => None,
            (Prediction::Choice(c), Some(_), Ask::Direction { .. }) => interval.and_then(|[lo, hi]| decided(lo, hi)).map(|band| band == c),
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
            not_graded: undecided.then(|| {
                not_decided("that interval reaches from lower to higher, the noise too large to tell a change from none")
            }),
        }
    }

    /// When an answer counts as right, as the card states it.
    pub fn tolerance(&self) -> String {
        match self.ask {
            Ask::Direction { timed: true } => format!("each side is timed many times, and the spread of those times gives a range the true ratio lies in (95% of the time). “Lower” or “higher” is right when the whole range is below or above ×1; “about the same” when the range includes ×1 and stays within ×{}–×{} (no change of a quarter either way). A range that includes ×1 but reaches further decides nothing: the noise is too large, and no answer is graded", significant(1.0 / SAME_WITHIN_FACTOR), significant(SAME_WITHIN_FACTOR)),
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


#[cfg(test)]
mod tests;
