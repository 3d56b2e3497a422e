// Every path of one step of a checkpoint root, named once: the committed directory step-N/, the
// temporary step-N.tmp/ a save or reshard writes into before publishing it, the manifest, the
// shard files (as opened and as a manifest names them) and `latest`.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::ckpt {

struct StepPaths {
  StepPaths(std::string root, int64_t step);

  // "rank-00003.shard": the file one rank writes in a step directory.
  static std::string shard_file_name(int rank);

  std::string root;
  int64_t step;
  std::string rel;        // "step-N", relative to the root
  std::string final_dir;  // <root>/step-N: committed once renamed there
  std::string tmp_dir;    // <root>/step-N.tmp: written, then renamed to final_dir
  std::string latest;     // <root>/latest: names the newest committed step

  std::string tmp_manifest() const;        // <tmp_dir>/manifest.json
  std::string tmp_shard(int rank) const;   // <tmp_dir>/rank-R.shard
  std::string shard_name(int rank) const;  // "step-N/rank-R.shard", as a manifest names it
};

}  // namespace tessera::ckpt
