//! The forward pass's positional inputs ([`Input`]): one tensor for the built-in models, one
//! per sidecar input for a team model (token ids and an attention mask, say). The lab makes,
//! casts, places and counts them together, so every setting (the weights' dtype, where the
//! input starts each iteration) applies to each of them as PyTorch would apply it to the
//! tuple a reader passes as `model(*x)`.

use tch::{Kind, Tensor};

/// The tensors a forward pass takes, in order; never empty.
#[derive(Debug)]
pub struct Input(Vec<Tensor>);

impl Input {
    /// The one input of a built-in model (or of a single-input team model).
    pub fn one(t: Tensor) -> Input {
        Input(vec![t])
    }

    /// Several inputs, in the forward pass's order. Panics when `tensors` is empty (a
    /// sidecar with no input is refused before any module is loaded).
    pub fn many(tensors: Vec<Tensor>) -> Input {
        assert!(!tensors.is_empty(), "a forward pass takes at least one input");
        Input(tensors)
    }

    pub fn tensors(&self) -> &[Tensor] {
        &self.0
    }

    /// The first input: the built-in models take only this one.
    pub fn first(&self) -> &Tensor {
        &self.0[0]
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every input through `f`, in order.
    pub fn map(&self, f: impl FnMut(&Tensor) -> Tensor) -> Input {
        Input(self.0.iter().map(f).collect())
    }

    /// The floating-point inputs cast to `kind` (`x.half()` on each); integer and bool
    /// inputs (ids, masks) are kept as they are, as PyTorch's `module.half()` keeps
    /// integer buffers.
    pub fn cast_floats(&self, kind: Kind) -> Input {
        self.map(|t| {
            if t.is_floating_point() {
                t.to_kind(kind)
            } else {
                t.shallow_clone()
            }
        })
    }

    /// The same tensors (shared storage).
    pub fn shallow_clone(&self) -> Input {
        self.map(Tensor::shallow_clone)
    }

    /// Bytes of every input's elements (what a forward pass reads of them).
    pub fn bytes(&self) -> u64 {
        self.0
            .iter()
            .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
            .sum()
    }
}

impl From<Tensor> for Input {
    fn from(t: Tensor) -> Input {
        Input::one(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn only_floating_point_inputs_follow_the_weights_dtype() {
        let x = Input::many(vec![
            Tensor::zeros([2, 3], (Kind::Int64, Device::Cpu)),
            Tensor::ones([2, 3], (Kind::Float, Device::Cpu)),
        ]);
        assert_eq!(x.bytes(), 6 * 8 + 6 * 4);
        let half = x.cast_floats(Kind::Half);
        let kinds: Vec<Kind> = half.tensors().iter().map(Tensor::kind).collect();
        assert_eq!(kinds, [Kind::Int64, Kind::Half]);
        assert_eq!(half.bytes(), 6 * 8 + 6 * 2);
    }
}
