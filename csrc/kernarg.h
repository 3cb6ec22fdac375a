// Kernel argument packing: the family's logical values placed where the code object's own
// metadata (``.args`` offsets and sizes) says, into one buffer for HIP_LAUNCH_PARAM_BUFFER_POINTER.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "code_object.h"

namespace torch_flydsl_native {

// What the family's launch convention passes, one entry per explicit kernel argument:
// 'P' a global pointer (8 bytes), 'I' an int32 and 'F' a float32 (4 bytes, by value).
struct Slot {
  char kind;
  uint64_t bits;  // pointer value, or the 32-bit pattern in the low half
  static Slot ptr(const void* p) { return {'P', reinterpret_cast<uint64_t>(p)}; }
  static Slot i32(int64_t v) { return {'I', static_cast<uint32_t>(static_cast<int32_t>(v))}; }
  static Slot f32(float v);
};

constexpr size_t kMaxKernarg = 512;

// Offsets of one kernel's explicit arguments, checked once against the convention's kinds.
struct KernargPlan {
  std::vector<uint32_t> offsets;
  uint32_t size = 0;  // .kernarg_segment_size: the buffer HIP copies
  std::string kinds;  // the convention it was checked against
};

// The plan for ``meta`` under ``kinds`` (one character per Slot kind), or a reason in ``why``.
bool plan_kernargs(const KernelMeta& meta, const std::string& kinds, KernargPlan* plan, std::string* why);

// Write ``slots`` (``plan.kinds`` order) into ``buffer`` (``plan.size`` bytes, zeroed first).
void pack_kernargs(const KernargPlan& plan, const Slot* slots, size_t n, uint8_t* buffer);

}  // namespace torch_flydsl_native
