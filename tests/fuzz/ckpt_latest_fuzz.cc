// A checkpoint directory's `latest` (runtime/checkpoint manifest.h read_latest) and the names a
// manifest gives its files (fs.h check_relative_name, path_in_root). The input is written as
// <root>/latest and read back; it is also resolved as a name under a root holding a symlink out
// of it ("up" -> ".."), a symlink loop and a real step: whatever resolves must lie inside root.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fs.h"
#include "fuzz_target.h"
#include "tessera/checkpoint/manifest.h"

namespace {

namespace ckpt = tessera::ckpt;

// A fresh checkpoint root for this process, removed at exit.
struct Root {
  std::string path;
  Root() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/tsr-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path = pattern;
    std::filesystem::create_directories(path + "/step-7");
    std::ofstream(path + "/step-7/manifest.json") << "{}";
    std::filesystem::create_symlink("..", path + "/up");
    std::filesystem::create_symlink("loop", path + "/loop");
    std::filesystem::create_symlink("step-7", path + "/seven");
  }
  ~Root() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const Root& root() {
  static const Root r;
  return r;
}

}  // namespace

TESSERA_FUZZ_TARGET(ckpt_latest) {
  const std::string_view text = tessera::fuzz::as_text(data, size);
  const std::string& dir = root().path;
  {
    std::ofstream out(dir + "/latest", std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  auto step = ckpt::read_latest(dir);
  if (step.ok()) FUZZ_CHECK(*step >= 0, "read_latest accepted a negative step");
  (void)ckpt::read_latest_committed(dir);

  if (ckpt::fs::check_relative_name(text).ok()) {
    FUZZ_CHECK(!text.empty() && text.front() != '/', "accepted an empty or absolute name");
  }
  auto resolved = ckpt::fs::path_in_root(dir, text);
  if (resolved.ok()) {
    std::error_code ec;
    const auto canonical_root = std::filesystem::weakly_canonical(dir, ec);
    const auto canonical = std::filesystem::weakly_canonical(*resolved, ec);
    if (!ec) {
      const std::string prefix = canonical_root.string() + "/";
      FUZZ_CHECK(canonical.string().rfind(prefix, 0) == 0 || canonical == canonical_root,
                 "path_in_root resolved a name outside the root");
    }
  }
  return 0;
}
