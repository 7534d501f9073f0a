//! One forward pass under a run's settings, the only way the engine runs a model: the grad
//! mode and autocast region the spec asks for, nested as the Python snippet nests them, the
//! CUDA math switches, and the input copied to the device inside the pass when it starts in
//! host memory. [`forward`] is the timed iterations' and the experiments' pass,
//! [`traced_pass`] the one pass with a recording [`Probe`] after a run's timed iterations,
//! and `cuda_graph` captures [`forward`] itself.

use protocol::{Autocast, DeviceKind, GradMode, RunFailure, RunSpec, TracePoint};
use tch::Tensor;

use super::{backend_guard, place_input};
use crate::device::Meter;
use crate::input::Input;
use crate::models::Model;
use crate::torch_call::{catch_torch, torch_failure};
use crate::torch_ext::{AutocastGuard, InferenceModeGuard, LowPrecision};
use crate::trace::Probe;

/// The forward pass inside the grad mode and autocast region the spec asks for, exactly as
/// the Python snippet nests them, under the CUDA math switches it asks for, with the input
/// first copied to the device when it starts in host memory.
pub fn forward(
    model: &Model,
    input: &Input,
    spec: &RunSpec,
    device: DeviceKind,
) -> Result<Tensor, RunFailure> {
    forward_probed(model, input, spec, device, &mut Probe::off())
}

/// [`forward`] with a probe the model marks at its module boundaries (the traced pass).
pub fn forward_probed(
    model: &Model,
    input: &Input,
    spec: &RunSpec,
    device: DeviceKind,
    probe: &mut Probe<'_>,
) -> Result<Tensor, RunFailure> {
    let _regions = enter_regions(spec, device)?;
    let _flags = backend_guard(&spec.advanced, device)?;
    let placed = place_input(input, &spec.advanced, device)?;
    catch_torch(|| model.net.forward_inputs(&placed, !spec.eval, probe))
}

/// The grad mode and autocast region a spec asks for, nested as the Python snippet nests
/// them; they close when the value is dropped (autocast first).
pub(crate) struct Regions {
    _autocast: Option<AutocastGuard>,
    _no_grad: Option<tch::NoGradGuard>,
    _inference: Option<InferenceModeGuard>,
}

/// Enters the spec's grad mode, then its autocast region.
pub(crate) fn enter_regions(spec: &RunSpec, device: DeviceKind) -> Result<Regions, RunFailure> {
    let _inference = match spec.grad {
        GradMode::InferenceMode => Some(InferenceModeGuard::enter().map_err(torch_failure)?),
        _ => None,
    };
    let _no_grad = (spec.grad == GradMode::NoGrad).then(tch::no_grad_guard);
    let _autocast = match spec.autocast {
        Autocast::Off => None,
        Autocast::Fp16 => {
            Some(AutocastGuard::enter(device, LowPrecision::Fp16).map_err(torch_failure)?)
        }
        Autocast::Bf16 => {
            Some(AutocastGuard::enter(device, LowPrecision::Bf16).map_err(torch_failure)?)
        }
    };
    Ok(Regions {
        _autocast,
        _no_grad,
        _inference,
    })
}

/// One traced forward pass under the spec's settings: the model's forward with a recording
/// probe, output released before returning. `offset` is what the meter read at the
/// baseline.
pub fn traced_pass(
    model: &Model,
    input: &Input,
    spec: &RunSpec,
    device: DeviceKind,
    meter: &Meter<'_>,
    offset: u64,
) -> Result<Vec<TracePoint>, RunFailure> {
    let mut probe = Probe::recording(meter, device, offset)?;
    let out = forward_probed(model, input, spec, device, &mut probe)?;
    drop(out);
    probe.finish()
}
