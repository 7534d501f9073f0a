//! Gradless's decoder computes what Hugging Face transformers computes, for models a team
//! saved with `save_pretrained` (a Llama, a Qwen2 with q/k/v biases and a tied head, a Llama
//! with Llama 3's RoPE scaling): every position's prefill logits within 1e-4 (fp32), and the
//! same 32 greedy tokens with a dynamic cache, a static one and none. The Llama also as a
//! team's checkpoint usually sits on disk: sharded (`model.safetensors.index.json` and its
//! shards), in fp32 and stored in bf16; and the ways such a folder is refused at start-up,
//! naming the file, instead of running on random weights. Needs a Python with
//! torch and transformers: `GRADLESS_PYTHON` (scripts/test.sh points it at the venv).

use engine::models::decoder::{KvCache, Logits};
use engine::models::Model;
use engine::trace::Probe;
use protocol::{KvCacheKind, ModelId};
use tch::{Device, Kind, Tensor};

fn greedy(model: &Model, prompt: &Tensor, n: i64, kind: KvCacheKind) -> Vec<Vec<i64>> {
    let decoder = model.net.as_decoder().unwrap();
    let layers = decoder.config().num_hidden_layers as usize;
    let mut cache = KvCache::new(kind, layers, prompt.size()[1] + n);
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
    (0..t.size()[0]).map(|r| Vec::<i64>::try_from(t.get(r)).unwrap()).collect()
}

#[test]
fn prefill_logits_and_greedy_tokens_match_transformers() {
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        eprintln!("GRADLESS_PYTHON is not set: the transformers comparison was not run");
        return;
    };
    let dir = std::env::temp_dir().join(format!("gradless-hf-decoders-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/make_hf_decoders.py");
    let status = std::process::Command::new(&python)
        .arg(script)
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("GRADLESS_PYTHON runs");
    assert!(status.success(), "the fixture script failed");
    let loaded = engine::team::load_dir(&dir.join("models"), None).unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    assert_eq!(loaded.decoders.len(), 5);
    // Where the weights came from, in every report: the sharded folders name their index,
    // their shards and the dtype as stored.
    for d in &loaded.decoders {
        let p = d.provenance();
        if d.name.contains("sharded") {
            assert!(p.contains("safetensors shards + model.safetensors.index.json") && p.contains("sha256"), "{p}");
            let dtype = if d.name.ends_with("bf16") { "bf16 as stored" } else { "fp32 as stored" };
            assert!(p.contains(dtype), "{p}");
        }
        assert!(!d.random_weights(), "{}: {p}", d.name);
    }
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let prompt: Vec<Vec<i64>> = serde_json::from_value(reference["prompt"].clone()).unwrap();
    let rows = prompt.len() as i64;
    let flat: Vec<i64> = prompt.concat();
    let prompt = Tensor::from_slice(&flat).view([rows, -1]);
    let _no_grad = tch::no_grad_guard();
    let catalog = loaded.catalog();
    for (name, want) in reference["models"].as_object().unwrap() {
        let id: ModelId = catalog.parse(name).unwrap();
        assert!(id.is_decoder());
        let model = Model::build(id, Device::Cpu, 0);
        let decoder = model.net.as_decoder().unwrap();
        let logits = decoder.forward(&prompt, 0, &mut KvCache::Off, false, Logits::All, &mut Probe::off());
        let shape: Vec<i64> = serde_json::from_value(want["shape"].clone()).unwrap();
        assert_eq!(logits.size(), shape, "{name}");
        let theirs: Vec<f32> = serde_json::from_value(want["logits"].clone()).unwrap();
        let theirs = Tensor::from_slice(&theirs).view(shape.as_slice());
        let diff = (&logits - &theirs).abs().max().double_value(&[]);
        let scale = theirs.abs().max().double_value(&[]);
        assert!(diff < 1e-4, "{name}: max |Δlogit| {diff:e} (logits up to {scale:.2})");
        eprintln!("{name}: max |Δlogit| {diff:.2e} against transformers (logits up to {scale:.2}); 32 greedy tokens compared per cache kind");
        assert_eq!(logits.kind(), Kind::Float);
        let tokens: Vec<Vec<i64>> = serde_json::from_value(want["tokens"].clone()).unwrap();
        for kind in protocol::words::all::<KvCacheKind>().iter().copied() {
            assert_eq!(greedy(&model, &prompt, 32, kind), tokens, "{name}, {} cache", kind.as_str());
        }
    }
    refusals(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sharded folder that cannot be read as a whole is refused at start-up naming the file;
/// a folder with a config and no weights is served on random weights and says so.
fn refusals(dir: &std::path::Path) {
    let source = dir.join("models/hf_llama_sharded");
    let shards: Vec<std::path::PathBuf> = std::fs::read_dir(&source)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    let case = |name: &str, change: &dyn Fn(&std::path::Path)| {
        let models = dir.join(format!("refused-{name}"));
        let folder = models.join("team_llama");
        std::fs::create_dir_all(&folder).unwrap();
        for f in std::fs::read_dir(&source).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, folder.join(f.file_name().unwrap())).unwrap();
        }
        change(&folder);
        let loaded = engine::team::load_dir(&models, None).unwrap();
        assert!(loaded.decoders.is_empty(), "{name}: served anyway");
        assert_eq!(loaded.problems.len(), 1, "{name}");
        loaded.problems[0].reason.clone()
    };
    let shard = shards[1].file_name().unwrap().to_string_lossy().into_owned();
    let missing = case("missing", &|f| std::fs::remove_file(f.join(&shard)).unwrap());
    assert!(missing.contains(&shard) && missing.contains("missing"), "{missing}");
    let truncated = case("truncated", &|f| {
        let bytes = std::fs::read(f.join(&shard)).unwrap();
        std::fs::write(f.join(&shard), &bytes[..bytes.len() - 100]).unwrap();
    });
    assert!(truncated.contains(&shard) && truncated.contains("not a complete safetensors file"), "{truncated}");
    let outside = case("outside", &|f| {
        let index = f.join("model.safetensors.index.json");
        let text = std::fs::read_to_string(&index).unwrap().replacen(&format!("\"{shard}\""), "\"../elsewhere.safetensors\"", 1);
        std::fs::write(index, text).unwrap();
    });
    assert!(outside.contains("../elsewhere.safetensors") && outside.contains("a file in the model's folder"), "{outside}");
    // A config alone: served, on random weights, and every report says so.
    let bare = dir.join("bare");
    std::fs::create_dir_all(bare.join("team_bare")).unwrap();
    std::fs::copy(source.join("config.json"), bare.join("team_bare/config.json")).unwrap();
    let loaded = engine::team::load_dir(&bare, None).unwrap();
    let d = &loaded.decoders[0];
    assert!(d.random_weights() && d.provenance().contains("random, seeded: no weights in this folder"), "{}", d.provenance());
}
