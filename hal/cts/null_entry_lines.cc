#include "null_entry_lines.h"

#include <algorithm>

namespace tessera::cts {
namespace {

std::string suite_of(const std::string& test) {
  return test.substr(0, test.find('.'));
}

void add_unique(std::vector<std::string>* out, const std::vector<std::string>& more) {
  for (const auto& entry : more) {
    if (std::find(out->begin(), out->end(), entry) == out->end()) out->push_back(entry);
  }
}

}  // namespace

std::vector<NullEntryLine> suggest_null_entry_lines(
    const std::vector<std::string>& all_tests,
    const std::function<std::vector<std::string>(const std::string&)>& null_entries_of,
    const std::function<bool(const std::string&)>& needs_line) {
  std::vector<NullEntryLine> out;
  size_t begin = 0;
  while (begin < all_tests.size()) {
    // One suite at a time: GoogleTest registers a suite's tests together.
    const std::string suite = suite_of(all_tests[begin]);
    size_t end = begin;
    while (end < all_tests.size() && suite_of(all_tests[end]) == suite) ++end;

    bool whole_suite = true;  // every test of the suite calls a NULL entry
    NullEntryLine suite_line{suite + ".*", {}, 0};
    std::vector<NullEntryLine> test_lines;
    for (size_t i = begin; i < end; ++i) {
      const std::vector<std::string> entries = null_entries_of(all_tests[i]);
      if (entries.empty()) {
        whole_suite = false;
        continue;
      }
      add_unique(&suite_line.entries, entries);
      if (!needs_line(all_tests[i])) continue;
      ++suite_line.tests;
      test_lines.push_back(NullEntryLine{all_tests[i], entries, 1});
    }
    if (!test_lines.empty()) {
      if (whole_suite) {
        out.push_back(std::move(suite_line));
      } else {
        for (auto& line : test_lines) out.push_back(std::move(line));
      }
    }
    begin = end;
  }
  return out;
}

std::string null_entries_phrase(const std::vector<std::string>& entries) {
  std::string out;
  for (const auto& entry : entries) out += (out.empty() ? "" : ", ") + entry;
  return out + (entries.size() > 1 ? " are NULL" : " is NULL");
}

std::string expectation_text(const NullEntryLine& line) {
  return "unsupported " + line.pattern + " : " + null_entries_phrase(line.entries);
}

}  // namespace tessera::cts
