// Network measurement between hosts over UCX tag messages (measure_network.h). One UCP worker per
// rank; the worker addresses go round through the caller's allgather; then the pairs are measured
// one at a time (the others wait in the next allgather), each in four phases: a -> b bandwidth,
// b -> a bandwidth, a's ping-pongs, b's ping-pongs. Every tag carries the phase number, so a
// message can only match the phase it belongs to.
#include <poll.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "measure_network_wire.h"
#include "tessera/topo/measure_network.h"

#if TESSERA_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace tessera::topo {

#if TESSERA_HAVE_UCX
namespace {

using Clock = std::chrono::steady_clock;

// A sender that cannot finish a phase in this long reports the pair as failed.
constexpr auto kPhaseTimeout = std::chrono::seconds(60);
constexpr size_t kMinMessageBytes = size_t{4} << 20;
// Long enough that the rendezvous handshake and the acknowledgement (a few round trips, ms on a
// loaded host) stay a few percent of the time.
constexpr double kSecondsPerMessage = 0.5;
// Progress that finds nothing to do for this long sleeps on the worker's event descriptor, so that
// on a loaded host the other processes (and the kernel's network stack) get the CPU.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr int kLatencyWarmup = 5, kLatencyRounds = 50;

// Message kinds, in the tag's upper half; the phase number is the lower half.
enum Kind : uint64_t { kData = 1, kAck = 2, kDone = 3, kPing = 4, kPong = 5 };
constexpr uint64_t kPhaseMask = 0xffffffffu;
uint64_t tag(Kind kind, uint32_t phase) {
  return (uint64_t{kind} << 32) | phase;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string ucs_error(const std::string& what, ucs_status_t s) {
  return what + " (" + ucs_status_string(s) + ")";
}

// The lane UCP moves bulk data on, from ucp_ep_print_info ("lane[1]:  2:tcp/eth0.0 md[1] ...
// am_bw#0"): "tcp/eth0". Empty when the text has no lane (a future UCX may print it otherwise).
std::string data_lane(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "";
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::string info(text, size), first, bulk;
  std::free(text);
  for (size_t at = info.find("lane["); at != std::string::npos; at = info.find("lane[", at + 1)) {
    std::string line = info.substr(at, info.find('\n', at) - at);
    size_t colon = line.find(':', line.find(']'));  // after "lane[N]:" comes "  M:tl/dev.path"
    size_t start = line.find(':', line.find_first_not_of(' ', colon + 1));
    if (colon == std::string::npos || start == std::string::npos) continue;
    std::string lane = line.substr(start + 1, line.find(' ', start) - start - 1);
    lane = lane.substr(0, lane.rfind('.'));  // the path index
    if (first.empty()) first = lane;
    if (bulk.empty() &&
        (line.find("am_bw") != std::string::npos || line.find("rma_bw") != std::string::npos)) {
      bulk = lane;
    }
  }
  return bulk.empty() ? first : bulk;
}

// UCX_TLS / UCX_NET_DEVICES from the environment, else the network transports and devices this
// host's probe found: shared memory would measure the host, and loopback devices the wrong host.
void choose_network(const Topology& topo, ucp_config_t* config) {
  std::set<std::string> tls, devices;
  for (const auto& t : topo.ucx.transports) {
    if (t.device_type != "network" || t.device == "lo") continue;
    tls.insert(t.transport);
    devices.insert(t.device);
  }
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "" : ",") + x;
    return out;
  };
  if (std::getenv("UCX_TLS") == nullptr && !tls.empty()) {
    ucp_config_modify(config, "TLS", join(tls).c_str());
  }
  if (std::getenv("UCX_NET_DEVICES") == nullptr && !devices.empty()) {
    ucp_config_modify(config, "NET_DEVICES", join(devices).c_str());
  }
}

// Owns the UCP objects of one rank and moves tag messages with bounded waits.
class Node {
 public:
  ~Node() {
    for (ucp_ep_h ep : eps_) {
      if (ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // every exchange is over: nothing left to flush
      wait(ucp_ep_close_nbx(ep, &param), Clock::now() + std::chrono::seconds(5), "close").ignore();
    }
    if (address_) ucp_worker_release_address(worker_, address_);
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }

  Status open(const Topology& topo, size_t max_bytes, int ranks) {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return unavailable(ucs_error("UCX configuration", s));
    choose_network(topo, config);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return unavailable(ucs_error("ucp_init", s));
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((s = ucp_worker_create(context_, &wp, &worker_)) != UCS_OK) {
      return unavailable(ucs_error("ucp_worker_create", s));
    }
    if (ucp_worker_get_efd(worker_, &efd_) != UCS_OK) efd_ = -1;  // then progress only spins
    if ((s = ucp_worker_get_address(worker_, &address_, &address_length_)) != UCS_OK) {
      return unavailable(ucs_error("ucp_worker_get_address", s));
    }
    send_.assign(max_bytes, 1);
    recv_.assign(max_bytes, 0);
    eps_.assign(ranks, nullptr);
    return Status();
  }

  std::string address() const {
    return std::string(reinterpret_cast<const char*>(address_), address_length_);
  }

  Status connect(int rank, const std::string& address) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ucs_status_t s = ucp_ep_create(worker_, &params, &eps_[rank]);
    return s == UCS_OK ? Status()
                       : unavailable(ucs_error("endpoint to rank " + std::to_string(rank), s));
  }
  std::string lane(int rank) const { return data_lane(eps_[rank]); }

  // Sends `bytes` to `rank` and waits for its completion.
  Status send(int rank, size_t bytes, uint64_t tag, Clock::time_point deadline) {
    ucp_request_param_t param{};
    return wait(ucp_tag_send_nbx(eps_[rank], send_.data(), bytes, tag, &param), deadline, "send");
  }
  // Receives one message whose tag matches `tag` under `mask`; its tag goes to `out_tag`.
  Status recv(uint64_t tag, uint64_t mask, Clock::time_point deadline, uint64_t& out_tag) {
    ucp_tag_recv_info_t info{};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
    param.recv_info.tag_info = &info;
    ucs_status_ptr_t request =
        ucp_tag_recv_nbx(worker_, recv_.data(), recv_.size(), tag, mask, &param);
    if (UCS_PTR_IS_ERR(request)) return unavailable(ucs_error("receive", UCS_PTR_STATUS(request)));
    if (request != nullptr) {
      ucs_status_t s;
      while ((s = ucp_tag_recv_request_test(request, &info)) == UCS_INPROGRESS) {
        if (Clock::now() > deadline) return abandon(request, "receive");
        progress();
      }
      ucp_request_free(request);
      if (s != UCS_OK) return unavailable(ucs_error("receive", s));
    }
    out_tag = info.sender_tag;
    return Status();
  }

 private:
  void progress() {
    if (ucp_worker_progress(worker_) != 0) {
      idle_since_ = Clock::time_point{};
      return;
    }
    auto now = Clock::now();
    if (idle_since_ == Clock::time_point{}) idle_since_ = now;
    if (efd_ < 0 || now - idle_since_ < kSpin) return;
    if (ucp_worker_arm(worker_) != UCS_OK) return;  // events pending: progress again
    pollfd event{efd_, POLLIN, 0};
    poll(&event, 1, 10);  // ms; the caller's deadline is checked between calls
  }
  Status wait(ucs_status_ptr_t request, Clock::time_point deadline, const char* what) {
    if (request == nullptr) return Status();
    if (UCS_PTR_IS_ERR(request)) return unavailable(ucs_error(what, UCS_PTR_STATUS(request)));
    ucs_status_t s;
    while ((s = ucp_request_check_status(request)) == UCS_INPROGRESS) {
      if (Clock::now() > deadline) return abandon(request, what);
      progress();
    }
    ucp_request_free(request);
    return s == UCS_OK ? Status() : unavailable(ucs_error(what, s));
  }
  Status abandon(ucs_status_ptr_t request, const char* what) {
    ucp_request_cancel(worker_, request);
    ucp_request_free(request);  // UCX keeps it until it ends; we no longer wait for it
    return deadline_exceeded(std::string(what) + ": no progress within " +
                             std::to_string(kPhaseTimeout.count()) + " s");
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_address_t* address_ = nullptr;
  size_t address_length_ = 0;
  int efd_ = -1;
  Clock::time_point idle_since_{};
  std::vector<ucp_ep_h> eps_;
  std::vector<char> send_, recv_;
};

// One timed message: `bytes` to `peer`, until its acknowledgement arrives. Seconds.
Result<double> timed_message(Node& node, int peer, size_t bytes, uint32_t phase,
                             Clock::time_point deadline) {
  uint64_t got = 0;
  auto t0 = Clock::now();
  Status s = node.send(peer, bytes, tag(kData, phase), deadline);
  if (s.ok()) s = node.recv(tag(kAck, phase), ~uint64_t{0}, deadline, got);
  if (!s.ok()) return s;
  return seconds_since(t0);
}

// Sender of a bandwidth phase: a wire-up message, an estimate that sizes the timed messages, the
// timed messages, then "done".
Status send_bandwidth(Node& node, int peer, uint32_t phase, const MeasureOptions& options,
                      NetworkLink& link) {
  auto deadline = Clock::now() + kPhaseTimeout;
  size_t max_bytes = std::max(options.ucx_bytes, kMinMessageBytes);  // Node::open's buffers
  auto warm = timed_message(node, peer, size_t{1} << 20, phase, deadline);
  if (!warm.ok()) return warm.status();
  auto estimate = timed_message(node, peer, kMinMessageBytes, phase, deadline);
  if (!estimate.ok()) return estimate.status();
  double rate = kMinMessageBytes / *estimate;  // bytes/s
  size_t bytes = static_cast<size_t>(rate * kSecondsPerMessage) & ~((size_t{1} << 20) - 1);
  link.message_bytes = std::clamp(bytes, kMinMessageBytes, max_bytes);
  for (int i = 0; i < std::max(options.repeats, 1); ++i) {
    auto seconds = timed_message(node, peer, link.message_bytes, phase, deadline);
    if (!seconds.ok()) return seconds.status();
    link.samples_gbps.push_back(link.message_bytes / *seconds / 1e9);
  }
  link.bandwidth_gbps = median(link.samples_gbps);
  return node.send(peer, 8, tag(kDone, phase), deadline);
}

// Receiver of a bandwidth phase: acknowledges each message until "done". Bounded by the number of
// messages a sender sends and by the phase timeout.
Status receive_bandwidth(Node& node, int peer, uint32_t phase, const MeasureOptions& options) {
  auto deadline = Clock::now() + kPhaseTimeout;
  for (int i = 0; i < std::max(options.repeats, 1) + 3; ++i) {
    uint64_t got = 0;
    if (Status s = node.recv(phase, kPhaseMask, deadline, got); !s.ok()) return s;
    if (got == tag(kDone, phase)) return Status();
    if (got != tag(kData, phase))
      return internal_error("unexpected message kind " + std::to_string(got >> 32));
    if (Status s = node.send(peer, 8, tag(kAck, phase), deadline); !s.ok()) return s;
  }
  return internal_error("the sender sent more messages than a bandwidth phase has");
}

// 8-byte ping-pongs; the initiator keeps the median half round trip (microseconds).
Status ping_pong(Node& node, int peer, uint32_t phase, bool initiator, NetworkLink& link) {
  auto deadline = Clock::now() + kPhaseTimeout;
  std::vector<double> half_trips;
  for (int i = 0; i < kLatencyWarmup + kLatencyRounds; ++i) {
    uint64_t got = 0;
    auto t0 = Clock::now();
    Status s = initiator ? node.send(peer, 8, tag(kPing, phase), deadline)
                         : node.recv(tag(kPing, phase), ~uint64_t{0}, deadline, got);
    if (s.ok()) {
      s = initiator ? node.recv(tag(kPong, phase), ~uint64_t{0}, deadline, got)
                    : node.send(peer, 8, tag(kPong, phase), deadline);
    }
    if (!s.ok()) return s;
    if (i >= kLatencyWarmup) half_trips.push_back(seconds_since(t0) / 2 * 1e6);
  }
  if (initiator) link.latency_us = median(half_trips);
  return Status();
}

void declare(const Topology& topo, NetworkLink& link) {
  size_t slash = link.transport.find('/');
  if (slash == std::string::npos) return;
  for (const auto& t : topo.ucx.transports) {
    if (t.transport == link.transport.substr(0, slash) &&
        t.device == link.transport.substr(slash + 1)) {
      link.declared_bandwidth_gbps = t.bandwidth_gbps;
      link.declared_latency_us = t.latency_us;
    }
  }
}

// The transport this host sent on gets its slowest outgoing pair as its measured figure.
void record(Topology& topo, const std::vector<NetworkLink>& mine) {
  for (const auto& link : mine) {
    size_t slash = link.transport.find('/');
    if (slash == std::string::npos) continue;
    for (auto& t : topo.ucx.transports) {
      if (t.transport != link.transport.substr(0, slash) ||
          t.device != link.transport.substr(slash + 1))
        continue;
      if (!t.measured_bandwidth_gbps || link.bandwidth_gbps < *t.measured_bandwidth_gbps) {
        t.measured_bandwidth_gbps = link.bandwidth_gbps;
        t.measured_latency_us = link.latency_us;
      }
    }
  }
}

// Both directions and the latency of the pair (a, b); `mine` gets the links this rank sent on.
Status measure_pair(Node& node, int self, int a, int b, uint32_t phase, const Topology& topo,
                    const MeasureOptions& options, const std::vector<std::string>& hosts,
                    std::vector<NetworkLink>& mine) {
  int peer = self == a ? b : a;
  NetworkLink link;
  link.from_rank = self;
  link.to_rank = peer;
  link.from_host = hosts[self];
  link.to_host = hosts[peer];
  link.transport = node.lane(peer);
  declare(topo, link);
  auto where = [&](const char* what) {
    return std::string(what) + " between rank " + std::to_string(a) + " (" + hosts[a] +
           ") and rank " + std::to_string(b) + " (" + hosts[b] + ")";
  };
  for (int sender : {a, b}) {
    Status s = sender == self ? send_bandwidth(node, peer, phase, options, link)
                              : receive_bandwidth(node, peer, phase, options);
    if (!s.ok()) return s.with_context(where("bandwidth"));
    ++phase;
  }
  // Each side times its own ping-pongs, so each direction's link carries its sender's figure.
  for (int initiator : {a, b}) {
    if (Status s = ping_pong(node, peer, phase, initiator == self, link); !s.ok()) {
      return s.with_context(where("latency"));
    }
    ++phase;
  }
  mine.push_back(link);
  return Status();
}

}  // namespace

Result<NetworkMeasurement> measure_network(Topology& topo, const PeerGroup& group,
                                           const MeasureOptions& options) {
  auto t0 = Clock::now();
  NetworkMeasurement m;
  auto hosts = group.allgather("probe/network/hosts", topo.host.hostname);
  if (!hosts.ok()) return hosts.status().with_context("exchanging host names");
  m.hosts = *hosts;
  for (int a = 0; a < group.size; ++a) {
    for (int b = a + 1; b < group.size; ++b) {
      if (m.hosts[a] == m.hosts[b]) {
        return failed_precondition("ranks " + std::to_string(a) + " and " + std::to_string(b) +
                                   " are both on host '" + m.hosts[a] +
                                   "': measure the network with one rank per host "
                                   "(tessera launch --nproc-per-node 1)");
      }
    }
  }
  Node node;
  Status opened = topo.ucx.available
                      ? node.open(topo, std::max(options.ucx_bytes, kMinMessageBytes), group.size)
                      : failed_precondition("UCX was not probed: " + topo.ucx.skipped);
  // A rank without UCX still joins the exchange (with no address), so the others stop at once.
  auto addresses =
      group.allgather("probe/network/ucx-addresses", opened.ok() ? node.address() : "");
  if (!opened.ok()) return opened;
  if (!addresses.ok()) return addresses.status().with_context("exchanging UCX addresses");
  for (int r = 0; r < group.size; ++r) {
    if ((*addresses)[r].empty()) {
      return unavailable("rank " + std::to_string(r) + " (" + m.hosts[r] + ") could not open UCX");
    }
    if (r == group.rank) continue;
    if (Status s = node.connect(r, (*addresses)[r]); !s.ok()) return s;
  }
  std::vector<NetworkLink> mine;
  uint32_t pair = 0;
  Status failed;
  for (int a = 0; a < group.size; ++a) {
    for (int b = a + 1; b < group.size; ++b, ++pair) {
      // Every rank learns whether the previous pair failed, so all stop at the same point.
      auto turn = group.allgather("probe/network/pair-" + std::to_string(pair),
                                  failed.ok() ? "" : failed.message());
      if (!turn.ok()) return turn.status();
      for (const auto& why : *turn) {
        if (!why.empty()) return unavailable(why);
      }
      if (group.rank != a && group.rank != b) continue;
      failed = measure_pair(node, group.rank, a, b, pair * 4, topo, options, m.hosts, mine);
    }
  }
  auto results = group.allgather("probe/network/results", failed.ok() ? encode_links(mine) : "");
  if (!results.ok()) return results.status().with_context("gathering the results");
  if (!failed.ok()) return failed;
  for (const auto& text : *results) {
    auto links = decode_links(text);
    if (!links.ok()) return links.status();
    if (links->empty() && group.size > 1 && text.empty()) {
      return unavailable("a rank failed its measurement (its own message names the pair)");
    }
    m.links.insert(m.links.end(), links->begin(), links->end());
  }
  std::sort(m.links.begin(), m.links.end(), [](const NetworkLink& x, const NetworkLink& y) {
    return std::pair(x.from_rank, x.to_rank) < std::pair(y.from_rank, y.to_rank);
  });
  record(topo, mine);
  m.seconds = seconds_since(t0);
  return m;
}

#else

Result<NetworkMeasurement> measure_network(Topology&, const PeerGroup&, const MeasureOptions&) {
  return failed_precondition("this Tessera was built without UCX: no network to measure");
}

#endif

}  // namespace tessera::topo
