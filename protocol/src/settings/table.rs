//! [`SETTINGS`]: every setting of a run, one row each, in the order addresses, command lines
//! and labels give them. Each row reads and writes its field of the [`RunSpec`] through the
//! struct's own fields ([`Access`]), an enum's words through the enum (strum's derives).

use super::{Access, Kind, OnlyWith, Said, Setting, SettingId, ANY_RUN, BOTH, FORWARD, GEN, GENERATION, LAB, NONE};
use crate::words::words;
use crate::{
    Autocast, DeviceChoice, GenerateSpec, GradMode, InputSource, KvCacheKind, KvDtype, MemoryFormat, RunSpec, WeightQuant,
    WeightsDtype,
};

/// The generation part of `spec`, made when a forward spec had none (a row of a generation
/// is only set on a generation: [`Setting::set`] checks the kind of run first).
pub(super) fn generation(spec: &mut RunSpec) -> &mut GenerateSpec {
    spec.generate.get_or_insert_with(GenerateSpec::default)
}

/// An enum field of the spec (`grad`, `advanced.memory_format`), by its words.
macro_rules! word {
    ($($f:ident).+) => {
        Access::Word { get: |s| Some(s.$($f).+.as_str()), set: |s, w| Ok(s.$($f).+ = w.parse()?) }
    };
}

/// An enum field of the spec's generation.
macro_rules! gen_word {
    ($f:ident) => {
        Access::Word { get: |s| s.generate.as_ref().map(|g| g.$f.as_str()), set: |s, w| Ok(generation(s).$f = w.parse()?) }
    };
}

/// A true/false field of the spec.
macro_rules! flag {
    ($($f:ident).+) => {
        Access::Bool { get: |s| Some(s.$($f).+), set: |s, on| s.$($f).+ = on }
    };
}

/// A true/false field of the spec's generation.
macro_rules! gen_flag {
    ($f:ident) => {
        Access::Bool { get: |s| s.generate.as_ref().map(|g| g.$f), set: |s, on| generation(s).$f = on }
    };
}

/// A whole number the spec always holds (`None`, a number left out, keeps it).
macro_rules! count {
    ($f:ident) => {
        Access::Count { get: |s| Some(s.$f), set: |s, n| if let Some(n) = n { s.$f = n } }
    };
}

/// A row with no pages, no controls, always written, never said: the fields a row sets
/// differently come first (`..ROW`). Its `id` and `field` are placeholders every row sets.
pub const ROW: Setting = Setting {
    id: SettingId::Model,
    access: Access::Bool { get: |_| None, set: |_, _| () },
    key: "",
    flag: "",
    label: "",
    help: "",
    kind: Kind::Switch,
    pages: NONE,
    controls: NONE,
    runs: ANY_RUN,
    quiet: false,
    said: Said::Never,
    only_with: None,
    legacy: None,
    texts: &[],
};

/// Every setting, in the order addresses, command lines and labels give them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        id: SettingId::Model,
        access: Access::Word { get: |s| Some(s.model.as_str()), set: set_model },
        key: "model",
        flag: "model",
        label: "Model",
        help: "A built-in model, a decoder preset or a team model of the server's models directory.",
        kind: Kind::Name(|name| name.parse::<crate::ModelId>().map(|_| ())),
        pages: BOTH,
        ..ROW
    },
    Setting {
        id: SettingId::Device,
        access: word!(device),
        key: "device",
        flag: "device",
        label: "Device",
        help: "auto: CUDA when the server has it, else the CPU.",
        kind: Kind::Choice(words::<DeviceChoice>),
        pages: BOTH,
        ..ROW
    },
    Setting {
        id: SettingId::Eval,
        access: flag!(eval),
        key: "eval",
        flag: "eval",
        label: "Module mode",
        help: "model.eval() or model.train(): dropout (and BatchNorm's statistics) follow it.",
        kind: Kind::Pair { on: "eval", off: "train" },
        pages: BOTH,
        controls: GEN,
        said: Said::Always("{}"),
        texts: &[("1", "model.eval()"), ("0", "model.train()")],
        ..ROW
    },
    Setting {
        id: SettingId::Grad,
        access: word!(grad),
        key: "grad",
        flag: "grad",
        label: "Grad mode",
        help: "How autograd is set around the forward pass.",
        kind: Kind::Choice(words::<GradMode>),
        pages: BOTH,
        controls: GEN,
        said: Said::Always("{}"),
        texts: &[("enabled", "enabled (no context)"), ("no_grad", "torch.no_grad()"), ("inference_mode", "torch.inference_mode()")],
        ..ROW
    },
    Setting {
        id: SettingId::Autocast,
        access: word!(autocast),
        key: "autocast",
        flag: "autocast",
        label: "Autocast",
        help: "Autocast keeps the fp32 weights and casts them as each op needs them; weights cast once (the weights' dtype) move half the bytes per token.",
        kind: Kind::Choice(words::<Autocast>),
        pages: BOTH,
        controls: GEN,
        said: Said::NotDefault("{}"),
        ..ROW
    },
    Setting {
        id: SettingId::Dtype,
        access: word!(advanced.weights),
        key: "dtype",
        flag: "dtype",
        label: "Weights dtype",
        help: "The weights' dtype, cast once when the model is built (model.half(), model.to(torch.bfloat16)); the activations follow it. Decode reads every weight each step, so bytes per weight set its speed.",
        kind: Kind::Choice(words::<WeightsDtype>),
        pages: BOTH,
        controls: GEN,
        quiet: true,
        said: Said::NotDefault("{} weights"),
        legacy: Some("weights"),
        texts: &[("bf16", "bf16 (model.to(torch.bfloat16))"), ("fp16", "fp16 (model.half())")],
        ..ROW
    },
    Setting {
        id: SettingId::MemoryFormat,
        access: word!(advanced.memory_format),
        key: "memory_format",
        flag: "memory-format",
        label: "Memory format",
        help: "contiguous (NCHW) or channels_last (NHWC; convolution models only).",
        kind: Kind::Choice(words::<MemoryFormat>),
        pages: LAB,
        runs: FORWARD,
        quiet: true,
        said: Said::NotDefault("{}"),
        ..ROW
    },
    Setting {
        id: SettingId::InputSource,
        access: word!(advanced.input_source),
        key: "input_source",
        flag: "input-source",
        label: "Input comes from",
        help: "Where the input starts each iteration: on the device, or in pageable or pinned (CUDA) host memory, copied inside every timed pass.",
        kind: Kind::Choice(words::<InputSource>),
        pages: LAB,
        runs: FORWARD,
        quiet: true,
        said: Said::NotDefault("input from {} memory"),
        ..ROW
    },
    Setting {
        id: SettingId::Tf32,
        access: flag!(advanced.tf32),
        key: "tf32",
        flag: "tf32",
        label: "TF32 matmuls and convolutions",
        help: "CUDA: TF32 on for matmuls and cuDNN (off: both off).",
        pages: BOTH,
        quiet: true,
        said: Said::NotDefault("tf32"),
        ..ROW
    },
    Setting {
        id: SettingId::CudnnBenchmark,
        access: flag!(advanced.cudnn_benchmark),
        key: "cudnn_benchmark",
        flag: "cudnn-benchmark",
        label: "cudnn.benchmark",
        help: "CUDA: torch.backends.cudnn.benchmark = True.",
        pages: BOTH,
        quiet: true,
        said: Said::NotDefault("cudnn.benchmark"),
        ..ROW
    },
    Setting {
        id: SettingId::CudaGraph,
        access: flag!(advanced.cuda_graph),
        key: "cuda_graph",
        flag: "cuda-graph",
        label: "CUDA graph replay",
        help: "CUDA: capture the pass (a generation's decode step, with the static cache) as a CUDA graph and replay it.",
        pages: BOTH,
        quiet: true,
        said: Said::NotDefault("CUDA graph"),
        ..ROW
    },
    Setting {
        id: SettingId::Compiled,
        access: flag!(advanced.compiled),
        key: "compiled",
        flag: "compiled",
        label: "Compiled (AOTInductor)",
        help: "torch.export then AOTInductor (torch._inductor.aoti_compile_and_package) in the venv's Python, the package run from libtorch; its one-time compile cost, passes and output measured beside the eager model's.",
        pages: LAB,
        quiet: true,
        said: Said::NotDefault("compiled (AOTInductor)"),
        ..ROW
    },
    Setting {
        id: SettingId::Batch,
        access: count!(batch),
        key: "batch",
        flag: "batch",
        label: "Batch",
        help: "Samples per pass; a generation's sequences, generated together: each decode step reads the weights once for the whole batch.",
        kind: Kind::Count { min: 1, max: 4096, offer: &[], unset: None },
        pages: BOTH,
        controls: GEN,
        said: Said::Always("batch {}"),
        ..ROW
    },
    Setting {
        id: SettingId::InputSize,
        access: Access::Count { get: |s| s.input_size, set: |s, n| s.input_size = n },
        key: "input_size",
        flag: "input-size",
        label: "Input size",
        help: "The model's size of one sample (features, image side, sequence length); its default when left out.",
        kind: Kind::Count { min: 1, max: u32::MAX, offer: &[], unset: None },
        pages: LAB,
        runs: FORWARD,
        quiet: true,
        ..ROW
    },
    Setting {
        id: SettingId::InputSize,
        access: Access::Count { get: |s| s.input_size, set: |s, n| s.input_size = n },
        key: "prompt",
        flag: "prompt",
        label: "Prompt tokens",
        help: "Random token ids, seeded. The prefill runs them in one pass.",
        kind: Kind::Count { min: 1, max: 8192, offer: &[], unset: None },
        pages: GEN,
        controls: GEN,
        runs: GENERATION,
        said: Said::Always("prompt {}"),
        ..ROW
    },
    Setting {
        id: SettingId::NewTokens,
        access: Access::Count { get: |s| s.generate.as_ref().map(|g| g.new_tokens), set: |s, n| if let Some(n) = n { generation(s).new_tokens = n } },
        key: "new_tokens",
        flag: "new-tokens",
        label: "New tokens",
        help: "Greedy, fixed length: no end-of-sequence stop.",
        kind: Kind::Count { min: 1, max: crate::MAX_NEW_TOKENS, offer: &[], unset: None },
        pages: GEN,
        controls: GEN,
        runs: GENERATION,
        said: Said::Always("{} new"),
        ..ROW
    },
    Setting {
        id: SettingId::Cache,
        access: gen_word!(cache),
        key: "cache",
        flag: "cache",
        label: "KV cache",
        help: "How past keys and values are kept: dynamic (grows by concatenation), static (allocated once), off (every step recomputes the prefix).",
        kind: Kind::Choice(words::<KvCacheKind>),
        pages: GEN,
        controls: GEN,
        runs: GENERATION,
        said: Said::Always("{} cache"),
        texts: &[("dynamic", "dynamic (grows)"), ("static", "static (allocated once)"), ("off", "off (use_cache=False)")],
        ..ROW
    },
    Setting {
        id: SettingId::Quant,
        access: gen_word!(weights),
        key: "quant",
        flag: "quant",
        label: "Quantized linear layers",
        help: "Weight-only quantization of the blocks' linear layers (int8, int4), multiplied by PyTorch's packed kernels in the weights' dtype; the embedding, norms and head stay in it.",
        kind: Kind::Choice(words::<WeightQuant>),
        pages: GEN,
        controls: GEN,
        runs: GENERATION,
        quiet: true,
        said: Said::NotDefault("{} linear layers"),
        legacy: Some("weights"),
        texts: &[("none", "none (as the weights)"), ("int8", "int8, a scale per output channel"), ("int4", "int4, a scale and a zero per group")],
        ..ROW
    },
    Setting {
        id: SettingId::GroupSize,
        access: Access::Count { get: |s| s.generate.as_ref().and_then(|g| g.group_size), set: |s, n| generation(s).group_size = n },
        key: "group_size",
        flag: "group-size",
        label: "int4 group size",
        help: "Input columns that share one scale and zero point: smaller groups follow the weights more closely and cost more bytes.",
        kind: Kind::Count { min: 1, max: u32::MAX, offer: &crate::GROUP_SIZES, unset: Some(crate::DEFAULT_GROUP_SIZE) },
        pages: GEN,
        controls: GEN,
        runs: GENERATION,
        quiet: true,
        said: Said::NotDefault("group {}"),
        only_with: Some(OnlyWith {
            on: SettingId::Quant,
            word: "int4",
            holds: |s| s.generate.as_ref().is_some_and(|g| g.weights == WeightQuant::Int4),
        }),
        ..ROW
    },
    Setting {
        id: SettingId::KvDtype,
        access: gen_word!(kv_dtype),
        key: "kv_dtype",
        flag: "kv-dtype",
        label: "KV cache dtype",
        help: "The dtype the cache stores keys and values in, cast back for attention: bf16 or fp16 halve an fp32 cache, not the weights. fp8 e4m3 (one byte, with a per-layer scale set by the prefill) needs a CUDA device with fp8, compute capability 8.9 or later; it is refused elsewhere, with the reason.",
        kind: Kind::Choice(words::<KvDtype>),
        pages: GEN,
        controls: GEN,
        runs: GENERATION,
        quiet: true,
        said: Said::NotDefault("{} KV cache"),
        texts: &[("as_activations", "as the activations"), ("fp8_e4m3", "fp8 e4m3 (CUDA only)")],
        ..ROW
    },
    Setting {
        id: SettingId::Warmup,
        access: count!(warmup),
        key: "warmup",
        flag: "warmup",
        label: "Warm-up iterations",
        help: "Iterations run before timing starts; reported apart.",
        kind: Kind::Count { min: 0, max: u32::MAX, offer: &[], unset: None },
        pages: LAB,
        runs: FORWARD,
        ..ROW
    },
    Setting {
        id: SettingId::Iters,
        access: count!(iters),
        key: "iters",
        flag: "iters",
        label: "Timed iterations",
        help: "Iterations timed.",
        kind: Kind::Count { min: 1, max: u32::MAX, offer: &[], unset: None },
        pages: LAB,
        runs: FORWARD,
        ..ROW
    },
    Setting {
        id: SettingId::Threads,
        access: Access::Count { get: |s| s.threads, set: |s, n| s.threads = n },
        key: "threads",
        flag: "threads",
        label: "Threads",
        help: "CPU threads for libtorch's intra-op pool (default: the server's).",
        kind: Kind::Count { min: 1, max: u32::MAX, offer: &[], unset: None },
        pages: BOTH,
        quiet: true,
        ..ROW
    },
    Setting {
        id: SettingId::PromptText,
        access: Access::Text { get: |s| s.generate.as_ref().and_then(|g| g.prompt_text.as_deref()), set: |s, t| generation(s).prompt_text = t },
        key: "prompt_text",
        flag: "prompt-text",
        label: "Prompt text",
        help: "For a model that reads text: the prompt as text. The trained byte model is fed [BOS] + its UTF-8 bytes (at most 192); a team folder with a tokenizer.json what its tokenizer encodes (at most the tokens its context leaves beside the new ones). Other models take random prompt ids.",
        kind: Kind::Text,
        pages: GEN,
        runs: GENERATION,
        quiet: true,
        ..ROW
    },
    Setting {
        id: SettingId::Quality,
        access: gen_flag!(quality),
        key: "quality",
        flag: "quality",
        label: "Measure quality",
        help: "After the run, the trained model's bits per byte on held-out text under every weights dtype, quantization and KV dtype, beside gzip -9 and a unigram model.",
        pages: GEN,
        runs: GENERATION,
        quiet: true,
        said: Said::NotDefault("quality"),
        ..ROW
    },
    Setting {
        id: SettingId::PrefillLogits,
        access: gen_flag!(prefill_logits),
        key: "prefill_logits",
        flag: "prefill-logits",
        label: "Prefill logits",
        help: "Report the prefill's last-position logits (generation.prefill_logits, batch × vocab fp32), to compare a run with a peer's number for number.",
        runs: GENERATION,
        quiet: true,
        ..ROW
    },
];

/// The model row's field: a name read without a catalog is a built-in model, a preset or
/// [`crate::ModelId::Named`] until a catalog resolves it (`read_query`); the spec's id,
/// resolved by a catalog, is kept while the name is the same (ids are equal by name).
fn set_model(spec: &mut RunSpec, name: &str) -> Result<(), String> {
    let model: crate::ModelId = name.parse()?;
    if model != spec.model {
        spec.model = model;
    }
    Ok(())
}
