//! Every model's Python snippet runs as copied, with PyTorch, for every grad mode: the first
//! thing a newcomer copies must not fail with a NameError. Needs a Python with torch and
//! torchvision: `GRADLESS_PYTHON` (scripts/test.sh points it at the project's venv).

use protocol::{python_snippet, GradMode, ModelId, RunSpec};

/// Runs each snippet in a fresh namespace of one Python process (importing torch once) and
/// prints the output's batch size, or the error.
const RUNNER: &str = r#"
import json, sys, traceback
for name, code in json.load(sys.stdin):
    ns = {}
    try:
        exec(compile(code, name, "exec"), ns)
        print(name, "ok", tuple(ns["y"].shape)[0])
    except Exception:
        print(name, "failed:", traceback.format_exc().replace("\n", " | "))
"#;

#[test]
fn every_model_snippet_runs_with_pytorch() {
    let Some(python) = std::env::var_os("GRADLESS_PYTHON") else {
        // scripts/test.sh always sets it; a bare `cargo test` without the venv says so.
        eprintln!("GRADLESS_PYTHON is not set: the snippets were not run");
        return;
    };
    let mut snippets = vec![];
    for model in ModelId::ALL {
        for grad in GradMode::ALL {
            let spec = RunSpec {
                model,
                grad,
                eval: grad != GradMode::Enabled,
                device: protocol::DeviceChoice::Cpu,
                batch: 2,
                // Small inputs: the point is that the code runs, not how fast.
                input_size: Some(model.input().default.min(64)),
                ..Default::default()
            };
            let name = format!("{}-{}", model.as_str(), grad.as_str());
            snippets.push((name, python_snippet(&spec)));
        }
    }
    // The CPU-meaningful advanced settings, on a convolution model.
    for (name, advanced) in [
        ("fp16-weights", protocol::Advanced { weights: protocol::WeightsDtype::Fp16, ..Default::default() }),
        ("bf16-weights", protocol::Advanced { weights: protocol::WeightsDtype::Bf16, ..Default::default() }),
        ("channels-last", protocol::Advanced { memory_format: protocol::MemoryFormat::ChannelsLast, ..Default::default() }),
        ("pageable", protocol::Advanced { input_source: protocol::InputSource::Pageable, ..Default::default() }),
    ] {
        let spec = RunSpec {
            model: ModelId::Resnet18,
            grad: GradMode::NoGrad,
            device: protocol::DeviceChoice::Cpu,
            batch: 2,
            input_size: Some(64),
            advanced,
            ..Default::default()
        };
        snippets.push((format!("resnet18-{name}"), python_snippet(&spec)));
    }
    // Generation, both forms (a hand-written loop, transformers' generate()), every cache
    // and grad mode, small: the point is that the code runs as copied.
    for &cache in protocol::words::all::<protocol::KvCacheKind>() {
        for grad in GradMode::ALL {
            let spec = RunSpec {
                model: protocol::decoder::CPU_PRESET.parse().unwrap(),
                grad,
                device: protocol::DeviceChoice::Cpu,
                batch: 2,
                input_size: Some(5),
                generate: Some(protocol::GenerateSpec { new_tokens: 3, cache, ..Default::default() }),
                ..Default::default()
            };
            let name = format!("generate-loop-{}-{}", cache.as_str(), grad.as_str());
            snippets.push((name, protocol::python_generate_loop(&spec)));
            let name = format!("generate-hf-{}-{}", cache.as_str(), grad.as_str());
            snippets.push((name, protocol::python_generate_hf(&spec)));
        }
    }
    // Quantized linear layers (int8; int4 at two group sizes), both forms.
    for (weights, group_size) in [
        (protocol::WeightQuant::Int8, None),
        (protocol::WeightQuant::Int4, Some(32)),
        (protocol::WeightQuant::Int4, Some(64)),
    ] {
        let spec = RunSpec {
            model: protocol::decoder::CPU_PRESET.parse().unwrap(),
            grad: GradMode::NoGrad,
            device: protocol::DeviceChoice::Cpu,
            batch: 2,
            input_size: Some(5),
            generate: Some(protocol::GenerateSpec { new_tokens: 3, weights, group_size, ..Default::default() }),
            ..Default::default()
        };
        let tag = format!("{}-{}", weights.as_str(), group_size.unwrap_or(0));
        snippets.push((format!("generate-loop-{tag}"), protocol::python_generate_loop(&spec)));
        snippets.push((format!("generate-hf-{tag}"), protocol::python_generate_hf(&spec)));
    }
    // The KV cache's dtype (bf16, fp16; fp8 is CUDA-only), dynamic and static, both forms.
    for kv_dtype in [protocol::KvDtype::Bf16, protocol::KvDtype::Fp16] {
        for cache in [protocol::KvCacheKind::Dynamic, protocol::KvCacheKind::Static] {
            let spec = RunSpec {
                model: protocol::decoder::CPU_PRESET.parse().unwrap(),
                grad: GradMode::NoGrad,
                device: protocol::DeviceChoice::Cpu,
                batch: 2,
                input_size: Some(5),
                generate: Some(protocol::GenerateSpec { new_tokens: 3, cache, kv_dtype, ..Default::default() }),
                ..Default::default()
            };
            let tag = format!("{}-{}", kv_dtype.as_str(), cache.as_str());
            let (looped, hf) = (protocol::python_generate_loop(&spec), protocol::python_generate_hf(&spec));
            assert!(looped.contains("StoredLayer") && hf.contains("past_key_values=cache"), "{tag}: no cache of the dtype");
            snippets.push((format!("generate-loop-kv-{tag}"), looped));
            snippets.push((format!("generate-hf-kv-{tag}"), hf));
        }
    }
    // The trained byte model, from the repository's folder, on a text prompt whose quote and
    // new line must survive the command line in the first comment and the Python literal.
    for cache in [protocol::KvCacheKind::Dynamic, protocol::KvCacheKind::Off] {
        let spec = RunSpec {
            model: protocol::decoder::TRAINED_PRESET.parse().unwrap(),
            grad: GradMode::NoGrad,
            device: protocol::DeviceChoice::Cpu,
            batch: 2,
            generate: Some(protocol::GenerateSpec {
                new_tokens: 4,
                cache,
                prompt_text: Some("def f(x):\n    return 'é'".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let looped = protocol::python_generate_loop(&spec);
        assert!(looped.lines().next().unwrap().ends_with(r"--prompt-text=$'def f(x):\n    return \'é\''"), "{looped}");
        snippets.push((format!("generate-loop-trained-{}", cache.as_str()), looped));
        snippets.push((format!("generate-hf-trained-{}", cache.as_str()), protocol::python_generate_hf(&spec)));
    }
    let mut child = std::process::Command::new(&python)
        // The repository's root: the trained model's snippets load `models/torch_bytes`.
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .arg("-c")
        .arg(RUNNER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("could not start GRADLESS_PYTHON");
    let input = serde_json::to_vec(&snippets).unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &input).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the runner failed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (name, code) in &snippets {
        let line = stdout
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("{name} printed nothing:\n{stdout}"));
        assert_eq!(
            line,
            format!("{name} ok 2"),
            "the snippet, as the page shows it:\n{code}"
        );
    }
}
