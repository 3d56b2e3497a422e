// Creation cards and the membership they describe (membership.h).
#include "membership.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <string_view>

namespace tessera::coll {
namespace {

constexpr const char* kFieldNames[] = {"world_rank", "pid",           "color", "key",
                                       "start_time", "pid_namespace", "host"};
constexpr size_t kFields = std::size(kFieldNames);

Status bad_card(size_t from, const std::string& text, const std::string& why) {
  return internal_error("communicator creation: malformed card from participant " +
                        std::to_string(from) + " (" + why + "): '" + text + "'");
}

// The whole of `text` as a number of type T.
template <typename T>
bool parse_number(std::string_view text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace

std::string encode_card(const Card& c) {
  return std::to_string(c.world_rank) + "|" + std::to_string(c.process.pid) + "|" +
         std::to_string(c.color) + "|" + std::to_string(c.key) + "|" +
         std::to_string(c.process.start_time) + "|" + c.process.pid_namespace + "|" + c.host;
}

Result<Card> decode_card(const std::string& text, size_t from) {
  std::string_view field[kFields];
  size_t at = 0;
  for (size_t i = 0; i + 1 < kFields; ++i) {
    const size_t bar = text.find('|', at);
    if (bar == std::string::npos) {
      return bad_card(from, text, "no field '" + std::string(kFieldNames[i + 1]) + "'");
    }
    field[i] = std::string_view(text).substr(at, bar - at);
    at = bar + 1;
  }
  field[kFields - 1] = std::string_view(text).substr(at);  // the host, '|' and all
  Card c;
  const bool numbers_ok[] = {parse_number(field[0], &c.world_rank),
                             parse_number(field[1], &c.process.pid),
                             parse_number(field[2], &c.color), parse_number(field[3], &c.key),
                             parse_number(field[4], &c.process.start_time)};
  for (size_t i = 0; i < std::size(numbers_ok); ++i) {
    if (!numbers_ok[i]) {
      return bad_card(from, text, "field '" + std::string(kFieldNames[i]) + "' is not a number");
    }
  }
  c.process.pid_namespace = std::string(field[5]);
  c.host = std::string(field[6]);
  return c;
}

namespace {

// Refuses a card set that no real creation produces: the cards come from a store any local
// process may write to, and two participants taking one world rank would make every later
// "rank N" wrong.
Status check_cards(const std::vector<Card>& cards, int my_index) {
  if (my_index < 0 || size_t(my_index) >= cards.size()) {
    return internal_error("communicator creation: participant index " + std::to_string(my_index) +
                          " outside the " + std::to_string(cards.size()) + " cards");
  }
  std::map<int, size_t> claimed;  // world rank -> participant
  for (size_t i = 0; i < cards.size(); ++i) {
    const Card& c = cards[i];
    if (c.world_rank < 0) {
      return internal_error("communicator creation: card from participant " + std::to_string(i) +
                            " has world_rank " + std::to_string(c.world_rank));
    }
    if (c.host.empty()) {
      return internal_error("communicator creation: card from participant " + std::to_string(i) +
                            " has an empty host");
    }
    auto [it, fresh] = claimed.emplace(c.world_rank, i);
    if (!fresh) {
      return internal_error("communicator creation: participants " + std::to_string(it->second) +
                            " and " + std::to_string(i) + " both claim world_rank " +
                            std::to_string(c.world_rank));
    }
  }
  return Status();
}

// Every group's participant indices, by color, each in rank order (key, then participant index).
std::map<int64_t, std::vector<int>> groups_of(const std::vector<Card>& cards) {
  std::map<int64_t, std::vector<int>> groups;
  for (size_t i = 0; i < cards.size(); ++i) {
    if (cards[i].color >= 0) groups[cards[i].color].push_back(int(i));
  }
  for (auto& [color, members] : groups) {
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return cards[size_t(a)].key < cards[size_t(b)].key; });
  }
  return groups;
}

// hosts, host_of, host_names, local_ranks, local_rank, uniform_hosts from the ranks' cards.
void place_on_hosts(Membership& m) {
  for (const std::string& h : m.hosts) {
    auto it = std::find(m.host_names.begin(), m.host_names.end(), h);
    m.host_of.push_back(int(it - m.host_names.begin()));
    if (it == m.host_names.end()) m.host_names.push_back(h);
  }
  if (!m.member) return;
  for (int r = 0; r < m.size(); ++r) {
    if (m.host_of[size_t(r)] == m.host_of[size_t(m.rank)]) m.local_ranks.push_back(r);
  }
  m.local_rank =
      int(std::find(m.local_ranks.begin(), m.local_ranks.end(), m.rank) - m.local_ranks.begin());
  std::vector<int> per_host(m.host_names.size(), 0);
  for (int h : m.host_of) ++per_host[size_t(h)];
  m.uniform_hosts =
      std::all_of(per_host.begin(), per_host.end(), [&](int n) { return n == per_host[0]; });
}

}  // namespace

Result<Membership> compute_membership(const std::vector<Card>& cards, int my_index) {
  TSR_RETURN_IF_ERROR(check_cards(cards, my_index));
  const auto groups = groups_of(cards);
  Membership m;
  for (const auto& [color, group] : groups) {
    std::set<std::string> group_hosts;
    for (int i : group) group_hosts.insert(cards[size_t(i)].host);
    m.some_group_has_peers |= group.size() > 1;
    m.some_group_spans_hosts |= group_hosts.size() > 1;
  }
  const Card& me = cards[size_t(my_index)];
  m.member = me.color >= 0;
  if (m.member) m.members = groups.at(me.color);
  for (int r = 0; r < m.size(); ++r) {
    const int participant = m.members[size_t(r)];
    const Card& c = cards[size_t(participant)];
    if (participant == my_index) m.rank = r;
    m.world_ranks.push_back(c.world_rank);
    m.processes.push_back(c.process);
    m.hosts.push_back(c.host);
  }
  place_on_hosts(m);
  return m;
}

}  // namespace tessera::coll
