//! A decoder LLM of any family Gradless builds ([`family`]: Llama, Mistral, Qwen2, Qwen3,
//! Gemma 3, Qwen3-MoE, Mixtral, Phi-3), written statement by statement as transformers runs it:
//! token embedding (× √hidden for Gemma); per layer the family's block ([`block`]); final
//! RMSNorm; LM head (tied to the embedding when the config says so).
//!
//! The decoder owns only its weights. The KV cache ([`KvCache`]) belongs to the caller and
//! is passed to every [`Decoder::forward`], so a cached model never holds a generation's
//! state (the worker's leak check would read a cache kept inside it as a leak) and the
//! generate loop lives outside the model (`crate::lab::generate`).
//!
//! Variable names are transformers' (`model.layers.0.self_attn.q_proj.weight`, a family's
//! experts as its checkpoints name them), so a `model.safetensors` written by
//! `save_pretrained` loads by name; a team folder's file is found through the folder
//! `crate::team` noted in its [`DecoderSource::Team`] ([`weights_dir`]).

use std::path::PathBuf;
use std::sync::Mutex;

use protocol::decoder::{DecoderConfig, DecoderModel, DecoderSource, LayerType};
use protocol::LinearQuant;
use protocol::SdpBackend;
use tch::nn::ModuleT;
use tch::{Kind, Tensor};

use super::Net;
use crate::trace::Probe;

mod block;
mod cache;
pub mod family;
pub mod gemma3;
pub mod linear;
pub mod llama;
pub mod mistral;
pub mod mixtral;
mod nn;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_moe;
pub mod registry;
pub mod text;
pub mod weights;
pub use cache::KvCache;
pub use family::{Family, Layout};
pub use registry::{read_config, FAMILIES};
pub use linear::Linear;

use block::{Dims, Layer, Mlp, Step};

/// How a weight's `[out, in]` elements lie in memory.
///
/// A decode step at batch 1 multiplies one row by every weight: a matrix-vector product
/// that streams the whole weight from memory, and at a small model's sizes the step is
/// mostly that. On a CPU in fp32, PyTorch's MKL reads a column-major weight
/// (`W.t().contiguous().t()`, strides `[1, out]`, so `linear(x, W)` is `x @ Wt` with `Wt`
/// contiguous: MKL's non-transposed `sgemv`) at 1.3–2.5× the speed of the row-major one
/// where the weights are beyond the cache (`bench/layout.py` on a 2-core AMD EPYC VM; no
/// slower at any row count in fp32; on a Xeon with 260 MiB of L3 the two read cached
/// weights at the same ~27 GB/s, and past its cache column-major is 0.67–0.79× at 64 rows
/// and 0.87–1.22× at one: docs/generation.md has the table). In bf16 and fp16, and under
/// autocast (whose casts keep the strides), column-major
/// was 1.6–2.9× slower on the AMD VM, so those runs keep PyTorch's row-major default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightLayout {
    /// PyTorch's default: contiguous `[out, in]`.
    RowMajor,
    /// Contiguous `[in, out]`, seen as `[out, in]`.
    ColumnMajor,
}

impl WeightLayout {
    /// The layout a run uses: column-major for fp32 weights on the CPU with autocast off,
    /// row-major otherwise (CUDA included: cuBLAS takes either, and PyTorch's default is
    /// what a reader's model has).
    pub fn for_run(device: tch::Device, kind: Kind, autocast: bool) -> WeightLayout {
        match (device, kind, autocast) {
            (tch::Device::Cpu, Kind::Float, false) => WeightLayout::ColumnMajor,
            _ => WeightLayout::RowMajor,
        }
    }

    /// The layout of a 2-D tensor: `None` when it is neither (a view with other strides).
    /// A view of some rows of a larger matrix in a layout (a stacked weight's part, see
    /// [`Decoder::lay_out`]) is in that layout.
    pub fn of(t: &Tensor) -> Option<WeightLayout> {
        if t.dim() != 2 {
            return None;
        }
        let (size, stride) = (t.size(), t.stride());
        if stride[1] == 1 && stride[0] >= size[1] {
            Some(WeightLayout::RowMajor)
        } else if stride[0] == 1 && stride[1] >= size[0] {
            Some(WeightLayout::ColumnMajor)
        } else {
            None
        }
    }
}

/// The decoder's weights and the rotary frequencies (derived from the config, not a weight).
#[derive(Debug)]
pub struct Decoder {
    config: DecoderConfig,
    embed: Tensor,
    /// Gemma's √hidden (fp32, 0-d, on the model's device), cast to the weights' dtype
    /// before it multiplies the embeddings, as transformers casts it.
    embed_scale: Option<Tensor>,
    layers: Vec<Layer>,
    norm: nn::Norm,
    /// `None` when the head is tied to the embedding.
    lm_head: Option<Tensor>,
    /// `1 / theta^(2i/d)`, fp32, with Llama 3's or linear scaling when the config has it:
    /// the full layers'.
    inv_freq: Tensor,
    /// The sliding layers' own frequencies (Gemma 3's local base).
    inv_freq_local: Option<Tensor>,
    /// When on, each MoE layer appends the distinct experts its tokens were routed to (see
    /// [`Decoder::log_experts`]).
    expert_log: Mutex<Option<Vec<Vec<u32>>>>,
}

/// Where a pass's first new token sits: a number, or a one-element int64 tensor on the
/// model's device (CUDA graph replay: the captured kernels read it from device memory, so
/// one graph serves every step while the loop advances the tensor).
#[derive(Clone, Copy, Debug)]
pub enum Position<'a> {
    At(i64),
    Tensor(&'a Tensor),
}

/// Which positions' logits a forward pass computes: generation needs only the last
/// (transformers' `logits_to_keep=1`); the correctness test compares them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    Last,
    All,
}

impl Decoder {
    /// Builds the decoder's variables in `p` (a fresh VarStore's root) with transformers'
    /// initialisation: normal(0, initializer_range) for matrices and embeddings, zero
    /// biases, unit norms (Gemma's: zero, as they scale by 1 + weight). Names follow the
    /// family's checkpoints ([`Family::layout`]).
    pub fn new(p: &tch::nn::Path, config: &DecoderConfig) -> Decoder {
        Decoder::with_init(p, config, nn::MatrixInit::Normal(config.initializer_range))
    }

    /// [`Decoder::new`] with its matrices allocated and left unwritten, for weights read
    /// next from a checkpoint ([`build`]).
    fn unwritten(p: &tch::nn::Path, config: &DecoderConfig) -> Decoder {
        Decoder::with_init(p, config, nn::MatrixInit::Unwritten)
    }

    fn with_init(p: &tch::nn::Path, config: &DecoderConfig, normal: nn::MatrixInit) -> Decoder {
        let layout = registry::family(config.architecture).layout();
        let h = config.hidden_size as i64;
        let vocab = config.vocab_size as i64;
        let m = p / "model";
        let embed = normal.var(&(&m / "embed_tokens"), "weight", &[vocab, h]);
        let layers = (0..config.num_hidden_layers as usize)
            .map(|i| Layer::new(&(&m / "layers" / i as i64), i, config, layout, normal))
            .collect();
        let norm = nn::Norm::new(&m / "norm", h, config.rms_norm_eps, config.architecture.gemma_style());
        let lm_head = (!config.tie_word_embeddings)
            .then(|| normal.var(&(p / "lm_head"), "weight", &[vocab, h]));
        let device = p.device();
        let freqs = |theta: f64, scaled: bool| Tensor::from_slice(&inv_freq(config, theta, scaled)).to_device(device);
        let inv_freq_local = config
            .rope_local_theta
            .filter(|_| config.layers_of(LayerType::Sliding) > 0)
            .map(|theta| freqs(theta, false));
        let embed_scale = config
            .architecture
            .gemma_style()
            .then(|| Tensor::from((config.hidden_size as f64).sqrt() as f32).to_device(device));
        Decoder {
            config: config.clone(),
            embed,
            embed_scale,
            layers,
            norm,
            lm_head,
            inv_freq: freqs(config.rope_theta, true),
            inv_freq_local,
            expert_log: Mutex::new(None),
        }
    }

    /// Gives every weight a matmul reads (the blocks' dense linear layers, the routers, the
    /// LM head or the tied embedding) the memory layout `layout` asks for. The logical
    /// shape stays `[out, in]` and the VarStore holds the same variables; only the strides
    /// change, in place (the old storage is freed weight by weight). A weight already laid
    /// out so is left alone. A layer's q, k and v (when dense, without biases), and each
    /// gated MLP's gate and up, are stacked into one tensor whose rows their variables
    /// view: the same bytes, one allocation, and one matmul for all of them where no
    /// gradient is recorded (a grad-mode pass multiplies by each variable, so autograd sees
    /// the model's parameters as a reader's model has them).
    pub fn lay_out(&mut self, layout: WeightLayout) {
        let _no_grad = tch::no_grad_guard();
        nn::lay_out_weight(self.lm_head.as_ref().unwrap_or(&self.embed), layout);
        self.layers.iter_mut().for_each(|layer| layer.lay_out(layout));
    }

    /// [`Decoder::lay_out`] as [`WeightLayout::for_run`] chooses for a run on this
    /// decoder's device and dtype, autocast on or off.
    pub fn lay_out_for_run(&mut self, autocast: bool) {
        let layout = WeightLayout::for_run(self.embed.device(), self.embed.kind(), autocast);
        self.lay_out(layout);
    }

    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// A fresh cache of `kind` for this decoder, for `capacity` positions when static.
    pub fn cache(&self, kind: protocol::KvCacheKind, capacity: i64) -> KvCache {
        KvCache::new(kind, self.layers.len(), capacity)
    }

    /// Quantizes the blocks' linear layers as `q` says (see [`linear`]), every expert's
    /// included, one at a time, in place: each dense weight leaves the VarStore `vs` it was
    /// built in (and is freed) and its quantized tensors join it under
    /// `…_proj.weight_int8` / `.scales` (int8) or `…_proj.weight_int4pack` /
    /// `.scales_and_zeros` (int4), not trainable. The embedding, the norms, the biases, the
    /// routers and the LM head stay as they are. A quantized decoder is quantized once: a
    /// second call changes nothing.
    pub fn quantize(&mut self, vs: &tch::nn::VarStore, q: LinearQuant) {
        if q.is_none() {
            return;
        }
        for layer in self.layers.iter_mut() {
            for (prefix, slot) in layer.linears_mut() {
                let Some(dense) = slot.dense() else { continue };
                let quantized = linear::quantize(dense, q);
                let mut vars = vs.variables_.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(old) = vars.named_variables.remove(&format!("{prefix}.weight")) {
                    let ptr = old.data_ptr();
                    vars.trainable_variables.retain(|v| v.tensor.data_ptr() != ptr);
                }
                for (n, t) in quantized.named(&prefix) {
                    vars.named_variables.insert(n, t.shallow_clone());
                }
                drop(vars);
                // The dense weight's last holder goes here: its storage is freed.
                *slot = quantized;
            }
        }
    }

    /// Replaces each of the blocks' linear layers by its quantized values as a dense weight
    /// ([`linear::dequantized`]): the numbers a quantized decoder computes with, run by a
    /// dense matmul. For long scoring passes only; a generation uses [`Decoder::quantize`].
    pub fn dequantize_from(&mut self, q: LinearQuant) {
        if q.is_none() {
            return;
        }
        for layer in self.layers.iter_mut() {
            for (_, slot) in layer.linears_mut() {
                let Some(dense) = slot.dense() else { continue };
                *slot = linear::Linear::Dense(linear::dequantized(dense, q));
            }
        }
    }

    /// The weights measured from the tensors: the blocks' linear layers (as stored, packed
    /// and with their scales when quantized; every expert's) and the rest (embedding,
    /// norms, biases, routers, head).
    pub fn weights_breakdown(&self) -> (u64, u64) {
        let mut other = nn::tensor_bytes(&self.embed) + nn::tensor_bytes(&self.norm.weight);
        other += self.lm_head.as_ref().map_or(0, nn::tensor_bytes);
        let mut linear = 0;
        for l in &self.layers {
            let (a, b) = l.bytes();
            linear += a;
            other += b;
        }
        (linear, other)
    }

    /// A mixture of experts' bytes, measured from the tensors as stored: every expert of
    /// every layer, and one expert (the first MoE layer's first). `None` for a dense
    /// decoder.
    pub fn expert_bytes(&self) -> Option<(u64, u64)> {
        let mut all = 0;
        let mut one = None;
        for l in &self.layers {
            if let Mlp::Moe(m) = &l.mlp {
                all += m.experts.iter().map(|e| e.bytes()).sum::<u64>();
                one = one.or(m.experts.first().map(|e| e.bytes()));
            }
        }
        one.map(|one| (all, one))
    }

    /// From now on (`true`) each pass appends, per MoE layer, the distinct experts its
    /// tokens were routed to, until [`Decoder::take_expert_log`]; `false` stops it.
    pub fn log_experts(&self, on: bool) {
        *self.expert_log.lock().unwrap_or_else(|e| e.into_inner()) = on.then(Vec::new);
    }

    /// What was logged since the log was started or last taken: per MoE layer and pass,
    /// the distinct experts touched (ids in order). The log stays on.
    pub fn take_expert_log(&self) -> Vec<Vec<u32>> {
        let mut log = self.expert_log.lock().unwrap_or_else(|e| e.into_inner());
        log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Each layer's type, in order.
    pub fn layer_types(&self) -> Vec<LayerType> {
        self.layers.iter().map(|l| l.kind).collect()
    }

    /// The forward pass over `ids` (`[batch, tokens]`, int64) whose first token sits at
    /// `position`, reading and extending `cache`. Returns logits `[batch, positions, vocab]`
    /// for the last position or for all. `train` turns attention dropout on.
    pub fn forward(
        &self,
        ids: &Tensor,
        position: i64,
        cache: &mut KvCache,
        train: bool,
        logits: Logits,
        probe: &mut Probe<'_>,
    ) -> Tensor {
        self.forward_at(ids, Position::At(position), cache, train, logits, probe, None)
    }

    /// [`Decoder::forward`] with the position as a number or a device tensor, and, when
    /// `sdp` is given, the SDPA backend the first layer runs written into it (asked of
    /// libtorch with that layer's own query, key, value and mask; `None` when it cannot
    /// say). A masked static cache ([`KvCache::static_masked`]) attends to its whole
    /// capacity under a mask (a sliding layer's window cut into it) and takes either kind
    /// of position.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_at(
        &self,
        ids: &Tensor,
        at: Position<'_>,
        cache: &mut KvCache,
        train: bool,
        logits: Logits,
        probe: &mut Probe<'_>,
        mut sdp: Option<&mut Option<SdpBackend>>,
    ) -> Tensor {
        let tokens = ids.size()[1];
        let device = ids.device();
        let mut x = Tensor::embedding(&self.embed, ids, -1, false, false);
        if let Some(s) = &self.embed_scale {
            x = x * s.to_kind(self.embed.kind());
        }
        probe.mark("model.embed_tokens", &x, || 0);
        // The positions of the new tokens, int64 `[tokens]`.
        let positions = match at {
            Position::At(p) => Tensor::arange_start(p, p + tokens, (Kind::Int64, device)),
            Position::Tensor(t) => t.view([-1]) + Tensor::arange(tokens, (Kind::Int64, device)),
        };
        // cos and sin for these positions, computed once per pass in fp32 and cast to the
        // hidden states' dtype, as transformers' rotary embeddings do (per layer type when
        // the sliding layers have their own base); sin with its first half negated, as
        // the layers' `rope` takes it.
        let cos_sin = |inv_freq: &Tensor| {
            let freqs = positions.to_kind(Kind::Float).outer(inv_freq);
            let emb = Tensor::cat(&[&freqs, &freqs], -1);
            let sin = freqs.sin();
            let signed = Tensor::cat(&[&(-&sin), &sin], -1);
            (emb.cos().to_kind(x.kind()), signed.to_kind(x.kind()))
        };
        let (cos, sin) = cos_sin(&self.inv_freq);
        let local = self.inv_freq_local.as_ref().map(cos_sin);
        // A masked cache: position j is visible to new token i when j <= its position
        // (the past, itself, and nothing past the current length), `[tokens, capacity]`;
        // in a sliding layer also when it is within the window.
        let mask = cache.capacity_mask(&positions);
        let mask_sliding = match (&mask, self.config.sliding_window) {
            (Some(m), Some(w)) => {
                let capacity = m.size()[1];
                let all = Tensor::arange(capacity, (Kind::Int64, device)).unsqueeze(0);
                let near = (positions.unsqueeze(1) - all).lt(w as i64);
                Some(m.logical_and(&near))
            }
            _ => None,
        };
        let start = match at {
            Position::At(p) => p,
            Position::Tensor(_) => 0,
        };
        let dims = Dims::of(&self.config);
        let mut log = self.expert_log.lock().unwrap_or_else(|e| e.into_inner());
        for (i, layer) in self.layers.iter().enumerate() {
            let flops = || {
                let context = start + tokens;
                self.config
                    .forward_flops(ids.size()[0] as u64, tokens as u64, context as u64, 0)
                    / self.config.num_hidden_layers as u64
            };
            let step = Step {
                rope: (&cos, &sin),
                rope_local: local.as_ref().map(|(c, s)| (c, s)),
                position: start,
                positions: &positions,
                mask: mask.as_ref(),
                mask_sliding: mask_sliding.as_ref(),
                train,
            };
            let ask = if i == 0 { sdp.as_deref_mut() } else { None };
            x = layer.forward(i, x, &dims, &step, cache, ask, log.as_mut());
            probe.mark(&layer.name, &x, flops);
        }
        drop(log);
        let h = self.norm.apply(&x);
        drop(x);
        let h = match logits {
            Logits::Last => h.narrow(1, tokens - 1, 1),
            Logits::All => h,
        };
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let out = h.linear::<&Tensor>(head, None);
        probe.mark("lm_head", &out, || {
            2 * out.numel() as u64 * self.config.hidden_size as u64
        });
        out
    }
}

/// The rotary frequencies for base `theta`, as transformers computes them (Llama 3's
/// frequency-dependent scaling, or linear scaling, when `scaled` and the config has it).
fn inv_freq(c: &DecoderConfig, theta: f64, scaled: bool) -> Vec<f32> {
    let d = c.head_dim as usize;
    (0..d / 2)
        .map(|i| {
            // transformers computes `theta ** (2i / d)` in fp32.
            let exponent = (2 * i) as f32 / d as f32;
            let f = 1.0 / (theta as f32).powf(exponent);
            if !scaled {
                return f;
            }
            if let Some(factor) = c.rope_linear_factor {
                return f / factor as f32;
            }
            let Some(r) = c.rope_llama3 else {
                return f;
            };
            let (f, factor) = (f as f64, r.factor);
            let old = r.original_max_position_embeddings as f64;
            let low_wavelen = old / r.low_freq_factor;
            let high_wavelen = old / r.high_freq_factor;
            let wavelen = 2.0 * std::f64::consts::PI / f;
            let scaled = if wavelen > low_wavelen { f / factor } else { f };
            let medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            if medium {
                let smooth = (old / wavelen - r.low_freq_factor)
                    / (r.high_freq_factor - r.low_freq_factor);
                ((1.0 - smooth) * scaled / factor + smooth * scaled) as f32
            } else {
                scaled as f32
            }
        })
        .collect()
}

/// A forward run on a decoder is a pass over the whole prompt without a cache, with every
/// position's logits (what `model(ids)` computes).
impl Net for Decoder {
    fn forward_probed(&self, input: &Tensor, train: bool, probe: &mut Probe<'_>) -> Tensor {
        self.forward(input, 0, &mut KvCache::Off, train, Logits::All, probe)
    }

    fn as_decoder(&self) -> Option<&Decoder> {
        Some(self)
    }

    fn as_decoder_mut(&mut self) -> Option<&mut Decoder> {
        Some(self)
    }
}

impl ModuleT for Decoder {
    fn forward_t(&self, input: &Tensor, train: bool) -> Tensor {
        self.forward_probed(input, train, &mut Probe::off())
    }
}

/// The folder a served decoder's weights are read from, when it has one: a team folder
/// with `model.safetensors` or `model.safetensors.index.json`, or the trained model's
/// folder in [`trained_dir`].
pub fn weights_dir(model: &DecoderModel) -> Option<PathBuf> {
    match &model.source {
        DecoderSource::Trained { folder, .. } => Some(trained_dir(folder)),
        DecoderSource::Team { weights: true, .. } => team_folder(model),
        _ => None,
    }
}

/// The folder a served team decoder was read from (its [`DecoderSource::Team`]'s `dir`,
/// noted by `crate::team` when it read the folder).
pub fn team_folder(model: &DecoderModel) -> Option<PathBuf> {
    match &model.source {
        DecoderSource::Team { dir, .. } => dir.clone(),
        _ => None,
    }
}

/// The folder of a model this project trained and ships: `$GRADLESS_TRAINED_DIR/{folder}`
/// when set (a bundle copied elsewhere), else the repository's `models/{folder}`, where the
/// build found the sources.
pub fn trained_dir(folder: &str) -> PathBuf {
    let root = std::env::var_os("GRADLESS_TRAINED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models")));
    root.join(folder)
}

/// Builds the served decoder `name` in `vs`: random seeded weights for a folder without
/// any, or its weights read by name ([`weights::WeightFiles`]: one file or the shards of
/// an index; fp32, bf16 or fp16 on disk, stored as the VarStore's fp32 until the run's
/// weights dtype converts them). Panics (caught as a run failure by the lab's
/// `catch_torch`) when the decoder is not served or its weights do not load: a model whose
/// files are there never runs on random weights.
pub fn build(model: &DecoderModel, vs: &tch::nn::VarStore) -> Box<dyn Net> {
    let name = &model.name;
    let dir = weights_dir(model);
    // Weights about to be read are allocated, not initialised: drawing random ones (or
    // writing zeros) first would cost as much as reading them.
    let decoder = match dir {
        Some(_) => Decoder::unwritten(&vs.root(), &model.config),
        None => Decoder::new(&vs.root(), &model.config),
    };
    if let Some(dir) = dir {
        let loaded = weights::WeightFiles::find(&dir).and_then(|w| {
            w.ok_or_else(|| "its weights are gone from the folder".to_string())?.load_into(vs)
        });
        if let Err(e) = loaded {
            panic!("could not load the weights of `{name}` from {}: {e}", dir.display());
        }
    }
    Box::new(decoder)
}
