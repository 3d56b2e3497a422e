#include "tessera/checkpoint/rank_group.h"

namespace tessera::ckpt {

Status RankGroup::recv_into(int peer, std::string* out) {
  TSR_ASSIGN_OR_RETURN(*out, recv(peer));
  return Status();
}

Status SingleRankGroup::send(int peer, std::string_view) {
  return invalid_argument("send to rank " + std::to_string(peer) + ": a group of one has no peer");
}

Result<std::string> SingleRankGroup::recv(int peer) {
  return invalid_argument("recv from rank " + std::to_string(peer) +
                          ": a group of one has no peer");
}

}  // namespace tessera::ckpt
