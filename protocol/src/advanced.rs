//! The settings beyond the five switches (the Lab's "Advanced" section): the weights'
//! dtype, the input's memory format, where the input comes from each iteration, and the
//! CUDA-only switches (TF32, `cudnn.benchmark`, CUDA graphs). They travel in a spec as one
//! `advanced` object that is left out of the JSON while every field is at its default, so
//! specs and records from before these settings read (and serialise) exactly as they did.

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantArray, VariantNames};

use crate::{DeviceKind, ModelId, SpecError};

/// The dtype the weights are stored in: fp32 (PyTorch's default), or cast once with
/// `model.half()` / `model.to(torch.bfloat16)` (the input is cast the same way). Unlike
/// autocast, which keeps fp32 weights and casts them inside every call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum WeightsDtype {
    #[default]
    Fp32,
    Fp16,
    Bf16,
}

/// A tensor's element type, as a run stores its weights or its KV cache: what admission
/// counts before a run ([`Element::bytes`]) and what the engine allocates (its one map to
/// libtorch's kinds is held to these bytes by a test).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Element {
    F32,
    F16,
    Bf16,
    /// fp8 e4m3 (a KV cache's, with a per-tensor scale).
    F8E4m3,
}

impl Element {
    pub const ALL: [Element; 4] = [Element::F32, Element::F16, Element::Bf16, Element::F8E4m3];

    pub fn bytes(self) -> u64 {
        match self {
            Element::F32 => 4,
            Element::F16 | Element::Bf16 => 2,
            Element::F8E4m3 => 1,
        }
    }

    /// Its name as the pages say it: "fp32", "fp8 e4m3".
    pub fn name(self) -> &'static str {
        match self {
            Element::F32 => "fp32",
            Element::F16 => "fp16",
            Element::Bf16 => "bf16",
            Element::F8E4m3 => "fp8 e4m3",
        }
    }
}

impl WeightsDtype {
    /// What the weights (and the activations, cast with them) are stored as.
    pub fn element(self) -> Element {
        match self {
            WeightsDtype::Fp32 => Element::F32,
            WeightsDtype::Fp16 => Element::F16,
            WeightsDtype::Bf16 => Element::Bf16,
        }
    }
}

/// The memory format of the input and the convolution weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum MemoryFormat {
    /// NCHW, PyTorch's default (`torch.contiguous_format`).
    #[default]
    Contiguous,
    /// NHWC strides (`torch.channels_last`): the model and the input converted with
    /// `.to(memory_format=torch.channels_last)`. Convolution models only.
    ChannelsLast,
}

/// Where the input is at the start of each timed iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, EnumString, IntoStaticStr, VariantArray, VariantNames)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = crate::words::unknown::<Self>)]
pub enum InputSource {
    /// Already where the model runs: no copy is timed.
    #[default]
    Device,
    /// Copied each iteration, inside the timing, from ordinary (pageable) host memory.
    Pageable,
    /// Copied each iteration from pinned (page-locked) host memory with
    /// `non_blocking=True`. CUDA only: pinned memory is allocated through the CUDA driver so
    /// the GPU's DMA engine can read it directly; a CPU run has no copy for it to speed up.
    Pinned,
}

/// The advanced settings of a run. Every default is PyTorch's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Advanced {
    /// The weights' dtype: `dtype` in the JSON, the URL and the CLI (`weights` in records
    /// and links written before it had one name: still read).
    #[serde(rename = "dtype", alias = "weights")]
    pub weights: WeightsDtype,
    pub memory_format: MemoryFormat,
    pub input_source: InputSource,
    /// CUDA: `torch.backends.cuda.matmul.allow_tf32` and `torch.backends.cudnn.allow_tf32`
    /// both on (PyTorch's defaults: off for matmuls, on for cuDNN convolutions); off here
    /// means both off, so fp32 is fp32.
    pub tf32: bool,
    /// CUDA: `torch.backends.cudnn.benchmark = True` (pick each convolution's fastest
    /// algorithm per input shape, on first sight of that shape).
    pub cudnn_benchmark: bool,
    /// CUDA: capture the forward pass once as a CUDA graph and replay it each iteration.
    pub cuda_graph: bool,
    /// The forward model compiled ahead of time by AOTInductor (`torch.export` and
    /// `aoti_compile_and_package` in the venv's Python, run from libtorch), its passes
    /// measured beside the eager model's (`compiled` in the report).
    pub compiled: bool,
}

impl Advanced {
    pub fn is_default(&self) -> bool {
        *self == Advanced::default()
    }

    /// The CUDA-only switches that are on, by name.
    pub fn cuda_only(&self) -> Vec<&'static str> {
        [
            (self.tf32, "tf32"),
            (self.cudnn_benchmark, "cudnn_benchmark"),
            (self.cuda_graph, "cuda_graph"),
            (self.input_source == InputSource::Pinned, "input_source"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }

    /// The checks that need no device: channels_last needs a convolution model.
    pub fn check(&self, model: ModelId) -> Result<(), SpecError> {
        if self.memory_format == MemoryFormat::ChannelsLast && !model.is_conv() {
            return Err(SpecError {
                field: "advanced.memory_format".into(),
                message: format!(
                    "channels_last is a layout for 4-D image tensors and convolutions; {} has none (use resnet18, resnet50 or mobilenet_v2)",
                    model
                ),
            });
        }
        if self.compiled {
            let refuse = |message: String| Err(SpecError { field: "advanced.compiled".into(), message });
            match model {
                ModelId::TinyMlp | ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 | ModelId::Transformer => {}
                ModelId::Team(m) if m.sidecar.source.is_some() => {}
                _ => return refuse(format!("{model} cannot be compiled here: AOTInductor compiles the built-in forward models and team models whose sidecar names their Python `source` (bench/export_model.py writes it)")),
            }
            if self.weights != WeightsDtype::Fp32 || self.memory_format != MemoryFormat::Contiguous || self.cuda_graph || self.input_source != InputSource::Device {
                return refuse("a compiled model runs as it was exported: fp32 weights, contiguous, input on the device, no CUDA graph of Gradless's around it".into());
            }
        }
        if self.cuda_graph && self.input_source != InputSource::Device {
            return Err(SpecError {
                field: "advanced.cuda_graph".into(),
                message: "a CUDA graph replays fixed device buffers; with it the input must already be on the device".into(),
            });
        }
        Ok(())
    }

    /// Why a setting cannot run on `device`, by field; `None` when it can.
    pub fn unsupported_on(&self, device: DeviceKind) -> Option<SpecError> {
        if device == DeviceKind::Cuda {
            return None;
        }
        let name = self.cuda_only().into_iter().next()?;
        Some(SpecError {
            field: format!("advanced.{name}"),
            message: format!("{name} cannot run on the CPU: {}", cpu_reason(name)),
        })
    }
}

/// Why a CUDA-only setting means nothing on a CPU.
pub fn cpu_reason(name: &str) -> &'static str {
    match name {
        "tf32" => "this setting switches TF32, a tensor-core math mode of NVIDIA GPUs from Ampere on, in cuBLAS and cuDNN, which run on NVIDIA GPUs only (a CPU's fp32 matmuls reach a TF32 path only through oneDNN's own precision setting, on CPUs with AMX-FP16)",
        "cudnn_benchmark" => "it selects among cuDNN's convolution algorithms, and cuDNN runs on NVIDIA GPUs only",
        "cuda_graph" => "a CUDA graph records GPU kernel launches to replay them without the CPU's launch overhead; a CPU executes ops directly",
        "input_source" => "pinned (page-locked) host memory is allocated through the CUDA driver so a GPU can copy from it by DMA, asynchronously; a CPU run reads the input where it is, with no device copy to speed up (libtorch cannot pin memory without CUDA)",
        _ => "it is a CUDA setting",
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunSpec;

    #[test]
    fn default_advanced_settings_stay_out_of_the_json() {
        let json = serde_json::to_string(&RunSpec::default()).unwrap();
        assert!(!json.contains("advanced"), "{json}");
        let spec: RunSpec =
            serde_json::from_str(r#"{"advanced": {"dtype": "fp16", "memory_format": "channels_last"}}"#)
                .unwrap();
        assert_eq!(spec.advanced.weights, WeightsDtype::Fp16);
        // Records written before the dtype had its own name still read.
        let old: RunSpec = serde_json::from_str(r#"{"advanced": {"weights": "fp16", "memory_format": "channels_last"}}"#).unwrap();
        assert_eq!(old, spec);
        let back: RunSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
        assert!(serde_json::from_str::<RunSpec>(r#"{"advanced": {"wieghts": "fp16"}}"#).is_err());
    }

    #[test]
    fn words_round_trip_and_checks_name_the_field() {
        for &w in crate::words::all::<WeightsDtype>() {
            assert_eq!(w.as_str().parse::<WeightsDtype>(), Ok(w));
        }
        assert!("nhwc".parse::<MemoryFormat>().unwrap_err().contains("channels_last"));
        let cl = Advanced {
            memory_format: MemoryFormat::ChannelsLast,
            ..Advanced::default()
        };
        assert_eq!(cl.check(ModelId::TinyMlp).unwrap_err().field, "advanced.memory_format");
        assert!(cl.check(ModelId::Resnet18).is_ok());
        let pinned = Advanced {
            input_source: InputSource::Pinned,
            ..Advanced::default()
        };
        let e = pinned.unsupported_on(DeviceKind::Cpu).unwrap();
        assert!(e.field == "advanced.input_source" && e.message.contains("page-locked"));
        assert!(pinned.unsupported_on(DeviceKind::Cuda).is_none());
        assert!(Advanced::default().unsupported_on(DeviceKind::Cpu).is_none());
    }
}
