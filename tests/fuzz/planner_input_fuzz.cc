// The planner's inputs (runtime/planner): the compact cluster JSON and the topology layer's
// cluster form it converts (`tessera plan --cluster FILE`), calibration files, phase files
// (`tessera plan --phases`) and `--fix` strings. Accepted clusters must pass validate_cluster
// for the dtypes they declare; nothing may crash, overflow or throw.
#include "fuzz_target.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/cluster.h"
#include "tessera/plan/replan.h"
#include "tessera/plan/search.h"
#ifdef TESSERA_FUZZ_HAVE_TOPOLOGY
#include "tessera/plan/topology_cluster.h"
#endif

TESSERA_FUZZ_TARGET(planner_input) {
  namespace plan = tessera::plan;
  const std::string_view text = tessera::fuzz::as_text(data, size);
  (void)plan::cluster_from_json(text, "cluster.json");
#ifdef TESSERA_FUZZ_HAVE_TOPOLOGY
  (void)plan::cluster_from_topology_json(text, "cluster.json");
#endif
  (void)plan::calibration_from_json(text, "calibration.json");
  double overhead = 0;
  (void)plan::parse_phases(text, "phases.json", plan::Dtype::kBf16, &overhead);
  plan::SearchConstraints constraints;
  (void)plan::parse_fixes(text, &constraints);
  return 0;
}
