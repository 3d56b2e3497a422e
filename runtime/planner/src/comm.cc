// Collective and GEMM pricing: the lowest level of the performance model.
#include <algorithm>
#include <cmath>

#include "tessera/plan/cost_model.h"

namespace tessera::plan {

LinkPath group_path(const ClusterSpec& c, int64_t stride, int64_t size) {
  const int64_t dph = c.devices_per_host;
  // Members of the group per host: a stride at or above the host size puts each member on its
  // own host; otherwise the group fills dph/stride slots of each host it touches.
  const int64_t per_host = stride >= dph ? 1 : std::max<int64_t>(1, std::min(size, dph / stride));
  LinkPath path;
  path.intra_latency = c.intra_host.latency_us * 1e-6;
  if (size <= per_host) {
    path.busbw = c.intra_host.busbw_gbps * 1e9;
    path.latency = path.intra_latency;
    path.per_host = size;
    return path;
  }
  // Every device of a host runs a group like this one at the same time, so the host's NICs are
  // shared: a group gets nics x per-NIC bandwidth x per_host / dph. Rings of per_host > 1 members
  // cross each host boundary once, so NVLink inside the host is not the limit unless slower.
  const double nic = c.inter_host.busbw_gbps * 1e9 * c.inter_host.nics_per_host;
  path.busbw = nic * static_cast<double>(per_host) / static_cast<double>(dph);
  if (per_host > 1) path.busbw = std::min(path.busbw, c.intra_host.busbw_gbps * 1e9);
  path.latency = c.inter_host.latency_us * 1e-6;
  path.per_host = per_host;
  path.inter_host = true;
  return path;
}

LinkPath flat_group_path(const ClusterSpec& c, int64_t stride, int64_t size) {
  LinkPath path = group_path(c, stride, size);
  if (!path.inter_host) return path;
  const double nic = c.inter_host.busbw_gbps * 1e9 * c.inter_host.nics_per_host;
  path.busbw = std::min(path.busbw, nic / static_cast<double>(c.devices_per_host));
  return path;
}

double ring_latency(int64_t n, const LinkPath& path) {
  if (n <= 1) return 0;
  if (!path.inter_host) return static_cast<double>(n - 1) * path.latency;
  const double hosts = std::ceil(static_cast<double>(n) / static_cast<double>(path.per_host));
  return (hosts - 1) * path.latency + (static_cast<double>(n) - hosts) * path.intra_latency;
}

double allreduce_latency(int64_t n, const LinkPath& path) {
  if (n <= 1) return 0;
  const double ring = 2 * ring_latency(n, path);
  if (!path.inter_host) return ring;
  // NCCL's tree: a chain inside each host, a double binary tree between hosts, up and down.
  const double hosts = std::ceil(static_cast<double>(n) / static_cast<double>(path.per_host));
  const double tree = 2 * (std::ceil(std::log2(hosts)) * path.latency +
                           static_cast<double>(path.per_host - 1) * path.intra_latency);
  return std::min(ring, tree);
}

double allreduce_time(double bytes, int64_t n, const LinkPath& path) {
  if (n <= 1 || bytes <= 0) return 0;
  const double steps = 2.0 * static_cast<double>(n - 1);
  return allreduce_latency(n, path) + bytes * steps / static_cast<double>(n) / path.busbw;
}

double allgather_time(double bytes, int64_t n, const LinkPath& path) {
  if (n <= 1 || bytes <= 0) return 0;
  const double steps = static_cast<double>(n - 1);
  return ring_latency(n, path) + bytes * steps / static_cast<double>(n) / path.busbw;
}

double alltoall_time(double bytes, int64_t n, const LinkPath& path) {
  return allgather_time(bytes, n, path);  // same bus-bandwidth factor (n-1)/n
}

double p2p_time(double bytes, const LinkPath& path) {
  if (bytes <= 0) return 0;
  return path.latency + bytes / path.busbw;
}

double effective_gemm_knee(const ClusterSpec& c, Dtype dtype, const CostOptions& o) {
  if (o.gemm_knee > 0) return o.gemm_knee;
  // 128 on an A100 (312 TFLOP/s over 2039 GB/s), scaled by the device's FLOP/byte balance.
  constexpr double kA100Balance = 312e12 / 2039e9;
  const double balance = c.device.peak_flops(dtype) / (c.device.memory_bandwidth_gbps * 1e9);
  return 128 * balance / kA100Balance;
}

double grad_reduce_bytes(Dtype dtype, const CostOptions& o) {
  if (o.grad_reduce_bytes > 0) return o.grad_reduce_bytes;
  return dtype == Dtype::kBf16 ? 4 : 2;
}

double gemm_time(double m, double n, double k, double batch, double peak, double efficiency,
                 double knee) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
  // Small dimensions starve the tensor cores (tile quantisation, low arithmetic intensity):
  // each dimension x scales the large-GEMM efficiency by x / (x + knee).
  const double shape = (m / (m + knee)) * (n / (n + knee)) * (k / (k + knee));
  return 2.0 * m * n * k * batch / (peak * efficiency * shape);
}

}  // namespace tessera::plan
