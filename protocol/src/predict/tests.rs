//! Scoring predictions: each kind of question, the interval rule, the words.

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
    // ×0.93 whose interval reaches past ×1 and stays within ×0.8–×1.25 is within the
    // runs' noise: "about the same".
    let within = timed(&q, 0.93, 0.85, 1.02);
    assert_eq!(q.score(Prediction::Choice(Choice::Same), &within).right, Some(true));
    assert_eq!(q.score(Prediction::Choice(Choice::Lower), &within).right, Some(false));
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

/// The rule of issue 68: an interval that straddles ×1 widely decides nothing, grades no
/// answer and says so; one that decides is graded by its direction, in words that match.
#[test]
fn an_interval_that_straddles_one_widely_decides_nothing_and_grades_nothing() {
    use super::decided;
    assert_eq!(decided(0.5, 0.9), Some(Choice::Lower));
    assert_eq!(decided(1.1, 3.0), Some(Choice::Higher));
    assert_eq!(decided(0.85, 1.2), Some(Choice::Same));
    assert_eq!(decided(0.8, 1.25), Some(Choice::Same), "the band's edges are in it");
    assert_eq!(decided(0.79, 1.1), None);
    assert_eq!(decided(0.95, 1.3), None);
    assert_eq!(decided(1.0, 1.0), Some(Choice::Same), "a point (bytes) always decides");
    let q = ratio(Ask::Direction { timed: true });
    // inference_mode against no_grad on a busy machine: ×0.295–×2.06.
    let wide = timed(&q, 0.78, 0.295, 2.06);
    for c in [Choice::Lower, Choice::Same, Choice::Higher] {
        let s = q.score(Prediction::Choice(c), &wide);
        assert_eq!(s.right, None, "{c:?} must not be graded");
        assert_eq!(s.grade(), "not decided");
        assert_eq!(s.measured_band(), None);
        let said = s.sentence();
        assert!(said.contains("95% interval ×0.295–×2.06): not decided: ") && said.contains("rerun on a quieter machine, or with more iterations"), "{said}");
        let measured = said.split(", measured").nth(1).unwrap_or_default();
        assert!(!measured.contains("about the same") && !said.contains(": wrong"), "{said}");
    }
    let skipped = q.score(Prediction::Skipped, &wide);
    assert!(skipped.sentence().starts_with("run without predicting; measured ×0.78 (95% interval ×0.295–×2.06): not decided"), "{}", skipped.sentence());
    // Decided: the words and the grade agree with the figure.
    let lower = q.score(Prediction::Choice(Choice::Lower), &timed(&q, 0.6, 0.5, 0.7));
    assert_eq!((lower.right, lower.grade().as_str()), (Some(true), "right"));
    assert!(lower.sentence().contains("95% interval ×0.5–×0.7: lower): right"), "{}", lower.sentence());
    let wrong = q.score(Prediction::Choice(Choice::Higher), &timed(&q, 0.6, 0.5, 0.7));
    assert_eq!(wrong.grade(), "wrong: it was lower");
    assert!(q.tolerance().contains("decides nothing"), "{}", q.tolerance());
}
