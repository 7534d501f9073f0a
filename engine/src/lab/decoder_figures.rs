//! A generate run's figures that depend on the decoder's family: the KV cache split by
//! layer type (measured from the cache's tensors, beside each type's formula and the naive
//! formula that counts every layer at full length), and a mixture of experts' figures
//! (total against active parameters, every expert's bytes held, and per decode step the
//! distinct experts the batch touched and their bytes).

use protocol::decoder::{DecoderConfig, KvLayerSplit, LayerType, MoeFigures, MoeStep, SlidingHold};
use protocol::KvCacheKind;

use crate::models::decoder::Decoder;

/// How the run's cache holds a sliding layer: `None` when every layer holds every position
/// (no cache, or the masked static cache of CUDA graph replay, which cuts the window into
/// its mask instead).
pub fn sliding_hold(cache: KvCacheKind, graph: bool) -> Option<SlidingHold> {
    match (cache, graph) {
        (KvCacheKind::Off, _) | (_, true) => None,
        (KvCacheKind::Dynamic, false) => Some(SlidingHold::Trimmed),
        (KvCacheKind::Static, false) => Some(SlidingHold::Rolled),
    }
}

/// The cache's figures after a generation whose full layers hold `positions` per sequence:
/// the formula for what it holds (keys and values each at their own bytes per element), the
/// naive formula (every layer at `positions`), and the split by layer type with the
/// measured bytes (`per_layer`: each layer's bytes and positions, from
/// `KvCache::per_layer`). All 0 without a cache.
pub fn kv_figures(
    c: &DecoderConfig,
    per_layer: &[(u64, i64)],
    positions: u64,
    batch: u64,
    (key_elt, value_elt): (u64, u64),
    hold: Option<SlidingHold>,
) -> (u64, u64, Vec<KvLayerSplit>) {
    if per_layer.is_empty() {
        return (0, 0, vec![]);
    }
    let naive = (c.kv_cache_bytes(positions, batch, key_elt) + c.kv_cache_bytes(positions, batch, value_elt)) / 2;
    let split = |elt| match hold {
        Some(h) => c.kv_cache_split(positions, batch, elt, h),
        // Every layer at full length: the split's positions are the full layers'.
        None => LayerType::ALL
            .into_iter()
            .filter(|t| c.layers_of(*t) > 0)
            .map(|t| {
                let layers = c.layers_of(t);
                let bytes = 2 * layers as u64 * c.num_key_value_heads as u64 * c.head_dim as u64 * positions * batch * elt;
                KvLayerSplit { layer_type: t, layers, positions, bytes, formula_bytes: bytes }
            })
            .collect(),
    };
    let (keys, values) = (split(key_elt), split(value_elt));
    let mut out = Vec::new();
    for (k, v) in keys.iter().zip(&values) {
        let t = k.layer_type;
        let layers: Vec<&(u64, i64)> = per_layer
            .iter()
            .enumerate()
            .filter(|(i, _)| c.layer_type(*i) == t)
            .map(|(_, l)| l)
            .collect();
        out.push(KvLayerSplit {
            layer_type: t,
            layers: k.layers,
            positions: layers.iter().map(|l| l.1).max().unwrap_or(0) as u64,
            bytes: layers.iter().map(|l| l.0).sum(),
            formula_bytes: (k.formula_bytes + v.formula_bytes) / 2,
        });
    }
    let formula = out.iter().map(|s| s.formula_bytes).sum();
    (formula, naive, out)
}

/// One decode step's expert reads from the decoder's expert log (per MoE layer, the
/// distinct experts touched; `None` for a dense decoder or an empty log).
pub fn moe_step(decoder: &Decoder, step: u32, log: &[Vec<u32>]) -> Option<MoeStep> {
    let (_, one) = decoder.expert_bytes()?;
    if log.is_empty() {
        return None;
    }
    let counts: Vec<u32> = log.iter().map(|l| l.len() as u32).collect();
    let total: u32 = counts.iter().sum();
    Some(MoeStep {
        step,
        distinct_mean: total as f64 / counts.len() as f64,
        distinct_max: counts.iter().copied().max().unwrap_or(0),
        expert_bytes_read: total as u64 * one,
    })
}

/// A mixture of experts' figures for the run (`None` for a dense decoder).
pub fn moe_figures(decoder: &Decoder, steps: Vec<MoeStep>) -> Option<MoeFigures> {
    let c = decoder.config();
    let m = c.moe.as_ref()?;
    let (all, one) = decoder.expert_bytes()?;
    let n = steps.len().max(1) as f64;
    Some(MoeFigures {
        num_experts: m.num_experts,
        num_experts_per_tok: m.num_experts_per_tok,
        moe_layers: c.moe_layers(),
        total_parameters: c.parameters(),
        active_parameters: c.active_parameters(),
        experts_bytes: all,
        expert_bytes: one,
        active_expert_bytes: m.num_experts_per_tok as u64 * c.moe_layers() as u64 * one,
        distinct_experts_mean: steps.iter().map(|s| s.distinct_mean).sum::<f64>() / n,
        distinct_experts_max: steps.iter().map(|s| s.distinct_max).max().unwrap_or(0),
        expert_bytes_read_mean: steps.iter().map(|s| s.expert_bytes_read as f64).sum::<f64>() / n,
        steps,
    })
}

/// Logs the decoder's experts while it lives ([`Decoder::log_experts`]); off again when
/// dropped, however the generation ends.
pub struct ExpertLog<'a>(&'a Decoder);

impl<'a> ExpertLog<'a> {
    /// On for a mixture of experts; `None` for a dense decoder.
    pub fn start(decoder: &'a Decoder) -> Option<ExpertLog<'a>> {
        decoder.config().moe.as_ref()?;
        decoder.log_experts(true);
        Some(ExpertLog(decoder))
    }
}

impl Drop for ExpertLog<'_> {
    fn drop(&mut self) {
        self.0.log_experts(false);
    }
}
