//! The table's own tests: keys and flags unique, every row reading and writing the spec
//! through its field, the dependencies, old keys.

use super::*;
use crate::{GenerateSpec, GradMode, WeightQuant, WeightsDtype};

fn generation() -> RunSpec {
    RunSpec {
        model: "llama_tiny".parse().unwrap(),
        batch: 1,
        input_size: Some(32),
        grad: GradMode::NoGrad,
        generate: Some(GenerateSpec::default()),
        ..RunSpec::default()
    }
}

#[test]
fn keys_and_flags_are_unique_per_page_and_per_command() {
    for page in [Page::Lab, Page::Generate] {
        let mut keys: Vec<&str> = on_page(SETTINGS, page).map(|s| s.key).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "{page:?}: a key twice");
        // An old key is no other setting's key on the page.
        for s in on_page(SETTINGS, page) {
            if let Some(old) = s.legacy {
                assert!(!keys.contains(&old), "{page:?}: {old}");
            }
        }
    }
    for run in [RunKind::Forward, RunKind::Generate] {
        let mut flags: Vec<&str> = SETTINGS.iter().filter(|s| s.applies_to(run)).map(|s| s.flag).collect();
        let n = flags.len();
        flags.sort();
        flags.dedup();
        assert_eq!(flags.len(), n, "{run:?}: a flag twice");
    }
}

#[test]
fn every_row_reads_and_writes_the_spec_through_its_field() {
    for s in SETTINGS {
        let mut spec = if s.applies_to(RunKind::Generate) { generation() } else { RunSpec::default() };
        for v in s.choices().into_iter().chain(["7".to_string()]).filter(|v| s.parse(v).is_ok()) {
            if let Some(only) = s.only_with {
                setting(only.on).set(&mut spec, only.word).unwrap();
            }
            if matches!(s.kind, Kind::Name(_)) {
                continue;
            }
            s.set(&mut spec, &v).unwrap_or_else(|e| panic!("{}: {e}", s.id));
            assert_eq!(s.value(&spec).as_deref(), Some(v.as_str()), "{}", s.id);
            // The JSON carries what the row wrote, where its id says (the name a refusal
            // gives is the field's place in the JSON).
            let json = serde_json::to_value(&spec).unwrap();
            let at = json.pointer(&format!("/{}", s.id.as_str().replace('.', "/")));
            let written = match at {
                Some(serde_json::Value::Bool(b)) => Some(if *b { "1" } else { "0" }.to_string()),
                Some(serde_json::Value::String(w)) => Some(w.clone()),
                Some(serde_json::Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            // A field at its default may be left out of the JSON.
            if written.is_some() || !s.is_default(&spec) {
                assert_eq!(written.as_deref(), Some(v.as_str()), "{}", s.id);
            }
            // Cleared, it is back at the default of its kind of run.
            let mut cleared = spec.clone();
            s.clear(&mut cleared);
            assert!(s.is_default(&cleared) || s.value(&cleared).is_none(), "{}", s.id);
        }
    }
}

#[test]
fn each_row_kind_matches_its_field_and_each_id_has_a_row() {
    for s in SETTINGS {
        let fits = match (s.kind, s.access) {
            (Kind::Choice(_) | Kind::Name(_), Access::Word { .. }) => true,
            (Kind::Count { .. }, Access::Count { .. }) => true,
            (Kind::Switch | Kind::Pair { .. }, Access::Bool { .. }) => true,
            (Kind::Text, Access::Text { .. }) => true,
            _ => false,
        };
        assert!(fits, "{}: its kind and its field disagree", s.id);
    }
    for id in SettingId::ALL {
        assert_eq!(setting(id).id, id);
        assert_eq!(SettingId::from_name(id.as_str()), Some(id));
    }
}

#[test]
fn a_dependent_setting_is_left_out_when_what_it_needs_changes() {
    let mut spec = generation();
    let group = setting(SettingId::GroupSize);
    assert!(!group.in_use(&spec));
    setting(SettingId::Quant).set(&mut spec, "int4").unwrap();
    assert!(group.in_use(&spec));
    group.set(&mut spec, "128").unwrap();
    setting(SettingId::Quant).set(&mut spec, "none").unwrap();
    assert_eq!(spec.generate.as_ref().unwrap().group_size, None);
    // A forward spec takes no generation's setting, and is left a forward spec.
    let mut forward = RunSpec::default();
    assert!(setting(SettingId::KvDtype).set(&mut forward, "bf16").is_err());
    assert_eq!(forward.generate, None);
}

#[test]
fn the_quantization_and_the_dtype_are_two_settings() {
    let mut spec = generation();
    setting(SettingId::Quant).set(&mut spec, "int4").unwrap();
    setting(SettingId::GroupSize).set(&mut spec, "32").unwrap();
    setting(SettingId::Dtype).set(&mut spec, "bf16").unwrap();
    let g = spec.generate.clone().unwrap();
    assert_eq!((g.weights, g.group_size, spec.advanced.weights), (WeightQuant::Int4, Some(32), WeightsDtype::Bf16));
    let q = query(SETTINGS, Page::Generate, &spec);
    assert!(q.contains("&dtype=bf16") && q.contains("&quant=int4&group_size=32"), "{q}");
    assert_eq!(spec.label(), "eval · no_grad · bf16 weights · batch 1 · prompt 32 · 64 new · dynamic cache · int4 linear layers · group 32");
    // Leaving int4 leaves its group size out (the spec check refuses one on int8).
    setting(SettingId::Quant).set(&mut spec, "int8").unwrap();
    assert_eq!(spec.generate.as_ref().unwrap().group_size, None);
    assert_eq!(
        command_args(SETTINGS, &spec, &[]).join(" "),
        "--model=llama_tiny --device=auto --eval --grad=no_grad --autocast=off --dtype=bf16 --batch=1 --prompt=32 --new-tokens=64 --cache=dynamic --quant=int8"
    );
}

#[test]
fn an_old_weights_key_reads_as_the_setting_whose_word_it_is() {
    for (value, key) in [("int4", "quant"), ("bf16", "dtype")] {
        let mut spec = generation();
        let r = read_query(SETTINGS, Page::Generate, &mut spec, &|k| (k == "weights").then(|| value.to_string()), &crate::Catalog::built_in());
        assert_eq!(r.renamed, vec![("weights".to_string(), value.to_string(), key.to_string())]);
        assert!(r.refused.is_empty());
    }
    let mut spec = generation();
    let r = read_query(SETTINGS, Page::Generate, &mut spec, &|k| (k == "weights").then(|| "int3".to_string()), &crate::Catalog::built_in());
    assert_eq!(r.refused.len(), 1);
    // Today's key wins over the old one.
    let mut spec = generation();
    read_query(SETTINGS, Page::Generate, &mut spec, &|k| match k {
        "weights" => Some("fp16".into()),
        "dtype" => Some("bf16".into()),
        _ => None,
    }, &crate::Catalog::built_in());
    assert_eq!(spec.advanced.weights, WeightsDtype::Bf16);
}

#[test]
fn differences_name_what_is_not_the_default() {
    let d = generation();
    let mut s = d.clone();
    setting(SettingId::KvDtype).set(&mut s, "bf16").unwrap();
    setting(SettingId::Quant).set(&mut s, "int4").unwrap();
    assert_eq!(
        differences(SETTINGS, Page::Generate, &s, &d),
        ["Quantized linear layers: int4, a scale and a zero per group", "int4 group size: 64", "KV cache dtype: bf16"]
    );
    assert!(differences(SETTINGS, Page::Generate, &d, &d).is_empty());
}
