//! A mixture of experts: a router's softmax, its top-k (renormalised or not), and the chosen
//! gated MLPs run expert by expert over the tokens routed to them, as transformers' eager
//! loop runs them.

use tch::{Device, Kind, Tensor};

use super::mlp::{Act, Gated};

/// A mixture of experts: the router's weight `[experts, hidden]` and the experts.
#[derive(Debug)]
pub(crate) struct Moe {
    pub router: Tensor,
    pub experts: Vec<Gated>,
    pub top_k: i64,
    /// Renormalise the top-k weights to sum to 1.
    pub norm_topk: bool,
    /// Mixtral keeps the routing weights in fp32; Qwen3-MoE casts them to the hidden
    /// states' dtype.
    pub weights_fp32: bool,
}

impl Moe {
    /// `x` `[batch, tokens, hidden]` through the router and its top-k experts. The experts
    /// run one at a time, in order, on the tokens routed to them (ordered by their rank in
    /// the top-k, then by token), and their weighted outputs are added into a zero tensor:
    /// transformers' eager loop, sum for sum. The distinct experts touched are appended to
    /// `log`.
    pub fn apply(&self, x: &Tensor, act: Act, log: Option<&mut Vec<Vec<u32>>>) -> Tensor {
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
