// The libtorch C++ APIs that tch does not expose: inference mode, autocast for any device
// and dtype, CUDA caching-allocator statistics, CPU allocation accounting, the run guard
// (a memory budget, a deadline and a cancel flag checked at every CPU allocation of the
// measuring thread), the CUDA device's facts by its CUDA index, and which backend
// scaled_dot_product_attention picks (with the context's SDP switches).
//
// Every function is `extern "C"`, never lets a C++ exception escape (an exception crossing
// into Rust would abort the process), and reports failure by returning a heap string that
// the caller frees with gl_free_error. Success returns nullptr. The safe Rust side is
// engine/src/torch_ext.rs; nothing else calls these.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <dlfcn.h>

#include "guarded.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using gradless::dup_message;
using gradless::guarded;

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

  // The run guard (see GuardedCpuAllocator): set and read only by the thread that installed
  // this counter (`owner`), so plain fields suffice. limit < 0: no budget; deadline_ns < 0:
  // no deadline (steady-clock nanoseconds); cancel: a flag owned by the Rust side, which
  // keeps it alive while it is armed.
  std::thread::id owner = std::this_thread::get_id();
  int64_t limit = -1;
  int64_t deadline_ns = -1;
  const uint8_t* cancel = nullptr;
};

thread_local std::shared_ptr<MemoryCounter> tls_counter;

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Wraps libtorch's CPU allocator. Before each allocation made on a thread whose counter has
// an armed guard, it checks the cancel flag, the deadline and the budget, and throws the
// error a real allocation failure would throw: the op unwinds, every tensor it made is
// freed by RAII, and nothing is allocated past the budget. The DataPtr handed back is the
// wrapped allocator's own (its context is its data pointer, as raw_allocate requires, and
// its deleter does the accounting), so frees need no wrapper. Only the measuring thread
// throws: intra-op worker threads inherit the counter to count, but an exception thrown
// inside a parallel region of a library that does not expect it would abort the process.
struct GuardedCpuAllocator final : public c10::Allocator {
  c10::Allocator* inner;
  explicit GuardedCpuAllocator(c10::Allocator* base) : inner(base) {}

  c10::DataPtr allocate(size_t n) override {
    auto* info = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
    auto* counter = dynamic_cast<MemoryCounter*>(info);
    if (counter != nullptr && counter->owner == std::this_thread::get_id()) {
      if (counter->cancel != nullptr && __atomic_load_n(counter->cancel, __ATOMIC_RELAXED) != 0) {
        TORCH_CHECK(false, "gradless-guard: cancelled: the run was cancelled");
      }
      if (counter->deadline_ns >= 0 && steady_now_ns() > counter->deadline_ns) {
        TORCH_CHECK(false, "gradless-guard: deadline: the run went past the server's time limit");
      }
      if (counter->limit >= 0) {
        int64_t now = counter->current.load();
        if (now + static_cast<int64_t>(n) > counter->limit) {
          TORCH_CHECK_WITH(OutOfMemoryError, false,
                           "gradless-guard: out of memory: allocating ", n, " bytes with ", now,
                           " held would cross the budget of ", counter->limit, " bytes");
        }
      }
    }
    return inner->allocate(n);
  }

  c10::DeleterFnPtr raw_deleter() const override { return inner->raw_deleter(); }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner->copy_data(dest, src, count);
  }
};

void install_guarded_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: storages keep a pointer to their allocator for the whole process.
    static GuardedCpuAllocator* guarded = new GuardedCpuAllocator(c10::GetCPUAllocator());
    // The highest priority, so that nothing registered later replaces it by accident.
    c10::SetCPUAllocator(guarded, /*priority=*/255);
  });
}

// ---- the CUDA driver, reached at run time -----------------------------------------------
// The driver library (libcuda.so.1) belongs to the NVIDIA driver, not to libtorch, and has
// stable C entry points. Loading it at run time keeps CPU-only hosts free of it; the driver
// applies CUDA_VISIBLE_DEVICES to its ordinals exactly as the runtime does, so ordinal i is
// libtorch's cuda:i.
using CuInit = int (*)(unsigned int);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);
using CuDeviceGetPCIBusId = int (*)(char*, int, int);
using CuDriverGetVersion = int (*)(int*);
constexpr int kCcMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kCcMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

void* cuda_driver() {
  static void* handle = [] {
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return h != nullptr ? h : dlopen("libcuda.so.1", RTLD_LAZY);
  }();
  return handle;
}

template <typename F>
F driver_symbol(const char* name) {
  void* h = cuda_driver();
  TORCH_CHECK(h != nullptr, "the CUDA driver library (libcuda.so.1) could not be loaded");
  void* sym = dlsym(h, name);
  TORCH_CHECK(sym != nullptr, "the CUDA driver has no ", name);
  return reinterpret_cast<F>(sym);
}

void driver_check(int rc, const char* what) {
  TORCH_CHECK(rc == 0, "CUDA driver call ", what, " failed with error ", rc);
}

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

// Whether autograd records operations here: GradMode (off under no_grad and inside
// inference mode). A plain read that cannot throw.
int32_t gl_grad_enabled() { return c10::GradMode::is_enabled() ? 1 : 0; }

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
    install_guarded_allocator();
    tls_counter = std::make_shared<MemoryCounter>();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, tls_counter);
  });
}

// ---- the run guard -----------------------------------------------------------------------

char* gl_steady_now_ns(int64_t* out) {
  return guarded([&] { *out = steady_now_ns(); });
}

// Arms (or, with -1/-1/null, disarms) the guard of this thread's counter.
char* gl_cpu_guard_set(int64_t limit, int64_t deadline_ns, const uint8_t* cancel) {
  return guarded([&] {
    TORCH_CHECK(tls_counter, "the CPU memory counter is not installed on this thread");
    tls_counter->limit = limit;
    tls_counter->deadline_ns = deadline_ns;
    tls_counter->cancel = cancel;
  });
}

char* gl_cpu_guard_get(int64_t* limit, int64_t* deadline_ns, const uint8_t** cancel) {
  return guarded([&] {
    TORCH_CHECK(tls_counter, "the CPU memory counter is not installed on this thread");
    *limit = tls_counter->limit;
    *deadline_ns = tls_counter->deadline_ns;
    *cancel = tls_counter->cancel;
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

// allocated: whole blocks (what torch.cuda.memory_allocated reads); requested: the bytes
// client code asked for (blocks round up to 512 B and may keep an unsplit tail).
char* gl_cuda_memory_stats(int32_t device, int64_t* allocated, int64_t* allocated_peak,
                           int64_t* reserved, int64_t* reserved_peak, int64_t* requested) {
  return guarded([&] {
    auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)
                     ->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *allocated = stats.allocated_bytes[agg].current;
    *allocated_peak = stats.allocated_bytes[agg].peak;
    *reserved = stats.reserved_bytes[agg].current;
    *reserved_peak = stats.reserved_bytes[agg].peak;
    *requested = stats.requested_bytes[agg].current;
  });
}

char* gl_cuda_reset_peak(int32_t device) {
  return guarded([&] {
    c10::getDeviceAllocator(c10::DeviceType::CUDA)
        ->resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
}

// The process-wide CUDA math switches a run may change: TF32 for cuBLAS matmuls
// (torch.backends.cuda.matmul.allow_tf32), TF32 for cuDNN convolutions
// (torch.backends.cudnn.allow_tf32) and cudnn.benchmark. Plain flags in the global
// context: reading and setting them needs no GPU.
char* gl_backend_flags_get(int32_t* tf32_cublas, int32_t* tf32_cudnn, int32_t* benchmark) {
  return guarded([&] {
    auto& ctx = at::globalContext();
    *tf32_cublas = ctx.allowTF32CuBLAS() ? 1 : 0;
    *tf32_cudnn = ctx.allowTF32CuDNN() ? 1 : 0;
    *benchmark = ctx.benchmarkCuDNN() ? 1 : 0;
  });
}

char* gl_backend_flags_set(int32_t tf32_cublas, int32_t tf32_cudnn, int32_t benchmark) {
  return guarded([&] {
    auto& ctx = at::globalContext();
    ctx.setAllowTF32CuBLAS(tf32_cublas != 0);
    ctx.setAllowTF32CuDNN(tf32_cudnn != 0);
    ctx.setBenchmarkCuDNN(benchmark != 0);
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
    // The cuDNN loaded at run time (versionCuDNN is the one compiled against).
    *cudnn = at::globalContext().hasCuDNN() ? hooks.versionRuntimeCuDNN() : 0;
  });
}

// The facts of CUDA device `device` (libtorch's index) from the driver: its name, compute
// capability and PCI bus id ("0000:3B:00.0", which nvidia-smi --id accepts).
char* gl_cuda_device_facts(int32_t device, char* name, int32_t name_len, int32_t* cc_major,
                           int32_t* cc_minor, char* bus_id, int32_t bus_len) {
  return guarded([&] {
    driver_check(driver_symbol<CuInit>("cuInit")(0), "cuInit");
    int dev = 0;
    driver_check(driver_symbol<CuDeviceGet>("cuDeviceGet")(&dev, device), "cuDeviceGet");
    driver_check(driver_symbol<CuDeviceGetName>("cuDeviceGetName")(name, name_len, dev),
                 "cuDeviceGetName");
    auto attr = driver_symbol<CuDeviceGetAttribute>("cuDeviceGetAttribute");
    driver_check(attr(cc_major, kCcMajor, dev), "cuDeviceGetAttribute(major)");
    driver_check(attr(cc_minor, kCcMinor, dev), "cuDeviceGetAttribute(minor)");
    driver_check(driver_symbol<CuDeviceGetPCIBusId>("cuDeviceGetPCIBusId")(bus_id, bus_len, dev),
                 "cuDeviceGetPCIBusId");
  });
}

}  // extern "C"

// ---- RMSNorm in one op ---------------------------------------------------------------------

extern "C" {

// RMSNorm over the last dimension of an fp32 CPU tensor, in one op: for each row,
// `x * rsqrt(mean(x²) + eps) * scale`, the products in rms_norm's order (normalise, then
// scale) and in fp32, the sum of squares accumulated in double. The scale is `weight_a`
// ([width]) for rows whose head (the second-to-last index, modulo `heads`) is below `split`,
// `weight_b` for the others (a null `weight_b`: every row takes `weight_a`), plus one when
// `plus_one` (Gemma's `1 + weight`). libtorch's composite rms_norm dispatches a dozen ops for
// this (casts, pow, mean, add, rsqrt, two muls), which a decode step at batch 1 pays once
// per norm. Inference only: it records no gradient. `*out` receives a new `at::Tensor*`
// (tch's handle, which the caller owns).
char* gl_rms_norm_f32(const void* input, const void* weight_a, const void* weight_b,
                      int64_t heads, int64_t split, double eps, int32_t plus_one, void** out) {
  return guarded([&] {
    const auto& x0 = *static_cast<const at::Tensor*>(input);
    const auto& wa0 = *static_cast<const at::Tensor*>(weight_a);
    TORCH_CHECK(x0.device().is_cpu() && x0.scalar_type() == at::kFloat && x0.dim() >= 1,
                "gl_rms_norm_f32: an fp32 CPU tensor");
    const int64_t width = x0.size(-1);
    TORCH_CHECK(wa0.scalar_type() == at::kFloat && wa0.numel() == width, "gl_rms_norm_f32: a [width] weight");
    TORCH_CHECK(heads >= 1, "gl_rms_norm_f32: heads >= 1");
    TORCH_CHECK(x0.stride(-1) == 1 || x0.size(-1) <= 1, "gl_rms_norm_f32: rows contiguous in memory");
    // Rows are read where they lie (a view's rows need not be evenly spaced: the queries and
    // keys narrowed out of one projection), so no contiguous copy is made.
    const auto& x = x0;
    auto wa = wa0.contiguous();
    at::Tensor wb;
    if (weight_b != nullptr) {
      wb = static_cast<const at::Tensor*>(weight_b)->contiguous();
      TORCH_CHECK(wb.scalar_type() == at::kFloat && wb.numel() == width, "gl_rms_norm_f32: a [width] weight");
    }
    auto y = at::empty(x.sizes(), x.options());
    const int64_t rows = width == 0 ? 0 : x.numel() / width;
    const int64_t lead = x.dim() - 1;
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end() - 1);
    std::vector<int64_t> strides(x.strides().begin(), x.strides().end() - 1);
    auto row_offset = [&](int64_t r) {
      int64_t offset = 0;
      for (int64_t i = lead - 1; i >= 0; --i) {
        offset += (r % sizes[i]) * strides[i];
        r /= sizes[i];
      }
      return offset;
    };
    const float* xp = x.const_data_ptr<float>();
    const float* ap = wa.const_data_ptr<float>();
    const float* bp = wb.defined() ? wb.const_data_ptr<float>() : ap;
    float* yp = y.mutable_data_ptr<float>();
    const float add = plus_one != 0 ? 1.0f : 0.0f;
    const float feps = static_cast<float>(eps);
    at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = xp + row_offset(r);
        float* yr = yp + r * width;
        const float* w = (r % heads) < split ? ap : bp;
        double ss = 0.0;
        for (int64_t i = 0; i < width; ++i) {
          ss += static_cast<double>(xr[i]) * xr[i];
        }
        const float inv = 1.0f / std::sqrt(static_cast<float>(ss / width) + feps);
        for (int64_t i = 0; i < width; ++i) {
          yr[i] = (xr[i] * inv) * (w[i] + add);
        }
      }
    });
    *out = new at::Tensor(std::move(y));
  });
}

}  // extern "C"

// ---- scaled_dot_product_attention's backend ----------------------------------------------

extern "C" {

// The backend scaled_dot_product_attention will run for these tensors, as sdp::SDPBackend
// numbers it (math 0, flash 1, memory-efficient 2, cuDNN 3, overrideable 4; -1 none): the
// same dispatcher op SDPA consults itself, under the caller's thread state (grad mode,
// autocast, the context's SDP switches). SDPA is on autocast's lower-precision list on CPU
// and CUDA, so under autocast its floating inputs are cast to the autocast dtype first, as
// the real call sees them. `mask` may be null; the tensors are tch's (`at::Tensor*`).
char* gl_sdp_choice(const void* query, const void* key, const void* value, const void* mask,
                    double dropout_p, int32_t is_causal, int32_t enable_gqa, int64_t* out) {
  return guarded([&] {
    TORCH_CHECK(query != nullptr && key != nullptr && value != nullptr,
                "gl_sdp_choice: query, key and value are required");
    const auto& q = *static_cast<const at::Tensor*>(query);
    const auto type = q.device().type();
    auto as_autocast = [&](const at::Tensor& t) {
      if (at::autocast::is_autocast_enabled(type) && t.is_floating_point()) {
        auto dtype = at::autocast::get_autocast_dtype(type);
        return t.scalar_type() == dtype ? t : t.to(dtype);
      }
      return t;
    };
    std::optional<at::Tensor> m;
    if (mask != nullptr) {
      m = as_autocast(*static_cast<const at::Tensor*>(mask));
    }
    *out = at::_fused_sdp_choice(as_autocast(q), as_autocast(*static_cast<const at::Tensor*>(key)),
                                 as_autocast(*static_cast<const at::Tensor*>(value)), m, dropout_p,
                                 is_causal != 0, std::nullopt, enable_gqa != 0);
  });
}

// The context's SDP switches (torch.backends.cuda.enable_*_sdp): plain process-wide flags,
// readable and settable without a GPU.
char* gl_sdp_flags_get(int32_t* flash, int32_t* mem_efficient, int32_t* math, int32_t* cudnn) {
  return guarded([&] {
    auto& ctx = at::globalContext();
    *flash = ctx.userEnabledFlashSDP() ? 1 : 0;
    *mem_efficient = ctx.userEnabledMemEfficientSDP() ? 1 : 0;
    *math = ctx.userEnabledMathSDP() ? 1 : 0;
    *cudnn = ctx.userEnabledCuDNNSDP() ? 1 : 0;
  });
}

char* gl_sdp_flags_set(int32_t flash, int32_t mem_efficient, int32_t math, int32_t cudnn) {
  return guarded([&] {
    auto& ctx = at::globalContext();
    ctx.setSDPUseFlash(flash != 0);
    ctx.setSDPUseMemEfficient(mem_efficient != 0);
    ctx.setSDPUseMath(math != 0);
    ctx.setSDPUseCuDNN(cudnn != 0);
  });
}

}  // extern "C"
