// UCX loopback measurement: one UCP context per transport (TLS=<transport>), an endpoint to the
// process's own worker, and RMA puts into a registered buffer. Network transports need a peer host:
// measure_network.cc measures them when the probe runs with one rank per host.
#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "tessera/topo/measure.h"

#if TESSERA_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

namespace tessera::topo {

#if TESSERA_HAVE_UCX
namespace {

ucs_status_t wait(ucp_worker_h worker, ucs_status_ptr_t request) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    ucp_worker_progress(worker);
  }
  ucp_request_free(request);
  return status;
}

// Owns every UCP object of one loopback measurement; releases them in reverse order.
struct Loopback {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  ucp_ep_h ep = nullptr;
  ucp_mem_h memh = nullptr;
  void* rkey_buffer = nullptr;
  ucp_rkey_h rkey = nullptr;
  std::vector<char> src, dst;

  ~Loopback() {
    if (rkey) ucp_rkey_destroy(rkey);
    if (rkey_buffer) ucp_rkey_buffer_release(rkey_buffer);
    if (ep) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      wait(worker, ucp_ep_close_nbx(ep, &param));
    }
    if (memh) ucp_mem_unmap(context, memh);
    if (address) ucp_worker_release_address(worker, address);
    if (worker) ucp_worker_destroy(worker);
    if (context) ucp_cleanup(context);
  }

  ucs_status_t open(const std::string& transport, size_t bytes) {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return s;
    ucp_config_modify(config, "TLS", transport.c_str());
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    s = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (s != UCS_OK) return s;
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((s = ucp_worker_create(context, &wp, &worker)) != UCS_OK) return s;
    if ((s = ucp_worker_get_address(worker, &address, &address_length)) != UCS_OK) return s;
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = address;
    if ((s = ucp_ep_create(worker, &ep_params, &ep)) != UCS_OK) return s;
    src.assign(bytes, 1);
    dst.assign(bytes, 0);
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = dst.data();
    mp.length = bytes;
    if ((s = ucp_mem_map(context, &mp, &memh)) != UCS_OK) return s;
    size_t rkey_size = 0;
    if ((s = ucp_rkey_pack(context, memh, &rkey_buffer, &rkey_size)) != UCS_OK) return s;
    return ucp_ep_rkey_unpack(ep, rkey_buffer, &rkey);
  }

  // Seconds for one put of `bytes` completed by a flush.
  ucs_status_t put(size_t bytes, double& seconds) {
    ucp_request_param_t param{};
    auto t0 = std::chrono::steady_clock::now();
    ucs_status_t s = wait(
        worker,
        ucp_put_nbx(ep, src.data(), bytes, reinterpret_cast<uint64_t>(dst.data()), rkey, &param));
    if (s == UCS_OK) s = wait(worker, ucp_ep_flush_nbx(ep, &param));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }
};

}  // namespace

void measure_ucx(Topology& topo, const MeasureOptions& options, MeasureReport& report) {
  if (!topo.ucx.available) {
    report.notes.push_back("ucx: not probed, nothing to measure");
    return;
  }
  std::set<std::string> done;
  for (const auto& tl : topo.ucx.transports) {
    if (tl.device_type == "network") {
      if (done.insert(tl.transport).second) {
        report.notes.push_back("ucx " + tl.transport +
                               ": network transport, needs a peer host (one rank per host "
                               "under a launcher measures it)");
      }
      continue;
    }
    if (!done.insert(tl.transport).second) continue;
    if (std::find(tl.operations.begin(), tl.operations.end(), "am") == tl.operations.end()) {
      // UCP wires an endpoint up through active messages; alone, such a transport cannot.
      report.notes.push_back("ucx " + tl.transport +
                             ": no active messages, UCP cannot use it alone for a loopback");
      continue;
    }
    Loopback loop;
    ucs_status_t s = loop.open(tl.transport, options.ucx_bytes);
    double best_bw = 0, best_lat = 1e30, seconds = 0;
    for (int i = 0; s == UCS_OK && i <= options.repeats; ++i) {
      if ((s = loop.put(options.ucx_bytes, seconds)) != UCS_OK) break;
      if (i > 0) best_bw = std::max(best_bw, options.ucx_bytes / seconds / 1e9);
    }
    for (int i = 0; s == UCS_OK && i < 100; ++i) {
      if ((s = loop.put(8, seconds)) == UCS_OK && i > 0) best_lat = std::min(best_lat, seconds);
    }
    if (s != UCS_OK) {
      report.notes.push_back("ucx " + tl.transport + ": loopback put failed (" +
                             ucs_status_string(s) + ")");
      continue;
    }
    for (auto& t : topo.ucx.transports) {
      if (t.transport != tl.transport) continue;
      t.measured_bandwidth_gbps = best_bw;
      t.measured_latency_us = best_lat * 1e6;
    }
  }
}

#else

void measure_ucx(Topology& topo, const MeasureOptions& options, MeasureReport& report) {
  report.notes.push_back("ucx: built without UCX, nothing to measure");
}

#endif

}  // namespace tessera::topo
