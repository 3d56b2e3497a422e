// Plan to process groups: TP innermost, PP outermost, every rank once per group kind.
#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "tessera/plan/groups.h"

namespace tessera::plan {
namespace {

Plan sizes(int tp, int cp, int dp, int pp, int ep = 1) {
  Plan p;
  p.tp = tp, p.cp = cp, p.dp = dp, p.pp = pp, p.ep = ep;
  return p;
}

TEST(PlanGroups, EightRanksTwoEachWay) {
  auto g = plan_groups(sizes(2, 1, 2, 2), 4);
  ASSERT_TRUE(g.ok());
  using Groups = std::vector<std::vector<int>>;
  EXPECT_EQ(g->tp, (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g->dp, (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g->pp, (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g->cp.size(), 8u);
  const RankCoord& r5 = g->ranks[5];
  EXPECT_EQ(r5.tp, 1);
  EXPECT_EQ(r5.dp, 0);
  EXPECT_EQ(r5.pp, 1);
  EXPECT_EQ(r5.host, 1);
  EXPECT_EQ(r5.local_rank, 1);
}

TEST(PlanGroups, EveryRankAppearsOncePerKindAndTpStaysInAHost) {
  const Plan p = sizes(8, 2, 6, 4, 3);
  auto g = plan_groups(p, 8);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->world_size, 384);
  for (const auto* kind : {&g->tp, &g->cp, &g->dp, &g->pp, &g->ep, &g->expert_dp}) {
    std::multiset<int> seen;
    for (const auto& group : *kind) seen.insert(group.begin(), group.end());
    EXPECT_EQ(seen.size(), 384u);
    EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), 384u);
  }
  for (const auto& group : g->tp) {
    ASSERT_EQ(group.size(), 8u);
    EXPECT_EQ(g->ranks[group.front()].host, g->ranks[group.back()].host);
  }
  for (const auto& group : g->pp) EXPECT_EQ(group.size(), 4u);
  for (const auto& group : g->ep) {
    ASSERT_EQ(group.size(), 3u);
    // EP groups are consecutive DP indices with the same tp, cp, pp.
    EXPECT_EQ(g->ranks[group[1]].dp, g->ranks[group[0]].dp + 1);
  }
  for (const auto& group : g->expert_dp) EXPECT_EQ(group.size(), 2u);
  // The coordinates rebuild the rank.
  for (const RankCoord& c : g->ranks) {
    EXPECT_EQ(c.rank, c.tp + 8 * (c.cp + 2 * (c.dp + 6 * c.pp)));
  }
}

TEST(PlanGroups, RejectsEpNotDividingDp) {
  auto g = plan_groups(sizes(1, 1, 4, 1, 3), 8);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "plan_groups: ep=3 does not divide dp=4");
}

}  // namespace
}  // namespace tessera::plan
