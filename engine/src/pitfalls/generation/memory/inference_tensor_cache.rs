//! The `inference-tensor-cache` card ([`INFERENCE_TENSOR_CACHE`]): A cache made under inference_mode cannot be updated outside it

use super::*;

pub const FIX_SAME_MODE: FigureName = FigureName::new("fix: same mode", Unit::Bool);
pub const FIX_NO_GRAD_FOR_BOTH: FigureName = FigureName::new("fix: no_grad for both", Unit::Bool);

pub const INFERENCE_TENSOR_CACHE: Card = Card {
    id: "inference-tensor-cache",
    title: "A cache made under inference_mode cannot be updated outside it",
    asks: "What happens when a cache tensor allocated under torch.inference_mode() is written in place outside it, under torch.no_grad()?",
    labels: ["allocated under inference_mode, written under no_grad", "allocated and written under inference_mode"],
    setup: inference_tensor_cache_setup,
    needs: Needs::Any,
    claim: "A cache allocated under torch.inference_mode() cannot be updated in place outside it, under torch.no_grad() included: allocate and write it under the same mode.",
    statements: &[
        Said::torch("A tensor created under torch.inference_mode() is an inference tensor: it has no version counter, the counter autograd reads to detect in-place changes.", "test_generation.py::test_a_tensor_made_under_inference_mode_is_an_inference_tensor"),
        Said::torch("So PyTorch refuses an in-place update to it outside inference_mode, under torch.no_grad() too: \"Inplace update to inference tensor outside InferenceMode is not allowed\".", "test_generation.py::test_writing_it_in_place_outside_inference_mode_raises"),
        Said::run("Here libtorch raised that error when the cache tensor made under inference_mode was written under no_grad.", &[ERROR_RAISED]),
        Said::torch("Written in the mode it was made in (inference_mode for both, or no_grad for both), the same update works.", "test_generation.py::test_writing_it_in_the_mode_it_was_made_in_works"),
        Said::run("Here both ways worked.", &[FIX_SAME_MODE, FIX_NO_GRAD_FOR_BOTH]),
    ],
    source: "https://pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html",
    pitfall: "with torch.inference_mode():\n    cache = StaticCache(config=model.config, max_cache_len=1024)\nwith torch.no_grad():\n    model(ids, past_key_values=cache)  # writes the new keys and values into the cache",
    fix: "with torch.inference_mode():  # allocated and written under inference_mode\n    cache = StaticCache(config=model.config, max_cache_len=1024)\n    model(ids, past_key_values=cache)",
    threshold: "confirmed when libtorch raises its error for the in-place write to a cache tensor made under inference_mode from outside it, and both fixes (allocate and update under inference_mode; no_grad for both) succeed. Regime: any device",
    question: crate::pitfalls::value("A cache tensor allocated under inference_mode, then one position written into it in place under no_grad: does libtorch raise an error? (A knowledge check.)", ERROR_RAISED, crate::pitfalls::Ask::YesNo),
    experiment: inference_tensor_cache,
};

/// The cache tensor inference-tensor-cache writes into: batch, KV heads, positions, head_dim.
pub(super) const CACHE_SHAPE: [i64; 4] = [1, 2, 16, 32];

pub(super) fn inference_tensor_cache_describe() -> String {
    let [b, h, t, d] = CACHE_SHAPE;
    format!("a cache tensor of batch {b}, {h} KV heads, {t} positions, head_dim {d}")
}

pub(super) fn inference_tensor_cache_setup(_ctx: &Ctx) -> Vec<String> {
    vec![
        inference_tensor_cache_describe(),
        crate::pitfalls::kit::arms("the tensor allocated (zeros) under torch.inference_mode(), then its first position overwritten in place under torch.no_grad()", "the tensor allocated (zeros) and its first position overwritten under torch.inference_mode()"),
        "Also measured: allocated and overwritten under torch.no_grad()".into(),
        "fp32; one in-place copy of one position's keys per way".into(),
    ]
}

pub(super) fn inference_tensor_cache(_lab: &mut Lab, ctx: &Ctx) -> Result<Outcome, RunFailure> {
    use crate::torch_ext::InferenceModeGuard;
    use tch::{Kind, Tensor};
    let device = crate::torch_call::tch_device(ctx.device);
    let shape = CACHE_SHAPE;
    let enter = || InferenceModeGuard::enter().map_err(crate::torch_call::torch_failure);
    let new_kv = || Tensor::randn([shape[0], shape[1], 1, shape[3]], (Kind::Float, device));
    // The pitfall: made inside, written outside (under no_grad, as a decode loop would).
    let cache = {
        let _im = enter()?;
        catch_torch(|| Tensor::zeros(shape, (Kind::Float, device)))?
    };
    let is_inference = cache.is_inference();
    let error = {
        let _ng = tch::no_grad_guard();
        let kv = new_kv();
        catch_torch(|| cache.narrow(2, 0, 1).copy_(&kv)).err().map(|f| f.message)
    };
    // Fix 1: allocate and update under the same mode.
    let same_mode = {
        let _im = enter()?;
        catch_torch(|| {
            let c = Tensor::zeros(shape, (Kind::Float, device));
            c.narrow(2, 0, 1).copy_(&new_kv());
        })
        .is_ok()
    };
    // Fix 2: no_grad for both.
    let no_grad = {
        let _ng = tch::no_grad_guard();
        catch_torch(|| {
            let c = Tensor::zeros(shape, (Kind::Float, device));
            c.narrow(2, 0, 1).copy_(&new_kv());
        })
        .is_ok()
    };
    let raised = error.as_ref().is_some_and(|e| e.to_lowercase().contains("inference tensor"));
    let decision = Decision::rule(
        is_inference && raised && same_mode && no_grad,
        format!("libtorch refused the write: \"{}\"; allocating and updating under inference_mode, or using no_grad for both, worked.", error.clone().unwrap_or_default()),
        format!("Error {:?}, same-mode fix {same_mode}, no_grad fix {no_grad}.", error),
    );
    Ok(Outcome::new(decision, inference_tensor_cache_describe(), ChartKind::Bar)
        .figures(vec![
            fig(ERROR_RAISED, if raised { 1.0 } else { 0.0 }),
            fig(FIX_SAME_MODE, if same_mode { 1.0 } else { 0.0 }),
            fig(FIX_NO_GRAD_FOR_BOTH, if no_grad { 1.0 } else { 0.0 }),
        ])
        .notes(error.map(|e| vec![format!("libtorch: {e}")]).unwrap_or_default()))
}
