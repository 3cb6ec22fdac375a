#include "units.h"

#include "sha256.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace torch_flydsl_native {

namespace {

constexpr const char* kIndexHeader = "# torch-flydsl native index v1";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");  // a last field that is empty (a unit without params)
  return out;
}

// Like ssh with its keys: a file anyone but this user or root could have written is not used.
std::string untrusted(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return path + " is missing";
  if (st.st_uid != getuid() && st.st_uid != 0) return path + " belongs to another user";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return path + " is writable by group or others";
  return "";
}

}  // namespace

Registry& Registry::get() {
  static Registry r;
  return r;
}

void Registry::use_cache_dir(const std::string& cache_dir) {
  std::lock_guard<std::mutex> g(mu_);
  read_ = false;
  units_.clear();
  configs_.clear();
  index_error_.clear();
  dir_ = cache_dir;
  load_index_locked();
}

void Registry::load_index_locked() {
  read_ = true;
  if (dir_.empty()) {
    const char* env = std::getenv("TORCH_FLYDSL_CACHE_DIR");
    if (!env || !*env) {
      index_error_ = "TORCH_FLYDSL_CACHE_DIR is not set: no deployment cache to load code objects from";
      return;
    }
    dir_ = env;
  }
  std::string native = dir_ + "/native", index = native + "/index.tsv";
  for (const std::string& p : {native, index}) {
    std::string bad = untrusted(p);
    if (!bad.empty()) {
      index_error_ = "native index not used: " + bad;
      return;
    }
  }
  std::ifstream in(index);
  std::string line;
  if (!std::getline(in, line) || line != kIndexHeader) {
    index_error_ = index + " is not a native index (" + kIndexHeader + ")";
    return;
  }
  // id \t family/cfg \t file \t size \t kernel \t k=v,k=v
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto f = split(line, '\t');
    if (f.size() != 6) {
      index_error_ = index + ": a line without 6 tab-separated fields";
      units_.clear();
      configs_.clear();
      return;
    }
    auto u = std::make_unique<Unit>();
    u->id = f[0];
    u->file = native + "/" + f[2];
    u->kernel = f[4];
    u->sha256 = f[2].size() == 64 + 6 && f[2].compare(64, 6, ".hsaco") == 0 ? f[2].substr(0, 64) : "";
    ConfigParams params;
    for (auto& kv : split(f[5], ',')) {
      auto eq = kv.find('=');
      if (eq != std::string::npos) params[kv.substr(0, eq)] = std::strtoll(kv.c_str() + eq + 1, nullptr, 10);
    }
    u->size = std::strtoll(f[3].c_str(), nullptr, 10);
    auto slash = f[1].find('/');
    if (slash == std::string::npos) {
      index_error_ = index + ": a config field without a family (<family>/<config>)";
      units_.clear();
      configs_.clear();
      return;
    }
    configs_[f[1].substr(0, slash)][f[1].substr(slash + 1)] = params;
    units_[u->id] = std::move(u);
  }
}

bool Registry::ready_locked(std::string* why) {
  if (!read_) load_index_locked();
  if (index_error_.empty()) return true;
  *why = index_error_;
  return false;
}

const ConfigParams* Registry::config(std::string_view family, std::string_view cfg, std::string* why) {
  std::lock_guard<std::mutex> g(mu_);
  if (!ready_locked(why)) return nullptr;
  auto fam = configs_.find(family);
  if (fam != configs_.end()) {
    auto it = fam->second.find(cfg);
    if (it != fam->second.end()) return &it->second;
  }
  *why = "config " + std::string(family) + "/" + std::string(cfg) + " has no code object in " + dir_ +
         "/native/index.tsv";
  return nullptr;
}

Unit* Registry::unit(const std::string& id, std::string_view kinds, int device, bool load, hipStream_t stream,
                     const KernargPlan** plan, hipFunction_t* fn, std::string* why) {
  std::lock_guard<std::mutex> g(mu_);
  if (!ready_locked(why)) return nullptr;
  auto it = units_.find(id);
  if (it == units_.end()) {
    *why = "kernel " + id + " has no code object in " + dir_ + "/native/index.tsv (precompile it)";
    return nullptr;
  }
  Unit* u = it->second.get();
  if (u->image.empty()) {
    std::string bad = untrusted(u->file);
    if (!bad.empty()) {
      *why = bad;
      return nullptr;
    }
    std::ifstream f(u->file, std::ios::binary);
    u->image.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (static_cast<int64_t>(u->image.size()) != u->size) {
      *why = u->file + " is " + std::to_string(u->image.size()) + " bytes, the index recorded " + std::to_string(u->size);
      u->image.clear();
      return nullptr;
    }
    // The index names a code object by its SHA-256: a file whose bytes changed since export
    // (damaged, or replaced by someone who could not change the index) is not loaded.
    if (u->sha256.empty()) {
      *why = u->file + ": the index names it " + u->file.substr(u->file.rfind('/') + 1) +
             ", not <sha256>.hsaco, so its content cannot be checked";
      u->image.clear();
      return nullptr;
    }
    std::string got = sha256_hex(u->image.data(), u->image.size());
    if (got != u->sha256) {
      *why = u->file + " has SHA-256 " + got + ", not the " + u->sha256 + " its name in the index records "
             "(damaged or replaced since export: export or precompile it again)";
      u->image.clear();
      return nullptr;
    }
    try {
      bool found = false;
      for (auto& k : read_kernels(u->image.data(), u->image.size())) {
        if (k.name == u->kernel) {
          u->meta = k;
          found = true;
        }
      }
      if (!found) {
        *why = u->file + " has no kernel " + u->kernel;
        u->image.clear();
        return nullptr;
      }
    } catch (const std::exception& e) {
      *why = u->file + ": " + e.what();
      u->image.clear();
      return nullptr;
    }
  }
  auto p = u->plans.find(kinds);
  if (p == u->plans.end()) {
    KernargPlan fresh;
    if (!plan_kernargs(u->meta, std::string(kinds), &fresh, why)) return nullptr;
    p = u->plans.emplace(std::string(kinds), fresh).first;
  }
  *plan = &p->second;
  if (!load) return u;
  auto fit = u->functions.find(device);
  if (fit == u->functions.end()) {
    const HipApi* hip = hip_api(why);
    if (!hip) return nullptr;
    int capture = 0;
    if (hip->stream_is_capturing && hip->stream_is_capturing(stream, &capture) == 0 && capture != 0) {
      *why = "kernel " + id + " not yet loaded in this process and the stream is capturing a graph: modules are "
             "never loaded during capture (run the op once before capturing)";
      return nullptr;
    }
    hipModule_t module = nullptr;
    hipError_t e = hip->module_load_data(&module, u->image.data());
    if (e != 0) {
      *why = "hipModuleLoadData(" + u->file + "): " + hip->describe(e);
      return nullptr;
    }
    hipFunction_t f = nullptr;
    e = hip->module_get_function(&f, module, u->kernel.c_str());
    if (e != 0) {
      *why = "hipModuleGetFunction(" + u->kernel + "): " + hip->describe(e);
      return nullptr;
    }
    fit = u->functions.emplace(device, f).first;
  }
  *fn = fit->second;
  return u;
}

std::string Registry::status() {
  std::lock_guard<std::mutex> g(mu_);
  if (!read_) load_index_locked();
  std::string why;
  const HipApi* hip = hip_api(&why);
  std::ostringstream s;
  s << "hip: " << (hip ? "loaded " + hip->path : why) << "\n";
  s << "index: " << (index_error_.empty() ? dir_ + "/native/index.tsv, " + std::to_string(units_.size()) + " code objects"
                                          : index_error_) << "\n";
  s << "launches: " << launches_;
  return s.str();
}

}  // namespace torch_flydsl_native
