// The committed form of a checkpoint: manifest.json and the shard files it lists, and the
// functions that read, list and verify them (used by the loader and by `tessera ckpt`).
//
// Every path in a manifest is relative to the checkpoint root, so a delta can reference the shard
// files of its base step. A chunk is stored as:
//   "zstd": zstd of the raw bytes, in this step's shard file;
//   "ref":  unchanged since the base: the base step's stored chunk (its file, offset, checksum);
//   "xor":  zstd of (raw XOR base raw), in this step's file; `base` locates the base chunk.
// `checksum` is xxh3-64 of the stored bytes, `hash` xxh3-64 of the raw bytes. The manifest carries
// its own checksum over its canonical JSON. All functions are thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/checkpoint/state.h"
#include "tessera/common/status.h"

namespace tessera::ckpt {

// The largest chunk a save writes or a manifest may declare: a chunk is read, decoded and XORed
// whole in memory, so a corrupt or hostile `chunk_bytes` must not drive a huge allocation.
inline constexpr uint64_t kMaxChunkBytes = uint64_t(1) << 30;
// The manifest's "format". 2: a file's checksum is over its chunks' checksums, not its bytes.
inline constexpr const char* kManifestFormat = "tessera-checkpoint-2";
// The largest manifest.json and `latest` (a step name) a reader reads: larger is DATA_LOSS naming
// the file, before anything is parsed. A manifest has ~200 bytes per chunk: 256 MiB is ~1.3
// million chunks (5 TB of state at the default 4 MiB chunks).
inline constexpr uint64_t kMaxManifestBytes = uint64_t(256) << 20;
inline constexpr uint64_t kMaxLatestBytes = 64;

struct ChunkLocation {
  std::string file;  // relative to the root: "step-12/rank-00003.shard"
  uint64_t offset = 0, stored = 0;
  uint64_t checksum = 0;  // xxh3-64 of the stored bytes
  // False when the bytes are stored as they are: zstd could not shrink them (dense fp32 state
  // usually), so the writer skipped it. Manifest field "zstd": false; absent means true.
  bool compressed = true;
};

struct ChunkRecord {
  std::string enc;    // "zstd", "ref", "xor"
  uint64_t raw = 0;   // uncompressed bytes
  uint64_t hash = 0;  // xxh3-64 of the raw bytes
  ChunkLocation data;
  std::optional<ChunkLocation> base;  // "xor" only: the base chunk (always "zstd")
};

struct ShardRecord {
  int rank = 0;
  Slice slice;
  uint64_t chunk_bytes = 0;  // raw bytes per chunk but the last
  std::vector<ChunkRecord> chunks;
};

struct TensorRecord {
  std::string name;
  std::string dtype;  // hal::dtype_name
  std::vector<int64_t> shape;
  std::vector<ShardRecord> shards;     // the written ones (one per distinct slice)
  std::optional<Placement> placement;  // how it is cut under a layout (layout.h), when registered
};

struct BlobRecord {
  std::string name;
  int rank = 0;
  bool replicated = false;
  uint64_t size = 0;
  std::vector<ChunkRecord> chunks;
};

struct FileRecord {
  std::string name;  // relative to the root
  uint64_t size = 0;
  // xxh3-64 over the checksums of the file's chunks in file order (u64 little-endian each); the
  // chunks tile the file, so verifying them and this covers every byte in one pass.
  uint64_t checksum = 0;
};

struct Manifest {
  int64_t step = 0;
  bool delta = false;
  int64_t base_step = -1;
  int world_size = 1;
  std::string layout;
  std::map<std::string, std::string> metadata;
  std::vector<TensorRecord> tensors;
  std::vector<BlobRecord> blobs;
  std::vector<FileRecord> files;
  int64_t created_unix_s = 0;

  uint64_t bytes_stored() const;  // sum of this step's files
  uint64_t bytes_raw() const;     // sum of the raw tensor and blob bytes
  const TensorRecord* find_tensor(std::string_view name) const;
};

// "step-12"
std::string step_dir_name(int64_t step);
// Canonical JSON with the manifest checksum; parse_manifest verifies it and names `where`. The
// checksum is no signature (anyone can recompute it), so parse_manifest also checks every value a
// reader sizes memory or opens files by, naming the field: file names (relative, no "..";
// fs.h path_in_root), shapes (extents >= 0, at most 2^50 bytes), slices inside the shape, chunk
// tables that tile each slice (count and raw sizes from chunk_bytes <= kMaxChunkBytes), ranks in
// 0..world_size-1, world_size in 1..kMaxLayoutRanks, a delta's base before its step.
std::string manifest_to_json(const Manifest& manifest);
Result<Manifest> parse_manifest(std::string_view text, std::string_view where);
// Reads <root>/step-N/manifest.json (a regular file inside root, at most kMaxManifestBytes).
Result<Manifest> read_manifest(const std::string& root, int64_t step);
// The step `latest` names; NOT_FOUND when there is no `latest`, DATA_LOSS when it is malformed,
// larger than kMaxLatestBytes, not a regular file (a FIFO) or a link leading outside root.
Result<int64_t> read_latest(const std::string& root);
// read_latest, and DATA_LOSS naming `latest` when the step it names has no step-N/manifest.json
// (what the tools check before calling a directory's `latest` committed).
Result<int64_t> read_latest_committed(const std::string& root);

struct StepInfo {
  int64_t step = 0;
  bool committed = false;  // step-N/ (else step-N.tmp/, an unfinished or aborted save)
  std::string dir;         // relative name
};
// Every step-N and step-N.tmp directory under root, oldest first.
Result<std::vector<StepInfo>> list_steps(const std::string& root);

// Presence and size of every listed file, and no file in step-N/ that the manifest does not list.
Status check_files(const std::string& root, const Manifest& manifest);
// check_files, then every chunk's checksum (and the base chunks of deltas), that the chunks tile
// each file and every file's checksum. `progress(done, total)` in bytes, optional.
Status verify_checkpoint(const std::string& root, const Manifest& manifest,
                         const std::function<void(uint64_t, uint64_t)>& progress = {});

// "00000000deadbeef"
std::string hex64(uint64_t value);

}  // namespace tessera::ckpt
