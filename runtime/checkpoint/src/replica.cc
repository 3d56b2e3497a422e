// Peer-memory replicas: after each committed save a rank sends its snapshot to its buddy
// ((rank + stride) % size) and keeps the one its own predecessor sends. restore() brings every
// rank back to the newest step that survives in some memory, storage being the fallback.
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "impl.h"
#include "tessera/common/log.h"

namespace tessera::ckpt {
namespace {

using Json = nlohmann::json;

// The position of `rank` in its cycle of the permutation r -> r + stride (mod size), and the
// cycle length: pairs alternate send-first/recv-first along the cycle so blocking sends never
// wait on each other in a circle.
void cycle_position(int rank, int size, int stride, int* pos, int* length) {
  const int g = std::gcd(size, stride % size == 0 ? size : stride % size);
  *length = size / g;
  *pos = 0;
  for (int k = 0, r = rank % g; k < *length; ++k, r = (r + stride) % size) {
    if (r == rank) *pos = k;
  }
}

}  // namespace

std::string Checkpointer::Impl::serialize_snapshot(const Snapshot& snap) const {
  Json header = {{"step", snap.step}, {"tensors", Json::array()}, {"blobs", Json::array()}};
  for (const auto& t : self->registry_.tensors()) {
    header["tensors"].push_back({{"name", t.name}, {"bytes", t.bytes()}});
  }
  for (const auto& b : snap.blobs) header["blobs"].push_back(b);
  return header.dump();
}

Status Checkpointer::Impl::exchange_replica(const Snapshot& snap, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  RankGroup& group = *self->group_;
  const int size = group.size(), rank = group.rank();
  const int stride = self->options_.replica_stride % size;
  if (stride == 0) return Status();
  const int buddy = (rank + stride) % size;
  const int source = (rank - stride + size) % size;
  int pos = 0, length = 1;
  cycle_position(rank, size, stride, &pos, &length);
  const size_t bytes = self->registry_.total_tensor_bytes();
  auto send = [&]() -> Status {
    TSR_RETURN_IF_ERROR(group.send(buddy, serialize_snapshot(snap)));
    return group.send(buddy, std::string_view(reinterpret_cast<const char*>(snap.data), bytes));
  };
  auto recv = [&]() -> Status {
    TSR_ASSIGN_OR_RETURN(std::string header, group.recv(source));
    TSR_ASSIGN_OR_RETURN(std::string data, group.recv(source));
    Json h = Json::parse(header, nullptr, false);
    if (h.is_discarded())
      return data_loss("replica from rank " + std::to_string(source) + ": malformed header");
    replica.owner = source;
    replica.step = h["step"].get<int64_t>();
    replica.header = std::move(header);
    replica.bytes = std::move(data);
    return Status();
  };
  if (pos % 2 == 0) {
    TSR_RETURN_IF_ERROR(send());
    TSR_RETURN_IF_ERROR(recv());
  } else {
    TSR_RETURN_IF_ERROR(recv());
    TSR_RETURN_IF_ERROR(send());
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status();
}

Status Checkpointer::Impl::apply_serialized(std::string_view header, std::string_view data) {
  Json h = Json::parse(header, nullptr, false);
  if (h.is_discarded()) return data_loss("replica: malformed header");
  const StateRegistry& reg = self->registry_;
  const auto& tensors = h["tensors"];
  if (tensors.size() != reg.tensors().size() || data.size() != reg.total_tensor_bytes()) {
    return failed_precondition("replica does not match the registry (other tensors or sizes)");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i]["name"].get<std::string>() != reg.tensors()[i].name ||
        tensors[i]["bytes"].get<size_t>() != reg.tensors()[i].bytes()) {
      return failed_precondition("replica: tensor " + std::to_string(i) + " is '" +
                                 tensors[i]["name"].get<std::string>() + "', registry has '" +
                                 reg.tensors()[i].name + "'");
    }
  }
  return write_back(reinterpret_cast<const std::byte*>(data.data()),
                    h["blobs"].get<std::vector<std::string>>());
}

Result<RestoreResult> Checkpointer::restore() {
  impl_->wait_idle();
  const auto t0 = std::chrono::steady_clock::now();
  RankGroup& group = *group_;
  const int size = group.size(), rank = group.rank();
  const Snapshot* own =
      impl_->committed_buffer >= 0 ? &impl_->buffers[impl_->committed_buffer] : nullptr;
  const int64_t own_step = own && own->valid ? own->step : -1;
  Json mine = {{"own", own_step}, {"owner", impl_->replica.owner}, {"step", impl_->replica.step}};
  TSR_ASSIGN_OR_RETURN(auto gathered, group.allgather(mine.dump()));
  std::vector<int64_t> owns(size);
  std::vector<int> owner(size);
  std::vector<int64_t> held(size);
  for (int r = 0; r < size; ++r) {
    Json j = Json::parse(gathered[r]);
    owns[r] = j["own"].get<int64_t>();
    owner[r] = j["owner"].get<int>();
    held[r] = j["step"].get<int64_t>();
  }
  // The newest step every rank can get from some memory; the holder that serves each rank.
  int64_t chosen = -1;
  std::vector<int> server(size, -1);
  std::vector<int64_t> steps(owns.begin(), owns.end());
  steps.insert(steps.end(), held.begin(), held.end());
  std::sort(steps.rbegin(), steps.rend());
  for (int64_t s : steps) {
    if (s < 0) break;
    bool all = true;
    for (int q = 0; q < size && all; ++q) {
      server[q] = owns[q] == s ? q : -1;
      for (int h = 0; h < size && server[q] < 0; ++h) {
        if (owner[h] == q && held[h] == s) server[q] = h;
      }
      all = server[q] >= 0;
    }
    if (all) {
      chosen = s;
      break;
    }
  }
  RestoreResult out;
  if (chosen < 0) {
    auto loaded = load(LoadOptions{});
    if (!loaded.ok()) return loaded.status().with_context("restore from storage");
    out.step = loaded->step;
    out.detail = "storage (no memory copy of every rank)";
  } else {
    // Holders send first, then the ranks that need a copy receive.
    for (int q = 0; q < size; ++q) {
      if (server[q] == rank && q != rank) {
        TSR_RETURN_IF_ERROR(group.send(q, impl_->replica.header));
        TSR_RETURN_IF_ERROR(group.send(q, impl_->replica.bytes));
      }
    }
    if (server[rank] == rank) {
      TSR_RETURN_IF_ERROR(impl_->write_back(own->data, own->blobs));
      out.detail = "own memory";
    } else {
      TSR_ASSIGN_OR_RETURN(std::string header, group.recv(server[rank]));
      TSR_ASSIGN_OR_RETURN(std::string data, group.recv(server[rank]));
      TSR_RETURN_IF_ERROR(impl_->apply_serialized(header, data));
      out.detail = "memory of rank " + std::to_string(server[rank]);
    }
    out.step = chosen;
    out.from_peer = true;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  TSR_LOG(kInfo, "ckpt") << "restored step " << out.step << " from " << out.detail << " in "
                         << out.seconds << " s";
  return out;
}

}  // namespace tessera::ckpt
