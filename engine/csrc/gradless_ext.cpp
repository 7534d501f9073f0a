// The libtorch C++ APIs that tch does not expose: inference mode, autocast for any device
// and dtype, CUDA caching-allocator statistics, and CPU allocation accounting.
//
// Every function is `extern "C"`, never lets a C++ exception escape (an exception crossing
// into Rust would abort the process), and reports failure by returning a heap string that
// the caller frees with gl_free_error. Success returns nullptr. The safe Rust side is
// engine/src/torch_ext.rs; nothing else calls these.

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

char* dup_message(const char* text) {
  size_t n = std::strlen(text);
  char* out = static_cast<char*>(std::malloc(n + 1));
  if (out != nullptr) {
    std::memcpy(out, text, n + 1);
  }
  return out;
}

// Runs `body`, turning any exception into an error string. c10::Error's what() carries the
// whole C++ backtrace; people need only the message.
template <typename F>
char* guarded(F&& body) {
  try {
    body();
    return nullptr;
  } catch (const c10::Error& e) {
    return dup_message(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return dup_message(e.what());
  } catch (...) {
    return dup_message("unknown C++ exception in gradless_ext");
  }
}

// Receives every allocation and free that libtorch reports on the threads that carry it in
// their thread-local debug info (the mechanism behind the profiler's profile_memory).
// Counters are atomic because intra-op worker threads inherit the debug info.
struct MemoryCounter final : public c10::MemoryReportingInfoBase {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};

  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, size_t /*total_allocated*/,
                         size_t /*total_reserved*/, c10::Device device) override {
    if (!device.is_cpu()) {
      return;
    }
    int64_t now = current.fetch_add(alloc_size) + alloc_size;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }

  bool memoryProfilingEnabled() const override { return true; }
};

thread_local std::shared_ptr<MemoryCounter> tls_counter;

c10::DeviceType device_type(int32_t device) {
  return device == 1 ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
}

at::ScalarType scalar_type(int32_t dtype) {
  return dtype == 1 ? at::kBFloat16 : at::kHalf;
}

}  // namespace

extern "C" {

void gl_free_error(char* error) { std::free(error); }

// ---- inference mode ------------------------------------------------------------------

char* gl_inference_mode_enter(void** guard) {
  return guarded([&] { *guard = new c10::InferenceMode(true); });
}

char* gl_inference_mode_exit(void* guard) {
  return guarded([&] { delete static_cast<c10::InferenceMode*>(guard); });
}

// ---- autocast --------------------------------------------------------------------------

// Mirrors torch.autocast.__enter__: remember the previous state, enable, set the dtype,
// and count the nesting so that only the outermost exit clears the cast cache.
char* gl_autocast_enter(int32_t device, int32_t dtype, int32_t* prev_enabled,
                        int32_t* prev_dtype) {
  return guarded([&] {
    auto type = device_type(device);
    *prev_enabled = at::autocast::is_autocast_enabled(type) ? 1 : 0;
    *prev_dtype = static_cast<int32_t>(at::autocast::get_autocast_dtype(type));
    at::autocast::set_autocast_enabled(type, true);
    at::autocast::set_autocast_dtype(type, scalar_type(dtype));
    at::autocast::increment_nesting();
  });
}

// Mirrors torch.autocast.__exit__.
char* gl_autocast_exit(int32_t device, int32_t prev_enabled, int32_t prev_dtype) {
  return guarded([&] {
    auto type = device_type(device);
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(type, prev_enabled != 0);
    at::autocast::set_autocast_dtype(type, static_cast<at::ScalarType>(prev_dtype));
  });
}

// ---- CPU tensor memory -------------------------------------------------------------------

// Installs the counter on the calling thread (once; later calls keep the first counter).
char* gl_cpu_memory_install() {
  return guarded([&] {
    if (tls_counter) {
      return;
    }
    tls_counter = std::make_shared<MemoryCounter>();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, tls_counter);
  });
}

char* gl_cpu_memory_stats(int64_t* current, int64_t* peak) {
  return guarded([&] {
    TORCH_CHECK(tls_counter, "the CPU memory counter is not installed on this thread");
    *current = tls_counter->current.load();
    *peak = tls_counter->peak.load();
  });
}

char* gl_cpu_memory_reset_peak() {
  return guarded([&] {
    TORCH_CHECK(tls_counter, "the CPU memory counter is not installed on this thread");
    tls_counter->peak.store(tls_counter->current.load());
  });
}

// ---- CUDA --------------------------------------------------------------------------------

char* gl_cuda_available(int32_t* out) {
  return guarded([&] {
    *out = (at::globalContext().hasCUDA() && at::detail::getCUDAHooks().getNumGPUs() > 0) ? 1 : 0;
  });
}

char* gl_cuda_memory_stats(int32_t device, int64_t* allocated, int64_t* allocated_peak,
                           int64_t* reserved, int64_t* reserved_peak) {
  return guarded([&] {
    auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)
                     ->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *allocated = stats.allocated_bytes[agg].current;
    *allocated_peak = stats.allocated_bytes[agg].peak;
    *reserved = stats.reserved_bytes[agg].current;
    *reserved_peak = stats.reserved_bytes[agg].peak;
  });
}

char* gl_cuda_reset_peak(int32_t device) {
  return guarded([&] {
    c10::getDeviceAllocator(c10::DeviceType::CUDA)
        ->resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
}

char* gl_cuda_empty_cache() {
  return guarded([&] { c10::getDeviceAllocator(c10::DeviceType::CUDA)->emptyCache(); });
}

// cudaMemGetInfo through the allocator: device-level free and total, CUDA context included.
char* gl_cuda_mem_info(int32_t device, int64_t* free_bytes, int64_t* total_bytes) {
  return guarded([&] {
    auto info = c10::getDeviceAllocator(c10::DeviceType::CUDA)
                    ->getMemoryInfo(static_cast<c10::DeviceIndex>(device));
    *free_bytes = static_cast<int64_t>(info.first);
    *total_bytes = static_cast<int64_t>(info.second);
  });
}

char* gl_cuda_versions(int64_t* cudart, int64_t* cudnn) {
  return guarded([&] {
    const auto& hooks = at::detail::getCUDAHooks();
    *cudart = hooks.versionCUDART();
    *cudnn = at::globalContext().hasCuDNN() ? hooks.versionCuDNN() : 0;
  });
}

}  // extern "C"
