// `tessera probe`: what this host is made of and how its devices connect (topology layer).
// Human summary and device matrix by default; --json, --dot FILE, --measure, --cluster hosts=N.
// Sources: the live machine, --hwloc-xml FILE, --synthetic DESC or --from-json FILE. Under a
// launcher with one rank per host, --measure also measures the network between the hosts (rank 0
// prints). Exit status 0 when the probe worked (parts skipped are listed, not errors); 2 on bad
// input or options; 1 when the network measurement failed.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/common/untrusted.h"
#include "tessera/topo/cluster.h"
#include "tessera/topo/discover.h"
#include "tessera/topo/json.h"
#include "tessera/topo/measure.h"
#include "tessera/topo/measure_network.h"
#include "tessera/topo/render.h"

namespace tessera::tools {
namespace {

struct ProbeOptions {
  bool json = false;
  bool measure = false;
  bool no_ucx = false;
  std::string dot;
  std::string hwloc_xml;
  std::string synthetic;
  std::string from_json;
  std::string cluster;  // "hosts=N"
  std::string preset;
  std::string backends;
  // Given on the command line (an empty value is refused, not read as "not given").
  bool has_hwloc_xml = false, has_synthetic = false, has_from_json = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "tessera probe: %s\n", message.c_str());
  throw CLI::RuntimeError(2);
}

int parse_hosts(const std::string& spec) {
  const std::string prefix = "hosts=";
  if (spec.rfind(prefix, 0) != 0) fail("--cluster '" + spec + "': expected hosts=N");
  try {
    size_t used = 0;
    int n = std::stoi(spec.substr(prefix.size()), &used);
    if (n >= 1 && used == spec.size() - prefix.size()) return n;
  } catch (const std::exception&) {
  }
  fail("--cluster '" + spec + "': expected hosts=N with N a positive integer");
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) fail(path + ": could not write");
}

// A source flag with an empty value must not fall back silently to the live machine.
void check_sources(const ProbeOptions& o) {
  if (o.has_synthetic && o.synthetic.empty()) {
    fail("--synthetic: empty description; expected e.g. \"pack:2 numa:2 core:4 pu:2\"");
  }
  if (o.has_hwloc_xml && o.hwloc_xml.empty()) fail("--hwloc-xml: empty file name");
  if (o.has_from_json && o.from_json.empty()) fail("--from-json: empty file name");
  if (o.has_synthetic + o.has_hwloc_xml + o.has_from_json > 1) {
    fail("--synthetic, --hwloc-xml and --from-json are alternatives: give one");
  }
}

// Started by a launcher with several ranks (one per host): the network between them, through the
// launcher's store. Nothing when this process is the only rank. `out_rank` is this rank.
std::optional<topo::NetworkMeasurement> measure_across_hosts(topo::Topology& t,
                                                             const topo::MeasureOptions& options,
                                                             int& out_rank) {
  auto launch = coll::detect_launch();
  if (!launch.ok()) fail(launch.status().message());
  out_rank = launch->rank;
  if (launch->size < 2) return std::nullopt;
  auto bootstrap = coll::Bootstrap::from_environment();
  topo::PeerGroup group{launch->rank, launch->size, nullptr};
  if (bootstrap.ok()) {
    group.allgather = [b = *bootstrap](const std::string& name, const std::string& mine) {
      return b->allgather(name, mine);
    };
  }
  auto measured = bootstrap.ok() ? topo::measure_network(t, group, options)
                                 : Result<topo::NetworkMeasurement>(bootstrap.status());
  if (!measured.ok()) {
    std::fprintf(stderr, "tessera probe: rank %d: network measurement failed: %s\n", launch->rank,
                 measured.status().message().c_str());
    throw CLI::RuntimeError(1);
  }
  return std::move(*measured);
}

void run(const ProbeOptions& o) {
  check_sources(o);
  if (!o.preset.empty()) {
    auto cluster = topo::cluster_preset(o.preset);
    if (!cluster.ok()) fail(cluster.status().message());
    std::cout << topo::cluster_to_json(*cluster);
    return;
  }
  std::shared_ptr<hal::Platform> platform;
  Result<topo::Topology> probed = topo::Topology{};
  if (o.has_from_json) {
    probed = topo::load_json_file(o.from_json);
  } else {
    topo::DiscoverOptions options;
    if (o.has_hwloc_xml) options.hwloc = {topo::HwlocSource::Kind::kXmlFile, o.hwloc_xml};
    if (o.has_synthetic) options.hwloc = {topo::HwlocSource::Kind::kSynthetic, o.synthetic};
    options.ucx = !o.no_ucx;
    if (!o.backends.empty()) options.platform.registry.selection = o.backends;
    probed = topo::discover(options, &platform);
  }
  if (!probed.ok()) fail(probed.status().message());
  topo::Topology& t = *probed;
  topo::MeasureReport report;
  std::optional<topo::NetworkMeasurement> network;
  int rank = 0;
  if (o.measure) {
    if (t.host.source != "live") fail("--measure needs the live machine, not " + t.host.source);
    topo::MeasureOptions measure_options;
    report = topo::measure(t, platform.get(), measure_options);
    network = measure_across_hosts(t, measure_options, rank);
  }
  if (rank != 0) return;  // rank 0 speaks for the job, as nccl-tests do
  if (!o.dot.empty()) write_file(o.dot, topo::dot_text(t));
  if (!o.cluster.empty()) {
    auto cluster = topo::cluster_from_topology(t, parse_hosts(o.cluster),
                                               t.host.hostname + "-x" + o.cluster.substr(6));
    if (o.json) {
      std::cout << topo::cluster_to_json(cluster);
    } else {
      std::cout << "Cluster " << printable(cluster.name) << ": " << cluster.host_count()
                << " hosts, " << cluster.accelerator_count() << " accelerators, "
                << cluster.network.nics_per_host << " x " << cluster.network.link
                << " NICs per host at " << cluster.network.bandwidth_gbps_per_nic << " GB/s ("
                << cluster.network.source << "); --json for the spec\n";
    }
    return;
  }
  if (o.json) {
    std::cout << (network ? topo::network_json(*network, t) : topo::to_json(t));
  } else {
    std::cout << topo::summary_text(t) << "\n" << topo::matrix_text(t);
    if (o.measure) {
      std::cout << "\nMeasured in " << report.seconds << " s (declared figures kept in --json):\n"
                << "  reference: plain single-thread memcpy " << report.reference_memcpy_gbps
                << " GB/s\n";
      for (const auto& n : t.numa_nodes) {
        if (!n.measured_memory_bandwidth_gbps) continue;
        std::cout << "  numa:" << n.os_index
                  << " memory copy: " << *n.measured_memory_bandwidth_gbps << " GB/s ("
                  << 100.0 * *n.measured_memory_bandwidth_gbps / report.reference_memcpy_gbps
                  << "% of the reference)\n";
      }
      for (const auto& l : t.links) {
        if (!l.measured_bandwidth_gbps) continue;
        std::cout << "  " << printable(l.a) << " -> " << printable(l.b) << ": "
                  << *l.measured_bandwidth_gbps << " GB/s (declared " << l.bandwidth_gbps << ", "
                  << l.bandwidth_source << "), " << l.measured_latency_us.value_or(0) << " us\n";
      }
      if (network) std::cout << "\n" << topo::network_text(*network);
    }
  }
  for (const auto& note : report.notes) {
    // The loopback pass skips network transports; across hosts they were measured after all.
    if (network && note.find(": network transport") != std::string::npos) continue;
    std::cerr << "tessera probe: not measured: " << note << "\n";
  }
  if (!o.dot.empty()) std::cerr << "tessera probe: wrote " << o.dot << "\n";
}

}  // namespace

void add_probe_command(CLI::App& app) {
  auto o = std::make_shared<ProbeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "probe", "Describe this host's topology: NUMA, PCI, accelerators, NICs, UCX and links");
  cmd->add_flag("--json", o->json, "Print the topology (or cluster spec) as JSON");
  cmd->add_option("--dot", o->dot, "Write a Graphviz graph to FILE");
  cmd->add_flag("--measure", o->measure,
                "Measure host memory, host<->device, device<->device and UCX loopback bandwidth; "
                "under a launcher with one rank per host, also the network between the hosts");
  CLI::Option* xml =
      cmd->add_option("--hwloc-xml", o->hwloc_xml, "Read the host from an hwloc XML file");
  CLI::Option* synthetic = cmd->add_option(
      "--synthetic", o->synthetic, "Use an hwloc synthetic description (at most 16384 objects)");
  CLI::Option* from_json =
      cmd->add_option("--from-json", o->from_json, "Replay a topology JSON written by --json");
  cmd->add_option("--cluster", o->cluster, "Turn the probe into a cluster spec: hosts=N");
  cmd->add_option("--preset", o->preset,
                  "Print a preset cluster spec (dgx-a100-80gb, dgx-h100, ascend-910b-8, mi250x-8)");
  cmd->add_flag("--no-ucx", o->no_ucx, "Do not probe UCX");
  cmd->add_option("--backends", o->backends,
                  "Comma-separated backends to load (default: $TESSERA_BACKENDS, else all)");
  cmd->callback([o, xml, synthetic, from_json] {
    o->has_hwloc_xml = xml->count() > 0;
    o->has_synthetic = synthetic->count() > 0;
    o->has_from_json = from_json->count() > 0;
    run(*o);
  });
}

}  // namespace tessera::tools
