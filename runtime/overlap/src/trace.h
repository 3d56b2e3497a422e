// A Chrome/Perfetto trace file (JSON array format) for one rank: complete events ("ph":"X") with
// microsecond timestamps, written as they come and flushed after every step, so a job that dies
// still leaves a readable file (viewers accept the missing closing bracket). Thread-safe.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "tessera/common/status.h"

namespace tessera::overlap {

using Clock = std::chrono::steady_clock;

class Trace {
 public:
  // Lanes of one rank's timeline.
  enum Lane : int { kCompute = 1, kComm = 2, kEngine = 3, kGather = 4 };

  // "trace.json" for rank 3 -> "trace.rank3.json"; no extension -> "<path>.rank3.json".
  static std::string rank_path(std::string_view path, int rank);
  // Creates (truncates) the file and writes the process and lane names.
  static Result<std::unique_ptr<Trace>> open(std::string_view path, int rank);
  ~Trace();  // closes the JSON array

  // `args` is the inside of a JSON object ("\"bytes\": 12, \"algo\": \"ring\"") or empty.
  void span(std::string_view name, std::string_view category, Lane lane, Clock::time_point begin,
            Clock::time_point end, std::string_view args = {});
  void flush();
  const std::string& path() const { return path_; }

 private:
  Trace(std::FILE* file, std::string path, int rank)
      : file_(file), path_(std::move(path)), rank_(rank) {}
  void write_event(const std::string& text);
  std::mutex mutex_;
  std::FILE* file_;
  std::string path_;
  int rank_;
  bool first_ = true;
};

// A JSON string literal (quotes and escapes).
std::string json_string(std::string_view text);

}  // namespace tessera::overlap
