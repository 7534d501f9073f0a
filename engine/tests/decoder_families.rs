//! The decoder families Gradless reads from a team's `config.json` compute what Hugging Face
//! transformers computes: for one small random model per family (Qwen3, Gemma 3, Qwen3-MoE,
//! Mixtral, Phi-3 with its fused projections, a Mistral whose every layer slides), saved by `save_pretrained` and loaded by
//! both, every position's prefill logits within 1e-4 (fp32), the same 24 greedy tokens for
//! a batch of 2 prompts of 16 with a dynamic cache, a static one and none, and a dynamic
//! cache that holds, layer by layer, the bytes and positions transformers' DynamicCache
//! holds after `generate`: a full layer prompt + 24 − 1 = 39 positions, a sliding layer
//! window − 1 = 7 (the current token's keys and values join at attention time; transformers'
//! DynamicSlidingWindowLayer keeps the same). The static cache's sliding layers hold the
//! window (8), rolled. Parameter counts equal transformers' own, for these models and for
//! published configs (Qwen3-8B, Qwen3-30B-A3B, Mixtral-8x7B, Gemma-3-1B, Phi-3-mini) counted on the meta
//! device in the same run; those configs read into the presets that copy them.
//!
//! Needs a Python with torch and transformers: `GRADLESS_PYTHON` (scripts/test.sh points it
//! at the venv). The malformed configs' errors need nothing.

use engine::models::decoder::{read_config, KvCache, Logits, WeightLayout};
use engine::models::Model;
use engine::trace::Probe;
use protocol::decoder::{LayerType, SlidingHold};
use protocol::{KvCacheKind, ModelId};
use tch::{Device, Tensor};

/// Greedy decoding with a cache of `kind`, as a hand-written loop over the decoder; the
/// tokens, and the cache as it is after the last step.
fn greedy(model: &Model, prompt: &Tensor, n: i64, kind: KvCacheKind) -> (Vec<Vec<i64>>, KvCache) {
    let decoder = model.net.as_decoder().unwrap();
    let mut cache = decoder.cache(kind, prompt.size()[1] + n);
    let mut sequence = prompt.shallow_clone();
    let mut fed = prompt.shallow_clone();
    let mut position = 0;
    let mut tokens = vec![];
    for _ in 0..n {
        let logits = decoder.forward(&fed, position, &mut cache, false, Logits::Last, &mut Probe::off());
        let next = logits.argmax(-1, false);
        sequence = Tensor::cat(&[&sequence, &next], 1);
        match kind {
            KvCacheKind::Off => fed = sequence.shallow_clone(),
            _ => {
                position += fed.size()[1];
                fed = next.shallow_clone();
            }
        }
        tokens.push(next);
    }
    let t = Tensor::cat(&tokens, 1);
    ((0..t.size()[0]).map(|r| Vec::<i64>::try_from(t.get(r)).unwrap()).collect(), cache)
}

#[test]
fn every_family_computes_what_transformers_computes() {
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        eprintln!("GRADLESS_PYTHON is not set: the transformers comparison was not run");
        return;
    };
    let dir = std::env::temp_dir().join(format!("gradless-hf-families-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/make_hf_families.py");
    let status = std::process::Command::new(&python)
        .arg(script)
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("GRADLESS_PYTHON runs");
    assert!(status.success(), "the fixture script failed");
    let loaded = engine::team::load_dir(&dir.join("models"), None).unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    assert_eq!(loaded.decoders.len(), 6);
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let prompt: Vec<Vec<i64>> = serde_json::from_value(reference["prompt"].clone()).unwrap();
    let n = reference["new_tokens"].as_i64().unwrap();
    let rows = prompt.len() as i64;
    let flat: Vec<i64> = prompt.concat();
    let prompt = Tensor::from_slice(&flat).view([rows, -1]);
    let _no_grad = tch::no_grad_guard();
    let catalog = loaded.catalog();
    for (name, want) in reference["models"].as_object().unwrap() {
        let id: ModelId = catalog.parse(name).unwrap();
        let config = id.decoder().unwrap().config.clone();
        let mut model = Model::build(id, Device::Cpu, 0);

        // Parameters: built, counted from the config, and transformers' count.
        let theirs = want["parameters"].as_u64().unwrap();
        assert_eq!(model.parameters(), theirs, "{name}: built");
        assert_eq!(config.parameters(), theirs, "{name}: from the config");

        // PyTorch's row-major weights, then the column-major layout a CPU run in fp32
        // uses (`WeightLayout`): the same logits within rounding, the same tokens.
        for layout in [WeightLayout::RowMajor, WeightLayout::ColumnMajor] {
            model.net.as_decoder_mut().unwrap().lay_out(layout);
            let decoder = model.net.as_decoder().unwrap();
            let weight = model.vs.variables()["model.layers.0.self_attn.o_proj.weight"].shallow_clone();
            assert_eq!(WeightLayout::of(&weight), Some(layout), "{name}: the VarStore's weight is laid out too");
            let logits = decoder.forward(&prompt, 0, &mut KvCache::Off, false, Logits::All, &mut Probe::off());
            let shape: Vec<i64> = serde_json::from_value(want["shape"].clone()).unwrap();
            assert_eq!(logits.size(), shape, "{name}");
            let their_logits: Vec<f32> = serde_json::from_value(want["logits"].clone()).unwrap();
            let their_logits = Tensor::from_slice(&their_logits).view(shape.as_slice());
            let diff = (&logits - &their_logits).abs().max().double_value(&[]);
            let scale = their_logits.abs().max().double_value(&[]);
            assert!(diff < 1e-4, "{name}: max |Δlogit| {diff:e} (logits up to {scale:.2})");

            let tokens: Vec<Vec<i64>> = serde_json::from_value(want["tokens"].clone()).unwrap();
            let distinct: std::collections::BTreeSet<_> = tokens.concat().into_iter().collect();
            assert!(distinct.len() > 8, "{name}: the reference repeats itself ({distinct:?}), so equal tokens would mean little");
            for kind in [KvCacheKind::Dynamic, KvCacheKind::Static, KvCacheKind::Off] {
                let (ours, cache) = greedy(&model, &prompt, n, kind);
                assert_eq!(ours, tokens, "{name}, {} cache", kind.as_str());
                let batch = rows as u64;
                // What a full layer holds: every position fed (all but the last token's in a
                // growing cache; a static one's capacity).
                let positions = match kind {
                    KvCacheKind::Dynamic => (16 + n - 1) as u64,
                    _ => (16 + n) as u64,
                };
                if config.layers_of(LayerType::Full) > 0 && kind != KvCacheKind::Off {
                    assert_eq!(cache.positions() as u64, positions, "{name}: a full layer's positions");
                }
                match kind {
                    KvCacheKind::Dynamic => {
                        // Layer by layer, what transformers' DynamicCache holds.
                        let theirs = want["cache"].as_array().unwrap();
                        let ours = cache.per_layer();
                        assert_eq!(ours.len(), theirs.len(), "{name}");
                        for (i, (mine, t)) in ours.iter().zip(theirs).enumerate() {
                            assert_eq!(mine.0, t["bytes"].as_u64().unwrap(), "{name} layer {i}: bytes");
                            assert_eq!(mine.1 as u64, t["positions"].as_u64().unwrap(), "{name} layer {i}: positions");
                            let sliding = config.layer_type(i) == LayerType::Sliding;
                            assert_eq!(sliding, t["sliding"].as_bool().unwrap(), "{name} layer {i}: type");
                        }
                        let formula = config.kv_cache_held_bytes(positions, batch, 4, SlidingHold::Trimmed);
                        assert_eq!(cache.bytes(), formula, "{name}: the per-layer-type formula");
                        let sliding = config.layers_of(LayerType::Sliding);
                        if sliding > 0 {
                            let w = config.sliding_window.unwrap() as u64;
                            assert!(ours.iter().any(|l| l.1 as u64 == w - 1), "{name}: sliding layers hold window − 1");
                            assert!(cache.bytes() < config.kv_cache_bytes(positions, batch, 4), "{name}: below the naive formula");
                        }
                        eprintln!(
                            "{name}, {layout:?}: max |Δlogit| {diff:.2e}; {} tokens equal per cache kind; KV {} B = transformers' (naive every-layer formula {} B); {} parameters",
                            n,
                            cache.bytes(),
                            config.kv_cache_bytes(positions, batch, 4),
                            theirs_count(want)
                        );
                    }
                    KvCacheKind::Static => {
                        let formula = config.kv_cache_held_bytes(positions, batch, 4, SlidingHold::Rolled);
                        assert_eq!(cache.bytes(), formula, "{name}: a static cache's sliding layers hold the window");
                    }
                    KvCacheKind::Off => assert_eq!(cache.bytes(), 0),
                }
            }
        }
    }

    // Published configs: read by the families' readers into the presets that copy them, and
    // counted as transformers counts them on the meta device.
    for (name, want) in reference["published"].as_object().unwrap() {
        let text = std::fs::read_to_string(dir.join("published").join(name).join("config.json")).unwrap();
        let config = read_config(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let theirs = want["parameters"].as_u64().unwrap();
        assert_eq!(config.parameters(), theirs, "{name}: parameters");
        let preset = protocol::decoder::preset(name).unwrap_or_else(|| panic!("a preset named {name}"));
        assert_eq!(preset.config, config, "{name}: the preset copies the published config");
        let types: Vec<String> = serde_json::from_value(want["layer_types"].clone()).unwrap();
        for (i, t) in types.iter().enumerate() {
            assert_eq!(config.layer_type(i).as_str(), t, "{name} layer {i}");
        }
        eprintln!(
            "{name}: {} parameters, as transformers counts them on the meta device; {} active per token",
            config.parameters(),
            config.active_parameters()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn theirs_count(want: &serde_json::Value) -> u64 {
    want["parameters"].as_u64().unwrap()
}

/// A config.json that differs from a valid one in one place, and the error it must name.
fn refused(base: &str, change: impl Fn(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
    change(v.as_object_mut().unwrap());
    read_config(&v.to_string()).expect_err("a malformed config is refused")
}

const QWEN3_MOE: &str = r#"{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 100, "num_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "norm_topk_prob": true, "torch_dtype": "bfloat16"}"#;

const GEMMA3: &str = r#"{"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 100, "sliding_window": 8,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]}"#;

const PHI3: &str = r#"{"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 100, "sliding_window": 16, "embd_pdrop": 0.0, "original_max_position_embeddings": 4096}"#;

/// Configs as teams have them: a field set to what Gradless builds is read past and listed
/// (Mistral's `"attention_bias": false`), a tool's stamp too; the same field set to what
/// Gradless does not build is refused, naming the field once.
#[test]
fn fields_set_to_what_gradless_builds_are_read_past_and_listed() {
    let mistral = r#"{"architectures": ["MistralForCausalLM"], "model_type": "mistral",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 100, "sliding_window": null}"#;
    let with = |k: &str, v: serde_json::Value| {
        let mut m: serde_json::Value = serde_json::from_str(mistral).unwrap();
        m.as_object_mut().unwrap().insert(k.into(), v);
        m.to_string()
    };
    let (plain, none) = engine::models::decoder::registry::read_config_noting(mistral).unwrap();
    assert!(none.is_empty(), "{none:?}");
    let (config, read_past) = engine::models::decoder::registry::read_config_noting(&with("attention_bias", false.into())).unwrap();
    assert_eq!(config, plain, "attention_bias: false builds the same model");
    assert_eq!(read_past, ["attention_bias: false"]);
    let (_, stamp) = engine::models::decoder::registry::read_config_noting(&with("unsloth_version", "2025.1".into())).unwrap();
    assert_eq!(stamp, ["unsloth_version"]);
    let e = read_config(&with("attention_bias", true.into())).expect_err("a bias Gradless does not build");
    assert!(e.contains("`attention_bias`") && !e.contains("attention_bias.attention_bias"), "{e}");
}

#[test]
fn malformed_configs_are_refused_naming_the_field() {
    let phi = read_config(PHI3).unwrap();
    assert_eq!((phi.num_key_value_heads, phi.sliding_window, phi.layers_of(LayerType::Sliding)), (4, Some(16), 2));
    for (field, e) in [
        ("rope_scaling", refused(PHI3, |m| {
            m.insert("rope_scaling".into(), serde_json::json!({"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}));
        })),
        ("partial_rotary_factor", refused(PHI3, |m| {
            m.insert("partial_rotary_factor".into(), 0.5.into());
        })),
        ("resid_pdrop", refused(PHI3, |m| {
            m.insert("resid_pdrop".into(), 0.1.into());
        })),
    ] {
        assert!(e.contains(&format!("`{field}")), "the error names `{field}`: {e}");
    }
    // The valid ones read.
    let moe = read_config(QWEN3_MOE).unwrap();
    assert_eq!(moe.moe.as_ref().unwrap().num_experts, 8);
    assert_eq!(moe.head_dim, 16);
    let gemma = read_config(GEMMA3).unwrap();
    assert_eq!(gemma.layers_of(LayerType::Sliding), 2);
    assert_eq!(gemma.rope_local_theta, Some(10_000.0));
    assert_eq!(gemma.query_pre_attn_scalar, Some(256.0));

    let cases: Vec<(&str, String)> = vec![
        ("num_experts_per_tok", refused(QWEN3_MOE, |m| {
            m.insert("num_experts_per_tok".into(), 9.into());
        })),
        ("sliding_window", refused(GEMMA3, |m| {
            m.insert("sliding_window".into(), 0.into());
        })),
        ("layer_types[1]", refused(GEMMA3, |m| {
            m.insert("layer_types".into(), serde_json::json!(["sliding_attention", "chunked_attention", "full_attention"]));
        })),
        ("layer_types", refused(GEMMA3, |m| {
            m.insert("layer_types".into(), serde_json::json!(["sliding_attention", "full_attention"]));
        })),
        ("head_dim", refused(QWEN3_MOE, |m| {
            m.insert("hidden_size".into(), 66.into());
        })),
        ("head_dim", refused(QWEN3_MOE, |m| {
            m.insert("head_dim".into(), 15.into());
        })),
        ("num_key_value_heads", refused(QWEN3_MOE, |m| {
            m.insert("num_key_value_heads".into(), 3.into());
        })),
        ("architectures", refused(QWEN3_MOE, |m| {
            m.insert("architectures".into(), serde_json::json!(["DeepseekV3ForCausalLM"]));
        })),
        ("attention_sink", refused(QWEN3_MOE, |m| {
            m.insert("attention_sink".into(), true.into());
        })),
        ("num_local_experts", refused(QWEN3_MOE, |m| {
            m.insert("num_local_experts".into(), 16.into());
        })),
        ("sliding_window_pattern", refused(GEMMA3, |m| {
            m.insert("sliding_window_pattern".into(), 2.into());
        })),
        ("final_logit_softcapping", refused(GEMMA3, |m| {
            m.insert("final_logit_softcapping".into(), 30.0.into());
        })),
        ("hidden_size", refused(QWEN3_MOE, |m| {
            m.insert("hidden_size".into(), "wide".into());
        })),
        ("intermediate_size", refused(QWEN3_MOE, |m| {
            m.remove("intermediate_size");
        })),
        ("model_type", refused(GEMMA3, |m| {
            m.insert("model_type".into(), "gemma3".into());
        })),
        ("rope_theta", refused(QWEN3_MOE, |m| {
            m.insert("rope_theta".into(), 1000.0.into());
            m.insert("rope_parameters".into(), serde_json::json!({"rope_type": "default", "rope_theta": 5000.0}));
        })),
        ("rope_parameters", refused(QWEN3_MOE, |m| {
            m.insert("rope_parameters".into(), serde_json::json!({"rope_type": "yarn", "factor": 4.0}));
        })),
    ];
    for (field, e) in cases {
        assert!(e.contains(&format!("`{field}")), "the error names `{field}`: {e}");
    }
    // A family not implemented names the ones that are.
    let e = refused(QWEN3_MOE, |m| {
        m.insert("architectures".into(), serde_json::json!(["DeepseekV3ForCausalLM"]));
    });
    assert!(e.contains("DeepseekV3ForCausalLM") && e.contains("Gemma3ForCausalLM") && e.contains("Phi3ForCausalLM"), "{e}");
}

/// Every preset's transformers expression (what its snippets build) builds in transformers
/// on the meta device, with the parameters Gradless counts from its config.
#[test]
fn every_presets_snippet_builds_in_transformers_with_its_parameters() {
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        eprintln!("GRADLESS_PYTHON is not set: the presets' snippets were not built");
        return;
    };
    let presets = protocol::decoder::presets();
    let mut script = String::from("import torch, transformers\ncounts = []\n");
    for p in presets {
        script.push_str(&format!(
            "with torch.device(\"meta\"):\n    m = {}\ncounts.append(m.num_parameters())\n",
            p.config.python_config().replace('\n', "\n    ")
        ));
    }
    script.push_str("print(' '.join(map(str, counts)))\n");
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("GRADLESS_PYTHON runs");
    assert!(out.status.success(), "the snippets did not build:\n{script}");
    let counts: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect();
    assert_eq!(counts.len(), presets.len());
    for (p, theirs) in presets.iter().zip(counts) {
        assert_eq!(p.config.parameters(), theirs, "{}", p.name);
    }
}

fn generate_spec(model: &str, batch: u32, prompt: u32, new_tokens: u32, cache: KvCacheKind) -> protocol::RunSpec {
    protocol::RunSpec {
        model: model.parse().unwrap(),
        device: protocol::DeviceChoice::Cpu,
        batch,
        input_size: Some(prompt),
        eval: true,
        grad: protocol::GradMode::NoGrad,
        threads: Some(1),
        generate: Some(protocol::GenerateSpec { new_tokens, cache, ..Default::default() }),
        ..protocol::RunSpec::default()
    }
}

/// A generate run's report splits the cache by layer type (measured, equal to each type's
/// formula, below the naive every-layer formula past the window) and, for a mixture of
/// experts, reports total against active parameters, every expert's bytes held, and the
/// distinct experts each decode step touched, more of them at a larger batch.
#[test]
fn generate_reports_the_cache_by_layer_type_and_the_experts() {
    let worker = engine::Worker::start(engine::WorkerConfig::default()).expect("worker starts");
    let run = |spec: protocol::RunSpec| {
        let r = worker.measure(spec, |_| {}).expect("generation succeeds");
        r.generation.expect("a generation section")
    };
    let gemma = protocol::decoder::preset("gemma3_tiny").unwrap().config.clone();
    let w = gemma.sliding_window.unwrap() as u64;
    for (cache, sliding_positions) in [(KvCacheKind::Dynamic, w - 1), (KvCacheKind::Static, w)] {
        let g = run(generate_spec("gemma3_tiny", 2, 40, 12, cache));
        let full = g.kv_cache_by_layer_type.iter().find(|s| s.layer_type == LayerType::Full).unwrap();
        let sliding = g.kv_cache_by_layer_type.iter().find(|s| s.layer_type == LayerType::Sliding).unwrap();
        assert_eq!((full.layers, sliding.layers), (1, 5));
        assert_eq!(sliding.positions, sliding_positions, "{}", cache.as_str());
        for s in &g.kv_cache_by_layer_type {
            assert_eq!(s.bytes, s.formula_bytes, "{}: {:?}", cache.as_str(), s.layer_type);
        }
        assert_eq!(g.kv_cache_bytes, g.kv_cache_formula_bytes);
        assert_eq!(g.kv_cache_naive_bytes, gemma.kv_cache_bytes(full.positions, 2, 4));
        assert!(g.kv_cache_naive_bytes > g.kv_cache_bytes, "{} vs {}", g.kv_cache_naive_bytes, g.kv_cache_bytes);
        assert!(g.moe.is_none());
    }

    let moe = protocol::decoder::preset("qwen3_moe_tiny").unwrap().config.clone();
    let m = moe.moe.clone().unwrap();
    let mut means = vec![];
    for batch in [1, 8] {
        let g = run(generate_spec("qwen3_moe_tiny", batch, 8, 6, KvCacheKind::Dynamic));
        let f = g.moe.expect("MoE figures");
        assert_eq!(f.total_parameters, moe.parameters());
        assert_eq!(f.active_parameters, moe.active_parameters());
        assert!(f.active_parameters < f.total_parameters);
        // Memory holds every expert: fp32, 3 × hidden × width each.
        assert_eq!(f.expert_bytes, moe.expert_parameters() * 4);
        assert_eq!(f.experts_bytes, f.expert_bytes * (m.num_experts * moe.moe_layers()) as u64);
        assert_eq!(f.steps.len(), 5, "one per decode step");
        for s in &f.steps {
            assert!(s.distinct_max <= m.num_experts && s.distinct_mean >= m.num_experts_per_tok as f64 - 1e-9);
            assert!(s.distinct_mean <= (batch * m.num_experts_per_tok).min(m.num_experts) as f64);
            assert_eq!(s.expert_bytes_read, (s.distinct_mean * moe.moe_layers() as f64).round() as u64 * f.expert_bytes);
        }
        if batch == 1 {
            // One token per step: exactly its top-k in every layer.
            assert!(f.steps.iter().all(|s| s.distinct_max == m.num_experts_per_tok));
        }
        means.push(f.distinct_experts_mean);
    }
    assert!(means[1] > means[0], "a batch of 8 touches more experts per step than one sequence: {means:?}");
}

/// What applies to a decoder applies to every family: int8 and int4 weights quantize every
/// linear layer, the experts' too (the report's measured split equals the formula's, and
/// the drift from the unquantized model is reported), a bf16 KV cache holds 2 bytes per
/// element in every layer type, and autocast runs. CUDA graph replay of a mixture of
/// experts is refused by name.
#[test]
fn quantization_kv_dtype_and_autocast_apply_to_every_family() {
    let worker = engine::Worker::start(engine::WorkerConfig::default()).expect("worker starts");
    for model in ["qwen3_tiny", "gemma3_tiny", "qwen3_moe_tiny", "mixtral_tiny", "phi3_tiny"] {
        for (quant, group) in [(protocol::WeightQuant::Int8, None), (protocol::WeightQuant::Int4, Some(32))] {
            let mut spec = generate_spec(model, 1, 8, 4, KvCacheKind::Dynamic);
            let g = spec.generate.as_mut().unwrap();
            g.weights = quant;
            g.group_size = group;
            let r = worker.measure(spec, |_| {}).unwrap_or_else(|e| panic!("{model} {}: {e}", quant.as_str()));
            let g = r.generation.unwrap();
            let (measured, formula) = (g.weights_breakdown.unwrap(), g.weights_formula.unwrap());
            assert_eq!(measured.linear_bytes, formula.linear_bytes, "{model} {}", quant.as_str());
            assert_eq!(measured.other_bytes, formula.other_bytes, "{model} {}", quant.as_str());
            assert!(measured.linear_bytes * 3 < formula.linear_unquantized_bytes, "{model}: quantized");
            assert!(g.drift.is_some(), "{model}: drift reported");
            if let Some(m) = &g.moe {
                // The experts are quantized too: one expert weighs its packed bytes.
                assert!(m.expert_bytes * 3 < protocol::decoder::preset(model).unwrap().config.expert_parameters() * 4);
            }
        }
        let mut spec = generate_spec(model, 2, 40, 4, KvCacheKind::Dynamic);
        spec.generate.as_mut().unwrap().kv_dtype = protocol::KvDtype::Bf16;
        let g = worker.measure(spec, |_| {}).unwrap().generation.unwrap();
        assert_eq!(g.kv_cache_element_bytes, 2, "{model}");
        assert_eq!(g.kv_cache_bytes, g.kv_cache_formula_bytes, "{model}: bf16 cache");
        let mut spec = generate_spec(model, 1, 8, 3, KvCacheKind::Static);
        spec.autocast = protocol::Autocast::Bf16;
        let g = worker.measure(spec, |_| {}).unwrap_or_else(|e| panic!("{model} autocast: {e}")).generation.unwrap();
        assert_eq!(g.tokens[0].len(), 3);
    }
    let mut spec = generate_spec("qwen3_moe_tiny", 1, 8, 4, KvCacheKind::Static);
    spec.device = protocol::DeviceChoice::Cuda;
    spec.advanced.cuda_graph = true;
    let e = spec.check(&protocol::Catalog::built_in(), &protocol::Limits::default()).unwrap_err();
    assert_eq!(e.field, "advanced.cuda_graph");
    assert!(e.message.contains("mixture of experts"), "{e}");
}

/// The trained preset is the repository's `models/torch_bytes`: its config reads (through
/// the Llama family's reader) into the preset's, its weights load, and a text prompt runs as
/// `[BOS] + bytes`, each step streaming its token, the report carrying the text. Trained
/// weights write code-shaped bytes: printable ASCII and whitespace, where random weights
/// spread over all 259 ids.
#[test]
fn the_trained_preset_loads_its_folder_and_writes_text() {
    let folder = engine::models::decoder::trained_dir("torch_bytes");
    let config = read_config(&std::fs::read_to_string(folder.join("config.json")).unwrap()).unwrap();
    let preset = protocol::decoder::preset(protocol::decoder::TRAINED_PRESET).unwrap();
    assert_eq!(config, preset.config, "the preset's config is the folder's");
    assert!(!preset.random_weights() && preset.byte_bos() == Some(256));

    let worker = engine::Worker::start(engine::WorkerConfig::default()).expect("worker starts");
    let prompt = "def forward(self, x):";
    let printable = |ids: &[i64]| ids.iter().filter(|&&t| (32..127).contains(&t) || t == 10 || t == 9).count() as f64 / ids.len() as f64;
    let mut spec = generate_spec(protocol::decoder::TRAINED_PRESET, 2, 1, 48, KvCacheKind::Dynamic);
    spec.input_size = None;
    spec.generate.as_mut().unwrap().prompt_text = Some(prompt.into());
    let mut streamed = vec![];
    let r = worker
        .measure(spec, |e| {
            if let protocol::Event::Step { step } = e {
                streamed.push(step.token.expect("each step names its token"));
            }
        })
        .expect("the trained preset generates");
    let g = r.generation.unwrap();
    let want: Vec<i64> = std::iter::once(256).chain(prompt.bytes().map(i64::from)).collect();
    assert_eq!(g.prompt_tokens, vec![want.clone(), want]);
    assert_eq!(streamed, g.tokens[0], "the streamed tokens are the generated ones");
    assert_eq!(g.tokens[0], g.tokens[1], "greedy on the same prompt");
    let text = g.text.expect("a byte model's report carries its text");
    assert_eq!(text.prompt, prompt);
    assert_eq!(text.generated[0], protocol::bytes_text(&g.tokens[0]));
    assert!(printable(&g.tokens[0]) > 0.9, "trained: {:?}", text.generated[0]);
    // The same shape with random weights writes no such text.
    let random = worker.measure(generate_spec(protocol::decoder::CPU_PRESET, 1, 22, 48, KvCacheKind::Dynamic), |_| {}).unwrap();
    let ids = &random.generation.unwrap().tokens[0];
    assert!(printable(ids) < 0.9, "random weights' ids: {ids:?}");
}

#[test]
fn a_column_major_layout_keeps_the_values_the_bytes_and_the_variables() {
    let _no_grad = tch::no_grad_guard();
    let mut model = Model::build("llama_tiny".parse().unwrap(), Device::Cpu, 0);
    let bytes = model.resident_bytes();
    let before: Vec<(String, Tensor)> = model.vs.variables().into_iter().map(|(n, t)| (n, t.copy())).collect();
    let prompt = Tensor::from_slice(&[3i64, 1, 4, 1, 5, 9, 2, 6]).view([1, -1]);
    let logits = |m: &Model| {
        let d = m.net.as_decoder().unwrap();
        d.forward(&prompt, 0, &mut KvCache::Off, false, Logits::All, &mut Probe::off())
    };
    let row = logits(&model);
    model.net.as_decoder_mut().unwrap().lay_out(WeightLayout::ColumnMajor);
    let vars = model.vs.variables();
    let mut moved = 0;
    for (name, old) in &before {
        let now = &vars[name];
        assert!(now.equal(old), "{name}: the values");
        // Every matrix a matmul reads; the untied embedding is only indexed.
        let want = match (now.dim(), name.as_str()) {
            (2, "model.embed_tokens.weight") => WeightLayout::RowMajor,
            (2, _) => WeightLayout::ColumnMajor,
            _ => continue,
        };
        assert_eq!(WeightLayout::of(now), Some(want), "{name}");
        moved += usize::from(want == WeightLayout::ColumnMajor);
    }
    // Seven linear layers per block and the head.
    assert_eq!(moved, 4 * 7 + 1);
    // q, k and v one allocation, k's rows right after q's; gate and up likewise.
    for (first, second) in [("self_attn.q_proj", "self_attn.k_proj"), ("mlp.gate_proj", "mlp.up_proj")] {
        let (a, b) = (&vars[&format!("model.layers.1.{first}.weight")], &vars[&format!("model.layers.1.{second}.weight")]);
        let step = a.size()[0] as usize * a.stride()[0] as usize * 4;
        assert_eq!(b.data_ptr() as usize - a.data_ptr() as usize, step, "{second} follows {first}");
    }
    assert_eq!(model.resident_bytes(), bytes, "the same bytes: the old storage is freed");
    let col = logits(&model);
    // Column-major, and q/k/v and gate/up stacked: other matmul kernels, whose sums differ
    // in the last bits.
    let diff = (&row - &col).abs().max().double_value(&[]);
    let largest = row.abs().max().double_value(&[]);
    assert!(diff < 1e-5 * largest.max(1.0), "max |Δlogit| {diff:e} of logits up to {largest}");
    assert_eq!(row.argmax(-1, false), col.argmax(-1, false));
    // And back: PyTorch's own layout, bit for bit the values it had.
    model.net.as_decoder_mut().unwrap().lay_out(WeightLayout::RowMajor);
    for (name, old) in &before {
        let now = &model.vs.variables()[name];
        assert!(now.is_contiguous() && now.equal(old), "{name}");
    }
    assert!(logits(&model).equal(&row), "row-major again computes the first logits to the bit");
    // With gradients recorded, each variable gets its own (the stacked tensor is not one).
    let grads = tch::with_grad(|| {
        logits(&model).sum(tch::Kind::Float).backward();
        ["self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj"].map(|n| model.vs.variables()[&format!("model.layers.2.{n}.weight")].grad())
    });
    for g in grads {
        assert!(g.defined() && g.abs().sum(tch::Kind::Float).double_value(&[]) > 0.0, "a gradient per variable");
    }

    // Column-major only where it is faster: fp32 on a CPU, autocast off.
    use tch::Kind;
    assert_eq!(WeightLayout::for_run(Device::Cpu, Kind::Float, false), WeightLayout::ColumnMajor);
    assert_eq!(WeightLayout::for_run(Device::Cpu, Kind::Float, true), WeightLayout::RowMajor);
    assert_eq!(WeightLayout::for_run(Device::Cpu, Kind::BFloat16, false), WeightLayout::RowMajor);
    assert_eq!(WeightLayout::for_run(Device::Cuda(0), Kind::Float, false), WeightLayout::RowMajor);
}
