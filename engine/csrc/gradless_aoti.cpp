// AOTInductor packages (.pt2 from torch._inductor.aoti_compile_and_package): load one, run
// it on tch tensors, free it. Same conventions as gradless_ext.cpp: extern "C", nullptr on
// success, else a malloc'd message freed with gl_free_error; tensors are tch's at::Tensor*.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <string>
#include <vector>
#include "guarded.h"

namespace {
using gradless::guarded;
// The package's model .so has DT_NEEDED libtorch.so / libtorch_cpu.so and no rpath; the
// executable's RUNPATH does not apply to a dlopen'd library's dependencies, and the linker's
// --as-needed drops libtorch.so from the executable (nothing references it by symbol). If
// libtorch.so is already loaded, the dynamic linker matches the dependency by soname, so
// load it from beside libtorch_cpu.so (where at::get_num_threads lives) once.
void ensure_libtorch_loaded() {
  static const bool done = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&at::get_num_threads), &info) != 0 && info.dli_fname) {
      std::string dir(info.dli_fname);
      dir = dir.substr(0, dir.rfind('/'));
      dlopen((dir + "/libtorch.so").c_str(), RTLD_NOW | RTLD_GLOBAL);  // kept open for good
    }
    return true;
  }();
  (void)done;
}
}  // namespace

extern "C" {

// Loads the package at `path` (its model `model_name`, usually "model"). `num_runners`
// model instances let that many threads run at once (1: concurrent calls wait). The
// package is unpacked under /tmp/XXXXXX and removed by gl_aoti_free. `*out`: the handle.
char* gl_aoti_load(const char* path, const char* model_name, int64_t num_runners, void** out) {
  return guarded([&] {
    ensure_libtorch_loaded();
    *out = new torch::inductor::AOTIModelPackageLoader(
        path, model_name, /*run_single_threaded=*/false, static_cast<size_t>(num_runners),
        /*device_index=*/-1);
  });
}

char* gl_aoti_free(void* handle) {
  return guarded([&] { delete static_cast<torch::inductor::AOTIModelPackageLoader*>(handle); });
}

// A metadata value (the AOTI_* keys, and those given at compile time through
// inductor_configs={"aot_inductor.metadata": {...}}); `*value` is malloc'd (free with
// gl_free_error), nullptr when the key is absent.
char* gl_aoti_metadata(void* handle, const char* key, char** value) {
  return guarded([&] {
    auto meta = static_cast<torch::inductor::AOTIModelPackageLoader*>(handle)->get_metadata();
    auto it = meta.find(key);
    *value = it == meta.end() ? nullptr : gradless::dup_message(it->second.c_str());
  });
}

// Runs the model on `n_inputs` tensors (at::Tensor*; flattened in the exported forward's
// argument order). Inputs are NOT checked by the model (unless AOTI_RUNTIME_CHECK_INPUTS=1,
// and then only with a generic message): the caller must pass the exported dtype, device,
// rank, and contiguous tensors within the exported size ranges. New at::Tensor* outputs go
// to `outputs[0..*n_outputs)` (the caller owns them); more than `capacity`: an error.
char* gl_aoti_run(void* handle, const void* const* inputs, int64_t n_inputs, void** outputs,
                  int64_t capacity, int64_t* n_outputs) {
  return guarded([&] {
    std::vector<at::Tensor> in;
    in.reserve(n_inputs);
    for (int64_t i = 0; i < n_inputs; ++i) {
      in.push_back(static_cast<const at::Tensor*>(inputs[i])->contiguous());
    }
    auto out = static_cast<torch::inductor::AOTIModelPackageLoader*>(handle)->run(in);
    TORCH_CHECK(static_cast<int64_t>(out.size()) <= capacity, "gl_aoti_run: the model returns ",
                out.size(), " tensors, room for ", capacity);
    for (size_t i = 0; i < out.size(); ++i) outputs[i] = new at::Tensor(std::move(out[i]));
    *n_outputs = static_cast<int64_t>(out.size());
  });
}

}  // extern "C"
