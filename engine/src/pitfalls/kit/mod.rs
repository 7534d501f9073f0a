//! The parts every experiment shares, so that each experiment reads as its lesson and
//! nothing else, one concept a file:
//! - [`context`]: the context it runs in ([`Ctx`], [`Setup`]);
//! - [`measure`](mod@measure): the one way to measure a run ([`measure()`]), the one way to
//!   time passes ([`time_passes`]), the one per-pass memory measurement ([`pass_memory`],
//!   the run's own method from [`crate::lab`]);
//! - [`compare`]: the one noise-aware comparison of timings ([`Shift`], a bootstrap
//!   interval) and of byte counts ([`bytes_compared`]);
//! - [`verdict`]: the one verdict builder ([`Decision`]) and an experiment's [`Outcome`];
//! - [`figure`]: the figures and series a card reports, each named by a [`FigureName`]
//!   const defined once, so a misspelt figure does not compile;
//! - [`sizes`]: fits and the element cap of a batch sweep.
//!
//! Failures from libtorch go through [`catch_torch`](crate::torch_call::catch_torch) /
//! [`torch_failure`](crate::torch_call::torch_failure), so an out-of-memory is classified
//! the same way in an experiment as in a run.

pub mod compare;
pub mod context;
pub mod figure;
pub mod measure;
pub mod sizes;
pub mod verdict;

pub use compare::*;
pub use context::*;
pub use figure::*;
pub use measure::*;
pub use sizes::*;
pub use verdict::*;

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{ModelId, Verdict};

    #[test]
    fn linear_fit_recovers_a_line() {
        let (slope, r2) = linear_fit(&[1.0, 2.0, 4.0, 8.0], &[3.0, 5.0, 9.0, 17.0]);
        assert!((slope - 2.0).abs() < 1e-12 && (r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn shifts_read_intervals_and_latency_rules_can_be_inconclusive() {
        let fast: Vec<f64> = (0..20).map(|i| 10.0 + (i % 5) as f64 * 0.1).collect();
        let slow: Vec<f64> = fast.iter().map(|x| x * 2.0).collect();
        let shift = Shift::of(&slow, &fast);
        assert!(shift.slower() && shift.describe().contains("beyond noise"));
        let d = Decision::latency(&shift, 1.5, 1.5, "yes", "no");
        assert_eq!((d.verdict, d.reason.as_str()), (Verdict::Confirmed, "yes"));
        let d = Decision::latency(&shift, 3.0, 3.0, "yes", "no");
        assert_eq!((d.verdict, d.reason.as_str()), (Verdict::Refuted, "no"));
        // The same distribution: the interval straddles 1.
        let same = Shift::of(&fast, &fast);
        assert!(!same.slower() && same.describe().contains("within noise"));
        let d = Decision::latency(&same, 1.0, 1.0, "yes", "no");
        assert_eq!(d.verdict, Verdict::Inconclusive);
        // ... unless the claim's cost must exceed a margin the interval is wholly below.
        let d = Decision::latency(&same, 1.0, 1.05, "yes", "no");
        assert_eq!(d.verdict, Verdict::Refuted);
        // One huge outlier among otherwise equal samples cannot make a shift.
        let mut outlier = fast.clone();
        outlier[3] = 1e6;
        assert!(!Shift::of(&outlier, &fast).slower());
        // Three samples each can never be told apart from noise, however far apart.
        let few = Shift::of(&[10.0, 11.0, 12.0], &[1.0, 1.1, 1.2]);
        assert!(!few.slower() && few.describe().contains("too few samples"));
        let d = Decision::latency(&few, 1.0, 1.0, "yes", "no");
        assert!(d.verdict == Verdict::Inconclusive && d.reason.contains("iterations of each"));
        assert!(Shift::of(&[], &fast).ci.is_none());
    }

    #[test]
    fn the_element_cap_keeps_every_tensor_below_two_to_the_31() {
        for model in [
            ModelId::TinyMlp,
            ModelId::Resnet18,
            ModelId::Resnet50,
            ModelId::MobilenetV2,
            ModelId::Transformer,
        ] {
            let size = model.input().default;
            let cap = element_cap(model, size) as u64;
            let per_sample = largest_tensor_per_sample(model, size);
            assert!(cap * per_sample < 1 << 31, "{model:?}");
            assert!(
                (cap + 1) * per_sample >= 1 << 31,
                "{model:?}: the cap is the largest"
            );
        }
        // ResNet-18 at 224²: the stem output at batch 4096 has 3.3e9 elements.
        assert!(element_cap(ModelId::Resnet18, 224) < 4096);
    }
}
