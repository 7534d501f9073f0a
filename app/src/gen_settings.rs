//! The Generate page's settings in its address: a generate spec from the query
//! ([`spec_from_query`]) and back ([`query_from_spec`]), with the device's default decoder.
//! Pure, so a generation's permalink (records) links back to `/generate` without importing
//! the page.

use protocol::{Autocast, DeviceChoice, DeviceKind, GenerateSpec, GradMode, ModelId, RunSpec};

/// The page's default decoder on a device: the CPU preset, or a 1B shape on a GPU.
pub fn default_model(device: DeviceKind) -> ModelId {
    let name = match device {
        DeviceKind::Cuda => "llama_3_2_1b",
        DeviceKind::Cpu => protocol::decoder::CPU_PRESET,
    };
    name.parse().unwrap_or(ModelId::TinyMlp)
}

/// A generate spec from the address: anything missing or unreadable keeps the default (the
/// device's default decoder, batch 1, a 32-token prompt, 64 new tokens, a dynamic cache,
/// eval + no_grad).
pub fn spec_from_query(devices: &[protocol::DeviceInfo], get: impl Fn(&str) -> Option<String>) -> RunSpec {
    let device = get("device")
        .and_then(|v| v.parse::<DeviceChoice>().ok())
        .unwrap_or(DeviceChoice::Auto);
    let kind = crate::settings::resolve_device(devices, device);
    let model = get("model")
        .and_then(|v| v.parse::<ModelId>().ok())
        .filter(|m| m.is_decoder())
        .unwrap_or_else(|| default_model(kind));
    let num = |k: &str, d: u32| get(k).and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(d);
    RunSpec {
        model,
        device,
        batch: num("batch", 1),
        input_size: Some(num("prompt", 32)),
        eval: get("eval").map(|v| v != "0" && v != "false").unwrap_or(true),
        grad: get("grad").and_then(|v| v.parse().ok()).unwrap_or(GradMode::NoGrad),
        autocast: get("autocast").and_then(|v| v.parse().ok()).unwrap_or(Autocast::Off),
        threads: get("threads").and_then(|v| v.parse().ok()),
        advanced: crate::settings::advanced_from_query(&get),
        generate: Some(GenerateSpec {
            new_tokens: num("new_tokens", 64),
            cache: get("cache").and_then(|v| v.parse().ok()).unwrap_or_default(),
            weights: get("weights").and_then(|v| v.parse().ok()).unwrap_or_default(),
            group_size: get("group_size").and_then(|v| v.parse().ok()),
            kv_dtype: get("kv_dtype").and_then(|v| v.parse().ok()).unwrap_or_default(),
            prefill_logits: false,
        }),
        ..RunSpec::default()
    }
}

/// The address's query for `spec` (every setting, so a link restores what its sender saw).
pub fn query_from_spec(spec: &RunSpec) -> String {
    let g = spec.generate.clone().unwrap_or_default();
    let mut q = format!(
        "model={}&device={}&batch={}&prompt={}&new_tokens={}&cache={}&eval={}&grad={}&autocast={}",
        spec.model.as_str(),
        match spec.device {
            DeviceChoice::Auto => "auto",
            DeviceChoice::Cpu => "cpu",
            DeviceChoice::Cuda => "cuda",
        },
        spec.batch,
        spec.resolved_input_size(),
        g.new_tokens,
        g.cache.as_str(),
        if spec.eval { 1 } else { 0 },
        spec.grad.as_str(),
        spec.autocast.as_str(),
    );
    if let Some(t) = spec.threads {
        q.push_str(&format!("&threads={t}"));
    }
    if !g.weights.is_none() {
        q.push_str(&format!("&weights={}", g.weights.as_str()));
    }
    if let Some(gs) = g.group_size {
        q.push_str(&format!("&group_size={gs}"));
    }
    if !g.kv_dtype.is_default() {
        q.push_str(&format!("&kv_dtype={}", g.kv_dtype.as_str()));
    }
    q.push_str(&crate::settings::advanced_query(&spec.advanced));
    q
}

