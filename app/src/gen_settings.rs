//! The Generate page's settings in its address: a generate spec from the query
//! ([`spec_from_query`]) and back ([`query_from_spec`]), with the device's default decoder.
//! The keys are the settings table's ([`protocol::settings`]). Pure, so a generation's
//! permalink (records) links back to `/generate` without importing the page.

use protocol::settings::{self, Page, Reading, SETTINGS};
use protocol::{DeviceChoice, DeviceInfo, DeviceKind, GenerateSpec, GradMode, ModelId, RunSpec};

/// The page's default decoder on a device: the CPU preset, or a 1B shape on a GPU.
pub fn default_model(device: DeviceKind) -> ModelId {
    let name = match device {
        DeviceKind::Cuda => "llama_3_2_1b",
        DeviceKind::Cpu => protocol::decoder::CPU_PRESET,
    };
    name.parse().unwrap_or(ModelId::TinyMlp)
}

/// The page's default generation when the address asks for device `device`: the device's
/// default decoder, batch 1, a 32-token prompt, 64 new tokens, a dynamic cache, eval +
/// no_grad.
pub fn default_spec(devices: &[DeviceInfo], device: DeviceChoice) -> RunSpec {
    default_on(crate::settings::resolve_device(devices, device), device)
}

/// The default generation on a device of `kind`, asked for as `device`.
pub fn default_on(kind: DeviceKind, device: DeviceChoice) -> RunSpec {
    RunSpec {
        model: default_model(kind),
        device,
        batch: 1,
        input_size: Some(32),
        grad: GradMode::NoGrad,
        generate: Some(GenerateSpec::default()),
        ..RunSpec::default()
    }
}

/// A generate spec from the address (`get`: the router's reading of a key); anything
/// missing or unreadable keeps the default ([`default_spec`]).
pub fn spec_from_query(devices: &[DeviceInfo], catalog: &protocol::Catalog, get: impl Fn(&str) -> Option<String>) -> RunSpec {
    read_query(devices, catalog, &get).0
}

/// The spec, and what reading the address refused or read under an old key.
pub fn read_query(devices: &[DeviceInfo], catalog: &protocol::Catalog, get: &dyn Fn(&str) -> Option<String>) -> (RunSpec, Reading) {
    let device = get("device")
        .and_then(|v| v.parse::<DeviceChoice>().ok())
        .unwrap_or(DeviceChoice::Auto);
    let default = default_spec(devices, device);
    let mut spec = default.clone();
    let mut reading = settings::read_query(SETTINGS, Page::Generate, &mut spec, get, catalog);
    if !spec.model.is_decoder() {
        let why = format!("{} is not a decoder LLM, so it cannot generate", spec.model);
        reading.refused.push(("model".into(), spec.model.as_str().to_string(), why));
        spec.model = default.model;
    }
    fit_to_model(&mut spec, &mut reading, get("prompt").is_some());
    (spec, reading)
}

/// The prompt a model that reads text starts with on this page.
pub const DEFAULT_PROMPT_TEXT: &str = "def forward(self, x):";

/// A text prompt goes with a model that reads text (the byte model, a team folder with a
/// tokenizer), the quality measurement with the byte model only: on another model the
/// address's are refused (said on the page); on a text model a text prompt sets
/// the prompt's length unless the address gave one (`prompt_given`), which the run's check
/// then compares.
pub fn fit_to_model(spec: &mut RunSpec, reading: &mut Reading, prompt_given: bool) {
    let decoder = spec.model.decoder();
    let takes_text = decoder.as_deref().is_some_and(|d| d.takes_text());
    let Some(g) = spec.generate.as_mut() else { return };
    if !takes_text {
        if let Some(text) = g.prompt_text.take() {
            let why = format!("{} takes random prompt ids; a text prompt needs a model that reads text (a byte vocabulary or a tokenizer.json)", spec.model);
            reading.refused.push(("prompt_text".into(), text, why));
        }
    } else if g.prompt_text.is_some() && !prompt_given {
        spec.input_size = None;
    }
    if !takes_text && std::mem::take(&mut g.quality) {
        let why = format!("{} reads no text to measure quality on", spec.model);
        reading.refused.push(("quality".into(), "1".into(), why));
    }
}

/// `spec` on model `model`, as the page's model picker sets it: a model that reads text starts
/// from a text prompt ([`DEFAULT_PROMPT_TEXT`]); another leaves the text and the quality
/// measurement behind and takes the default prompt length.
pub fn with_model(spec: &RunSpec, model: ModelId) -> RunSpec {
    let mut next = RunSpec { model, ..spec.clone() };
    let decoder = model.decoder();
    let takes_text = decoder.as_deref().is_some_and(|d| d.takes_text());
    if let Some(g) = next.generate.as_mut() {
        match (takes_text, g.prompt_text.is_some()) {
            (true, false) => {
                g.prompt_text = Some(DEFAULT_PROMPT_TEXT.into());
                next.input_size = None;
            }
            (false, true) => {
                g.prompt_text = None;
                g.quality = false;
                next.input_size = Some(32);
            }
            _ => {}
        }
        if !takes_text {
            g.quality = false;
        }
    }
    next
}

/// The address's query for `spec` (every setting, so a link restores what its sender saw).
pub fn query_from_spec(spec: &RunSpec) -> String {
    settings::query(SETTINGS, Page::Generate, spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::router;
    use protocol::{KvCacheKind, KvDtype, WeightQuant, WeightsDtype};

    #[test]
    fn every_setting_round_trips_through_the_address_as_the_router_reads_it() {
        let base = spec_from_query(&[], &protocol::Catalog::built_in(), |_| None);
        crate::settings::tests::each_setting_round_trips(Page::Generate, &base, query_from_spec, |q| spec_from_query(&[], &protocol::Catalog::built_in(), router(q)));
        // And on the trained model, whose text prompt and quality switch apply.
        let trained = with_model(&base, protocol::decoder::TRAINED_PRESET.parse().unwrap());
        crate::settings::tests::each_setting_round_trips(Page::Generate, &trained, query_from_spec, |q| spec_from_query(&[], &protocol::Catalog::built_in(), router(q)));
    }

    #[test]
    fn int4_on_bf16_weights_survives_a_reload() {
        // The address the page writes for int4 in groups of 32 on bf16 weights (gpt-fast's
        // setup), read back as the router reads it.
        let mut spec = spec_from_query(&[], &protocol::Catalog::built_in(), |_| None);
        let g = spec.generate.as_mut().unwrap();
        (g.weights, g.group_size, g.kv_dtype, g.cache) = (WeightQuant::Int4, Some(32), KvDtype::Bf16, KvCacheKind::Static);
        spec.advanced.weights = WeightsDtype::Bf16;
        let q = query_from_spec(&spec);
        assert!(q.contains("dtype=bf16") && q.contains("quant=int4&group_size=32") && !q.contains("weights="), "{q}");
        let back = spec_from_query(&[], &protocol::Catalog::built_in(), router(&q));
        assert_eq!(back, spec);
        back.check(&protocol::Catalog::built_in(), &Default::default()).unwrap();
    }

    #[test]
    fn an_old_address_with_the_ambiguous_weights_key_reads_as_it_did() {
        // The router reads the last `weights`: the quantization's word or the dtype's, each
        // read as the setting whose word it is, and said.
        let (spec, reading) = read_query(&[], &protocol::Catalog::built_in(), &router("model=llama_tiny&weights=int4&group_size=32"));
        assert_eq!(spec.generate.as_ref().map(|g| (g.weights, g.group_size)), Some((WeightQuant::Int4, Some(32))));
        assert_eq!(reading.renamed.len(), 1);
        let (spec, _) = read_query(&[], &protocol::Catalog::built_in(), &router("model=llama_tiny&weights=int4&group_size=32&weights=bf16"));
        assert_eq!(spec.advanced.weights, WeightsDtype::Bf16);
        // The group size applies to int4 only: left out, as the spec check wants.
        assert_eq!(spec.generate.as_ref().unwrap().group_size, None);
        spec.check(&protocol::Catalog::built_in(), &Default::default()).unwrap();
        let said = crate::settings::said_of_reading(Page::Generate, &spec, &read_query(&[], &protocol::Catalog::built_in(), &router("weights=int8")).1);
        assert!(said[0].contains("quant=int8"), "{said:?}");
    }

    #[test]
    fn the_trained_model_takes_a_text_prompt_and_other_models_refuse_one() {
        let llama = spec_from_query(&[], &protocol::Catalog::built_in(), |_| None);
        let trained: ModelId = protocol::decoder::TRAINED_PRESET.parse().unwrap();
        let on_bytes = with_model(&llama, trained);
        assert_eq!(on_bytes.generate.as_ref().unwrap().prompt_text.as_deref(), Some(DEFAULT_PROMPT_TEXT));
        on_bytes.check(&protocol::Catalog::built_in(), &Default::default()).unwrap();
        // Through the address and back, as the router reads it.
        let mut asked = on_bytes.clone();
        asked.generate.as_mut().unwrap().quality = true;
        let q = query_from_spec(&asked);
        assert!(q.contains("prompt_text=def%20forward%28self%2C%20x%29%3A") && !q.contains("prompt="), "{q}");
        assert_eq!(spec_from_query(&[], &protocol::Catalog::built_in(), router(&q)), asked);
        // Back on a random-weights preset: no text, no quality, the default prompt length.
        let back = with_model(&asked, llama.model);
        assert_eq!(back, llama);
        // An address that gives a text prompt to a model without a byte vocabulary.
        let (spec, reading) = read_query(&[], &protocol::Catalog::built_in(), &router("model=llama_tiny&prompt_text=hi&quality=1"));
        spec.check(&protocol::Catalog::built_in(), &Default::default()).unwrap();
        let keys: Vec<&str> = reading.refused.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(keys, ["prompt_text", "quality"]);
    }

    #[test]
    fn a_model_that_cannot_generate_falls_back_to_the_default_decoder() {
        let (s, reading) = read_query(&[], &protocol::Catalog::built_in(), &router("model=resnet18"));
        assert_eq!(s.model.as_str(), protocol::decoder::CPU_PRESET);
        assert!(s.check(&protocol::Catalog::built_in(), &Default::default()).is_ok());
        assert_eq!(reading.refused.len(), 1);
    }
}
