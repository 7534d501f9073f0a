//! [`SettingId`]: one name per field of a [`crate::RunSpec`] that a person sets. It is what
//! the settings table's rows are looked up by ([`super::setting`]), and its words
//! (`generate.kv_dtype`) are the field's place in the spec's JSON: what a refusal names.

use std::fmt;

/// A setting of a run, by the spec's field it sets. Two rows may set one field (the Lab's
/// `input_size` and Generate's `prompt`): they share its id.
///
/// Code names a setting by its id, never by a string, so a misspelt setting does not
/// compile:
///
/// ```compile_fail
/// let row = protocol::settings::setting(protocol::settings::SettingId::KvDtpye);
/// ```
///
/// The same line spelt right:
///
/// ```
/// let row = protocol::settings::setting(protocol::settings::SettingId::KvDtype);
/// assert_eq!(row.key, "kv_dtype");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SettingId {
    Model,
    Device,
    Eval,
    Grad,
    Autocast,
    Dtype,
    MemoryFormat,
    InputSource,
    Tf32,
    CudnnBenchmark,
    CudaGraph,
    Compiled,
    Batch,
    InputSize,
    NewTokens,
    Cache,
    Quant,
    GroupSize,
    KvDtype,
    Warmup,
    Iters,
    Threads,
    PromptText,
    Quality,
    PrefillLogits,
}

impl SettingId {
    pub const ALL: [SettingId; 25] = [
        SettingId::Model,
        SettingId::Device,
        SettingId::Eval,
        SettingId::Grad,
        SettingId::Autocast,
        SettingId::Dtype,
        SettingId::MemoryFormat,
        SettingId::InputSource,
        SettingId::Tf32,
        SettingId::CudnnBenchmark,
        SettingId::CudaGraph,
        SettingId::Compiled,
        SettingId::Batch,
        SettingId::InputSize,
        SettingId::NewTokens,
        SettingId::Cache,
        SettingId::Quant,
        SettingId::GroupSize,
        SettingId::KvDtype,
        SettingId::Warmup,
        SettingId::Iters,
        SettingId::Threads,
        SettingId::PromptText,
        SettingId::Quality,
        SettingId::PrefillLogits,
    ];

    /// The field's name as a refusal gives it (`SpecError.field`): its place in the spec's
    /// JSON, dot-separated. Said here once; nothing reads the spec through it.
    pub fn as_str(self) -> &'static str {
        match self {
            SettingId::Model => "model",
            SettingId::Device => "device",
            SettingId::Eval => "eval",
            SettingId::Grad => "grad",
            SettingId::Autocast => "autocast",
            SettingId::Dtype => "advanced.dtype",
            SettingId::MemoryFormat => "advanced.memory_format",
            SettingId::InputSource => "advanced.input_source",
            SettingId::Tf32 => "advanced.tf32",
            SettingId::CudnnBenchmark => "advanced.cudnn_benchmark",
            SettingId::CudaGraph => "advanced.cuda_graph",
            SettingId::Compiled => "advanced.compiled",
            SettingId::Batch => "batch",
            SettingId::InputSize => "input_size",
            SettingId::NewTokens => "generate.new_tokens",
            SettingId::Cache => "generate.cache",
            SettingId::Quant => "generate.quant",
            SettingId::GroupSize => "generate.group_size",
            SettingId::KvDtype => "generate.kv_dtype",
            SettingId::Warmup => "warmup",
            SettingId::Iters => "iters",
            SettingId::Threads => "threads",
            SettingId::PromptText => "generate.prompt_text",
            SettingId::Quality => "generate.quality",
            SettingId::PrefillLogits => "generate.prefill_logits",
        }
    }

    /// The id whose name is `name` (an error body's `field`).
    pub fn from_name(name: &str) -> Option<SettingId> {
        SettingId::ALL.into_iter().find(|id| id.as_str() == name)
    }
}

impl fmt::Display for SettingId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
