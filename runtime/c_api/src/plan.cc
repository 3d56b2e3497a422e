// tessera_plan: model + cluster + workload -> the fastest plan that fits, as JSON (the fields of
// `tessera plan --json`, for the best plan only).
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "internal.h"
#include "tessera/ir/loaders.h"
#include "tessera/plan/search.h"

namespace tessera::capi {
namespace {

using Json = nlohmann::ordered_json;
constexpr double kGiB = 1073741824.0;

// A preset, a file, or the JSON itself: a layer list when it has "layers", else a config.json.
Result<ir::Model> load_model(std::string_view model) {
  if (model.empty() || model.front() != '{') return ir::load_model(model);
  const Json parsed = Json::parse(model, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return invalid_argument("request->model: malformed JSON text");
  if (parsed.contains("layers")) return ir::model_from_layer_list(model, "request->model");
  return ir::model_from_hf_config(model, "request->model");
}

Json plan_json(const ir::Model& model, const plan::ClusterSpec& cluster,
               const plan::Workload& workload, const plan::Estimate& e) {
  const plan::Plan& p = e.plan;
  const plan::TimeBreakdown& t = e.time;
  return {{"model",
           {{"name", model.name},
            {"params", ir::model_params(model)},
            {"layers", model.num_blocks},
            {"hidden", model.hidden},
            {"heads", model.heads}}},
          {"cluster",
           {{"name", cluster.name},
            {"hosts", cluster.hosts},
            {"devices_per_host", cluster.devices_per_host},
            {"device", cluster.device.name}}},
          {"workload",
           {{"global_batch", workload.global_batch},
            {"seq_len", workload.seq_len},
            {"dtype", plan::dtype_name(workload.dtype)}}},
          {"summary", plan::plan_summary(p)},
          {"plan",
           {{"tp", p.tp},
            {"pp", p.pp},
            {"dp", p.dp},
            {"cp", p.cp},
            {"ep", p.ep},
            {"vp", p.vp},
            {"mbs", p.mbs},
            {"num_microbatches", p.num_microbatches},
            {"zero", p.zero},
            {"recompute", plan::recompute_name(p.recompute)},
            {"sp", p.sp ? 1 : 0},
            {"stage_layers", p.stage_blocks}}},
          {"estimate",
           {{"step_time_s", e.step_time_s},
            {"tokens_per_s", e.tokens_per_s},
            {"mfu", e.mfu},
            {"memory_gib_per_device", e.memory.total() / kGiB},
            {"breakdown",
             {{"compute_s", t.compute_s},
              {"bubble_s", t.bubble_s},
              {"tp_comm_s", t.tp_comm_s},
              {"pp_comm_s", t.pp_comm_s},
              {"dp_comm_s", t.dp_comm_s},
              {"cp_comm_s", t.cp_comm_s},
              {"ep_comm_s", t.ep_comm_s},
              {"optimizer_s", t.optimizer_s}}}}}};
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
  const std::string text = plan_json(model, cluster, workload, result.plans.front()).dump(2);
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
