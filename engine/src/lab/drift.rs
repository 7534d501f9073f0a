//! How far a generation with quantized linear layers, or a KV cache in another dtype,
//! drifted from the same decoder unquantized with its cache in the activations' dtype ([`Lab::drift`]): run after the generation and outside its guard and
//! figures, on the prompt and tokens the generation recorded.
//!
//! Both models take one pass over the prompt and the generated tokens but the last (no
//! cache, eval, no grad, every position's logits): the prefill's logits are the ones at the
//! prompt's last position, and the unquantized model's greedy pick at each later position is
//! compared with the token the quantized run generated there (teacher-forced agreement:
//! one disagreement early does not count every later token as a miss).

use protocol::{Drift, FailureKind, GenerationReport, LinearQuant, RunFailure};
use tch::{Kind, Tensor};

use super::Lab;
use crate::models::decoder::{KvCache, Logits};
use crate::spec::GenerateRun;
use crate::torch_call::{catch_torch, failure, tch_device};
use crate::trace::Probe;

impl Lab {
    /// The drift of `g` (what `run` generated, with its quantization and cache dtype) from
    /// the unquantized decoder. When the budget cannot hold both models, the quantized one
    /// is dropped from the cache before the reference is built.
    pub(super) fn drift(
        &mut self,
        run: &GenerateRun,
        g: &GenerationReport,
        budget: Option<u64>,
    ) -> Result<Drift, RunFailure> {
        let (spec, device, quant) = (run.spec(), run.device(), run.generation().quant());
        let prompt = g.prompt_len as i64;
        let n = g.new_tokens as i64;
        let rows = g.batch as i64;
        if g.tokens.len() as i64 != rows || g.prompt_tokens.len() as i64 != rows {
            return Err(failure(FailureKind::Internal, "the generation's tokens do not match its batch"));
        }
        // prompt ++ generated[..n-1], and the generated tokens, `[batch, ...]` int64.
        let mut fed: Vec<i64> = vec![];
        let mut generated: Vec<i64> = vec![];
        for (p, t) in g.prompt_tokens.iter().zip(&g.tokens) {
            fed.extend_from_slice(p);
            fed.extend_from_slice(&t[..t.len().saturating_sub(1)]);
            generated.extend_from_slice(t);
        }
        let tdev = tch_device(device);
        let ids = catch_torch(|| Tensor::from_slice(&fed).view([rows, prompt + n - 1]).to_device(tdev))?;
        let tokens = catch_torch(|| Tensor::from_slice(&generated).view([rows, n]).to_device(tdev))?;
        let size = spec.resolved_input_size();
        let store = super::generate::kv_store(run.generation().kv_dtype, spec.advanced.weights);
        let logits = |lab: &Lab, index: usize, cached: bool| {
            let model = lab.model(index);
            let decoder = model
                .net
                .as_decoder()
                .ok_or_else(|| failure(FailureKind::Invalid, format!("{} is not a decoder", spec.model)))?;
            catch_torch(|| {
                let _no_grad = tch::no_grad_guard();
                // The run's cache dtype matters only with a cache: the pass writes its keys
                // and values through one (rounded as the run rounded them) and attends to them.
                let mut cache = match cached {
                    true => KvCache::new(protocol::KvCacheKind::Dynamic, decoder.config().num_hidden_layers as usize, 0)
                        .storing(store),
                    false => KvCache::Off,
                };
                decoder
                    .forward(&ids, 0, &mut cache, false, Logits::All, &mut Probe::off())
                    .to_kind(Kind::Float)
            })
        };
        let quantized = self.model_index_quant(spec.model, device, size, &spec.advanced, quant)?;
        let (prefill_q, held_q) = {
            let all = logits(self, quantized, store.is_some())?;
            (catch_torch(|| all.select(1, prompt - 1))?, self.model(quantized).held_bytes)
        };
        let dense_bytes = protocol::weights_formula(
            &spec.model.decoder().map(|d| d.config.clone()).ok_or_else(|| {
                failure(FailureKind::Invalid, format!("{} is not a decoder served here", spec.model))
            })?,
            LinearQuant::NONE,
            spec.advanced.weights.element().bytes(),
        );
        let both = held_q + dense_bytes.linear_bytes + dense_bytes.other_bytes;
        if !quant.is_none() && budget.is_some_and(|b| both > b) {
            self.models.remove(quantized);
        }
        let reference = self.model_index_as(spec.model, device, size, &spec.advanced)?;
        let all = logits(self, reference, false)?;
        catch_torch(|| {
            let prefill_r = all.select(1, prompt - 1);
            let delta = (&prefill_q - &prefill_r).abs().max().double_value(&[]);
            let scale = prefill_r.abs().max().double_value(&[]);
            let picks = all.narrow(1, prompt - 1, n).argmax(-1, false);
            let agree = picks.eq_tensor(&tokens).sum(Kind::Int64).int64_value(&[]);
            // The reference's top-1 margin at each compared position: below the measured
            // |Δ logit|, a perturbation that size can flip the greedy pick.
            let (top, _) = all.narrow(1, prompt - 1, n).topk(2, -1, true, true);
            let margin = top.select(-1, 0) - top.select(-1, 1);
            let low = margin.lt(delta).to_kind(Kind::Double).mean(Kind::Double).double_value(&[]);
            Drift {
                max_abs_logit_delta: delta,
                max_abs_logit: scale,
                greedy_agreement: agree as f64 / (rows * n) as f64,
                tokens_compared: (rows * n) as u32,
                low_margin_share: Some(low),
                reference: format!(
                    "the same weights in {}, linear layers unquantized, keys and values in the activations' dtype (eval, no grad, one pass)",
                    spec.advanced.weights.as_str()
                ),
            }
        })
    }
}

impl Lab {
    /// The prefill's last-position logits of the run's own model (its quantization, its
    /// cache's kind and dtype) on the prompt `g` recorded, one row per sequence, in fp32:
    /// one pass in eval mode without grad or autocast, after the run (`generate.prefill_logits`).
    pub(super) fn prefill_logits(
        &mut self,
        run: &GenerateRun,
        g: &GenerationReport,
    ) -> Result<Vec<Vec<f32>>, RunFailure> {
        let (spec, device, quant) = (run.spec(), run.device(), run.generation().quant());
        let rows = g.batch as i64;
        let prompt = g.prompt_len as i64;
        if g.prompt_tokens.len() as i64 != rows {
            return Err(failure(FailureKind::Internal, "the generation's prompt does not match its batch"));
        }
        let flat: Vec<i64> = g.prompt_tokens.iter().flatten().copied().collect();
        let ids = catch_torch(|| Tensor::from_slice(&flat).view([rows, prompt]).to_device(tch_device(device)))?;
        let index = self.model_index_quant(spec.model, device, spec.resolved_input_size(), &spec.advanced, quant)?;
        let decoder = self
            .model(index)
            .net
            .as_decoder()
            .ok_or_else(|| failure(FailureKind::Invalid, format!("{} is not a decoder", spec.model)))?;
        let store = super::generate::kv_store(run.generation().kv_dtype, spec.advanced.weights);
        let layers = decoder.config().num_hidden_layers as usize;
        let values = catch_torch(|| {
            let _no_grad = tch::no_grad_guard();
            let mut cache = KvCache::new(g.cache, layers, prompt + g.new_tokens as i64).storing(store);
            let logits = decoder.forward(&ids, 0, &mut cache, false, Logits::Last, &mut Probe::off());
            let flat = logits.to_kind(Kind::Float).to_device(tch::Device::Cpu).reshape([-1]);
            Vec::<f32>::try_from(&flat)
        })?
        .map_err(|e| failure(FailureKind::Internal, e.to_string()))?;
        let vocab = values.len() / rows.max(1) as usize;
        Ok(values.chunks(vocab.max(1)).map(|c| c.to_vec()).collect())
    }
}
