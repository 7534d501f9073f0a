//! The compiled-model lessons: `torch.compile` ahead of time, as a C++ server runs it
//! (`torch.export`, then AOTInductor's `.pt2` package, loaded into this process through
//! `crate::torch_ext::AotiPackage`), against the eager model in the same run.
//!
//! - this module: what the cards share (the package of a card's model, the one per-pass
//!   memory reading of a call, the plan's words) and the two cards about cost:
//!   [`COMPILED_FIRST_CALL`] (what the first call waits for) and [`COMPILED_BATCH`] (per
//!   pass, at batch 1 and at a large batch: time and peak memory).
//! - [`shapes`]: a batch outside the range the package was exported for.
//! - [`outputs`]: the compiled output against eager's ([`outputs::COMPILED_OUTPUTS`]) and
//!   the settings inside a package ([`outputs::COMPILED_SETTINGS`]).
//!
//! Every card compiles with this server's Python (`--python`); without one it says so and
//! grades nothing. Packages are cached on disk (`crate::lab::compiled`), so the cards share
//! one dynamic package per model, input size and thread count: only the first card a
//! server runs pays the compile, and it reports that cost.
//!
//! One file per card: [`compiled_first_call`], [`compiled_batch`]; what several of them share is here.

use std::path::PathBuf;
use std::time::Instant;

use protocol::{ChartKind, GradMode, ModelId, RunFailure, RunSpec, FailureKind};

use super::kit::{fig, fig_of, interval_figures, mib, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::python;
use super::{Card, Needs, Said};
use crate::lab::compiled::{prepare, Compiled, Job};
use crate::lab::{forward, Lab};
use crate::torch_call::{failure, synchronize, torch_failure};
use crate::pitfalls::figures::{BATCH_1_P50_EAGER, BATCH_P50_EAGER, P50_LATENCY_MS, PEAK_ABOVE_BASELINE_MIB};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod compiled_first_call;
pub mod compiled_batch;

pub use compiled_first_call::*;
pub use compiled_batch::*;

pub mod outputs;
pub mod shapes;

/// The models a package can be compiled from: the built-in forward models, whose PyTorch
/// definitions the compile script has, and team models whose sidecar names theirs.
fn compilable(model: ModelId) -> bool {
    match model {
        ModelId::TinyMlp | ModelId::Resnet18 | ModelId::Resnet50 | ModelId::MobilenetV2 | ModelId::Transformer => true,
        // A team model whose sidecar names its Python definition.
        ModelId::Team(m) => m.sidecar.source.is_some(),
        ModelId::Decoder(_) | ModelId::Named(_) => false,
    }
}

/// This server's Python, or the outcome that says a card cannot compile here.
fn python_or_absent(lab: &Lab) -> Result<PathBuf, Outcome> {
    lab.config().python.clone().ok_or_else(|| {
        Outcome::new(
            Decision::not_applicable("This server has no Python with PyTorch (--python, GRADLESS_PYTHON) to export and compile the model with, so nothing was compiled or measured."),
            String::new(),
            ChartKind::Bar,
        )
    })
}

/// Refuses a model the cards cannot compile, before anything runs.
fn check_model(model: ModelId) -> Result<(), RunFailure> {
    if compilable(model) {
        return Ok(());
    }
    Err(failure(
        FailureKind::Invalid,
        format!("{model}: the compiled-model cards compile a built-in forward model (tiny_mlp, resnet18, resnet50, mobilenet_v2, transformer) or a team model whose sidecar names its `source`"),
    ))
}

/// The package of the lab's cached model for `setup`, exported for `batches` (`(min, max)`,
/// a static batch when equal), compiled with `python` or taken from the cache.
fn package(lab: &mut Lab, ctx: &Ctx, setup: &Setup, python: &std::path::Path, batches: (u32, u32)) -> Result<(usize, Compiled), RunFailure> {
    check_model(setup.model)?;
    let i = setup.cached(lab, ctx)?;
    let threads = lab.config().threads;
    let job = Job { model: lab.model(i), spec: &setup.spec, device: ctx.device, threads, batches };
    let c = prepare(&job, Some(python), ctx.control)?;
    Ok((i, c))
}

/// What every compiled card's plan says of how the package is made.
fn how_compiled(ctx: &Ctx) -> String {
    format!(
        "The package: the model in eval(), fp32, exported by torch.export and compiled by AOTInductor (torch._inductor.aoti_compile_and_package) in this server's Python, {} kernels, then loaded into this process and called from libtorch (AOTIModelPackageLoader); one already built for this model, its weights, shapes, threads and PyTorch comes from the server's cache",
        if ctx.cuda() { "Triton" } else { "C++" }
    )
}
