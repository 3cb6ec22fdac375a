// The deployment's native index (``<cache dir>/native/index.tsv``, written by
// ``torch_flydsl.native.export``): which code object holds each compiled unit, and the config
// numbers the launcher needs (tile sizes, threads). Code objects load once per device.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "code_object.h"
#include "hip_api.h"
#include "kernarg.h"

namespace torch_flydsl_native {

struct Unit {
  std::string id;      // the manifest's kernel id, e.g. dense_gemm-7/<cfg>/bfloat16/nt/bias0/ktail0
  std::string file;    // absolute path of the code object
  std::string kernel;  // its kernel name
  int64_t size = 0;    // bytes, as the index recorded them
  std::string sha256;  // its SHA-256 (hex), the name the index gives the file (<sha256>.hsaco)
  std::vector<uint8_t> image;
  KernelMeta meta;
  std::map<std::string, KernargPlan, std::less<>> plans;  // by convention kinds
  std::map<int, hipFunction_t> functions;    // by device index
};

// A config's numbers (block_m=..., split_k=...).
using ConfigParams = std::map<std::string, int64_t, std::less<>>;

class Registry {
 public:
  static Registry& get();
  // Read (again) the index under ``cache_dir``; "" means $TORCH_FLYDSL_CACHE_DIR.
  void use_cache_dir(const std::string& cache_dir);
  // The numbers of ``family``'s config ``cfg``, or null with ``why`` (index missing, config not in it).
  const ConfigParams* config(std::string_view family, std::string_view cfg, std::string* why);
  // The unit and a plan for ``kinds``, its function on ``device`` when ``load`` (null with
  // ``why``). A module is never loaded while ``stream`` captures a graph (as kernel_cache.py).
  Unit* unit(const std::string& id, std::string_view kinds, int device, bool load, hipStream_t stream,
             const KernargPlan** plan, hipFunction_t* fn, std::string* why);
  std::string status();
  // Every launch the process made since the last reset, for tests.
  int64_t launches() const { return launches_; }
  void count_launch() { ++launches_; }

 private:
  void load_index_locked();
  bool ready_locked(std::string* why);  // the index is read and usable (else why not)
  std::mutex mu_;
  bool read_ = false;
  std::string dir_, index_error_;
  std::map<std::string, std::unique_ptr<Unit>> units_;
  std::map<std::string, std::map<std::string, ConfigParams, std::less<>>, std::less<>> configs_;  // family, cfg
  int64_t launches_ = 0;
};

}  // namespace torch_flydsl_native
