//! The generation cards about time: recomputing without a cache (`use-cache-off`), the two
//! phases (`prefill-vs-decode`), batching (`decode-batch`), autocast in the loop
//! (`autocast-decode`) and the classic table on a decoder (`decoder-table`).
//!
//! One file per card: [`use_cache_off`], [`prefill_vs_decode`], [`decode_batch`], [`autocast_decode`], [`decoder_table`]; what several of them share is here.

use protocol::{
    Autocast, ChartKind, GenPhase, GenerationReport, GradMode, KvCacheKind, RunFailure,
    RunSpec, Table, WeightsDtype,
};

use super::super::kit::{bytes_compared, fig, fig_of, interval_figures, mib, series, Ctx, Decision, Outcome, Shift};
use super::super::{Card, Needs, Said};
use super::{decode_ms, decoder, dtypes, gen_spec, generate, rules, setup, shape, with_cache};
use crate::lab::Lab;
use crate::torch_call::failure;
use crate::pitfalls::figures::{EACH_PEAK_ABOVE_BASELINE, EVAL_NO_GRAD_PEAK_ABOVE_BASELINE, EVAL_ONLY_PEAK_ABOVE_BASELINE, TRAIN_PEAK_ABOVE_BASELINE};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod use_cache_off;
pub mod prefill_vs_decode;
pub mod decode_batch;
pub mod autocast_decode;
pub mod decoder_table;

pub use use_cache_off::*;
pub use prefill_vs_decode::*;
pub use decode_batch::*;
pub use autocast_decode::*;
pub use decoder_table::*;

#[cfg(test)]
mod tests {
    use super::super::super::kit::bytes_compared;
    use super::eval_saves_only_dropout;

    #[test]
    fn eval_may_save_dropouts_tensors_and_nothing_more() {
        let (train, no_grad) = (3_870_000.0, 205_000.0);
        // No dropout: eval must be within 1% of train.
        let same = bytes_compared(train, train).0;
        assert!(eval_saves_only_dropout(same, 0.0, train, train, no_grad));
        let lower = bytes_compared(0.9 * train, train).0;
        assert!(!eval_saves_only_dropout(lower, 0.0, train, 0.9 * train, no_grad));
        // Dropout 0.1 (the CPU run: ×0.911): a tenth of what no_grad saves passes, half fails.
        assert!(eval_saves_only_dropout(lower, 0.1, train, 0.911 * train, no_grad));
        let half = train - 0.5 * (train - no_grad);
        assert!(!eval_saves_only_dropout(bytes_compared(half, train).0, 0.1, train, half, no_grad));
        // Higher than train is never eval's doing.
        assert!(!eval_saves_only_dropout(bytes_compared(1.1 * train, train).0, 0.1, train, 1.1 * train, no_grad));
    }
}
