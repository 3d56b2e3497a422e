// Offline resharding: rewrite a committed checkpoint saved under one parallel layout as a
// committed checkpoint laid out for another (`tessera ckpt reshard SRC --to PLAN.json --out DST`).
// Each tensor's slice on each rank of the new layout follows its Placement (layout.h), taken from
// the source manifest (recorded at save time with StateRegistry::set_placement) or from the
// layout file; a tensor with neither is written whole (every rank holds it). Only the source
// chunks that overlap a written slice are read, every one verified against its checksum. The
// result is committed like a save: step-N.tmp/, fsynced shards and manifest, rename to step-N/,
// then `latest`. Thread-safe (no shared state); memory: the largest tensor slice of one rank.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/layout.h"
#include "tessera/common/status.h"

namespace tessera::ckpt {

struct ReshardOptions {
  std::optional<int64_t> step;                  // nullopt: the step `latest` names
  ParallelLayout to;                            // the layout to write
  std::map<std::string, Placement> placements;  // override (or supply) the manifest's
  size_t chunk_bytes = 0;                       // 0: the source's chunk size
  int zstd_level = -1;
  bool fsync = true;
  bool direct_io = true;                                        // as CheckpointOptions::direct_io
  std::function<void(uint64_t done, uint64_t total)> progress;  // raw bytes written, optional
};

struct ReshardResult {
  int64_t step = -1;
  int world_size = 0;
  uint64_t bytes_read = 0, chunks_read = 0;  // from the source
  uint64_t bytes_written = 0, bytes_raw = 0;
  std::vector<std::string> whole;          // tensors without a placement: written whole
  std::vector<std::string> dropped_blobs;  // "rng of rank 5": per-rank blobs of ranks >= new size
};

// Reads `src_root` (step options.step or `latest`) and commits the same step under `dst_root`.
// Errors name the file or field: no such SRC, an uncommitted step (step-N.tmp, or newer than
// `latest`), a checkpoint failing verification, a placement naming an unknown tensor, a degree
// that does not divide a tensor dim, DST equal to SRC or already holding that step or a newer one.
Result<ReshardResult> reshard_checkpoint(const std::string& src_root, const std::string& dst_root,
                                         const ReshardOptions& options);

}  // namespace tessera::ckpt
