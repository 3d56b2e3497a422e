#include "layout.h"

#include <climits>

#include <nlohmann/json.hpp>

#include "tessera/common/env.h"
#include "tessera/plan/groups.h"

namespace tessera::trainer {

std::string plan_text(const TrainPlan& plan) {
  std::string s = "tp=" + std::to_string(plan.tp) + " pp=" + std::to_string(plan.pp) +
                  " dp=" + std::to_string(plan.dp) + " zero=" + std::to_string(plan.zero) +
                  " mbs=" + (plan.mbs > 0 ? std::to_string(plan.mbs) : std::string("all"));
  if (!plan.stage_blocks.empty()) {
    s += " stages=";
    for (size_t i = 0; i < plan.stage_blocks.size(); ++i) {
      s += (i ? "+" : "") + std::to_string(plan.stage_blocks[i]);
    }
  }
  if (plan.vp > 1) s += " vp=" + std::to_string(plan.vp);
  if (plan.sp) s += " sp=1";
  return s;
}

namespace {

// tp*pp*dp within kMaxPlanRanks (each degree is at most kMaxPlanDegree: no int64 overflow).
Status check_world(const TrainPlan& plan, const std::string& where) {
  const int64_t world = int64_t{plan.tp} * plan.pp * plan.dp;
  if (world > kMaxPlanRanks) {
    return invalid_argument(where + ": tp*pp*dp = " + std::to_string(world) + " ranks, more than " +
                            std::to_string(kMaxPlanRanks));
  }
  return Status();
}

// A JSON integer in [lo, hi] (lo >= 0), else an error naming `what` and the value.
Result<int> bounded_int(const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return invalid_argument(what + " is not an integer");
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= uint64_t(hi) && int64_t(v.get<uint64_t>()) >= lo
                        : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!fits) {
    return invalid_argument(what + " = " + v.dump() + " is not in " + std::to_string(lo) + ".." +
                            std::to_string(hi));
  }
  return static_cast<int>(v.get<int64_t>());
}

}  // namespace

Result<TrainPlan> parse_plan(std::string_view text) {
  TrainPlan plan;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of(", ", start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return invalid_argument("plan '" + std::string(text) + "': '" + std::string(item) +
                              "' is not key=value");
    }
    const std::string k(item.substr(0, eq)), v(item.substr(eq + 1));
    if (k == "stages") {
      plan.stage_blocks.clear();
      size_t s = 0;
      while (s <= v.size()) {
        size_t e = v.find('+', s);
        if (e == std::string::npos) e = v.size();
        auto n = env::parse_int(v.substr(s, e - s));
        if (!n.ok() || *n < 1 || *n > kMaxPlanDegree) {
          return invalid_argument("plan: stages '" + v + "' malformed (counts in 1.." +
                                  std::to_string(kMaxPlanDegree) + ")");
        }
        plan.stage_blocks.push_back(int(*n));
        s = e + 1;
      }
      continue;
    }
    auto n = env::parse_int(v);
    if (!n.ok() || *n < 0) {
      return invalid_argument("plan: " + k + "='" + v + "' is not a non-negative integer");
    }
    if (k != "tp" && k != "pp" && k != "dp" && k != "zero" && k != "mbs" && k != "vp" &&
        k != "sp") {
      return invalid_argument("plan: unknown key '" + k +
                              "' (tp, pp, dp, zero, mbs, stages, vp, sp)");
    }
    // Degrees at least 1 (0 is refused here, not later as an empty job); zero, mbs, sp from 0.
    const int64_t min = k == "zero" || k == "mbs" || k == "sp" ? 0 : 1;
    const int64_t max = k == "zero" ? 3 : k == "sp" ? 1 : k == "mbs" ? INT_MAX : kMaxPlanDegree;
    if (*n < min || *n > max) {
      return invalid_argument("plan: " + k + "=" + v + " is not in " + std::to_string(min) + ".." +
                              std::to_string(max));
    }
    if (k == "tp") {
      plan.tp = int(*n);
    } else if (k == "pp") {
      plan.pp = int(*n);
    } else if (k == "dp") {
      plan.dp = int(*n);
    } else if (k == "zero") {
      plan.zero = int(*n);
    } else if (k == "vp") {
      plan.vp = int(*n);
    } else if (k == "sp") {
      plan.sp = *n == 1;
    } else {
      plan.mbs = *n;
    }
  }
  TSR_RETURN_IF_ERROR(check_world(plan, "plan '" + std::string(text) + "'"));
  return plan;
}

Result<TrainPlan> plan_from_json(std::string_view json_text, std::string_view source) {
  const std::string where(source);
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(where + ": not valid JSON");
  if (j.contains("plans")) {
    if (!j["plans"].is_array() || j["plans"].empty()) {
      return invalid_argument(where + ": 'plans' is empty");
    }
    j = j["plans"][0];
  }
  if (!j.is_object()) return invalid_argument(where + ": expected an object with tp, pp, dp");
  plan::Plan p;
  // An integer field in [lo, hi]: a value from a file is refused, never truncated into an int.
  auto get = [&](const char* k, int64_t lo, int64_t hi, int* out) -> Status {
    if (!j.contains(k)) return Status();
    TSR_ASSIGN_OR_RETURN(*out, bounded_int(j[k], where + ": field '" + k + "'", lo, hi));
    return Status();
  };
  TSR_RETURN_IF_ERROR(get("tp", 1, kMaxPlanDegree, &p.tp));
  TSR_RETURN_IF_ERROR(get("pp", 1, kMaxPlanDegree, &p.pp));
  TSR_RETURN_IF_ERROR(get("dp", 1, kMaxPlanDegree, &p.dp));
  TSR_RETURN_IF_ERROR(get("cp", 1, kMaxPlanDegree, &p.cp));
  TSR_RETURN_IF_ERROR(get("ep", 1, kMaxPlanDegree, &p.ep));
  TSR_RETURN_IF_ERROR(get("vp", 1, kMaxPlanDegree, &p.vp));
  TSR_RETURN_IF_ERROR(get("mbs", 0, INT_MAX, &p.mbs));
  TSR_RETURN_IF_ERROR(get("zero", 0, 3, &p.zero));
  if (j.contains("sp")) {  // the planner writes 0/1; a JSON bool is accepted, anything else refused
    if (j["sp"].is_boolean()) {
      p.sp = j["sp"].get<bool>();
    } else {
      TSR_ASSIGN_OR_RETURN(const int sp, bounded_int(j["sp"], where + ": field 'sp'", 0, 1));
      p.sp = sp == 1;
    }
  }
  if (j.contains("stage_layers") && j["stage_layers"].is_array()) {
    for (const auto& v : j["stage_layers"]) {
      TSR_ASSIGN_OR_RETURN(const int blocks,
                           bounded_int(v, where + ": stage_layers entry", 1, kMaxPlanDegree));
      p.stage_blocks.push_back(blocks);
    }
  }
  auto out = plan_from_planner(p);
  if (!out.ok()) return out.status().with_context(where);
  TSR_RETURN_IF_ERROR(check_world(*out, where));
  return out;
}

plan::SearchConstraints trainer_search_constraints(int top) {
  plan::SearchConstraints c;
  c.cp = 1;
  c.ep = 1;
  c.vp = 1;
  c.sp = false;
  c.zero = 0;
  c.recompute = plan::Recompute::kNone;
  c.top = top;
  return c;
}

void fit_trainer_microbatches(TrainPlan* p, int64_t batch, int64_t blocks, bool even_stages) {
  int64_t sum = 0;
  for (int b : p->stage_blocks) sum += b;
  if (sum != blocks || p->pp == 1 || even_stages) p->stage_blocks.clear();
  const int64_t local = batch / p->dp;
  p->mbs = 0;
  if (p->pp > 1 && local % (2 * p->pp) == 0) p->mbs = local / (2 * p->pp);
}

Result<TrainPlan> plan_from_planner(const plan::Plan& p) {
  if (p.cp != 1 || p.ep != 1) {
    return invalid_argument("plan " + plan::plan_summary(p) +
                            ": the trainers run cp=1 ep=1 only (tessera-gpt-train takes --ep)");
  }
  TrainPlan t;
  t.tp = p.tp;
  t.pp = p.pp;
  t.dp = p.dp;
  t.vp = p.vp;
  t.sp = p.sp;
  t.zero = p.zero;  // as planned: the MLP trainer refuses 2 and 3 by name, never runs them as 1
  t.mbs = p.mbs;
  t.stage_blocks = p.stage_blocks;
  return t;
}

plan::Plan to_planner_plan(const TrainPlan& t, int64_t global_batch) {
  plan::Plan p;
  p.tp = t.tp;
  p.pp = t.pp;
  p.dp = t.dp;
  p.zero = t.zero;
  p.vp = t.vp;
  p.sp = t.sp;
  const int64_t local = global_batch / std::max(1, t.dp);
  p.mbs = int(t.mbs > 0 ? t.mbs : local);
  p.num_microbatches = p.mbs > 0 ? local / p.mbs : 1;
  p.stage_blocks = t.stage_blocks;
  return p;
}

Status validate_plan(const TrainPlan& plan, const ModelSpec& spec, int64_t global_batch,
                     int world) {
  const std::string what = "plan " + plan_text(plan) + ": ";
  if (plan.tp < 1 || plan.pp < 1 || plan.dp < 1)
    return invalid_argument(what + "sizes must be >= 1");
  if (plan.world() != world) {
    return invalid_argument(what + "tp*pp*dp = " + std::to_string(plan.world()) +
                            " but the job has " + std::to_string(world) + " ranks");
  }
  if (plan.zero != 0 && plan.zero != 1) {
    return invalid_argument(what + "zero must be 0 or 1 for the MLP trainer (zero 2 and 3: the " +
                            "GPT trainer, --gpt-config)");
  }
  if (plan.vp != 1 || plan.sp) {
    return invalid_argument(what + "the MLP trainer runs vp=1 sp=0 only (the GPT trainer takes " +
                            "them: --gpt-config)");
  }
  if (spec.ffn_size() % plan.tp != 0) {
    return invalid_argument(what + "tp does not divide the ffn size " +
                            std::to_string(spec.ffn_size()));
  }
  if (plan.pp > spec.blocks) {
    return invalid_argument(what + "more stages than blocks (" + std::to_string(spec.blocks) + ")");
  }
  if (global_batch % plan.dp != 0) {
    return invalid_argument(what + "dp does not divide the global batch " +
                            std::to_string(global_batch));
  }
  const int64_t local = global_batch / plan.dp;
  if (plan.mbs > 0 && local % plan.mbs != 0) {
    return invalid_argument(what + "mbs does not divide the per-DP-rank batch " +
                            std::to_string(local));
  }
  if (!plan.stage_blocks.empty()) {
    int64_t sum = 0;
    for (int b : plan.stage_blocks) sum += b;
    if (int(plan.stage_blocks.size()) != plan.pp || sum != spec.blocks) {
      return invalid_argument(what + "stages must list pp counts summing to " +
                              std::to_string(spec.blocks) + " blocks");
    }
  }
  return Status();
}

int Layout::stage_of_block(int block) const {
  if (block < 0) return plan.pp - 1;
  for (int s = 0; s < plan.pp; ++s) {
    if (block < stage_first[size_t(s) + 1]) return s;
  }
  return plan.pp - 1;
}

Result<Layout> make_layout(const TrainPlan& plan, const ModelSpec& spec, int64_t global_batch,
                           int rank) {
  TSR_RETURN_IF_ERROR(validate_plan(plan, spec, global_batch, plan.world()));
  plan::Plan pp = to_planner_plan(plan, global_batch);
  TSR_ASSIGN_OR_RETURN(plan::ProcessGroups groups, plan::plan_groups(pp, plan.world()));
  if (rank < 0 || rank >= groups.world_size) {
    return invalid_argument("rank " + std::to_string(rank) + " outside the plan's " +
                            std::to_string(groups.world_size) + " ranks");
  }
  Layout l;
  l.plan = plan;
  l.rank = rank;
  const plan::RankCoord& c = groups.ranks[size_t(rank)];
  l.tp_index = c.tp;
  l.dp_index = c.dp;
  l.pp_index = c.pp;
  std::vector<int> blocks = plan.stage_blocks;
  if (blocks.empty()) {
    for (int s = 0; s < plan.pp; ++s) {
      blocks.push_back(int(spec.blocks / plan.pp + (s < spec.blocks % plan.pp ? 1 : 0)));
    }
  }
  l.stage_first.push_back(0);
  for (int b : blocks) l.stage_first.push_back(l.stage_first.back() + b);
  l.local_batch = global_batch / plan.dp;
  l.mbs = plan.mbs > 0 ? plan.mbs : l.local_batch;
  l.microbatches = l.local_batch / l.mbs;
  return l;
}

int64_t LocalParam::elements() const {
  int64_t n = 1;
  for (int64_t d : len) n *= d;
  return n;
}

LocalParam param_slice(const ParamInfo& info, int tp, int tp_index) {
  LocalParam p;
  p.info = info;
  p.offset.assign(info.shape.size(), 0);
  p.len = info.shape;
  int dim = -1;  // the dimension TP splits
  switch (info.kind) {
    case ParamKind::kW1: dim = 1; break;  // [h, f]: output features
    case ParamKind::kB1: dim = 0; break;  // [f]
    case ParamKind::kW2: dim = 0; break;  // [f, h]: input features
    default: break;
  }
  if (dim >= 0 && tp > 1) {
    p.tp_sharded = true;
    p.len[size_t(dim)] = info.shape[size_t(dim)] / tp;
    p.offset[size_t(dim)] = p.len[size_t(dim)] * tp_index;
  }
  return p;
}

std::vector<LocalParam> local_params(const Layout& layout, const ModelSpec& spec) {
  std::vector<LocalParam> out;
  for (const ParamInfo& info : model_params(spec)) {
    if (layout.stage_of_block(info.block) != layout.pp_index) continue;
    out.push_back(param_slice(info, layout.plan.tp, layout.tp_index));
  }
  return out;
}

}  // namespace tessera::trainer
