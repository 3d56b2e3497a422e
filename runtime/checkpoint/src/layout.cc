#include "tessera/checkpoint/layout.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace tessera::ckpt {
namespace {

using Json = nlohmann::json;

// An integer field in [lo, hi]; read as int64 first so 4294967297 is refused, not wrapped to 1.
Status field_int(const Json& j, const char* field, const std::string& where, int lo, int* out,
                 bool required, int64_t hi = kMaxLayoutDegree) {
  if (!j.contains(field)) {
    if (!required) return Status();
    return invalid_argument(where + ": missing field '" + field + "'");
  }
  const Json& v = j[field];
  bool integer = v.is_number_integer();
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    // Above INT64_MAX get<int64_t>() would wrap: refuse it as out of range.
    integer = v.get<uint64_t>() <= uint64_t(hi);
    value = integer ? static_cast<int64_t>(v.get<uint64_t>()) : 0;
  } else if (integer) {
    value = v.get<int64_t>();
  }
  if (!integer || value < lo || value > hi) {
    return invalid_argument(where + ": field '" + field + "' must be an integer in " +
                            std::to_string(lo) + ".." + std::to_string(hi));
  }
  *out = static_cast<int>(value);
  return Status();
}

Status parse_placements(const Json& tensors, const std::string& where,
                        std::map<std::string, Placement>* out) {
  if (!tensors.is_object()) return invalid_argument(where + ": 'tensors' must be an object");
  for (const auto& [name, p] : tensors.items()) {
    const std::string w = where + ": tensors." + name;
    if (!p.is_object()) return invalid_argument(w + " must be an object");
    Placement pl;
    TSR_RETURN_IF_ERROR(field_int(p, "tp_dim", w, -1, &pl.tp_dim, false));
    TSR_RETURN_IF_ERROR(field_int(p, "zero_dim", w, -1, &pl.zero_dim, false));
    TSR_RETURN_IF_ERROR(field_int(p, "zero_stage", w, 1, &pl.zero_stage, false));
    TSR_RETURN_IF_ERROR(field_int(p, "layer", w, -1, &pl.layer, false));
    TSR_RETURN_IF_ERROR(field_int(p, "expert_dim", w, -1, &pl.expert_dim, false));
    if (pl.zero_stage > 3) return invalid_argument(w + ": zero_stage must be 1..3");
    if (out) (*out)[name] = pl;
  }
  return Status();
}

}  // namespace

Status check_layout_bounds(const ParallelLayout& l, std::string_view where) {
  const std::pair<const char*, int> degrees[] = {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp},
                                                 {"cp", l.cp}, {"ep", l.ep}, {"vp", l.vp}};
  for (const auto& [field, value] : degrees) {
    if (value < 1 || value > kMaxLayoutDegree) {
      return invalid_argument(std::string(where) + ": field '" + field + "' is " +
                              std::to_string(value) + ", must be in 1.." +
                              std::to_string(kMaxLayoutDegree));
    }
  }
  const int64_t ranks = int64_t(l.tp) * l.cp * l.dp * l.pp;  // each <= 2^20: no int64 overflow
  if (ranks > kMaxLayoutRanks) {
    return invalid_argument(std::string(where) + ": tp*cp*dp*pp is " + std::to_string(ranks) +
                            " ranks, above the limit of " + std::to_string(kMaxLayoutRanks));
  }
  if (l.zero < 0 || l.zero > 3) {
    return invalid_argument(std::string(where) + ": field 'zero' must be 0..3");
  }
  for (int layers : l.stage_layers) {
    if (layers < 0 || layers > kMaxLayoutDegree) {
      return invalid_argument(std::string(where) + ": 'stage_layers' entry " +
                              std::to_string(layers) + " is outside 0.." +
                              std::to_string(kMaxLayoutDegree));
    }
  }
  return Status();
}

std::string ParallelLayout::text() const {
  return "tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) + " dp=" + std::to_string(dp) +
         " zero=" + std::to_string(zero) + (cp > 1 ? " cp=" + std::to_string(cp) : "") +
         (ep > 1 ? " ep=" + std::to_string(ep) : "") + (vp > 1 ? " vp=" + std::to_string(vp) : "");
}

Result<ParallelLayout> parse_layout_json(std::string_view text, std::string_view where,
                                         int plan_index,
                                         std::map<std::string, Placement>* placements) {
  std::string w(where);
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return invalid_argument(w + ": not a JSON object");
  }
  const Json* plan = &root;
  if (root.contains("plans")) {
    const Json& plans = root["plans"];
    if (!plans.is_array() || plans.empty()) {
      return invalid_argument(w + ": 'plans' is empty (no plan fits?)");
    }
    if (plan_index < 0 || plan_index >= static_cast<int>(plans.size())) {
      return invalid_argument(w + ": plan index " + std::to_string(plan_index) +
                              " is outside 'plans' (" + std::to_string(plans.size()) + " plans)");
    }
    plan = &plans[plan_index];
    w += ": plans[" + std::to_string(plan_index) + "]";
    if (!plan->is_object()) return invalid_argument(w + " is not an object");
  }
  ParallelLayout l;
  TSR_RETURN_IF_ERROR(field_int(*plan, "tp", w, 1, &l.tp, true));
  TSR_RETURN_IF_ERROR(field_int(*plan, "pp", w, 1, &l.pp, true));
  TSR_RETURN_IF_ERROR(field_int(*plan, "dp", w, 1, &l.dp, true));
  TSR_RETURN_IF_ERROR(field_int(*plan, "zero", w, 0, &l.zero, true));
  if (l.zero > 3) return invalid_argument(w + ": field 'zero' must be 0..3");
  TSR_RETURN_IF_ERROR(field_int(*plan, "vp", w, 1, &l.vp, false));
  TSR_RETURN_IF_ERROR(field_int(*plan, "cp", w, 1, &l.cp, false));
  TSR_RETURN_IF_ERROR(field_int(*plan, "ep", w, 1, &l.ep, false));
  if (l.dp % l.ep != 0) {
    return invalid_argument(w + ": field 'ep' (" + std::to_string(l.ep) + ") must divide 'dp' (" +
                            std::to_string(l.dp) + ")");
  }
  if (plan->contains("stage_layers")) {
    const Json& s = (*plan)["stage_layers"];
    if (!s.is_array()) return invalid_argument(w + ": 'stage_layers' must be an array");
    for (const Json& v : s) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxLayoutDegree) {
        return invalid_argument(w + ": 'stage_layers' must hold integers in 0.." +
                                std::to_string(kMaxLayoutDegree));
      }
      l.stage_layers.push_back(static_cast<int>(v.get<int64_t>()));
    }
    if (!l.stage_layers.empty() && static_cast<int>(l.stage_layers.size()) != l.pp) {
      return invalid_argument(w + ": 'stage_layers' has " + std::to_string(l.stage_layers.size()) +
                              " stages, pp is " + std::to_string(l.pp));
    }
  }
  TSR_RETURN_IF_ERROR(check_layout_bounds(l, w));
  if (plan->contains("tensors")) {
    TSR_RETURN_IF_ERROR(parse_placements((*plan)["tensors"], w, placements));
  }
  if (plan != &root && root.contains("tensors")) {
    TSR_RETURN_IF_ERROR(parse_placements(root["tensors"], std::string(where), placements));
  }
  return l;
}

Result<std::optional<Slice>> layout_slice(const std::string& name,
                                          const std::vector<int64_t>& shape,
                                          const std::optional<Placement>& placement,
                                          const ParallelLayout& layout, int rank,
                                          bool* replicated) {
  TSR_RETURN_IF_ERROR(check_layout_bounds(layout, "layout " + layout.text()));
  if (rank < 0 || rank >= layout.size()) {
    return invalid_argument("rank " + std::to_string(rank) + " is outside " + layout.text());
  }
  if (layout.tp < 1 || layout.cp < 1 || layout.dp < 1 || layout.pp < 1 || layout.ep < 1 ||
      layout.dp % layout.ep != 0) {
    return invalid_argument("layout " + layout.text() +
                            ": degrees must be >= 1 and ep must divide dp");
  }
  const int tp_index = rank % layout.tp;
  const int cp_index = (rank / layout.tp) % layout.cp;
  const int dp_index = (rank / (layout.tp * layout.cp)) % layout.dp;
  const int pp_index = rank / (layout.tp * layout.cp * layout.dp);
  Slice s = full_slice(shape);
  if (!placement) {
    if (replicated) *replicated = layout.size() > 1;
    return std::optional<Slice>(s);
  }
  const Placement& p = *placement;
  const int nd = static_cast<int>(shape.size());
  if (p.tp_dim >= nd || p.zero_dim >= nd || p.expert_dim >= nd) {
    return invalid_argument("tensor '" + name + "': placement names dim " +
                            std::to_string(std::max({p.tp_dim, p.zero_dim, p.expert_dim})) +
                            " of a " + std::to_string(nd) + "-dim tensor");
  }
  bool split_pp = false, split_tp = false, split_ep = false, split_zero = false;
  if (layout.pp > 1 && p.layer >= 0) {
    if (layout.stage_layers.empty()) {
      return invalid_argument("tensor '" + name + "' belongs to layer " + std::to_string(p.layer) +
                              ": pp=" + std::to_string(layout.pp) +
                              " needs 'stage_layers' in the plan");
    }
    int stage = -1, first = 0;
    for (int k = 0; k < layout.pp; ++k) {
      if (p.layer < first + layout.stage_layers[k]) {
        stage = k;
        break;
      }
      first += layout.stage_layers[k];
    }
    if (stage >= 0 && layout.vp > 1) {
      // Interleaved: equal stages cut into vp chunks, chunk c on stage c % pp.
      const int chunk = layout.stage_layers[0] / layout.vp;
      for (int k : layout.stage_layers) {
        if (k != layout.stage_layers[0] || chunk == 0 || k % layout.vp != 0) {
          return invalid_argument("tensor '" + name + "': vp=" + std::to_string(layout.vp) +
                                  " needs equal stage_layers divisible by vp");
        }
      }
      stage = (p.layer / chunk) % layout.pp;
    }
    if (stage < 0) {
      return invalid_argument("tensor '" + name + "': layer " + std::to_string(p.layer) +
                              " is beyond the plan's " + std::to_string(first) + " layers");
    }
    if (stage != pp_index) return std::optional<Slice>();
    split_pp = true;
  }
  // Splits the current slice `s` along `dim` into `parts`, keeping part `index`.
  auto split = [&](int dim, int parts, int index, const std::string& degree) -> Status {
    if (parts == 1) return Status();
    if (s.len[dim] % parts != 0) {
      return invalid_argument("tensor '" + name + "': " + degree + "=" + std::to_string(parts) +
                              " does not divide dim " + std::to_string(dim) + " (extent " +
                              std::to_string(s.len[dim]) +
                              (s.len[dim] != shape[dim] ? " on this rank)" : ")"));
    }
    TSR_ASSIGN_OR_RETURN(s, split_slice(shape, s, dim, parts, index));
    return Status();
  };
  if (p.tp_dim >= 0) {
    TSR_RETURN_IF_ERROR(split(p.tp_dim, layout.tp, tp_index, "tp"));
    split_tp = true;
  }
  const bool expert = p.expert_dim >= 0;
  if (expert) {
    TSR_RETURN_IF_ERROR(split(p.expert_dim, layout.ep, dp_index % layout.ep, "ep"));
    split_ep = true;
  }
  // The ranks that reduce this tensor's gradients: dp x cp, or for experts dp / ep x cp.
  const int zero_group = (expert ? layout.dp / layout.ep : layout.dp) * layout.cp;
  const int zero_index = cp_index + layout.cp * (expert ? dp_index / layout.ep : dp_index);
  if (p.zero_dim >= 0 && layout.zero >= p.zero_stage) {
    const std::string degree = layout.cp > 1 || expert
                                   ? "ZeRO group (" + std::string(expert ? "dp/ep" : "dp") +
                                         (layout.cp > 1 ? " x cp" : "") + ")"
                                   : "dp";
    TSR_RETURN_IF_ERROR(split(p.zero_dim, zero_group, zero_index, degree));
    split_zero = true;
  }
  if (replicated) {
    // Ranks holding this same slice: every rank of its stage, less each split's parts.
    int64_t copies = split_pp ? int64_t(layout.size()) / layout.pp : layout.size();
    if (split_tp) copies /= layout.tp;
    if (split_ep) copies /= layout.ep;
    if (split_zero) copies /= zero_group;
    *replicated = copies > 1;
  }
  return std::optional<Slice>(s);
}

}  // namespace tessera::ckpt
