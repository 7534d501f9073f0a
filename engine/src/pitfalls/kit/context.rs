//! The context an experiment runs in ([`Ctx`]: device, options, run control, the
//! server's Python) and the model, batch and spec it measures ([`Setup`], [`describe`]).

use protocol::{Autocast, DeviceChoice, DeviceKind, GradMode, ModelId, PitfallOptions, RunFailure, RunSpec};

use crate::input::Input;
use crate::lab::{Lab, RunControl};
use crate::models::Model;
use crate::pitfalls::python::PythonPeer;
use crate::torch_call::{catch_torch, tch_device};

/// Where and under what control an experiment runs, with the person's options.
pub struct Ctx<'a> {
    pub device: DeviceKind,
    pub opts: PitfallOptions,
    /// The worker's guarantees for this task (cancellation, deadline, ...): checked between
    /// passes by [`time_passes`] and [`pass_memory`], and given to every [`measure`]d run.
    pub control: &'a RunControl,
    /// The server's Python, which times the per-call-overhead cards' Python side
    /// ([`super::python`]); `None`: those cards say in a note that it was not timed.
    pub python: Option<&'a PythonPeer>,
}

impl Ctx<'_> {
    pub fn cuda(&self) -> bool {
        self.device == DeviceKind::Cuda
    }

    /// A spec on this device; image models get small images on the CPU so cards run in
    /// seconds, and full-size (224²) ones on a GPU.
    pub fn spec(&self, model: ModelId, batch: u32, eval: bool, grad: GradMode) -> RunSpec {
        RunSpec {
            model,
            device: if self.cuda() {
                DeviceChoice::Cuda
            } else {
                DeviceChoice::Cpu
            },
            batch,
            input_size: (model.is_image() && !self.cuda()).then_some(96),
            eval,
            grad,
            autocast: Autocast::Off,
            warmup: if self.cuda() { 3 } else { 1 },
            iters: if self.cuda() { 10 } else { 3 },
            threads: None,
            advanced: Default::default(),
            generate: None,
        }
    }

    pub fn model(&self, default: ModelId) -> ModelId {
        self.opts.model.unwrap_or(default)
    }

    pub fn batch(&self, cpu: u32, cuda: u32) -> u32 {
        self.opts
            .batch
            .unwrap_or(if self.cuda() { cuda } else { cpu })
    }

    /// Stops the experiment if the worker asked it to (cancelled, past its deadline).
    pub fn check(&self) -> Result<(), RunFailure> {
        self.control.check()
    }
}

/// "ResNet-18, batch 8, 96×96 images": what a card's figures were measured on.
pub fn describe(model: ModelId, batch: impl std::fmt::Display, size: u32) -> String {
    // The one table of model facts says what the input is (no fallback arm).
    let input = match model.facts().input {
        protocol::InputKind::Sidecar => match model.team() {
            Some(m) if size > 0 => format!("input {}, size {size}", m.sidecar.describe_inputs()),
            Some(m) => format!("input {}", m.sidecar.describe_inputs()),
            None => format!("size {size}"),
        },
        protocol::InputKind::Image => format!("{size}×{size} images"),
        _ => model.describe_sample(size),
    };
    format!("{}, batch {batch}, {input}", model.display_name())
}

/// The model, batch and spec an experiment runs, with its input size resolved.
pub struct Setup {
    pub model: ModelId,
    pub batch: u32,
    pub size: u32,
    pub spec: RunSpec,
}

impl Setup {
    pub fn new(
        ctx: &Ctx,
        default: ModelId,
        (cpu_batch, cuda_batch): (u32, u32),
        grad: GradMode,
    ) -> Setup {
        let model = ctx.model(default);
        Setup::with_batch(ctx, model, ctx.batch(cpu_batch, cuda_batch), grad)
    }

    pub fn with_batch(ctx: &Ctx, model: ModelId, batch: u32, grad: GradMode) -> Setup {
        let spec = ctx.spec(model, batch, true, grad);
        Setup {
            model,
            batch,
            size: spec.resolved_input_size(),
            spec,
        }
    }

    /// The lab's cached model for this setup (its index in the lab).
    pub fn cached(&self, lab: &mut Lab, ctx: &Ctx) -> Result<usize, RunFailure> {
        lab.model_index(self.model, ctx.device, self.size)
    }

    /// A freshly built model, for experiments that change it (or need it cold).
    pub fn fresh(&self, lab: &Lab, ctx: &Ctx) -> Result<Model, RunFailure> {
        tch::manual_seed(lab.config().seed);
        catch_torch(|| Model::build(self.model, tch_device(ctx.device), self.size))
    }

    pub fn input(&self, model: &Model, ctx: &Ctx) -> Result<Input, RunFailure> {
        catch_torch(|| model.input(self.batch, self.size, tch_device(ctx.device)))
    }

    pub fn describe(&self) -> String {
        describe(self.model, self.batch, self.size)
    }
}

/// Marks a setup line as the one that names the two variants.
pub(in crate::pitfalls) const ARMS: char = '\u{1f}';

/// The setup line that names the two variants, `pitfall`'s and `fix`'s, each by what it
/// does: the card lists it as "A: …; B: …" in the order its code is shown
/// ([`protocol::shows_fix_first`]), so the line never tells which one is recommended.
/// Each description stands on its own (never "the same, ..."), as either may come first.
pub fn arms(pitfall: impl std::fmt::Display, fix: impl std::fmt::Display) -> String {
    arms_after("", pitfall, fix)
}

/// [`arms`] after the words `before` ("Also tried: ").
pub fn arms_after(before: &str, pitfall: impl std::fmt::Display, fix: impl std::fmt::Display) -> String {
    format!("{before}{ARMS}{pitfall}{ARMS}{fix}")
}
