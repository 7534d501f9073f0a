//! One decoder layer of any family, statement by statement as transformers runs it: the
//! norms (Llama's `weight × normed`, Gemma's `(1 + weight) × normed` in fp32), attention
//! (q/k norms where the family has them, RoPE of the layer's type, the cache, a sliding
//! window's mask, grouped-query attention through `scaled_dot_product_attention`), and the
//! MLP: a gated one (SwiGLU or GeGLU) or a mixture of experts (a router's top-k over
//! separate gated MLPs, run expert by expert over the tokens routed to it, as transformers'
//! eager `Qwen3MoeExperts` / `MixtralExperts` loop does). The layers themselves are in
//! `nn/`; this file composes them and decides, from the config, what differs by family.

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use protocol::SdpBackend;
use tch::nn;
use tch::{Device, Kind, Tensor};

use super::cache::KvCache;
use super::family::Layout;
use super::linear::Linear;
use super::nn::weights::{fuse, fused_in};
use super::nn::{lay_out_weight, tensor_bytes, Act, Gated, MatrixInit, Moe, Norm};
use super::WeightLayout;


/// A layer's MLP.
#[derive(Debug)]
pub(super) enum Mlp {
    Dense(Gated),
    Moe(Moe),
}

/// A projection and its bias (q, k, v may have one).
type Proj = (Linear, Option<Tensor>);

/// One decoder layer's weights.
#[derive(Debug)]
pub(super) struct Layer {
    /// The probe's name for this layer (`model.layers.3`).
    pub name: String,
    pub kind: LayerType,
    /// A sliding layer's window, in positions.
    pub window: Option<i64>,
    input_norm: Norm,
    post_attn_norm: Norm,
    /// Gemma's norms before and after the MLP (`pre_feedforward_layernorm`,
    /// `post_feedforward_layernorm`); its `post_attention_layernorm` then normalises
    /// attention's output before the residual.
    ff_norms: Option<(Norm, Norm)>,
    /// q, k and v; Phi-3's fused `qkv_proj` (`[q + 2 × kv, hidden]`) as `q` alone.
    q: Proj,
    k: Option<Proj>,
    v: Option<Proj>,
    /// q, k and v stacked (`[q + 2 × kv, hidden]`, in the run's layout) when all three are
    /// dense and have no bias: their variables are views of it ([`Layer::lay_out`]), so
    /// one matmul computes all three where no gradient is recorded.
    qkv: Option<Tensor>,
    o: Linear,
    q_norm: Option<Norm>,
    k_norm: Option<Norm>,
    pub mlp: Mlp,
    /// The MLP's module name (`mlp`, `block_sparse_moe`).
    mlp_name: &'static str,
    expert_names: [&'static str; 3],
}

/// What every layer of one pass shares.
pub(super) struct Step<'a> {
    /// cos and the signed sin ([`rope`]) of the full layers' RoPE, and of the sliding
    /// layers' when they have their own base.
    pub rope: (&'a Tensor, &'a Tensor),
    pub rope_local: Option<(&'a Tensor, &'a Tensor)>,
    /// The first new token's position when it is a number (0 when it is a tensor).
    pub position: i64,
    /// The new tokens' positions, int64 `[tokens]`.
    pub positions: &'a Tensor,
    /// A masked cache's visibility masks `[tokens, capacity]`: the full layers', and the
    /// sliding layers' (their window applied).
    pub mask: Option<&'a Tensor>,
    pub mask_sliding: Option<&'a Tensor>,
    pub train: bool,
}

/// The shape every layer shares.
pub(super) struct Dims {
    pub heads: i64,
    pub kv_heads: i64,
    pub head_dim: i64,
    pub dropout: f64,
    /// The scores' scale when not `head_dim^-0.5` (Gemma's `query_pre_attn_scalar^-0.5`).
    pub scale: Option<f64>,
    pub act: Act,
}

impl Dims {
    pub fn of(c: &DecoderConfig) -> Dims {
        Dims {
            heads: c.num_attention_heads as i64,
            kv_heads: c.num_key_value_heads as i64,
            head_dim: c.head_dim as i64,
            dropout: c.attention_dropout,
            scale: c.query_pre_attn_scalar.map(|s| s.powf(-0.5)),
            act: match c.architecture.gemma_style() {
                true => Act::GeluTanh,
                false => Act::Silu,
            },
        }
    }
}

impl Layer {
    /// Builds layer `i`'s variables under `l` (`model.layers.i`) with transformers'
    /// initialisation: normal(0, initializer_range) for matrices, zero biases, norms at 1
    /// (Gemma's at 0).
    pub fn new(l: &nn::Path, i: usize, c: &DecoderConfig, layout: Layout, normal: MatrixInit) -> Layer {
        let h = c.hidden_size as i64;
        let d = c.head_dim as i64;
        let q_out = c.num_attention_heads as i64 * d;
        let kv_out = c.num_key_value_heads as i64 * d;
        let attn = l / "self_attn";
        let proj = |name: &str, out: i64, inp: i64, bias: bool| {
            let p = &attn / name;
            let w = normal.var(&p, "weight", &[out, inp]);
            let b = bias.then(|| p.var("bias", &[out], nn::Init::Const(0.0)));
            (Linear::Dense(w), b)
        };
        let norm = |name: &str| Norm::new(l / name, h, c.rms_norm_eps, c.architecture.gemma_style());
        let mlp_path = l / layout.mlp;
        let mlp = match c.is_moe_layer(i) {
            true => {
                let m = c.moe.as_ref().expect("a MoE layer has a MoE config");
                let width = m.expert_intermediate_size as i64;
                let experts = &mlp_path / "experts";
                Mlp::Moe(Moe {
                    router: normal.var(&(&mlp_path / layout.router), "weight", &[m.num_experts as i64, h]),
                    experts: (0..m.num_experts as i64)
                        .map(|e| Gated::new(&(&experts / e), layout.expert, width, h, normal))
                        .collect(),
                    top_k: m.num_experts_per_tok as i64,
                    norm_topk: m.norm_topk_prob,
                    weights_fp32: c.architecture == Architecture::Mixtral,
                })
            }
            false if layout.fused => Mlp::Dense(Gated::fused(&mlp_path, c.intermediate_size as i64, h, normal)),
            false => Mlp::Dense(Gated::new(
                &mlp_path,
                ["gate_proj", "up_proj", "down_proj"],
                c.intermediate_size as i64,
                h,
                normal,
            )),
        };
        Layer {
            name: format!("model.layers.{i}"),
            kind: c.layer_type(i),
            window: c.window(i).map(i64::from),
            input_norm: norm("input_layernorm"),
            post_attn_norm: norm("post_attention_layernorm"),
            ff_norms: c
                .architecture
                .gemma_style()
                .then(|| (norm("pre_feedforward_layernorm"), norm("post_feedforward_layernorm"))),
            q: match layout.fused {
                true => proj("qkv_proj", q_out + 2 * kv_out, h, false),
                false => proj("q_proj", q_out, h, c.attention_bias),
            },
            k: (!layout.fused).then(|| proj("k_proj", kv_out, h, c.attention_bias)),
            v: (!layout.fused).then(|| proj("v_proj", kv_out, h, c.attention_bias)),
            qkv: None,
            o: proj("o_proj", h, q_out, false).0,
            q_norm: c.qk_norm.then(|| Norm::new(&attn / "q_norm", d, c.rms_norm_eps, c.architecture.gemma_style())),
            k_norm: c.qk_norm.then(|| Norm::new(&attn / "k_norm", d, c.rms_norm_eps, c.architecture.gemma_style())),
            mlp,
            mlp_name: layout.mlp,
            expert_names: layout.expert,
        }
    }

    /// Every linear layer weight quantization applies to, with its name under the model
    /// (`model.layers.0.self_attn.q_proj`, `model.layers.0.mlp.experts.3.down_proj`).
    /// A caller may replace any of them (quantize, dequantize), so the stacked weights
    /// are let go: the next [`Layer::lay_out`] stacks what is dense again.
    pub fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        self.qkv = None;
        match &mut self.mlp {
            Mlp::Dense(g) => g.gate_up = None,
            Mlp::Moe(m) => m.experts.iter_mut().for_each(|g| g.gate_up = None),
        }
        let name = &self.name;
        let fused = self.k.is_none();
        let q_name = if fused { "qkv_proj" } else { "q_proj" };
        let mut out = vec![(format!("{name}.self_attn.{q_name}"), &mut self.q.0)];
        if let Some(k) = self.k.as_mut() {
            out.push((format!("{name}.self_attn.k_proj"), &mut k.0));
        }
        if let Some(v) = self.v.as_mut() {
            out.push((format!("{name}.self_attn.v_proj"), &mut v.0));
        }
        out.push((format!("{name}.self_attn.o_proj"), &mut self.o));
        let mlp = self.mlp_name;
        match &mut self.mlp {
            Mlp::Dense(g) => {
                let gate = if g.up.is_some() { "gate_proj" } else { "gate_up_proj" };
                out.push((format!("{name}.{mlp}.{gate}"), &mut g.gate));
                if let Some(up) = g.up.as_mut() {
                    out.push((format!("{name}.{mlp}.up_proj"), up));
                }
                out.push((format!("{name}.{mlp}.down_proj"), &mut g.down));
            }
            Mlp::Moe(m) => {
                let [gn, un, dn] = self.expert_names;
                for (e, g) in m.experts.iter_mut().enumerate() {
                    out.push((format!("{name}.{mlp}.experts.{e}.{gn}"), &mut g.gate));
                    if let Some(up) = g.up.as_mut() {
                        out.push((format!("{name}.{mlp}.experts.{e}.{un}"), up));
                    }
                    out.push((format!("{name}.{mlp}.experts.{e}.{dn}"), &mut g.down));
                }
            }
        }
        out
    }

    /// Lays the layer's dense weights out (see [`WeightLayout`]): q, k and v stacked when
    /// all three are dense without biases, gate and up likewise (every expert's), the rest
    /// one by one; the router too.
    pub fn lay_out(&mut self, layout: WeightLayout) {
        let separate = [Some(&self.q), self.k.as_ref(), self.v.as_ref()];
        let stackable: Option<Vec<Tensor>> = separate
            .iter()
            .map(|p| p.filter(|(_, bias)| bias.is_none()).and_then(|(w, _)| w.dense()).map(Tensor::shallow_clone))
            .collect();
        match stackable {
            Some(ws) => {
                if !fused_in(self.qkv.as_ref(), &ws[0], layout) {
                    self.qkv = Some(fuse(&ws, layout));
                }
            }
            None => {
                for (w, _) in separate.into_iter().flatten() {
                    if let Some(w) = w.dense() {
                        lay_out_weight(w, layout);
                    }
                }
            }
        }
        if let Some(w) = self.o.dense() {
            lay_out_weight(w, layout);
        }
        match &mut self.mlp {
            Mlp::Dense(g) => g.lay_out(layout),
            Mlp::Moe(m) => {
                lay_out_weight(&m.router, layout);
                m.experts.iter_mut().for_each(|g| g.lay_out(layout));
            }
        }
    }

    /// Bytes of its linear layers (as stored: quantized or not) and of the rest (norms,
    /// biases, the router).
    pub fn bytes(&self) -> (u64, u64) {
        let mut linear = self.o.bytes();
        let mut other = self.input_norm.bytes() + self.post_attn_norm.bytes();
        for (w, b) in [Some(&self.q), self.k.as_ref(), self.v.as_ref()].into_iter().flatten() {
            linear += w.bytes();
            other += b.as_ref().map_or(0, tensor_bytes);
        }
        for n in [&self.q_norm, &self.k_norm].into_iter().flatten() {
            other += n.bytes();
        }
        if let Some((a, b)) = &self.ff_norms {
            other += a.bytes() + b.bytes();
        }
        match &self.mlp {
            Mlp::Dense(g) => linear += g.bytes(),
            Mlp::Moe(m) => {
                linear += m.experts.iter().map(Gated::bytes).sum::<u64>();
                other += tensor_bytes(&m.router);
            }
        }
        (linear, other)
    }

    /// The layer over `x` `[batch, tokens, hidden]`.
    pub fn forward(
        &self,
        index: usize,
        x: Tensor,
        dims: &Dims,
        step: &Step<'_>,
        cache: &mut KvCache,
        sdp: Option<&mut Option<SdpBackend>>,
        log: Option<&mut Vec<Vec<u32>>>,
    ) -> Tensor {
        let attn_out = {
            let h = self.input_norm.apply(&x);
            self.attention(index, &h, dims, step, cache, sdp)
        };
        match &self.ff_norms {
            // Gemma: x + norm(attn); x + norm(mlp(norm(x))).
            Some((pre, post)) => {
                let x = x + self.post_attn_norm.apply(&attn_out);
                drop(attn_out);
                let m = self.mlp(&pre.apply(&x), dims, log);
                x + post.apply(&m)
            }
            None => {
                let x = x + attn_out;
                let m = self.mlp(&self.post_attn_norm.apply(&x), dims, log);
                x + m
            }
        }
    }

    fn mlp(&self, h: &Tensor, dims: &Dims, log: Option<&mut Vec<Vec<u32>>>) -> Tensor {
        match &self.mlp {
            Mlp::Dense(g) => g.apply(h, dims.act),
            Mlp::Moe(m) => m.apply(h, dims.act, log),
        }
    }

    fn attention(
        &self,
        index: usize,
        h: &Tensor,
        dims: &Dims,
        step: &Step<'_>,
        cache: &mut KvCache,
        sdp: Option<&mut Option<SdpBackend>>,
    ) -> Tensor {
        let (b, t) = (h.size()[0], h.size()[1]);
        let Dims { heads, kv_heads, head_dim: d, .. } = *dims;
        // The queries and the keys side by side, `[batch, tokens, heads + kv_heads,
        // head_dim]`, and the values `[batch, tokens, kv_heads, head_dim]`: their norms and
        // RoPE are per head, so each runs once over both (the same products as on each).
        // One projection's columns are the queries', then the keys', then the values'.
        let split = |qkv: Tensor| {
            let n = heads + kv_heads;
            let qk = qkv.narrow(2, 0, n * d).reshape([b, t, n, d]);
            (qk, qkv.narrow(2, n * d, kv_heads * d).reshape([b, t, kv_heads, d]))
        };
        let (qk, v) = match (&self.qkv, &self.k, &self.v) {
            (Some(w), _, _) if !crate::torch_ext::grad_enabled() => split(h.linear::<&Tensor>(w, None)),
            (_, Some(k), Some(v)) => {
                let project = |w: &Proj, n: i64| w.0.apply(h, w.1.as_ref()).view([b, t, n, d]);
                let qk = Tensor::cat(&[project(&self.q, heads), project(k, kv_heads)], 2);
                (qk, project(v, kv_heads))
            }
            // Phi-3's `qkv_proj`.
            _ => split(self.q.0.apply(h, None)),
        };
        let qk = match (&self.q_norm, &self.k_norm) {
            (Some(qn), Some(kn)) => Norm::apply_heads(qn, kn, &qk, heads),
            _ => qk,
        };
        let (cos, sin) = match (self.kind, step.rope_local) {
            (LayerType::Sliding, Some(local)) => local,
            _ => step.rope,
        };
        // `[batch, n, tokens, head_dim]`.
        let qk = rope(qk.transpose(1, 2), cos, sin);
        let (q, k) = (qk.narrow(1, 0, heads), qk.narrow(1, heads, kv_heads));
        drop(qk);
        let v = v.transpose(1, 2);
        let (k, v) = cache.update(index, k, v, step.position, step.positions, self.window);
        let dropout = if step.train { dims.dropout } else { 0.0 };
        let keys = k.size()[2];
        let mask = match self.kind {
            LayerType::Full => step.mask,
            LayerType::Sliding => step.mask_sliding,
        };
        // The keys are the last `keys` positions, ending at the last new token. A single new
        // token sees every one of them (a sliding layer's cache holds at most its window);
        // several see a causal square when there are no others, unless a window cuts it.
        let explicit = match mask {
            Some(m) => Some(m.shallow_clone()),
            None if t > 1 && (keys != t || self.window.is_some_and(|w| t > w)) => {
                Some(visible(t, keys, self.window, h.device()))
            }
            None => None,
        };
        let a = match explicit {
            // One new token attends to every key with no mask: grouped as below, which runs
            // the CPU's flash kernel without its enable_gqa path (12 µs against 16 at 90
            // keys on 8 heads over 2, 16 against 25 at 200: bench notes in
            // docs/generation.md).
            None if t == 1 && heads != kv_heads => {
                let q = q.reshape([b, kv_heads, heads / kv_heads, d]);
                if let Some(seen) = sdp {
                    *seen = sdp_choice(&q, &k, &v, None, dropout, false, false).ok().flatten();
                }
                let a = Tensor::scaled_dot_product_attention::<Tensor>(&q, &k, &v, None, dropout, false, dims.scale, false);
                a.reshape([b, heads, 1, d])
            }
            None => {
                let (causal, gqa) = (t > 1, heads != kv_heads);
                if let Some(seen) = sdp {
                    *seen = sdp_choice(&q, &k, &v, None, dropout, causal, gqa).ok().flatten();
                }
                Tensor::scaled_dot_product_attention::<Tensor>(&q, &k, &v, None, dropout, causal, dims.scale, gqa)
            }
            // Grouped-query attention by grouping: the query heads sharing a KV head become
            // rows of one "head" (query head i uses KV head i / group, as enable_gqa's
            // repeat_interleave pairs them), so no kernel needs enable_gqa and the ones
            // that take a mask (memory-efficient, math) stay eligible.
            Some(mask) => {
                let group = heads / kv_heads;
                let q = q.reshape([b, kv_heads, group * t, d]);
                let mask = mask.repeat([group, 1]);
                if let Some(seen) = sdp {
                    *seen = sdp_choice(&q, &k, &v, Some(&mask), dropout, false, false).ok().flatten();
                }
                let a = Tensor::scaled_dot_product_attention(&q, &k, &v, Some(&mask), dropout, false, dims.scale, false);
                a.reshape([b, heads, t, d])
            }
        };
        drop((q, k, v));
        let a = a.transpose(1, 2).contiguous().view([b, t, heads * d]);
        self.o.apply(&a, None)
    }
}

/// `[tokens, keys]`: whether new token i sees key j, when the keys are the last `keys`
/// positions ending at the last new token: j at or before i, and within `window` of it.
fn visible(tokens: i64, keys: i64, window: Option<i64>, device: Device) -> Tensor {
    let q = Tensor::arange_start(keys - tokens, keys, (Kind::Int64, device)).unsqueeze(1);
    let k = Tensor::arange(keys, (Kind::Int64, device)).unsqueeze(0);
    let causal = k.le_tensor(&q);
    match window {
        Some(w) => causal.logical_and(&(q - k).lt(w)),
        None => causal,
    }
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

/// transformers' apply_rotary_pos_emb, `x * cos + rotate_half(x) * sin` with rotate_half
/// `[-x2, x1]`, in four ops instead of seven: `roll` swaps the halves (`[x2, x1]`) and
/// `signed_sin` is `[-sin, sin]` (computed once per pass), so `-x2 · sin` is `x2 · -sin`,
/// the same product to the bit. A decode step at batch 1 is per-op overhead, and this runs
/// twice per layer.
fn rope(x: Tensor, cos: &Tensor, signed_sin: &Tensor) -> Tensor {
    let half = x.size()[3] / 2;
    let rotated = x.roll([half], [-1]);
    let a = &x * cos;
    drop(x);
    a + rotated * signed_sin
}
