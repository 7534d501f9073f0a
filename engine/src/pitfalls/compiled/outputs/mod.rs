//! What a package computes: its output against the eager model's in fp32
//! ([`COMPILED_OUTPUTS`]: close, not the same bits, the same from call to call), and the
//! settings a package carries inside it ([`COMPILED_SETTINGS`]: the mode it was exported in;
//! no autograd graph whatever the grad mode around the call).
//!
//! One file per card: [`compiled_outputs`], [`compiled_settings`]; what several of them share is here.

use protocol::{ChartKind, GradMode, ModelId, RunFailure, RunSpec};

use super::super::kit::{bytes_compared, fig, fig_of, series, time_passes, Ctx, Decision, Outcome, Setup};
use super::super::precision::max_rel_diff;
use super::super::{Card, Needs, Said};
use super::{call_memory, how_compiled, package, python_or_absent};
use crate::lab::{forward, Lab};
use crate::torch_call::catch_torch;
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod compiled_outputs;
pub mod compiled_settings;

pub use compiled_outputs::*;
pub use compiled_settings::*;

pub const COMPILED_TWO_CALLS_BITWISE_EQUAL: FigureName = FigureName::new("compiled, two calls: bitwise equal", Unit::Bool);
