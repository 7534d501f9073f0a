//! Addresses and specs written before, read today: the Lab's and Generate's queries (from
//! the docs and the tests, with the old `weights` key, values a page refuses and escaped
//! text) and records' specs (with the old `weights` fields). What each reads as (the spec's
//! JSON, the address and the command line written back, what was refused or renamed, the
//! label, the check's verdict) is held in `saved.txt`, written by the code before the
//! settings were typed rows; a change to any of them fails here.

use super::*;
use crate::RunSpec;
use crate::{GenerateSpec, GradMode};

/// A query value as the router hands it over: `%XX` and `+` decoded.
fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

pub(super) fn read(page: Page, q: &str) -> (RunSpec, Reading) {
    let mut spec = match page {
        Page::Lab => RunSpec::default(),
        Page::Generate => RunSpec {
            model: "llama_tiny".parse().unwrap(),
            batch: 1,
            grad: GradMode::NoGrad,
            generate: Some(GenerateSpec::default()),
            ..RunSpec::default()
        },
    };
    let pairs: Vec<(String, String)> = q.split('&').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), decode(v))).collect();
    let r = read_query(SETTINGS, page, &mut spec, &|k| pairs.iter().rfind(|(key, _)| key == k).map(|(_, v)| v.clone()), &crate::Catalog::built_in());
    (spec, r)
}

pub(super) const QUERIES: &[(Page, &str)] = &[
    (Page::Lab, "model=resnet18&device=cpu&batch=2&eval=1&grad=enabled&autocast=off"),
    (Page::Lab, "model=tiny_mlp&device=cpu&eval=1&grad=no_grad&batch=8&input_size="),
    (Page::Lab, "model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=5"),
    (Page::Lab, "model=resnet18&weights=bf16&memory_format=channels_last&input_source=pinned&tf32=1&cudnn_benchmark=1&threads=2"),
    (Page::Lab, "model=resnet18&device=cuda&grad=inference_mode&cuda_graph=1&autocast=fp16&dtype=fp16"),
    (Page::Lab, "model=tiny_mlp&compiled=1&eval=0&mode=train"),
    (Page::Generate, "model=llama_tiny&batch=1&prompt=32&new_tokens=64&cache=dynamic&eval=1&grad=no_grad&autocast=off"),
    (Page::Generate, "model=llama_tiny&device=cpu&weights=int4&group_size=32"),
    (Page::Generate, "model=llama_tiny&device=cpu&weights=int8&group_size=32"),
    (Page::Generate, "model=llama_tiny&device=cpu&weights=bf16"),
    (Page::Generate, "model=llama_tiny&quant=int4&kv_dtype=bf16&cache=static&dtype=bf16&cuda_graph=1"),
    (Page::Generate, "model=llama_tiny&quant=int8&group_size=64&kv_dtype=fp8_e4m3&new_tokens=9000"),
    (Page::Generate, "model=torch_bytes&device=cpu&batch=1&new_tokens=8&cache=dynamic&eval=1&grad=no_grad&autocast=off&quality=1&prompt_text=def%20f"),
    (Page::Generate, "model=llama_tiny&prompt_text=it%27s%20a%0Aline&prefill_logits=1"),
];

pub(super) const SPECS: &[&str] = &[
    r#"{}"#,
    r#"{"model": "resnet18", "device": "cpu", "batch": 8, "input_size": 64, "eval": true, "grad": "no_grad", "autocast": "off", "warmup": 1, "iters": 2, "threads": 1}"#,
    r#"{"advanced": {"weights": "fp16", "memory_format": "channels_last"}}"#,
    r#"{"model": "resnet18", "advanced": {"dtype": "bf16", "input_source": "pinned", "tf32": true, "cudnn_benchmark": true, "cuda_graph": true}}"#,
    r#"{"model": "tiny_mlp", "advanced": {"compiled": true}}"#,
    r#"{"model": "llama_tiny", "generate": {"weights": "int4", "group_size": 32}}"#,
    r#"{"model": "llama_tiny", "generate": {"quant": "int8", "kv_dtype": "bf16", "cache": "static", "new_tokens": 16}}"#,
    r#"{"model": "llama_tiny", "batch": 1, "input_size": 16, "grad": "no_grad", "generate": {"new_tokens": 8, "cache": "off", "prefill_logits": true}}"#,
    r#"{"model": "torch_bytes", "generate": {"prompt_text": "def f", "quality": true}}"#,
];

/// What every saved address and spec reads as, in `saved.txt`'s words.
fn reading() -> String {
    let mut out = String::new();
    for (page, q) in QUERIES {
        let (spec, r) = read(*page, q);
        out += &format!(
            "Q {page:?} {q}\n  query: {}\n  json: {}\n  refused: {:?}\n  renamed: {:?}\n  label: {}\n  cmd: {}\n",
            query(SETTINGS, *page, &spec),
            serde_json::to_string(&spec).unwrap(),
            r.refused,
            r.renamed,
            spec.label(),
            command_line(SETTINGS, &spec)
        );
    }
    for s in SPECS {
        let spec: RunSpec = serde_json::from_str(s).unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<RunSpec>(&json).unwrap(), spec, "{s}");
        let page = if spec.generate.is_some() { Page::Generate } else { Page::Lab };
        out += &format!(
            "S {s}\n  json: {json}\n  query: {}\n  label: {}\n  cmd: {}\n  check: {:?}\n",
            query(SETTINGS, page, &spec),
            spec.label(),
            command_line(SETTINGS, &spec),
            spec.check(&crate::Catalog::built_in(), &Default::default()).err().map(|e| (e.field.to_string(), e.message))
        );
    }
    out
}

#[test]
fn addresses_and_specs_written_before_read_as_they_did() {
    let now = reading();
    let before = include_str!("saved.txt");
    for (n, (a, b)) in before.lines().zip(now.lines()).enumerate() {
        assert_eq!(b, a, "saved.txt line {}", n + 1);
    }
    assert_eq!(now.lines().count(), before.lines().count());
}
