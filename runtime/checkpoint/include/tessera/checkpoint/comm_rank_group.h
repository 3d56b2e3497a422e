// The checkpointer's RankGroup over a collectives Communicator: what a multi-rank job passes to
// the Checkpointer. Allgather is an allgather of sizes then an allgatherv of the bytes; send/recv
// carry a size then the bytes. Errors are the communicator's (they name the peer and operation,
// and a dead peer is detected within the communicator's timeout).
#pragma once

#include <memory>

#include "tessera/checkpoint/rank_group.h"
#include "tessera/coll/communicator.h"

namespace tessera::ckpt {

class CommRankGroup final : public RankGroup {
 public:
  explicit CommRankGroup(std::shared_ptr<coll::Communicator> comm) : comm_(std::move(comm)) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  Status barrier() override { return comm_->barrier(); }
  Result<std::vector<std::string>> allgather(std::string_view bytes) override;
  Status send(int peer, std::string_view bytes) override;
  Result<std::string> recv(int peer) override;
  Status recv_into(int peer, std::string* out) override;  // in place, no copy

 private:
  std::shared_ptr<coll::Communicator> comm_;
};

}  // namespace tessera::ckpt
