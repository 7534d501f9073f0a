//! What a generation's figures say against the device: the decode's bandwidth (the bytes a
//! step reads over its time) and the prefill's share of the device's matmul peak.

use super::*;

/// Fills the decode bandwidth and the prefill's share of the device's peak, from the
/// device's figures (datasheet or measured; `source` says which). Called after the run,
/// outside its guard: measuring a peak allocates large matrices.
///
/// The prefill's rate is compared with the device's matmul peak only when its linear layers
/// ran that kind of matmul: quantized ones run PyTorch's packed int8/int4 kernels, which the
/// peak (a dense GEMM in the activations' dtype) does not describe. On a CPU without bf16
/// instructions a bf16 GEMM is slower than the packed kernels, and the comparison read
/// "1,600% of peak".
pub fn fill_rates(g: &mut GenerationReport, peak: Option<&protocol::DevicePeak>, quantized: bool) {
    let decode: Vec<&GenStep> = g.steps.iter().filter(|s| s.phase == GenPhase::Decode).collect();
    let time_s: f64 = decode.iter().map(|s| s.latency_ms / 1000.0).sum();
    let bytes: f64 = decode.iter().map(|s| decode_bytes_read(g, s) as f64).sum();
    if time_s > 0.0 {
        let gb_s = bytes / time_s / 1e9;
        g.decode_bandwidth_gb_s = Some(gb_s);
        g.decode_intensity_flops_per_byte =
            g.decode_flops_per_step as f64 / (bytes / decode.len() as f64);
        if let Some(bw) = peak.and_then(|p| p.bandwidth_gb_s) {
            g.decode_bandwidth_percent = Some(100.0 * gb_s / bw);
        }
    }
    if let Some(p) = peak {
        g.bandwidth_source = Some(p.source.clone());
        if p.tflops > 0.0 && !quantized {
            g.prefill_percent_of_peak = Some(100.0 * g.prefill_tflops / p.tflops);
        }
    }
}

/// The bytes decode step `s` reads: every weight once, and the cache positions it attends
/// to (its own new one included): `position + 1` of them, a static cache's allocated
/// capacity beyond them never read; with graph replay the whole capacity, which the masked
/// kernel does read. Without a cache it reads the weights and recomputes the prefix.
///
/// A sliding layer attends to its window at most; a mixture of experts reads, of its
/// experts, only those the step's tokens were routed to (`moe.steps`).
pub fn decode_bytes_read(g: &GenerationReport, s: &GenStep) -> u64 {
    let weights = match &g.moe {
        Some(m) => {
            let read = m.steps.iter().find(|x| x.step == s.step).map_or(m.experts_bytes, |x| x.expert_bytes_read);
            g.weights_bytes.saturating_sub(m.experts_bytes) + read
        }
        None => g.weights_bytes,
    };
    let attended = |held: u64| match (g.cache, g.decode_graph) {
        (KvCacheKind::Off, _) => 0,
        (_, true) => held,
        _ => (s.position as u64 + 1).min(held),
    };
    let split = &g.kv_cache_by_layer_type;
    let sliding = split.iter().any(|t| t.layer_type == protocol::decoder::LayerType::Sliding);
    if !sliding || g.decode_graph {
        let per_position = match g.kv_cache_tokens {
            0 => 0,
            t => g.kv_cache_formula_bytes / t as u64,
        };
        return weights + per_position * attended(g.kv_cache_tokens as u64);
    }
    // Per layer type: a dynamic cache's sliding layers hold window − 1 and attend to one
    // more (the step's own); a static one's hold the window.
    let kv: u64 = split
        .iter()
        .map(|t| {
            let per_position = t.formula_bytes.checked_div(t.positions).unwrap_or(0);
            let window = match (t.layer_type, g.cache) {
                (protocol::decoder::LayerType::Sliding, KvCacheKind::Dynamic) => t.positions + 1,
                (protocol::decoder::LayerType::Sliding, _) => t.positions,
                _ => u64::MAX,
            };
            per_position * attended(window)
        })
        .sum();
    weights + kv
}
