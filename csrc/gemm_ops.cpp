// C++ implementations of the plugin's GEMM custom ops for the ROCm device (torch's CUDA dispatch
// key on ROCm builds). Each op reads its operands, applies the family's gate (the rules of
// templates/<family>/eligibility.py and config_fits that decide exactness, re-stated here),
// names the compiled unit the way templates/<family>/family.py's compiled_unit does, packs the
// family's launch convention (templates/<family>/launcher.py) at the offsets the code object's
// metadata gives, and launches on the caller's stream. Whatever it declines goes to the Python
// implementation (torch_flydsl_native::python_<op>, registered by torch_flydsl.native) when
// this process has one, else raises with the reason.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hip_api.h"
#include "kernarg.h"
#include "units.h"

// The served families' kernel versions (part of every unit id), written by the build.
#if __has_include("tfn_versions.h")
#include "tfn_versions.h"
#endif
#ifndef TFN_DENSE_VERSION
#define TFN_DENSE_VERSION "dense_gemm-unknown"
#endif
#ifndef TFN_SCALED_VERSION
#define TFN_SCALED_VERSION "scaled_gemm-unknown"
#endif
#ifndef TFN_GROUPED_VERSION
#define TFN_GROUPED_VERSION "grouped_gemm-unknown"
#endif

namespace torch_flydsl_native {
namespace {

using at::Tensor;
constexpr int64_t kInt32Max = 2147483647LL;
constexpr int64_t kSpanLimit = 1LL << 32;  // buffer descriptors: num_records is 32 bits
constexpr int64_t kAlign = 16;

// What one launch needs: the unit, the convention's slots, grid and block.
struct Call {
  static constexpr size_t kMaxSlots = 32;
  std::string unit;
  Slot slots[kMaxSlots];
  char kinds[kMaxSlots];
  size_t n = 0;
  void add(Slot s) {
    TORCH_CHECK(n < kMaxSlots, "torch_flydsl native: too many kernel arguments");
    slots[n] = s;
    kinds[n++] = s.kind;
  }
  std::string_view kind_string() const { return {kinds, n}; }
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  bool nothing = false;  // a problem with nothing to compute (no tokens): no launch
};

int64_t span_elems(const Tensor& t) {
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  return span;
}
int64_t byte_span(const Tensor& t) { return span_elems(t) * static_cast<int64_t>(t.element_size()); }

void tensor_slots(Call* c, const Tensor& t, int64_t count) {
  c->add(Slot::ptr(t.data_ptr()));
  c->add(Slot::i32(count));
}
void int_slot(Call* c, int64_t v) { c->add(Slot::i32(v)); }
void float_slot(Call* c, double v) { c->add(Slot::f32(static_cast<float>(v))); }

// "row", "col" or "" (templates/gemm/majors.py's major_of).
const char* major_of(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if ((s1 == 1 || cols == 1) && (s0 >= std::max<int64_t>(cols, 1) || rows == 1)) return "row";
  if ((s0 == 1 || rows == 1) && (s1 >= std::max<int64_t>(rows, 1) || cols == 1)) return "col";
  return "";
}

std::string aligned(const char* name, const Tensor& t, int64_t lead_elems, bool check_lead) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % kAlign)
    return std::string(name) + " does not start on a 16-byte boundary";
  if (check_lead && (lead_elems * static_cast<int64_t>(t.element_size())) % kAlign)
    return std::string(name) + "'s leading stride " + std::to_string(lead_elems) + " is not a multiple of 16 bytes";
  if (byte_span(t) >= kSpanLimit) return std::string(name) + " spans 4 GiB or more";
  return "";
}

const char* dtype_name(at::ScalarType s) {
  switch (s) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: return "";
  }
}

int64_t param(const ConfigParams& p, const char* k) {
  auto it = p.find(k);
  return it == p.end() ? 0 : it->second;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A bias the kernels read as one row: [N] unit-stride, or [M, N] expanded with strides (0, 1).
bool per_column_vector(const Tensor& t, int64_t m, int64_t n) {
  return (t.dim() == 1 && t.size(0) == n && (t.stride(0) == 1 || n == 1)) ||
         (t.dim() == 2 && t.size(0) == m && t.size(1) == n && (t.stride(0) == 0 || m == 1) &&
          (t.stride(1) == 1 || n == 1));
}

// -- split-K workspaces, one per (device, stream), zeroed once (launcher._workspace) ----------
std::mutex ws_mu;
std::map<std::pair<int, uintptr_t>, Tensor> workspaces;
std::vector<Tensor> outgrown;  // a launch in flight (or a captured graph) may still use them

bool capturing(void* stream) {
  const HipApi* hip = hip_api(nullptr);
  int status = 0;
  return hip && hip->stream_is_capturing && hip->stream_is_capturing(stream, &status) == 0 && status != 0;
}

// One made while the stream is captured is zeroed by a node of that graph only (and lives in its
// memory pool): it serves that call, is kept for the graph's replays, and is never reused.
Tensor workspace(const Tensor& like, int64_t need, void* stream) {
  std::lock_guard<std::mutex> g(ws_mu);
  if (capturing(stream)) {
    outgrown.push_back(like.new_zeros({need}, like.options().dtype(at::kFloat)));
    return outgrown.back();
  }
  auto key = std::make_pair(static_cast<int>(like.device().index()), reinterpret_cast<uintptr_t>(stream));
  auto it = workspaces.find(key);
  if (it == workspaces.end() || it->second.numel() < need) {
    int64_t size = it == workspaces.end() ? need : std::max(need, 2 * it->second.numel());
    if (it != workspaces.end()) outgrown.push_back(it->second);
    workspaces[key] = like.new_zeros({size}, like.options().dtype(at::kFloat));
    it = workspaces.find(key);
  }
  return it->second;
}

// -- dense mm / addmm (templates/dense_gemm) -------------------------------------------------
std::string plan_dense(const Tensor* bias, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                       double beta, const std::string& cfg, void* stream, Call* c) {
  if (a.dim() != 2 || b.dim() != 2 || out.dim() != 2) return "only 2-D operands (mm/addmm) are supported";
  int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (b.size(0) != k || out.size(0) != m || out.size(1) != n) return "inconsistent shapes";
  if (std::min({m, n, k}) <= 0) return "empty problem";
  if (std::max({m, n, k}) > kInt32Max) return "a dimension exceeds int32";
  const char* dt = dtype_name(a.scalar_type());
  if (!*dt) return "input dtype is not bfloat16 or float16";
  if (b.scalar_type() != a.scalar_type() || out.scalar_type() != a.scalar_type()) return "mixed dtypes";
  std::string am = major_of(m, k, a.stride(0), a.stride(1)), bm = major_of(k, n, b.stride(0), b.stride(1));
  if (am.empty() || bm.empty()) return "A or B is neither row- nor column-major";
  if (std::string(major_of(m, n, out.stride(0), out.stride(1))) != "row" || (out.stride(1) != 1 && n > 1))
    return "output is not row-major";
  if (k % 8 && (am == "row" || bm == "col")) return "K is not a multiple of 8 with an operand contiguous along K";
  int64_t lda = am == "row" ? a.stride(0) : a.stride(1), ldb = bm == "row" ? b.stride(0) : b.stride(1);
  for (auto why : {aligned("A", a, lda, true), aligned("B", b, ldb, true), aligned("output", out, out.stride(0), true)})
    if (!why.empty()) return why;
  if (k % 128 && (byte_span(a) > kSpanLimit - 2 * kAlign || byte_span(b) > kSpanLimit - 2 * kAlign))
    return "with a K tail, A and B must stay 32 bytes under 4 GiB";
  if ((am == "col" && byte_span(a) % 4) || (bm == "row" && byte_span(b) % 4))
    return "an operand contiguous along M or N ends in the middle of a dword";
  const Tensor* use_bias = beta == 0.0 ? nullptr : bias;  // torch.addmm ignores the bias then
  Tensor bias_row;
  if (use_bias) {
    const Tensor& t = *use_bias;
    if (t.scalar_type() != a.scalar_type()) return "bias dtype differs from the inputs";
    if (!per_column_vector(t, m, n)) return "bias is not a per-column vector";
    bias_row = t.dim() == 2 ? t.select(0, 0) : t;
    std::string why = aligned("bias", bias_row, 0, false);
    if (!why.empty()) return why;
  }
  std::string why;
  const ConfigParams* p = Registry::get().config("dense_gemm", cfg, &why);
  if (!p) return why;
  int64_t block_m = param(*p, "block_m"), block_n = param(*p, "block_n"), block_k = param(*p, "block_k");
  int64_t split_k = std::max<int64_t>(1, param(*p, "split_k")), stages = param(*p, "stages");
  int64_t tiles = cdiv(m, block_m) * cdiv(n, block_n);
  if (split_k > 1) {  // config.py's _split_k_fits
    int64_t k_tiles = cdiv(k, block_k), per = cdiv(k_tiles, split_k);
    if (tiles >= param(*p, "num_cus") || tiles > param(*p, "counters"))
      return cfg + ": the output tiles already fill the CUs (split-K counters)";
    if (per < stages - 1 || (split_k - 1) * per >= k_tiles) return cfg + ": too few K tiles for its splits";
    if ((param(*p, "counters") + split_k * m * n) * 4 >= (1LL << 31)) return cfg + ": split-K workspace too large";
  }
  std::string layout = std::string(am == "row" ? "n" : "t") + (bm == "row" ? "n" : "t");
  c->unit = std::string(TFN_DENSE_VERSION) + "/" + cfg + "/" + dt + "/" + layout + "/bias" + (use_bias ? "1" : "0") +
            "/ktail" + (k % block_k ? "1" : "0");
  tensor_slots(c, out, span_elems(out));
  tensor_slots(c, a, span_elems(a));
  tensor_slots(c, b, span_elems(b));
  if (use_bias) tensor_slots(c, bias_row, span_elems(bias_row));
  else tensor_slots(c, out, span_elems(out));  // never read; keeps the signature fixed
  if (split_k > 1) {
    int64_t need = param(*p, "counters") + split_k * m * n;
    tensor_slots(c, workspace(out, need, stream), need);
  } else {
    tensor_slots(c, out, 1);  // the unread workspace element
  }
  for (int64_t v : {m, n, k, lda, ldb, out.stride(0)}) int_slot(c, v);
  float_slot(c, alpha);
  float_slot(c, beta);
  c->grid[0] = static_cast<unsigned>(tiles * split_k);
  c->block[0] = static_cast<unsigned>(param(*p, "threads"));
  return "";
}

// -- MX scaled_mm (templates/scaled_gemm) ----------------------------------------------------
const char* mx_format(at::ScalarType s) {
  switch (s) {
    case at::ScalarType::Float8_e4m3fn: return "e4m3";
    case at::ScalarType::Float8_e5m2: return "e5m2";
    case at::ScalarType::Float4_e2m1fn_x2: return "e2m1";
    default: return "";
  }
}

std::string plan_scaled(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, const Tensor* bias,
                        const Tensor& out, const std::string& cfg, Call* c) {
  if (a.dim() != 2 || b.dim() != 2 || sa.dim() != 2 || sb.dim() != 2 || out.dim() != 2)
    return "only 2-D operands are supported";
  const char* af = mx_format(a.scalar_type());
  const char* bf = mx_format(b.scalar_type());
  if (!*af || !*bf) return "A or B is not an MX element format";
  int64_t m = a.size(0), n = b.size(1);
  int64_t k = a.size(1) * (std::string(af) == "e2m1" ? 2 : 1);
  int64_t kb = b.size(0) * (std::string(bf) == "e2m1" ? 2 : 1);
  if (k != kb || out.size(0) != m || out.size(1) != n) return "inconsistent shapes";
  if (std::min({m, n, k}) <= 0) return "empty problem";
  if (std::max({m, n, k}) > kInt32Max) return "a dimension exceeds int32";
  if (k % 32 || k % 128) return "K is not a multiple of 128 (the scaled MFMA's K; the kernel has no K tail)";
  if (a.stride(1) != 1 || (m > 1 && a.stride(0) < a.size(1))) return "A must be row-major [M, K]";
  if (b.stride(0) != 1 || (n > 1 && b.stride(1) < b.size(0))) return "B must be column-major [K, N]";
  const char* od = dtype_name(out.scalar_type());
  if (!*od) return "output dtype is not bfloat16 or float16";
  if ((out.stride(1) != 1 && n > 1) || (m > 1 && out.stride(0) < n)) return "output is not row-major";
  for (auto why : {aligned("A", a, a.stride(0), m > 1), aligned("B", b, b.stride(1), n > 1),
                   aligned("output", out, out.stride(0), m > 1)})
    if (!why.empty()) return why;
  // eligibility._check_scale: E8M0 [>= rows, K/32] row-major, 4-byte aligned start and row stride
  const int64_t blocks = k / 32;
  for (auto [s, rows] : {std::pair<const Tensor*, int64_t>{&sa, m}, {&sb, n}}) {
    if (s->scalar_type() != at::ScalarType::Float8_e8m0fnu) return "scales must be float8_e8m0fnu";
    if (s->size(1) != blocks || s->size(0) < rows) return "scales must be [>= rows, K/32]";
    if (s->stride(1) != 1 || (s->size(0) > 1 && s->stride(0) < blocks)) return "scales are not row-major";
    if (reinterpret_cast<uintptr_t>(s->data_ptr()) % 4 || (s->size(0) > 1 && s->stride(0) % 4))
      return "scales must start on a 4-byte boundary with a row stride of a multiple of 4 bytes";
    if (byte_span(*s) >= kSpanLimit) return "a scale tensor spans 4 GiB or more";
  }
  Tensor bias_row;
  if (bias) {
    const Tensor& t = *bias;
    if (t.scalar_type() != out.scalar_type()) return "bias dtype differs from the output";
    if (!per_column_vector(t, m, n)) return "bias is not a per-column vector";
    bias_row = t.dim() == 2 ? t.select(0, 0) : t;
    std::string why = aligned("bias", bias_row, 0, false);
    if (!why.empty()) return why;
  }
  if (byte_span(a) % 2 || byte_span(b) % 2 || byte_span(sa) % 4 || byte_span(sb) % 4)
    return "an operand's byte span is not a whole number of its kernel units";
  std::string why;
  const ConfigParams* p = Registry::get().config("scaled_gemm", cfg, &why);
  if (!p) return why;
  int64_t block_m = param(*p, "block_m"), block_n = param(*p, "block_n"), block_k = param(*p, "block_k");
  if (k % block_k) return cfg + ": K is not a multiple of block_k (the kernel has no K tail)";
  c->unit = std::string(TFN_SCALED_VERSION) + "/" + cfg + "/" + af + "." + bf + "/" + od + "/bias" + (bias ? "1" : "0");
  auto units = [](const Tensor& t, int64_t unit) { return byte_span(t) / unit; };
  tensor_slots(c, out, span_elems(out));
  tensor_slots(c, a, units(a, 2));
  tensor_slots(c, b, units(b, 2));
  tensor_slots(c, sa, units(sa, 4));
  tensor_slots(c, sb, units(sb, 4));
  if (bias) tensor_slots(c, bias_row, span_elems(bias_row));
  else tensor_slots(c, out, 1);  // never read
  auto bytes = [](const Tensor& t, int d) { return t.stride(d) * static_cast<int64_t>(t.element_size()); };
  for (int64_t v : {m, n, k, bytes(a, 0) / 2, bytes(b, 1) / 2, bytes(sa, 0) / 4, bytes(sb, 0) / 4, out.stride(0)})
    int_slot(c, v);
  c->grid[0] = static_cast<unsigned>(cdiv(m, block_m) * cdiv(n, block_n));
  c->block[0] = static_cast<unsigned>(param(*p, "threads"));
  return "";
}

// -- grouped_mm, MoE forward (templates/grouped_gemm) -----------------------------------------
std::string plan_grouped(const Tensor& a, const Tensor& b, const Tensor* offs, const Tensor& out,
                         const std::string& cfg, Call* c) {
  if (a.dim() != 2 || b.dim() != 3 || !offs)
    return "the native launcher serves the MoE forward form (2-D A x 3-D B with offs) only";
  int64_t t = a.size(0), k = a.size(1), g = b.size(0), n = b.size(2);
  if (b.size(1) != k || out.dim() != 2 || out.size(0) != t || out.size(1) != n) return "inconsistent shapes";
  if (offs->scalar_type() != at::kInt || offs->dim() != 1 || offs->size(0) != g) return "offs must be int32 [G]";
  if (g == 0 || n == 0 || k == 0) return "empty problem";
  if (std::max({t, n, k, g}) > kInt32Max) return "a dimension exceeds int32";
  const char* dt = dtype_name(a.scalar_type());
  if (!*dt) return "input dtype is not bfloat16 or float16";
  if (b.scalar_type() != a.scalar_type() || out.scalar_type() != a.scalar_type()) return "mixed dtypes";
  if ((a.stride(1) != 1 && k > 1) || (t > 1 && a.stride(0) < k)) return "A must be row-major";
  std::string bm = major_of(k, n, b.stride(1), b.stride(2));
  if (bm.empty()) return "each group of B must be row- or column-major";
  if ((out.stride(1) != 1 && n > 1) || (t > 1 && out.stride(0) < n)) return "output is not row-major";
  if (offs->stride(0) != 1 && g > 1) return "offs is not contiguous";
  int64_t ldb = bm == "col" ? b.stride(2) : b.stride(1);
  for (auto why : {aligned("A", a, a.stride(0), t > 1), aligned("B", b, ldb, true),
                   aligned("output", out, out.stride(0), true), aligned("B's group", b, b.stride(0), g > 1),
                   aligned("offs", *offs, 0, false)})
    if (!why.empty()) return why;
  if (bm == "row" && byte_span(b) % 4) return "B is contiguous along N and ends in the middle of a dword";
  std::string why;
  const ConfigParams* p = Registry::get().config("grouped_gemm", cfg, &why);
  if (!p) return why;
  int64_t block_m = param(*p, "block_m"), block_n = param(*p, "block_n"), block_k = param(*p, "block_k");
  if (k % block_k) return cfg + ": K is not a multiple of block_k (the kernel has no K tail)";
  if (t == 0) {
    c->nothing = true;
    return "";
  }
  // gemm/persistent.py: min(tile bound, CUs x workgroups resident per CU by LDS)
  int64_t bound = (cdiv(t, block_m) + g) * cdiv(n, block_n);
  int64_t lds = std::max<int64_t>(1, param(*p, "lds"));
  int64_t resident = std::max<int64_t>(1, std::min(param(*p, "max_resident"), param(*p, "lds_limit") / lds));
  int64_t workgroups = std::max<int64_t>(1, std::min(bound, param(*p, "num_cus") * resident));
  c->unit = std::string(TFN_GROUPED_VERSION) + "/" + cfg + "/" + dt + "/b" + bm + "/2d3d";
  tensor_slots(c, out, span_elems(out));
  tensor_slots(c, a, span_elems(a));
  tensor_slots(c, b, span_elems(b));
  tensor_slots(c, *offs, span_elems(*offs));
  for (int64_t v : {t, n, k, g, int64_t{0}, a.stride(0), ldb, b.stride(0), out.stride(0), workgroups}) int_slot(c, v);
  c->grid[0] = static_cast<unsigned>(workgroups);
  c->block[0] = static_cast<unsigned>(param(*p, "threads"));
  return "";
}

// -- launch -----------------------------------------------------------------------------------
std::string launch(const Call& c, int device, void* stream) {
  if (c.nothing) return "";
  const KernargPlan* plan = nullptr;
  hipFunction_t fn = nullptr;
  std::string why;
  if (!Registry::get().unit(c.unit, c.kind_string(), device, true, stream, &plan, &fn, &why)) return why;
  alignas(16) uint8_t buffer[kMaxKernarg];
  pack_kernargs(*plan, c.slots, c.n, buffer);
  size_t size = plan->size;
  void* extra[] = {kLaunchParamBufferPointer, buffer, kLaunchParamBufferSize, &size, kLaunchParamEnd};
  const HipApi* hip = hip_api(&why);
  if (!hip) return why;
  hipError_t e = hip->module_launch_kernel(fn, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2],
                                           0, stream, nullptr, extra);
  if (e != 0) throw std::runtime_error("torch_flydsl native: hipModuleLaunchKernel(" + c.unit + "): " + hip->describe(e));
  Registry::get().count_launch();
  return "";
}

const Tensor* optional_tensor(const c10::IValue& v, Tensor* keep) {
  if (v.isNone()) return nullptr;
  *keep = v.toTensor();
  return keep;
}

// The plan for the op ``name`` whose arguments are the stack's top ``n`` values (the plugin
// op's schema; ``stream`` comes from the caller).
std::string plan_op(const std::string& name, const std::vector<c10::IValue>& args, void* stream, Call* c,
                    Tensor* out_device) {
  Tensor bias_keep;
  if (name == "dense_mm_out") {
    *out_device = args[3].toTensor();
    // mm: alpha 1, beta 0 (DenseCall's defaults; the bias-free kernel reads neither bias nor beta)
    return plan_dense(nullptr, args[0].toTensor(), args[1].toTensor(), args[3].toTensor(), 1.0, 0.0,
                      args[2].toStringRef(), stream, c);
  }
  if (name == "dense_addmm_out") {
    *out_device = args[6].toTensor();
    Tensor bias = args[0].toTensor();
    return plan_dense(&bias, args[1].toTensor(), args[2].toTensor(), args[6].toTensor(), args[3].toDouble(),
                      args[4].toDouble(), args[5].toStringRef(), stream, c);
  }
  if (name == "scaled_mm_out") {
    *out_device = args[6].toTensor();
    const Tensor* bias = optional_tensor(args[4], &bias_keep);
    return plan_scaled(args[0].toTensor(), args[1].toTensor(), args[2].toTensor(), args[3].toTensor(), bias,
                       args[6].toTensor(), args[5].toStringRef(), c);
  }
  if (name == "grouped_mm_out") {
    *out_device = args[4].toTensor();
    const Tensor* offs = optional_tensor(args[2], &bias_keep);
    return plan_grouped(args[0].toTensor(), args[1].toTensor(), offs, args[4].toTensor(),
                        args[3].toStringRef(), c);
  }
  return "no native plan for " + name;
}

size_t arity(const std::string& name) {
  if (name == "dense_mm_out") return 4;
  if (name == "grouped_mm_out") return 5;
  return 7;
}

// torch_flydsl::<name> on a ROCm device: the caller's current stream; a decline goes to the
// Python implementation when there is one.
template <const char* Name>
void device_op(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string name = Name;
  size_t n = arity(name);
  std::vector<c10::IValue> args(stack->end() - n, stack->end());
  Tensor out;
  Call c;
  std::string why;
  {
    // the output's device: sizes and strides are host data, the plan needs no device access
    Tensor probe = args[n - 1].toTensor();
    c10::DeviceGuard guard(probe.device());
    void* stream = nullptr;
    try {
      auto impl = c10::impl::getDeviceGuardImpl(probe.device().type());
      stream = impl->getStream(probe.device()).native_handle();
    } catch (const std::exception& e) {
      why = std::string("this torch gives no native handle for the current stream: ") + e.what();
    }
    if (why.empty()) why = plan_op(name, args, stream, &c, &out);
    if (why.empty()) why = launch(c, probe.device().index(), stream);
  }
  if (why.empty()) {
    torch::jit::drop(*stack, n);
    return;
  }
  auto python = c10::Dispatcher::singleton().findOp({"torch_flydsl_native::python_" + name, ""});
  if (!python) TORCH_CHECK(false, "torch_flydsl native ", name, " cannot run these operands: ", why);
  python->callBoxed(stack);
}

// torch_flydsl_native::<name>_on_stream: the same plan and launch with a raw stream and no
// fallback (any device: tests drive it with CPU tensors against a stand-in HIP library).
template <const char* Name>
void on_stream_op(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string name = Name;
  size_t n = arity(name);
  void* stream = reinterpret_cast<void*>(static_cast<uintptr_t>(stack->back().toInt()));
  std::vector<c10::IValue> args(stack->end() - n - 1, stack->end() - 1);
  Tensor out;
  Call c;
  std::string why = plan_op(name, args, stream, &c, &out);
  if (why.empty()) why = launch(c, std::max<int>(0, out.device().index()), stream);
  TORCH_CHECK(why.empty(), "torch_flydsl native ", name, " declined: ", why);
  torch::jit::drop(*stack, n + 1);
}

constexpr char kDenseMm[] = "dense_mm_out";
constexpr char kDenseAddmm[] = "dense_addmm_out";
constexpr char kScaledMm[] = "scaled_mm_out";
constexpr char kGroupedMm[] = "grouped_mm_out";

// Host cost per call (benchmarks/native_host_cost.py), in nanoseconds: [plan + pack + launch
// called directly, the <op>_on_stream op called through the dispatcher from C++ as a C++ caller
// (AOTInductor's proxy executor) would]. ``operands``: the op's tensors in schema order, out last.
std::vector<double> host_cost_op(c10::string_view op, const c10::List<std::optional<Tensor>>& operands, double alpha,
                                 double beta, c10::string_view cfg_view, int64_t stream_int, int64_t iters) {
  std::string name(op), cfg(cfg_view);
  std::vector<c10::IValue> args;
  auto t = [&](size_t i) -> c10::IValue {
    std::optional<Tensor> v = operands.get(i);
    return v.has_value() ? c10::IValue(*v) : c10::IValue();
  };
  if (name == "dense_mm_out") args = {t(0), t(1), cfg, t(2)};
  else if (name == "dense_addmm_out") args = {t(0), t(1), t(2), alpha, beta, cfg, t(3)};
  else if (name == "scaled_mm_out") args = {t(0), t(1), t(2), t(3), t(4), cfg, t(5)};
  else if (name == "grouped_mm_out") args = {t(0), t(1), t(2), cfg, t(3)};
  else TORCH_CHECK(false, "no native op ", name);
  void* stream = reinterpret_cast<void*>(static_cast<uintptr_t>(stream_int));
  auto per_call = [&](auto&& body) {
    auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) body();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / iters;
  };
  Tensor out;
  double direct = per_call([&] {
    Call c;
    std::string why = plan_op(name, args, stream, &c, &out);
    if (why.empty()) why = launch(c, 0, stream);
    TORCH_CHECK(why.empty(), why);
  });
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(("torch_flydsl_native::" + name + "_on_stream").c_str(), "");
  double dispatched = per_call([&] {
    torch::jit::Stack stack(args.begin(), args.end());
    stack.emplace_back(stream_int);
    handle.callBoxed(&stack);
  });
  return {direct, dispatched};
}

}  // namespace
}  // namespace torch_flydsl_native

namespace tfn = torch_flydsl_native;

TORCH_LIBRARY(torch_flydsl_native, m) {
  m.def("host_cost(str op, Tensor?[] operands, float alpha, float beta, str cfg, int stream, int iters) -> float[]",
        &tfn::host_cost_op);
  m.def("status() -> str", []() { return tfn::Registry::get().status(); });
  m.def("use_cache_dir(str cache_dir) -> ()",
        [](c10::string_view dir) { tfn::Registry::get().use_cache_dir(std::string(dir)); });
  m.def("launch_count() -> int", []() { return tfn::Registry::get().launches(); });
  m.def("kernel_versions() -> str[]", []() {
    return std::vector<std::string>{TFN_DENSE_VERSION, TFN_SCALED_VERSION, TFN_GROUPED_VERSION};
  });
  m.def("dense_mm_out_on_stream(Tensor a, Tensor b, *, str cfg, Tensor(a!) out, int stream) -> ()");
  m.def("dense_addmm_out_on_stream(Tensor bias, Tensor a, Tensor b, *, float alpha=1.0, float beta=1.0, str cfg, "
        "Tensor(a!) out, int stream) -> ()");
  m.def("scaled_mm_out_on_stream(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, *, str cfg, "
        "Tensor(a!) out, int stream) -> ()");
  m.def("grouped_mm_out_on_stream(Tensor a, Tensor b, Tensor? offs=None, *, str cfg, Tensor(a!) out, int stream) -> ()");
  // The device entry (stream lookup, decline, hand-over to python_<op>) on any device, for tests:
  // on a CPU tensor the stream has no native handle, so it always hands over.
  m.def("device_path_dense_mm_out(Tensor a, Tensor b, *, str cfg, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(torch_flydsl_native, CompositeExplicitAutograd, m) {
  m.impl("dense_mm_out_on_stream", torch::CppFunction::makeFromBoxedFunction<&tfn::on_stream_op<tfn::kDenseMm>>());
  m.impl("dense_addmm_out_on_stream",
         torch::CppFunction::makeFromBoxedFunction<&tfn::on_stream_op<tfn::kDenseAddmm>>());
  m.impl("scaled_mm_out_on_stream", torch::CppFunction::makeFromBoxedFunction<&tfn::on_stream_op<tfn::kScaledMm>>());
  m.impl("grouped_mm_out_on_stream", torch::CppFunction::makeFromBoxedFunction<&tfn::on_stream_op<tfn::kGroupedMm>>());
  m.impl("device_path_dense_mm_out", torch::CppFunction::makeFromBoxedFunction<&tfn::device_op<tfn::kDenseMm>>());
}

// A process without Python (a C++ runner of an AOTInductor package that loads this library)
// has nobody to define the plugin's ops: define them here, with the schemas the families give
// (test/native/test_native_pieces.py checks they match). With Python, ``import torch`` has
// defined them before this library loads (ops.register loads it), and this does nothing.
struct DefinedWithoutPython {
  std::unique_ptr<torch::Library> lib;
  DefinedWithoutPython() {
    if (c10::Dispatcher::singleton().findSchema({"torch_flydsl::dense_mm_out", ""})) return;
    lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, "torch_flydsl", std::nullopt, __FILE__, __LINE__);
    lib->def("dense_mm_out(Tensor a, Tensor b, *, str cfg, Tensor(a!) out) -> ()");
    lib->def("dense_addmm_out(Tensor bias, Tensor a, Tensor b, *, float alpha=1.0, float beta=1.0, str cfg, "
             "Tensor(a!) out) -> ()");
    lib->def("scaled_mm_out(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, *, str cfg, "
             "Tensor(a!) out) -> ()");
    lib->def("grouped_mm_out(Tensor a, Tensor b, Tensor? offs=None, *, str cfg, Tensor(a!) out) -> ()");
  }
};
static DefinedWithoutPython defined_without_python;  // before the CUDA kernels below register

// ROCm builds of torch dispatch HIP tensors under the CUDA key.
TORCH_LIBRARY_IMPL(torch_flydsl, CUDA, m) {
  m.impl("dense_mm_out", torch::CppFunction::makeFromBoxedFunction<&tfn::device_op<tfn::kDenseMm>>());
  m.impl("dense_addmm_out", torch::CppFunction::makeFromBoxedFunction<&tfn::device_op<tfn::kDenseAddmm>>());
  m.impl("scaled_mm_out", torch::CppFunction::makeFromBoxedFunction<&tfn::device_op<tfn::kScaledMm>>());
  m.impl("grouped_mm_out", torch::CppFunction::makeFromBoxedFunction<&tfn::device_op<tfn::kGroupedMm>>());
}
