//! The generation cards about the decoder families teams serve now: a sliding-window
//! model's cache (`sliding-window-kv`), a mixture of experts' memory (`moe-memory`)
//! and what its decode steps read as the batch grows (`moe-batch-reads`).
//!
//! One file per card: [`sliding_window_kv`], [`moe_memory`], [`moe_batch_reads`]; what several of them share is here.

use protocol::decoder::{DecoderConfig, LayerType, SlidingHold};
use protocol::{ChartKind, GenerationReport, GradMode, KvCacheKind, ModelId, RunFailure, RunSpec, Table};

use super::super::kit::{fig, fig_of, series, Ctx, Decision, Outcome};
use super::super::{Ask, Card, Needs, Said};
use super::{cache_dtype, decoder, dtypes, gen_spec, generate, rules, weights_dtype};
use crate::lab::Lab;
use crate::torch_call::failure;
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod sliding_window_kv;
pub mod moe_memory;
pub mod moe_batch_reads;

pub use sliding_window_kv::*;
pub use moe_memory::*;
pub use moe_batch_reads::*;

/// The decoder's config, or a failure naming the model.
fn config_of(model: ModelId) -> Result<DecoderConfig, RunFailure> {
    model
        .decoder()
        .map(|d| d.config.clone())
        .ok_or_else(|| failure(protocol::FailureKind::Invalid, format!("{model} is not a decoder")))
}

/// "98,304", "1.4 M", "30.53 B": a parameter count for a sentence.
fn count(n: u64) -> String {
    match n {
        1_000_000_000.. => format!("{:.2} B", n as f64 / 1e9),
        1_000_000.. => format!("{:.1} M", n as f64 / 1e6),
        _ => {
            let s = n.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
    }
}

/// "16 experts per layer 128 wide, top 2 per token, in 4 layers": the mixture's shape.
fn moe_line(c: &DecoderConfig) -> String {
    match &c.moe {
        Some(m) => format!(
            "{} experts per layer, each a gated MLP {} wide ({} parameters); the router picks {} per token, in {} layers",
            m.num_experts,
            m.expert_intermediate_size,
            count(c.expert_parameters()),
            m.num_experts_per_tok,
            c.moe_layers()
        ),
        None => "not a mixture of experts".into(),
    }
}
