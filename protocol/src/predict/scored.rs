//! A prediction next to what was measured ([`Scored`]): the grade, the band the measurement
//! fell in, and the sentence records, pictures and exports carry.

use serde::{Deserialize, Serialize};

use super::{decided, Ask, Choice, Prediction, Question};

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
    /// Why the answer was not graded although it was given, headed by what the page says
    /// instead of a grade: "not graded here: …" (the effect cannot show on this device, so
    /// its figure here answers a different question), "not decided: …" (the interval
    /// decides nothing: [`super::decided`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_graded: Option<String>,
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
    /// lower", "not graded here", "not decided", "not predicted".
    pub fn grade(&self) -> String {
        if matches!(self.predicted, Prediction::Skipped) {
            return "not predicted".into();
        }
        if let Some(why) = &self.not_graded {
            return why.split(':').next().unwrap_or("not graded here").trim().into();
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

    /// The band the measurement fell in, by the statistic that graded it; `None` where it
    /// decides nothing ([`decided`]).
    pub fn measured_band(&self) -> Option<Choice> {
        match (self.question.ask, self.interval, self.measured) {
            (Ask::Direction { .. }, Some([lo, hi]), _) => decided(lo, hi),
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
                (None, Some([lo, hi])) if lo < hi => format!(
                    "measured {} (95% interval {}–{})",
                    self.question.format(m),
                    self.question.format(lo),
                    self.question.format(hi)
                ),
                (Some(band), _) if self.question.ask != Ask::YesNo => {
                    format!("measured {} ({})", self.question.format(m), band.as_str())
                }
                _ => format!("measured {}", self.question.format(m)),
            },
            None => "not measured on this device".into(),
        };
        let verdict = match (self.right, &self.not_graded) {
            (_, Some(why)) if why.starts_with("not decided") => format!(": {why}"),
            (_, Some(why)) => format!(" ({why})"),
            (Some(true), _) => ": right".into(),
            (Some(false), _) => ": wrong".into(),
            (None, _) => String::new(),
        };
        match self.predicted {
            Prediction::Skipped => {
                // Unpredicted, only a measurement that decides nothing says so.
                let said = if verdict.starts_with(": not decided") { verdict.as_str() } else { "" };
                format!("run without predicting; {measured}{said}")
            }
            _ => format!("predicted {}, {measured}{verdict}", self.predicted_text()),
        }
    }
}
