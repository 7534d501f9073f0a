//! The trained model's quality on text it never saw ([`Lab::quality`]): bits per byte of its
//! held-out slice under each setting a generation can change (the weights' dtype, int8 and
//! int4 linear layers, the KV cache's dtype), beside gzip -9 and a unigram byte model on the
//! same bytes. Run after the generation and outside its guard and figures, as the drift is.
//!
//! The slice is read in chunks of the model's context, each fed as `[BOS] + chunk[..-1]`
//! with every byte scored once, the log-probabilities summed in float64: the framing the
//! model was trained with, and the one `bench/train_bytes/eval.py` computes in PyTorch.

use std::io::Write;
use std::time::Instant;

use protocol::decoder::{DecoderSource, TextVocab};
use protocol::{DeviceKind, FailureKind, KvDtype, LinearQuant, Quality, QualityRow, RunFailure, RunSpec, WeightsDtype};
use sha2::{Digest, Sha256};
use tch::{Kind, Tensor};

use super::control::RunControl;
use super::Lab;
use crate::models::decoder::{trained_dir, KvCache, Logits};
use crate::torch_call::{catch_torch, failure, tch_device};
use crate::trace::Probe;

/// Chunks scored per forward pass (32 × 256 positions: logits of 8.5 MB in fp32 for a
/// 259-id vocabulary).
const CHUNKS_PER_PASS: i64 = 32;

/// One setting of the table.
struct Setting {
    label: String,
    weights: WeightsDtype,
    quant: LinearQuant,
    kv: KvDtype,
}

/// The weights' dtype of a quantized row on `device`: fp32 activations where the packed
/// kernel takes them, bf16 for int4 on CUDA (`crate::spec::weights_for`).
fn quant_weights(device: DeviceKind, quant: LinearQuant) -> WeightsDtype {
    crate::spec::weights_for(device, quant.kind(), WeightsDtype::Fp32)
}

/// The settings measured on `device`: the model as trained (fp32), its weights cast, its
/// linear layers quantized (fp32 activations; int4 on CUDA in bf16, the only dtype its
/// kernel takes), its cache stored in a half dtype.
fn settings(device: DeviceKind) -> Vec<Setting> {
    let row = |label: &str, weights, quant, kv| Setting { label: label.into(), weights, quant, kv };
    let int4 = |group_size: u32| LinearQuant::Int4 { group_size };
    let int8 = LinearQuant::Int8;
    let mut rows = vec![
        row("fp32 (as trained)", WeightsDtype::Fp32, LinearQuant::NONE, KvDtype::AsActivations),
        row("bf16 weights", WeightsDtype::Bf16, LinearQuant::NONE, KvDtype::AsActivations),
        row("fp16 weights", WeightsDtype::Fp16, LinearQuant::NONE, KvDtype::AsActivations),
        row("int8 linear layers", quant_weights(device, int8), int8, KvDtype::AsActivations),
    ];
    for g in protocol::GROUP_SIZES {
        let weights = quant_weights(device, int4(g));
        let label = match weights {
            WeightsDtype::Fp32 => format!("int4 linear layers, groups of {g}"),
            w => format!("int4 linear layers, groups of {g} ({} activations)", w.as_str()),
        };
        rows.push(row(&label, weights, int4(g), KvDtype::AsActivations));
    }
    rows.push(row("bf16 KV cache", WeightsDtype::Fp32, LinearQuant::NONE, KvDtype::Bf16));
    rows.push(row("fp16 KV cache", WeightsDtype::Fp32, LinearQuant::NONE, KvDtype::Fp16));
    rows
}

/// The rows measured on `device`: every setting, or a card's (`only`): each quantization
/// it lists in the dtype that quantization runs in here (fp32, or bf16 for int4 on CUDA),
/// the cache as the activations.
fn measured_rows(device: DeviceKind, only: Option<&[LinearQuant]>) -> Vec<Setting> {
    let wanted = |s: &Setting| {
        only.is_none_or(|q| q.contains(&s.quant) && s.weights == quant_weights(device, s.quant) && s.kv == KvDtype::AsActivations)
    };
    settings(device).into_iter().filter(wanted).collect()
}

/// The rows measured on `device` for a model of `config`, and those said instead: a group
/// size that does not split the model's layers (a small team model's hidden 64 and groups
/// of 128) is no setting of it. One rule for the measurement and its plan.
fn rows_for(device: DeviceKind, only: Option<&[LinearQuant]>, config: &protocol::decoder::DecoderConfig) -> (Vec<Setting>, Vec<String>) {
    let mut skipped = vec![];
    let rows = measured_rows(device, only)
        .into_iter()
        .filter(|s| {
            let fits = protocol::check_quant(s.quant.kind(), s.quant.group_size(), config);
            if let Err(e) = &fits {
                skipped.push(format!("{}: {}", s.label, e.message));
            }
            fits.is_ok()
        })
        .collect();
    (rows, skipped)
}

/// The text a quality measurement scores.
struct HeldOut {
    bytes: Vec<u8>,
    sha256: String,
    about: String,
    /// Occurrences of each byte value in the trained model's training text (its held-out
    /// slice only: the unigram baseline).
    counts: Option<Vec<u64>>,
}

/// The operator's text (`--quality-text`), read whole: at most this many bytes.
const MAX_QUALITY_TEXT: usize = 4 << 20;

fn read_operator_text(path: &std::path::Path) -> Result<HeldOut, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.is_empty() || bytes.len() > MAX_QUALITY_TEXT {
        return Err(format!("{} is {} bytes: the quality text must hold 1 to {MAX_QUALITY_TEXT}", path.display(), bytes.len()));
    }
    std::str::from_utf8(&bytes).map_err(|e| format!("{} is not UTF-8 text: {e}", path.display()))?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    Ok(HeldOut {
        sha256: format!("{:x}", Sha256::digest(&bytes)),
        about: format!("{name}, the operator's text (--quality-text), {} bytes", bytes.len()),
        bytes,
        counts: None,
    })
}

fn read_held_out(folder: &str) -> Result<HeldOut, String> {
    let dir = trained_dir(folder);
    let read = |name: &str| std::fs::read(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()));
    let bytes = read("heldout.txt")?;
    let manifest: serde_json::Value =
        serde_json::from_slice(&read("manifest.json")?).map_err(|e| format!("manifest.json: {e}"))?;
    let sha256 = format!("{:x}", Sha256::digest(&bytes));
    let listed = manifest["heldout"]["sha256"].as_str().unwrap_or_default();
    if sha256 != listed {
        return Err(format!("heldout.txt's SHA-256 is {sha256}, the manifest lists {listed}"));
    }
    let counts: serde_json::Value =
        serde_json::from_slice(&read("train_byte_counts.json")?).map_err(|e| format!("train_byte_counts.json: {e}"))?;
    let counts: Vec<u64> = counts["counts"]
        .as_array()
        .map(|a| a.iter().filter_map(|n| n.as_u64()).collect())
        .filter(|c: &Vec<u64>| c.len() == 256)
        .ok_or("train_byte_counts.json: `counts` must hold 256 whole numbers")?;
    let counts = Some(counts);
    let about = format!(
        "{} KiB of {} ({} files of PyTorch {}'s source), held out from training",
        bytes.len() / 1024,
        manifest["heldout"]["dir"].as_str().unwrap_or("?"),
        manifest["heldout"]["files"].as_u64().unwrap_or(0),
        "2.11.0",
    );
    Ok(HeldOut { bytes, sha256, about, counts })
}

/// The generation `spec` would be with `s`'s setting (its weights' dtype, quantization and
/// cache dtype, autocast off): what the row's model is built as, checked as a run of it
/// would be before it is built (a row the device refuses fails as the run would, instead
/// of in a kernel).
fn row_spec(spec: &RunSpec, s: &Setting) -> RunSpec {
    let mut row = spec.clone();
    row.autocast = protocol::Autocast::Off;
    row.advanced.weights = s.weights;
    let g = row.generate.get_or_insert_with(Default::default);
    g.weights = s.quant.kind();
    g.group_size = s.quant.group_size();
    g.kv_dtype = s.kv;
    g.quality = false;
    row
}

/// `spec` (a generation) with its linear layers quantized as `quant`, in the weights' dtype
/// that quantization runs in on `device` ([`crate::spec::weights_for`]: bf16 for int4 on
/// CUDA). What the cards that quantize build their runs with, as the quality rows are.
pub fn quantized(mut spec: RunSpec, quant: LinearQuant, device: DeviceKind) -> RunSpec {
    spec.advanced.weights = crate::spec::weights_for(device, quant.kind(), spec.advanced.weights);
    if let Some(g) = spec.generate.as_mut() {
        g.weights = quant.kind();
        g.group_size = quant.group_size();
    }
    spec
}

fn not_decoder(spec: &RunSpec) -> RunFailure {
    failure(FailureKind::Invalid, format!("{} is not a decoder", spec.model))
}

/// gzip -9 (DEFLATE level 9 in a gzip stream, no name, mtime 0) in bits per byte.
pub fn gzip_bits_per_byte(data: &[u8]) -> f64 {
    let mut gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(data);
    let out = gz.finish().unwrap_or_default();
    8.0 * out.len() as f64 / data.len().max(1) as f64
}

/// The cross-entropy of `data` under the byte frequencies `counts` (add-one smoothing).
pub fn unigram_bits_per_byte(counts: &[u64], data: &[u8]) -> f64 {
    let total: u64 = counts.iter().map(|c| c + 1).sum();
    let bits: f64 = data
        .iter()
        .map(|&b| -(((counts[b as usize] + 1) as f64) / total as f64).log2())
        .sum();
    bits / data.len().max(1) as f64
}

/// The text a quality measurement of `spec`'s model scores (`operator_text`: the server's
/// `--quality-text`), and its units: (the model, the text, its ids, the id that starts each
/// chunk, whether a tokenizer made them).
#[allow(clippy::type_complexity)]
fn quality_text(operator_text: Option<&std::path::Path>, spec: &RunSpec) -> Result<(&'static protocol::decoder::DecoderModel, HeldOut, Vec<i64>, i64, bool), RunFailure> {
    let model = spec
        .model
        .decoder()
        .ok_or_else(|| failure(FailureKind::Invalid, format!("{} is not a decoder", spec.model)))?;
    // The units scored and what starts each chunk: the trained model's bytes after its
    // BOS, or the tokens its tokenizer makes of the text (no special tokens) after BOS,
    // else EOS (lm-evaluation-harness's prefix where a model has no BOS).
    let (held, ids, prefix, tokenized) = match (&model.source, model.text_vocab()) {
        (DecoderSource::Trained { folder, .. }, Some(TextVocab::Bytes { bos })) => {
            let held = read_held_out(folder).map_err(|e| failure(FailureKind::Internal, format!("the held-out text: {e}")))?;
            let ids = held.bytes.iter().map(|&b| i64::from(b)).collect::<Vec<_>>();
            (held, ids, bos as i64, false)
        }
        (_, Some(TextVocab::Tokenizer(t))) => {
            let held = match operator_text {
                Some(path) => read_operator_text(path),
                None => read_held_out(crate::models::decoder::text::DEFAULT_QUALITY_FOLDER),
            }
            .map_err(|e| failure(FailureKind::Invalid, format!("the quality text: {e}")))?;
            let text = String::from_utf8_lossy(&held.bytes);
            let ids = crate::models::decoder::text::plain_ids(&model, &text).map_err(|e| failure(FailureKind::Invalid, e))?;
            let prefix = t.bos.or(t.eos.first().copied()).ok_or_else(|| {
                failure(FailureKind::Invalid, format!("{} has neither a BOS nor an EOS id in its configs to start each chunk with", spec.model))
            })?;
            (held, ids, prefix as i64, true)
        }
        _ => return Err(failure(FailureKind::Invalid, format!("{} reads no text to measure quality on", spec.model))),
    };
    Ok((model, held, ids, prefix, tokenized))
}

/// What the quality measurement of a generation of `spec` on `device` will score, said
/// before it runs (`GET /api/quality-plan`): the settings that apply to the model (the
/// table's rows) and the units of the text each one scores. Reads and encodes the text, on
/// no device: any thread may call it.
pub fn quality_plan(operator_text: Option<&std::path::Path>, spec: &RunSpec, device: DeviceKind) -> Result<protocol::QualityPlan, RunFailure> {
    let (model, held, ids, _, _) = quality_text(operator_text, spec)?;
    let settings = rows_for(device, None, &model.config).0.len() as u32;
    Ok(protocol::QualityPlan { settings, tokens: ids.len() as u64, text: held.about.clone(), text_bytes: held.bytes.len() as u64 })
}

impl Lab {
    /// The quality block for a run of `spec` on `device` (its model must be a trained one):
    /// every setting of the table, or only those whose quantization `only` lists (a card's
    /// two rows).
    pub(crate) fn quality(
        &mut self,
        spec: &RunSpec,
        device: DeviceKind,
        control: &RunControl,
        only: Option<&[LinearQuant]>,
    ) -> Result<Quality, RunFailure> {
        self.quality_reporting(spec, device, control, only, &mut |_, _, _| {})
    }

    /// [`Lab::quality`], telling `on` each setting as its measurement begins (what, settings
    /// done, settings): a table of nine settings takes most of a minute on a CPU.
    pub(crate) fn quality_reporting(
        &mut self,
        spec: &RunSpec,
        device: DeviceKind,
        control: &RunControl,
        only: Option<&[LinearQuant]>,
        on: &mut dyn FnMut(&str, u32, u32),
    ) -> Result<Quality, RunFailure> {
        let (model, held, ids, prefix, tokenized) = quality_text(self.config.quality_text.as_deref(), spec)?;
        // Chunks of the model's context (at most 1,024 units), each fed as the prefix + the
        // chunk but its last unit, every unit scored once; the last chunk may be shorter.
        let context = (model.config.max_position_embeddings as i64).min(1024);
        let units = ids.len() as i64;
        if units == 0 {
            return Err(failure(FailureKind::Invalid, "the quality text makes no tokens".to_string()));
        }
        let n = held.bytes.len() as i64;
        let tdev = tch_device(device);
        // (inputs, targets) per group of equal-length chunks: the whole chunks, then the tail.
        let groups: Vec<(Tensor, Tensor)> = catch_torch(|| {
            let whole = units / context;
            let tail = units % context;
            let all = Tensor::from_slice(&ids);
            let mut groups = vec![];
            for (start, rows, len) in [(0, whole, context), (whole * context, (tail > 0) as i64, tail)] {
                if rows == 0 {
                    continue;
                }
                let targets = all.narrow(0, start, rows * len).view([rows, len]);
                let first = Tensor::full([rows, 1], prefix, (Kind::Int64, tch::Device::Cpu));
                let inputs = Tensor::cat(&[&first, &targets.narrow(1, 0, len - 1)], 1);
                groups.push((inputs.to_device(tdev), targets.to_device(tdev)));
            }
            groups
        })?;
        let g = spec.generate.clone().unwrap_or_default();
        let mut rows = vec![];
        let (settings, skipped) = rows_for(device, only, &model.config);
        let total = settings.len() as u32;
        for (done, s) in settings.into_iter().enumerate() {
            control.check()?;
            on(&format!("Measuring quality: setting {} of {total} ({})", done + 1, s.label), done as u32, total);
            let start = Instant::now();
            let row = row_spec(spec, &s);
            if let Err(e) = crate::spec::check_device(&row, device, self.machine.compute_capability()) {
                return Err(failure(FailureKind::Internal, format!("the quality row `{}` cannot run on {}: {e}", s.label, device.as_str())));
            }
            let adv = row.advanced;
            let store = super::generate::kv_store(s.kv, s.weights);
            // Logits of chunks `from..from + take` through `decoder`: no grad, eval, the
            // row's cache dtype (a cache that stores keys and values in it, rounded as a
            // generation rounds them, and attends to them), no cache without one.
            let pass = |decoder: &crate::models::decoder::Decoder, inputs: &Tensor, from: i64, take: i64| {
                let _no_grad = tch::no_grad_guard();
                let mut cache = match store {
                    Some(_) => KvCache::new(protocol::KvCacheKind::Dynamic, decoder.config().num_hidden_layers as usize, 0).storing(store),
                    None => KvCache::Off,
                };
                decoder
                    .forward(&inputs.narrow(0, from, take), 0, &mut cache, false, Logits::All, &mut Probe::off())
                    .to_kind(Kind::Float)
            };
            // Σ −ln p over every unit, in float64.
            let score = |decoder: &crate::models::decoder::Decoder| {
                let mut nats = 0f64;
                for (inputs, targets) in &groups {
                    let chunks = inputs.size()[0];
                    let mut at = 0;
                    while at < chunks {
                        let take = CHUNKS_PER_PASS.min(chunks - at);
                        let logp = pass(decoder, inputs, at, take).log_softmax(-1, Kind::Float);
                        let picked = logp.gather(-1, &targets.narrow(0, at, take).unsqueeze(-1), false);
                        nats -= picked.to_kind(Kind::Double).sum(Kind::Double).double_value(&[]);
                        at += take;
                    }
                }
                nats
            };
            let (nats, kernel) = if s.quant.is_none() {
                let index = self.model_index_as(spec.model, device, context as u32, &adv)?;
                let decoder = self.model(index).net.as_decoder().ok_or_else(|| not_decoder(spec))?;
                (catch_torch(|| score(decoder))?, None)
            } else {
                // The packed kernels on the first chunk, then the slice through the same
                // quantized values dequantized (see `QualityRow::kernel_max_abs_logit_delta`).
                let packed = self.model_index_quant(spec.model, device, context as u32, &adv, s.quant)?;
                let first = {
                    let decoder = self.model(packed).net.as_decoder().ok_or_else(|| not_decoder(spec))?;
                    catch_torch(|| pass(decoder, &groups[0].0, 0, 1))?
                };
                let mut dense = catch_torch(|| crate::models::Model::build_in(spec.model, tdev, context as u32, s.weights))?;
                let decoder = dense.net.as_decoder_mut().ok_or_else(|| not_decoder(spec))?;
                catch_torch(|| decoder.dequantize_from(s.quant))?;
                let decoder = dense.net.as_decoder().ok_or_else(|| not_decoder(spec))?;
                let delta = catch_torch(|| (pass(decoder, &groups[0].0, 0, 1) - &first).abs().max().double_value(&[]))?;
                (catch_torch(|| score(decoder))?, Some(delta))
            };
            rows.push(QualityRow {
                this_run: spec.autocast == protocol::Autocast::Off
                    && spec.advanced.weights == s.weights
                    && g.quant() == s.quant
                    && g.kv_dtype == s.kv,
                setting: s.label,
                weights: s.weights,
                quant: s.quant.kind(),
                group_size: s.quant.group_size(),
                kv_dtype: s.kv,
                bits_per_byte: nats / std::f64::consts::LN_2 / n as f64,
                perplexity: tokenized.then(|| (nats / units as f64).exp()),
                kernel_max_abs_logit_delta: kernel,
                seconds: start.elapsed().as_secs_f64(),
            });
        }
        let mut not_measured = vec![match device {
            DeviceKind::Cuda => "fp8 e4m3 KV cache: its per-layer scale is set by a generation's prefill, and this one-pass measurement has none".into(),
            _ => "fp8 e4m3 KV cache: needs a CUDA device with fp8 (compute capability 8.9 or later)".into(),
        }];
        not_measured.extend(skipped);
        Ok(Quality {
            text: held.about,
            bytes: n as u64,
            sha256: held.sha256,
            method: match tokenized {
                false => format!(
                    "{} chunks of {context} bytes (the model's context), each fed as [BOS] + the chunk but its last byte, every byte scored once; Σ −log₂ p(byte) / bytes, summed in float64; eval, no grad, no autocast",
                    n / context
                ),
                true => format!(
                    "the text's {units} tokens (its tokenizer, no special tokens) in {} chunks of at most {context} (the model's context, at most 1,024), each fed as id {prefix} (BOS, else EOS) + the chunk but its last token, every token scored once; Σ −log₂ p(token) / the text's {n} bytes, summed in float64; perplexity exp(Σ −ln p / tokens); eval, no grad, no autocast",
                    (units + context - 1) / context
                ),
            },
            rows,
            gzip_bits_per_byte: gzip_bits_per_byte(&held.bytes),
            unigram_bits_per_byte: held.counts.as_ref().map(|c| unigram_bits_per_byte(c, &held.bytes)),
            tokens: tokenized.then_some(units as u64),
            not_measured,
        })
    }
}

#[cfg(test)]
mod tests {
    use protocol::{DeviceChoice, GenerateSpec, Limits, WeightQuant};

    use super::*;
    use crate::device::{CudaFacts, Machine};
    use crate::spec::check_spec;

    /// An sm_90 GPU as the spec check sees one (no libtorch asked: a pure check).
    fn h100() -> Machine {
        Machine {
            cpu_model: "test".into(),
            cpu_flags: vec![],
            cuda: Some(CudaFacts {
                name: "NVIDIA H100 80GB HBM3".into(),
                total_memory_bytes: Some(80 << 30),
                driver_version: None,
                cuda_version: None,
                cudnn_version: None,
                compute_capability: Some(90),
            }),
        }
    }

    /// A generation of the trained model with its quality block, on `device`.
    fn trained(device: DeviceKind) -> RunSpec {
        RunSpec {
            model: protocol::decoder::TRAINED_PRESET.parse().unwrap(),
            device: match device {
                DeviceKind::Cpu => DeviceChoice::Cpu,
                DeviceKind::Cuda => DeviceChoice::Cuda,
            },
            batch: 1,
            input_size: None,
            grad: protocol::GradMode::NoGrad,
            generate: Some(GenerateSpec {
                new_tokens: 64,
                prompt_text: Some("def forward(self, x):".into()),
                quality: true,
                ..Default::default()
            }),
            ..RunSpec::default()
        }
    }

    /// Issue 54, defect 1: on CUDA `torch._weight_int4pack_mm` takes bf16 only, and the quality
    /// table built its int4 rows in fp32, which the spec check refuses there (and the kernel
    /// would have failed on). Every row the quality path builds on CUDA, and the int4 run the
    /// card `int4-on-a-trained-model` builds (`quantized`), now pass the CUDA spec check.
    #[test]
    fn every_quality_row_and_the_cards_int4_run_pass_the_cuda_spec_check() {
        let machine = h100();
        let limits = Limits::default();
        let int4 = LinearQuant::Int4 { group_size: 32 };
        for device in [DeviceKind::Cpu, DeviceKind::Cuda] {
            let spec = trained(device);
            let all = measured_rows(device, None);
            assert_eq!(all.len(), settings(device).len());
            for s in &all {
                let row = row_spec(&spec, s);
                check_spec(row.clone(), &protocol::Catalog::built_in(), &limits, &machine).unwrap_or_else(|e| panic!("{device:?} `{}`: {e}", s.label));
                assert!(crate::spec::check_device(&row, device, Some(90)).is_ok(), "{}", s.label);
                if s.quant.kind() == WeightQuant::Int4 {
                    let want = if device == DeviceKind::Cuda { WeightsDtype::Bf16 } else { WeightsDtype::Fp32 };
                    assert_eq!(s.weights, want, "{device:?} `{}`", s.label);
                }
            }
            // The card's two rows: fp32, and int4 in the dtype it runs in here, which is the
            // row the card looks its figure up by.
            let card = measured_rows(device, Some(&[LinearQuant::NONE, int4]));
            assert_eq!(card.len(), 2, "{device:?}");
            assert_eq!(card[0].weights, WeightsDtype::Fp32);
            assert_eq!(card[1].weights, crate::spec::weights_for(device, WeightQuant::Int4, WeightsDtype::Fp32));
            // The card's int4 generation.
            let run = quantized(spec.clone(), int4, device);
            check_spec(run.clone(), &protocol::Catalog::built_in(), &limits, &machine).unwrap_or_else(|e| panic!("{device:?} the card's int4 run: {e}"));
            assert_eq!(run.generate.as_ref().unwrap().quant(), int4);
        }
        // What the card built before (fp32 + int4) is refused on CUDA, naming the field:
        // the check above is the one that would have stopped the visit.
        let mut old = trained(DeviceKind::Cuda);
        let g = old.generate.as_mut().unwrap();
        g.weights = WeightQuant::Int4;
        g.group_size = Some(32);
        let e = check_spec(old, &protocol::Catalog::built_in(), &limits, &machine).unwrap_err();
        assert_eq!(e.field, "generate.quant", "{e}");
    }
}
