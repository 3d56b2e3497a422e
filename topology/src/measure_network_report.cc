// The network measurement's forms: what ranks exchange (measure_network_wire.h), the table and the
// JSON document `tessera probe --measure` prints (measure_network.h).
#include <cstdio>
#include <sstream>

#include "json_reader.h"
#include "measure_network_wire.h"
#include "tessera/common/untrusted.h"
#include "tessera/topo/json.h"

namespace tessera::topo {

using detail::Json;

namespace {

Json link_to_json(const NetworkLink& l) {
  double fraction =
      l.declared_bandwidth_gbps > 0 ? l.bandwidth_gbps / l.declared_bandwidth_gbps : 0;
  return Json{{"from_rank", l.from_rank},
              {"to_rank", l.to_rank},
              {"from_host", l.from_host},
              {"to_host", l.to_host},
              {"transport", l.transport},
              {"declared_bandwidth_gbps", l.declared_bandwidth_gbps},
              {"declared_latency_us", l.declared_latency_us},
              {"measured_bandwidth_gbps", l.bandwidth_gbps},
              {"fraction_of_declared", l.declared_bandwidth_gbps > 0 ? Json(fraction) : Json()},
              {"measured_latency_us", l.latency_us},
              {"message_bytes", l.message_bytes},
              {"samples_gbps", l.samples_gbps}};
}

}  // namespace

std::string encode_links(const std::vector<NetworkLink>& links) {
  Json out = Json::array();
  for (const auto& l : links) out.push_back(link_to_json(l));
  return out.dump();
}

Result<std::vector<NetworkLink>> decode_links(const std::string& text) {
  std::vector<NetworkLink> links;
  if (text.empty()) return links;
  detail::JsonReader r("network measurement from a peer");
  Json j;
  const Json* items = nullptr;
  Json root{{"links", nullptr}};
  if (!r.parse(text, j)) return r.status();
  root["links"] = std::move(j);
  if (!r.array(root, "", "links", items)) return r.status();
  for (size_t i = 0; i < items->size(); ++i) {
    const Json& e = (*items)[i];
    std::string p = detail::JsonReader::index("links", i);
    NetworkLink l;
    uint64_t bytes = 0;
    r.get(e, p, "from_rank", l.from_rank);
    r.get(e, p, "to_rank", l.to_rank);
    r.get(e, p, "from_host", l.from_host);
    r.get(e, p, "to_host", l.to_host);
    r.get(e, p, "transport", l.transport);
    r.get(e, p, "declared_bandwidth_gbps", l.declared_bandwidth_gbps);
    r.get(e, p, "declared_latency_us", l.declared_latency_us);
    r.get(e, p, "measured_bandwidth_gbps", l.bandwidth_gbps);
    r.get(e, p, "measured_latency_us", l.latency_us);
    r.get(e, p, "message_bytes", bytes);
    const Json* samples = nullptr;
    if (r.array(e, p, "samples_gbps", samples)) {
      for (const auto& s : *samples) {
        if (r.check(s.is_number(), p + ".samples_gbps", "numbers")) l.samples_gbps.push_back(s);
      }
    }
    if (!r.ok()) return r.status();
    l.message_bytes = bytes;
    links.push_back(l);
  }
  return links;
}

std::string network_text(const NetworkMeasurement& m) {
  std::ostringstream out;
  out << "Network between " << m.hosts.size() << " hosts, measured in " << m.seconds
      << " s (UCX tag messages; bandwidth the median of the timed messages, latency half a "
         "round trip):\n";
  char line[512];
  for (const auto& l : m.links) {
    std::string declared = "declared unknown";
    if (l.declared_bandwidth_gbps > 0) {
      std::snprintf(line, sizeof line, "declared %.3f GB/s, %.0f%%", l.declared_bandwidth_gbps,
                    100 * l.bandwidth_gbps / l.declared_bandwidth_gbps);
      declared = line;
    }
    std::snprintf(line, sizeof line,
                  "  %s -> %s over %s: %.4f GB/s (%.0f Mbit/s; %s), %.1f us (declared %.1f), %zu "
                  "MiB x %zu\n",
                  printable(l.from_host).c_str(), printable(l.to_host).c_str(),
                  l.transport.empty() ? "?" : printable(l.transport).c_str(), l.bandwidth_gbps,
                  l.bandwidth_gbps * 8e3, declared.c_str(), l.latency_us, l.declared_latency_us,
                  l.message_bytes >> 20, l.samples_gbps.size());
    out << line;
  }
  return out.str();
}

std::string network_json(const NetworkMeasurement& m, const Topology& topo) {
  Json links = Json::array();
  for (const auto& l : m.links) links.push_back(link_to_json(l));
  Json doc{{"version", 1},
           {"hosts", m.hosts},
           {"seconds", m.seconds},
           {"network_links", links},
           {"topology", detail::topology_to_json(topo)}};
  return doc.dump(2) + "\n";
}

}  // namespace tessera::topo
