// ELF64 note walk and a small msgpack reader, enough for the AMDGPU metadata map.
#include "code_object.h"

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

namespace torch_flydsl_native {
namespace {

constexpr uint32_t kNtAmdgpuMetadata = 32;  // NT_AMDGPU_METADATA
constexpr uint16_t kEmAmdgpu = 224;         // EM_AMDGPU
constexpr uint32_t kShtNote = 7;

template <typename T>
T read_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // ELF64 AMDGPU objects are little-endian, as is the host
  return v;
}

[[noreturn]] void bad(const std::string& why) { throw std::runtime_error("code object: " + why); }

// A decoded msgpack value: only the types AMDGPU metadata uses.
struct Value {
  enum Kind { Nil, Bool, Int, Str, Arr, Map } kind = Nil;
  int64_t i = 0;
  std::string s;
  std::vector<Value> items;                       // Arr
  std::vector<std::pair<Value, Value>> entries;   // Map
  const Value* get(const char* key) const {
    for (auto& kv : entries)
      if (kv.first.kind == Str && kv.first.s == key) return &kv.second;
    return nullptr;
  }
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  Value value(int depth = 0) {
    if (depth > 32) bad("metadata nests too deep");
    uint8_t t = byte();
    Value v;
    if (t <= 0x7f) { v.kind = Value::Int; v.i = t; return v; }
    if (t >= 0xe0) { v.kind = Value::Int; v.i = static_cast<int8_t>(t); return v; }
    if ((t & 0xf0) == 0x80) return map(t & 0x0f, depth);
    if ((t & 0xf0) == 0x90) return array(t & 0x0f, depth);
    if ((t & 0xe0) == 0xa0) return str(t & 0x1f);
    switch (t) {
      case 0xc0: return v;
      case 0xc2: case 0xc3: v.kind = Value::Bool; v.i = t == 0xc3; return v;
      case 0xcc: return uint_(1);
      case 0xcd: return uint_(2);
      case 0xce: return uint_(4);
      case 0xcf: return uint_(8);
      case 0xd0: v.kind = Value::Int; v.i = static_cast<int8_t>(fixed(1)); return v;
      case 0xd1: v.kind = Value::Int; v.i = static_cast<int16_t>(fixed(2)); return v;
      case 0xd2: v.kind = Value::Int; v.i = static_cast<int32_t>(fixed(4)); return v;
      case 0xd3: v.kind = Value::Int; v.i = static_cast<int64_t>(fixed(8)); return v;
      case 0xd9: return str(fixed(1));
      case 0xda: return str(fixed(2));
      case 0xdb: return str(fixed(4));
      case 0xc4: skip(fixed(1)); return v;  // bin: not used by the metadata we read
      case 0xc5: skip(fixed(2)); return v;
      case 0xc6: skip(fixed(4)); return v;
      case 0xdc: return array(fixed(2), depth);
      case 0xdd: return array(fixed(4), depth);
      case 0xde: return map(fixed(2), depth);
      case 0xdf: return map(fixed(4), depth);
      default: bad("unsupported msgpack type byte " + std::to_string(t));
    }
  }

 private:
  uint8_t byte() {
    if (p_ >= end_) bad("metadata note ends inside a msgpack value");
    return *p_++;
  }
  void skip(uint64_t n) {
    if (static_cast<uint64_t>(end_ - p_) < n) bad("metadata note ends inside a msgpack value");
    p_ += n;
  }
  uint64_t fixed(int bytes) {  // msgpack integers and lengths are big-endian
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | byte();
    return v;
  }
  Value uint_(int bytes) { Value v; v.kind = Value::Int; v.i = static_cast<int64_t>(fixed(bytes)); return v; }
  Value str(uint64_t n) {
    const uint8_t* start = p_;
    skip(n);
    Value v; v.kind = Value::Str; v.s.assign(reinterpret_cast<const char*>(start), n);
    return v;
  }
  Value array(uint64_t n, int depth) {
    Value v; v.kind = Value::Arr;
    for (uint64_t i = 0; i < n; ++i) v.items.push_back(value(depth + 1));
    return v;
  }
  Value map(uint64_t n, int depth) {
    Value v; v.kind = Value::Map;
    for (uint64_t i = 0; i < n; ++i) {
      Value k = value(depth + 1);
      v.entries.emplace_back(std::move(k), value(depth + 1));
    }
    return v;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

uint32_t as_u32(const Value* v, const std::string& what) {
  if (!v || v->kind != Value::Int || v->i < 0 || v->i > 0xffffffffLL) bad(what + " is missing or not a uint32");
  return static_cast<uint32_t>(v->i);
}

std::string as_str(const Value* v, const std::string& what) {
  if (!v || v->kind != Value::Str) bad(what + " is missing or not a string");
  return v->s;
}

// The payload of the first NT_AMDGPU_METADATA note with owner "AMDGPU" in any SHT_NOTE section.
std::pair<const uint8_t*, size_t> metadata_note(const uint8_t* image, size_t size) {
  if (size < 64 || std::memcmp(image, "\x7f" "ELF", 4) != 0) bad("not an ELF file");
  if (image[4] != 2 || image[5] != 1) bad("not a little-endian ELF64 file");
  if (read_le<uint16_t>(image + 18) != kEmAmdgpu) bad("not an AMDGPU object (e_machine)");
  uint64_t shoff = read_le<uint64_t>(image + 40);
  uint16_t shentsize = read_le<uint16_t>(image + 58), shnum = read_le<uint16_t>(image + 60);
  if (shentsize < 64 || shoff > size || static_cast<uint64_t>(shnum) * shentsize > size - shoff)
    bad("section headers lie outside the file");
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint8_t* sh = image + shoff + static_cast<uint64_t>(i) * shentsize;
    if (read_le<uint32_t>(sh + 4) != kShtNote) continue;
    uint64_t off = read_le<uint64_t>(sh + 24), len = read_le<uint64_t>(sh + 32);
    if (off > size || len > size - off) bad("a note section lies outside the file");
    uint64_t pos = 0;
    while (pos + 12 <= len) {
      const uint8_t* n = image + off + pos;
      uint32_t namesz = read_le<uint32_t>(n), descsz = read_le<uint32_t>(n + 4), type = read_le<uint32_t>(n + 8);
      uint64_t name_at = pos + 12, desc_at = name_at + ((namesz + 3ULL) & ~3ULL);
      uint64_t next = desc_at + ((descsz + 3ULL) & ~3ULL);
      if (desc_at + descsz > len) bad("a note runs past its section");
      bool amdgpu = namesz >= 6 && std::memcmp(image + off + name_at, "AMDGPU", 6) == 0;
      if (amdgpu && type == kNtAmdgpuMetadata) return {image + off + desc_at, descsz};
      pos = next;
    }
  }
  bad("no NT_AMDGPU_METADATA note (not a code object v3+?)");
}

}  // namespace

std::vector<KernelArg> KernelMeta::explicit_args() const {
  std::vector<KernelArg> out;
  for (auto& a : args)
    if (!a.hidden()) out.push_back(a);
  return out;
}

std::vector<KernelMeta> read_kernels(const uint8_t* image, size_t size) {
  auto note = metadata_note(image, size);
  Reader r(note.first, note.second);
  Value root = r.value();
  const Value* kernels = root.get("amdhsa.kernels");
  if (!kernels || kernels->kind != Value::Arr) bad("metadata has no amdhsa.kernels list");
  std::vector<KernelMeta> out;
  for (auto& k : kernels->items) {
    KernelMeta m;
    m.name = as_str(k.get(".name"), ".name");
    std::string where = "kernel " + m.name + ": ";
    m.symbol = as_str(k.get(".symbol"), where + ".symbol");
    m.kernarg_segment_size = as_u32(k.get(".kernarg_segment_size"), where + ".kernarg_segment_size");
    m.kernarg_segment_align = as_u32(k.get(".kernarg_segment_align"), where + ".kernarg_segment_align");
    m.group_segment_fixed_size = as_u32(k.get(".group_segment_fixed_size"), where + ".group_segment_fixed_size");
    const Value* wg = k.get(".max_flat_workgroup_size");
    m.max_flat_workgroup_size = wg ? as_u32(wg, where + ".max_flat_workgroup_size") : 0;
    const Value* args = k.get(".args");
    if (args) {
      if (args->kind != Value::Arr) bad(where + ".args is not a list");
      for (auto& a : args->items) {
        KernelArg ka;
        ka.offset = as_u32(a.get(".offset"), where + ".args[].offset");
        ka.size = as_u32(a.get(".size"), where + ".args[].size");
        ka.value_kind = as_str(a.get(".value_kind"), where + ".args[].value_kind");
        if (static_cast<uint64_t>(ka.offset) + ka.size > m.kernarg_segment_size)
          bad(where + "an argument lies past .kernarg_segment_size");
        m.args.push_back(ka);
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace torch_flydsl_native
