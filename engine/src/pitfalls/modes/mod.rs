//! The switches people conflate: train/eval, the grad modes, autocast. One module per
//! card: [`nograd`] (nograd-and-dropout), [`inference`] (inference-vs-nograd), [`autocast`].

pub mod autocast;
pub mod inference;
pub mod nograd;

pub use autocast::AUTOCAST;
pub use inference::INFERENCE_VS_NOGRAD;
pub use nograd::NOGRAD_AND_DROPOUT;

use tch::{Kind, Tensor};

/// The largest absolute difference between two tensors, compared in fp32.
fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a.to_kind(Kind::Float) - b.to_kind(Kind::Float))
        .abs()
        .max()
        .double_value(&[])
}
