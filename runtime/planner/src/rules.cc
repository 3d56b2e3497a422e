// The rule table (rules.h). Sizes are multiplied in 64 bits: fixed values reach 2^20 each.
#include "rules.h"

namespace tessera::plan::rules {
namespace {

std::string n(int64_t v) {
  return std::to_string(v);
}

int64_t devices(const Context& c) {
  return c.cluster.devices();
}

// Micro-batches per DP rank, or 0 when dp*mbs does not divide the batch (another rule's case).
int64_t microbatches(const Context& c, const Plan& p) {
  const int64_t per_step = static_cast<int64_t>(p.dp) * p.mbs;
  return c.workload.global_batch % per_step == 0 ? c.workload.global_batch / per_step : 0;
}

// tp*cp*pp*dp, saturating just above the device count so four sizes of up to 2^24 cannot
// overflow.
int64_t devices_used(const Context& c, const Plan& p) {
  int64_t used = 1;
  for (int64_t v : {p.tp, p.cp, p.pp, p.dp}) {
    used = used > devices(c) ? used : used * v;
  }
  return used;
}

// The embedding's learned position table, 0 when positions are rotary.
int64_t learned_positions(const ir::Model& model) {
  for (const ir::Layer& l : model.layers) {
    if (l.kind == ir::LayerKind::kEmbedding && l.positions > 0) return l.positions;
  }
  return 0;
}

std::string divides_devices(const char* key, int v, const Context& c) {
  return std::string(key) + "=" + n(v) + " does not divide the " + n(devices(c)) + " devices";
}

// Reporting order: what the user most likely got wrong first (the model and a single size before
// combinations of sizes). Each entry: name, dimensions read, predicate, message.
const Rule kRules[] = {
    {"seq-within-positions", 0,
     [](const Context& c, const Plan&) {
       const int64_t positions = learned_positions(c.model);
       return positions == 0 || c.workload.seq_len <= positions;
     },
     [](const Context& c, const Plan&) {
       return "sequence length " + n(c.workload.seq_len) + " exceeds the model's " +
              n(learned_positions(c.model)) + " learned positions";
     }},
    {"tp-divides-devices", kTp,
     [](const Context& c, const Plan& p) { return devices(c) % p.tp == 0; },
     [](const Context& c, const Plan& p) { return divides_devices("tp", p.tp, c); }},
    {"tp-divides-heads", kTp,
     [](const Context& c, const Plan& p) { return c.model.heads % p.tp == 0; },
     [](const Context& c, const Plan& p) {
       return "tp=" + n(p.tp) + " does not divide num_attention_heads " + n(c.model.heads);
     }},
    // Grouped-query attention: each rank holds whole KV heads, or one KV head serves several.
    {"tp-fits-kv-heads", kTp,
     [](const Context& c, const Plan& p) {
       return c.model.kv_heads % p.tp == 0 || p.tp % c.model.kv_heads == 0;
     },
     [](const Context& c, const Plan& p) {
       return "tp=" + n(p.tp) + " neither divides nor is a multiple of num_key_value_heads " +
              n(c.model.kv_heads);
     }},
    {"tp-within-host", kTp,
     [](const Context& c, const Plan& p) {
       return p.tp <= c.cluster.devices_per_host || c.options.allow_tp_across_hosts;
     },
     [](const Context& c, const Plan& p) {
       return "tp=" + n(p.tp) + " exceeds the " + n(c.cluster.devices_per_host) +
              " devices of a host";
     }},
    {"cp-divides-devices", kCp,
     [](const Context& c, const Plan& p) { return devices(c) % p.cp == 0; },
     [](const Context& c, const Plan& p) { return divides_devices("cp", p.cp, c); }},
    {"cp-splits-sequence", kCp,
     [](const Context& c, const Plan& p) {
       return p.cp == 1 || c.workload.seq_len % (2 * int64_t{p.cp}) == 0;
     },
     [](const Context& c, const Plan& p) {
       return "cp=" + n(p.cp) + ": sequence length " + n(c.workload.seq_len) +
              " is not a multiple of 2*cp (load-balanced causal chunks)";
     }},
    {"pp-divides-devices", kPp,
     [](const Context& c, const Plan& p) { return devices(c) % p.pp == 0; },
     [](const Context& c, const Plan& p) { return divides_devices("pp", p.pp, c); }},
    {"pp-within-layers", kPp,
     [](const Context& c, const Plan& p) { return p.pp <= c.model.num_blocks; },
     [](const Context& c, const Plan& p) {
       return "pp=" + n(p.pp) + " exceeds the model's " + n(c.model.num_blocks) + " layers";
     }},
    {"dp-divides-devices", kDp,
     [](const Context& c, const Plan& p) { return devices(c) % p.dp == 0; },
     [](const Context& c, const Plan& p) { return divides_devices("dp", p.dp, c); }},
    {"sizes-use-every-device", kTp | kCp | kPp | kDp,
     [](const Context& c, const Plan& p) { return devices_used(c, p) == devices(c); },
     [](const Context& c, const Plan& p) {
       const int64_t used = devices_used(c, p);
       return "tp*pp*dp*cp = " + (used > devices(c) ? "more than " + n(devices(c)) : n(used)) +
              " but the cluster has " + n(devices(c)) + " devices";
     }},
    {"dp-divides-batch", kDp,
     [](const Context& c, const Plan& p) { return c.workload.global_batch % p.dp == 0; },
     [](const Context& c, const Plan& p) {
       return "dp=" + n(p.dp) + " does not divide the global batch " + n(c.workload.global_batch);
     }},
    {"mbs-divides-batch", kMbs,
     [](const Context& c, const Plan& p) { return c.workload.global_batch % p.mbs == 0; },
     [](const Context& c, const Plan& p) {
       return "mbs=" + n(p.mbs) + " does not divide the global batch " + n(c.workload.global_batch);
     }},
    {"dp-mbs-divide-batch", kDp | kMbs,
     [](const Context& c, const Plan& p) { return microbatches(c, p) > 0; },
     [](const Context& c, const Plan& p) {
       return "global batch " + n(c.workload.global_batch) +
              " is not a multiple of dp*mbs = " + n(static_cast<int64_t>(p.dp) * p.mbs);
     }},
    {"ep-needs-experts", kEp,
     [](const Context& c, const Plan& p) { return p.ep == 1 || c.model.experts > 0; },
     [](const Context&, const Plan& p) {
       return "ep=" + n(p.ep) + " but the model has no experts";
     }},
    {"ep-divides-experts", kEp,
     [](const Context& c, const Plan& p) {
       return p.ep == 1 || c.model.experts == 0 || c.model.experts % p.ep == 0;
     },
     [](const Context& c, const Plan& p) {
       return "ep=" + n(p.ep) + " does not divide the " + n(c.model.experts) + " experts";
     }},
    // Expert parallelism is carved out of data parallelism (groups.h).
    {"ep-divides-dp", kEp | kDp, [](const Context&, const Plan& p) { return p.dp % p.ep == 0; },
     [](const Context&, const Plan& p) {
       return "ep=" + n(p.ep) + " does not divide dp=" + n(p.dp);
     }},
    {"sp-needs-tp", kTp | kSp, [](const Context&, const Plan& p) { return !p.sp || p.tp > 1; },
     [](const Context&, const Plan&) { return std::string("sp=1 needs tp > 1"); }},
    {"vp-needs-pp", kPp | kVp, [](const Context&, const Plan& p) { return p.vp == 1 || p.pp > 1; },
     [](const Context&, const Plan& p) { return "vp=" + n(p.vp) + " needs pp > 1"; }},
    {"vp-splits-layers", kPp | kVp,
     [](const Context& c, const Plan& p) {
       return p.vp == 1 || c.model.num_blocks % (int64_t{p.pp} * p.vp) == 0;
     },
     [](const Context& c, const Plan& p) {
       return "vp=" + n(p.vp) + ": " + n(c.model.num_blocks) +
              " layers do not split evenly into pp*vp = " + n(int64_t{p.pp} * p.vp) + " chunks";
     }},
    // The interleaved schedule hands micro-batches to the stages in groups of pp.
    {"vp-microbatches", kPp | kDp | kMbs | kVp,
     [](const Context& c, const Plan& p) {
       const int64_t m = microbatches(c, p);
       return p.vp == 1 || m == 0 || m % p.pp == 0;
     },
     [](const Context& c, const Plan& p) {
       return "vp=" + n(p.vp) + " needs the " + n(microbatches(c, p)) +
              " micro-batches to be a multiple of pp=" + n(p.pp);
     }},
    {"zero3-without-pp", kPp | kZero,
     [](const Context&, const Plan& p) { return p.zero != 3 || p.pp == 1; },
     [](const Context&, const Plan&) {
       return std::string(
           "zero=3 with pp>1 is not modelled by the planner (weights would be gathered per "
           "micro-batch per stage; the GPT trainer runs it, unpriced)");
     }},
};

// Known sizes out of range, before any rule divides by them.
Status check_ranges(const Plan& p, uint16_t known) {
  const std::pair<Dim, std::pair<const char*, int>> sizes[] = {
      {kTp, {"tp", p.tp}}, {kCp, {"cp", p.cp}},    {kPp, {"pp", p.pp}}, {kDp, {"dp", p.dp}},
      {kEp, {"ep", p.ep}}, {kMbs, {"mbs", p.mbs}}, {kVp, {"vp", p.vp}},
  };
  for (const auto& [dim, size] : sizes) {
    if ((known & dim) && size.second < 1) {
      return invalid_argument(std::string(size.first) + "=" + n(size.second) +
                              ": must be at least 1");
    }
  }
  if ((known & kZero) && (p.zero < 0 || p.zero > 3)) {
    return invalid_argument("zero=" + n(p.zero) + ": must be 0..3");
  }
  return Status();
}

}  // namespace

std::span<const Rule> table() {
  return kRules;
}

Status check(const Context& context, const Plan& plan, uint16_t known) {
  TSR_RETURN_IF_ERROR(check_ranges(plan, known));
  for (const Rule& r : kRules) {
    if ((r.needs & known) == r.needs && !r.holds(context, plan)) {
      return invalid_argument(r.message(context, plan));
    }
  }
  return Status();
}

ByLevel::ByLevel() {
  for (const Rule& r : kRules) {
    if (r.needs != 0) levels_[level_of(r.needs)].push_back(&r);
  }
}

}  // namespace tessera::plan::rules
