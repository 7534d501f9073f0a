// CUDA graphs (capture a forward pass once, replay it), the one part of the extension that
// needs CUDA's own headers: ATen's CUDAGraph and c10's CUDA streams include
// cuda_runtime_api.h. build.rs compiles this file with GRADLESS_CUDA_GRAPHS defined only
// where libtorch has CUDA and those headers were found (PyPI's nvidia runtime package, or a
// CUDA toolkit); elsewhere every function answers why graphs are absent.
//
// Conventions as in gradless_ext.cpp: `extern "C"`, no exception escapes, an error is a
// heap string freed with gl_free_error. The safe Rust side is engine/src/torch_ext.rs.
//
// Only functions defined in libtorch_cuda / libc10_cuda are called (CUDAGraph's methods,
// getStreamFromPool, setCurrentCUDAStream, device_synchronize), never the CUDA runtime
// directly, so linking needs nothing beyond libtorch's own libraries.

#include <cstring>

#include "guarded.h"

#ifdef GRADLESS_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#endif

namespace {

using gradless::dup_message;
using gradless::guarded;

#ifdef GRADLESS_CUDA_GRAPHS
// The one side stream of each device, taken from libtorch's pool once and kept for the
// process. cuBLAS keeps a workspace per (handle, stream) through the caching allocator,
// never freed (about 32 MiB on sm_90): a fresh pool stream per capture would leave a new
// one behind each time, read as a leak. With one stream, primed at start-up
// (gl_cuda_side_stream_enter, see the Lab's prime_cuda_libraries), captures allocate none.
c10::cuda::CUDAStream side_stream(c10::DeviceIndex device) {
  static std::mutex lock;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> hold(lock);
  auto it = streams.find(device);
  if (it == streams.end()) {
    it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
  }
  return it->second;
}

// The thread's current stream before gl_cuda_side_stream_enter moved it.
struct StreamSwitch {
  c10::cuda::CUDAStream previous;
};

// One capture and its replays. Capture must happen on a stream other than the legacy
// default one, so the session moves the thread onto a stream from libtorch's pool from
// `new` until `capture_end` (or until it is freed, whichever comes first), as
// `with torch.cuda.graph(g):` does in Python.
struct GraphSession {
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream previous;
  c10::cuda::CUDAStream side;
  bool on_side = false;
  bool capturing = false;

  explicit GraphSession(c10::DeviceIndex device)
      : previous(c10::cuda::getCurrentCUDAStream(device)),
        side(side_stream(device)) {}

  void enter_side() {
    if (!on_side) {
      c10::cuda::device_synchronize();
      c10::cuda::setCurrentCUDAStream(side);
      on_side = true;
    }
  }

  void leave_side() {
    if (on_side) {
      c10::cuda::device_synchronize();
      c10::cuda::setCurrentCUDAStream(previous);
      on_side = false;
    }
  }
};
#endif

}  // namespace

extern "C" {

// Whether this build can capture CUDA graphs (1) or not (0, with the reason in *why when
// why_len > 0).
char* gl_cuda_graphs_built(int32_t* out, char* why, int32_t why_len) {
#ifdef GRADLESS_CUDA_GRAPHS
  *out = 1;
  if (why_len > 0) why[0] = '\0';
#else
  *out = 0;
  const char* reason = GRADLESS_NO_CUDA_GRAPHS_REASON;
  if (why_len > 0) {
    std::strncpy(why, reason, static_cast<size_t>(why_len - 1));
    why[why_len - 1] = '\0';
  }
#endif
  return nullptr;
}

// A new session on CUDA device `device`; the calling thread now issues work on the
// session's side stream (a warm-up pass there lets lazy initialisation happen before the
// capture, which may not allocate handles or workspaces).
char* gl_cuda_graph_new(int32_t device, void** out) {
#ifdef GRADLESS_CUDA_GRAPHS
  return guarded([&] {
    auto* session = new GraphSession(static_cast<c10::DeviceIndex>(device));
    try {
      session->enter_side();
    } catch (...) {
      delete session;
      throw;
    }
    *out = session;
  });
#else
  (void)device;
  (void)out;
  return dup_message(GRADLESS_NO_CUDA_GRAPHS_REASON);
#endif
}

char* gl_cuda_graph_capture_begin(void* raw) {
#ifdef GRADLESS_CUDA_GRAPHS
  return guarded([&] {
    auto* session = static_cast<GraphSession*>(raw);
    session->enter_side();
    session->graph.capture_begin();
    session->capturing = true;
  });
#else
  (void)raw;
  return dup_message(GRADLESS_NO_CUDA_GRAPHS_REASON);
#endif
}

// Ends the capture and puts the thread back on the stream it was on.
char* gl_cuda_graph_capture_end(void* raw) {
#ifdef GRADLESS_CUDA_GRAPHS
  return guarded([&] {
    auto* session = static_cast<GraphSession*>(raw);
    session->capturing = false;
    try {
      session->graph.capture_end();
    } catch (...) {
      session->leave_side();
      throw;
    }
    session->leave_side();
  });
#else
  (void)raw;
  return dup_message(GRADLESS_NO_CUDA_GRAPHS_REASON);
#endif
}

// Launches the captured kernels once on the current stream (the caller synchronises).
char* gl_cuda_graph_replay(void* raw) {
#ifdef GRADLESS_CUDA_GRAPHS
  return guarded([&] { static_cast<GraphSession*>(raw)->graph.replay(); });
#else
  (void)raw;
  return dup_message(GRADLESS_NO_CUDA_GRAPHS_REASON);
#endif
}

// Moves the calling thread onto device `device`'s side stream (the one every capture uses)
// until gl_cuda_side_stream_exit, so that libraries' per-stream state (cuBLAS workspaces)
// can be made there once, before any run's baseline.
char* gl_cuda_side_stream_enter(int32_t device, void** out) {
#ifdef GRADLESS_CUDA_GRAPHS
  return guarded([&] {
    auto index = static_cast<c10::DeviceIndex>(device);
    auto* saved = new StreamSwitch{c10::cuda::getCurrentCUDAStream(index)};
    try {
      c10::cuda::device_synchronize();
      c10::cuda::setCurrentCUDAStream(side_stream(index));
    } catch (...) {
      delete saved;
      throw;
    }
    *out = saved;
  });
#else
  (void)device;
  (void)out;
  return dup_message(GRADLESS_NO_CUDA_GRAPHS_REASON);
#endif
}

char* gl_cuda_side_stream_exit(void* raw) {
#ifdef GRADLESS_CUDA_GRAPHS
  return guarded([&] {
    auto* saved = static_cast<StreamSwitch*>(raw);
    try {
      c10::cuda::device_synchronize();
      c10::cuda::setCurrentCUDAStream(saved->previous);
    } catch (...) {
      delete saved;
      throw;
    }
    delete saved;
  });
#else
  (void)raw;
  return nullptr;
#endif
}

// Frees the graph and its private memory pool (back to the caching allocator), leaving the
// side stream first if a capture never ended.
char* gl_cuda_graph_free(void* raw) {
#ifdef GRADLESS_CUDA_GRAPHS
  return guarded([&] {
    auto* session = static_cast<GraphSession*>(raw);
    // A pass that failed during capture left the stream capturing: end it (the graph is
    // invalid and dropped) so the stream is usable again.
    if (session->capturing) {
      session->capturing = false;
      try {
        session->graph.capture_end();
      } catch (...) {
      }
    }
    try {
      session->leave_side();
    } catch (...) {
      delete session;
      throw;
    }
    delete session;
  });
#else
  (void)raw;
  return nullptr;
#endif
}

}  // extern "C"
