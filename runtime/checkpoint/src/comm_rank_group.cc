#include "tessera/checkpoint/comm_rank_group.h"

#include <cstdint>

namespace tessera::ckpt {

using coll::DType;

Result<std::vector<std::string>> CommRankGroup::allgather(std::string_view bytes) {
  const size_t n = size_t(comm_->size());
  const int64_t mine = int64_t(bytes.size());
  std::vector<int64_t> sizes(n);
  TSR_RETURN_IF_ERROR(comm_->allgather(&mine, sizes.data(), 1, DType::kI64));
  std::vector<size_t> counts(n), displs(n);
  size_t total = 0;
  for (size_t r = 0; r < n; ++r) {
    counts[r] = size_t(sizes[r]);
    displs[r] = total;
    total += counts[r];
  }
  std::string all(total, '\0');
  TSR_RETURN_IF_ERROR(comm_->allgatherv(bytes.data(), all.data(), counts, displs, DType::kU8));
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r) out[r] = all.substr(displs[r], counts[r]);
  return out;
}

Status CommRankGroup::send(int peer, std::string_view bytes) {
  const int64_t n = int64_t(bytes.size());
  TSR_RETURN_IF_ERROR(comm_->send(&n, 1, DType::kI64, peer));
  return comm_->send(bytes.data(), bytes.size(), DType::kU8, peer);
}

Result<std::string> CommRankGroup::recv(int peer) {
  std::string bytes;
  TSR_RETURN_IF_ERROR(recv_into(peer, &bytes));
  return bytes;
}

Status CommRankGroup::recv_into(int peer, std::string* out) {
  int64_t n = 0;
  TSR_RETURN_IF_ERROR(comm_->recv(&n, 1, DType::kI64, peer));
  // Growing past the capacity: drop the old bytes first, so resize() does not copy them over.
  if (size_t(n) > out->capacity()) *out = std::string();
  out->resize(size_t(n));
  return comm_->recv(out->data(), out->size(), DType::kU8, peer);
}

}  // namespace tessera::ckpt
