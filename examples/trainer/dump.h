// The gathered global parameters, as a file for comparing runs.
//
// Format (little-endian): "TSRPARAMS1\n", then per parameter in global order: u32 name length,
// the name, u32 rank, rank x i64 shape, then the f32 values (row-major). The checksum is FNV-1a
// (64 bit) over every value's bytes in file order: equal checksums mean bitwise-equal runs.
// Thread-safe (values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::trainer {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

uint64_t params_checksum(const std::vector<NamedTensor>& tensors);
Status write_params_file(const std::string& path, const std::vector<NamedTensor>& tensors);
Result<std::vector<NamedTensor>> read_params_file(const std::string& path);

struct ParamsComparison {
  bool bitwise_equal = false;
  double max_abs_diff = 0;
  double max_rel_diff = 0;  // |a - b| / max(|b|, 1e-3)
  std::string worst;        // "block1.w2[17]: 0.1234 vs 0.1235"
};
// INVALID_ARGUMENT naming the first parameter whose name or shape differs.
Result<ParamsComparison> compare_params(const std::vector<NamedTensor>& a,
                                        const std::vector<NamedTensor>& b);

// Reads two parameters files and compares them (`tessera-train --compare A B`). Errors name the
// file: NOT_FOUND (cannot open), INVALID_ARGUMENT (not a parameters file, or the two hold other
// parameters: the first parameter whose name or shape differs, with both shapes), DATA_LOSS
// (truncated, naming the tensor).
Result<ParamsComparison> compare_params_files(const std::string& a_path, const std::string& b_path);

}  // namespace tessera::trainer
