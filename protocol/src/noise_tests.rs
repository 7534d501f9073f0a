//! The run-to-run floor's tests: simulated runs whose between-run drift the test chooses,
//! so each claim (A/A pairs read as the same, a real difference still reads) is checked
//! against a known truth rather than a copied figure.

use super::*;
use crate::testing::{report, with_latencies};

/// SplitMix64 and Box–Muller: seeded normal draws.
struct Gen(u64);

impl Gen {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform().max(1e-12), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// One run of `n` iterations around `level` ms: the run's own level drifts by
    /// `between` (ln SD) from the next run's, each iteration scatters by `within`.
    fn run(&mut self, n: usize, level: f64, between: f64, within: f64) -> Vec<f64> {
        let run_level = level * (between * self.normal()).exp();
        (0..n)
            .map(|_| run_level * (within * self.normal().abs()).exp())
            .collect()
    }
}

fn run_of(grad: &str, latencies: &[f64]) -> Report {
    with_latencies(report(grad, 1, vec![]), latencies)
}

#[test]
fn student_t_falls_towards_the_normal_quantile() {
    assert!(t99(0).is_infinite());
    let ts: Vec<f64> = (1..200).map(t99).collect();
    assert!(ts.windows(2).all(|w| w[0] >= w[1]), "decreasing in df");
    assert!((t99(1000) - 2.576).abs() < 0.01);
    // Continuous across the table's end.
    assert!((t99(30) - t99(31)).abs() < 0.01);
}

#[test]
fn a_runs_drift_is_the_spread_of_its_block_medians() {
    let flat = run_of("no_grad", &[10.0; 20]);
    assert_eq!(block_drift(&flat), Some((0.0, 3)));
    // The machine got twice as slow halfway through: the blocks see it.
    let mut stepped = vec![10.0; 10];
    stepped.extend([20.0; 10]);
    let (sigma, df) = block_drift(&run_of("no_grad", &stepped)).unwrap();
    assert!(sigma > 0.3, "{sigma}");
    assert_eq!(df, 3);
    // Too few iterations for two blocks of four.
    assert_eq!(block_drift(&run_of("no_grad", &[10.0; 7])), None);
    // A generation slowing down step by step (no cache) is its trend, not drift; the same
    // latencies as forward passes are drift.
    let growing: Vec<f64> = (0..32).map(|i| 10.0 * (0.03 * i as f64).exp()).collect();
    assert!(drift(&growing, true).unwrap().0 < 1e-9);
    assert!(drift(&growing, false).unwrap().0 > 0.1);
}

#[test]
fn the_book_pools_repeats_of_identical_settings_only() {
    let mut book = NoiseBook::default();
    let a = run_of("no_grad", &[10.0; 8]);
    assert_eq!(book.floor(&a), None, "nothing recorded");
    book.add(&a);
    assert_eq!(book.floor(&a), None, "one run of a setting says nothing about repeats");
    // Another setting far away: not a repeat, pools nothing.
    book.add(&run_of("enabled", &[40.0; 8]));
    assert_eq!(book.floor(&a), None);
    // A repeat 10% slower: ln(1.1)/√2 between two runs of one setting, one degree of freedom.
    book.add(&run_of("no_grad", &[11.0; 8]));
    let f = book.floor(&a).unwrap();
    assert_eq!((f.df, f.runs), (1, 2));
    assert!((f.sigma_log - 1.1f64.ln() / 2f64.sqrt()).abs() < 1e-12, "{f:?}");
    // Too few repeats of this model: pooled over the device (a model with no repeats too).
    let mut other_model = run_of("no_grad", &[10.0; 8]);
    other_model.spec.model = crate::ModelId::TinyMlp;
    assert_eq!(book.floor(&other_model).unwrap().scope, NoiseScope::Device);
    // A model 50× slower per pass borrows nothing from these repeats: a short run's noise
    // is not a long one's.
    let mut slow_model = run_of("no_grad", &[500.0; 8]);
    slow_model.spec.model = crate::ModelId::TinyMlp;
    assert_eq!(book.floor(&slow_model), None);
    // Nor does a generation, whose p50 is a decode step's, at the same scale.
    let mut generation = other_model.clone();
    generation.spec.generate = Some(Default::default());
    assert_eq!(book.floor(&generation), None);
    // Another device shares nothing.
    let mut elsewhere = a.clone();
    elsewhere.env.device_name = "another cpu".into();
    assert_eq!(book.floor(&elsewhere), None);
    // Runs too short to compare are not kept.
    let mut short = NoiseBook::default();
    short.add(&run_of("no_grad", &[10.0; 3]));
    short.add(&run_of("no_grad", &[12.0; 3]));
    assert_eq!(short.floor(&a), None);
}

/// 20 A/A pairs on a machine whose level drifts 6% (ln SD) from run to run while each run
/// is quiet (1% within): the runs' own intervals call most pairs different; decided against
/// the floor the book measured from the pairs before, at most one of 20 is.
#[test]
fn a_a_pairs_read_as_no_difference_beyond_run_to_run_noise() {
    let mut gen = Gen(38);
    let mut book = NoiseBook::default();
    let (mut differ_within_run, mut differ) = (0, 0);
    for _ in 0..20 {
        let mut a = run_of("no_grad", &gen.run(20, 10.0, 0.06, 0.01));
        a.run_to_run = book.floor(&a);
        book.add(&a);
        let mut b = run_of("no_grad", &gen.run(20, 10.0, 0.06, 0.01));
        b.run_to_run = book.floor(&b);
        book.add(&b);
        let c = Comparison::of_runs(&b, &a).unwrap();
        if c.ci.side(1.0) != Side::Straddles {
            differ_within_run += 1;
        }
        if c.differs() {
            differ += 1;
        } else {
            // The same, or (a young server's floor, ±27% here) not decided: never a change.
            let text = c.latency_reading();
            assert!(text.starts_with("no difference beyond run-to-run noise") || text.starts_with("not decided: "), "{text}");
            assert!(!matches!(c.decided(), Some(crate::Choice::Lower | crate::Choice::Higher)), "{text}");
        }
    }
    eprintln!("A/A: {differ_within_run} of 20 differ by the runs' own intervals, {differ} against the floor");
    assert!(differ_within_run >= 10, "the drift is real: {differ_within_run} of 20");
    assert!(differ <= 1, "{differ} of 20 A/A pairs read as different");
}

#[test]
fn a_real_difference_beyond_the_floor_is_still_reported() {
    let mut gen = Gen(6);
    let mut book = NoiseBook::default();
    for _ in 0..6 {
        book.add(&run_of("no_grad", &gen.run(20, 10.0, 0.06, 0.01)));
    }
    let mut fast = run_of("no_grad", &gen.run(20, 10.0, 0.06, 0.01));
    fast.run_to_run = book.floor(&fast);
    let mut slow = run_of("enabled", &gen.run(20, 20.0, 0.06, 0.01));
    slow.run_to_run = book.floor(&slow);
    let c = Comparison::of_runs(&slow, &fast).unwrap();
    assert_eq!(c.verdict, Verdict::Slower, "{c:?}");
    let text = c.latency_reading();
    assert!(text.contains("× slower (") && text.contains("beyond this server's run-to-run noise (two runs of the same settings here land up to "), "{text}");
    assert!(c.chart_reading("the previous run").starts_with("p50 2."), "{c:?}");
    let back = Comparison::of_runs(&fast, &slow).unwrap();
    assert_eq!(back.verdict, Verdict::Faster);
    assert!(back.latency_reading().contains("× faster ("));
    assert!(back.chart_reading("the previous run").contains("lower than the previous run"));
}

#[test]
fn within_the_floor_the_reading_names_it_and_where_it_was_measured() {
    // Quiet runs 5% apart, the server measured ±15% between repeats: within its noise.
    let a = run_of("no_grad", &[10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01]);
    let mut b = run_of("no_grad", &[10.5, 10.51, 10.49, 10.5, 10.52, 10.48, 10.5, 10.51]);
    b.run_to_run = Some(RunToRun { sigma_log: 0.035, df: 20, runs: 24, scope: NoiseScope::Model });
    let c = Comparison::of_runs(&b, &a).unwrap();
    assert_eq!(c.verdict, Verdict::WithinRunToRun, "{c:?}");
    let text = c.latency_reading();
    assert!(text.contains("this server's run-to-run noise (two runs of the same settings here land up to 15% apart; measured from 24 repeated runs"), "{text}");
    assert_eq!(
        c.chart_reading("the previous run"),
        "p50 within run-to-run noise (±15%)"
    );
    // The same pair with nothing recorded: the runs' own drift (almost none) is the floor,
    // so the 5% stands.
    b.run_to_run = None;
    let c = Comparison::of_runs(&b, &a).unwrap();
    assert_eq!(c.floor.as_ref().map(|f| &f.source), Some(&FloorSource::Drift));
    assert_eq!(c.verdict, Verdict::Slower, "{c:?}");
}

#[test]
fn without_a_measured_floor_nothing_is_claimed() {
    // Five iterations: no blocks; nothing recorded.
    let (a, b) = (run_of("no_grad", &[10.0, 10.1, 9.9, 10.0, 10.05]), run_of("no_grad", &[20.0, 20.2, 19.8, 20.0, 20.1]));
    let c = Comparison::of_runs(&b, &a).unwrap();
    assert_eq!(c.verdict, Verdict::NoFloor);
    assert!(!c.differs());
    assert!(c.latency_reading().starts_with("not decided"), "{}", c.latency_reading());
    // Too few to bootstrap.
    let few = Comparison::of_runs(&run_of("no_grad", &[1.0, 2.0, 3.0]), &a).unwrap();
    assert_eq!(few.verdict, Verdict::TooFew);
}

#[test]
fn a_median_the_fast_iterations_do_not_share_is_the_machines_load() {
    let record = Some(RunToRun { sigma_log: 0.02, df: 30, runs: 40, scope: NoiseScope::Model });
    let quiet: Vec<f64> = (0..20).map(|i| 10.0 + (i % 5) as f64 * 0.05).collect();
    // Half the iterations of the second run were preempted: its median doubled, its
    // fastest iterations are where the quiet run's are.
    let loaded: Vec<f64> = quiet.iter().enumerate().map(|(i, x)| if i % 3 == 0 { *x } else { x * 2.0 }).collect();
    let (a, mut b) = (run_of("no_grad", &quiet), run_of("no_grad", &loaded));
    b.run_to_run = record.clone();
    let c = Comparison::of_runs(&b, &a).unwrap();
    assert_eq!(c.verdict, Verdict::WithinRunToRun, "{c:?}");
    // A setting that costs twice as much moves every iteration.
    let mut slower = run_of("enabled", &quiet.iter().map(|x| x * 2.0).collect::<Vec<_>>());
    slower.run_to_run = record;
    assert_eq!(Comparison::of_runs(&slower, &a).unwrap().verdict, Verdict::Slower);
}

#[test]
fn the_noise_interval_includes_one_exactly_when_the_runs_do_not_differ() {
    let quiet = |f: f64| run_of("no_grad", &[10.0 * f, 10.01 * f, 9.99 * f, 10.0 * f, 10.02 * f, 9.98 * f, 10.0 * f, 10.01 * f]);
    let recorded = RunToRun { sigma_log: 0.035, df: 20, runs: 24, scope: NoiseScope::Model };
    for f in [0.5, 0.9, 0.97, 1.0, 1.03, 1.05, 1.2, 2.0] {
        let a = quiet(1.0);
        let mut b = quiet(f);
        b.run_to_run = Some(recorded.clone());
        let c = Comparison::of_runs(&b, &a).unwrap();
        let [lo, hi] = c.noise_interval();
        assert!(lo <= c.ci.ratio && c.ci.ratio <= hi, "{f}: {lo}..{hi}");
        assert_eq!(lo <= 1.0 && 1.0 <= hi, !c.differs(), "×{f}: {:?} against {lo}..{hi}", c.verdict);
    }
}

/// Issue 68's rule for two runs: a noise too large to decide says so plainly and decides
/// nothing (no grade follows from it); a decision's words follow its direction, and each
/// reading shows one interval, the one that decided.
#[test]
fn a_floor_too_wide_to_decide_says_so_and_a_decision_reads_its_direction() {
    // p50 29 → 19 ms, every iteration moved, but this server's repeats land up to 71% apart.
    let quiet = |level: f64| run_of("no_grad", &(0..20).map(|i| level + (i % 5) as f64 * 0.01 * level).collect::<Vec<_>>());
    let wide = RunToRun { sigma_log: 0.1333, df: 20, runs: 24, scope: NoiseScope::Model };
    let a = quiet(29.0);
    let mut b = quiet(19.0);
    b.run_to_run = Some(wide.clone());
    let c = Comparison::of_runs(&b, &a).unwrap();
    assert_eq!(c.decided(), None, "{c:?}");
    let text = c.latency_reading();
    assert!(text.starts_with("not decided: the medians say 1.53× faster, but two runs of the same settings here differ by up to 71% (measured from 24 repeated runs"), "{text}");
    assert!(text.ends_with("; rerun on a quieter machine, or with more iterations"), "{text}");
    assert!(!text.contains("no difference"), "{text}");
    assert_eq!(c.chart_reading("the previous run"), "p50 against the previous run: not decided (noise here ±71%)");
    // The grade follows: a change step's p50 answered "lower" is not graded.
    let q = crate::Question { text: "".into(), figure: "after".into(), over: Some("before".into()), unit: "ratio".into(), ask: crate::Ask::Direction { timed: true } };
    let [lo, hi] = c.noise_interval();
    assert!(lo < 1.0 / crate::predict::SAME_WITHIN_FACTOR && hi >= 1.0, "{lo}..{hi}");
    let figure = |name: &str, value: f64| crate::Figure { name: name.into(), value, unit: "ratio".into() };
    let (l, h) = q.interval_names();
    let figures = [figure("after", 19.0), figure("before", 29.0), figure(&l, lo), figure(&h, hi)];
    let s = q.score(crate::Prediction::Choice(crate::Choice::Lower), &figures);
    assert_eq!((s.right, s.grade().as_str()), (None, "not decided"));

    // The same pair on a quiet server (±15%): decided lower, and the words say faster with
    // the interval that decided, never the runs' own one beside it.
    b.run_to_run = Some(RunToRun { sigma_log: 0.035, df: 20, runs: 24, scope: NoiseScope::Model });
    let c = Comparison::of_runs(&b, &a).unwrap();
    assert_eq!(c.decided(), Some(crate::Choice::Lower));
    let [lo, hi] = c.noise_interval();
    let text = c.latency_reading();
    assert!(text.starts_with(&format!("1.53× faster ({:.2}–{:.2}), beyond", 1.0 / hi, 1.0 / lo)), "{text}");
    assert!(c.chart_reading("the previous run").starts_with("p50 1.53× lower than the previous run ("));
    // A slow iteration's load: the median moved, the fastest iterations did not.
    let loaded: Vec<f64> = a.latencies().iter().enumerate().map(|(i, x)| if i % 3 == 0 { *x } else { x * 2.0 }).collect();
    let mut l = run_of("no_grad", &loaded);
    l.run_to_run = Some(RunToRun { sigma_log: 0.02, df: 30, runs: 40, scope: NoiseScope::Model });
    let c = Comparison::of_runs(&l, &a).unwrap();
    assert_eq!(c.decided(), None);
    assert!(c.latency_reading().contains("the fastest iterations did not move with them"), "{}", c.latency_reading());
}
