// tessera._tessera: the compiled half of the Python API (python/README.md). The documents of
// `tessera probe --json`, `tessera plan --json` and `tessera devices --json` come from the same
// library functions as the CLI's, as JSON text (python/tessera/__init__.py parses them); the
// checkpointer (checkpoint.cc) and the codecs' host steps (codecs.cc) are bound beside them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "errors.h"
#include "tessera/hal/platform.h"
#include "tessera/plan/request.h"
#include "tessera/topo/cluster.h"
#include "tessera/topo/discover.h"
#include "tessera/topo/json.h"
#include "tessera/topo/platform_json.h"

namespace py = pybind11;

namespace tessera::python {

void bind_checkpoint(py::module_& m);
void bind_codecs(py::module_& m);

namespace {

using OptString = std::optional<std::string>;

// The source flags of `tessera probe`, with its checks and messages.
Status check_probe_sources(const OptString& hwloc_xml, const OptString& synthetic,
                           const OptString& from_json) {
  if (synthetic && synthetic->empty()) {
    return invalid_argument(
        "--synthetic: empty description; expected e.g. \"pack:2 numa:2 core:4 pu:2\"");
  }
  if (hwloc_xml && hwloc_xml->empty()) return invalid_argument("--hwloc-xml: empty file name");
  if (from_json && from_json->empty()) return invalid_argument("--from-json: empty file name");
  if (int(hwloc_xml.has_value()) + int(synthetic.has_value()) + int(from_json.has_value()) > 1) {
    return invalid_argument("--synthetic, --hwloc-xml and --from-json are alternatives: give one");
  }
  return Status();
}

// `tessera probe --json [--preset P | --from-json F | --hwloc-xml F | --synthetic D] [--no-ucx]
// [--backends B]`.
Result<std::string> probe_unlocked(const OptString& preset, const OptString& hwloc_xml,
                                   const OptString& synthetic, const OptString& from_json,
                                   bool no_ucx, const OptString& backends) {
  if (preset && !preset->empty()) {
    TSR_ASSIGN_OR_RETURN(const topo::ClusterSpec cluster, topo::cluster_preset(*preset));
    return topo::cluster_to_json(cluster);
  }
  Result<topo::Topology> probed = topo::Topology{};
  if (from_json) {
    probed = topo::load_json_file(*from_json);
  } else {
    topo::DiscoverOptions options;
    if (hwloc_xml) options.hwloc = {topo::HwlocSource::Kind::kXmlFile, *hwloc_xml};
    if (synthetic) options.hwloc = {topo::HwlocSource::Kind::kSynthetic, *synthetic};
    options.ucx = !no_ucx;
    if (backends && !backends->empty()) options.platform.registry.selection = *backends;
    probed = topo::discover(options);
  }
  if (!probed.ok()) return probed.status();
  return topo::to_json(*probed);
}

// `tessera probe --json [--preset P | --from-json F | --hwloc-xml F | --synthetic D] [--no-ucx]
// [--backends B]`. The work runs without the GIL; errors are raised once it is held again.
std::string probe(const OptString& preset, const OptString& hwloc_xml, const OptString& synthetic,
                  const OptString& from_json, bool no_ucx, const OptString& backends) {
  check(check_probe_sources(hwloc_xml, synthetic, from_json));
  Result<std::string> json = std::string();
  {
    py::gil_scoped_release unlocked;
    json = probe_unlocked(preset, hwloc_xml, synthetic, from_json, no_ucx, backends);
  }
  return value_or_raise(std::move(json));
}

std::string devices(const OptString& backends) {
  Result<std::string> json = std::string();
  {
    py::gil_scoped_release unlocked;
    hal::PlatformOptions options;
    if (backends && !backends->empty()) options.registry.selection = *backends;
    auto platform = hal::Platform::create(options);
    json = platform.ok() ? Result<std::string>(topo::platform_json(**platform))
                         : Result<std::string>(platform.status());
  }
  return value_or_raise(std::move(json));
}

std::string plan(const plan::PlanRequest& request) {
  Result<std::string> json = std::string();
  {
    py::gil_scoped_release unlocked;
    auto run = plan::run_plan_request(request);
    json = run.ok() ? Result<std::string>(plan::plan_run_json(*run))
                    : Result<std::string>(run.status());
  }
  return value_or_raise(std::move(json));
}

}  // namespace
}  // namespace tessera::python

PYBIND11_MODULE(_tessera, m) {
  using namespace tessera::python;
  m.doc() = "Tessera's compiled API; use the `tessera` package (python/README.md).";
  register_errors(m);
  m.def("probe_json", &probe, py::arg("preset") = py::none(), py::arg("hwloc_xml") = py::none(),
        py::arg("synthetic") = py::none(), py::arg("from_json") = py::none(),
        py::arg("no_ucx") = false, py::arg("backends") = py::none(),
        "The document of `tessera probe --json` (text).");
  m.def("devices_json", &devices, py::arg("backends") = py::none(),
        "The document of `tessera devices --json` (text).");
  m.def(
      "plan_json",
      [](std::string model, std::string cluster, std::string devices, std::string global_batch,
         std::string seq_len, std::string dtype, std::string fix, std::string top,
         std::string phases, std::string attention, std::string calibration) {
        return plan(tessera::plan::PlanRequest{.model = std::move(model),
                                               .cluster = std::move(cluster),
                                               .devices = std::move(devices),
                                               .global_batch = std::move(global_batch),
                                               .seq_len = std::move(seq_len),
                                               .dtype = std::move(dtype),
                                               .fix = std::move(fix),
                                               .top = std::move(top),
                                               .phases = std::move(phases),
                                               .attention = std::move(attention),
                                               .calibration = std::move(calibration)});
      },
      py::arg("model"), py::arg("cluster"), py::arg("devices"), py::arg("global_batch"),
      py::arg("seq_len"), py::arg("dtype"), py::arg("fix"), py::arg("top"), py::arg("phases"),
      py::arg("attention"), py::arg("calibration"),
      "The document of `tessera plan --json` (text); the flags as text, '' for not given.");
  bind_checkpoint(m);
  bind_codecs(m);
}
