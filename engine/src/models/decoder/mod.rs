//! A Llama-style decoder LLM (Llama, Qwen2, Mistral shapes), written statement by statement
//! as transformers' `LlamaForCausalLM` runs it: token embedding; per layer RMSNorm →
//! attention (rotary position embeddings, grouped-query attention through
//! `scaled_dot_product_attention`) → residual → RMSNorm → SwiGLU MLP → residual; final
//! RMSNorm; LM head (tied to the embedding when the config says so).
//!
//! The decoder owns only its weights. The KV cache ([`KvCache`]) belongs to the caller and
//! is passed to every [`Decoder::forward`], so a cached model never holds a generation's
//! state (the worker's leak check would read a cache kept inside it as a leak) and the
//! generate loop lives outside the model (`crate::lab::generate`).
//!
//! Variable names are transformers' (`model.layers.0.self_attn.q_proj.weight`), so a
//! `model.safetensors` written by `save_pretrained` loads by name; a team folder's file is
//! found through the folders `crate::team::load_dir` registers here ([`team_weights`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::RwLock;

use protocol::decoder::{DecoderConfig, DecoderModel, DecoderSource};
use protocol::LinearQuant;
use protocol::SdpBackend;
use tch::nn::{self, ModuleT};
use tch::{Kind, Tensor};

use super::Net;
use crate::trace::Probe;

mod cache;
pub mod linear;
pub use cache::KvCache;
pub use linear::Linear;

/// One decoder layer's weights.
#[derive(Debug)]
struct Layer {
    input_norm: Tensor,
    q: (Linear, Option<Tensor>),
    k: (Linear, Option<Tensor>),
    v: (Linear, Option<Tensor>),
    o: Linear,
    post_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
    /// The probe's name for this layer (`model.layers.3`).
    name: String,
}

/// The decoder's weights and the rotary frequencies (derived from the config, not a weight).
#[derive(Debug)]
pub struct Decoder {
    config: DecoderConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    /// `None` when the head is tied to the embedding.
    lm_head: Option<Tensor>,
    /// `1 / theta^(2i/d)`, fp32, with Llama 3's scaling when the config has it.
    inv_freq: Tensor,
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
    /// biases, unit norms.
    pub fn new(p: &nn::Path, config: &DecoderConfig) -> Decoder {
        let std = config.initializer_range;
        let h = config.hidden_size as i64;
        let q_out = (config.num_attention_heads * config.head_dim) as i64;
        let kv_out = (config.num_key_value_heads * config.head_dim) as i64;
        let inter = config.intermediate_size as i64;
        let vocab = config.vocab_size as i64;
        let normal = nn::Init::Randn {
            mean: 0.0,
            stdev: std,
        };
        let m = p / "model";
        let embed = (&m / "embed_tokens").var("weight", &[vocab, h], normal);
        let proj = |p: nn::Path, out: i64, inp: i64, bias: bool| {
            let w = p.var("weight", &[out, inp], normal);
            let b = bias.then(|| p.var("bias", &[out], nn::Init::Const(0.0)));
            (Linear::Dense(w), b)
        };
        let layers = (0..config.num_hidden_layers as i64)
            .map(|i| {
                let l = &m / "layers" / i;
                let attn = &l / "self_attn";
                let mlp = &l / "mlp";
                let bias = config.attention_bias;
                Layer {
                    input_norm: (&l / "input_layernorm").var("weight", &[h], nn::Init::Const(1.0)),
                    q: proj(&attn / "q_proj", q_out, h, bias),
                    k: proj(&attn / "k_proj", kv_out, h, bias),
                    v: proj(&attn / "v_proj", kv_out, h, bias),
                    o: proj(&attn / "o_proj", h, q_out, false).0,
                    post_norm: (&l / "post_attention_layernorm").var(
                        "weight",
                        &[h],
                        nn::Init::Const(1.0),
                    ),
                    gate: proj(&mlp / "gate_proj", inter, h, false).0,
                    up: proj(&mlp / "up_proj", inter, h, false).0,
                    down: proj(&mlp / "down_proj", h, inter, false).0,
                    name: format!("model.layers.{i}"),
                }
            })
            .collect();
        let norm = (&m / "norm").var("weight", &[h], nn::Init::Const(1.0));
        let lm_head = (!config.tie_word_embeddings)
            .then(|| (p / "lm_head").var("weight", &[vocab, h], normal));
        let inv_freq = Tensor::from_slice(&inv_freq(config)).to_device(p.device());
        Decoder {
            config: config.clone(),
            embed,
            layers,
            norm,
            lm_head,
            inv_freq,
        }
    }

    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// Quantizes the blocks' linear layers as `q` says (see [`linear`]), one at a time, in
    /// place: each dense weight leaves the VarStore `vs` it was built in (and is freed) and
    /// its quantized tensors join it under `…_proj.weight_int8` / `.scales` (int8) or
    /// `…_proj.weight_int4pack` / `.scales_and_zeros` (int4), not trainable. The embedding,
    /// the norms, the biases and the LM head stay as they are. A quantized decoder
    /// is quantized once: a second call changes nothing.
    pub fn quantize(&mut self, vs: &nn::VarStore, q: LinearQuant) {
        if q.is_none() {
            return;
        }
        for layer in self.layers.iter_mut() {
            let name = layer.name.clone();
            let slots: [(&str, &mut Linear); 7] = [
                ("self_attn.q_proj", &mut layer.q.0),
                ("self_attn.k_proj", &mut layer.k.0),
                ("self_attn.v_proj", &mut layer.v.0),
                ("self_attn.o_proj", &mut layer.o),
                ("mlp.gate_proj", &mut layer.gate),
                ("mlp.up_proj", &mut layer.up),
                ("mlp.down_proj", &mut layer.down),
            ];
            for (what, slot) in slots {
                let Some(dense) = slot.dense() else { continue };
                let quantized = linear::quantize(dense, q);
                let prefix = format!("{name}.{what}");
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

    /// The weights measured from the tensors: the blocks' linear layers (as stored, packed
    /// and with their scales when quantized) and the rest (embedding, norms, biases, head).
    pub fn weights_breakdown(&self) -> (u64, u64) {
        let bytes = |t: &Tensor| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64;
        let mut linear = 0;
        let mut other = bytes(&self.embed) + bytes(&self.norm);
        other += self.lm_head.as_ref().map_or(0, bytes);
        for l in &self.layers {
            for (w, b) in [&l.q, &l.k, &l.v] {
                linear += w.bytes();
                other += b.as_ref().map_or(0, bytes);
            }
            linear += l.o.bytes() + l.gate.bytes() + l.up.bytes() + l.down.bytes();
            other += bytes(&l.input_norm) + bytes(&l.post_norm);
        }
        (linear, other)
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
    /// capacity under a mask and takes either kind of position.
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
        probe.mark("model.embed_tokens", &x, || 0);
        // The positions of the new tokens, int64 `[tokens]`.
        let positions = match at {
            Position::At(p) => Tensor::arange_start(p, p + tokens, (Kind::Int64, device)),
            Position::Tensor(t) => t.view([-1]) + Tensor::arange(tokens, (Kind::Int64, device)),
        };
        // cos and sin for these positions, computed once per pass in fp32 and cast to the
        // hidden states' dtype, as transformers' LlamaRotaryEmbedding does.
        let (cos, sin) = {
            let freqs = positions.to_kind(Kind::Float).outer(&self.inv_freq);
            let emb = Tensor::cat(&[&freqs, &freqs], -1);
            (emb.cos().to_kind(x.kind()), emb.sin().to_kind(x.kind()))
        };
        // A masked cache: position j is visible to new token i when j <= its position
        // (the past, itself, and nothing past the current length), `[tokens, capacity]`.
        let mask = cache.capacity_mask(&positions);
        let start = match at {
            Position::At(p) => p,
            Position::Tensor(_) => 0,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let flops = || {
                let context = start + tokens;
                self.config
                    .forward_flops(ids.size()[0] as u64, tokens as u64, context as u64, 0)
                    / self.config.num_hidden_layers as u64
            };
            let step = Step {
                cos: &cos,
                sin: &sin,
                position: start,
                positions: &positions,
                mask: mask.as_ref(),
                train,
            };
            let ask = if i == 0 { sdp.as_deref_mut() } else { None };
            x = self.layer(layer, i, x, &step, cache, ask);
            probe.mark(&layer.name, &x, flops);
        }
        let h = rms_norm(&x, &self.norm, self.config.rms_norm_eps);
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

    fn layer(
        &self,
        l: &Layer,
        index: usize,
        x: Tensor,
        step: &Step<'_>,
        cache: &mut KvCache,
        sdp: Option<&mut Option<SdpBackend>>,
    ) -> Tensor {
        let (cos, sin, train) = (step.cos, step.sin, step.train);
        let c = &self.config;
        let (b, t) = (x.size()[0], x.size()[1]);
        let (heads, kv_heads, d) = (
            c.num_attention_heads as i64,
            c.num_key_value_heads as i64,
            c.head_dim as i64,
        );
        let attn_out = {
            let h = rms_norm(&x, &l.input_norm, c.rms_norm_eps);
            let project = |w: &(Linear, Option<Tensor>), n: i64| {
                w.0.apply(&h, w.1.as_ref())
                    .view([b, t, n, d])
                    .transpose(1, 2)
            };
            let q = project(&l.q, heads);
            let k = project(&l.k, kv_heads);
            let v = project(&l.v, kv_heads);
            drop(h);
            let q = rope(q, cos, sin);
            let k = rope(k, cos, sin);
            let (k, v) = cache.update(index, k, v, step.position, step.positions);
            let dropout = if train { c.attention_dropout } else { 0.0 };
            let a = match step.mask {
                // The causal mask is needed only when several new positions attend to each
                // other (the prefill, or every step without a cache); a single new token
                // attends to everything before it.
                None => {
                    let (causal, gqa) = (t > 1, heads != kv_heads);
                    if let Some(seen) = sdp {
                        *seen = sdp_choice(&q, &k, &v, None, dropout, causal, gqa).ok().flatten();
                    }
                    Tensor::scaled_dot_product_attention::<Tensor>(
                        &q, &k, &v, None, dropout, causal, None, gqa,
                    )
                }
                // The whole capacity under the mask. Grouped-query attention by grouping:
                // the query heads sharing a KV head become rows of one "head" (query head
                // i uses KV head i / group, as enable_gqa's repeat_interleave pairs them),
                // so no kernel needs enable_gqa and the ones that take a mask (memory-
                // efficient, math) stay eligible.
                Some(mask) => {
                    let group = heads / kv_heads;
                    let q = q.reshape([b, kv_heads, group * t, d]);
                    let mask = mask.repeat([group, 1]);
                    if let Some(seen) = sdp {
                        *seen = sdp_choice(&q, &k, &v, Some(&mask), dropout, false, false).ok().flatten();
                    }
                    let a = Tensor::scaled_dot_product_attention(
                        &q, &k, &v, Some(&mask), dropout, false, None, false,
                    );
                    a.reshape([b, heads, t, d])
                }
            };
            drop((q, k, v));
            let a = a.transpose(1, 2).contiguous().view([b, t, heads * d]);
            l.o.apply(&a, None)
        };
        let x = x + attn_out;
        let mlp_out = {
            let h = rms_norm(&x, &l.post_norm, c.rms_norm_eps);
            let gate = l.gate.apply(&h, None).silu();
            let up = l.up.apply(&h, None);
            drop(h);
            let act = gate * up;
            l.down.apply(&act, None)
        };
        x + mlp_out
    }
}

/// What every layer of one pass shares.
struct Step<'a> {
    cos: &'a Tensor,
    sin: &'a Tensor,
    /// The first new token's position when it is a number (0 when it is a tensor).
    position: i64,
    /// The new tokens' positions, int64 `[tokens]`.
    positions: &'a Tensor,
    /// A masked cache's visibility mask, `[tokens, capacity]`.
    mask: Option<&'a Tensor>,
    train: bool,
}

/// The SDPA backend for these tensors, as libtorch chooses it.
fn sdp_choice(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    dropout: f64,
    causal: bool,
    gqa: bool,
) -> Result<Option<SdpBackend>, crate::torch_ext::ExtError> {
    crate::torch_ext::sdp_choice(q, k, v, mask, dropout, causal, gqa)
}

/// transformers' LlamaRMSNorm: normalise in fp32, cast back, then scale.
fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
    let kind = x.kind();
    let x32 = x.to_kind(Kind::Float);
    let inv = (x32.square().mean_dim(-1, true, Kind::Float) + eps).rsqrt();
    let normed = (x32 * inv).to_kind(kind);
    weight * normed
}

/// `x * cos + rotate_half(x) * sin`, where rotate_half swaps the halves and negates the
/// second: transformers' apply_rotary_pos_emb.
fn rope(x: Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let rotated = {
        let x1 = x.narrow(3, 0, half);
        let x2 = x.narrow(3, half, half);
        Tensor::cat(&[&(-x2), &x1], -1)
    };
    let a = &x * cos;
    drop(x);
    a + rotated * sin
}

/// The rotary frequencies, as transformers computes them (Llama 3's frequency-dependent
/// scaling included).
fn inv_freq(c: &DecoderConfig) -> Vec<f32> {
    let d = c.head_dim as usize;
    (0..d / 2)
        .map(|i| {
            // transformers computes `theta ** (2i / d)` in fp32.
            let exponent = (2 * i) as f32 / d as f32;
            let f = 1.0 / (c.rope_theta as f32).powf(exponent);
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

/// The folders of the team decoders this process serves, by name: set once at start-up by
/// `crate::team::load_dir`, read when a run builds one of them.
static TEAM_FOLDERS: RwLock<Option<HashMap<String, PathBuf>>> = RwLock::new(None);

/// Serves the team decoders in `folders` (name to folder) from now on.
pub(crate) fn register_team_folders(folders: HashMap<String, PathBuf>) {
    *TEAM_FOLDERS.write().unwrap_or_else(|e| e.into_inner()) = Some(folders);
}

/// The file a team decoder's weights are read from, when it has one.
pub fn team_weights(model: &DecoderModel) -> Option<PathBuf> {
    if !matches!(model.source, DecoderSource::Team { weights: true, .. }) {
        return None;
    }
    TEAM_FOLDERS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()?
        .get(&model.name)
        .map(|dir| dir.join("model.safetensors"))
}

/// Builds the served decoder `name` in `vs`: random seeded weights, or a team folder's
/// `model.safetensors` loaded by name (fp32, bf16 or fp16 on disk; stored as the VarStore's
/// fp32 until the run's weights dtype converts them). Panics (caught as a run failure by
/// the lab's `catch_torch`) when the decoder is not served or its weights do not load.
pub fn build(name: &str, vs: &nn::VarStore) -> Box<dyn Net> {
    let Some(model) = protocol::decoder::lookup(name) else {
        panic!("the decoder `{name}` is not served here");
    };
    let decoder = Decoder::new(&vs.root(), &model.config);
    if let Some(path) = team_weights(model) {
        if let Err(e) = load_safetensors(vs, &path) {
            panic!("could not load {}: {e}", path.display());
        }
    }
    Box::new(decoder)
}

/// Copies every variable's values from a safetensors file written by transformers'
/// `save_pretrained`: names must match, shapes must agree; a tied head has no entry.
pub fn load_safetensors(vs: &nn::VarStore, path: &std::path::Path) -> Result<(), String> {
    let tensors: HashMap<String, Tensor> = Tensor::read_safetensors(path)
        .map_err(|e| crate::torch_call::first_line(&e.to_string()))?
        .into_iter()
        .collect();
    let _no_grad = tch::no_grad_guard();
    for (name, mut var) in vs.variables() {
        let src = tensors
            .get(&name)
            .ok_or_else(|| format!("the file has no tensor `{name}`"))?;
        if src.size() != var.size() {
            return Err(format!(
                "`{name}` is {:?} in the file, {:?} in the config's shape",
                src.size(),
                var.size()
            ));
        }
        var.f_copy_(src).map_err(|e| crate::torch_call::first_line(&e.to_string()))?;
    }
    Ok(())
}
