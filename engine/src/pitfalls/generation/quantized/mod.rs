//! The generation cards about weight-only quantization: what int4 shrinks and what it
//! leaves as it was (`int4-and-the-kv-cache`), and what int8 does to a decode step's time
//! (`int8-decode-speed`). Both measure generate runs as the Generate page does; this file
//! also owns the helpers the decode-settings cards share (the activations' dtype a card
//! decodes in, a spec with its decoder settings changed, the weights' split by the formula).
//!
//! One file per card: [`int4_and_the_kv_cache`], [`int8_decode_speed`]; what several of them share is here.

use protocol::{ChartKind, GenerateSpec, GenerationReport, RunFailure, RunSpec, WeightQuant, WeightsDtype};

use super::super::kit::{bytes_compared, fig, interval_figures, mib, series, series_of, Ctx, Decision, Outcome, Shift};
use super::super::{ratio, Card, Needs, Said, SAME_BYTES, SAME_TIME};
use super::{decode_ms, decoder, gen_spec, generate, held_positions, setup, shape};
use crate::lab::Lab;
use crate::torch_call::failure;
use crate::pitfalls::kit::{FigureName, INTERVAL_HIGH, INTERVAL_LOW};
use protocol::Unit;

pub mod int4_and_the_kv_cache;
pub mod int8_decode_speed;

pub use int4_and_the_kv_cache::*;
pub use int8_decode_speed::*;

/// The rules, as pure functions of the figures.
pub mod rules {
    /// `int4-and-the-kv-cache`: the int4 run's KV cache and its weights outside the
    /// linear layers equal the unquantized run's to the byte, while its linear layers take
    /// at most `max_share` of their unquantized bytes.
    pub fn only_the_linear_layers_shrink(plain: (u64, u64, u64), int4: (u64, u64, u64), max_share: f64) -> bool {
        let (plain_linear, plain_other, plain_kv) = plain;
        let (q_linear, q_other, q_kv) = int4;
        q_kv == plain_kv && q_other == plain_other && plain_linear > 0 && (q_linear as f64) <= max_share * plain_linear as f64
    }
}

/// The weights the cards decode with: fp32 on a CPU (its fast path), bf16 on a GPU (what a
/// team serves, and the only dtype CUDA's int4 kernel takes).
fn activations(ctx: &Ctx) -> WeightsDtype {
    if ctx.cuda() {
        WeightsDtype::Bf16
    } else {
        WeightsDtype::Fp32
    }
}

/// A generate spec with the decoder settings `f` makes.
pub(super) fn with(mut spec: RunSpec, weights: WeightsDtype, f: impl FnOnce(&mut GenerateSpec)) -> RunSpec {
    spec.advanced.weights = weights;
    if let Some(g) = spec.generate.as_mut() {
        f(g);
    }
    spec
}

/// "Tiny Llama ..., batch 1, prompt 32 + 16 new tokens, dynamic cache, fp32 activations".
fn with_activations(spec: &RunSpec) -> String {
    format!("{}, {} activations", setup(spec), spec.advanced.weights.as_str())
}

#[cfg(test)]
mod tests {
    use super::rules::*;

    #[test]
    fn only_the_linear_layers_may_shrink() {
        // fp32 → int4 (groups of 64): 0.156× of the linear bytes, the rest equal.
        assert!(only_the_linear_layers_shrink((1000, 500, 64), (156, 500, 64), 0.35));
        // A cache one byte different refutes: the claim is exact.
        assert!(!only_the_linear_layers_shrink((1000, 500, 64), (156, 500, 65), 0.35));
        // The embeddings quantized too: refuted (they were to stay).
        assert!(!only_the_linear_layers_shrink((1000, 500, 64), (156, 250, 64), 0.35));
        // Not quantized enough.
        assert!(!only_the_linear_layers_shrink((1000, 500, 64), (400, 500, 64), 0.35));
    }

    #[test]
    fn the_interval_figures_carry_the_names_the_statement_cites() {
        let q = &super::INT8_DECODE_SPEED.question;
        let (lo, hi) = q.interval_names();
        for name in [lo, hi] {
            assert!(super::INT8_DECODE_SPEED.statements.iter().any(|s| matches!(s.known, crate::pitfalls::How::Run(f) if f.iter().any(|f| f.name() == name))), "{name}");
        }
    }
}
