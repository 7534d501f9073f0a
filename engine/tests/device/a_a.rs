//! The A/A test of the grading rule (issue: one statistic decides the grade and the
//! verdict): two arms of identical settings, timed interleaved as a card times its arms,
//! graded as a card grades "about the same" — by the 95% interval of the ratio of their
//! medians, the interval the verdicts read. With nothing to find, "about the same" must be
//! right at least 19 times in 20; a grading band narrower than the noise would fail here.
//!
//! Ignored by default (it times 20 × 2 × 15 passes; about a minute on two cores):
//! `cargo test --release -p engine --test device a_a -- --ignored --nocapture`.

use engine::lab::forward;
use engine::pitfalls::kit::{interval_figures, time_passes, Ctx, Setup, Shift};
use engine::RunControl;
use protocol::{Ask, Choice, DeviceKind, Figure, GradMode, ModelId, PitfallOptions, Prediction, Question};

use crate::common;

/// Comparisons, and timed passes per arm in each (a card's CPU default is 15 or more).
const TRIALS: usize = 20;
const PASSES: usize = 15;

#[test]
#[ignore = "a statistical check of the grading rule: run by hand, its count goes in the notes"]
fn about_the_same_is_right_for_identical_arms() {
    let _lock = common::cpu_lock();
    let worker = common::worker();
    let right = worker
        .call(|lab| {
            tch::set_num_threads(1);
            let control = RunControl::default();
            let ctx = Ctx { device: DeviceKind::Cpu, opts: PitfallOptions::default(), control: &control, python: None };
            let setup = Setup::with_batch(&ctx, ModelId::TinyMlp, 8, GradMode::NoGrad);
            let model = setup.fresh(lab, &ctx).expect("model");
            let input = setup.input(&model, &ctx).expect("input");
            let question = Question {
                text: "A against A?".into(),
                figure: "A p50".into(),
                over: Some("B p50".into()),
                unit: "ratio".into(),
                ask: Ask::Direction { timed: true },
            };
            let mut right = 0;
            for trial in 0..TRIALS {
                let times = time_passes(&ctx, PASSES, 2, |_, _| forward(&model, &input, &setup.spec, ctx.device)).expect("timed");
                let shift = Shift::of(&times[0], &times[1]);
                let median = |v: &[f64]| protocol::stats::median(v).unwrap_or(0.0);
                let mut figures = vec![
                    Figure { name: "A p50".into(), value: median(&times[0]), unit: "ms".into() },
                    Figure { name: "B p50".into(), value: median(&times[1]), unit: "ms".into() },
                ];
                figures.extend(interval_figures(&question, &shift));
                let scored = question.score(Prediction::Choice(Choice::Same), &figures);
                println!("trial {trial:2}: {}", scored.sentence());
                right += usize::from(scored.right == Some(true));
            }
            right
        })
        .expect("worker alive");
    println!("A/A: \"about the same\" graded right in {right} of {TRIALS}");
    assert!(right >= TRIALS - 1, "identical arms graded as different {} times in {TRIALS}", TRIALS - right);
}
