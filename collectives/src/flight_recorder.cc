#include "flight_recorder.h"

#include <cstdio>
#include <ctime>

namespace tessera::coll {
namespace {

const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::kQueued: return "queued";
    case FlightRecorder::State::kRunning: return "running";
    case FlightRecorder::State::kDone: return "done";
    case FlightRecorder::State::kFailed: return "FAILED";
  }
  return "?";
}

std::string clock_text(std::chrono::system_clock::time_point t) {
  if (t.time_since_epoch().count() == 0) return "-";
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = std::time_t(us / 1000000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[40];
  std::snprintf(text, sizeof text, "%02d:%02d:%02d.%06lld", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us % 1000000));
  return text;
}

}  // namespace

uint64_t FlightRecorder::record(Entry entry) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  if (ring_.size() < capacity_) {
    ring_.emplace_back(id, std::move(entry));
  } else {
    ring_[id % capacity_] = {id, std::move(entry)};
  }
  return id;
}

FlightRecorder::Entry* FlightRecorder::find(uint64_t id) {
  auto& slot = ring_[id % capacity_];
  return slot.first == id ? &slot.second : nullptr;
}

void FlightRecorder::started(uint64_t id, std::string_view algorithm) {
  std::lock_guard lock(mutex_);
  if (Entry* e = find(id)) {
    e->state = State::kRunning;
    e->algorithm = algorithm;
    e->started = e->queued;  // queued just before (blocking calls); the proxy updates it
  }
}

void FlightRecorder::finished(uint64_t id, const Status& status, uint32_t step) {
  std::lock_guard lock(mutex_);
  if (Entry* e = find(id)) {
    e->state = status.ok() ? State::kDone : State::kFailed;
    e->finished = std::chrono::system_clock::now();
    e->step = step;
    if (!status.ok()) e->error = status.to_string();
  }
}

std::string FlightRecorder::dump(int rank) const {
  std::lock_guard lock(mutex_);
  std::string out;
  const size_t n = ring_.size();
  const uint64_t first = next_id_ > n ? next_id_ - n : 0;
  for (uint64_t id = first; id < next_id_; ++id) {
    const auto& [slot_id, e] = ring_[id % capacity_];
    if (slot_id != id) continue;
    char line[512];
    std::snprintf(
        line, sizeof line,
        "rank %d seq %llu %s %s x %llu peer %d algo %s route %s step %u %s queued %s started %s "
        "finished %s%s%s\n",
        rank, static_cast<unsigned long long>(e.seq), std::string(op_name(e.op)).c_str(),
        std::string(hal::dtype_name(e.dtype)).c_str(), static_cast<unsigned long long>(e.count),
        e.peer, e.algorithm.empty() ? "-" : std::string(e.algorithm).c_str(),
        e.route.empty() ? "-" : std::string(e.route).c_str(), e.step, state_name(e.state),
        clock_text(e.queued).c_str(), clock_text(e.started).c_str(), clock_text(e.finished).c_str(),
        e.error.empty() ? "" : " error: ", e.error.c_str());
    out += line;
  }
  return out;
}

}  // namespace tessera::coll
