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

use protocol::{DeviceKind, FailureKind, RunFailure, RunSpec};
use tch::Tensor;

use super::forward::forward;
use crate::input::Input;
use crate::models::Model;
use crate::torch_call::failure;
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

fn graph_failure(e: ExtError) -> RunFailure {
    failure(FailureKind::Internal, format!("CUDA graph: {e}"))
}
