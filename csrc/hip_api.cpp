#include "hip_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace torch_flydsl_native {

std::string HipApi::describe(hipError_t e) const {
  std::string s = "hipError " + std::to_string(e);
  if (get_error_string) {
    const char* text = get_error_string(e);
    if (text) s += std::string(" (") + text + ")";
  }
  return s;
}

namespace {

struct Opened {
  HipApi api{};
  bool ok = false;
  std::string why;
};

Opened open_hip() {
  Opened o;
  const char* env = std::getenv("TORCH_FLYDSL_HIP_LIBRARY");
  const char* names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"};
  void* lib = nullptr;
  std::string tried;
  if (env && *env) {
    lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    o.api.path = env;
    if (!lib) o.why = std::string("TORCH_FLYDSL_HIP_LIBRARY=") + env + " does not load: " + dlerror();
  } else {
    for (const char* n : names) {
      lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
      if (lib) { o.api.path = n; break; }
      tried += std::string(tried.empty() ? "" : ", ") + n;
    }
    if (!lib) o.why = "no HIP runtime library (tried " + tried + "): not a ROCm machine";
  }
  if (!lib) return o;
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  o.api.module_load_data = reinterpret_cast<decltype(o.api.module_load_data)>(sym("hipModuleLoadData"));
  o.api.module_get_function = reinterpret_cast<decltype(o.api.module_get_function)>(sym("hipModuleGetFunction"));
  o.api.module_launch_kernel = reinterpret_cast<decltype(o.api.module_launch_kernel)>(sym("hipModuleLaunchKernel"));
  o.api.get_error_string = reinterpret_cast<decltype(o.api.get_error_string)>(sym("hipGetErrorString"));
  o.api.stream_is_capturing = reinterpret_cast<decltype(o.api.stream_is_capturing)>(sym("hipStreamIsCapturing"));
  if (!o.api.module_load_data || !o.api.module_get_function || !o.api.module_launch_kernel) {
    o.why = o.api.path + " lacks hipModuleLoadData, hipModuleGetFunction or hipModuleLaunchKernel";
    return o;
  }
  o.ok = true;
  return o;
}

}  // namespace

const HipApi* hip_api(std::string* why) {
  static Opened opened = open_hip();  // thread-safe once
  if (!opened.ok) {
    if (why) *why = opened.why;
    return nullptr;
  }
  return &opened.api;
}

}  // namespace torch_flydsl_native
