//! Precision lessons beyond autocast: casting the weights once (`model.half()` /
//! `.to(torch.bfloat16)`) against autocast, which keeps fp32 weights and casts them inside
//! every call; and TF32, the CUDA math mode that silently lowers fp32 matmuls and
//! convolutions.
//!
//! One file per card: [`half_weights`], [`tf32`]; what several of them share is here.

use protocol::{
    Advanced, Autocast, ChartKind, GradMode, ModelId, RunFailure, RunSpec,
    WeightsDtype,
};
use tch::{Kind, Tensor};

use super::kit::{fig, fig_of, measure, mib, p, series, series_of, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::{Card, Needs, Said};
use crate::lab::{forward, parameter_bytes, Lab};
use crate::torch_call::{catch_torch, tch_device, torch_failure};
use crate::torch_ext::{BackendFlags, BackendFlagsGuard};
use crate::pitfalls::figures::{LARGEST_OUTPUT_DIFFERENCE, P50_MS};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod half_weights;
pub mod tf32;

pub use half_weights::*;
pub use tf32::*;

// The figures this file's cards report, each defined once (see `kit::figure`).
pub const EACH_PEAK_ABOVE_BASELINE: FigureName = FigureName::new("{}, {}: peak above baseline", Unit::Bytes);
pub const PEAK_ABOVE_BASELINE_MIB: FigureName = FigureName::new("peak above baseline, {} (MiB)", Unit::Mib);

pub(super) fn max_rel_diff(out: &Tensor, reference: &Tensor) -> Result<(f64, f64), RunFailure> {
    catch_torch(|| {
        let diff = (out.to_kind(Kind::Float) - reference.to_kind(Kind::Float))
            .abs()
            .max()
            .double_value(&[]);
        let scale = reference.abs().max().double_value(&[]);
        (diff, scale)
    })
}
