// Peer-memory replicas: after each committed save a rank sends its snapshot to its buddy
// ((rank + stride) % size, the stride chosen by host unless given: buddy.h) and keeps the one its
// own predecessor sends. restore() brings every
// rank back to the newest step that survives in some memory, storage being the fallback.
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "buddy.h"
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

// The replica header: an 8-byte little-endian length, a JSON part (step, tensor names and sizes,
// blob sizes) and then the blobs' raw bytes. Blob contents (RNG states, cursors) are arbitrary
// bytes, so they never go into JSON strings: nlohmann refuses to dump invalid UTF-8.
std::string Checkpointer::Impl::serialize_snapshot(const Snapshot& snap) const {
  Json header = {{"step", snap.step}, {"tensors", Json::array()}, {"blob_bytes", Json::array()}};
  // dtype, shape and slice: what a survivor needs to reshard from this copy once its owner is
  // gone (shrink_reshard.cc); restore() checks name and bytes against the registry.
  for (const auto& t : snap.entries) {
    header["tensors"].push_back({{"name", t.name},
                                 {"bytes", t.bytes()},
                                 {"dtype", hal::dtype_name(t.dtype)},
                                 {"shape", t.shape},
                                 {"offset", t.slice.offset},
                                 {"len", t.slice.len}});
  }
  for (const auto& b : snap.blobs) header["blob_bytes"].push_back(b.size());
  const std::string json = header.dump();
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  for (const auto& b : snap.blobs) out += b;
  return out;
}

namespace {

struct ReplicaHeader {
  Json json;
  std::vector<std::string> blobs;
};

// Splits a header made by serialize_snapshot; `from` names the sender in errors.
Result<ReplicaHeader> parse_replica_header(std::string_view message, const std::string& from) {
  const std::string what = "replica header from " + from;
  if (message.size() < 8) return data_loss(what + ": " + std::to_string(message.size()) + " bytes");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(message[i])) << (8 * i);
  if (n > message.size() - 8) {
    return data_loss(what + ": JSON part of " + std::to_string(n) + " bytes, message has " +
                     std::to_string(message.size()));
  }
  ReplicaHeader h;
  h.json = Json::parse(message.substr(8, n), nullptr, false);
  if (h.json.is_discarded() || !h.json.is_object()) return data_loss(what + ": malformed JSON");
  try {
    size_t at = 8 + n;
    for (const Json& size : h.json.at("blob_bytes")) {
      const uint64_t len = size.get<uint64_t>();
      if (len > message.size() - at) {
        return data_loss(what + ": blob " + std::to_string(h.blobs.size()) + " of " +
                         std::to_string(len) + " bytes overruns the message");
      }
      h.blobs.emplace_back(message.substr(at, len));
      at += len;
    }
    if (at != message.size()) {
      return data_loss(what + ": " + std::to_string(message.size() - at) + " trailing bytes");
    }
    (void)h.json.at("step").get<int64_t>();
  } catch (const std::exception& e) {
    return data_loss(what + ": " + e.what());
  }
  return h;
}

// What each tensor of a replica's bytes is, from its header; empty (the replica then serves
// restore() only, not resharding after a shrink) when the header does not describe every tensor
// or the sizes do not add up to `data_bytes`.
std::vector<TensorEntry> replica_entries(const Json& header, size_t data_bytes, int from) {
  std::vector<TensorEntry> out;
  size_t total = 0;
  try {
    for (const Json& t : header.at("tensors")) {
      TensorEntry e;
      e.name = t.at("name").get<std::string>();
      auto dtype = hal::parse_dtype(t.at("dtype").get<std::string>());
      if (!dtype) throw std::runtime_error("unknown dtype of tensor '" + e.name + "'");
      e.dtype = *dtype;
      e.shape = t.at("shape").get<std::vector<int64_t>>();
      e.slice = Slice{t.at("offset").get<std::vector<int64_t>>(),
                      t.at("len").get<std::vector<int64_t>>()};
      if (e.slice.offset.size() != e.shape.size() || e.slice.len.size() != e.shape.size() ||
          e.bytes() != t.at("bytes").get<size_t>()) {
        throw std::runtime_error("tensor '" + e.name + "': slice and size disagree");
      }
      total += e.bytes();
      out.push_back(std::move(e));
    }
  } catch (const std::exception& e) {
    TSR_LOG(kWarn, "ckpt") << "replica from rank " << from
                           << " cannot be resharded (restore() only): " << e.what();
    return {};
  }
  if (total != data_bytes) {
    TSR_LOG(kWarn, "ckpt") << "replica from rank " << from << ": its tensors make " << total
                           << " bytes, it carries " << data_bytes << " (restore() only)";
    return {};
  }
  return out;
}

// The tensor bytes a replica's header announces (the sum of its tensors' sizes); 0 when it does
// not say. Only a hint for sizing the receive buffer ahead of the bytes.
size_t replica_data_bytes(const Json& header) {
  size_t total = 0;
  try {
    for (const Json& t : header.at("tensors")) total += t.at("bytes").get<size_t>();
  } catch (const std::exception&) {
    return 0;
  }
  return total;
}

}  // namespace

Status Checkpointer::Impl::exchange_replica(const Snapshot& snap, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  RankGroup& group = *self->group_;
  const int size = group.size(), rank = group.rank();
  if (size < 2) return Status();
  if (replica_stride == 0) {
    replica_stride = self->options_.replica_stride;
    if (replica_stride == 0) {  // by host: every rank learns every rank's host (collective)
      TSR_ASSIGN_OR_RETURN(std::vector<std::string> hosts, group.allgather(buddy_host_identity()));
      replica_stride = replica_stride_for_hosts(hosts);
      const int same = buddies_on_same_host(hosts, replica_stride);
      if (rank == 0) {
        TSR_LOG(kInfo, "ckpt") << "peer replicas: buddy = rank + " << replica_stride << " (mod "
                               << size << "); " << same << " of " << size
                               << " buddies share their rank's host";
      }
    }
  }
  const int stride = replica_stride % size;
  if (stride == 0) return Status();
  const int buddy = (rank + stride) % size;
  const int source = (rank - stride + size) % size;
  int pos = 0, length = 1;
  cycle_position(rank, size, stride, &pos, &length);
  const size_t bytes = self->registry_.total_tensor_bytes();
  // Two rounds, each ordered along the cycle: the headers, then the tensor bytes. Between them
  // both ranks size their receive buffer (Replica::spare) at the same time; faulting in a fresh
  // one costs ~3 us per 4 KiB page on a VM, which in a single round ran once per direction with
  // the sender waiting (~250 ms for 40 MB each way). From the third exchange on the buffer is
  // an old replica's and is already resident.
  std::string header;
  auto send_header = [&] { return group.send(buddy, serialize_snapshot(snap)); };
  auto recv_header = [&]() -> Status {
    TSR_ASSIGN_OR_RETURN(header, group.recv(source));
    return Status();
  };
  TSR_RETURN_IF_ERROR(pos % 2 == 0 ? send_header() : recv_header());
  TSR_RETURN_IF_ERROR(pos % 2 == 0 ? recv_header() : send_header());
  // A malformed header is reported once the bytes have moved: returning now would leave the
  // buddy's send waiting for a receive that never comes.
  Result<ReplicaHeader> h = parse_replica_header(header, "rank " + std::to_string(source));
  const size_t expected = h.ok() ? replica_data_bytes(h->json) : 0;
  if (expected > replica.spare.capacity()) replica.spare = std::string();  // no copy of old bytes
  replica.spare.resize(expected);  // a size hint: recv_into resizes to what arrives
  auto send_data = [&] {
    return group.send(buddy, std::string_view(reinterpret_cast<const char*>(snap.data), bytes));
  };
  // Into the spare buffer: the replica held now survives a failed exchange.
  auto recv_data = [&] { return group.recv_into(source, &replica.spare); };
  TSR_RETURN_IF_ERROR(pos % 2 == 0 ? send_data() : recv_data());
  TSR_RETURN_IF_ERROR(pos % 2 == 0 ? recv_data() : send_data());
  TSR_RETURN_IF_ERROR(h.status());
  replica.owner = source;
  replica.step = h->json["step"].get<int64_t>();
  replica.entries = replica_entries(h->json, replica.spare.size(), source);
  replica.header = std::move(header);
  replica.bytes.swap(replica.spare);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status();
}

Status Checkpointer::Impl::apply_serialized(std::string_view header, std::string_view data,
                                            int from) {
  const std::string source = "rank " + std::to_string(from);
  TSR_ASSIGN_OR_RETURN(ReplicaHeader h, parse_replica_header(header, source));
  const StateRegistry& reg = self->registry_;
  try {
    const Json& tensors = h.json.at("tensors");
    if (tensors.size() != reg.tensors().size() || data.size() != reg.total_tensor_bytes() ||
        h.blobs.size() != reg.blobs().size()) {
      return failed_precondition(
          "replica from " + source + " does not match the registry of rank " +
          std::to_string(self->group_->rank()) + ": it has " + std::to_string(tensors.size()) +
          " tensors, " + std::to_string(data.size()) + " bytes, " + std::to_string(h.blobs.size()) +
          " blobs; the registry has " + std::to_string(reg.tensors().size()) + ", " +
          std::to_string(reg.total_tensor_bytes()) + ", " + std::to_string(reg.blobs().size()));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].at("name").get<std::string>() != reg.tensors()[i].name ||
          tensors[i].at("bytes").get<size_t>() != reg.tensors()[i].bytes()) {
        return failed_precondition("replica from " + source + ": tensor " + std::to_string(i) +
                                   " is '" + tensors[i].at("name").get<std::string>() + "' (" +
                                   std::to_string(tensors[i].at("bytes").get<size_t>()) +
                                   " bytes), registry has '" + reg.tensors()[i].name + "' (" +
                                   std::to_string(reg.tensors()[i].bytes()) + " bytes)");
      }
    }
  } catch (const std::exception& e) {
    return data_loss("replica header from " + source + ": " + e.what());
  }
  return write_back(reinterpret_cast<const std::byte*>(data.data()), h.blobs);
}

Result<RestoreResult> Checkpointer::restore() {
  impl_->wait_idle();
  if (impl_->shrink) {  // the snapshots and the replica are of the old, larger world
    return failed_precondition("restore on rank " + std::to_string(group_->rank()) +
                               ": after rebind_shrunk, reshard_from_memory or load first");
  }
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
      TSR_RETURN_IF_ERROR(impl_->apply_serialized(header, data, server[rank]));
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
