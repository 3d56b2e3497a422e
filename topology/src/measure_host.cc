// Host memory bandwidth per NUMA node, and the plain memcpy it is checked against.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "tessera/topo/measure.h"

#if TESSERA_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace tessera::topo {
namespace {

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// GB/s of one memcpy, timed by the thread's CPU clock: a copy is pure CPU work (memory stalls
// included), and on a shared host the time the thread spends descheduled is not memory time.
double copy_gbps(void* dst, const void* src, size_t bytes) {
  double t0 = thread_seconds();
  std::memcpy(dst, src, bytes);
  double dt = thread_seconds() - t0;
  return dt > 0 ? bytes / dt / 1e9 : 0;
}

double best_copy_gbps(void* dst, const void* src, size_t bytes, int repeats) {
  std::memset(dst, 1, bytes);  // first touch: page faults stay out of the timing
  std::memcpy(dst, src, bytes);
  double best = 0;
  for (int i = 0; i < repeats; ++i) best = std::max(best, copy_gbps(dst, src, bytes));
  return best;
}

}  // namespace

double memcpy_bandwidth_gbps(size_t bytes, int repeats) {
  std::vector<char> src(bytes, 7), dst(bytes);
  return best_copy_gbps(dst.data(), src.data(), bytes, repeats);
}

#if TESSERA_HAVE_HWLOC

void measure_host_memory(Topology& topo, const MeasureOptions& options, MeasureReport& report) {
  hwloc_topology_t t = nullptr;
  hwloc_topology_init(&t);
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    report.notes.push_back("host memory: hwloc could not load the live machine");
    return;
  }
  hwloc_cpuset_t saved = hwloc_bitmap_alloc();
  hwloc_get_cpubind(t, saved, HWLOC_CPUBIND_THREAD);
  std::vector<char> ref_src(options.host_bytes, 7), ref_dst(options.host_bytes, 1);
  for (auto& node : topo.numa_nodes) {
    hwloc_obj_t obj = hwloc_get_numanode_obj_by_os_index(t, node.os_index);
    if (!obj) {
      report.notes.push_back("host memory: NUMA node " + std::to_string(node.os_index) +
                             " is not on this machine (topology from a file?)");
      continue;
    }
    size_t bytes = options.host_bytes;
    void* src =
        hwloc_alloc_membind(t, bytes, obj->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    void* dst =
        hwloc_alloc_membind(t, bytes, obj->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    if (src && dst) {
      std::memset(src, 7, bytes);
      std::memset(dst, 1, bytes);
      double best = 0;
      for (int i = 0; i < 4 * options.repeats; ++i) {
        hwloc_set_cpubind(t, obj->cpuset, HWLOC_CPUBIND_THREAD);
        best = std::max(best, copy_gbps(dst, src, bytes));
        hwloc_set_cpubind(t, saved, HWLOC_CPUBIND_THREAD);
        report.reference_memcpy_gbps = std::max(report.reference_memcpy_gbps,
                                                copy_gbps(ref_dst.data(), ref_src.data(), bytes));
      }
      node.measured_memory_bandwidth_gbps = best;
    } else {
      report.notes.push_back("host memory: could not allocate on NUMA node " +
                             std::to_string(node.os_index));
    }
    if (src) hwloc_free(t, src, bytes);
    if (dst) hwloc_free(t, dst, bytes);
  }
  hwloc_set_cpubind(t, saved, HWLOC_CPUBIND_THREAD);
  hwloc_bitmap_free(saved);
  hwloc_topology_destroy(t);
}

#else

void measure_host_memory(Topology& topo, const MeasureOptions& options, MeasureReport& report) {
  report.notes.push_back("host memory: built without hwloc, measured unbound as node 0");
  if (topo.numa_nodes.empty()) topo.numa_nodes.push_back(NumaNode{});
  double gbps = memcpy_bandwidth_gbps(options.host_bytes, 4 * options.repeats);
  topo.numa_nodes[0].measured_memory_bandwidth_gbps = gbps;
  report.reference_memcpy_gbps = gbps;
}

#endif

MeasureReport measure(Topology& topo, const hal::Platform* platform,
                      const MeasureOptions& options) {
  MeasureReport report;
  auto t0 = std::chrono::steady_clock::now();
  if (options.host) measure_host_memory(topo, options, report);
  if (options.devices) {
    if (platform) {
      measure_devices(topo, *platform, options, report);
    } else {
      report.notes.push_back("devices: no platform (backends not loaded)");
    }
  }
  if (options.ucx) measure_ucx(topo, options, report);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace tessera::topo
