//! Layout and transfer lessons: channels_last changes strides, not values; the copy of
//! the input to the device belongs in the timing; and `cudnn.benchmark` pays for its
//! autotuning on the first pass at every new shape.
//!
//! One file per card: [`channels_last`], [`input_copy`], [`cudnn_benchmark`]; what several of them share is here.

use protocol::{
    cpu_reason, Advanced, ChartKind, GradMode, InputSource, MemoryFormat, ModelId, RunFailure,
    RunSpec,
};

use super::kit::{fig, measure, numbered, p, series, time_passes, Ctx, Decision, Outcome, Setup, Shift};
use super::timing::warm_up_rule;
use super::{Card, Needs, Said};
use crate::lab::{forward, is_channels_last, make_input, Lab};
use crate::torch_call::{catch_torch, tch_device};
use tch::{Device, Kind, Tensor};
use crate::pitfalls::figures::{LARGEST_OUTPUT_DIFFERENCE, P50_MS};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod channels_last;
pub mod input_copy;
pub mod cudnn_benchmark;

pub use channels_last::*;
pub use input_copy::*;
pub use cudnn_benchmark::*;

