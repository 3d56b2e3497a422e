#include "tessera/plan/report_json.h"

#include <nlohmann/json.hpp>

#include "tessera/ir/model.h"

namespace tessera::plan {
namespace {

using Json = nlohmann::ordered_json;
constexpr double kGiB = 1073741824.0;

Json estimate_json(const Estimate& e) {
  const Plan& p = e.plan;
  const TimeBreakdown& t = e.time;
  const MemoryBreakdown& m = e.memory;
  return {{"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"cp", p.cp},
          {"ep", p.ep},
          {"vp", p.vp},
          {"mbs", p.mbs},
          {"num_microbatches", p.num_microbatches},
          {"zero", p.zero},
          {"recompute", recompute_name(p.recompute)},
          {"sp", p.sp ? 1 : 0},
          {"stage_layers", p.stage_blocks},
          {"summary", plan_summary(p)},
          {"step_time_s", e.step_time_s},
          {"tokens_per_s", e.tokens_per_s},
          {"model_tflops_per_device", e.model_tflops_per_device},
          {"hardware_tflops_per_device", e.hardware_tflops_per_device},
          {"mfu", e.mfu},
          {"memory_gib_per_device", m.total() / kGiB},
          {"breakdown",
           {{"compute_s", t.compute_s},
            {"bubble_s", t.bubble_s},
            {"tp_comm_s", t.tp_comm_s},
            {"pp_comm_s", t.pp_comm_s},
            {"dp_comm_s", t.dp_comm_s},
            {"cp_comm_s", t.cp_comm_s},
            {"ep_comm_s", t.ep_comm_s},
            {"optimizer_s", t.optimizer_s},
            {"memory_bound_s", t.memory_bound_s},
            {"launch_s", t.launch_s},
            {"grad_clip_s", t.grad_clip_s},
            {"embedding_sync_s", t.embedding_sync_s}}},
          {"memory_breakdown_gib",
           {{"weights", m.weights / kGiB},
            {"gradients", m.gradients / kGiB},
            {"optimizer", m.optimizer / kGiB},
            {"activations", m.activations / kGiB},
            {"transient", m.transient / kGiB}}}};
}

}  // namespace

std::string search_report_json(const ir::Model& model, const ClusterSpec& cluster,
                               const Workload& workload, const SearchResult& result, int indent) {
  Json plans = Json::array();
  for (const Estimate& e : result.plans) plans.push_back(estimate_json(e));
  const Json out = {{"model",
                     {{"name", model.name},
                      {"params", ir::model_params(model)},
                      {"active_params", ir::model_active_params(model)},
                      {"layers", model.num_blocks},
                      {"hidden", model.hidden},
                      {"heads", model.heads},
                      {"kv_heads", model.kv_heads},
                      {"vocab", model.vocab},
                      {"experts", model.experts},
                      {"notes", model.notes}}},
                    {"cluster",
                     {{"name", cluster.name},
                      {"hosts", cluster.hosts},
                      {"devices_per_host", cluster.devices_per_host},
                      {"device", cluster.device.name},
                      {"memory_gib", cluster.device.memory_gib}}},
                    {"workload",
                     {{"global_batch", workload.global_batch},
                      {"seq_len", workload.seq_len},
                      {"dtype", dtype_name(workload.dtype)}}},
                    {"plans", plans},
                    {"search",
                     {{"candidates", result.candidates},
                      {"evaluated", result.evaluated},
                      {"feasible", result.feasible},
                      {"elapsed_ms", result.elapsed_ms}}}};
  return out.dump(indent);
}

}  // namespace tessera::plan
