// compute_membership and the creation cards (collectives/src/membership.h): groups, ranks, hosts
// and local ranks from a card set, and the card sets no real creation produces, refused by name.
#include "membership.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::coll {
namespace {

Card card(int world_rank, const std::string& host, int64_t color = 0, int64_t key = 0) {
  Card c;
  c.world_rank = world_rank;
  c.process.pid = 1000 + world_rank;
  c.process.start_time = 77;
  c.process.pid_namespace = "pid:[4026531836]";
  c.color = color;
  c.key = key;
  c.host = host;
  return c;
}

Membership membership(const std::vector<Card>& cards, int my_index) {
  auto m = compute_membership(cards, my_index);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? *m : Membership{};
}

TEST(Membership, GroupsRanksOfOneHostAsLocalRanks) {
  const std::vector<Card> cards = {card(0, "a"), card(1, "b"), card(2, "a"), card(3, "b")};
  const Membership m = membership(cards, 2);
  EXPECT_TRUE(m.member);
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.host_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(m.local_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(m.local_rank, 1);
  EXPECT_EQ(m.local_size(), 2);
  EXPECT_EQ(m.num_hosts(), 2);
  EXPECT_TRUE(m.uniform_hosts);
  EXPECT_TRUE(m.hierarchical());
  EXPECT_TRUE(m.some_group_spans_hosts);
}

TEST(Membership, OrdersRanksByKeyThenParticipantAndHostsByFirstRank) {
  // Keys reverse the participants; ties keep participant order. Host "b" holds rank 0, so it is
  // host 0 although participant 0 is on "a".
  const std::vector<Card> cards = {card(0, "a", 0, 5), card(1, "b", 0, 1), card(2, "b", 0, 1),
                                   card(3, "a", 0, 0)};
  const Membership m = membership(cards, 0);
  EXPECT_EQ(m.members, (std::vector<int>{3, 1, 2, 0}));
  EXPECT_EQ(m.world_ranks, (std::vector<int>{3, 1, 2, 0}));
  EXPECT_EQ(m.rank, 3);
  EXPECT_EQ(m.host_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m.host_of, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(m.local_ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(m.local_rank, 1);
  EXPECT_EQ(m.processes[0].pid, 1003);
}

TEST(Membership, SplitsByColorAndLeavesNonMembersOut) {
  const std::vector<Card> cards = {card(0, "a", 1), card(1, "a", 0), card(2, "b", 1),
                                   card(3, "a", -1)};
  const Membership colored = membership(cards, 2);
  EXPECT_EQ(colored.members, (std::vector<int>{0, 2}));
  EXPECT_EQ(colored.rank, 1);
  EXPECT_EQ(colored.local_ranks, (std::vector<int>{1}));
  EXPECT_FALSE(colored.hierarchical()) << "one rank per host";
  const Membership outsider = membership(cards, 3);
  EXPECT_FALSE(outsider.member);
  EXPECT_EQ(outsider.size(), 0);
  EXPECT_TRUE(outsider.local_ranks.empty());
  EXPECT_EQ(outsider.local_size(), 1);
  EXPECT_EQ(outsider.num_hosts(), 1);
  // The UCX exchange is made by everyone when any group spans hosts, the outsider too.
  EXPECT_TRUE(outsider.some_group_spans_hosts);
  EXPECT_TRUE(outsider.some_group_has_peers);
}

TEST(Membership, UnevenHostsAreNotHierarchical) {
  const std::vector<Card> cards = {card(0, "a"), card(1, "a"), card(2, "a"), card(3, "b"),
                                   card(4, "b")};
  const Membership m = membership(cards, 4);
  EXPECT_FALSE(m.uniform_hosts);
  EXPECT_FALSE(m.hierarchical());
  EXPECT_EQ(m.local_ranks, (std::vector<int>{3, 4}));
  const Membership single = membership({card(0, "a"), card(1, "a")}, 0);
  EXPECT_FALSE(single.hierarchical()) << "one host";
  EXPECT_FALSE(single.some_group_spans_hosts);
  EXPECT_TRUE(single.some_group_has_peers);
}

TEST(Membership, RefusesTwoParticipantsClaimingOneWorldRank) {
  auto m = compute_membership({card(0, "a"), card(1, "a"), card(1, "b")}, 0);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInternal);
  EXPECT_NE(m.status().message().find("participants 1 and 2 both claim world_rank 1"),
            std::string::npos)
      << m.status().message();
}

TEST(Membership, RefusesANegativeWorldRankAnEmptyHostAndAnIndexOutside) {
  auto negative = compute_membership({card(0, "a"), card(-3, "a")}, 0);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("participant 1 has world_rank -3"), std::string::npos)
      << negative.status().message();
  auto hostless = compute_membership({card(0, "a"), card(1, "")}, 0);
  ASSERT_FALSE(hostless.ok());
  EXPECT_NE(hostless.status().message().find("participant 1 has an empty host"), std::string::npos)
      << hostless.status().message();
  auto outside = compute_membership({card(0, "a")}, 1);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("participant index 1 outside the 1 cards"),
            std::string::npos)
      << outside.status().message();
}

TEST(Membership, CardsRoundTripWithABarInTheHost) {
  Card c = card(7, "node|3/0123abcd", -1, -9);
  auto back = decode_card(encode_card(c), 0);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->world_rank, 7);
  EXPECT_EQ(back->process.pid, 1007);
  EXPECT_EQ(back->process.start_time, 77u);
  EXPECT_EQ(back->process.pid_namespace, "pid:[4026531836]");
  EXPECT_EQ(back->color, -1);
  EXPECT_EQ(back->key, -9);
  EXPECT_EQ(back->host, "node|3/0123abcd");
}

TEST(Membership, AMalformedCardNamesTheParticipantAndTheField) {
  auto partial = decode_card("3|12x|0|0|5|ns|h", 4);
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("participant 4 (field 'pid' is not a number)"),
            std::string::npos)
      << partial.status().message();
  auto short_card = decode_card("3|12|0", 2);
  ASSERT_FALSE(short_card.ok());
  EXPECT_NE(short_card.status().message().find("participant 2 (no field 'key')"), std::string::npos)
      << short_card.status().message();
  EXPECT_FALSE(decode_card("3|12|0|0|-5|ns|h", 0).ok()) << "start_time is unsigned";
}

}  // namespace
}  // namespace tessera::coll
