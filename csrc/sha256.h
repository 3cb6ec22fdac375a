// SHA-256 (FIPS 180-4) of a byte buffer, as lowercase hex: the native index names each code
// object by its hash, and the launcher checks it before a module load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch_flydsl_native {

std::string sha256_hex(const uint8_t* data, size_t size);

}  // namespace torch_flydsl_native
