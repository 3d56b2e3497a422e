// The algorithms of the host reference CCL, run on a stream's worker. Collectives move data in
// chunks through the ranks' slots (one slot half per chunk, alternating, so one barrier per
// exchange suffices: a rank refills a half only after every rank has passed the barrier that
// follows its reads of it):
//   allreduce       each rank posts its chunk; rank r reduces part r of the chunk from every
//                   slot (in source order 0..N-1, with the backend's kernels) into its own slot;
//                   then every rank copies every part out. Every element is reduced once, by one
//                   rank, so all ranks hold the same bits, those of reduce_async.
//   reduce_scatter  each rank posts its N blocks; rank r reduces block r of every slot.
//   allgather       each rank posts its chunk; every rank copies every slot out.
//   alltoall        each rank posts its N blocks; rank r copies block r of every slot.
//   broadcast       the root posts; the others copy.
// send/recv go through a per-pair channel, one chunk at a time.
#include <algorithm>
#include <cstring>

#include "ccl.h"
#include "reduce.h"
#include "store.h"

namespace tessera::host::ccl {
namespace {

// Writes into the shared segment bypass the cache from this size on (a peer core reads them).
constexpr size_t kStreamToSegment = size_t(64) << 10;

void copy(void* dst, const void* src, size_t bytes, bool streaming) {
  if (bytes > 0) store_block(dst, src, bytes, streaming);
}

// Part `r` of `len` elements split N ways: [lo, hi).
void part(size_t len, int32_t r, int32_t n, size_t* lo, size_t* hi) {
  *lo = len * size_t(r) / size_t(n);
  *hi = len * size_t(r + 1) / size_t(n);
}

class Runner {
 public:
  Runner(const Op& op, std::string* message)
      : op_(op),
        c_(*op.comm),
        seg_(*c_.segment),
        n_(c_.nranks),
        me_(c_.rank),
        e_(op.element),
        message_(message),
        streaming_out_(op.count * op.element >= kStreamingStoreThreshold) {}

  tsr_status run() {
    switch (op_.kind) {
      case Kind::kAllReduce: return allreduce();
      case Kind::kReduceScatter: return blocks(/*reduce=*/true);
      case Kind::kAllToAll: return blocks(/*reduce=*/false);
      case Kind::kAllGather: return allgather();
      case Kind::kBroadcast: return broadcast();
      default: break;
    }
    *message_ = std::string(op_.name) + " is not a collective";
    return TSR_INTERNAL;
  }

 private:
  // Takes the next slot half and returns it.
  int next_half() {
    int h = c_.half;
    c_.half ^= 1;
    return h;
  }
  tsr_status barrier() {
    store_fence();  // streaming stores land before the counter says so
    return seg_.barrier(++c_.generation, op_.name, message_);
  }

  tsr_status allreduce() {
    const size_t chunk = seg_.half_slot_bytes() / e_;
    const char* srcs[kMaxRanks];
    for (size_t b = 0; b < op_.count; b += chunk) {
      const size_t len = std::min(chunk, op_.count - b);
      const int h = next_half();
      char* mine = seg_.slot(me_, h);
      copy(mine, op_.send + b * e_, len * e_, len * e_ >= kStreamToSegment);
      if (tsr_status s = barrier(); s != TSR_OK) return s;
      size_t lo, hi;
      part(len, me_, n_, &lo, &hi);
      if (hi > lo) {
        for (int32_t j = 0; j < n_; ++j) srcs[j] = seg_.slot(j, h) + lo * e_;
        reduce_range(mine + lo * e_, reinterpret_cast<const void* const*>(srcs), n_, 0, hi - lo,
                     op_.dtype, op_.op, (hi - lo) * e_ >= kStreamToSegment);
      }
      if (tsr_status s = barrier(); s != TSR_OK) return s;
      for (int32_t j = 0; j < n_; ++j) {
        part(len, j, n_, &lo, &hi);
        copy(op_.recv + (b + lo) * e_, seg_.slot(j, h) + lo * e_, (hi - lo) * e_, streaming_out_);
      }
    }
    store_fence();
    return TSR_OK;
  }

  tsr_status allgather() {
    const size_t chunk = seg_.half_slot_bytes() / e_;
    for (size_t b = 0; b < op_.count; b += chunk) {
      const size_t len = std::min(chunk, op_.count - b);
      const int h = next_half();
      copy(seg_.slot(me_, h), op_.send + b * e_, len * e_, len * e_ >= kStreamToSegment);
      if (tsr_status s = barrier(); s != TSR_OK) return s;
      for (int32_t j = 0; j < n_; ++j) {
        copy(op_.recv + (size_t(j) * op_.count + b) * e_, seg_.slot(j, h), len * e_,
             streaming_out_);
      }
    }
    store_fence();
    return TSR_OK;
  }

  tsr_status broadcast() {
    const size_t chunk = seg_.half_slot_bytes() / e_;
    const bool root = me_ == op_.peer;
    for (size_t b = 0; b < op_.count; b += chunk) {
      const size_t len = std::min(chunk, op_.count - b);
      const int h = next_half();
      if (root) {
        copy(seg_.slot(me_, h), op_.send + b * e_, len * e_, len * e_ >= kStreamToSegment);
      }
      if (tsr_status s = barrier(); s != TSR_OK) return s;
      if (!root || op_.send != op_.recv) {
        copy(op_.recv + b * e_, seg_.slot(op_.peer, h), len * e_, streaming_out_);
      }
    }
    store_fence();
    return TSR_OK;
  }

  // reduce_scatter (reduce) and alltoall (copy): each rank posts one block per destination.
  tsr_status blocks(bool reduce) {
    const size_t chunk = seg_.half_slot_bytes() / (size_t(n_) * e_);
    const char* srcs[kMaxRanks];
    for (size_t b = 0; b < op_.count; b += chunk) {
      const size_t len = std::min(chunk, op_.count - b);
      const int h = next_half();
      char* mine = seg_.slot(me_, h);
      for (int32_t j = 0; j < n_; ++j) {
        copy(mine + size_t(j) * len * e_, op_.send + (size_t(j) * op_.count + b) * e_, len * e_,
             len * e_ >= kStreamToSegment);
      }
      if (tsr_status s = barrier(); s != TSR_OK) return s;
      for (int32_t j = 0; j < n_; ++j) srcs[j] = seg_.slot(j, h) + size_t(me_) * len * e_;
      if (reduce) {
        reduce_range(op_.recv + b * e_, reinterpret_cast<const void* const*>(srcs), n_, 0, len,
                     op_.dtype, op_.op, streaming_out_);
      } else {
        for (int32_t j = 0; j < n_; ++j) {
          copy(op_.recv + (size_t(j) * op_.count + b) * e_, srcs[j], len * e_, streaming_out_);
        }
      }
    }
    store_fence();
    return TSR_OK;
  }

  const Op& op_;
  Comm& c_;
  Segment& seg_;
  const int32_t n_;
  const int32_t me_;
  const size_t e_;
  std::string* message_;
  const bool streaming_out_;
};

// Progress of one send or recv.
struct Transfer {
  const Op* op = nullptr;
  size_t total;  // bytes
  size_t done = 0;
};

Channel& channel_of(const Op& op) {
  Segment& seg = *op.comm->segment;
  return op.kind == Kind::kSend ? seg.channel(op.comm->rank, op.peer)
                                : seg.channel(op.peer, op.comm->rank);
}

// Whether `t` can move a chunk now.
bool can_progress(const Transfer& t) {
  Channel& ch = channel_of(*t.op);
  return t.op->kind == Kind::kSend ? ch.posted.load() == ch.taken.load()
                                   : ch.posted.load() > ch.taken.load();
}

// Moves one chunk of `t`. Fails when a receiver expects another size than the sender sends.
tsr_status step(Transfer& t, std::string* message) {
  const Op& op = *t.op;
  Segment& seg = *op.comm->segment;
  Channel& ch = channel_of(op);
  if (op.kind == Kind::kSend) {
    const size_t len = std::min(seg.channel_bytes(), t.total - t.done);
    copy(seg.channel_buffer(op.comm->rank, op.peer), op.send + t.done, len,
         len >= kStreamToSegment);
    store_fence();
    ch.bytes.store(len);
    ch.total.store(t.total);
    ch.posted.fetch_add(1);
    t.done += len;
  } else {
    const uint64_t sent_total = ch.total.load();
    const size_t len = size_t(ch.bytes.load());
    if (sent_total != t.total || t.done + len > t.total) {
      *message = "rank " + std::to_string(op.comm->rank) + ": recv from rank " +
                 std::to_string(op.peer) + " expects " + std::to_string(t.total) +
                 " bytes but rank " + std::to_string(op.peer) + " sends " +
                 std::to_string(sent_total) + " (send and recv counts and dtypes must match)";
      return TSR_INVALID_ARGUMENT;
    }
    copy(op.recv + t.done, seg.channel_buffer(op.peer, op.comm->rank), len, false);
    ch.taken.fetch_add(1);
    t.done += len;
  }
  seg.wake();
  return TSR_OK;
}

}  // namespace

tsr_status run_collective(const Op& op, std::string* message) {
  return Runner(op, message).run();
}

tsr_status run_point_to_point(const std::vector<const Op*>& ops, std::string* message) {
  std::vector<Transfer> transfers;
  for (const Op* op : ops) transfers.push_back(Transfer{op, op->count * op->element});
  // Only the first unfinished transfer of each channel may move: messages on a channel keep their
  // order. `first` marks those, recomputed after every pass.
  std::vector<bool> first(transfers.size());
  auto mark_first = [&] {
    bool any = false;
    for (size_t i = 0; i < transfers.size(); ++i) {
      first[i] = false;
      if (transfers[i].done >= transfers[i].total) continue;
      bool earlier = false;
      for (size_t k = 0; k < i && !earlier; ++k) {
        earlier = transfers[k].done < transfers[k].total &&
                  &channel_of(*transfers[k].op) == &channel_of(*transfers[i].op);
      }
      first[i] = !earlier;
      any = true;
    }
    return any;
  };
  while (mark_first()) {
    bool moved = false;
    for (size_t i = 0; i < transfers.size(); ++i) {
      if (!first[i] || !can_progress(transfers[i])) continue;
      if (tsr_status s = step(transfers[i], message); s != TSR_OK) return s;
      moved = true;
    }
    if (moved) continue;
    // Nothing could move: sleep until a peer changes a channel. The wait is on the first
    // transfer's segment; a group spanning several communicators re-polls every 20 ms at worst.
    const Transfer* waiting = nullptr;
    for (size_t i = 0; i < transfers.size() && waiting == nullptr; ++i) {
      if (first[i]) waiting = &transfers[i];
    }
    const Op& op = *waiting->op;
    std::string what = std::string(op.kind == Kind::kSend ? "rank " : "a message from rank ") +
                       std::to_string(op.peer) +
                       (op.kind == Kind::kSend ? " to take the previous message" : "");
    if (tsr_status s = op.comm->segment->wait(
            [&] {
              for (size_t i = 0; i < transfers.size(); ++i) {
                if (first[i] && can_progress(transfers[i])) return true;
              }
              return false;
            },
            op.name, what.c_str(), message);
        s != TSR_OK) {
      return s;
    }
  }
  return TSR_OK;
}

}  // namespace tessera::host::ccl
