#include "expectations.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::cts {
namespace {

std::string_view trim(std::string_view text) {
  const char* kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(kSpace);
  return text.substr(begin, end - begin + 1);
}

Status malformed(const std::string& file, int line, const std::string& why, std::string_view text) {
  return invalid_argument(file + ":" + std::to_string(line) + ": " + why + " in '" +
                          std::string(text) +
                          "'; expected '<unsupported|xfail> <Suite.Test pattern> : <reason>'");
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matcher with one backtrack point: linear enough for test names.
  size_t p = 0;
  size_t t = 0;
  size_t star = std::string_view::npos;
  size_t star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string cite(const Expectation& entry) {
  return entry.file + ":" + std::to_string(entry.line) + " (" + entry.reason + ")";
}

Result<Expectations> Expectations::parse(std::string_view text, const std::string& file) {
  Expectations out;
  out.file_ = file;
  int line_number = 0;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    const std::string_view raw = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    ++line_number;
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;

    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return malformed(file, line_number, "no ':' before the reason", line);
    }
    const std::string_view head = trim(line.substr(0, colon));
    const std::string_view reason = trim(line.substr(colon + 1));
    const size_t space = head.find_first_of(" \t");
    if (space == std::string_view::npos) {
      return malformed(file, line_number, "missing the test pattern", line);
    }
    const std::string_view kind = head.substr(0, space);
    const std::string_view pattern = trim(head.substr(space));
    Expectation entry;
    if (kind == "unsupported") {
      entry.kind = Expectation::Kind::kUnsupported;
    } else if (kind == "xfail") {
      entry.kind = Expectation::Kind::kXfail;
    } else {
      return malformed(file, line_number, "unknown kind '" + std::string(kind) + "'", line);
    }
    if (pattern.find_first_of(" \t") != std::string_view::npos) {
      return malformed(file, line_number, "a pattern has no spaces", line);
    }
    if (pattern.find('.') == std::string_view::npos) {
      return malformed(file, line_number,
                       "pattern '" + std::string(pattern) + "' is not of the form Suite.Test",
                       line);
    }
    if (reason.empty()) {
      return malformed(file, line_number, "the reason is empty (say why)", line);
    }
    entry.pattern = std::string(pattern);
    entry.reason = std::string(reason);
    entry.file = file;
    entry.line = line_number;
    out.entries_.push_back(std::move(entry));
  }
  return out;
}

Result<Expectations> Expectations::load(const std::string& path) {
  // A directory opens as a stream that reads nothing, which would pass as an empty file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return not_found("expectations file " + path + " is a directory");
  }
  std::ifstream in(path);
  if (!in) return not_found("cannot read expectations file " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

const Expectation* Expectations::find(std::string_view test_name) const {
  for (const auto& entry : entries_) {
    if (glob_match(entry.pattern, test_name)) return &entry;
  }
  return nullptr;
}

}  // namespace tessera::cts
