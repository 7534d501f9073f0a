//! What autograd keeps alive: eval() leaves it on, kept outputs keep their graph, and
//! freezing parameters is a partial no_grad.
//!
//! One file per card: [`eval_and_autograd`], [`output_lifetime`], [`freeze_vs_nograd`]; what several of them share is here.

use protocol::{ChartKind, GradMode, ModelId, RunFailure, RunSpec};

use super::kit::{bytes_compared, fig, measure, mib, named, pass_memory, series, series_of, trace_pass, Ctx, Decision, MIB, Outcome, Setup};
use protocol::NamedTrace;
use super::{Card, Needs, Said};
use crate::lab::{forward, Lab};
use crate::torch_call::{catch_torch, synchronize, torch_failure};
use crate::pitfalls::figures::{P50_LATENCY_MS, PEAK_ABOVE_BASELINE_MIB};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod eval_and_autograd;
pub mod output_lifetime;
pub mod freeze_vs_nograd;

pub use eval_and_autograd::*;
pub use output_lifetime::*;
pub use freeze_vs_nograd::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const EVAL_NO_GRAD_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("eval+no_grad peak above baseline", Unit::Bytes);

/// The layers of `model` with the sizes a memory estimate needs (the ResNet-18 and the
/// tiny MLP, which the memory cards run by default); `None` for the other models.
pub(super) fn architecture(model: ModelId, size: u32) -> Option<String> {
    match model {
        ModelId::Resnet18 => Some("ResNet-18: a 7×7 stride-2 convolution to 64 channels and a 3×3 stride-2 max-pool; then four stages of two residual blocks (two 3×3 convolutions each; the first block of stages 2–4 also has a 1×1 stride-2 shortcut convolution) at 64, 128, 256 and 512 channels, each stage after the first halving the side; every convolution followed by BatchNorm, ReLUs in place; global average pooling and a linear layer to 1000 classes".into()),
        ModelId::TinyMlp => Some(format!("Tiny MLP: Linear({size} → 512) → BatchNorm → ReLU → Dropout(p = 0.5), then Linear(512 → 512) → BatchNorm → ReLU → Dropout(p = 0.5), then Linear(512 → 10)")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::Verdict;

    #[test]
    fn the_freeze_rule_needs_frozen_like_no_grad_and_partial_strictly_between() {
        let m = 1 << 20;
        assert_eq!(
            freeze_rule(100 * m, 10 * m, m, m).verdict,
            Verdict::Confirmed
        );
        // Frozen retaining a graph: refuted.
        assert_eq!(
            freeze_rule(100 * m, 10 * m, 5 * m, m).verdict,
            Verdict::Refuted
        );
        // Partial equal to full (freezing did nothing): refuted.
        assert_eq!(
            freeze_rule(100 * m, 100 * m, m, m).verdict,
            Verdict::Refuted
        );
        // Partial equal to no_grad: refuted.
        assert_eq!(freeze_rule(100 * m, m, m, m).verdict, Verdict::Refuted);
        // "Like no_grad" is the question's band: within 1%, not beyond.
        assert_eq!(
            freeze_rule(m, 1 << 18, 32_000 + 300, 32_000).verdict,
            Verdict::Confirmed
        );
        assert_eq!(
            freeze_rule(m, 1 << 18, 32_000 + 400, 32_000).verdict,
            Verdict::Refuted
        );
    }

    /// The verdict words its question's comparison by the rule that grades it.
    #[test]
    fn the_freeze_reason_words_the_question_band() {
        let m = 1 << 20;
        for (frozen, nograd) in [(m, m), (5 * m, m), (32_400, 32_000)] {
            let words = bytes_compared(frozen as f64, nograd as f64).1;
            let reason = freeze_rule(100 * m, 10 * m, frozen, nograd).reason;
            assert!(reason.contains(&words), "{reason} lacks {words}");
        }
    }
}
