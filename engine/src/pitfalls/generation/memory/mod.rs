//! The generation cards about memory: what the cache and the graph hold
//! (`generate-no-grad`, `kv-cache-size`, `gqa`, `static-cache`, `left-padded-batch`) and the
//! inference-tensor trap of a cache made in one mode and written in another.
//!
//! One file per card: [`generate_no_grad`], [`kv_cache_size`], [`gqa`], [`static_cache`], [`left_padded_batch`], [`inference_tensor_cache`]; what several of them share is here.

use protocol::{
    ChartKind, GenerationReport, GradMode, KvCacheKind, ModelId, RunFailure, RunSpec, Table,
};

use super::super::kit::{fig, fig_of, mib, series, Ctx, Decision, Outcome};
use super::super::{Card, Needs, Said};
use super::{decoder, dtypes, gen_spec, generate, held_positions, positions, rules, setup, shape, with_cache};
use crate::lab::Lab;
use crate::torch_call::{catch_torch, failure};
use crate::pitfalls::figures::{ERROR_RAISED, KV_CACHE_MIB};
use crate::pitfalls::kit::FigureName;
use protocol::Unit;

pub mod generate_no_grad;
pub mod kv_cache_size;
pub mod gqa;
pub mod static_cache;
pub mod left_padded_batch;
pub mod inference_tensor_cache;

pub use generate_no_grad::*;
pub use kv_cache_size::*;
pub use gqa::*;
pub use static_cache::*;
pub use left_padded_batch::*;
pub use inference_tensor_cache::*;

