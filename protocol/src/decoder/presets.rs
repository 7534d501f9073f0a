//! The built-in decoder shapes: presets that copy well-known models' `config.json` (shape
//! fields only, random seeded weights) and the model this project trained.

use super::*;

fn make(
    name: &str,
    display: &str,
    copies: &str,
    config: DecoderConfig,
) -> DecoderModel {
    DecoderModel {
        name: name.into(),
        display_name: display.into(),
        source: DecoderSource::Preset {
            copies: copies.into(),
        },
        config,
    }
}

/// The model trained by this project (`models/torch_bytes`): bytes in, bytes out.
pub const TRAINED_PRESET: &str = "torch_bytes";

/// The preset sized for a 2-core CPU (the CPU default): a whole default generation takes
/// about a second there.
pub const CPU_PRESET: &str = "llama_tiny";

/// The built-in decoder shapes, smallest first. Their configs copy the named models'
/// `config.json` (shape fields only).
///
/// An immutable table built once, like [`crate::ModelId::ALL`]: a preset's id carries a
/// `&'static` reference to its entry, so presets need no [`crate::Catalog`] to read.
pub fn presets() -> &'static [DecoderModel] {
    static PRESETS: std::sync::OnceLock<Vec<DecoderModel>> = std::sync::OnceLock::new();
    PRESETS.get_or_init(|| {
        let llama = |h, i, l, heads, kv, hd, vocab, max_pos, theta, eps, tie| DecoderConfig {
            architecture: Architecture::Llama,
            hidden_size: h,
            intermediate_size: i,
            num_hidden_layers: l,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim: hd,
            vocab_size: vocab,
            max_position_embeddings: max_pos,
            rope_theta: theta,
            rope_llama3: None,
            rms_norm_eps: eps,
            tie_word_embeddings: tie,
            attention_bias: false,
            attention_dropout: 0.0,
            sliding_window: None,
            initializer_range: 0.02,
            layer_types: vec![],
            qk_norm: false,
            rope_local_theta: None,
            rope_linear_factor: None,
            query_pre_attn_scalar: None,
            moe: None,
        };
        let moe = |experts, top_k, width, norm| {
            Some(MoeConfig {
                num_experts: experts,
                num_experts_per_tok: top_k,
                expert_intermediate_size: width,
                norm_topk_prob: norm,
                dense_layers: vec![],
            })
        };
        // Gemma 3's layers: five sliding, then one full, repeated (`sliding_window_pattern` 6).
        let gemma_layers = |l: u32| {
            (0..l)
                .map(|i| if (i + 1) % 6 == 0 { LayerType::Full } else { LayerType::Sliding })
                .collect::<Vec<_>>()
        };
        let llama3_rope = |factor| {
            Some(Llama3Rope {
                factor,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192,
            })
        };
        vec![
            make(
                CPU_PRESET,
                "Tiny Llama (4 layers, 256 wide, GQA 8/2, attention dropout 0.1)",
                "a 4-layer Llama sized for a 2-core CPU",
                DecoderConfig {
                    attention_dropout: 0.1,
                    // Wider random weights than transformers' 0.02: greedy decoding then
                    // picks varied tokens, so token-for-token comparisons mean something.
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 32, 8192, 2048, 10_000.0, 1e-5, false)
                },
            ),
            DecoderModel {
                name: TRAINED_PRESET.into(),
                display_name: "Trained on PyTorch's source (byte-level Llama, 3 layers, 1.8 M parameters)".into(),
                source: DecoderSource::Trained {
                    folder: TRAINED_PRESET.into(),
                    corpus: "the Python source of PyTorch 2.11.0 (torch/nn, torch/optim, torch/utils)".into(),
                    bos: 256,
                },
                // models/torch_bytes/config.json; the engine's tests read that file and
                // compare it with this.
                config: DecoderConfig {
                    initializer_range: 0.02,
                    ..llama(256, 512, 3, 4, 2, 64, 259, 256, 10_000.0, 1e-5, true)
                },
            },
            make(
                "llama_tiny_mha",
                "Tiny Llama without GQA (8 KV heads, for the gqa card)",
                "the tiny Llama with one KV head per query head",
                DecoderConfig {
                    attention_dropout: 0.1,
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 8, 32, 8192, 2048, 10_000.0, 1e-5, false)
                },
            ),
            make(
                "qwen3_tiny",
                "Tiny Qwen3 (4 layers, 256 wide, head_dim 64, q/k norm)",
                "a 4-layer Qwen3 sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Qwen3,
                    qk_norm: true,
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 64, 8192, 2048, 1_000_000.0, 1e-6, false)
                },
            ),
            make(
                "gemma3_tiny",
                "Tiny Gemma 3 (6 layers: 5 sliding over 32 positions, 1 full)",
                "a 6-layer Gemma 3 sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Gemma3,
                    qk_norm: true,
                    sliding_window: Some(32),
                    layer_types: gemma_layers(6),
                    rope_local_theta: Some(10_000.0),
                    query_pre_attn_scalar: Some(64.0),
                    // transformers' 0.02: with the head tied to the embedding (× √hidden),
                    // wider random weights make greedy decoding repeat one token.
                    ..llama(256, 704, 6, 4, 1, 64, 8192, 2048, 1_000_000.0, 1e-6, true)
                },
            ),
            make(
                "qwen3_moe_tiny",
                "Tiny Qwen3-MoE (4 layers, 16 experts, top 2)",
                "a 4-layer Qwen3-MoE sized for a 2-core CPU",
                // The experts hold most of the weights, as in the models it copies (a
                // smaller vocabulary than the other tiny presets': its embedding and head
                // would outweigh the experts).
                DecoderConfig {
                    architecture: Architecture::Qwen3Moe,
                    qk_norm: true,
                    moe: moe(16, 2, 128, true),
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 32, 4096, 2048, 1_000_000.0, 1e-6, false)
                },
            ),
            make(
                "mixtral_tiny",
                "Tiny Mixtral (4 layers, 8 experts, top 2)",
                "a 4-layer Mixtral sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Mixtral,
                    moe: moe(8, 2, 256, true),
                    initializer_range: 0.2,
                    ..llama(256, 256, 4, 8, 2, 32, 8192, 2048, 1_000_000.0, 1e-5, false)
                },
            ),
            make(
                "phi3_tiny",
                "Tiny Phi-3 (4 layers, fused q/k/v and gate/up)",
                "a 4-layer Phi-3 sized for a 2-core CPU",
                DecoderConfig {
                    architecture: Architecture::Phi3,
                    initializer_range: 0.2,
                    ..llama(256, 704, 4, 8, 2, 32, 8192, 2048, 10_000.0, 1e-5, false)
                },
            ),
            make(
                "smollm2_135m",
                "SmolLM2-135M shape",
                "HuggingFaceTB/SmolLM2-135M",
                llama(576, 1536, 30, 9, 3, 64, 49152, 8192, 100_000.0, 1e-5, true),
            ),
            make(
                "qwen2_5_0_5b",
                "Qwen2.5-0.5B shape",
                "Qwen/Qwen2.5-0.5B",
                DecoderConfig {
                    architecture: Architecture::Qwen2,
                    attention_bias: true,
                    ..llama(896, 4864, 24, 14, 2, 64, 151_936, 32_768, 1_000_000.0, 1e-6, true)
                },
            ),
            make(
                "gemma3_1b",
                "Gemma-3-1B shape",
                "google/gemma-3-1b-pt",
                DecoderConfig {
                    architecture: Architecture::Gemma3,
                    qk_norm: true,
                    sliding_window: Some(512),
                    layer_types: gemma_layers(26),
                    rope_local_theta: Some(10_000.0),
                    query_pre_attn_scalar: Some(256.0),
                    ..llama(1152, 6912, 26, 4, 1, 256, 262_144, 32_768, 1_000_000.0, 1e-6, true)
                },
            ),
            make(
                "llama_3_2_1b",
                "Llama-3.2-1B shape",
                "meta-llama/Llama-3.2-1B",
                DecoderConfig {
                    rope_llama3: llama3_rope(32.0),
                    ..llama(2048, 8192, 16, 32, 8, 64, 128_256, 131_072, 500_000.0, 1e-5, true)
                },
            ),
            make(
                "phi3_mini",
                "Phi-3-mini-4k shape (every layer slides over 2047 positions)",
                "microsoft/Phi-3-mini-4k-instruct",
                DecoderConfig {
                    architecture: Architecture::Phi3,
                    sliding_window: Some(2047),
                    ..llama(3072, 8192, 32, 32, 32, 96, 32_064, 4096, 10_000.0, 1e-5, false)
                },
            ),
            make(
                "llama_3_1_8b",
                "Llama-3.1-8B shape",
                "meta-llama/Llama-3.1-8B",
                DecoderConfig {
                    rope_llama3: llama3_rope(8.0),
                    ..llama(4096, 14_336, 32, 32, 8, 128, 128_256, 131_072, 500_000.0, 1e-5, false)
                },
            ),
            make(
                "qwen3_8b",
                "Qwen3-8B shape",
                "Qwen/Qwen3-8B",
                DecoderConfig {
                    architecture: Architecture::Qwen3,
                    qk_norm: true,
                    ..llama(4096, 12_288, 36, 32, 8, 128, 151_936, 40_960, 1_000_000.0, 1e-6, false)
                },
            ),
            make(
                "qwen3_30b_a3b",
                "Qwen3-30B-A3B shape (128 experts, top 8)",
                "Qwen/Qwen3-30B-A3B",
                DecoderConfig {
                    architecture: Architecture::Qwen3Moe,
                    qk_norm: true,
                    moe: moe(128, 8, 768, true),
                    ..llama(2048, 6144, 48, 32, 4, 128, 151_936, 40_960, 1_000_000.0, 1e-6, false)
                },
            ),
            make(
                "mixtral_8x7b",
                "Mixtral-8x7B shape (8 experts, top 2)",
                "mistralai/Mixtral-8x7B-v0.1",
                DecoderConfig {
                    architecture: Architecture::Mixtral,
                    moe: moe(8, 2, 14_336, true),
                    ..llama(4096, 14_336, 32, 32, 8, 128, 32_000, 32_768, 1_000_000.0, 1e-5, false)
                },
            ),
        ]
    })
}

/// The decoder preset called `name`.
pub fn preset(name: &str) -> Option<&'static DecoderModel> {
    presets().iter().find(|p| p.name == name)
}
