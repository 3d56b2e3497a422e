// UCX half of discovery: every memory domain, transport and device UCT offers (the same list as
// `ucx_info -d`), with the bandwidth and latency each interface declares, and the memory types the
// memory domains can access.
#include <algorithm>
#include <string>
#include <vector>

#include "tessera/topo/discover.h"

#if TESSERA_HAVE_UCX
#include <ucp/api/ucp.h>
#include <ucs/async/async_fwd.h>
#include <ucs/memory/memory_type.h>
#include <uct/api/uct.h>
#endif

namespace tessera::topo {

bool have_ucx() {
  return TESSERA_HAVE_UCX != 0;
}

#if TESSERA_HAVE_UCX
namespace {

std::string device_type_name(uct_device_type_t type) {
  switch (type) {
    case UCT_DEVICE_TYPE_NET: return "network";
    case UCT_DEVICE_TYPE_SHM: return "intra-node";
    case UCT_DEVICE_TYPE_ACC: return "accelerator";
    case UCT_DEVICE_TYPE_SELF: return "loopback";
    default: return "other";
  }
}

// Fills bandwidth and latency from the interface; leaves them 0 when it does not open.
void query_iface(uct_md_h md, uct_worker_h worker, UcxTransport& tl) {
  uct_iface_config_t* config = nullptr;
  if (uct_md_iface_config_read(md, tl.transport.c_str(), nullptr, nullptr, &config) != UCS_OK) {
    return;
  }
  uct_iface_params_t params{};
  params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE;
  params.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
  params.mode.device.tl_name = tl.transport.c_str();
  params.mode.device.dev_name = tl.device.c_str();
  uct_iface_h iface = nullptr;
  ucs_status_t status = uct_iface_open(md, worker, &params, config, &iface);
  uct_config_release(config);
  if (status != UCS_OK) return;
  uct_iface_attr_t attr{};
  if (uct_iface_query(iface, &attr) == UCS_OK) {
    tl.bandwidth_gbps = (attr.bandwidth.dedicated + attr.bandwidth.shared) / 1e9;
    tl.latency_us = attr.latency.c * 1e6;
    const uint64_t flags = attr.cap.flags;
    if (flags & (UCT_IFACE_FLAG_AM_SHORT | UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_AM_ZCOPY)) {
      tl.operations.emplace_back("am");
    }
    if (flags & (UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_PUT_ZCOPY)) {
      tl.operations.emplace_back("put");
    }
    if (flags & (UCT_IFACE_FLAG_GET_SHORT | UCT_IFACE_FLAG_GET_BCOPY | UCT_IFACE_FLAG_GET_ZCOPY)) {
      tl.operations.emplace_back("get");
    }
  }
  uct_iface_close(iface);
}

void query_md(uct_component_h component, const std::string& component_name, const char* md_name,
              uct_worker_h worker, Topology& topo, uint64_t& mem_types) {
  uct_md_config_t* config = nullptr;
  if (uct_md_config_read(component, nullptr, nullptr, &config) != UCS_OK) return;
  uct_md_h md = nullptr;
  ucs_status_t status = uct_md_open(component, md_name, config, &md);
  uct_config_release(config);
  if (status != UCS_OK) {
    topo.skipped.push_back(std::string("ucx: memory domain ") + md_name +
                           " did not open: " + ucs_status_string(status));
    return;
  }
  uct_md_attr_t md_attr{};
  if (uct_md_query(md, &md_attr) == UCS_OK) mem_types |= md_attr.cap.access_mem_types;
  uct_tl_resource_desc_t* resources = nullptr;
  unsigned count = 0;
  if (uct_md_query_tl_resources(md, &resources, &count) == UCS_OK) {
    for (unsigned i = 0; i < count; ++i) {
      UcxTransport tl;
      tl.component = component_name;
      tl.memory_domain = md_name;
      tl.transport = resources[i].tl_name;
      tl.device = resources[i].dev_name;
      tl.device_type = device_type_name(resources[i].dev_type);
      query_iface(md, worker, tl);
      topo.ucx.transports.push_back(std::move(tl));
    }
    uct_release_tl_resource_list(resources);
  }
  uct_md_close(md);
}

}  // namespace

void discover_ucx(Topology& topo) {
  topo.ucx = UcxInfo{};
  topo.ucx.version = ucp_get_version_string();
  ucs_async_context_t* async = nullptr;
  if (ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) != UCS_OK) {
    topo.ucx.skipped = "ucx: could not create an async context";
    topo.skipped.push_back(topo.ucx.skipped);
    return;
  }
  uct_worker_h worker = nullptr;
  if (uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker) != UCS_OK) {
    ucs_async_context_destroy(async);
    topo.ucx.skipped = "ucx: could not create a worker";
    topo.skipped.push_back(topo.ucx.skipped);
    return;
  }
  uct_component_h* components = nullptr;
  unsigned num_components = 0;
  uint64_t mem_types = 0;
  if (uct_query_components(&components, &num_components) == UCS_OK) {
    for (unsigned c = 0; c < num_components; ++c) {
      uct_component_attr_t attr{};
      attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
      if (uct_component_query(components[c], &attr) != UCS_OK) continue;
      std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
      attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
      attr.md_resources = mds.data();
      if (uct_component_query(components[c], &attr) != UCS_OK) continue;
      for (const auto& md : mds) {
        query_md(components[c], attr.name, md.md_name, worker, topo, mem_types);
      }
    }
    uct_release_component_list(components);
  }
  uct_worker_destroy(worker);
  ucs_async_context_destroy(async);
  for (int t = UCS_MEMORY_TYPE_HOST; t < UCS_MEMORY_TYPE_LAST; ++t) {
    if (mem_types & (1ull << t)) topo.ucx.memory_types.emplace_back(ucs_memory_type_names[t]);
  }
  topo.ucx.available = true;
  // A transport reaches the NIC whose OS name its device starts with ("mlx5_0:1" -> "mlx5_0").
  for (auto& nic : topo.nics) {
    nic.ucx_transports.clear();
    for (const auto& tl : topo.ucx.transports) {
      std::string dev = tl.device.substr(0, tl.device.find(':'));
      if (dev == nic.name) nic.ucx_transports.push_back(tl.transport + "/" + tl.device);
    }
  }
}

#else

void discover_ucx(Topology& topo) {
  topo.ucx = UcxInfo{};
  topo.ucx.skipped = "ucx: not found when Tessera was built (install libucx-dev)";
  topo.skipped.push_back(topo.ucx.skipped);
}

#endif

}  // namespace tessera::topo
