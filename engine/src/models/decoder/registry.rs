//! Every family Gradless builds, and reading a `config.json` into the one its
//! `architectures` names. Apart from [`super::family`] (the trait and the helpers each family
//! reads its config with) so that a family's file depends on the trait and the registry on
//! the families, never both ways.

use protocol::decoder::{Architecture, DecoderConfig};
use serde_json::Value;

use super::family::Family;
use super::{gemma3, llama, mistral, mixtral, phi3, qwen2, qwen3, qwen3_moe};

/// Every family Gradless builds.
pub const FAMILIES: [&dyn Family; 8] = [
    &llama::Llama,
    &mistral::Mistral,
    &qwen2::Qwen2,
    &qwen3::Qwen3,
    &gemma3::Gemma3,
    &qwen3_moe::Qwen3Moe,
    &mixtral::Mixtral,
    &phi3::Phi3,
];

/// The family of `a`.
pub fn family(a: Architecture) -> &'static dyn Family {
    FAMILIES
        .into_iter()
        .find(|f| f.architecture() == a)
        .expect("every architecture has a family")
}

/// Fields of a `config.json` that describe the checkpoint or generation defaults, not the
/// network: read past by every family.
const METADATA: &[&str] = &[
    "architectures",
    "model_type",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "use_cache",
    "_name_or_path",
    "name_or_path",
    "tokenizer_class",
    "id2label",
    "label2id",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "output_router_logits",
    "router_aux_loss_coef",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "pruned_heads",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "is_decoder",
    "add_cross_attention",
    "cross_attention_hidden_size",
    "tie_encoder_decoder",
    "problem_type",
    "finetuning_task",
    "task_specific_params",
    "prefix",
    "auto_map",
    "_attn_implementation_autoset",
    "cache_implementation",
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
];

/// Reads a Hugging Face `config.json` with its family's reader. A family Gradless does not
/// build, an unknown field, a missing required one, one of the wrong type or two that
/// contradict each other is an error naming the field.
pub fn read_config(text: &str) -> Result<DecoderConfig, String> {
    read_config_noting(text).map(|(config, _)| config)
}

/// Fields a family's reader does not know that are read past when set to what Gradless
/// builds anyway (a Mistral saved with `"attention_bias": false`: its projections have no
/// bias, as Gradless builds them). Set to anything else, the family's reader refuses them,
/// naming the field. Qwen2 always has q/k/v biases, so its `attention_bias` is never read
/// past.
const AS_BUILT: &[(&str, fn() -> Value, &[Architecture])] = &[
    ("attention_bias", || Value::Bool(false), &[Architecture::Qwen2]),
    ("mlp_bias", || Value::Bool(false), &[]),
    ("pretraining_tp", || Value::from(1), &[]),
];

/// Whether `key` is a trainer's or a tool's metadata, of no effect on the model: keys that
/// begin with `_`, and the version stamps tools leave (`unsloth_version`, ...).
fn is_metadata(key: &str) -> bool {
    METADATA.contains(&key) || key.starts_with('_') || key.ends_with("_version")
}

/// [`read_config`], and the fields it read past (metadata of no effect, and fields set to
/// what Gradless builds), which the folder's report lists.
pub fn read_config_noting(text: &str) -> Result<(DecoderConfig, Vec<String>), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("config.json is not JSON: {e}"))?;
    let Value::Object(mut fields) = v else {
        return Err("config.json must be a JSON object".into());
    };
    let arch_name = fields
        .get("architectures")
        .and_then(|a| a.as_array())
        .and_then(|a| a.first())
        .and_then(|a| a.as_str())
        .ok_or("config.json has no `architectures` list naming the model class")?
        .to_string();
    let known: Vec<_> = FAMILIES.iter().map(|f| f.architecture().class_name()).collect();
    let family = FAMILIES
        .into_iter()
        .find(|f| f.architecture().class_name() == arch_name)
        .ok_or_else(|| {
            format!(
                "`architectures`: `{arch_name}` is not a family Gradless implements; implemented: {}",
                known.join(", ")
            )
        })?;
    let a = family.architecture();
    if let Some(t) = fields.get("model_type").and_then(|t| t.as_str()) {
        if t != a.model_type() {
            let hint = match (a, t) {
                (Architecture::Gemma3, "gemma3") => ": that is Gemma 3's multimodal config, whose text model's fields sit under `text_config`; give the text model's config (`model_type: gemma3_text`)",
                _ => "",
            };
            return Err(format!(
                "`model_type` is `{t}`, and {} is `{}`{hint}",
                a.class_name(),
                a.model_type()
            ));
        }
    }
    if fields.get("quantization_config").is_some_and(|q| !q.is_null()) {
        return Err("`quantization_config`: a quantized checkpoint is not one Gradless loads; give the unquantized weights (Gradless quantizes them itself: generate.quant)".into());
    }
    let mut read_past = vec![];
    fields.retain(|k, _| {
        let meta = is_metadata(k);
        // The common metadata is not worth a line in every report; a tool's stamp is.
        if meta && !METADATA.contains(&k.as_str()) {
            read_past.push(k.clone());
        }
        !meta
    });
    for (key, built, except) in AS_BUILT {
        if !except.contains(&a) && fields.get(*key) == Some(&built()) {
            let reader_knows = family.read(fields.clone()).is_ok();
            // Kept where the family's own reader takes it (Llama reads `attention_bias`).
            if !reader_knows {
                fields.remove(*key);
                read_past.push(format!("{key}: {}", built()));
            }
        }
    }
    read_past.sort();
    family.read(fields).map(|c| (c, read_past))
}
