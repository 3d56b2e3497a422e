// Buddy placement of the peer replicas (runtime/checkpoint/src/buddy.h) on synthetic host lists:
// once the ranks span hosts, no rank's copy may share its host, so one lost node loses no state.
#include "buddy.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <string>
#include <vector>

namespace tessera::ckpt {
namespace {

std::vector<std::string> hosts(std::initializer_list<const char*> names) {
  return std::vector<std::string>(names.begin(), names.end());
}

TEST(BuddyPlacement, PutsEveryBuddyOnAnotherHostWhenRanksAreGroupedByHost) {
  const auto two_by_two = hosts({"a", "a", "b", "b"});
  EXPECT_EQ(replica_stride_for_hosts(two_by_two), 2);
  EXPECT_EQ(buddies_on_same_host(two_by_two, 2), 0);
  const auto three_by_two = hosts({"a", "a", "b", "b", "c", "c"});
  EXPECT_EQ(replica_stride_for_hosts(three_by_two), 2);
  const auto two_by_four = hosts({"a", "a", "a", "a", "b", "b", "b", "b"});
  EXPECT_EQ(replica_stride_for_hosts(two_by_four), 4);
  EXPECT_EQ(buddies_on_same_host(two_by_four, 1), 6);  // the old default: 6 of 8 on the same host
}

TEST(BuddyPlacement, KeepsTheNextRankWhenNeighboursAreOnOtherHosts) {
  EXPECT_EQ(replica_stride_for_hosts(hosts({"a", "b", "a", "b"})), 1);
  EXPECT_EQ(replica_stride_for_hosts(hosts({"a", "b", "c"})), 1);
}

TEST(BuddyPlacement, UsesTheNextRankOnOneHostOrAlone) {
  EXPECT_EQ(replica_stride_for_hosts(hosts({"a", "a", "a", "a"})), 1);
  EXPECT_EQ(replica_stride_for_hosts(hosts({"a"})), 1);
  EXPECT_EQ(replica_stride_for_hosts({}), 1);
}

TEST(BuddyPlacement, PutsTheMostBuddiesAcrossHostsOfUnequalSize) {
  // Three ranks on a, one on b: no stride moves every copy off its host; the best moves two
  // (rank 3's to a, one a-rank's to b), and nothing does better.
  const auto uneven = hosts({"a", "a", "a", "b"});
  const int stride = replica_stride_for_hosts(uneven);
  for (int s = 1; s < 4; ++s) {
    EXPECT_LE(buddies_on_same_host(uneven, stride), buddies_on_same_host(uneven, s)) << s;
  }
  // Five ranks on a and three on b: stride 3 leaves only a-ranks paired with a-ranks.
  const auto five_three = hosts({"a", "a", "a", "a", "a", "b", "b", "b"});
  const int best = replica_stride_for_hosts(five_three);
  for (int s = 1; s < 8; ++s) {
    EXPECT_LE(buddies_on_same_host(five_three, best), buddies_on_same_host(five_three, s)) << s;
  }
}

TEST(BuddyPlacement, TellsHostsApartByTesseraHostId) {
  ::setenv("TESSERA_HOST_ID", "node-17", 1);
  EXPECT_EQ(buddy_host_identity(), "node-17");
  ::unsetenv("TESSERA_HOST_ID");
  EXPECT_NE(buddy_host_identity(), "node-17");
  EXPECT_FALSE(buddy_host_identity().empty());
}

}  // namespace
}  // namespace tessera::ckpt
