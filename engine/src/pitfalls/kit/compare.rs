//! The one noise-aware comparison of timings ([`Shift`], a bootstrap interval, and the
//! figures that carry it, [`interval_figures`]) and the one comparison of byte counts
//! ([`bytes_compared`]).

use protocol::stats::{RatioCi, Side};
use protocol::{Figure, Unit};

use super::FigureName;

// The figures of a question's noise interval (see `interval_figures`): a direction question
// about latency is graded by them.
pub const INTERVAL_HIGH: FigureName = FigureName::new("{}, 95% interval high", Unit::Ratio);
pub const INTERVAL_LOW: FigureName = FigureName::new("{}, 95% interval low", Unit::Ratio);

/// How one set of timings compares with another, beyond their noise: the ratio of their
/// medians (`slow` over `fast`) with its 95% bootstrap interval ([`RatioCi`], the one the
/// Lab, `/compare` and the CLI read). No single outlier can move a median far, and an
/// interval that straddles a rule's threshold makes the verdict `inconclusive`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shift {
    pub slow_p50: f64,
    pub fast_p50: f64,
    /// `None` when a side is empty or its median is not positive.
    pub ci: Option<RatioCi>,
}

impl Shift {
    pub fn of(slow: &[f64], fast: &[f64]) -> Shift {
        Shift {
            slow_p50: p(slow, 50.0),
            fast_p50: p(fast, 50.0),
            ci: RatioCi::of(slow, fast),
        }
    }

    /// Where the ratio's interval sits against `threshold` (untrusted: straddles).
    pub fn side(&self, threshold: f64) -> Side {
        self.ci.map_or(Side::Straddles, |c| c.side(threshold))
    }

    /// `slow` is slower than `fast` beyond noise (the interval lies above 1).
    pub fn slower(&self) -> bool {
        self.side(1.0) == Side::Above
    }

    /// The interval's bounds (0, 0 when there is none), for figures.
    pub fn bounds(&self) -> (f64, f64) {
        self.ci.map_or((0.0, 0.0), |c| (c.lo, c.hi))
    }

    /// A person's reading of the difference, e.g. "1.23× (95% interval 1.10–1.35, beyond
    /// noise)".
    pub fn describe(&self) -> String {
        let ratio = self.slow_p50 / self.fast_p50;
        let Some(ci) = self.ci else {
            return format!("{ratio:.2}× (no interval: a side has no positive median)");
        };
        let noise = if !ci.trusted() {
            "too few samples to tell it from noise"
        } else if ci.side(1.0) == Side::Straddles {
            "within noise"
        } else {
            "beyond noise"
        };
        format!("{ratio:.2}× (95% interval {}, {noise})", ci.range())
    }

    /// What more measuring would do about the straddled `thresholds` (the nearest
    /// decision counts), for an inconclusive reason.
    pub fn more(&self, thresholds: &[f64]) -> String {
        let n = thresholds
            .iter()
            .filter_map(|&t| self.ci.and_then(|c| c.more_iterations(t)))
            .min();
        match n {
            Some(n) => format!("about {n} more iterations of each would likely decide it"),
            None if self.ci.is_some_and(|c| !c.trusted()) => format!(
                "at least {} iterations of each are needed to decide it",
                protocol::stats::MIN_SAMPLES
            ),
            None => "the ratio sits so close to the threshold that more iterations would likely not decide it".into(),
        }
    }
}

/// The `q`-th percentile of unsorted samples (numpy's default interpolation); 0 if empty.
pub fn p(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    protocol::stats::percentile(&sorted, q)
}

/// The figures that carry `question`'s 95% noise interval (see
/// [`protocol::Question::interval_names`]), from `shift`, which must compare the question's
/// own arms in its order: `Shift::of(figure's samples, over's samples)`. A direction
/// question about latency is graded by them, the same interval the verdict reads.
pub fn interval_figures(question: &protocol::Question, shift: &Shift) -> Vec<Figure> {
    let (lo, hi) = question.interval_names();
    let (l, h) = shift.bounds();
    vec![Figure::new(lo, l, Unit::Ratio), Figure::new(hi, h, Unit::Ratio)]
}

/// How two byte counts compare, by the one rule that also grades a byte question
/// ([`protocol::Ask::SameBytes`], [`protocol::bytes_direction`]): the band, and the words a
/// verdict uses for it, `"<a> against <b> (×r): no difference beyond 1%"` or `"…: lower"`.
/// A card whose question asks about `a / b` puts these words in its reason, so its lesson
/// and its grade cannot disagree (the device tests check every report).
pub fn bytes_compared(a: f64, b: f64) -> (protocol::Choice, String) {
    let within = protocol::SAME_BYTES_WITHIN;
    let r = if b != 0.0 { a / b } else { f64::NAN };
    let band = protocol::bytes_direction(r, within);
    let words = match band {
        protocol::Choice::Same => format!("no difference beyond {}%", 100.0 * within),
        other => other.as_str().to_string(),
    };
    let fmt = |x: f64| protocol::format_bytes(x.max(0.0) as u64);
    (band, format!("{} against {} (×{r:.3}): {words}", fmt(a), fmt(b)))
}
