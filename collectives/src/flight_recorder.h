// The last operations of one rank, kept in a ring so that a hang or a failure can be diagnosed
// after the fact: sequence number, operation, dtype, count, peer/root, algorithm, route, state
// and times.
// Dumped into the log on a timeout or failure, and on request (Communicator::flight_record).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/coll/communicator.h"

namespace tessera::coll {

class FlightRecorder {
 public:
  enum class State : uint8_t { kQueued, kRunning, kDone, kFailed };
  struct Entry {
    uint64_t seq = 0;
    OpKind op = OpKind::kBarrier;
    DType dtype = DType::kU8;
    uint64_t count = 0;
    int peer = -1;               // root or peer, -1 when none
    std::string_view algorithm;  // static names from the tuner
    std::string_view route;      // "host", "staged", "native" (static)
    State state = State::kQueued;
    uint32_t step = 0;  // the step reached, updated on failure
    std::chrono::system_clock::time_point queued, started, finished;
    std::string error;
  };

  explicit FlightRecorder(size_t capacity = 64) : capacity_(capacity) {}

  // Returns the entry's id, used to update it.
  uint64_t record(Entry entry);
  void started(uint64_t id, std::string_view algorithm);
  void finished(uint64_t id, const Status& status, uint32_t step);
  // One line per entry, oldest first.
  std::string dump(int rank) const;

 private:
  Entry* find(uint64_t id);
  mutable std::mutex mutex_;
  size_t capacity_;
  uint64_t next_id_ = 0;
  std::vector<std::pair<uint64_t, Entry>> ring_;
};

}  // namespace tessera::coll
