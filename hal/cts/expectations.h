// A backend's expectations file: which CTS tests it does not support (skipped, with the reason)
// and which it is known to fail (run; failures captured; an unexpected pass is an error).
//
//   # comment
//   unsupported Ipc.* : the driver has no inter-process memory sharing
//   xfail Cast.RoundsF64ToF16Once : converts through f32 (double rounding), fix tracked in #123
//
// Patterns match "Suite.Test" names; '*' matches any run of characters, '?' one character.
// The first entry that matches a test decides. See hal/cts/README.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"

namespace tessera::cts {

struct Expectation {
  enum class Kind { kUnsupported, kXfail };
  Kind kind = Kind::kUnsupported;
  std::string pattern;
  std::string reason;
  std::string file;  // as given, for messages
  int line = 0;
};

class Expectations {
 public:
  // Parses `text`; `file` names it in errors ("<file>:<line>: ..."). INVALID_ARGUMENT on a
  // malformed line.
  static Result<Expectations> parse(std::string_view text, const std::string& file);
  // Reads and parses a file; NOT_FOUND when it cannot be read.
  static Result<Expectations> load(const std::string& path);

  // The first entry whose pattern matches `test_name` ("Suite.Test"), or nullptr.
  const Expectation* find(std::string_view test_name) const;

  const std::vector<Expectation>& entries() const { return entries_; }
  const std::string& file() const { return file_; }  // "" when no file was read

 private:
  std::vector<Expectation> entries_;
  std::string file_;
};

// Shell-style match of '*' and '?' over the whole of `text`.
bool glob_match(std::string_view pattern, std::string_view text);

// "<file>:<line> (<reason>)": how an entry is cited in messages.
std::string cite(const Expectation& entry);

}  // namespace tessera::cts
