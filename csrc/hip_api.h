// The HIP module API, loaded at run time (dlopen): the library builds and imports without ROCm.
#pragma once

#include <cstddef>
#include <string>

namespace torch_flydsl_native {

using hipError_t = int;
using hipModule_t = void*;
using hipFunction_t = void*;
using hipStream_t = void*;

struct HipApi {
  hipError_t (*module_load_data)(hipModule_t*, const void*);
  hipError_t (*module_get_function)(hipFunction_t*, hipModule_t, const char*);
  hipError_t (*module_launch_kernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, hipStream_t, void**, void**);
  const char* (*get_error_string)(hipError_t);  // may be null
  hipError_t (*stream_is_capturing)(hipStream_t, int*);  // may be null; *status != 0: capturing
  std::string path;                             // the library that was opened
  std::string describe(hipError_t e) const;
};

// HIP's launch-parameter markers for ``extra`` (hip_runtime_api.h).
inline void* const kLaunchParamBufferPointer = reinterpret_cast<void*>(0x01);
inline void* const kLaunchParamBufferSize = reinterpret_cast<void*>(0x02);
inline void* const kLaunchParamEnd = reinterpret_cast<void*>(0x03);

// The process's HIP API (opened once: TORCH_FLYDSL_HIP_LIBRARY, else libamdhip64.so), or null
// with ``why`` set when it cannot be opened.
const HipApi* hip_api(std::string* why);

}  // namespace torch_flydsl_native
