//! Turning a [`RunSpec`] from outside into a [`CheckedSpec`] that can run on this machine.
//! After this point no code sees an invalid spec.

use protocol::{DeviceChoice, DeviceKind, Limits, RunSpec, SpecError};

use crate::device::Machine;

/// A spec that passed every check, with `device` and `input_size` resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedSpec {
    spec: RunSpec,
    device: DeviceKind,
}

impl CheckedSpec {
    /// The spec as it will run (`device` is `cpu` or `cuda`, `input_size` is set).
    pub fn spec(&self) -> &RunSpec {
        &self.spec
    }

    pub fn device(&self) -> DeviceKind {
        self.device
    }

    pub fn input_size(&self) -> u32 {
        self.spec.resolved_input_size()
    }
}

/// Checks `spec` against the limits and against what this machine can do.
pub fn check_spec(
    spec: RunSpec,
    limits: &Limits,
    machine: &Machine,
) -> Result<CheckedSpec, SpecError> {
    spec.check(limits)?;
    let device = match spec.device {
        DeviceChoice::Cpu => DeviceKind::Cpu,
        DeviceChoice::Cuda if machine.has_cuda() => DeviceKind::Cuda,
        DeviceChoice::Cuda => {
            return Err(SpecError {
                field: "device".into(),
                message: "this server has no CUDA device (libtorch found none); use cpu or auto"
                    .into(),
            })
        }
        DeviceChoice::Auto if machine.has_cuda() => DeviceKind::Cuda,
        DeviceChoice::Auto => DeviceKind::Cpu,
    };
    if let Some(s) = machine
        .autocast_support(device)
        .into_iter()
        .find(|s| s.autocast == spec.autocast)
    {
        if !s.supported {
            return Err(SpecError {
                field: "autocast".into(),
                message: format!(
                    "autocast {} cannot run on this {}: {}",
                    spec.autocast.as_str(),
                    device.as_str(),
                    s.note
                ),
            });
        }
    }
    let mut spec = spec;
    spec.device = match device {
        DeviceKind::Cpu => DeviceChoice::Cpu,
        DeviceKind::Cuda => DeviceChoice::Cuda,
    };
    spec.input_size = Some(spec.resolved_input_size());
    Ok(CheckedSpec { spec, device })
}
