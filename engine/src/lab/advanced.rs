//! What the advanced settings ([`protocol::Advanced`]) do to a run: the weights' dtype and
//! memory format applied to a model once, when it is built (as `model.half()` /
//! `model.to(memory_format=torch.channels_last)` do); the input made in the same dtype and
//! format and kept where the spec says each iteration starts (on the device, or in
//! pageable or pinned host memory); the per-iteration copy to the device, inside the timed
//! pass; and the CUDA math switches (TF32, `cudnn.benchmark`) around the pass.

use protocol::{Advanced, DeviceKind, Element, InputSource, MemoryFormat, RunFailure, WeightsDtype};
use tch::{Device, Kind, Tensor};

use crate::input::Input;
use crate::models::Model;
use crate::torch_call::{catch_torch, tch_device, torch_failure};
use crate::torch_ext::{BackendFlags, BackendFlagsGuard};

/// The tensor kind weights of this dtype are stored in.
pub fn kind_of(weights: WeightsDtype) -> Kind {
    kind(weights.element())
}

/// libtorch's kind for an element type: the one map from what admission counts
/// ([`protocol::Element::bytes`]) to what a run allocates (a test holds the two to the byte).
pub fn kind(e: Element) -> Kind {
    match e {
        Element::F32 => Kind::Float,
        Element::F16 => Kind::Half,
        Element::Bf16 => Kind::BFloat16,
        Element::F8E4m3 => Kind::Float8e4m3fn,
    }
}

/// The same values with NHWC strides (what `.contiguous(memory_format=torch.channels_last)`
/// makes): permuted to NHWC, made contiguous, permuted back to NCHW sizes.
pub fn to_channels_last(t: &Tensor) -> Tensor {
    t.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2])
}

/// Whether a 4-D tensor's strides are NHWC: channels innermost (stride 1), then width,
/// height and batch. Dimensions of size 1 may carry any stride, as in PyTorch.
pub fn is_channels_last(t: &Tensor) -> bool {
    let (size, stride) = (t.size(), t.stride());
    if size.len() != 4 {
        return false;
    }
    let (c, h, w) = (size[1], size[2], size[3]);
    let want = [h * w * c, 1, w * c, c];
    (0..4).all(|i| size[i] == 1 || stride[i] == want[i])
}

/// Casts the model's floating-point weights and buffers to `weights` and, for
/// channels_last, gives every 4-D weight (the convolutions') NHWC strides. In place: the
/// old storage is freed, as in PyTorch.
pub fn convert_model(
    model: &mut Model,
    weights: WeightsDtype,
    format: MemoryFormat,
) -> Result<(), RunFailure> {
    catch_torch(|| {
        match weights {
            // Built in it already (a decoder, `Model::build_in`): nothing to cast.
            w if w == model.weights => {}
            WeightsDtype::Fp32 => {}
            WeightsDtype::Fp16 => model.vs.half(),
            WeightsDtype::Bf16 => model.vs.bfloat16(),
        }
        if format == MemoryFormat::ChannelsLast {
            for (_, mut t) in model.vs.variables() {
                if t.dim() == 4 {
                    let nhwc = tch::no_grad(|| to_channels_last(&t));
                    t.set_data(&nhwc);
                }
            }
        }
    })?;
    model.weights = weights;
    model.format = format;
    Ok(())
}

/// The run's inputs: random (a team model's as its sidecar says), the floating-point ones
/// in the weights' dtype (ids and masks keep theirs), in the memory format asked for, and
/// where each iteration starts: on the device, or in host memory — pageable (an ordinary
/// CPU tensor) or pinned (page-locked, CUDA only). Several inputs are treated alike.
pub fn make_input(
    model: &Model,
    batch: u32,
    size: u32,
    adv: &Advanced,
    device: DeviceKind,
) -> Result<Input, RunFailure> {
    let home = match adv.input_source {
        InputSource::Device => tch_device(device),
        InputSource::Pageable | InputSource::Pinned => Device::Cpu,
    };
    let x = catch_torch(|| {
        let x = model.input(batch, size, home);
        let x = match adv.weights {
            WeightsDtype::Fp32 => x,
            w => x.cast_floats(kind_of(w)),
        };
        match adv.memory_format {
            MemoryFormat::ChannelsLast => x.map(|t| {
                if t.dim() == 4 {
                    to_channels_last(t)
                } else {
                    t.shallow_clone()
                }
            }),
            MemoryFormat::Contiguous => x,
        }
    })?;
    if adv.input_source == InputSource::Pinned {
        return catch_torch(|| x.map(|t| t.pin_memory(tch_device(device))));
    }
    Ok(x)
}

/// The inputs as the pass receives them: themselves when they already are on the device;
/// otherwise a fresh copy of each to the device (`x_host.to(device, non_blocking=pinned)`),
/// which the timed pass includes. On a CPU a pageable source is copied all the same: the
/// memcpy a batch costs to move into place.
pub fn place_input(input: &Input, adv: &Advanced, device: DeviceKind) -> Result<Input, RunFailure> {
    match adv.input_source {
        InputSource::Device => Ok(input.shallow_clone()),
        source => catch_torch(|| {
            input.map(|t| {
                t.to_device_(
                    tch_device(device),
                    t.kind(),
                    source == InputSource::Pinned,
                    true,
                )
            })
        }),
    }
}

/// On CUDA, the math switches for this run (TF32 in matmuls and cuDNN: both on or both
/// off; `cudnn.benchmark`), restored when the guard drops. Every loop that runs a model
/// enters it around its passes: the timed forward passes and the traced one
/// (`forward::forward_probed`), a generation's steps (`generate::generate`). `None` on a
/// CPU, where they do not exist (the spec check refuses them there), unless a spec that
/// skipped the check asks for one: then they are set all the same (libtorch keeps them on
/// a CPU build too, where nothing reads them), so a CPU test can see which loops enter them.
pub fn backend_guard(
    adv: &Advanced,
    device: DeviceKind,
) -> Result<Option<BackendFlagsGuard>, RunFailure> {
    if device != DeviceKind::Cuda && !adv.tf32 && !adv.cudnn_benchmark {
        return Ok(None);
    }
    BackendFlagsGuard::enter(BackendFlags {
        tf32_matmul: adv.tf32,
        tf32_cudnn: adv.tf32,
        cudnn_benchmark: adv.cudnn_benchmark,
    })
    .map(Some)
    .map_err(torch_failure)
}

/// Bytes of the model's trainable parameters, as stored (`p.numel() * p.element_size()`).
pub fn parameter_bytes(model: &Model) -> u64 {
    model
        .vs
        .trainable_variables()
        .iter()
        .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_admission_counts_is_what_a_run_allocates() {
        for e in Element::ALL {
            assert_eq!(kind(e).elt_size_in_bytes() as u64, e.bytes(), "{e:?}");
        }
    }
}
