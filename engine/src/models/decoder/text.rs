//! Text in and out of a decoder: the trained model's bytes (id *b* is byte *b*) and a team
//! folder's `tokenizer.json`, read with Hugging Face's `tokenizers` (what transformers' fast
//! tokenizers run), behind one interface so a generation never asks which it has.
//!
//! A tokenizer is checked at start-up ([`read_tokenizer`]: it parses, its vocabulary fits
//! the embedding, its special ids come from the folder's configs), then kept per folder for
//! the runs: a prompt is encoded as `tokenizer(text)` encodes it in transformers (the
//! tokenizer's own post-processor adds BOS where it does, as Llama's does), generated ids
//! are decoded as `tokenizer.decode(ids, skip_special_tokens=True)`, and [`Streamer`] hands
//! the page the text a step adds as it is decoded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use protocol::decoder::{DecoderModel, TextVocab, TokenizerInfo};
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

/// The file transformers' fast tokenizers read.
pub const TOKENIZER: &str = "tokenizer.json";

/// Tokenizers read once per folder (start-up reads them to check them; a run reuses them).
/// Bounded by the folders the operator serves: a request cannot add to it.
static LOADED: Mutex<Option<HashMap<PathBuf, Arc<Tokenizer>>>> = Mutex::new(None);

fn load(path: &Path) -> Result<Arc<Tokenizer>, String> {
    let mut cache = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(t) = cache.get(path) {
        return Ok(t.clone());
    }
    let t = Arc::new(Tokenizer::from_file(path).map_err(|e| format!("{TOKENIZER} does not load as a Hugging Face tokenizer: {e}"))?);
    cache.insert(path.to_path_buf(), t.clone());
    Ok(t)
}

/// `key` of a config file as token ids: an integer or a list of them (`eos_token_id: [1, 2]`).
fn ids_of(config: &serde_json::Value, key: &str) -> Option<Vec<u32>> {
    match config.get(key)? {
        serde_json::Value::Number(n) => n.as_u64().map(|i| vec![i as u32]),
        serde_json::Value::Array(a) => a.iter().map(|v| v.as_u64().map(|i| i as u32)).collect(),
        _ => None,
    }
}

/// The folder's tokenizer, checked: `Ok(None)` when it has no `tokenizer.json` (its prompt is
/// then random ids, and its report says so), an error naming the file when it cannot be
/// used. BOS comes from config.json's `bos_token_id`; EOS from generation_config.json's
/// `eos_token_id` when it has one, else config.json's, as transformers' `generate` reads it.
pub fn read_tokenizer(dir: &Path, config_text: &str, vocab_size: u32) -> Result<Option<TokenizerInfo>, String> {
    let path = dir.join(TOKENIZER);
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("{TOKENIZER} cannot be read: {e}"))?;
    let tokenizer = load(&path)?;
    let vocab = tokenizer.get_vocab_size(true) as u32;
    if vocab > vocab_size {
        return Err(format!(
            "{TOKENIZER} has {vocab} tokens, more than config.json's vocab_size {vocab_size}: its ids past {} would index past the embedding",
            vocab_size - 1
        ));
    }
    let config: serde_json::Value = serde_json::from_str(config_text).unwrap_or_default();
    let generation: serde_json::Value = std::fs::read_to_string(dir.join("generation_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let bos = ids_of(&config, "bos_token_id").or_else(|| ids_of(&generation, "bos_token_id")).and_then(|b| b.first().copied());
    let eos = ids_of(&generation, "eos_token_id").or_else(|| ids_of(&config, "eos_token_id")).unwrap_or_default();
    for id in bos.iter().chain(&eos) {
        if *id >= vocab_size {
            return Err(format!("config.json's special token id {id} is past vocab_size {vocab_size}"));
        }
    }
    let encode = |special| tokenizer.encode("x", special).map(|e| e.get_ids().to_vec());
    let (with, without) = match (encode(true), encode(false)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return Err(format!("{TOKENIZER} cannot encode text: {e}")),
    };
    let adds_bos = bos.is_some() && with.first().copied() == bos && with.len() > without.len();
    let kind = match tokenizer.get_model() {
        tokenizers::ModelWrapper::BPE(_) => "BPE",
        tokenizers::ModelWrapper::WordPiece(_) => "WordPiece",
        tokenizers::ModelWrapper::WordLevel(_) => "WordLevel",
        tokenizers::ModelWrapper::Unigram(_) => "Unigram",
    };
    Ok(Some(TokenizerInfo {
        kind: kind.into(),
        vocab,
        bytes: bytes.len() as u64,
        sha256: Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect(),
        bos,
        adds_bos,
        eos,
    }))
}

/// The tokenizer of a served team decoder.
fn tokenizer_of(model: &DecoderModel) -> Result<Arc<Tokenizer>, String> {
    let dir = super::team_folder(model).ok_or_else(|| format!("the folder of `{}` is not served here", model.name))?;
    load(&dir.join(TOKENIZER))
}

/// A text prompt's ids: `[BOS] + its UTF-8 bytes` for the byte model, what `tokenizer(text)`
/// gives for a tokenized one. An error when the model takes no text or the text does not
/// encode.
pub fn prompt_ids(model: &DecoderModel, text: &str) -> Result<Vec<i64>, String> {
    match model.text_vocab() {
        Some(TextVocab::Bytes { bos }) => Ok(std::iter::once(bos as i64).chain(text.bytes().map(i64::from)).collect()),
        Some(TextVocab::Tokenizer(_)) => {
            let t = tokenizer_of(model)?;
            let e = t.encode(text, true).map_err(|e| format!("the prompt text does not encode: {e}"))?;
            Ok(e.get_ids().iter().map(|&i| i as i64).collect())
        }
        None => Err(format!("{} takes no text: it has neither a byte vocabulary nor a {TOKENIZER}", model.name)),
    }
}

/// The folder whose held-out slice a tokenized model's quality is measured on when the
/// operator names no text (`--quality-text`): the trained model's, 64 KiB of PyTorch's
/// source it never saw.
pub const DEFAULT_QUALITY_FOLDER: &str = "torch_bytes";

/// A text's ids by the folder's tokenizer with no special tokens (what quality scores:
/// `tokenizer(text, add_special_tokens=False)`).
pub fn plain_ids(model: &DecoderModel, text: &str) -> Result<Vec<i64>, String> {
    let t = tokenizer_of(model)?;
    let e = t.encode(text, false).map_err(|e| format!("the quality text does not encode: {e}"))?;
    Ok(e.get_ids().iter().map(|&i| i as i64).collect())
}

/// `ids` as text, special tokens left out (a byte sequence that is not valid UTF-8 shows
/// U+FFFD). `None` for a model that writes no text.
pub fn decode(model: &DecoderModel, ids: &[i64]) -> Option<String> {
    match model.text_vocab()? {
        TextVocab::Bytes { .. } => Some(protocol::bytes_text(ids)),
        TextVocab::Tokenizer(_) => {
            let t = tokenizer_of(model).ok()?;
            let ids: Vec<u32> = ids.iter().filter_map(|&i| u32::try_from(i).ok()).collect();
            t.decode(&ids, true).ok()
        }
    }
}

/// `ids` cut before the first EOS of a tokenized model (transformers' `generate` stops
/// there; Gradless decodes on to measure the steps asked), with the step it came at.
pub fn until_eos<'a>(model: &DecoderModel, ids: &'a [i64]) -> (&'a [i64], Option<u32>) {
    let eos = model.tokenizer().map(|t| t.eos.as_slice()).unwrap_or(&[]);
    match ids.iter().position(|&i| eos.iter().any(|&e| e as i64 == i)) {
        Some(at) => (&ids[..at], Some(at as u32)),
        None => (ids, None),
    }
}

/// The text each generated token adds, for a page that shows it as it is decoded: the
/// sequence so far decoded whole, less what was already handed out. A piece that ends in
/// half a character (U+FFFD: a multi-byte character split across tokens) waits for the
/// next token, unless it is the last; nothing is handed out after EOS. The pieces add up to
/// the report's text.
pub struct Streamer<'a> {
    model: &'a DecoderModel,
    ids: Vec<i64>,
    shown: usize,
    ended: bool,
}

impl<'a> Streamer<'a> {
    /// `None` for a model that writes no text.
    pub fn new(model: &'a DecoderModel) -> Option<Streamer<'a>> {
        model.takes_text().then_some(Streamer { model, ids: vec![], shown: 0, ended: false })
    }

    /// The text `id` adds (possibly empty); `last`: the generation's last token, after which
    /// nothing waits for a character's other half.
    pub fn push(&mut self, id: i64, last: bool) -> String {
        if self.ended {
            return String::new();
        }
        self.ids.push(id);
        let (ids, eos) = until_eos(self.model, &self.ids);
        self.ended = eos.is_some();
        let text = decode(self.model, ids).unwrap_or_default();
        if text.ends_with('\u{fffd}') && !self.ended && !last {
            return String::new();
        }
        let piece = text.get(self.shown..).unwrap_or_default().to_string();
        self.shown = text.len().max(self.shown);
        piece
    }
}
