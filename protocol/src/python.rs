//! The PyTorch code that corresponds to a [`RunSpec`], so a reader takes the lesson back to
//! their own code. The page, the CLI and the exports all show this one rendering.

use crate::{
    Autocast, DeviceChoice, GradMode, InputSource, MemoryFormat, ModelId, RunSpec, WeightsDtype,
};

/// The Python snippet for `spec`: model mode, grad context and autocast, as a reader would
/// write them.
pub fn python_snippet(spec: &RunSpec) -> String {
    if spec.generate.is_some() {
        return crate::python_generate::hand_written_loop(spec);
    }
    let device = match spec.device {
        DeviceChoice::Cuda => "\"cuda\"".to_string(),
        DeviceChoice::Cpu => "\"cpu\"".to_string(),
        DeviceChoice::Auto => "\"cuda\" if torch.cuda.is_available() else \"cpu\"".to_string(),
    };
    let size = spec.resolved_input_size();
    let input = match spec.model {
        ModelId::TinyMlp => format!("torch.randn({}, {size}, device=device)", spec.batch),
        ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 => {
            format!(
                "torch.randn({}, 3, {size}, {size}, device=device)",
                spec.batch
            )
        }
        ModelId::Transformer => format!("torch.randn({}, {size}, 256, device=device)", spec.batch),
        ModelId::Team(_) | ModelId::Named(_) => team_inputs(spec),
        ModelId::Decoder(_) => format!(
            "torch.randint(0, {}, ({}, {size}), device=device)  # token ids",
            spec.model.decoder().map_or(1, |d| d.config.vocab_size),
            spec.batch
        ),
    };
    let mut out = format!("# {}\n", crate::settings::command_line(crate::settings::SETTINGS, spec));
    out.push_str("import torch\n");
    if spec.model.is_image() {
        out.push_str("import torchvision\n");
    } else if spec.model.is_decoder() {
        out.push_str("import transformers\n");
    } else {
        out.push_str("from torch import nn\n");
    }
    out.push_str(&format!("\ndevice = {device}\n"));
    out.push_str(&crate::python_generate::big_weights_note(spec).unwrap_or_default());
    if spec.model == ModelId::TinyMlp {
        out.push_str(&format!("features = {size}\n"));
    }
    out.push_str(&format!(
        "model = {}.to(device)\n",
        spec.model.python_constructor()
    ));
    out.push_str(if spec.eval {
        "model.eval()   # Dropout off, BatchNorm uses its running statistics\n"
    } else {
        "model.train()  # Dropout on, BatchNorm uses (and updates) batch statistics\n"
    });
    let adv = &spec.advanced;
    // A team model may take several inputs (a tuple `x`, called as `model(*x)`), and only
    // floating-point ones are cast with the weights: token ids and masks keep their dtype.
    let team = spec.model.team();
    let many = team.as_ref().is_some_and(|m| m.sidecar.inputs.len() > 1);
    let floating = !spec.model.is_decoder()
        && team.as_ref().is_none_or(|m| m.sidecar.inputs.iter().any(|i| i.dtype.is_floating_point()));
    let on_host = adv.input_source != InputSource::Device;
    let x = if on_host { "x_host" } else { "x" };
    let input = if on_host {
        input.replace(", device=device", "")
    } else {
        input
    };
    match adv.weights {
        WeightsDtype::Fp32 => {}
        WeightsDtype::Fp16 => out.push_str("model = model.half()  # weights stored in fp16, cast once (autocast would cast them every call)\n"),
        WeightsDtype::Bf16 => out.push_str("model = model.to(torch.bfloat16)  # weights stored in bf16, cast once\n"),
    }
    let channels_last = adv.memory_format == MemoryFormat::ChannelsLast;
    if channels_last {
        out.push_str("model = model.to(memory_format=torch.channels_last)  # NHWC conv weights\n");
    }
    if spec.device == DeviceChoice::Cuda || adv.tf32 {
        let on = if adv.tf32 { "True" } else { "False" };
        out.push_str(&format!("torch.backends.cuda.matmul.allow_tf32 = {on}  # PyTorch's default: False\n"));
        out.push_str(&format!("torch.backends.cudnn.allow_tf32 = {on}  # PyTorch's default: True\n"));
    }
    if adv.cudnn_benchmark {
        out.push_str("torch.backends.cudnn.benchmark = True  # autotune each conv per input shape\n");
    }
    out.push_str(&format!("{x} = {input}\n"));
    let cast = match adv.weights {
        WeightsDtype::Fp32 => None,
        WeightsDtype::Fp16 => Some("half()"),
        WeightsDtype::Bf16 => Some("to(torch.bfloat16)"),
    };
    match cast {
        Some(cast) if many && floating => out.push_str(&format!(
            "{x} = tuple(t.{cast} if t.is_floating_point() else t for t in {x})\n"
        )),
        Some(cast) if floating => out.push_str(&format!("{x} = {x}.{cast}\n")),
        _ => {}
    }
    if channels_last {
        out.push_str(&format!("{x} = {x}.to(memory_format=torch.channels_last)\n"));
    }
    if adv.input_source == InputSource::Pinned {
        let pin = if many {
            "tuple(t.pin_memory() for t in x_host)"
        } else {
            "x_host.pin_memory()"
        };
        out.push_str(&format!(
            "x_host = {pin}  # page-locked: the GPU copies it by DMA, asynchronously\n"
        ));
    }
    if adv.compiled {
        // As Gradless compiles it: exported with a dynamic batch dimension, compiled by
        // AOTInductor into a package, the package loaded in place of the module. A team
        // model is exported from its Python definition (the sidecar's source), filled with
        // the TorchScript file's weights: torch.export cannot trace TorchScript.
        let (mut args, mut dynamic) = ("(x,)", "({0: batch},)");
        if let Some(m) = &team {
            // The source is parsed, and each input's batch axis found, by the Python itself.
            out.push_str(&format!(
                "\n# torch.export traces Python, not TorchScript: the module's definition (its sidecar's source), with the TorchScript file's weights\nimport importlib.util, json\nfile, name = \"{}\".split(\":\")\nif file == \"torchvision\":\n    import torchvision\n    eager = getattr(torchvision.models, name)()\nelse:\n    spec = importlib.util.spec_from_file_location(\"team_source\", file)\n    source = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(source)\n    eager = getattr(source, name)()\neager.load_state_dict(model.state_dict())\nmodel = eager.eval().to(device)\naxes = [i[\"shape\"].index(\"batch\") for i in json.load(open(\"{}.json\"))[\"inputs\"]]\n",
                m.sidecar.source.as_deref().unwrap_or(":"),
                m.name
            ));
            args = if many { "x" } else { "(x,)" };
            dynamic = "tuple({a: batch} for a in axes)";
        }
        out.push_str(&format!(
            "\n# compiled ahead of time (AOTInductor), as Gradless does: once, then every call runs the package\ntorch.set_num_threads({})  # Inductor writes the thread count into its CPU kernels\nbatch = torch.export.Dim(\"batch\", min={}, max={})\nep = torch.export.export(model, {args}, dynamic_shapes={dynamic})\ntorch._inductor.aoti_compile_and_package(ep, package_path=\"model.pt2\")\nmodel = torch._inductor.aoti_load_package(\"model.pt2\")  # checks none of its inputs: keep batches in range\n",
            spec.threads.unwrap_or(1),
            crate::compiled_batch_range(spec.batch).0,
            crate::compiled_batch_range(spec.batch).1
        ));
    }
    out.push('\n');
    let pass = forward_pass(spec);
    if !adv.cuda_graph {
        out.push_str(&pass);
        return out;
    }
    // The pass, warmed up on a side stream and captured once; each iteration replays it.
    let indented: String = pass.lines().map(|l| format!("    {l}\n")).collect();
    out.push_str("g = torch.cuda.CUDAGraph()  # capture one pass, replay it every iteration\n");
    out.push_str("side = torch.cuda.Stream()\nside.wait_stream(torch.cuda.current_stream())\n");
    out.push_str("with torch.cuda.stream(side):  # warm-up off the default stream: lazy init outside the capture\n");
    out.push_str(&indented);
    out.push_str("torch.cuda.current_stream().wait_stream(side)\n");
    out.push_str("with torch.cuda.graph(g):  # y lives in the graph's private memory pool\n");
    out.push_str(&indented);
    out.push_str("g.replay()  # each iteration: relaunches the captured kernels; y holds the result\n");
    out
}

/// One forward pass inside the grad mode and autocast region of `spec`, from column 0.
fn forward_pass(spec: &RunSpec) -> String {
    let adv = &spec.advanced;
    // Several inputs are a tuple, copied one by one and passed as `model(*x)`.
    let many = spec
        .model
        .team()
        .is_some_and(|m| m.sidecar.inputs.len() > 1);
    let mut out = String::new();
    let mut indent = String::new();
    match spec.grad {
        GradMode::Enabled => out.push_str(
            "# autograd is on: every op records the graph and keeps activations for backward\n",
        ),
        GradMode::NoGrad => {
            out.push_str("with torch.no_grad():  # no graph, activations freed as soon as used\n");
            indent.push_str("    ");
        }
        GradMode::InferenceMode => {
            out.push_str("with torch.inference_mode():  # no_grad, and no version counters or view tracking\n");
            indent.push_str("    ");
        }
    }
    if spec.autocast != Autocast::Off {
        let dtype = if spec.autocast == Autocast::Fp16 {
            "torch.float16"
        } else {
            "torch.bfloat16"
        };
        out.push_str(&format!(
            "{indent}with torch.autocast(device_type=torch.device(device).type, dtype={dtype}):\n"
        ));
        indent.push_str("    ");
    }
    let copy = match adv.input_source {
        InputSource::Device => None,
        InputSource::Pageable => Some((
            "to(device)",
            "  # each iteration: a copy from pageable memory",
        )),
        InputSource::Pinned => Some(("to(device, non_blocking=True)", "  # each iteration")),
    };
    match copy {
        Some((to, note)) if many => out.push_str(&format!(
            "{indent}x = tuple(t.{to} for t in x_host){note}\n"
        )),
        Some((to, note)) => out.push_str(&format!("{indent}x = x_host.{to}{note}\n")),
        None => {}
    }
    let call = if many { "model(*x)" } else { "model(x)" };
    out.push_str(&format!("{indent}y = {call}\n"));
    out
}

/// A team model's inputs from its sidecar: one tensor, or a tuple of them in order (each
/// line named by its sidecar name), with the sidecar's values: `randn`, `randint(0, high)`
/// or `full(fill)`.
fn team_inputs(spec: &RunSpec) -> String {
    let Some(m) = spec.model.team() else {
        return format!("None  # {} is not served here", spec.model);
    };
    let shapes = m.sidecar.shapes(spec.batch, spec.resolved_input_size());
    let tensors: Vec<(String, Option<&String>)> = m
        .sidecar
        .inputs
        .iter()
        .zip(shapes)
        .map(|(input, shape)| {
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            let dims = dims.join(", ");
            let dtype = input.dtype.torch_name();
            let tensor = match (input.high, input.fill) {
                (Some(high), _) => format!(
                    "torch.randint(0, {high}, ({dims},), dtype=torch.{dtype}, device=device)"
                ),
                (None, Some(fill)) => format!(
                    "torch.full(({dims},), {}, dtype=torch.{dtype}, device=device)",
                    crate::team::fill_text(input.dtype, fill)
                ),
                (None, None) => format!("torch.randn({dims}, dtype=torch.{dtype}, device=device)"),
            };
            (tensor, input.name.as_ref())
        })
        .collect();
    if tensors.len() == 1 {
        return tensors.into_iter().next().map(|t| t.0).unwrap_or_default();
    }
    let mut out = String::from("(\n");
    for (tensor, name) in tensors {
        let note = name.map(|n| format!("  # {n}")).unwrap_or_default();
        out.push_str(&format!("    {tensor},{note}\n"));
    }
    out.push(')');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder too big for a laptop says how much its weights take, in the dtype built
    /// and the dtype kept (from the config's own parameter count); a small one says nothing.
    #[test]
    fn a_big_decoders_snippet_says_what_its_weights_take() {
        let big: ModelId = "llama_3_1_8b".parse().unwrap();
        let params = big.decoder().unwrap().config.parameters();
        for generate in [None, Some(crate::GenerateSpec { new_tokens: 4, ..Default::default() })] {
            let spec = RunSpec { model: big, generate: generate.clone(), ..Default::default() };
            let s = python_snippet(&spec);
            assert!(s.contains(&format!("{} of fp32 weights", crate::format_bytes(params * 4))), "{s}");
            let bf16 = RunSpec {
                advanced: crate::Advanced { weights: WeightsDtype::Bf16, ..Default::default() },
                ..spec
            };
            assert!(python_snippet(&bf16).contains(&format!("then {} once cast to bf16", crate::format_bytes(params * 2))));
        }
        let small = RunSpec { model: "llama_tiny".parse().unwrap(), ..Default::default() };
        assert!(!python_snippet(&small).contains("Note:"));
        assert!(!python_snippet(&RunSpec::default()).contains("Note:"));
    }

    #[test]
    fn snippet_follows_every_setting() {
        let spec = RunSpec {
            model: ModelId::Resnet50,
            eval: false,
            grad: GradMode::InferenceMode,
            autocast: Autocast::Bf16,
            batch: 7,
            ..Default::default()
        };
        let s = python_snippet(&spec);
        assert!(s.contains("model.train()"));
        assert!(s.contains("torch.inference_mode()"));
        assert!(s.contains("torch.bfloat16"));
        assert!(s.contains("torch.randn(7, 3, 224, 224"));
        assert!(s.contains("resnet50"));

        // Every name the snippet uses is defined in it: it runs as copied.
        let mlp = python_snippet(&RunSpec::default());
        assert!(mlp.contains("features = 512") && mlp.contains("nn.BatchNorm1d(512)"));
        assert!(mlp.contains("from torch import nn"));
        let t = python_snippet(&RunSpec {
            model: ModelId::Transformer,
            ..Default::default()
        });
        assert!(t.contains("nn.TransformerEncoderLayer(256, 4, 1024, 0.1, batch_first=True)"));

        // A team model: the same file, loaded with torch.jit.load, on its sidecar's input.
        let sidecar: crate::team::Sidecar = serde_json::from_str(
            r#"{"display_name": "Tagger", "inputs": [{"shape": ["batch", "size"], "dtype": "int64", "high": 30000}],
                "size": {"meaning": "tokens", "default": 64, "max": 512}}"#,
        )
        .unwrap();
        let effect = crate::team::TrainingEffect {
            random_in_train: true,
            train_differs_from_eval: true,
        };
        // Two inputs: ids and a mask of ones, passed as `model(*x)`; only floating-point
        // inputs follow the weights' dtype.
        let two: crate::team::Sidecar = serde_json::from_str(
            r#"{"display_name": "Tagger with mask", "inputs": [
                  {"name": "ids", "shape": ["batch", "size"], "dtype": "int64", "high": 1000},
                  {"name": "mask", "shape": ["batch", "size"], "dtype": "float32", "fill": 1}],
                "size": {"meaning": "tokens", "default": 16, "max": 512}}"#,
        )
        .unwrap();
        two.validate().unwrap();
        let catalog = crate::Catalog::new(
            vec![
                crate::team::TeamModel::new("snippet_tagger".into(), sidecar, 1000, effect),
                crate::team::TeamModel::new("snippet_masked".into(), two, 1000, effect),
            ],
            vec![],
            vec![],
        );
        let masked = python_snippet(&RunSpec {
            model: catalog.parse("snippet_masked").unwrap(),
            batch: 3,
            advanced: crate::Advanced {
                weights: WeightsDtype::Bf16,
                input_source: InputSource::Pageable,
                ..Default::default()
            },
            ..Default::default()
        });
        for line in [
            "    torch.randint(0, 1000, (3, 16,), dtype=torch.int64),  # ids\n",
            "    torch.full((3, 16,), 1.0, dtype=torch.float32),  # mask\n",
            "x_host = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in x_host)\n",
            "x = tuple(t.to(device) for t in x_host)",
            "y = model(*x)\n",
        ] {
            assert!(masked.contains(line), "{line} missing from:\n{masked}");
        }
        // A single integer input is not cast with the weights.
        let ids_bf16 = python_snippet(&RunSpec {
            model: catalog.parse("snippet_tagger").unwrap(),
            advanced: crate::Advanced {
                weights: WeightsDtype::Bf16,
                ..Default::default()
            },
            ..Default::default()
        });
        assert!(!ids_bf16.contains("x = x.to(torch.bfloat16)"), "{ids_bf16}");
        let team = python_snippet(&RunSpec {
            model: catalog.parse("snippet_tagger").unwrap(),
            batch: 3,
            ..Default::default()
        });
        assert!(
            team.contains("torch.jit.load(\"snippet_tagger.pt\", map_location=device)"),
            "{team}"
        );
        assert!(
            team.contains("torch.randint(0, 30000, (3, 64,), dtype=torch.int64"),
            "{team}"
        );

        let plain = python_snippet(&RunSpec::default());
        assert!(plain.contains("model.eval()"));
        assert!(!plain.contains("no_grad") && !plain.contains("autocast("));
        assert!(!plain.contains("allow_tf32") && !plain.contains("x_host"));

        let adv = python_snippet(&RunSpec {
            model: ModelId::Resnet18,
            device: DeviceChoice::Cuda,
            advanced: crate::Advanced {
                weights: WeightsDtype::Fp16,
                memory_format: MemoryFormat::ChannelsLast,
                input_source: InputSource::Pinned,
                tf32: true,
                cudnn_benchmark: true,
                cuda_graph: false,
                compiled: false,
            },
            ..Default::default()
        });
        for line in [
            "model = model.half()",
            "model = model.to(memory_format=torch.channels_last)",
            "torch.backends.cuda.matmul.allow_tf32 = True",
            "torch.backends.cudnn.benchmark = True",
            "x_host = torch.randn(32, 3, 224, 224)\n",
            "x_host = x_host.half()",
            "x_host = x_host.pin_memory()",
            "x = x_host.to(device, non_blocking=True)",
        ] {
            assert!(adv.contains(line), "{line} missing from:\n{adv}");
        }

        // A CUDA graph: the same pass warmed up on a side stream, captured, replayed.
        let graph = python_snippet(&RunSpec {
            model: ModelId::Resnet18,
            device: DeviceChoice::Cuda,
            grad: GradMode::InferenceMode,
            advanced: crate::Advanced { cuda_graph: true, ..Default::default() },
            ..Default::default()
        });
        println!("{graph}");
        for line in [
            "g = torch.cuda.CUDAGraph()",
            "with torch.cuda.stream(side):",
            "    with torch.inference_mode():",
            "with torch.cuda.graph(g):",
            "        y = model(x)",
            "g.replay()",
        ] {
            assert!(graph.contains(line), "{line} missing from:\n{graph}");
        }
        assert_eq!(graph.matches("y = model(x)").count(), 2, "{graph}");
    }
}
