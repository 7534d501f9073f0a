//! Every setting of a run, declared once: [`SETTINGS`], one row a setting. A row names the
//! setting's place in the spec's JSON (`generate.kv_dtype`), its key in a page's address
//! (`kv_dtype`, unique per page), its command-line flag (`--kv-dtype`), its label and help,
//! its values (an enum's words come from the enum: [`crate::words`]), the pages and the kinds
//! of run it applies to, and how a run's label says it.
//!
//! Everything that spells settings reads this table: both pages' address codecs (the app's
//! `settings.rs` and `gen_settings.rs`), what a link asked for that a page could not use, the
//! Generate page's controls, the CLI's flags (`gradless measure|compare|generate`), the
//! exported script's arguments (`server/src/export.rs`), the Python snippets' command line
//! and [`RunSpec::label`]. A row reads and writes the spec through its JSON path, as the
//! learn paths' change steps do, so a new row needs no code beside it: see "Adding a
//! setting" in docs/ARCHITECTURE.md.

use serde_json::Value as Json;

use crate::words::words;
use crate::{
    Autocast, DeviceChoice, GenerateSpec, GradMode, InputSource, KvCacheKind, KvDtype, MemoryFormat, RunSpec, WeightQuant,
    WeightsDtype,
};

/// A page with settings in its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    /// The Lab (`/`): forward passes.
    Lab,
    /// `/generate`: generations on a decoder.
    Generate,
}

/// A kind of run: a spec without `generate` is a forward run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Forward,
    Generate,
}

impl RunKind {
    pub fn of(spec: &RunSpec) -> RunKind {
        match spec.generate {
            Some(_) => RunKind::Generate,
            None => RunKind::Forward,
        }
    }
}

/// What values a setting takes.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// One word of an enum, its words in declaration order (the default first).
    Choice(fn() -> &'static [&'static str]),
    /// A whole number from `min` to `max`; `offer`: the values a control offers (empty: a
    /// number field); `unset`: what the spec means when the number is left out.
    Count { min: u32, max: u32, offer: &'static [u32], unset: Option<u32> },
    /// On or off: `1` in an address, a bare `--flag`; off is left out of both.
    Switch,
    /// True or false, both said: `1` / `0` in an address, `--on` / `--off` on the command
    /// line (`model.eval()` / `model.train()`).
    Pair { on: &'static str, off: &'static str },
    /// A name `check` takes (a model's).
    Name(fn(&str) -> Result<(), String>),
    /// Free text, as given (the spec's check says what it takes).
    Text,
}

/// How a run's label says a setting; `{}` stands for its value.
#[derive(Clone, Copy, Debug)]
pub enum Said {
    Never,
    Always(&'static str),
    /// Only when the value is not the spec's default.
    NotDefault(&'static str),
}

/// One setting. See the module's documentation.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// Where it is in the spec's JSON, dot-separated.
    pub path: &'static str,
    /// Its key in a page's address.
    pub key: &'static str,
    /// Its command-line flag, without the dashes.
    pub flag: &'static str,
    pub label: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// The pages whose address carries it.
    pub pages: &'static [Page],
    /// The pages that draw its control from this row (others draw their own, or none).
    pub controls: &'static [Page],
    /// The kinds of run it applies to (and whose command takes its flag).
    pub runs: &'static [RunKind],
    /// Written in an address and a command line only when not at the spec's default; the
    /// others are always written, so a link restores what its sender saw whatever a later
    /// version's defaults are.
    pub quiet: bool,
    pub said: Said,
    /// Only with another setting (its path) at one value: left out otherwise.
    pub only_with: Option<(&'static str, &'static str)>,
    /// The key (and flag) that older addresses and commands used for it, shared with
    /// another setting whose values are other words: a value is read as the setting whose
    /// word it is.
    pub legacy: Option<&'static str>,
    /// Words the controls show for some values (`dynamic` as "dynamic (grows)").
    pub texts: &'static [(&'static str, &'static str)],
}

pub const BOTH: &[Page] = &[Page::Lab, Page::Generate];
pub const LAB: &[Page] = &[Page::Lab];
pub const GEN: &[Page] = &[Page::Generate];
pub const NONE: &[Page] = &[];
pub const ANY_RUN: &[RunKind] = &[RunKind::Forward, RunKind::Generate];
pub const FORWARD: &[RunKind] = &[RunKind::Forward];
pub const GENERATION: &[RunKind] = &[RunKind::Generate];

/// A row with no pages, no controls, always written, never said: the fields a row sets
/// differently come first (`..ROW`).
pub const ROW: Setting = Setting {
    path: "",
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
        path: "model",
        key: "model",
        flag: "model",
        label: "Model",
        help: "A built-in model, a decoder preset or a team model of the server's models directory.",
        kind: Kind::Name(|name| name.parse::<crate::ModelId>().map(|_| ())),
        pages: BOTH,
        ..ROW
    },
    Setting {
        path: "device",
        key: "device",
        flag: "device",
        label: "Device",
        help: "auto: CUDA when the server has it, else the CPU.",
        kind: Kind::Choice(words::<DeviceChoice>),
        pages: BOTH,
        ..ROW
    },
    Setting {
        path: "eval",
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
        path: "grad",
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
        path: "autocast",
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
        path: "advanced.dtype",
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
        path: "advanced.memory_format",
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
        path: "advanced.input_source",
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
        path: "advanced.tf32",
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
        path: "advanced.cudnn_benchmark",
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
        path: "advanced.cuda_graph",
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
        path: "advanced.compiled",
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
        path: "batch",
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
        path: "input_size",
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
        path: "input_size",
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
        path: "generate.new_tokens",
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
        path: "generate.cache",
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
        path: "generate.quant",
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
        path: "generate.group_size",
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
        only_with: Some(("generate.quant", "int4")),
        ..ROW
    },
    Setting {
        path: "generate.kv_dtype",
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
        path: "warmup",
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
        path: "iters",
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
        path: "threads",
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
        path: "generate.prompt_text",
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
        path: "generate.quality",
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
        path: "generate.prefill_logits",
        key: "prefill_logits",
        flag: "prefill-logits",
        label: "Prefill logits",
        help: "Report the prefill's last-position logits (generation.prefill_logits, batch × vocab fp32), to compare a run with a peer's number for number.",
        runs: GENERATION,
        quiet: true,
        ..ROW
    },
];

impl Setting {
    pub fn on_page(&self, page: Page) -> bool {
        self.pages.contains(&page)
    }

    pub fn has_control(&self, page: Page) -> bool {
        self.controls.contains(&page)
    }

    pub fn applies_to(&self, run: RunKind) -> bool {
        self.runs.contains(&run)
    }

    /// The value in `spec` as text (a word, digits, `1`/`0`); a field the JSON leaves out
    /// reads as its default (an enum's first word, off); `None` for a number left out, or
    /// a setting of another kind of run.
    pub fn value(&self, spec: &RunSpec) -> Option<String> {
        if !self.applies_to(RunKind::of(spec)) {
            return None;
        }
        let json = serde_json::to_value(spec).ok()?;
        let at = json.pointer(&pointer(self.path));
        match (at, self.kind) {
            (Some(Json::String(s)), _) => Some(s.clone()),
            (Some(Json::Number(n)), _) => Some(n.to_string()),
            (Some(Json::Bool(b)), _) => Some(if *b { "1" } else { "0" }.into()),
            (None, Kind::Choice(words)) => words().first().map(|w| w.to_string()),
            (None, Kind::Switch | Kind::Pair { .. }) => Some("0".into()),
            _ => None,
        }
    }

    /// The value a control shows: [`Setting::value`], or what a number left out means.
    pub fn shown(&self, spec: &RunSpec) -> Option<String> {
        match (self.value(spec), self.kind) {
            (None, Kind::Count { unset: Some(n), .. }) => Some(n.to_string()),
            (v, _) => v,
        }
    }

    /// Whether it is at the default of a spec of the same kind (`RunSpec::default()`).
    pub fn is_default(&self, spec: &RunSpec) -> bool {
        self.value(spec) == self.value(&default_like(spec))
    }

    /// Whether it applies to `spec` given the other settings (`only_with`).
    pub fn in_use(&self, spec: &RunSpec) -> bool {
        self.applies_to(RunKind::of(spec))
            && self.only_with.is_none_or(|(path, word)| {
                setting_at(path).is_some_and(|s| s.value(spec).as_deref() == Some(word))
            })
    }

    /// Whether an address or a command line writes it for `spec`.
    pub fn written(&self, spec: &RunSpec) -> bool {
        self.in_use(spec) && self.value(spec).is_some() && (!self.quiet || !self.is_default(spec))
    }

    /// The words a choice takes, or the numbers a count offers.
    pub fn choices(&self) -> Vec<String> {
        match self.kind {
            Kind::Choice(words) => words().iter().map(|w| w.to_string()).collect(),
            Kind::Count { offer, .. } => offer.iter().map(|n| n.to_string()).collect(),
            Kind::Switch | Kind::Pair { .. } => vec!["1".into(), "0".into()],
            Kind::Name(_) | Kind::Text => vec![],
        }
    }

    /// What a control shows for `value`.
    pub fn text(&self, value: &str) -> String {
        self.texts
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, t)| t.to_string())
            .unwrap_or_else(|| value.to_string())
    }

    /// The value as a run's label says it (`eval`, `bf16`).
    pub fn said_value(&self, value: &str) -> String {
        match self.kind {
            Kind::Pair { on, off } => (if value == "1" { on } else { off }).to_string(),
            _ => value.to_string(),
        }
    }

    /// Sets it in `spec` from `text` (an address's or a command line's value; a switch
    /// takes `1`/`true`/`0`/`false`); the error says what it takes. Settings that only
    /// apply with another value (`only_with`) are cleared when that value changes.
    pub fn set(&self, spec: &mut RunSpec, text: &str) -> Result<(), String> {
        let value = self.parse(text)?;
        if !self.applies_to(RunKind::of(spec)) {
            return Err(format!("{} does not apply to this kind of run", self.key));
        }
        let mut json = serde_json::to_value(&*spec).map_err(|e| e.to_string())?;
        let mut at = &mut json;
        let keys: Vec<&str> = self.path.split('.').collect();
        for key in &keys[..keys.len() - 1] {
            let object = at.as_object_mut().ok_or_else(|| format!("{}: no {key} to set inside", self.path))?;
            at = object.entry(key.to_string()).or_insert_with(|| Json::Object(Default::default()));
        }
        let object = at.as_object_mut().ok_or_else(|| format!("{}: not inside an object", self.path))?;
        object.insert(keys[keys.len() - 1].to_string(), value);
        let model = spec.model;
        *spec = serde_json::from_value(json).map_err(|e| format!("{} “{text}”: {e}", self.key))?;
        keep_resolved(spec, model);
        for other in SETTINGS.iter().filter(|s| s.only_with.is_some_and(|(p, _)| p == self.path)) {
            if !other.in_use(spec) {
                other.clear(spec);
            }
        }
        Ok(())
    }

    /// Leaves it out of `spec` (a number's `None`, an enum's default, off).
    pub fn clear(&self, spec: &mut RunSpec) {
        let Ok(mut json) = serde_json::to_value(&*spec) else { return };
        if let Some((parent, last)) = self.path.rsplit_once('.') {
            if let Some(object) = json.pointer_mut(&pointer(parent)).and_then(|v| v.as_object_mut()) {
                object.remove(last);
            }
        } else if let Some(object) = json.as_object_mut() {
            object.remove(self.path);
        }
        if let Ok(s) = serde_json::from_value(json) {
            let model = spec.model;
            *spec = s;
            keep_resolved(spec, model);
        }
    }

    /// `text` as this setting's JSON value, checked against what it takes.
    fn parse(&self, text: &str) -> Result<Json, String> {
        if let Kind::Text = self.kind {
            return Ok(Json::String(text.into()));
        }
        let t = text.trim();
        match self.kind {
            Kind::Choice(words) => match words().contains(&t) {
                true => Ok(Json::String(t.into())),
                false => Err(format!("unknown value `{t}`; expected one of: {}", words().join(", "))),
            },
            Kind::Count { min, max, .. } => match t.parse::<u32>() {
                Ok(n) if n >= min && n <= max => Ok(Json::from(n)),
                _ if max == u32::MAX => Err(format!("{} must be a whole number of at least {min}, not “{t}”", self.key)),
                _ => Err(format!("{} must be a whole number from {min} to {max}, not “{t}”", self.key)),
            },
            Kind::Switch | Kind::Pair { .. } => match t {
                "1" | "true" => Ok(Json::Bool(true)),
                "0" | "false" => Ok(Json::Bool(false)),
                _ => Err(format!("{} is 1 or 0, not “{t}”", self.key)),
            },
            Kind::Name(check) => check(t).map(|_| Json::String(t.into())),
            Kind::Text => unreachable!("read above"),
        }
    }
}

/// Read back from JSON, a team model's id is its name again ([`crate::ModelId::Named`]):
/// the id it had, resolved by a catalog, is kept while the name is the same.
fn keep_resolved(spec: &mut RunSpec, model: crate::ModelId) {
    if spec.model == model {
        spec.model = model;
    }
}

/// `a.b` as a JSON pointer, `/a/b`.
fn pointer(path: &str) -> String {
    format!("/{}", path.replace('.', "/"))
}

/// The row whose path is `path` (the first, where two pages key one path apart).
pub fn setting_at(path: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.path == path)
}

/// `RunSpec::default()`, a generation's when `spec` is one: what "the default" means for
/// a quiet setting and a label.
fn default_like(spec: &RunSpec) -> RunSpec {
    RunSpec {
        generate: spec.generate.as_ref().map(|_| GenerateSpec::default()),
        ..RunSpec::default()
    }
}

/// The rows of `page`, in `table`.
pub fn on_page(table: &'static [Setting], page: Page) -> impl Iterator<Item = &'static Setting> {
    table.iter().filter(move |s| s.on_page(page))
}

/// The address's query (without `?`) for `spec` on `page`, from `table`.
pub fn query(table: &'static [Setting], page: Page, spec: &RunSpec) -> String {
    on_page(table, page)
        .filter(|s| s.written(spec))
        .filter_map(|s| s.value(spec).map(|v| format!("{}={}", s.key, encode(&v))))
        .collect::<Vec<_>>()
        .join("&")
}

/// What reading an address did beyond its settings: each value it could not use, and
/// each old key it read under today's name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// `(key, value, why)`.
    pub refused: Vec<(String, String, String)>,
    /// `(old key, value, today's key)`.
    pub renamed: Vec<(String, String, String)>,
}

/// Applies the address's values (`get`: the router's reading of a key) to `spec`, page
/// `page`'s rows in table order; a value a row cannot take leaves the spec's.
///
/// The model's name is resolved in `catalog` (the row reads a name without one); a name it
/// does not serve is refused, the spec keeping its model.
pub fn read_query(
    table: &'static [Setting],
    page: Page,
    spec: &mut RunSpec,
    get: &dyn Fn(&str) -> Option<String>,
    catalog: &crate::Catalog,
) -> Reading {
    let mut reading = Reading::default();
    let model = spec.model;
    let run = RunKind::of(spec);
    for s in on_page(table, page).filter(|s| s.applies_to(run)) {
        if let Some(v) = get(s.key) {
            if let (false, Some((path, word))) = (s.in_use(spec), s.only_with) {
                let on = setting_at(path).map_or(path, |o| o.key);
                reading.refused.push((s.key.into(), v, format!("it applies with {on}={word} only")));
            } else if let Err(why) = s.set(spec, &v) {
                reading.refused.push((s.key.into(), v, why));
            }
        } else if let Some(old) = s.legacy {
            // The old key's value, when it is one of this setting's words.
            if let Some(v) = get(old).filter(|v| s.parse(v).is_ok()) {
                if s.set(spec, &v).is_ok() {
                    reading.renamed.push((old.into(), v, s.key.into()));
                }
            }
        }
    }
    let mut old_keys: Vec<&str> = on_page(table, page).filter_map(|s| s.legacy).collect();
    old_keys.dedup();
    for old in old_keys {
        if let Some(v) = get(old).filter(|_| !reading.renamed.iter().any(|(k, _, _)| k == old)) {
            let why = format!("`{old}` is the old key of {}, and “{v}” is none of their values", {
                let names: Vec<&str> = on_page(table, page).filter(|s| s.legacy == Some(old)).map(|s| s.key).collect();
                names.join(" and ")
            });
            reading.refused.push((old.into(), v, why));
        }
    }
    spec.model = catalog.resolve(spec.model);
    if let crate::ModelId::Named(name) = spec.model {
        // The model's row is the table's first: its refusal is said first.
        reading.refused.insert(0, ("model".into(), name.to_string(), catalog.unknown_message(&name)));
        spec.model = model;
    }
    reading
}

/// `--flag=value` for every setting of `spec`'s kind of run that a command line writes
/// (a switch as a bare `--flag`, a pair as `--eval` / `--train`); `skip`: keys left out.
pub fn command_args(table: &'static [Setting], spec: &RunSpec, skip: &[&str]) -> Vec<String> {
    table
        .iter()
        .filter(|s| !skip.contains(&s.key) && s.written(spec))
        .filter_map(|s| {
            let v = s.value(spec)?;
            Some(match s.kind {
                Kind::Switch if v == "1" => format!("--{}", s.flag),
                Kind::Switch => return None,
                Kind::Pair { on, off } => format!("--{}", if v == "1" { on } else { off }),
                Kind::Text => format!("--{}={}", s.flag, shell_quoted(&v)),
                _ => format!("--{}={v}", s.flag),
            })
        })
        .collect()
}

/// The `gradless` command that makes the same run (`measure` or `generate`), every flag
/// from `table`: the first line of the Python snippets, as a comment.
pub fn command_line(table: &'static [Setting], spec: &RunSpec) -> String {
    let command = match RunKind::of(spec) {
        RunKind::Forward => "measure",
        RunKind::Generate => "generate",
    };
    format!("gradless {command} {}", command_args(table, spec, &[]).join(" "))
}

/// The run's label from `table`: each setting as its row says it.
pub fn label(table: &'static [Setting], spec: &RunSpec) -> String {
    table
        .iter()
        .filter(|s| s.in_use(spec))
        .filter_map(|s| {
            let (template, always) = match s.said {
                Said::Never => return None,
                Said::Always(t) => (t, true),
                Said::NotDefault(t) => (t, false),
            };
            let v = s.value(spec)?;
            (always || !s.is_default(spec)).then(|| template.replace("{}", &s.said_value(&v)))
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The settings of `spec` that differ from `default`, as `label: value` in the controls'
/// words, table order (what a page says it ran).
pub fn differences(table: &'static [Setting], page: Page, spec: &RunSpec, default: &RunSpec) -> Vec<String> {
    on_page(table, page)
        .filter(|s| s.in_use(spec) && s.key != "device" && s.key != "threads")
        .filter_map(|s| {
            let v = s.shown(spec)?;
            (s.in_use(default).then(|| s.shown(default)).flatten().as_deref() != Some(v.as_str()))
                .then(|| format!("{}: {}", s.label, s.text(&v)))
        })
        .collect()
}

/// `text` as one shell word: as is when every character is plain, in single quotes
/// otherwise, and in bash's `$'…'` with escapes when it holds a control character (a new
/// line would end the snippets' comment line that carries the command).
pub fn shell_quoted(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:=,+-@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    if !text.chars().any(char::is_control) {
        return format!("'{}'", text.replace('\'', "'\\''"));
    }
    let mut out = String::from("$'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// An address's value: the few characters a query cannot carry, escaped.
fn encode(v: &str) -> String {
    v.chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '_' | '.' | '~' => c.to_string(),
            c => {
                let mut buf = [0u8; 4];
                c.encode_utf8(&mut buf).bytes().map(|b| format!("%{b:02X}")).collect()
            }
        })
        .collect()
}

impl RunSpec {
    /// A short human label of the settings, e.g. `eval · no_grad · fp16 · batch 32`, from
    /// the settings table.
    pub fn label(&self) -> String {
        label(SETTINGS, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_path_reads_and_writes_the_spec() {
        for s in SETTINGS {
            let mut spec = if s.applies_to(RunKind::Generate) { generation() } else { RunSpec::default() };
            for v in s.choices().into_iter().chain(["7".to_string()]).filter(|v| s.parse(v).is_ok()) {
                if let Some((path, word)) = s.only_with {
                    setting_at(path).unwrap().set(&mut spec, word).unwrap();
                }
                if matches!(s.kind, Kind::Name(_)) {
                    continue;
                }
                s.set(&mut spec, &v).unwrap_or_else(|e| panic!("{}: {e}", s.path));
                assert_eq!(s.value(&spec).as_deref(), Some(v.as_str()), "{}", s.path);
            }
        }
    }

    #[test]
    fn the_quantization_and_the_dtype_are_two_settings() {
        let mut spec = generation();
        setting_at("generate.quant").unwrap().set(&mut spec, "int4").unwrap();
        setting_at("generate.group_size").unwrap().set(&mut spec, "32").unwrap();
        setting_at("advanced.dtype").unwrap().set(&mut spec, "bf16").unwrap();
        let g = spec.generate.clone().unwrap();
        assert_eq!((g.weights, g.group_size, spec.advanced.weights), (WeightQuant::Int4, Some(32), WeightsDtype::Bf16));
        let q = query(SETTINGS, Page::Generate, &spec);
        assert!(q.contains("&dtype=bf16") && q.contains("&quant=int4&group_size=32"), "{q}");
        assert_eq!(spec.label(), "eval · no_grad · bf16 weights · batch 1 · prompt 32 · 64 new · dynamic cache · int4 linear layers · group 32");
        // Leaving int4 leaves its group size out (the spec check refuses one on int8).
        setting_at("generate.quant").unwrap().set(&mut spec, "int8").unwrap();
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
        setting_at("generate.kv_dtype").unwrap().set(&mut s, "bf16").unwrap();
        setting_at("generate.quant").unwrap().set(&mut s, "int4").unwrap();
        assert_eq!(
            differences(SETTINGS, Page::Generate, &s, &d),
            ["Quantized linear layers: int4, a scale and a zero per group", "int4 group size: 64", "KV cache dtype: bf16"]
        );
        assert!(differences(SETTINGS, Page::Generate, &d, &d).is_empty());
    }
}
