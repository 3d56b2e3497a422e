#include "trace.h"

#include <cerrno>
#include <cstring>

namespace tessera::overlap {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string Trace::rank_path(std::string_view path, int rank) {
  const std::string suffix = ".rank" + std::to_string(rank);
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return std::string(path) + suffix + ".json";
  }
  return std::string(path.substr(0, dot)) + suffix + std::string(path.substr(dot));
}

Result<std::unique_ptr<Trace>> Trace::open(std::string_view path, int rank) {
  std::string file_path = rank_path(path, rank);
  std::FILE* file = std::fopen(file_path.c_str(), "w");
  if (file == nullptr) {
    return unavailable("TESSERA_TRACE: cannot create '" + file_path + "': " + std::strerror(errno));
  }
  std::unique_ptr<Trace> trace(new Trace(file, std::move(file_path), rank));
  std::fputs("[\n", file);
  auto meta = [&](std::string_view what, int tid, std::string_view name) {
    trace->write_event(
        "{\"name\":\"" + std::string(what) + "\",\"ph\":\"M\",\"pid\":" + std::to_string(rank) +
        ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + json_string(name) + "}}");
  };
  meta("process_name", 0, "rank " + std::to_string(rank));
  meta("thread_name", kCompute, "compute");
  meta("thread_name", kComm, "communication stream");
  meta("thread_name", kEngine, "overlap engine");
  meta("thread_name", kGather, "parameter all-gather stream");
  trace->flush();
  return trace;
}

Trace::~Trace() {
  std::lock_guard lock(mutex_);
  std::fputs("\n]\n", file_);
  std::fclose(file_);
}

void Trace::write_event(const std::string& text) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(text.c_str(), file_);
}

void Trace::span(std::string_view name, std::string_view category, Lane lane,
                 Clock::time_point begin, Clock::time_point end, std::string_view args) {
  using std::chrono::duration;
  const double ts = duration<double, std::micro>(begin.time_since_epoch()).count();
  const double dur = std::max(0.0, duration<double, std::micro>(end - begin).count());
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, ",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d", ts, dur,
                rank_, int(lane));
  std::string text = "{\"name\":" + json_string(name) + ",\"cat\":" + json_string(category) +
                     ",\"ph\":\"X\"" + numbers;
  if (!args.empty()) text += ",\"args\":{" + std::string(args) + "}";
  text += "}";
  std::lock_guard lock(mutex_);
  write_event(text);
}

void Trace::flush() {
  std::fflush(file_);
}

}  // namespace tessera::overlap
