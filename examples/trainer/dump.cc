#include "dump.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace tessera::trainer {
namespace {

constexpr char kMagic[] = "TSRPARAMS1\n";

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
bool get(const std::string& in, size_t* at, T* v) {
  if (in.size() - *at < sizeof(T)) return false;
  std::memcpy(v, in.data() + *at, sizeof(T));
  *at += sizeof(T);
  return true;
}

}  // namespace

uint64_t params_checksum(const std::vector<NamedTensor>& tensors) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const NamedTensor& t : tensors) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(t.values.data());
    for (size_t i = 0; i < t.values.size() * sizeof(float); ++i) {
      hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
    }
  }
  return hash;
}

Status write_params_file(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::string out(kMagic);
  for (const NamedTensor& t : tensors) {
    put(out, uint32_t(t.name.size()));
    out += t.name;
    put(out, uint32_t(t.shape.size()));
    for (int64_t d : t.shape) put(out, d);
    out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!(f << out) || !f.flush()) return unavailable(tmp + ": cannot write the parameters");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return unavailable(path + ": cannot rename " + tmp + " into place");
  }
  return Status();
}

Result<std::vector<NamedTensor>> read_params_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path + ": cannot open the parameters file");
  const std::string in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (in.compare(0, sizeof kMagic - 1, kMagic) != 0) {
    return invalid_argument(path + ": not a parameters file (bad magic)");
  }
  std::vector<NamedTensor> out;
  size_t at = sizeof kMagic - 1;
  while (at < in.size()) {
    NamedTensor t;
    uint32_t name_len = 0, rank = 0;
    if (!get(in, &at, &name_len) || in.size() - at < name_len) {
      return data_loss(path + ": truncated at byte " + std::to_string(at));
    }
    t.name = in.substr(at, name_len);
    at += name_len;
    if (!get(in, &at, &rank) || rank > 8) return data_loss(path + ": bad rank of " + t.name);
    int64_t n = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t v = 0;
      if (!get(in, &at, &v) || v < 0) return data_loss(path + ": bad shape of " + t.name);
      t.shape.push_back(v);
      n *= v;
    }
    if (in.size() - at < size_t(n) * sizeof(float)) {
      return data_loss(path + ": values of " + t.name + " truncated");
    }
    t.values.resize(size_t(n));
    std::memcpy(t.values.data(), in.data() + at, size_t(n) * sizeof(float));
    at += size_t(n) * sizeof(float);
    out.push_back(std::move(t));
  }
  return out;
}

Result<ParamsComparison> compare_params(const std::vector<NamedTensor>& a,
                                        const std::vector<NamedTensor>& b) {
  if (a.size() != b.size()) {
    return invalid_argument("parameter counts differ: " + std::to_string(a.size()) + " vs " +
                            std::to_string(b.size()));
  }
  ParamsComparison c;
  c.bitwise_equal = true;
  for (size_t p = 0; p < a.size(); ++p) {
    if (a[p].name != b[p].name || a[p].shape != b[p].shape) {
      return invalid_argument("parameter " + std::to_string(p) + ": '" + a[p].name + "' vs '" +
                              b[p].name + "' (name or shape differs)");
    }
    if (std::memcmp(a[p].values.data(), b[p].values.data(), a[p].values.size() * 4) != 0) {
      c.bitwise_equal = false;
    }
    for (size_t i = 0; i < a[p].values.size(); ++i) {
      // Identical bits (a NaN in both files included) differ by nothing.
      if (std::memcmp(&a[p].values[i], &b[p].values[i], sizeof(float)) == 0) continue;
      const double x = a[p].values[i], y = b[p].values[i];
      const double diff = std::fabs(x - y), rel = diff / std::max(std::fabs(y), 1e-3);
      if (!(diff <= c.max_abs_diff) || std::isnan(diff)) {
        c.max_abs_diff = std::isnan(diff) ? INFINITY : diff;
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s[%zu]: %.9g vs %.9g", a[p].name.c_str(), i, x, y);
        c.worst = buf;
      }
      c.max_rel_diff = std::max(c.max_rel_diff, rel);
    }
  }
  return c;
}

Result<ParamsComparison> compare_params_files(const std::string& a_path,
                                              const std::string& b_path) {
  auto a = read_params_file(a_path);
  if (!a.ok()) return a.status();
  auto b = read_params_file(b_path);
  if (!b.ok()) return b.status();
  auto shape_text = [](const std::vector<int64_t>& shape) {
    std::string text = "[";
    for (size_t d = 0; d < shape.size(); ++d) text += (d ? "," : "") + std::to_string(shape[d]);
    return text + "]";
  };
  for (size_t p = 0; p < std::min(a->size(), b->size()); ++p) {
    const NamedTensor &x = (*a)[p], &y = (*b)[p];
    if (x.name != y.name || x.shape != y.shape) {
      return invalid_argument(a_path + " vs " + b_path + ": parameter " + std::to_string(p) +
                              " is '" + x.name + "' " + shape_text(x.shape) + " in the first, '" +
                              y.name + "' " + shape_text(y.shape) + " in the second");
    }
  }
  if (a->size() != b->size()) {
    const bool a_longer = a->size() > b->size();
    return invalid_argument(a_path + " vs " + b_path + ": " + std::to_string(a->size()) + " vs " +
                            std::to_string(b->size()) + " parameters; '" +
                            (a_longer ? *a : *b)[std::min(a->size(), b->size())].name +
                            "' is only in " + (a_longer ? a_path : b_path));
  }
  return compare_params(*a, *b);
}

}  // namespace tessera::trainer
