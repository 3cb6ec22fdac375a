// A gfx950 code object's kernel descriptions, read from its own AMDGPU metadata note
// (NT_AMDGPU_METADATA, msgpack; LLVM's AMDGPUUsage "Code Object V5 Metadata"). No torch, no HIP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_flydsl_native {

// One entry of a kernel's ``.args``: where the packer writes which kind of value.
struct KernelArg {
  uint32_t offset = 0;
  uint32_t size = 0;
  std::string value_kind;  // "global_buffer", "by_value", "hidden_*", ...
  bool hidden() const { return value_kind.rfind("hidden_", 0) == 0; }
};

struct KernelMeta {
  std::string name;    // ``.name``: what hipModuleGetFunction takes
  std::string symbol;  // ``.symbol`` (``<name>.kd``)
  uint32_t kernarg_segment_size = 0;
  uint32_t kernarg_segment_align = 0;
  uint32_t group_segment_fixed_size = 0;  // static LDS
  uint32_t max_flat_workgroup_size = 0;
  std::vector<KernelArg> args;
  // The explicit (non-hidden) arguments, in order.
  std::vector<KernelArg> explicit_args() const;
};

// Every kernel of the ELF image ``image`` (``size`` bytes). Throws std::runtime_error naming
// what is wrong (not an ELF64 AMDGPU object, no metadata note, malformed msgpack).
std::vector<KernelMeta> read_kernels(const uint8_t* image, size_t size);

}  // namespace torch_flydsl_native
