//! The PyTorch code that corresponds to a [`RunSpec`], so a reader takes the lesson back to
//! their own code. The page, the CLI and the exports all show this one rendering.

use crate::{
    Autocast, DeviceChoice, GradMode, InputSource, MemoryFormat, ModelId, RunSpec, WeightsDtype,
};

/// The Python snippet for `spec`: model mode, grad context and autocast, as a reader would
/// write them.
pub fn python_snippet(spec: &RunSpec) -> String {
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
        ModelId::Team(_) => team_inputs(spec),
    };
    let mut out = String::new();
    out.push_str("import torch\n");
    if spec.model.is_image() {
        out.push_str("import torchvision\n");
    } else {
        out.push_str("from torch import nn\n");
    }
    out.push_str(&format!("\ndevice = {device}\n"));
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
    match adv.weights {
        WeightsDtype::Fp32 => {}
        WeightsDtype::Fp16 => out.push_str(&format!("{x} = {x}.half()\n")),
        WeightsDtype::Bf16 => out.push_str(&format!("{x} = {x}.to(torch.bfloat16)\n")),
    }
    if channels_last {
        out.push_str(&format!("{x} = {x}.to(memory_format=torch.channels_last)\n"));
    }
    if adv.input_source == InputSource::Pinned {
        out.push_str("x_host = x_host.pin_memory()  # page-locked: the GPU copies it by DMA, asynchronously\n");
    }
    out.push('\n');

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
    match adv.input_source {
        InputSource::Device => {}
        InputSource::Pageable => out.push_str(&format!(
            "{indent}x = x_host.to(device)  # each iteration: a copy from pageable memory\n"
        )),
        InputSource::Pinned => out.push_str(&format!(
            "{indent}x = x_host.to(device, non_blocking=True)  # each iteration\n"
        )),
    }
    let call = match spec.model.team() {
        Some(m) if m.sidecar.inputs.len() > 1 => "model(*x)",
        _ => "model(x)",
    };
    out.push_str(&format!("{indent}y = {call}\n"));
    out
}

/// A team model's inputs from its sidecar: one tensor, or a tuple of them in order.
fn team_inputs(spec: &RunSpec) -> String {
    let Some(m) = spec.model.team() else {
        return format!("None  # {} is not served here", spec.model);
    };
    let shapes = m.sidecar.shapes(spec.batch, spec.resolved_input_size());
    let tensors: Vec<String> = m
        .sidecar
        .inputs
        .iter()
        .zip(shapes)
        .map(|(input, shape)| {
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            let dtype = input.dtype.torch_name();
            match input.high {
                Some(high) => format!(
                    "torch.randint(0, {high}, ({},), dtype=torch.{dtype}, device=device)",
                    dims.join(", ")
                ),
                None => format!(
                    "torch.randn({}, dtype=torch.{dtype}, device=device)",
                    dims.join(", ")
                ),
            }
        })
        .collect();
    match tensors.len() {
        1 => tensors.into_iter().next().unwrap_or_default(),
        _ => format!("({})", tensors.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        crate::team::register(vec![crate::team::TeamModel::new(
            "snippet_tagger".into(),
            sidecar,
            1000,
            effect,
        )]);
        let team = python_snippet(&RunSpec {
            model: "snippet_tagger".parse().unwrap(),
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
    }
}
