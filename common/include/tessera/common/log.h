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

#include "tessera/common/status.h"

namespace tessera::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Every subsystem a TSR_LOG line may name; TESSERA_LOG_SUBSYS accepts these only.
inline constexpr std::string_view kSubsystems[] = {"hal",     "topo", "coll",    "plan",
                                                   "overlap", "ckpt", "trainer", "launch"};

// Reads TESSERA_LOG / TESSERA_LOG_SUBSYS once, lazily. A malformed value cannot fail a log call:
// it is reported once on stderr as an error and the default is used; check_environment() is
// what makes it an error for the programs (the `tessera` CLI, hal::Registry::create). Tests may
// call configure() to override.
bool enabled(Level level, std::string_view subsystem);
Level threshold();
void configure(Level level, std::string_view subsystems);

// INVALID_ARGUMENT naming the variable and its value when TESSERA_LOG is not a level or
// TESSERA_LOG_SUBSYS names a subsystem outside kSubsystems; OK when both are unset or valid.
// Thread-safe (reads the environment only).
Status check_environment();

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
