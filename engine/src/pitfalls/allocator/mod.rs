//! Memory budgets and the CUDA caching allocator: how the batch meets a budget, why
//! reserved is not leaked, and what empty_cache() costs.
//!
//! One file per card: [`batch_scaling`], [`allocated_vs_reserved`], [`empty_cache`]; what several of them share is here.

use protocol::{
    ChartKind, FailureKind, GradMode, ModelId, RunFailure, DEFAULT_CPU_BUDGET_BYTES,
    DEFAULT_CUDA_BUDGET_BYTES,
};

use super::kit::{describe, element_cap, fig, fig_of, linear_fit, measure, mib, numbered, p, series, series_of, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::{Card, Needs, Said};
use crate::lab::{forward, Lab};
use crate::torch_call::torch_failure;
use crate::torch_ext;
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod batch_scaling;
pub mod allocated_vs_reserved;
pub mod empty_cache;

pub use batch_scaling::*;
pub use allocated_vs_reserved::*;
pub use empty_cache::*;

/// The cards about the caching allocator apply where the device's meter reports a reserved
/// pool (CUDA); elsewhere this is their not-applicable decision, saying why.
pub fn no_pool(reserved: Option<u64>, why: &str) -> Option<Decision> {
    reserved.is_none().then(|| {
        Decision::not_applicable(format!(
            "{why} This device reports no reserved pool. Run this card on a server with a GPU to see the effect."
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::Verdict;

    #[test]
    fn allocator_cards_apply_only_where_the_meter_reports_a_pool() {
        // A CPU-like reading: no reserved figure.
        let na = no_pool(None, "why.").expect("not applicable without a pool");
        assert_eq!(na.verdict, Verdict::NotApplicable);
        assert!(na.reason.contains("GPU"));
        // A CUDA-like reading: the rule decides.
        assert!(no_pool(Some(0), "why.").is_none());
    }

    #[test]
    fn reserved_rule_needs_allocated_back_at_baseline_and_a_pool_above_it() {
        let m = 1 << 20;
        assert_eq!(
            reserved_rule(5 * m, 5 * m, 50 * m).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            reserved_rule(6 * m, 5 * m, 50 * m).verdict,
            Verdict::Refuted,
            "a leak"
        );
        assert_eq!(
            reserved_rule(5 * m, 5 * m, 5 * m).verdict,
            Verdict::Refuted,
            "no pool kept"
        );
    }

    #[test]
    fn empty_cache_rule_needs_a_shift_that_one_request_cannot_make() {
        let without: Vec<f64> = (0..100).map(|i| 4.0 + (i % 10) as f64 * 0.01).collect();
        let with: Vec<f64> = without.iter().map(|x| x + 0.5).collect();
        assert_eq!(
            empty_cache_rule(0, &with, &without).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            empty_cache_rule(4096, &with, &without).verdict,
            Verdict::Refuted,
            "empty_cache must not free a held tensor"
        );
        // The same requests plus a few very slow ones (less than a tenth): not decided.
        let mut jitter = without.clone();
        for x in jitter.iter_mut().take(9) {
            *x = 100.0;
        }
        assert_eq!(
            empty_cache_rule(0, &jitter, &without).verdict,
            Verdict::Refuted
        );
    }
}
