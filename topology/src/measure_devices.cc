// Copy bandwidth host->device and device->device through the HAL (wall clock around copy and
// synchronize, best of N; the first copy is a warm-up).
#include <chrono>
#include <functional>
#include <map>

#include "tessera/topo/measure.h"

namespace tessera::topo {
namespace {

struct Timing {
  double gbps = 0;
  double latency_us = 0;
};

// Best bandwidth of `copy(bytes)` and best time of `copy(4)`; the status of the first failure.
Result<Timing> time_copies(const hal::Stream& stream, size_t bytes, int repeats,
                           const std::function<Status(size_t)>& copy) {
  Timing timing;
  double best_small = 1e30;
  for (int i = 0; i <= repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    TSR_RETURN_IF_ERROR(copy(bytes));
    TSR_RETURN_IF_ERROR(stream.synchronize());
    std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (i > 0 && dt.count() > 0) timing.gbps = std::max(timing.gbps, bytes / dt.count() / 1e9);
    t0 = std::chrono::steady_clock::now();
    TSR_RETURN_IF_ERROR(copy(4));
    TSR_RETURN_IF_ERROR(stream.synchronize());
    dt = std::chrono::steady_clock::now() - t0;
    if (i > 0) best_small = std::min(best_small, dt.count());
  }
  timing.latency_us = best_small * 1e6;
  return timing;
}

void store(Topology& topo, const std::string& a, const std::string& b, const Timing& t) {
  if (Link* link = topo.find_link(a, b)) {
    link->measured_bandwidth_gbps = t.gbps;
    link->measured_latency_us = t.latency_us;
  }
}

}  // namespace

void measure_devices(Topology& topo, const hal::Platform& platform, const MeasureOptions& options,
                     MeasureReport& report) {
  const size_t bytes = options.device_bytes;
  std::map<std::string, hal::DeviceBuffer> buffers;
  for (const auto& device : platform.devices()) {
    const Accelerator* acc = topo.find_accelerator(device.id());
    if (!acc) continue;
    auto fail = [&](const Status& s) {
      report.notes.push_back("device " + device.id() + ": " + s.to_string());
    };
    auto buffer = device.allocate(bytes);
    auto host = device.allocate_host(bytes);
    auto stream = device.create_stream();
    if (!buffer.ok() || !host.ok() || !stream.ok()) {
      fail(!buffer.ok() ? buffer.status() : !host.ok() ? host.status() : stream.status());
      continue;
    }
    void* dst = buffer->data();
    const void* src = host->data();
    auto h2d = time_copies(*stream, bytes, options.repeats,
                           [&](size_t n) { return stream->copy(dst, src, n); });
    if (!h2d.ok()) {
      fail(h2d.status());
      continue;
    }
    int numa = acc->numa_node >= 0 ? acc->numa_node
                                   : (topo.numa_nodes.empty() ? 0 : topo.numa_nodes[0].os_index);
    store(topo, "numa:" + std::to_string(numa), device.id(), *h2d);
    buffers.emplace(device.id(), std::move(*buffer));
  }
  for (const auto& a : platform.devices()) {
    for (const auto& b : platform.devices()) {
      if (a.id() >= b.id() || a.backend_name() != b.backend_name()) continue;
      if (!buffers.count(a.id()) || !buffers.count(b.id())) continue;
      auto stream = a.create_stream();
      if (!stream.ok()) {
        report.notes.push_back("device " + a.id() + ": " + stream.status().to_string());
        continue;
      }
      void* dst = buffers[b.id()].data();
      const void* src = buffers[a.id()].data();
      auto peer = time_copies(*stream, bytes, options.repeats, [&](size_t n) {
        return stream->copy_peer(dst, b.index(), src, a.index(), n);
      });
      if (!peer.ok()) {
        report.notes.push_back("peer copy " + a.id() + " -> " + b.id() + ": " +
                               peer.status().to_string());
        continue;
      }
      store(topo, a.id(), b.id(), *peer);
    }
  }
}

}  // namespace tessera::topo
