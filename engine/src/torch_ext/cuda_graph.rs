//! CUDA graphs at the border: whether this build has them, a capture session
//! ([`CudaGraph`]) and the device's one side stream ([`SideStream`]), all in
//! `csrc/gradless_cuda_graph.cpp`.

use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;

use super::{check, ffi, Result};

/// Whether this build can capture CUDA graphs; if not, why (libtorch without CUDA, or no
/// CUDA runtime headers when the extension was compiled).
pub fn cuda_graphs_built() -> std::result::Result<(), String> {
    let mut built = 0;
    let mut why = [0 as c_char; 256];
    // SAFETY: both out-pointers are valid for the call; the extension writes at most
    // `why.len()` bytes, NUL-terminated.
    check(unsafe { ffi::gl_cuda_graphs_built(&mut built, why.as_mut_ptr(), why.len() as i32) })
        .map_err(|e| e.0)?;
    if built == 1 {
        return Ok(());
    }
    // SAFETY: NUL-terminated by the extension within the buffer.
    Err(unsafe { CStr::from_ptr(why.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// A CUDA graph session (`torch.cuda.CUDAGraph` with `torch.cuda.graph`'s side stream):
/// from [`CudaGraph::begin`] until [`CudaGraph::capture_end`] this thread issues its CUDA
/// work on a side stream (so a warm-up pass there does its lazy initialisation before the
/// capture); then [`CudaGraph::replay`] relaunches the captured kernels. Dropping it frees
/// the graph and its private memory pool, ending a capture a failed pass left open.
pub struct CudaGraph {
    raw: *mut c_void,
    _not_send: PhantomData<*mut ()>,
}

impl CudaGraph {
    pub fn begin(device: i32) -> Result<CudaGraph> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the extension writes a fresh heap pointer into `raw` on success.
        check(unsafe { ffi::gl_cuda_graph_new(device, &mut raw) })?;
        Ok(CudaGraph {
            raw,
            _not_send: PhantomData,
        })
    }

    pub fn capture_begin(&self) -> Result<()> {
        // SAFETY: `raw` is a live session made by gl_cuda_graph_new on this thread.
        check(unsafe { ffi::gl_cuda_graph_capture_begin(self.raw) })
    }

    pub fn capture_end(&self) -> Result<()> {
        // SAFETY: as above.
        check(unsafe { ffi::gl_cuda_graph_capture_end(self.raw) })
    }

    pub fn replay(&self) -> Result<()> {
        // SAFETY: as above.
        check(unsafe { ffi::gl_cuda_graph_replay(self.raw) })
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: `raw` came from gl_cuda_graph_new and is freed exactly once, here.
        if let Err(e) = check(unsafe { ffi::gl_cuda_graph_free(self.raw) }) {
            tracing::error!("freeing a CUDA graph failed: {e}");
        }
    }
}

/// This thread's CUDA work goes to device `device`'s side stream (the one every capture
/// uses) for as long as the guard lives. What is made there once — cuBLAS's workspace for
/// that stream above all — is not made again by a capture, so a capture leaks nothing.
pub struct SideStream {
    raw: *mut c_void,
}

impl SideStream {
    pub fn enter(device: i32) -> Result<SideStream> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: the extension writes a fresh heap pointer into `raw` on success.
        check(unsafe { ffi::gl_cuda_side_stream_enter(device, &mut raw) })?;
        Ok(SideStream { raw })
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        // SAFETY: `raw` came from gl_cuda_side_stream_enter on this thread (!Send through the
        // pointer) and is released once, here.
        if let Err(e) = check(unsafe { ffi::gl_cuda_side_stream_exit(self.raw) }) {
            tracing::error!("leaving the CUDA side stream failed: {e}");
        }
    }
}
