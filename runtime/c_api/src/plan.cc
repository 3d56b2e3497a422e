// tessera_plan: model + cluster + workload -> the fastest plan that fits, as JSON: what
// `tessera plan --json --top 1` prints (plan::search_report_json).
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "internal.h"
#include "tessera/ir/loaders.h"
#include "tessera/plan/report_json.h"
#include "tessera/plan/search.h"

namespace tessera::capi {
namespace {

using Json = nlohmann::ordered_json;

// A preset, a file, or the JSON itself: a layer list when it has "layers", else a config.json.
Result<ir::Model> load_model(std::string_view model) {
  if (model.empty() || model.front() != '{') return ir::load_model(model);
  const Json parsed = Json::parse(model, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return invalid_argument("request->model: malformed JSON text");
  if (parsed.contains("layers")) return ir::model_from_layer_list(model, "request->model");
  return ir::model_from_hf_config(model, "request->model");
}

Status run_plan(const tessera_plan_request* request, char** out_json) {
  TSR_RETURN_IF_ERROR(check_pointer(request, "request"));
  TSR_RETURN_IF_ERROR(check_pointer(out_json, "out_json"));
  TSR_RETURN_IF_ERROR(check_struct_size(
      request->struct_size, offsetof(tessera_plan_request, fix) + sizeof(request->fix), "request"));
  TSR_RETURN_IF_ERROR(check_pointer(request->model, "request->model"));
  TSR_RETURN_IF_ERROR(check_pointer(request->cluster, "request->cluster"));
  if (request->global_batch <= 0) {
    return invalid_argument("request->global_batch " + std::to_string(request->global_batch) +
                            " must be positive");
  }
  if (request->seq_len <= 0) {
    return invalid_argument("request->seq_len " + std::to_string(request->seq_len) +
                            " must be positive");
  }
  if (request->devices < 0) {
    return invalid_argument("request->devices " + std::to_string(request->devices) +
                            " is negative");
  }
  plan::Dtype dtype = plan::Dtype::kBf16;
  if (request->dtype != nullptr && std::strcmp(request->dtype, "fp16") == 0) {
    dtype = plan::Dtype::kFp16;
  } else if (request->dtype != nullptr && std::strcmp(request->dtype, "bf16") != 0) {
    return invalid_argument(std::string("request->dtype '") + request->dtype +
                            "' must be bf16 or fp16");
  }
  TSR_ASSIGN_OR_RETURN(const ir::Model model, load_model(request->model));
  TSR_ASSIGN_OR_RETURN(plan::ClusterSpec cluster, plan::load_cluster(request->cluster));
  if (request->devices > 0) {
    TSR_ASSIGN_OR_RETURN(cluster, plan::with_devices(cluster, request->devices));
  }
  plan::SearchConstraints constraints;
  if (request->fix != nullptr) {
    TSR_RETURN_IF_ERROR(plan::parse_fixes(request->fix, &constraints).with_context("request->fix"));
  }
  constraints.top = 1;
  const plan::Workload workload{request->global_batch, request->seq_len, dtype};
  TSR_ASSIGN_OR_RETURN(const plan::SearchResult result,
                       plan::search_plans(model, cluster, workload, constraints, {}));
  if (result.plans.empty()) return internal_error("the search returned no plan and no error");
  const std::string text = plan::search_report_json(model, cluster, workload, result);
  char* copy = static_cast<char*>(std::malloc(text.size() + 1));
  if (copy == nullptr) return resource_exhausted("out of memory for the plan JSON");
  std::memcpy(copy, text.c_str(), text.size() + 1);
  *out_json = copy;
  return Status();
}

}  // namespace
}  // namespace tessera::capi

extern "C" tessera_status tessera_plan(const tessera_plan_request* request, char** out_json) {
  return tessera::capi::guarded("tessera_plan",
                                [&] { return tessera::capi::run_plan(request, out_json); });
}
