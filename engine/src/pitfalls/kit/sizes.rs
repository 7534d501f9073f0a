//! Sizes: a least-squares fit of memory against batch ([`linear_fit`]) and the largest
//! batch a sweep may reach before a tensor passes 2³¹ elements ([`element_cap`]).

use protocol::ModelId;

/// Least-squares fit y = a + b·x; returns (b, R²).
pub fn linear_fit(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return (0.0, 0.0);
    }
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let syy: f64 = ys.iter().map(|y| (y - my).powi(2)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 {
        sxy * sxy / (sxx * syy)
    } else {
        0.0
    };
    (slope, r2)
}

/// Elements of the largest tensor one sample makes in a forward pass. Many CUDA kernels
/// (cuDNN's convolutions among them) refuse tensors of 2³¹ elements or more, so a batch
/// sweep must stay below that.
pub fn largest_tensor_per_sample(model: ModelId, size: u32) -> u64 {
    let s = size as u64;
    match model {
        ModelId::TinyMlp => s.max(512),
        // The stem's 64 channels at half the side (ResNet-50's layer 1: 256 at a quarter).
        ModelId::Resnet18 | ModelId::Resnet50 => 64 * (s / 2) * (s / 2),
        // The second block's expansion: 96 channels at half the side.
        ModelId::MobilenetV2 => 96 * (s / 2) * (s / 2),
        // The attention scores (4 heads × seq²) or the feed-forward hidden layer (seq × 1024).
        ModelId::Transformer => (4 * s * s).max(1024 * s),
        // The logits (seq × vocab) or the attention scores (heads × seq²).
        ModelId::Decoder(_) => model.decoder().map_or(1 << 20, |d| {
            let c = &d.config;
            (s * c.vocab_size as u64).max(c.num_attention_heads as u64 * s * s)
        }),
        // A script hides its layers: the input's elements per sample times 64 (the
        // built-in convolutional stems' widening), so a sweep stays well below the limit.
        ModelId::Team(_) | ModelId::Named(_) => model.team().map_or(1 << 20, |m| {
            let shape = &m.sidecar.shapes(1, size)[0];
            64 * shape.iter().map(|d| *d as u64).product::<u64>()
        }),
    }
}

/// The largest batch whose biggest tensor stays below 2³¹ elements.
pub fn element_cap(model: ModelId, size: u32) -> u32 {
    let per_sample = largest_tensor_per_sample(model, size).max(1);
    (((1u64 << 31) - 1) / per_sample).min(u32::MAX as u64) as u32
}
