// Picks an algorithm per operation from an alpha-beta-gamma cost model (per-message latency,
// seconds per byte moved, seconds per byte reduced), whose constants come from the topology's
// measured figures when a topology file is given (TESSERA_TOPOLOGY, written by `tessera probe
// --measure --json`), else from conservative defaults. TESSERA_COLL_ALGO forces choices
// ("allreduce:ring,broadcast:tree"); TESSERA_LOG=info logs each (op, algorithm, size class) the
// first time it is used.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "algo/algo.h"
#include "tessera/coll/communicator.h"

namespace tessera::coll {

struct LinkCost {
  double alpha_s = 1e-6;              // one message
  double beta_s_per_byte = 1 / 4e9;   // moving one byte (both copies of a shared-memory hop)
  double gamma_s_per_byte = 1 / 8e9;  // reducing one byte
  std::string source = "defaults";
};

// Intra-host and inter-host costs: from the topology file named by TESSERA_TOPOLOGY when set and
// readable (an error names the file and field otherwise), else defaults.
Result<std::pair<LinkCost, LinkCost>> link_costs_from_environment();

using AlgoFn = Status (*)(AlgoContext&, const OpDesc&);

struct AlgoInfo {
  std::string_view name;
  AlgoFn fn;
};

// An algorithm's index in the table for `op` (sent in every message header), and back; the name
// is "algorithm?" for an index outside the table.
uint8_t algorithm_index(OpKind op, const AlgoInfo& algo);
std::string_view algorithm_name(OpKind op, int index);

class Tuner {
 public:
  // `forced`: "op:algo,..." as TESSERA_COLL_ALGO; errors name the bad entry and list the choices.
  static Result<std::unique_ptr<Tuner>> create(int size, int num_hosts, bool hierarchical_ok,
                                               LinkCost intra, LinkCost inter,
                                               std::string_view forced);

  const AlgoInfo& choose(OpKind op, size_t bytes) const;
  // Modelled seconds of `algorithm` for `op` of `bytes`; +inf when it does not apply.
  double cost(OpKind op, std::string_view algorithm, size_t bytes) const;
  // "allreduce: ring, recursive_doubling, ..." for help texts and errors.
  static std::string choices();

 private:
  Tuner() = default;
  int size_ = 1;
  int num_hosts_ = 1;
  bool hierarchical_ok_ = false;
  LinkCost intra_, inter_;
  std::array<const AlgoInfo*, kNumOpKinds> forced_{};
  mutable std::mutex logged_mutex_;
  mutable std::set<std::string> logged_;
};

}  // namespace tessera::coll
