//! A served decoder ([`DecoderModel`]) and where it comes from ([`DecoderSource`]): a
//! preset's shape, a team folder's config and the weights as they sit on disk
//! ([`StoredWeights`]), or the model this project trained.

use serde::{Deserialize, Serialize};

use super::DecoderConfig;

/// Where a served decoder comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DecoderSource {
    /// A built-in shape with random seeded weights; `copies` names the model whose shape it
    /// copies.
    Preset { copies: String },
    /// A folder in the models directory: its `config.json`, and its weights when `weights`
    /// is true (`model.safetensors`, or `model.safetensors.index.json` and its shards, as
    /// `stored` describes them); random seeded weights otherwise.
    Team {
        folder: String,
        weights: bool,
        /// The files the weights are read from (absent in records made before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stored: Option<StoredWeights>,
        /// config.json's fields read past: a tool's metadata (`unsloth_version`), and fields
        /// set to what Gradless builds anyway (`attention_bias: false`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        read_past: Vec<String>,
        /// The folder's `tokenizer.json`, when it has one: its prompt can then be text and
        /// its tokens read as text. Without one its prompt is random ids.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokenizer: Option<TokenizerInfo>,
        /// Where the process that read the folder found it (the engine reads the weights
        /// and the tokenizer from it). Never sent: the catalog a browser reads from
        /// `/api/info` has none.
        #[serde(skip)]
        dir: Option<std::path::PathBuf>,
    },
    /// A model trained by this project, shipped in the repository's `models/{folder}`
    /// (`config.json`, `model.safetensors`, the held-out text its quality is measured on).
    /// Its vocabulary is bytes: id *b* is byte *b*, `bos` starts every sequence.
    Trained { folder: String, corpus: String, bos: u32 },
}

/// A checkpoint's weights as they sit on disk: what every report says they came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StoredWeights {
    /// Each file with its bytes: the index first for a sharded checkpoint, then the shards.
    pub files: Vec<(String, u64)>,
    /// The dtype as stored (`bf16`; `fp32 + bf16` when a checkpoint mixes them).
    pub dtype: String,
    /// SHA-256 of `hashed`: the index of a sharded checkpoint (it names every shard), or the
    /// single file.
    pub sha256: String,
    pub hashed: String,
}

impl StoredWeights {
    /// The bytes of every file.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, b)| b).sum()
    }

    /// "6 shards + model.safetensors.index.json, 1.2 MiB, bf16 as stored, sha256 3f2a…"
    pub fn describe(&self) -> String {
        let shards = self.files.iter().filter(|(n, _)| n.ends_with(".safetensors")).count();
        let what = if self.files.len() > shards {
            format!("{shards} safetensors shards + {}", self.hashed)
        } else {
            self.hashed.clone()
        };
        format!(
            "{what}, {}, {} as stored, sha256 of {} {}",
            crate::format_bytes(self.bytes()),
            self.dtype,
            self.hashed,
            &self.sha256[..self.sha256.len().min(12)]
        )
    }
}

/// A folder's `tokenizer.json` as the engine read it at start-up (Hugging Face's
/// `tokenizers`, the file transformers' fast tokenizers read), and the special ids from the
/// folder's configs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenizerInfo {
    /// The tokenizer's model (`BPE`, `Unigram`, `WordPiece`, `WordLevel`).
    pub kind: String,
    /// Its vocabulary, special tokens included: at most the config's `vocab_size`.
    pub vocab: u32,
    pub bytes: u64,
    pub sha256: String,
    /// `bos_token_id` of config.json: what the quality measurement starts each chunk with
    /// (EOS where there is none, as lm-evaluation-harness does).
    pub bos: Option<u32>,
    /// Whether encoding a text adds the BOS itself (its post-processor, as Llama's does):
    /// the prompt is then exactly what `tokenizer(text)` gives in transformers.
    pub adds_bos: bool,
    /// `eos_token_id` (config.json, or generation_config.json's when it has one, as
    /// transformers' `generate` reads it): the text shown ends at the first of them.
    pub eos: Vec<u32>,
}

impl TokenizerInfo {
    /// "BPE tokenizer.json, 384 tokens, BOS added by the tokenizer, EOS 1, sha256 3f2a…"
    pub fn describe(&self) -> String {
        let bos = match (self.bos, self.adds_bos) {
            (Some(b), true) => format!("BOS {b} added by the tokenizer"),
            (Some(b), false) => format!("BOS {b} not added by the tokenizer"),
            (None, _) => "no BOS".into(),
        };
        let eos = match self.eos.as_slice() {
            [] => "no EOS".to_string(),
            ids => format!("EOS {}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join("/")),
        };
        format!(
            "{} tokenizer.json, {} tokens, {bos}, {eos}, sha256 {}",
            self.kind,
            self.vocab,
            &self.sha256[..self.sha256.len().min(12)]
        )
    }
}

/// How a decoder reads and writes text, when it does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TextVocab<'a> {
    /// The trained model: id *b* is byte *b*, `bos` starts every sequence.
    Bytes { bos: u32 },
    /// A team folder's `tokenizer.json`.
    Tokenizer(&'a TokenizerInfo),
}

/// A decoder this process serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecoderModel {
    pub name: String,
    pub display_name: String,
    pub source: DecoderSource,
    pub config: DecoderConfig,
}

impl DecoderModel {
    /// Whether its weights are random (every preset; a team folder without safetensors).
    pub fn random_weights(&self) -> bool {
        !matches!(self.source, DecoderSource::Team { weights: true, .. } | DecoderSource::Trained { .. })
    }

    /// The id that starts a sequence, for a model whose vocabulary is bytes (id *b* is byte
    /// *b*): its prompt can be text, its tokens read as text.
    pub fn byte_bos(&self) -> Option<u32> {
        match self.source {
            DecoderSource::Trained { bos, .. } => Some(bos),
            _ => None,
        }
    }

    /// The folder's tokenizer, for a team decoder that has one.
    pub fn tokenizer(&self) -> Option<&TokenizerInfo> {
        match &self.source {
            DecoderSource::Team { tokenizer, .. } => tokenizer.as_ref(),
            _ => None,
        }
    }

    /// How its prompt can be text and its tokens read as text, when they can.
    pub fn text_vocab(&self) -> Option<TextVocab<'_>> {
        match (self.byte_bos(), self.tokenizer()) {
            (Some(bos), _) => Some(TextVocab::Bytes { bos }),
            (None, Some(t)) => Some(TextVocab::Tokenizer(t)),
            (None, None) => None,
        }
    }

    /// Whether its prompt can be text.
    pub fn takes_text(&self) -> bool {
        self.text_vocab().is_some()
    }

    /// One line on where the shape and the weights come from, for pages and reports.
    pub fn provenance(&self) -> String {
        let line = self.weights_line();
        match &self.source {
            DecoderSource::Team { read_past, tokenizer, .. } => {
                let mut line = line;
                match tokenizer {
                    Some(t) => line.push_str(&format!("; text through its {}", t.describe())),
                    None => line.push_str("; no tokenizer.json: its prompt is random token ids"),
                }
                if !read_past.is_empty() {
                    line.push_str(&format!(
                        "; config.json's fields read past (of no effect on what Gradless builds): {}",
                        read_past.join(", ")
                    ));
                }
                line
            }
            _ => line,
        }
    }

    fn weights_line(&self) -> String {
        match &self.source {
            DecoderSource::Preset { copies } => format!(
                "the shape of {copies}, random seeded weights: real memory and latency, meaningless text"
            ),
            DecoderSource::Team { folder, weights: true, stored, .. } => {
                let place = team_place(folder);
                match stored {
                    Some(s) => format!("config.json and weights from {place} `{folder}`: {}", s.describe()),
                    None => format!("config.json and model.safetensors from {place} `{folder}`"),
                }
            }
            DecoderSource::Trained { folder, corpus, .. } => {
                format!("trained by this project on {corpus} (models/{folder}): its text is learned, not random")
            }
            DecoderSource::Team { folder, weights: false, .. } => format!(
                "config.json from {} `{folder}`, random, seeded: no weights in this folder (no model.safetensors or model.safetensors.index.json): real memory and latency, meaningless text",
                team_place(folder)
            ),
        }
    }
}

/// Where a team folder sits, in words: a hub cache's snapshot (`models--ORG--NAME/snapshots/
/// REV`) or a folder of the models directory.
fn team_place(folder: &str) -> &'static str {
    match folder.contains("/snapshots/") {
        true => "the Hugging Face cache's",
        false => "the models directory's",
    }
}

