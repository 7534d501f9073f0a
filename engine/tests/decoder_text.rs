//! A team's checkpoint as it sits on disk, with its tokenizer: a sharded fp32 folder, a
//! sharded bf16 folder, a Qwen3 folder whose tokenizer adds no BOS, and a Hugging Face hub
//! cache's snapshot (symlinks into `blobs/`, picked by `refs/main`), each with a byte-level
//! BPE `tokenizer.json` trained at test time (`fixtures/make_hf_text_decoders.py`). From the
//! same text prompt Gradless's generation encodes the ids transformers' tokenizer gives,
//! computes the prompt's logits within 1e-4, and writes the same 24 greedy tokens and text
//! as transformers' `generate`, streamed a piece per step; its quality on the operator's
//! text (bits per byte, perplexity) is transformers' within 1e-4. A prompt past the context is
//! refused naming `generate.prompt_text`. Needs a Python with torch, transformers and
//! tokenizers: `GRADLESS_PYTHON` (scripts/test.sh points it at the venv).

use engine::models::decoder::{KvCache, Logits};
use engine::models::Model;
use engine::trace::Probe;
use protocol::{KvCacheKind, ModelId, RunSpec};
use tch::{Device, Tensor};

fn spec(model: &str, text: &str, new_tokens: u32) -> RunSpec {
    RunSpec {
        model: model.parse().unwrap(),
        batch: 1,
        threads: Some(1),
        device: protocol::DeviceChoice::Cpu,
        input_size: None,
        generate: Some(protocol::GenerateSpec {
            new_tokens,
            cache: KvCacheKind::Dynamic,
            prompt_text: Some(text.into()),
            ..Default::default()
        }),
        ..RunSpec::default()
    }
}

#[test]
fn a_tokenized_checkpoint_writes_what_transformers_writes() {
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        eprintln!("GRADLESS_PYTHON is not set: the transformers comparison was not run");
        return;
    };
    let dir = std::env::temp_dir().join(format!("gradless-hf-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/make_hf_text_decoders.py");
    let status = std::process::Command::new(&python)
        .arg(script)
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("GRADLESS_PYTHON runs");
    assert!(status.success(), "the fixture script failed");
    // The models directory and the hub cache served together, as --models-dir and --hf-cache.
    let loaded = engine::team::load_dirs(&[&dir.join("models"), &dir.join("hub")], None).unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let mut names: Vec<&str> = loaded.decoders.iter().map(|d| d.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["gradless-test/text-llama", "text_llama_sharded", "text_llama_sharded_bf16", "text_qwen3"]);
    for d in &loaded.decoders {
        let t = d.tokenizer().unwrap_or_else(|| panic!("{} has its tokenizer.json", d.name));
        assert_eq!((t.kind.as_str(), t.vocab), ("BPE", 384), "{}", d.name);
        assert_eq!(t.adds_bos, d.name != "text_qwen3", "{}: Llama's tokenizer adds BOS, Qwen's does not", d.name);
        assert!(d.provenance().contains("BPE tokenizer.json"), "{}", d.provenance());
        assert!(!d.random_weights(), "{}", d.name);
    }
    let hub = loaded.decoders.iter().find(|d| d.name.contains('/')).unwrap();
    assert!(hub.provenance().contains("models--gradless-test--text-llama/snapshots/"), "{}", hub.provenance());

    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let text = reference["prompt_text"].as_str().unwrap();
    // The operator's text for the quality measurement (`--quality-text`).
    let config = engine::WorkerConfig {
        lab: engine::LabConfig { quality_text: Some(dir.join("quality.txt")), threads: 1, ..Default::default() },
        catalog: loaded.catalog(),
        ..Default::default()
    };
    let worker = engine::Worker::start(config).expect("worker starts");
    for (name, want) in reference["models"].as_object().unwrap() {
        let ids: Vec<i64> = serde_json::from_value(want["prompt_ids"].clone()).unwrap();
        let tokens: Vec<i64> = serde_json::from_value(want["tokens"].clone()).unwrap();
        let id: ModelId = worker.catalog().parse(name).unwrap();
        // The prompt's logits, every position, against transformers' (fp32).
        {
            let _no_grad = tch::no_grad_guard();
            let model = Model::build(id, Device::Cpu, 0);
            let decoder = model.net.as_decoder().unwrap();
            let prompt = Tensor::from_slice(&ids).view([1, -1]);
            let logits = decoder.forward(&prompt, 0, &mut KvCache::Off, false, Logits::All, &mut Probe::off());
            let theirs: Vec<f32> = serde_json::from_value(want["logits"].clone()).unwrap();
            let theirs = Tensor::from_slice(&theirs).view(logits.size().as_slice());
            let diff = (&logits - &theirs).abs().max().double_value(&[]);
            assert!(diff < 1e-4, "{name}: max |Δlogit| {diff:e}");
        }
        // The generation as the page and the CLI run it: the text encoded by the folder's
        // tokenizer, each step streaming the text its token adds.
        let mut streamed = String::new();
        let r = worker
            .measure(spec(name, text, tokens.len() as u32), |e| {
                if let protocol::Event::Step { step } = e {
                    streamed.push_str(step.text.as_deref().expect("a text model's step carries its text"));
                }
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.spec.input_size, Some(ids.len() as u32), "{name}: the prompt's length is its tokens");
        let g = r.generation.unwrap();
        assert_eq!(g.prompt_tokens[0], ids, "{name}: the prompt is what transformers' tokenizer gives");
        assert_eq!(g.tokens[0], tokens, "{name}: greedy tokens against transformers' generate");
        let written = g.text.expect("a tokenized model's report carries its text");
        assert_eq!(written.prompt, text);
        assert_eq!(written.generated[0], want["text"].as_str().unwrap(), "{name}: decoded as transformers decodes");
        assert_eq!(streamed, written.generated[0], "{name}: the streamed pieces add up to the text");
        assert!(g.weights_source.as_deref().is_some_and(|w| w.contains("tokenizer.json")), "{name}");
        eprintln!("{name}: {} prompt tokens, 24 greedy tokens equal to transformers', text {:?}", ids.len(), written.generated[0]);
    }
    // The page's "same in PyTorch" snippets (the hand-written loop, transformers' generate)
    // run as shown, from the folder and from the hub cache, and print the text Gradless wrote.
    for name in ["text_llama_sharded", "gradless-test/text-llama"] {
        let mut checked = worker.check(spec(name, text, 24)).unwrap().spec().clone();
        checked.threads = None;
        let r = worker.measure(checked.clone(), |_| {}).unwrap();
        let written = r.generation.unwrap().text.unwrap().generated[0].clone();
        for (how, script) in [("loop", protocol::python_generate_loop(&checked)), ("generate()", protocol::python_generate_hf(&checked))] {
            let out = std::process::Command::new(&python)
                .args(["-c", &script])
                .current_dir(&dir)
                .env("HF_HUB_CACHE", dir.join("hub"))
                .output()
                .expect("GRADLESS_PYTHON runs");
            let printed = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{name} {how}: {}\n{script}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(printed.trim_end_matches('\n'), format!("{text}{written}"), "{name}: the {how} snippet prints Gradless's text");
        }
    }
    // Quality on the operator's text: bits per byte and perplexity of the fp32 model as
    // transformers computes them with the same framing, within 1e-4; every setting a row.
    for (name, want) in reference["models"].as_object().unwrap() {
        let mut q = spec(name, text, 2);
        q.generate.as_mut().unwrap().quality = true;
        // What the server says before the run (GET /api/quality-plan) is what it then scores:
        // every row it measures, the tokens each scores, the text.
        let plan = worker.quality_plan(q.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let r = worker.measure(q, |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
        let quality = r.generation.unwrap().quality.expect("quality was asked");
        assert_eq!(plan.settings as usize, quality.rows.len(), "{name}: {plan:?}");
        assert_eq!(Some(plan.tokens), quality.tokens, "{name}: {plan:?}");
        assert_eq!((plan.text_bytes, plan.text.as_str()), (quality.bytes, quality.text.as_str()), "{name}");
        assert_eq!(quality.tokens, want["quality_tokens"].as_u64(), "{name}: the tokens its tokenizer makes of the text");
        assert_eq!(quality.bytes, want["quality_bytes"].as_u64().unwrap());
        assert!(quality.text.contains("quality.txt") && quality.unigram_bits_per_byte.is_none(), "{}", quality.text);
        let base = quality.baseline().expect("the fp32 row");
        let theirs = want["bits_per_byte"].as_f64().unwrap();
        assert!((base.bits_per_byte - theirs).abs() < 1e-4, "{name}: bits per byte {} against transformers' {theirs}", base.bits_per_byte);
        let ppl = want["perplexity"].as_f64().unwrap();
        let ours = base.perplexity.expect("a tokenized model's perplexity");
        assert!((ours / ppl - 1.0).abs() < 1e-4, "{name}: perplexity {ours} against {ppl}");
        assert!(quality.rows.len() >= 8 && quality.rows.iter().all(|r| r.bits_per_byte.is_finite() && r.perplexity.is_some()));
        eprintln!("{name}: {:.6} bits per byte (transformers {theirs:.6}), perplexity {ours:.2}, {} rows", base.bits_per_byte, quality.rows.len());
    }
    // The prompt cap counts tokens: a text past the context is refused naming the field.
    let long = "def forward(self, x): return x\n".repeat(40);
    let e = worker.measure(spec("text_llama_sharded", &long, 24), |_| {}).unwrap_err();
    assert!(e.to_string().contains("generate.prompt_text") && e.to_string().contains("tokens"), "{e}");
    // A model without a tokenizer still refuses text, naming the field.
    let e = worker.check(spec(protocol::decoder::CPU_PRESET, text, 8)).unwrap_err();
    assert_eq!(e.field, "generate.prompt_text");
    let _ = std::fs::remove_dir_all(&dir);
}
