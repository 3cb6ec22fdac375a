#include "kernarg.h"

#include <cstring>
#include <stdexcept>

namespace torch_flydsl_native {

Slot Slot::f32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return {'F', bits};
}

bool plan_kernargs(const KernelMeta& meta, const std::string& kinds, KernargPlan* plan, std::string* why) {
  auto explicit_args = meta.explicit_args();
  if (explicit_args.size() != meta.args.size()) {
    *why = "kernel " + meta.name + " has hidden arguments, which the native launcher does not fill";
    return false;
  }
  if (explicit_args.size() != kinds.size()) {
    *why = "kernel " + meta.name + " takes " + std::to_string(explicit_args.size()) +
           " arguments, the launch convention passes " + std::to_string(kinds.size());
    return false;
  }
  if (meta.kernarg_segment_size > kMaxKernarg) {
    *why = "kernel " + meta.name + " has a " + std::to_string(meta.kernarg_segment_size) + "-byte kernarg segment";
    return false;
  }
  plan->offsets.clear();
  for (size_t i = 0; i < kinds.size(); ++i) {
    const KernelArg& a = explicit_args[i];
    bool pointer = kinds[i] == 'P';
    bool fits = pointer ? (a.size == 8 && a.value_kind == "global_buffer") : (a.size == 4 && a.value_kind == "by_value");
    if (!fits) {
      *why = "kernel " + meta.name + " argument " + std::to_string(i) + " is " + a.value_kind + " of " +
             std::to_string(a.size) + " bytes, the convention passes " + (pointer ? "a pointer" : "a 4-byte value");
      return false;
    }
    plan->offsets.push_back(a.offset);
  }
  plan->size = meta.kernarg_segment_size;
  plan->kinds = kinds;
  return true;
}

void pack_kernargs(const KernargPlan& plan, const Slot* slots, size_t n, uint8_t* buffer) {
  if (n != plan.offsets.size()) throw std::logic_error("kernarg slot count differs from the plan");
  std::memset(buffer, 0, plan.size);
  for (size_t i = 0; i < n; ++i) {
    if (slots[i].kind != plan.kinds[i]) throw std::logic_error("kernarg slot kind differs from the plan");
    if (slots[i].kind == 'P') {
      std::memcpy(buffer + plan.offsets[i], &slots[i].bits, 8);
    } else {
      uint32_t v = static_cast<uint32_t>(slots[i].bits);
      std::memcpy(buffer + plan.offsets[i], &v, 4);
    }
  }
}

}  // namespace torch_flydsl_native
