// Who is in a communicator, from the participants' creation cards: groups by color, ranks by key,
// hosts and local ranks. Pure (no I/O, no exchange), so that a test can give it any card set.
// Internal to collectives/; comm_impl.cc's setup() runs it first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "peer_liveness.h"
#include "tessera/common/status.h"

namespace tessera::coll {

// A participant's card, published in the bootstrap store, which anyone who reaches the store can
// read: it holds identifiers, never an address (that would undo ASLR) nor the kernel's boot id.
struct Card {
  int world_rank = 0;
  ProcessIdentity process;  // pid, start time, PID namespace (peer_liveness.h)
  int64_t color = 0;        // < 0: takes part in the creation without being a member
  int64_t key = 0;
  std::string host;  // the host identity (comm_impl.cc host_identity)
};

// "world_rank|pid|color|key|start_time|pid_namespace|host" (the host last: it may hold '|').
std::string encode_card(const Card& card);
// INTERNAL naming participant `from` and the field when `text` is not a card.
Result<Card> decode_card(const std::string& text, size_t from);

// This participant's view of its group.
struct Membership {
  bool member = false;       // this participant's color is >= 0
  std::vector<int> members;  // the group's participant indices, in rank order
  int rank = 0;              // this participant's rank in the group (0 for a non-member)
  // Per rank of the group:
  std::vector<int> world_ranks;
  std::vector<ProcessIdentity> processes;
  std::vector<std::string> hosts;  // host identity
  std::vector<int> host_of;        // index into host_names
  // The group's hosts in order of first appearance among its ranks.
  std::vector<std::string> host_names;
  std::vector<int> local_ranks;  // the ranks on this rank's host, ascending (empty: non-member)
  int local_rank = 0;            // this rank's index in local_ranks
  bool uniform_hosts = true;     // every host has the same number of ranks
  // Over every group of the creation (members or not take part in the same exchanges):
  bool some_group_has_peers = false;    // a group of two or more ranks
  bool some_group_spans_hosts = false;  // a group whose ranks are on two or more hosts

  int size() const { return int(members.size()); }
  int num_hosts() const { return host_names.empty() ? 1 : int(host_names.size()); }
  int local_size() const { return local_ranks.empty() ? 1 : int(local_ranks.size()); }
  // The hierarchical algorithms (and the local/cross sub-communicators) apply: several hosts,
  // several ranks on each, the same number on every one.
  bool hierarchical() const { return num_hosts() > 1 && uniform_hosts && local_size() > 1; }
};

// Groups: participants with the same non-negative color, ordered by (key, participant index).
// `my_index` is this participant's place in `cards`. INTERNAL naming the participants when the
// cards contradict each other (two claim one world rank) or a field is out of range.
Result<Membership> compute_membership(const std::vector<Card>& cards, int my_index);

}  // namespace tessera::coll
