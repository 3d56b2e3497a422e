#include "tuner.h"

#include <cmath>
#include <limits>

#include "tessera/common/env.h"
#include "tessera/common/log.h"
#if TESSERA_COLL_HAVE_TOPOLOGY
#include "tessera/topo/json.h"
#endif

namespace tessera::coll {
namespace {

const AlgoInfo kAllReduce[] = {{"ring", allreduce_ring},
                               {"recursive_doubling", allreduce_recursive_doubling},
                               {"halving_doubling", allreduce_halving_doubling},
                               {"tree", allreduce_tree},
                               {"hierarchical", allreduce_hierarchical}};
const AlgoInfo kReduce[] = {{"tree", reduce_tree}};
const AlgoInfo kBroadcast[] = {{"tree", broadcast_tree}, {"chain", broadcast_chain}};
const AlgoInfo kAllGather[] = {{"ring", allgather_ring}, {"direct", allgather_direct}};
const AlgoInfo kReduceScatter[] = {{"ring", reduce_scatter_ring}};
const AlgoInfo kAllToAll[] = {{"pairwise", alltoall_pairwise}};
const AlgoInfo kBarrier[] = {{"dissemination", barrier_dissemination}};
const AlgoInfo kSendRecv[] = {{"direct", send_recv}};

std::span<const AlgoInfo> algorithms(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce: return kAllReduce;
    case OpKind::kReduce: return kReduce;
    case OpKind::kBroadcast: return kBroadcast;
    case OpKind::kAllGather:
    case OpKind::kAllGatherV: return kAllGather;
    case OpKind::kReduceScatter: return kReduceScatter;
    case OpKind::kAllToAll:
    case OpKind::kAllToAllV: return kAllToAll;
    case OpKind::kBarrier: return kBarrier;
    case OpKind::kSend:
    case OpKind::kRecv: return kSendRecv;
  }
  return {};
}

const AlgoInfo* find(OpKind op, std::string_view name) {
  for (const AlgoInfo& a : algorithms(op)) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

double log2_ceil(int n) {
  return n <= 1 ? 0 : std::ceil(std::log2(double(n)));
}

const char* size_class(size_t bytes) {
  if (bytes < (size_t(64) << 10)) return "< 64 KiB";
  if (bytes < (size_t(4) << 20)) return "64 KiB - 4 MiB";
  return ">= 4 MiB";
}

}  // namespace

uint8_t algorithm_index(OpKind op, const AlgoInfo& algo) {
  const auto table = algorithms(op);
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].name == algo.name) return static_cast<uint8_t>(i);
  }
  return 0xff;
}

std::string_view algorithm_name(OpKind op, int index) {
  const auto table = algorithms(op);
  return index >= 0 && size_t(index) < table.size() ? table[size_t(index)].name : "algorithm?";
}

Result<std::pair<LinkCost, LinkCost>> link_costs_from_environment() {
  LinkCost intra;  // shared memory: ~0.5 us a message, each byte copied twice at ~8 GB/s
  intra.alpha_s = 0.5e-6;
  intra.beta_s_per_byte = 2 / 8e9;
  intra.gamma_s_per_byte = 1.5 / 8e9;
  LinkCost inter;  // a 10 GbE-class network
  inter.alpha_s = 20e-6;
  inter.beta_s_per_byte = 1 / 1.25e9;
  inter.gamma_s_per_byte = intra.gamma_s_per_byte;
  const auto path = env::get("TESSERA_TOPOLOGY");
  if (!path || path->empty()) return std::make_pair(intra, inter);
#if TESSERA_COLL_HAVE_TOPOLOGY
  TSR_ASSIGN_OR_RETURN(topo::Topology t, topo::load_json_file(*path));
  for (const auto& node : t.numa_nodes) {
    if (node.measured_memory_bandwidth_gbps && *node.measured_memory_bandwidth_gbps > 0) {
      const double bw = *node.measured_memory_bandwidth_gbps * 1e9;
      intra.beta_s_per_byte = 2 / bw;
      intra.gamma_s_per_byte = 1.5 / bw;
      inter.gamma_s_per_byte = intra.gamma_s_per_byte;
      intra.source = *path + " (measured memory bandwidth)";
      break;
    }
  }
  double best_bw = 0, best_lat = 0;
  for (const auto& tr : t.ucx.transports) {
    if (tr.device_type != "network") continue;
    const double bw = tr.measured_bandwidth_gbps.value_or(tr.bandwidth_gbps);
    const double lat = tr.measured_latency_us.value_or(tr.latency_us);
    if (bw > best_bw) {
      best_bw = bw;
      best_lat = lat;
    }
  }
  if (best_bw > 0) {
    inter.beta_s_per_byte = 1 / (best_bw * 1e9);
    if (best_lat > 0) inter.alpha_s = best_lat * 1e-6;
    inter.source = *path + " (UCX network transport)";
  }
  return std::make_pair(intra, inter);
#else
  return failed_precondition("TESSERA_TOPOLOGY=" + *path +
                             ": this build of the collectives has no topology layer");
#endif
}

std::string Tuner::choices() {
  std::string out;
  const OpKind ops[] = {OpKind::kAllReduce, OpKind::kReduce,        OpKind::kBroadcast,
                        OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllToAll,
                        OpKind::kBarrier};
  for (OpKind op : ops) {
    if (!out.empty()) out += "; ";
    out += std::string(op_name(op)) + ":";
    bool first = true;
    for (const AlgoInfo& a : algorithms(op)) {
      out += (first ? " " : "|") + std::string(a.name);
      first = false;
    }
  }
  return out;
}

Result<std::unique_ptr<Tuner>> Tuner::create(int size, int num_hosts, bool hierarchical_ok,
                                             LinkCost intra, LinkCost inter,
                                             std::string_view forced) {
  std::unique_ptr<Tuner> t(new Tuner());
  t->size_ = size;
  t->num_hosts_ = num_hosts;
  t->hierarchical_ok_ = hierarchical_ok;
  t->intra_ = intra;
  t->inter_ = inter;
  for (const std::string& entry : env::split(forced, ",")) {
    const size_t colon = entry.find(':');
    const std::string op_text = entry.substr(0, colon);
    const std::string algo = colon == std::string::npos ? "" : entry.substr(colon + 1);
    bool matched = false;
    for (int k = 0; k < kNumOpKinds; ++k) {
      const OpKind op = OpKind(k);
      if (op_name(op) != op_text) continue;
      matched = true;
      const AlgoInfo* info = find(op, algo);
      if (info == nullptr) {
        return invalid_argument("TESSERA_COLL_ALGO entry '" + entry + "': no algorithm '" + algo +
                                "' for " + op_text + " (choices: " + choices() + ")");
      }
      t->forced_[size_t(k)] = info;
      // allgather forces allgatherv too, alltoall forces alltoallv.
      if (op == OpKind::kAllGather) t->forced_[size_t(OpKind::kAllGatherV)] = info;
      if (op == OpKind::kAllToAll) t->forced_[size_t(OpKind::kAllToAllV)] = info;
    }
    if (!matched) {
      return invalid_argument("TESSERA_COLL_ALGO entry '" + entry + "': unknown operation '" +
                              op_text + "' (choices: " + choices() + ")");
    }
  }
  return t;
}

double Tuner::cost(OpKind op, std::string_view algorithm, size_t bytes) const {
  const double inf = std::numeric_limits<double>::infinity();
  const int n = size_;
  const double S = double(bytes);
  // Flat algorithms over several hosts pay the network on every step.
  const LinkCost& l = num_hosts_ > 1 ? inter_ : intra_;
  const double a = l.alpha_s, b = l.beta_s_per_byte, g = l.gamma_s_per_byte;
  const double lg = log2_ceil(n);
  const bool pow2 = (n & (n - 1)) == 0;
  const double fold = pow2 ? 0 : 2 * (a + S * b);  // non-powers of two fold in and out
  if (op == OpKind::kAllReduce) {
    if (algorithm == "ring")
      return 2 * (n - 1) * a + 2.0 * (n - 1) / n * S * b + (n - 1.0) / n * S * g;
    if (algorithm == "recursive_doubling") return lg * (a + S * b + S * g) + fold;
    if (algorithm == "halving_doubling") {
      return 2 * lg * a + 2.0 * (n - 1) / n * S * b + (n - 1.0) / n * S * g + fold;
    }
    if (algorithm == "tree") return 2 * lg * (a + S * b) + lg * S * g;
    if (algorithm == "hierarchical") {
      if (!hierarchical_ok_ || num_hosts_ < 2) return inf;
      const int ln = n / num_hosts_, h = num_hosts_;
      const double local =
          2 * (ln - 1) * intra_.alpha_s + 2.0 * (ln - 1) / ln * S * intra_.beta_s_per_byte;
      const double cross =
          2 * (h - 1) * inter_.alpha_s + 2.0 * (h - 1) / h * (S / ln) * inter_.beta_s_per_byte;
      return local + cross + S * g;
    }
  }
  if (op == OpKind::kBroadcast) {
    if (algorithm == "tree") return lg * (a + S * b);
    if (algorithm == "chain") {
      const double piece = double(size_t(1) << 20);
      const double pieces = std::max(1.0, std::ceil(S / piece));
      return (n - 1 + pieces - 1) * (a + std::min(S, piece) * b);
    }
  }
  if (op == OpKind::kAllGather || op == OpKind::kAllGatherV) {
    // S is the whole gathered size here.
    if (algorithm == "ring") return (n - 1) * a + (n - 1.0) / n * S * b;
    if (algorithm == "direct") return a + (n - 1.0) / n * S * b * (n > 2 ? 1.5 : 1.0);
  }
  return inf;
}

const AlgoInfo& Tuner::choose(OpKind op, size_t bytes) const {
  const AlgoInfo* pick = forced_[size_t(op)];
  const char* why = "forced by TESSERA_COLL_ALGO";
  if (pick == nullptr) {
    const auto candidates = algorithms(op);
    pick = &candidates[0];
    double best = cost(op, pick->name, bytes);
    for (const AlgoInfo& a : candidates) {
      const double c = cost(op, a.name, bytes);
      if (c < best) {
        best = c;
        pick = &a;
      }
    }
    why = "cost model";
  }
  if (log::enabled(log::Level::kInfo, "coll")) {
    std::string key =
        std::string(op_name(op)) + "/" + std::string(pick->name) + "/" + size_class(bytes);
    std::lock_guard lock(logged_mutex_);
    if (logged_.insert(key).second) {
      TSR_LOG(kInfo, "coll") << op_name(op) << " of " << size_class(bytes) << " on " << size_
                             << " ranks (" << num_hosts_ << " hosts): " << pick->name << " (" << why
                             << ")";
    }
  }
  return *pick;
}

}  // namespace tessera::coll
