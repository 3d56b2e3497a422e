// RankGroup: the few collective operations the checkpointer needs, behind a small interface so it
// does not depend on a particular communicator. The collectives layer provides an adapter over its
// Communicator; SingleRankGroup serves one-process jobs and offline tools; the tests use one over
// socketpairs (tests/checkpoint/support/socket_rank_group.h).
//
// Contract for implementations:
//  - every rank calls barrier() and allgather() in the same order (they are collective);
//  - send(peer, bytes) may block until the peer receives, but a pair of ranks never deadlocks when
//    the checkpointer orders their send/recv (it always pairs a send with a recv on the other
//    side);
//  - messages between two ranks arrive in order and whole;
//  - every call returns within the implementation's timeout, and an error names the peer and the
//    operation ("recv from rank 3: peer closed the connection"); after an error the group may be
//    unusable (a dead peer), which the checkpointer reports and does not retry.
// Thread-safety: the checkpointer calls a group from one thread at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::ckpt {

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  // This process's rank in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Returns once every rank has entered it.
  virtual Status barrier() = 0;
  // Every rank's `bytes`, indexed by rank (the caller's own included).
  virtual Result<std::vector<std::string>> allgather(std::string_view bytes) = 0;
  // Point to point; `peer` != rank().
  virtual Status send(int peer, std::string_view bytes) = 0;
  virtual Result<std::string> recv(int peer) = 0;
  // recv() into `*out`'s storage, resized to the message: a caller that passes the same string
  // every time reuses its pages instead of faulting in fresh ones (on a VM ~3 us per 4 KiB page,
  // 120 ms for 40 MB). The previous content is lost; after an error `*out` holds unspecified
  // bytes. The default moves recv()'s result in; CommRankGroup receives in place.
  virtual Status recv_into(int peer, std::string* out);
};

// The group of one: barrier and allgather are trivial; send/recv fail (there is no peer).
class SingleRankGroup final : public RankGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status barrier() override { return Status(); }
  Result<std::vector<std::string>> allgather(std::string_view bytes) override {
    return std::vector<std::string>{std::string(bytes)};
  }
  Status send(int peer, std::string_view) override;
  Result<std::string> recv(int peer) override;
};

}  // namespace tessera::ckpt
