// plan_groups: coordinates and group lists for the TP-innermost rank layout.
#include "tessera/plan/groups.h"

#include <map>
#include <tuple>

namespace tessera::plan {

Result<ProcessGroups> plan_groups(const Plan& p, int devices_per_host) {
  if (p.tp < 1 || p.cp < 1 || p.dp < 1 || p.pp < 1 || p.ep < 1 || devices_per_host < 1) {
    return invalid_argument("plan_groups: sizes and devices_per_host must be at least 1");
  }
  if (p.dp % p.ep != 0) {
    return invalid_argument("plan_groups: ep=" + std::to_string(p.ep) +
                            " does not divide dp=" + std::to_string(p.dp));
  }
  ProcessGroups g;
  g.world_size = p.tp * p.cp * p.dp * p.pp;
  g.ranks.resize(static_cast<size_t>(g.world_size));
  // Groups are keyed by the coordinates they do not vary; std::map keeps a deterministic order.
  using Key = std::tuple<int, int, int, int>;
  std::map<Key, std::vector<int>> tp, cp, dp, pp, ep, edp;
  for (int r = 0; r < g.world_size; ++r) {
    RankCoord& c = g.ranks[static_cast<size_t>(r)];
    c.rank = r;
    c.tp = r % p.tp;
    c.cp = (r / p.tp) % p.cp;
    c.dp = (r / (p.tp * p.cp)) % p.dp;
    c.pp = r / (p.tp * p.cp * p.dp);
    c.ep = c.dp % p.ep;
    c.host = r / devices_per_host;
    c.local_rank = r % devices_per_host;
    tp[{c.pp, c.dp, c.cp, 0}].push_back(r);
    cp[{c.pp, c.dp, c.tp, 0}].push_back(r);
    dp[{c.pp, c.cp, c.tp, 0}].push_back(r);
    pp[{c.dp, c.cp, c.tp, 0}].push_back(r);
    ep[{c.pp, c.cp, c.tp, c.dp / p.ep}].push_back(r);
    edp[{c.pp, c.cp, c.tp, c.ep}].push_back(r);
  }
  auto flatten = [](std::map<Key, std::vector<int>>& m) {
    std::vector<std::vector<int>> out;
    for (auto& [key, ranks] : m) out.push_back(std::move(ranks));
    return out;
  };
  g.tp = flatten(tp);
  g.cp = flatten(cp);
  g.dp = flatten(dp);
  g.pp = flatten(pp);
  g.ep = flatten(ep);
  g.expert_dp = flatten(edp);
  return g;
}

}  // namespace tessera::plan
