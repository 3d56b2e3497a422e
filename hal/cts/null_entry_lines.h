// The expectations lines a backend still needs for its NULL optional entries: grouped by suite
// ("unsupported Reduce.* : reduce_async is NULL") so a port does not list ~260 tests by hand.
// Used for the summary at the end of a run and by --write-expectations; pure functions over test
// names, so the self-checks can test them without a backend.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tessera::cts {

// One suggested `unsupported <pattern> : <entries> NULL` line.
struct NullEntryLine {
  std::string pattern;               // "Suite.*", or one "Suite.Test"
  std::vector<std::string> entries;  // the NULL entries its tests call, first use first
  int tests = 0;                     // the tests it covers that still needed a line
};

// Lines covering every test of `all_tests` ("Suite.Test", registration order) for which
// `null_entries_of` is non-empty and `needs_line` is true (not yet listed as unsupported, and in
// the selection that is being reported). A suite whose every test calls a NULL entry gets one
// "Suite.*" line; in any other suite each such test gets its own line, so no line ever skips a
// test that could run.
std::vector<NullEntryLine> suggest_null_entry_lines(
    const std::vector<std::string>& all_tests,
    const std::function<std::vector<std::string>(const std::string&)>& null_entries_of,
    const std::function<bool(const std::string&)>& needs_line);

// "reduce_async is NULL", "ipc_get_handle, ipc_open_handle are NULL".
std::string null_entries_phrase(const std::vector<std::string>& entries);

// "unsupported Reduce.* : reduce_async is NULL"
std::string expectation_text(const NullEntryLine& line);

}  // namespace tessera::cts
