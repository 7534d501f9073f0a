//! The layers the decoder families share: RMSNorm ([`norm`]), the gated MLP and its
//! activations ([`mlp`]), mixture-of-experts routing ([`moe`]), and how weights are made and
//! laid out ([`weights`]). Architecture invariant: nothing here reads which family a model
//! is; a layer takes what differs (a norm's `1 + weight`, an activation, a routing rule) as
//! a parameter, and `block.rs` or the family decides it.

pub(crate) mod mlp;
pub(crate) mod moe;
pub(crate) mod norm;
pub(crate) mod weights;

pub(crate) use mlp::{Act, Gated};
pub(crate) use moe::Moe;
pub(crate) use norm::Norm;
pub(crate) use weights::{lay_out_weight, tensor_bytes, MatrixInit};
