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
use protocol::{KvCacheKind, SdpBackend};
use tch::nn::{self, ModuleT};
use tch::{Kind, Tensor};

use super::Net;
use crate::trace::Probe;

/// One decoder layer's weights.
#[derive(Debug)]
struct Layer {
    input_norm: Tensor,
    q: (Tensor, Option<Tensor>),
    k: (Tensor, Option<Tensor>),
    v: (Tensor, Option<Tensor>),
    o: Tensor,
    post_norm: Tensor,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
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
            (w, b)
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
            let project = |w: &(Tensor, Option<Tensor>), n: i64| {
                h.linear(&w.0, w.1.as_ref())
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
            a.linear::<&Tensor>(&l.o, None)
        };
        let x = x + attn_out;
        let mlp_out = {
            let h = rms_norm(&x, &l.post_norm, c.rms_norm_eps);
            let gate = h.linear::<&Tensor>(&l.gate, None).silu();
            let up = h.linear::<&Tensor>(&l.up, None);
            drop(h);
            let act = gate * up;
            act.linear::<&Tensor>(&l.down, None)
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

/// The keys and values of past positions, one pair per layer, owned by whoever runs the
/// generation.
#[derive(Debug)]
pub enum KvCache {
    /// No cache (`use_cache=False`, and a forward run): each pass sees only its own tokens.
    Off,
    /// Grows by concatenation each step (transformers' DynamicCache).
    Dynamic(Vec<Option<(Tensor, Tensor)>>),
    /// Allocated once for `capacity` positions at the first update and written in place
    /// (StaticCache, gpt-fast); `filled` positions hold values. `masked`: every pass
    /// attends to the whole capacity under a mask (positions past the current length
    /// hidden) and writes with `index_copy_` at device-tensor positions, so a pass's shapes
    /// and addresses never change: what CUDA graph replay of the decode step needs.
    Static {
        capacity: i64,
        filled: i64,
        masked: bool,
        layers: Vec<Option<(Tensor, Tensor)>>,
    },
}

impl KvCache {
    /// An empty cache of `kind` for a decoder of `layers` layers; a static one will hold
    /// `capacity` positions.
    pub fn new(kind: KvCacheKind, layers: usize, capacity: i64) -> KvCache {
        match kind {
            KvCacheKind::Off => KvCache::Off,
            KvCacheKind::Dynamic => KvCache::Dynamic((0..layers).map(|_| None).collect()),
            KvCacheKind::Static => KvCache::Static {
                capacity,
                filled: 0,
                masked: false,
                layers: (0..layers).map(|_| None).collect(),
            },
        }
    }

    /// A static cache of `capacity` positions attended to whole, under a mask (see
    /// [`KvCache::Static`]).
    pub fn static_masked(layers: usize, capacity: i64) -> KvCache {
        KvCache::Static {
            capacity,
            filled: 0,
            masked: true,
            layers: (0..layers).map(|_| None).collect(),
        }
    }

    /// Whether passes attend to the whole capacity under a mask.
    pub fn is_masked(&self) -> bool {
        matches!(self, KvCache::Static { masked: true, .. })
    }

    /// A masked cache's visibility of its positions to the new tokens at `positions`
    /// (`[tokens]` int64): `[tokens, capacity]`, true where capacity position j <= the
    /// token's. `None` for the other caches.
    fn capacity_mask(&self, positions: &Tensor) -> Option<Tensor> {
        let KvCache::Static { capacity, masked: true, .. } = self else {
            return None;
        };
        let all = Tensor::arange(*capacity, (Kind::Int64, positions.device()));
        Some(all.unsqueeze(0).le_tensor(&positions.unsqueeze(1)))
    }

    /// Stores layer `layer`'s new keys and values (`[batch, kv_heads, tokens, head_dim]`,
    /// the first at `position`, all at `positions`) and returns every position's keys and
    /// values to attend to. The values are kept in the keys' dtype, as transformers' caches
    /// keep them (DynamicLayer concatenates onto an empty tensor of the keys' dtype,
    /// StaticLayer allocates both in it): under autocast with fp32 weights the keys are
    /// fp32 (RoPE multiplies by fp32 cos and sin) while the value projection ran in bf16.
    fn update(
        &mut self,
        layer: usize,
        k: Tensor,
        v: Tensor,
        position: i64,
        positions: &Tensor,
    ) -> (Tensor, Tensor) {
        if matches!(self, KvCache::Off) {
            return (k, v);
        }
        let v = if v.kind() == k.kind() { v } else { v.to_kind(k.kind()) };
        match self {
            KvCache::Off => (k, v),
            KvCache::Dynamic(layers) => {
                let (k, v) = match layers[layer].take() {
                    None => (k, v),
                    // The old tensors are freed as soon as the new ones exist, as
                    // DynamicCache's `torch.cat` rebinding frees them.
                    Some((pk, pv)) => (Tensor::cat(&[pk, k], 2), Tensor::cat(&[pv, v], 2)),
                };
                layers[layer] = Some((k.shallow_clone(), v.shallow_clone()));
                (k, v)
            }
            KvCache::Static {
                capacity,
                filled,
                masked,
                layers,
            } => {
                let t = k.size()[2];
                let (ck, cv) = layers[layer].get_or_insert_with(|| {
                    let mut shape = k.size();
                    shape[2] = *capacity;
                    (
                        Tensor::zeros(&shape, (k.kind(), k.device())),
                        Tensor::zeros(&shape, (v.kind(), v.device())),
                    )
                });
                if *masked {
                    // In place at device positions: no host number reaches the kernels.
                    let _ = ck.index_copy_(2, positions, &k);
                    let _ = cv.index_copy_(2, positions, &v);
                    return (ck.shallow_clone(), cv.shallow_clone());
                }
                ck.narrow(2, position, t).copy_(&k);
                cv.narrow(2, position, t).copy_(&v);
                if layer == 0 {
                    *filled = position + t;
                }
                (ck.narrow(2, 0, position + t), cv.narrow(2, 0, position + t))
            }
        }
    }

    /// Bytes of the cache's tensors, measured from them.
    pub fn bytes(&self) -> u64 {
        self.tensors()
            .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
            .sum()
    }

    /// Positions its tensors hold per sequence (a static cache: its whole length).
    pub fn positions(&self) -> i64 {
        self.tensors().next().map_or(0, |t| t.size()[2])
    }

    /// Bytes per element of its keys and of its values (0 when empty).
    pub fn element_bytes(&self) -> (u64, u64) {
        let mut t = self.tensors();
        let mut elt = || t.next().map_or(0, |t| t.kind().elt_size_in_bytes() as u64);
        (elt(), elt())
    }

    /// The tensors it holds (each layer's keys, then its values).
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        let layers: &[Option<(Tensor, Tensor)>] = match self {
            KvCache::Off => &[],
            KvCache::Dynamic(l) | KvCache::Static { layers: l, .. } => l,
        };
        layers.iter().flatten().flat_map(|(k, v)| [k, v])
    }
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
