// tessera_fuzz_replay <target> <file-or-dir>...: runs one fuzz target over every file given (a
// directory: its regular files, sorted by name), as libFuzzer does when given files. Exits 0 when
// every input ran through (a crash, a sanitizer report or a failed FUZZ_CHECK aborts), 2 on
// usage errors: an unknown target, an unreadable path, or no input at all.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace tessera::fuzz {
namespace {

std::map<std::string, TargetFn>& registry() {
  static std::map<std::string, TargetFn> targets;
  return targets;
}

// The files `path` names: itself, or a directory's regular files in name order.
bool collect(const std::filesystem::path& path, std::vector<std::filesystem::path>* files) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      if (entry.is_regular_file()) found.push_back(entry.path());
    }
    std::sort(found.begin(), found.end());
    files->insert(files->end(), found.begin(), found.end());
    return !ec;
  }
  if (std::filesystem::is_regular_file(path, ec)) {
    files->push_back(path);
    return true;
  }
  return false;
}

}  // namespace

bool register_target(const char* name, TargetFn fn) {
  registry()[name] = fn;
  return true;
}

}  // namespace tessera::fuzz

int main(int argc, char** argv) {
  using tessera::fuzz::registry;
  if (argc < 3 || registry().count(argv[1]) == 0) {
    std::cerr << "usage: " << argv[0] << " <target> <file-or-dir>...\ntargets:";
    for (const auto& [name, fn] : registry()) std::cerr << ' ' << name;
    std::cerr << '\n';
    return 2;
  }
  const tessera::fuzz::TargetFn target = registry()[argv[1]];
  std::vector<std::filesystem::path> files;
  for (int i = 2; i < argc; ++i) {
    if (!tessera::fuzz::collect(argv[i], &files)) {
      std::cerr << argv[0] << ": cannot read '" << argv[i] << "'\n";
      return 2;
    }
  }
  if (files.empty()) {
    std::cerr << argv[0] << ": no inputs for target " << argv[1] << '\n';
    return 2;
  }
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::cerr << argv[0] << ": cannot read '" << file.string() << "'\n";
      return 2;
    }
    target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::cout << argv[1] << ": " << files.size() << " inputs ran\n";
  return 0;
}
