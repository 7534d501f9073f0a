//! One decoder layer of any family, statement by statement as transformers runs it: the
//! norms (Llama's `weight × normed`, Gemma's `(1 + weight) × normed` in fp32), attention
//! (q/k norms where the family has them, RoPE of the layer's type, the cache, a sliding
//! window's mask, grouped-query attention through `scaled_dot_product_attention`), and the
//! MLP: a gated one (SwiGLU or GeGLU) or a mixture of experts (a router's top-k over
//! separate gated MLPs, run expert by expert over the tokens routed to it, as transformers'
//! eager `Qwen3MoeExperts` / `MixtralExperts` loop does).

use protocol::decoder::{Architecture, DecoderConfig, LayerType};
use protocol::SdpBackend;
use tch::nn;
use tch::{Device, Kind, Tensor};

use super::cache::KvCache;
use super::family::Layout;
use super::linear::Linear;
use super::WeightLayout;

/// An RMSNorm's weight and how it scales.
#[derive(Debug)]
pub(super) struct Norm {
    pub weight: Tensor,
    eps: f64,
    /// Gemma's: normalise and scale by `1 + weight` in fp32, then cast back.
    gemma: bool,
}

impl Norm {
    pub fn new(p: nn::Path, width: i64, c: &DecoderConfig) -> Norm {
        let gemma = c.architecture.gemma_style();
        // transformers initialises Gemma's weights to 0 (they scale by 1 + weight).
        let init = nn::Init::Const(if gemma { 0.0 } else { 1.0 });
        Norm {
            weight: p.var("weight", &[width], init),
            eps: c.rms_norm_eps,
            gemma,
        }
    }

    pub fn apply(&self, x: &Tensor) -> Tensor {
        match self.in_one_op(x, None) {
            Some(y) => y,
            None => self.normalize(x, &self.weight),
        }
    }

    /// fp32 on the CPU with no gradient recorded: the extension's one-op RMSNorm
    /// ([`crate::torch_ext::rms_norm_f32`]), where libtorch's composite dispatches a dozen
    /// ops; `None` elsewhere. `second`: another norm's weight for the heads from `split` on,
    /// of `heads` per row group.
    fn in_one_op(&self, x: &Tensor, second: Option<(&Tensor, i64, i64)>) -> Option<Tensor> {
        let one_op = x.kind() == Kind::Float
            && self.weight.kind() == Kind::Float
            && x.device() == Device::Cpu
            && !crate::torch_ext::grad_enabled();
        one_op
            .then(|| crate::torch_ext::rms_norm_f32(x, &self.weight, second, self.eps, self.gemma).ok())
            .flatten()
    }

    /// The queries' and the keys' norms over `x` `[batch, tokens, heads + kv_heads,
    /// head_dim]` (the query heads first) in one pass: the same products as `q_norm` on the
    /// query heads and `k_norm` on the key heads, each head normalised on its own, with the
    /// two weights stacked per head (`[heads + kv_heads, head_dim]`). One norm instead of
    /// two, which a decode step at batch 1 pays per op, twice per layer.
    pub fn apply_heads(q_norm: &Norm, k_norm: &Norm, x: &Tensor, heads: i64) -> Tensor {
        let (n, d) = (x.size()[2], x.size()[3]);
        if let Some(y) = q_norm.in_one_op(x, Some((&k_norm.weight, heads, n))) {
            return y;
        }
        let weight = Tensor::cat(
            &[q_norm.weight.expand([heads, d], false), k_norm.weight.expand([n - heads, d], false)],
            0,
        );
        q_norm.normalize(x, &weight)
    }

    /// Normalises `x` over its last dimension and scales by `weight` (`[width]`, or any
    /// shape that broadcasts against `x`), in this norm's style.
    fn normalize(&self, x: &Tensor, weight: &Tensor) -> Tensor {
        let kind = x.kind();
        if kind == Kind::Float && weight.kind() == Kind::Float {
            // fp32: no casts, so the six ops of libtorch's own rms_norm (`x * rsqrt(mean(x²)
            // + eps)`, then the scale), the same products to the bit, without the casts
            // and copies its composite dispatches around them (3% of a decode step on
            // qwen3_tiny: 1.61 → 1.56 ms p50, interleaved). Gemma's scale is `1 + weight`.
            let scale = match self.gemma {
                true => weight + 1.0,
                false => weight.shallow_clone(),
            };
            let inv = (x.square().mean_dim(-1, true, None) + self.eps).rsqrt();
            return x * inv * scale;
        }
        let x32 = x.to_kind(Kind::Float);
        let inv = (x32.square().mean_dim(-1, true, Kind::Float) + self.eps).rsqrt();
        let normed = x32 * inv;
        match self.gemma {
            true => (normed * (weight.to_kind(Kind::Float) + 1.0)).to_kind(kind),
            // transformers' LlamaRMSNorm: normalise in fp32, cast back, then scale.
            false => weight * normed.to_kind(kind),
        }
    }

    fn bytes(&self) -> u64 {
        tensor_bytes(&self.weight)
    }
}

/// The gated MLP's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Act {
    /// SwiGLU's.
    Silu,
    /// GeGLU's: GELU with the tanh approximation (`gelu_pytorch_tanh`).
    GeluTanh,
}

impl Act {
    pub fn of(a: Architecture) -> Act {
        match a.gemma_style() {
            true => Act::GeluTanh,
            false => Act::Silu,
        }
    }

    fn apply(self, x: Tensor) -> Tensor {
        match self {
            Act::Silu => x.silu(),
            Act::GeluTanh => x.gelu("tanh"),
        }
    }

    /// In place (no gradient may be recorded through `x`).
    fn apply_(self, mut x: Tensor) -> Tensor {
        match self {
            Act::Silu => x.silu_(),
            Act::GeluTanh => x.gelu_("tanh"),
        }
    }
}

/// `down(act(gate(x)) × up(x))`.
#[derive(Debug)]
pub(super) struct Gated {
    /// The gate projection; with `up` absent, Phi-3's fused `gate_up_proj`
    /// (`[2 × width, hidden]`: the gate's rows, then the up's).
    pub gate: Linear,
    pub up: Option<Linear>,
    pub down: Linear,
    /// gate and up stacked (`[2 × width, hidden]`, in the run's layout) when both are
    /// dense: their variables are views of it ([`Gated::lay_out`]), so one matmul computes
    /// both where no gradient is recorded.
    gate_up: Option<Tensor>,
}

impl Gated {
    fn new(p: &nn::Path, names: [&str; 3], width: i64, h: i64, init: MatrixInit) -> Gated {
        let w = |name: &str, out: i64, inp: i64| Linear::Dense(init.var(&(p / name), "weight", &[out, inp]));
        Gated {
            gate: w(names[0], width, h),
            up: Some(w(names[1], width, h)),
            down: w(names[2], h, width),
            gate_up: None,
        }
    }

    /// Phi-3's: one `gate_up_proj` and a `down_proj`.
    fn fused(p: &nn::Path, width: i64, h: i64, init: MatrixInit) -> Gated {
        let w = |name: &str, out: i64, inp: i64| Linear::Dense(init.var(&(p / name), "weight", &[out, inp]));
        Gated {
            gate: w("gate_up_proj", 2 * width, h),
            up: None,
            down: w("down_proj", h, width),
            gate_up: None,
        }
    }

    fn apply(&self, x: &Tensor, act: Act) -> Tensor {
        // transformers' `gate, up = gate_up_proj(x).chunk(2, dim=-1)`.
        let halves = |both: Tensor| {
            let width = both.size()[both.dim() - 1] / 2;
            (both.narrow(-1, 0, width), both.narrow(-1, width, width))
        };
        let stacked = self.gate_up.as_ref().filter(|_| !crate::torch_ext::grad_enabled());
        let (gated, up) = match (stacked, &self.up) {
            // One matmul. Gate and up are halves of one tensor that lives until the
            // product, so the activation goes in place into the gate's half (no gradient
            // is recorded here): the peak is the product and the two halves, as with two
            // separate projections.
            (Some(w), _) => {
                let (gate, up) = halves(x.linear::<&Tensor>(w, None));
                (act.apply_(gate), up)
            }
            (None, Some(up)) => {
                let (gate, up) = (self.gate.apply(x, None), up.apply(x, None));
                (act.apply(gate), up)
            }
            // Phi-3's `gate_up_proj`.
            (None, None) => {
                let (gate, up) = halves(self.gate.apply(x, None));
                (act.apply(gate), up)
            }
        };
        self.down.apply(&(gated * up), None)
    }

    /// Lays the weights out (see [`lay_out_weight`]), gate and up stacked when both are
    /// dense (see [`fuse`]).
    pub fn lay_out(&mut self, layout: WeightLayout) {
        match (self.gate.dense(), self.up.as_ref().and_then(Linear::dense)) {
            (Some(g), Some(u)) => {
                let ws = [g.shallow_clone(), u.shallow_clone()];
                if !fused_in(self.gate_up.as_ref(), &ws[0], layout) {
                    self.gate_up = Some(fuse(&ws, layout));
                }
            }
            (Some(g), None) => lay_out_weight(g, layout),
            _ => {}
        }
        if let Some(w) = self.down.dense() {
            lay_out_weight(w, layout);
        }
    }

    pub fn bytes(&self) -> u64 {
        self.gate.bytes() + self.up.as_ref().map_or(0, Linear::bytes) + self.down.bytes()
    }
}

/// A mixture of experts: the router's weight `[experts, hidden]` and the experts.
#[derive(Debug)]
pub(super) struct Moe {
    pub router: Tensor,
    pub experts: Vec<Gated>,
    top_k: i64,
    norm_topk: bool,
    /// Mixtral keeps the routing weights in fp32; Qwen3-MoE casts them to the hidden
    /// states' dtype.
    weights_fp32: bool,
}

impl Moe {
    /// `x` `[batch, tokens, hidden]` through the router and its top-k experts. The experts
    /// run one at a time, in order, on the tokens routed to them (ordered by their rank in
    /// the top-k, then by token), and their weighted outputs are added into a zero tensor:
    /// transformers' eager loop, sum for sum. The distinct experts touched are appended to
    /// `log`.
    fn apply(&self, x: &Tensor, act: Act, log: Option<&mut Vec<Vec<u32>>>) -> Tensor {
        let size = x.size();
        let h = size[size.len() - 1];
        let flat = x.reshape([-1, h]);
        let logits = flat.linear::<&Tensor>(&self.router, None);
        let probs = logits.softmax(-1, Kind::Float);
        let (mut weights, chosen) = probs.topk(self.top_k, -1, true, true);
        drop(probs);
        if self.norm_topk {
            weights = &weights / weights.sum_dim_intlist(-1, true, Kind::Float);
        }
        if !self.weights_fp32 {
            weights = weights.to_kind(logits.kind());
        }
        let tokens = flat.size()[0];
        let k = self.top_k;
        // Which experts each token goes to: on the host, as transformers' loop reads it.
        let ids = Vec::<i64>::try_from(chosen.to_device(Device::Cpu).reshape([-1]))
            .expect("the router's choices read as int64");
        let mut routed: Vec<(Vec<i64>, Vec<i64>)> = vec![(vec![], vec![]); self.experts.len()];
        for rank in 0..k {
            for token in 0..tokens {
                let e = ids[(token * k + rank) as usize] as usize;
                routed[e].0.push(token);
                routed[e].1.push(rank);
            }
        }
        let mut out = flat.zeros_like();
        let device = flat.device();
        let mut touched = Vec::new();
        for (e, (token_ids, ranks)) in routed.iter().enumerate() {
            if token_ids.is_empty() {
                continue;
            }
            touched.push(e as u32);
            let t = Tensor::from_slice(token_ids).to_device(device);
            let r = Tensor::from_slice(ranks).to_device(device);
            let y = self.experts[e].apply(&flat.index_select(0, &t), act);
            let w = weights.index(&[Some(&t), Some(&r)]).unsqueeze(-1);
            let y = (y * w).to_kind(out.kind());
            let _ = out.index_add_(0, &t, &y);
        }
        if let Some(log) = log {
            log.push(touched);
        }
        out.view(size.as_slice())
    }
}

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
            act: Act::of(c.architecture),
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
        let norm = |name: &str| Norm::new(l / name, h, c);
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
            q_norm: c.qk_norm.then(|| Norm::new(&attn / "q_norm", d, c)),
            k_norm: c.qk_norm.then(|| Norm::new(&attn / "k_norm", d, c)),
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

pub(super) fn tensor_bytes(t: &Tensor) -> u64 {
    t.numel() as u64 * t.kind().elt_size_in_bytes() as u64
}

/// Lays one weight out (see [`WeightLayout`]) in place: the variable keeps its name and
/// values, its data becomes a copy in `layout` unless it is in it already.
pub(super) fn lay_out_weight(w: &Tensor, layout: WeightLayout) {
    if w.dim() != 2 || WeightLayout::of(w) == Some(layout) {
        return;
    }
    let laid = match layout {
        WeightLayout::RowMajor => w.contiguous(),
        WeightLayout::ColumnMajor => w.tr().contiguous().tr(),
    };
    w.shallow_clone().set_data(&laid);
}

/// Stacks `ws` (`[out_i, in]` each) into one `[Σ out_i, in]` tensor in `layout` and makes
/// each variable a view of its rows: one allocation of the same bytes instead of several,
/// the variables' names and values unchanged, so a matmul with the stack computes them all.
fn fuse(ws: &[Tensor], layout: WeightLayout) -> Tensor {
    let stacked = match layout {
        WeightLayout::RowMajor => Tensor::cat(ws, 0),
        WeightLayout::ColumnMajor => Tensor::cat(&ws.iter().map(Tensor::tr).collect::<Vec<_>>(), 1).tr(),
    };
    let mut row = 0;
    for w in ws {
        let rows = w.size()[0];
        w.shallow_clone().set_data(&stacked.narrow(0, row, rows));
        row += rows;
    }
    stacked
}

/// Whether `stacked` is in `layout` with `first`'s variable still a view of it.
fn fused_in(stacked: Option<&Tensor>, first: &Tensor, layout: WeightLayout) -> bool {
    stacked.is_some_and(|s| WeightLayout::of(s) == Some(layout) && s.data_ptr() == first.data_ptr())
}

/// How a matrix starts: transformers' initialisation, normal(0, initializer_range), or, for
/// a model whose weights are read next ([`super::build`]), allocated and left unwritten:
/// neither random numbers nor zeros are spent on memory the checkpoint overwrites
/// (`weights::WeightFiles::load_into` fills every variable or the build fails).
#[derive(Clone, Copy, Debug)]
pub enum MatrixInit {
    Normal(f64),
    Unwritten,
}

impl MatrixInit {
    /// The variable `name` of shape `dims` under `p`.
    pub(super) fn var(self, p: &nn::Path, name: &str, dims: &[i64]) -> Tensor {
        match self {
            MatrixInit::Normal(stdev) => p.var(name, dims, nn::Init::Randn { mean: 0.0, stdev }),
            MatrixInit::Unwritten => p.add(name, Tensor::empty(dims, (p.kind(), p.device())), true),
        }
    }
}

