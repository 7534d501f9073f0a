//! Decoder LLMs: the shape of a causal language model ([`DecoderConfig`], read from a
//! Hugging Face `config.json` by the engine's family readers), the built-in presets that copy
//! well-known models' shapes, and the
//! arithmetic every page and report shares: parameter counts (total and active per token),
//! weight bytes, and the KV cache's formula per layer type.
//!
//! A [`crate::ModelId::Decoder`] carries its [`DecoderModel`], so a decoder goes wherever a
//! model goes (specs, records, permalinks, snippets) with one identity type; which team
//! decoders a process serves is its [`crate::Catalog`].
//!
//! The families (one architecture each): Llama, Mistral and Qwen2 (Llama's block; Mistral
//! with a sliding window, Qwen2 with q/k/v biases), Qwen3 (RMSNorm over each head's query
//! and key), Gemma 3 (sliding and full layers, two RoPE bases, norms before and after
//! attention and the MLP, GeGLU, embeddings × √hidden) and the mixtures of experts Qwen3-MoE
//! and Mixtral (a router picking the top k of `num_experts` gated MLPs per token), and Phi-3
//! (Llama's block with its q/k/v and gate/up projections fused).

mod arch;
mod config;
mod presets;
mod python;
mod source;

pub use arch::*;
pub use config::*;
pub use presets::*;
pub use source::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_parameter_counts_match_the_models_they_copy() {
        // The published sizes (rounded in the names) of the models whose shapes the
        // presets copy: a wrong field would move the count far from them.
        let near = |name: &str, want: f64| {
            let got = preset(name).unwrap().config.parameters() as f64;
            assert!((got / want - 1.0).abs() < 0.03, "{name}: {got} vs {want}");
        };
        near("smollm2_135m", 134.5e6);
        near("qwen2_5_0_5b", 494.0e6);
        near("llama_3_2_1b", 1.236e9);
        near("llama_3_1_8b", 8.03e9);
        near("gemma3_1b", 1.0e9);
        near("qwen3_8b", 8.2e9);
        near("qwen3_30b_a3b", 30.5e9);
        near("mixtral_8x7b", 46.7e9);
        near("phi3_mini", 3.82e9);
    }

    #[test]
    fn active_parameters_leave_out_the_experts_a_token_does_not_use() {
        // The model cards' "A3B" and "12.9B active": (experts − top-k) idle experts per layer.
        let active = |name: &str| preset(name).unwrap().config.active_parameters() as f64;
        assert!((active("qwen3_30b_a3b") / 3.3e9 - 1.0).abs() < 0.03, "{}", active("qwen3_30b_a3b"));
        assert!((active("mixtral_8x7b") / 12.9e9 - 1.0).abs() < 0.03, "{}", active("mixtral_8x7b"));
        let dense = &preset("qwen3_8b").unwrap().config;
        assert_eq!(dense.active_parameters(), dense.parameters());
        let c = &preset("mixtral_tiny").unwrap().config;
        let expert = 3 * 256 * 256;
        assert_eq!(c.expert_parameters(), expert);
        assert_eq!(c.parameters() - c.active_parameters(), 4 * 6 * expert);
    }

    #[test]
    fn a_sliding_window_shape_holds_far_less_than_the_naive_formula() {
        // Gemma-3-1B at 32k tokens in bf16: 26 layers, 1 KV head of 256; 4 full layers, 22
        // sliding over 512 positions.
        let c = &preset("gemma3_1b").unwrap().config;
        assert_eq!((c.layers_of(LayerType::Full), c.layers_of(LayerType::Sliding)), (4, 22));
        let tokens = 32_768;
        let naive = c.kv_cache_bytes(tokens, 1, 2);
        assert_eq!(naive, 2 * 26 * 256 * tokens * 2);
        let split = c.kv_cache_split(tokens, 1, 2, SlidingHold::Rolled);
        assert_eq!(split[0].positions, tokens);
        assert_eq!(split[1].positions, 512);
        let held = c.kv_cache_held_bytes(tokens, 1, 2, SlidingHold::Rolled);
        assert_eq!(held, 2 * 256 * 2 * (4 * tokens + 22 * 512));
        assert!(naive > 5 * held, "{naive} vs {held}");
        // A growing cache keeps one position fewer in its sliding layers (window − 1).
        assert_eq!(c.sliding_positions(tokens, SlidingHold::Trimmed), 511);
        assert_eq!(c.sliding_positions(100, SlidingHold::Trimmed), 100);
        // Without sliding layers the two formulas agree.
        let l = &preset(CPU_PRESET).unwrap().config;
        assert_eq!(l.kv_cache_held_bytes(95, 2, 4, SlidingHold::Trimmed), l.kv_cache_bytes(95, 2, 4));
        assert!(c.kv_cache_split_formula(tokens, 1, 2, SlidingHold::Rolled).contains("sliding: 2 × 22 layers"));
    }

    #[test]
    fn a_shape_says_what_sets_its_family_apart() {
        let notes = |name: &str| preset(name).unwrap().config.family_notes();
        assert_eq!(notes(CPU_PRESET), "");
        assert_eq!(notes("gemma3_1b"), "Gemma 3 · 22 sliding layers (window 512) + 4 full");
        assert_eq!(notes("qwen3_30b_a3b"), "Qwen3-MoE · 128 experts, top 8 per token: 3.35 B of 30.53 B parameters active");
        assert_eq!(notes("qwen3_moe_tiny"), "Qwen3-MoE · 16 experts, top 2 per token: 3.6 M of 9.1 M parameters active");
    }

    #[test]
    fn linear_shapes_and_the_rest_add_up_to_the_parameters() {
        for m in presets() {
            let c = &m.config;
            let linear: u64 = c.linear_shapes().iter().map(|&(n, k, count)| n * k * count).sum();
            assert_eq!(linear + c.other_parameters(), c.parameters(), "{}", m.name);
        }
    }

    #[test]
    fn the_kv_formula_is_linear_in_tokens_and_batch() {
        let c = &preset(CPU_PRESET).unwrap().config;
        let one = c.kv_cache_bytes(1, 1, 4);
        assert_eq!(c.kv_cache_bytes(95, 3, 4), one * 95 * 3);
        assert_eq!(one, 2 * 4 * 2 * 32 * 4);
        assert!(c.kv_cache_formula(95, 3, 4).contains("95 tokens"));
    }
}
