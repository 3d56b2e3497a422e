// Test support: a small "model" (weights sharded by tensor parallelism, replicated by data
// parallelism, an optimizer moment sharded ZeRO-style, a bf16 bias, a scalar and blobs) whose
// every byte is a function of (tensor, global element, step), so any rank can check any slice of
// it bitwise under any layout. Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/state.h"

namespace tessera::ckpt::testing {

// tp innermost: rank = dp_index * tp + tp_index.
struct Layout {
  int tp = 1, dp = 1;
  int size() const { return tp * dp; }
};

struct TensorSpec {
  const char* name;
  hal::DType dtype;
  std::vector<int64_t> shape;
};

inline const std::vector<TensorSpec>& model_tensors() {
  static const std::vector<TensorSpec> specs = {
      {"w1", hal::DType::kF32, {64, 48}},      // column parallel: dim 0 by tp, dp replicas
      {"w2", hal::DType::kF32, {48, 64}},      // row parallel: dim 1 by tp, dp replicas
      {"adam_m", hal::DType::kF32, {64, 48}},  // dim 0 by tp, then dim 1 by dp (ZeRO)
      {"bias", hal::DType::kBF16, {48}},       // replicated everywhere
      {"scale", hal::DType::kI64, {}},         // a 0-dim tensor, replicated
  };
  return specs;
}

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// The bytes of the elements of `slice` of tensor `spec` at `step`, row-major.
inline std::vector<std::byte> pattern(const TensorSpec& spec, const Slice& slice, int64_t step) {
  const size_t esize = hal::dtype_size(spec.dtype);
  const int nd = static_cast<int>(spec.shape.size());
  std::vector<std::byte> out(static_cast<size_t>(slice.elements()) * esize);
  std::vector<int64_t> idx(nd, 0);
  const uint64_t seed = name_seed(spec.name) ^ mix64(static_cast<uint64_t>(step));
  for (int64_t e = 0; e < slice.elements(); ++e) {
    int64_t g = 0;
    for (int d = 0; d < nd; ++d) g = g * spec.shape[d] + slice.offset[d] + idx[d];
    const uint64_t v = mix64(seed + static_cast<uint64_t>(g));
    std::memcpy(out.data() + e * esize, &v, esize);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < slice.len[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// How each model tensor is cut (recorded in the manifest; offline resharding applies it): the
// rule of tessera/checkpoint/layout.h with zero >= 1 gives exactly model_slice below.
inline std::optional<Placement> model_placement(const TensorSpec& spec) {
  const std::string name = spec.name;
  if (name == "w1") return Placement{0, -1, 1, -1};
  if (name == "w2") return Placement{1, -1, 1, -1};
  if (name == "adam_m") return Placement{0, 1, 1, -1};
  return std::nullopt;
}

// This rank's slice of each model tensor under `layout`, and whether it is a replica.
inline Slice model_slice(const TensorSpec& spec, const Layout& layout, int rank, bool* replicated) {
  const int t = rank % layout.tp, d = rank / layout.tp;
  Slice s = full_slice(spec.shape);
  const std::string name = spec.name;
  *replicated = true;
  if (name == "w1") s = split_slice(spec.shape, s, 0, layout.tp, t).value();
  if (name == "w2") s = split_slice(spec.shape, s, 1, layout.tp, t).value();
  if (name == "adam_m") {
    s = split_slice(spec.shape, s, 0, layout.tp, t).value();
    s = split_slice(spec.shape, s, 1, layout.dp, d).value();
    *replicated = false;
  }
  return s;
}

// A rank's memory for the model, registered in a StateRegistry.
struct ModelState {
  std::vector<std::vector<std::byte>> tensors;
  std::string rng;     // per rank
  std::string cursor;  // replicated

  static std::string rng_of(int rank, int64_t step) {
    return "rng-" + std::to_string(rank) + "-" + std::to_string(step);
  }
  static std::string cursor_of(int64_t step) { return "cursor-" + std::to_string(step); }

  // Fills with the pattern of `step` (or zeros when step < 0) and registers it.
  Status register_in(StateRegistry& reg, const Layout& layout, int rank, int64_t step) {
    tensors.clear();
    for (const auto& spec : model_tensors()) {
      bool replicated;
      Slice slice = model_slice(spec, layout, rank, &replicated);
      tensors.push_back(
          step >= 0 ? pattern(spec, slice, step)
                    : std::vector<std::byte>(slice.elements() * hal::dtype_size(spec.dtype)));
      TSR_RETURN_IF_ERROR(reg.add_host_tensor(spec.name, spec.dtype, spec.shape, slice,
                                              tensors.back().data(), replicated));
      if (auto p = model_placement(spec)) TSR_RETURN_IF_ERROR(reg.set_placement(spec.name, *p));
    }
    rng = step >= 0 ? rng_of(rank, step) : "";
    cursor = step >= 0 ? cursor_of(step) : "";
    TSR_RETURN_IF_ERROR(reg.add_blob("rng", &rng));
    return reg.add_blob("cursor", &cursor, /*replicated=*/true);
  }

  // Overwrites the registered memory with the pattern of `step`.
  void fill(const Layout& layout, int rank, int64_t step) {
    for (size_t i = 0; i < model_tensors().size(); ++i) {
      bool replicated;
      const auto& spec = model_tensors()[i];
      const auto bytes = pattern(spec, model_slice(spec, layout, rank, &replicated), step);
      std::memcpy(tensors[i].data(), bytes.data(), bytes.size());  // registered memory stays
    }
    rng = rng_of(rank, step);
    cursor = cursor_of(step);
  }

  // "" when every byte is the pattern of `step`; else what differs. `rng_rank`: the rank whose
  // rng blob is expected (-1: do not check).
  std::string check(const Layout& layout, int rank, int64_t step, int rng_rank) const {
    for (size_t i = 0; i < model_tensors().size(); ++i) {
      bool replicated;
      const auto& spec = model_tensors()[i];
      if (tensors[i] != pattern(spec, model_slice(spec, layout, rank, &replicated), step)) {
        return std::string("tensor '") + spec.name + "' differs from step " + std::to_string(step) +
               " on rank " + std::to_string(rank);
      }
    }
    if (rng_rank >= 0 && rng != rng_of(rng_rank, step)) return "rng blob is '" + rng + "'";
    if (cursor != cursor_of(step)) return "cursor blob is '" + cursor + "'";
    return "";
  }
};

// Steps 1 and 2 of the one-rank model saved through `ck`: the checkpoint the corruption,
// untrusted-input and CLI tests start from (each then breaks it its own way).
inline Status save_two_steps(Checkpointer& ck) {
  ModelState state;
  TSR_RETURN_IF_ERROR(state.register_in(ck.registry(), Layout{1, 1}, 0, 1));
  for (int64_t step : {1, 2}) {
    state.fill(Layout{1, 1}, 0, step);
    TSR_RETURN_IF_ERROR(ck.save_async(step).status());
    TSR_ASSIGN_OR_RETURN(SaveResult saved, ck.wait());
    TSR_RETURN_IF_ERROR(saved.status);
  }
  return Status();
}

}  // namespace tessera::ckpt::testing
