// One logger for the whole project, in the spirit of NCCL_DEBUG.
//
//   TESSERA_LOG=error|warn|info|debug|trace     (default warn)
//   TESSERA_LOG_SUBSYS=hal,coll,ckpt,...        (default: all; a leading ^ excludes: ^hal)
//
// Usage: TSR_LOG(kInfo, "hal") << "loaded backend " << name;
// The stream expression is evaluated only when the level and subsystem are enabled. Thread-safe:
// each message is written with one call.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace tessera::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Reads TESSERA_LOG / TESSERA_LOG_SUBSYS once, lazily. Tests may call configure() to override.
bool enabled(Level level, std::string_view subsystem);
Level threshold();
void configure(Level level, std::string_view subsystems);

// Writes "[tessera <level> <subsys> pid=<pid>] message\n" to stderr.
void write(Level level, std::string_view subsystem, std::string_view message);

// Parses "warn", "INFO", ...; returns false for unknown names.
bool parse_level(std::string_view text, Level* out);

class Line {
 public:
  Line(Level level, std::string_view subsystem) : level_(level), subsystem_(subsystem) {}
  ~Line() { write(level_, subsystem_, stream_.str()); }
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  std::ostringstream& stream() { return stream_; }

 private:
  Level level_;
  std::string_view subsystem_;
  std::ostringstream stream_;
};

}  // namespace tessera::log

// Lowers the precedence of the streamed expression below ?: (the glog idiom), so TSR_LOG is a
// single expression and safe in an unbraced if/else.
namespace tessera::log {
struct Voidify {
  void operator&(std::ostream&) {}
};
}  // namespace tessera::log

#define TSR_LOG(level, subsystem)                                   \
  !::tessera::log::enabled(::tessera::log::Level::level, subsystem) \
      ? (void)0                                                     \
      : ::tessera::log::Voidify() &                                 \
            ::tessera::log::Line(::tessera::log::Level::level, subsystem).stream()
