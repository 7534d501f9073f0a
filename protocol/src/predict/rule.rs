//! The one rule by which an interval of a timed ratio decides lower, about the same or
//! higher — or decides nothing. Every page that reads a latency ratio against ×1 reads it
//! by [`decided`]: a card's grade ([`super::Question::score`]), the Lab's and Generate's
//! prediction and reading line, a learning path's change step, `/compare` and `gradless
//! compare` (through [`crate::noise::Comparison::decided`]), so the words beside a figure
//! and the grade under it cannot disagree.
//!
//! - wholly below ×1: **lower**; wholly above: **higher**;
//! - including ×1 and inside ×0.8–×1.25 ([`SAME_WITHIN_FACTOR`]): **about the same** — the
//!   noise rules out any change of a quarter or more either way;
//! - including ×1 but reaching past ×0.8 or ×1.25: **not decided** (`None`). Such an interval
//!   holds "lower", "the same" and "higher" alike (×0.30–×2.06 on a busy machine): the
//!   noise is too large to tell an effect from none, so nothing is graded and the page says
//!   so ([`not_decided`]) instead of calling it "about the same".

use super::Choice;

/// How far from ×1 an interval that includes ×1 may reach and still decide "about the
/// same": a quarter either way (×0.8–×1.25). Past it the interval cannot rule out a change
/// the lessons teach (no_grad's or a dtype's effect on a pass is often a quarter to a half).
pub const SAME_WITHIN_FACTOR: f64 = 1.25;

/// What an interval `[lo, hi]` of a ratio decides against ×1 (see the module docs); `None`
/// when it decides nothing. A point (`lo == hi`) always decides: bytes repeat exactly.
pub fn decided(lo: f64, hi: f64) -> Option<Choice> {
    if hi < 1.0 {
        Some(Choice::Lower)
    } else if lo > 1.0 {
        Some(Choice::Higher)
    } else if lo == hi || (lo * SAME_WITHIN_FACTOR >= 1.0 && hi <= SAME_WITHIN_FACTOR) {
        Some(Choice::Same)
    } else {
        None
    }
}

/// What the page says where [`decided`] decides nothing, after "not decided: " and the
/// cause (`cause`: why the interval is wide, e.g. "two runs of the same settings here
/// differ by up to 71%"): the cause, and what to do.
pub fn not_decided(cause: &str) -> String {
    format!("not decided: {cause}; rerun on a quieter machine, or with more iterations")
}

/// Three significant figures, without a trailing zero run: 0.153, 1.5, 42, 1234.
pub(crate) fn significant(v: f64) -> String {
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
