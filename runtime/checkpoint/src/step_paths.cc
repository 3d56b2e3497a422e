#include "step_paths.h"

#include <cstdio>

#include "fs.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::ckpt {

StepPaths::StepPaths(std::string root_dir, int64_t step_number)
    : root(std::move(root_dir)),
      step(step_number),
      rel(step_dir_name(step_number)),
      final_dir(fs::join(root, rel)),
      tmp_dir(final_dir + ".tmp"),
      latest(fs::join(root, "latest")) {}

std::string StepPaths::shard_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.shard", rank);
  return name;
}

std::string StepPaths::tmp_manifest() const {
  return fs::join(tmp_dir, "manifest.json");
}

std::string StepPaths::tmp_shard(int rank) const {
  return fs::join(tmp_dir, shard_file_name(rank));
}

std::string StepPaths::shard_name(int rank) const {
  return rel + "/" + shard_file_name(rank);
}

}  // namespace tessera::ckpt
