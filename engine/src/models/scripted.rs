//! The TorchScript family: a team's `NAME.pt`, loaded with tch's `CModule` on the run's
//! device for every run ([`build`]; `crate::team` checks the files at start-up and notes
//! each one's path in its [`protocol::team::TeamModel`]), its inputs as its sidecar
//! describes them ([`input`]), and the useful line of the interpreter's errors
//! ([`script_error`]).
//!
//! Loaded afresh, never reused from the lab's model cache: TorchScript's graph executor
//! specialises its plan on the passes it has run (after grad-mode passes an inference_mode
//! pass raises "Inference tensors cannot be saved for backward"), and a run must not depend
//! on the ones before it. Its parameters join the model's `VarStore` (shared, not copied),
//! so parameter counts and the leak check work unchanged.
//!
//! The forward pass goes through the TorchScript interpreter: train/eval is the module's
//! `training` flag, set before a pass when the run's mode differs; no probe reaches inside,
//! so such a model has no trace and no FLOP count.

use std::sync::Mutex;

use protocol::team::{self, Sidecar};
use tch::nn::{self, ModuleT};
use tch::{CModule, Device, IValue, Kind, Tensor};

use super::Net;
use crate::input::Input;
use crate::trace::Probe;

/// A team model's inputs at `batch` and `size`, as its sidecar describes each: random
/// normal (floating point), uniform in `0..high` (ids), or `fill` everywhere (a mask).
/// `python/gradless/peer.py` makes the same tensors, so both sides hold the same bytes.
pub fn input(sidecar: &Sidecar, batch: u32, size: u32, device: Device) -> Input {
    let tensors = sidecar
        .inputs
        .iter()
        .zip(sidecar.shapes(batch, size))
        .map(|(spec, shape)| {
            let kind = match spec.dtype {
                team::Dtype::Float32 => Kind::Float,
                team::Dtype::Float64 => Kind::Double,
                team::Dtype::Float16 => Kind::Half,
                team::Dtype::Bfloat16 => Kind::BFloat16,
                team::Dtype::Int64 => Kind::Int64,
                team::Dtype::Int32 => Kind::Int,
                team::Dtype::Bool => Kind::Bool,
            };
            match (spec.high, spec.fill) {
                (Some(high), _) => Tensor::randint(high, shape.as_slice(), (kind, device)),
                // The sidecar's check keeps integer and bool fills whole.
                (None, Some(fill)) if !spec.dtype.is_floating_point() => {
                    Tensor::full(shape.as_slice(), fill as i64, (kind, device))
                }
                (None, Some(fill)) => Tensor::full(shape.as_slice(), fill, (kind, device)),
                (None, None) => Tensor::randn(shape.as_slice(), (kind, device)),
            }
        })
        .collect();
    Input::many(tensors)
}

/// The inputs as the interpreter's positional arguments (sharing their storage).
pub(crate) fn ivalues(tensors: &[Tensor]) -> Vec<IValue> {
    tensors
        .iter()
        .map(|t| IValue::Tensor(t.shallow_clone()))
        .collect()
}

/// A loaded TorchScript module as the lab runs it. The interpreter keeps `training` on the
/// module, so the mode a run asks for is set before the pass when it differs.
#[derive(Debug)]
struct Scripted {
    module: Mutex<(CModule, Option<bool>)>,
}

impl Scripted {
    /// One forward pass on `inputs` in the mode asked for. Panics with the interpreter's
    /// reason (callers run it under `catch_torch`).
    fn run(&self, inputs: &[Tensor], train: bool) -> Tensor {
        let mut guard = self.module.lock().unwrap_or_else(|e| e.into_inner());
        let (module, mode) = &mut *guard;
        if *mode != Some(train) {
            let set = if train {
                module.f_set_train()
            } else {
                module.f_set_eval()
            };
            if let Err(e) = set {
                panic!("{}", script_error(&e.to_string()));
            }
            *mode = Some(train);
        }
        match module.forward_is(&ivalues(inputs)) {
            Ok(out) => match first_tensor(out) {
                Some(t) => t,
                None => panic!("the module's forward returned no tensor"),
            },
            Err(e) => panic!(
                "the module's forward raised: {}",
                script_error(&e.to_string())
            ),
        }
    }
}

impl ModuleT for Scripted {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.run(std::slice::from_ref(xs), train)
    }
}

/// The forward-pass trace cannot follow a TorchScript module (its interpreter runs the
/// submodules; no probe reaches inside), so it marks nothing: the trace and the FLOP count
/// are absent. Every input the sidecar lists is passed.
impl Net for Scripted {
    fn forward_inputs(
        &self,
        inputs: &Input,
        train: bool,
        _probe: &mut Probe<'_>,
    ) -> Tensor {
        self.run(inputs.tensors(), train)
    }
}

/// Loads the team model `model` (from its `path`) on `device`, its parameters added to `vs`
/// (shared, not copied) so that they are counted like a built-in model's. Panics with the
/// reason when the file is gone or no longer loads; callers run it under `catch_torch`.
pub fn build(model: &team::TeamModel, vs: &nn::VarStore) -> Box<dyn Net> {
    let name = &model.name;
    let Some(path) = &model.path else {
        panic!("`{name}` is not a team model this process loaded");
    };
    let module = match CModule::load_on_device(&path, vs.device()) {
        Ok(m) => m,
        Err(e) => panic!(
            "{} no longer loads: {}",
            path.display(),
            script_error(&e.to_string())
        ),
    };
    let params = match module.named_parameters() {
        Ok(p) => p,
        Err(e) => panic!("{}", script_error(&e.to_string())),
    };
    let root = vs.root();
    for (pname, tensor) in params {
        let trainable = tensor.requires_grad();
        let _ = root.add(&pname.replace('.', "_"), tensor, trainable);
    }
    Box::new(Scripted {
        module: Mutex::new((module, None)),
    })
}

/// The first tensor of a forward pass's output (a tensor, or a tuple or list of them).
pub(crate) fn first_tensor(out: IValue) -> Option<Tensor> {
    match out {
        IValue::Tensor(t) => Some(t),
        IValue::TensorList(v) => v.into_iter().next(),
        IValue::Tuple(v) | IValue::GenericList(v) => v.into_iter().find_map(first_tensor),
        _ => None,
    }
}

/// The useful line of a TorchScript error: the interpreter puts its traceback first and
/// the exception (`RuntimeError: ...`, or the module's own `raise`) last.
pub fn script_error(text: &str) -> String {
    let text = text.trim_start_matches("Torch(\"").trim_end_matches("\")");
    let text = text.replace("\\n", "\n");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let exception = lines.iter().rev().find(|l| {
        let head = l.split(':').next().unwrap_or("");
        (head.ends_with("Error") || head.ends_with("Exception")) && !head.contains(' ')
    });
    match exception {
        Some(l) => l.to_string(),
        None => crate::torch_call::first_line(&text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exception_line_is_kept_from_an_interpreter_error() {
        let text = "The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript, serialized code (most recent call last):\n  File \"code/__torch__.py\", line 8, in forward\n    _0 = torch.conv2d(x, w)\nRuntimeError: Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [2, 3]\n";
        assert!(script_error(text).starts_with("RuntimeError: Expected 3D"));
        assert_eq!(script_error("plain message\nmore"), "plain message");
    }
}
