//! CUDA graph replay for a run (`advanced.cuda_graph`): one warm-up pass on a side stream,
//! one captured pass, then every timed iteration replays the captured kernels instead of
//! launching them one by one from the CPU. What `torch.cuda.graph` does in Python:
//!
//! ```python
//! g = torch.cuda.CUDAGraph()
//! s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
//! with torch.cuda.stream(s): model(x)          # warm-up: lazy init outside the capture
//! with torch.cuda.graph(g): y = model(x)       # capture: y lives in the graph's pool
//! g.replay()                                   # each timed pass; y holds the result
//! ```
//!
//! The captured output and every intermediate live in the graph's private memory pool, so
//! replays allocate nothing: the memory a graph costs shows as reserved, not as a peak.
//! Which specs may ask for a graph is the spec check's (`crate::spec`).
//!
//! A generation's decode step ([`DecodeGraph`]) is captured the same way, with what a graph
//! needs of it: the masked static cache (every step attends to the whole capacity, so the
//! shapes never change), the position as a device tensor (RoPE and the cache's
//! `index_copy_` read it), and persistent input and output buffers that the loop advances
//! between replays. Every capture uses the device's one side stream, whose cuBLAS workspace
//! was made when the Lab primed the libraries, so a capture leaves nothing behind.

use protocol::{DeviceKind, FailureKind, RunFailure, RunSpec, SdpBackend};
use tch::{Kind, Tensor};

use super::forward::forward;
use crate::input::Input;
use crate::models::decoder::{Decoder, KvCache, Logits, Position};
use crate::models::Model;
use crate::torch_call::{catch_torch, failure};
use crate::trace::Probe;
use crate::torch_ext::{CudaGraph, ExtError};

/// A captured forward pass and its output buffer.
pub struct Captured {
    graph: CudaGraph,
    output: Tensor,
}

/// Warms up and captures one forward pass of `model` on `input` under `spec`'s settings.
pub fn capture(
    model: &Model,
    input: &Input,
    spec: &RunSpec,
    device: DeviceKind,
) -> Result<Captured, RunFailure> {
    if device != DeviceKind::Cuda {
        return Err(failure(
            FailureKind::Invalid,
            "a CUDA graph needs a CUDA device",
        ));
    }
    let graph = CudaGraph::begin(0).map_err(graph_failure)?;
    // On the side stream: cuBLAS handles, cuDNN plans and workspaces are made here, not
    // inside the capture (where allocating them would fail or be captured).
    drop(forward(model, input, spec, device)?);
    graph.capture_begin().map_err(graph_failure)?;
    // On an error the graph is dropped, which ends the open capture.
    let output = forward(model, input, spec, device)?;
    graph.capture_end().map_err(graph_failure)?;
    Ok(Captured { graph, output })
}

impl Captured {
    /// Relaunches the captured kernels (the caller synchronises); the result is in the
    /// buffer the capture produced, returned as a view of it.
    pub fn replay(&self) -> Result<Tensor, RunFailure> {
        self.graph.replay().map_err(graph_failure)?;
        Ok(self.output.shallow_clone())
    }
}

/// A generation's decode step, captured: `ids` (`[batch, 1]`, the last tokens) and `pos`
/// (`[1]`, their position) are read by the captured kernels, `next` (`[batch, 1]`) is where
/// they leave the new tokens.
pub struct DecodeGraph {
    graph: CudaGraph,
    ids: Tensor,
    pos: Tensor,
    next: Tensor,
}

impl DecodeGraph {
    /// Captures the decode step that feeds `first` (the prefill's tokens) at `position`,
    /// reading and writing `cache` (a masked static cache, filled by the prefill). The
    /// warm-up pass before the capture runs that very step on the side stream (so lazy
    /// initialisation happens outside the capture) and writes exactly what the first
    /// replay writes again; it also answers which SDPA backend the step runs (`sdp`).
    pub fn capture(
        decoder: &Decoder,
        cache: &mut KvCache,
        first: &Tensor,
        position: i64,
        train: bool,
        sdp: &mut Option<SdpBackend>,
    ) -> Result<DecodeGraph, RunFailure> {
        if first.device() == tch::Device::Cpu {
            return Err(failure(FailureKind::Invalid, "a CUDA graph needs a CUDA device"));
        }
        if !cache.is_masked() {
            return Err(failure(
                FailureKind::Internal,
                "a decode step is captured only over the masked static cache",
            ));
        }
        let (ids, pos) = catch_torch(|| {
            (
                first.copy(),
                Tensor::from_slice(&[position]).to_kind(Kind::Int64).to_device(first.device()),
            )
        })?;
        let graph = CudaGraph::begin(0).map_err(graph_failure)?;
        let pass = |cache: &mut KvCache, sdp: Option<&mut Option<SdpBackend>>| {
            catch_torch(|| {
                let logits = decoder.forward_at(
                    &ids,
                    Position::Tensor(&pos),
                    cache,
                    train,
                    Logits::Last,
                    &mut Probe::off(),
                    sdp,
                );
                logits.argmax(-1, false)
            })
        };
        drop(pass(cache, Some(sdp))?);
        graph.capture_begin().map_err(graph_failure)?;
        // On an error the graph is dropped, which ends the open capture.
        let next = pass(cache, None)?;
        graph.capture_end().map_err(graph_failure)?;
        Ok(DecodeGraph { graph, ids, pos, next })
    }

    /// One decode step: replays the captured kernels, then moves the inputs on (the new
    /// tokens become the next input, the position advances by one) and returns a copy of
    /// the new tokens (the output buffer is overwritten by the next replay).
    pub fn step(&mut self) -> Result<Tensor, RunFailure> {
        self.graph.replay().map_err(graph_failure)?;
        catch_torch(|| {
            let out = self.next.copy();
            self.ids.copy_(&self.next);
            let _ = self.pos.g_add_scalar_(1);
            out
        })
    }

    /// The buffers the graph keeps between steps: its input ids, position and output.
    pub fn buffers(&self) -> [&Tensor; 3] {
        [&self.ids, &self.pos, &self.next]
    }
}

fn graph_failure(e: ExtError) -> RunFailure {
    failure(FailureKind::Internal, format!("CUDA graph: {e}"))
}
