// Chunk encoding for the checkpointer: xxh3-64 checksums, zstd compression, the XOR delta, the
// writer that appends chunks to a shard file and the reader that verifies and decodes them.
// Objects here are not thread-safe; each thread uses its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fs.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/common/status.h"

namespace tessera::ckpt::codec {

uint64_t xxh3(const void* data, size_t bytes);

class Compressor {
 public:
  Compressor();
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  // Replaces *out with zstd(src) at `level`.
  Status compress(const void* src, size_t bytes, int level, std::string* out);

  // What to store for one chunk: zstd(src) in *out, or src itself (the view points at src,
  // *compressed = false) when zstd saves less than 1/32 of it. Chunks of 256 KiB and more are
  // probed first: four 16 KiB slices spread over the chunk are compressed, and when they do not
  // shrink the chunk is stored without trying the rest (dense fp32 weights and Adam moments do not
  // compress at the fast levels; a full attempt costs a pass at ~3 GB/s per core, the probe 1/64).
  Result<std::string_view> encode(const void* src, size_t bytes, int level, std::string* out,
                                  bool* compressed);

 private:
  bool worth_compressing(const void* src, size_t bytes, int level);
  void* cctx_;
  std::string probe_in_, probe_out_;
};

class Decompressor {
 public:
  Decompressor();
  ~Decompressor();
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
  // Exactly `raw` bytes into dst, else DATA_LOSS naming `what`.
  Status decompress(const void* src, size_t bytes, void* dst, size_t raw, std::string_view what);
  // decompress(), or a copy when the location says the bytes were stored uncompressed.
  Status decode(const ChunkLocation& where, const void* src, size_t bytes, void* dst, size_t raw,
                std::string_view what);

 private:
  void* dctx_;
};

// dst[i] ^= src[i]
void xor_into(void* dst, const void* src, size_t bytes);

// Sleeps so that the bytes accounted since start() do not exceed `mbps` MB/s (1e6 B/s); 0: off.
class RateLimiter {
 public:
  explicit RateLimiter(double mbps) : mbps_(mbps), start_(std::chrono::steady_clock::now()) {}
  void account(size_t bytes);

 private:
  double mbps_;
  std::chrono::steady_clock::time_point start_;
  double total_ = 0;
};

// The checksum a manifest records for a whole file: xxh3-64 over the checksums of its chunks
// (little-endian u64, in file order). The chunks tile the file, so with each chunk verified this
// vouches for every byte without a second pass over them.
class FileDigest {
 public:
  FileDigest();
  ~FileDigest();
  FileDigest(const FileDigest&) = delete;
  FileDigest& operator=(const FileDigest&) = delete;
  void add_chunk(uint64_t chunk_checksum);
  uint64_t digest() const;

 private:
  void* state_;  // XXH3_state_t
};

// Appends stored chunks to a new shard file, keeping the file's digest.
//
// With `direct` the file is opened O_DIRECT: bytes go from memory to the device without the page
// cache, so a save neither spends a core copying into it nor evicts the job's cached files, and a
// rank's writes do not queue behind other ranks' writeback (docs/PERFORMANCE.md: buffered writes
// of four ranks on two cores were the bulk of a save). Stretches that start 4 KiB-aligned in
// memory while the file position is aligned are written straight from the caller's memory (dense
// state stored as it is: no copy at all); the rest is gathered in an aligned 4 MiB stage. The last
// partial block is written padded and the file cut back to its size. Where the filesystem refuses
// O_DIRECT (open or the first write says EINVAL) the writer continues with buffered writes.
class ShardWriter {
 public:
  // `path` absolute, `name` relative to the checkpoint root (for the manifest).
  static Result<std::unique_ptr<ShardWriter>> create(std::string path, std::string name,
                                                     bool direct);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // `checksum`: xxh3-64 of exactly `stored` when the caller has it already (a chunk stored as it
  // is has the checksum of its content); computed otherwise.
  Result<ChunkLocation> append(std::string_view stored,
                               std::optional<uint64_t> checksum = std::nullopt);
  // Encodes `bytes` of `data` with `compressor` (zstd when it pays, else as is; `scratch` holds
  // the compressed bytes) and appends them; the location says which. `data_xxh3`: xxh3-64 of
  // `data` when the caller has it, the checksum of a chunk stored as is.
  Result<ChunkLocation> append_encoded(Compressor& compressor, int level, const void* data,
                                       size_t bytes, std::optional<uint64_t> data_xxh3,
                                       std::string* scratch);
  // Flushes, fsyncs (when `sync`) and closes; the file's record.
  Result<FileRecord> finish(bool sync);
  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }  // still O_DIRECT (not fallen back)

 private:
  struct FreeStage {
    void operator()(char* p) const;
  };
  ShardWriter() = default;
  Status write_stored(std::string_view bytes);
  Status write_all(const char* p, size_t n);  // at the file position; drops O_DIRECT on EINVAL
  int fd_ = -1;
  std::string path_, name_;
  uint64_t size_ = 0;  // bytes appended (the file's size once finished)
  FileDigest digest_;
  bool direct_ = false;
  std::unique_ptr<char, FreeStage> stage_;  // aligned, allocated on first use
  size_t stage_len_ = 0;
};

// Reads chunks of a checkpoint root, verifying stored checksums and raw hashes.
class ChunkReader {
 public:
  explicit ChunkReader(std::string root) : root_(std::move(root)) {}
  // Decodes `chunk` into dst (chunk.raw bytes). `what` names it in errors: "tensor 'w' shard of
  // rank 2 chunk 5". Files are opened through fs::path_in_root (names from a manifest are
  // untrusted). Before anything is decoded, the stored bytes must lie inside the file (its size on
  // disk, not the manifest's word), match their checksum, and their zstd frame must declare
  // chunk.raw bytes: a manifest's sizes drive no allocation the files do not back.
  Status read(const ChunkRecord& chunk, void* dst, std::string_view what);
  // The same into *out, resized to chunk.raw only once the stored bytes passed those checks.
  Status read(const ChunkRecord& chunk, std::string* out, std::string_view what);
  // A whole blob, its chunks decoded and verified in order, into *out (its recorded size).
  Status read_blob(const BlobRecord& blob, std::string* out);
  // The stored bytes of one location, checksum verified.
  Status read_stored(const ChunkLocation& where, std::string* out, std::string_view what);
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t chunks_read() const { return chunks_read_; }

 private:
  Result<const fs::ReadFile*> file(const std::string& name);
  // Reads and checks the stored bytes of `chunk` (and of its base) into stored_ (base_stored_).
  Status fetch(const ChunkRecord& chunk, std::string_view what);
  Status decode_fetched(const ChunkRecord& chunk, void* dst, std::string_view what);
  std::string root_;
  std::map<std::string, fs::ReadFile> files_;
  Decompressor decompressor_;
  std::string stored_, base_stored_, scratch_;
  uint64_t bytes_read_ = 0, chunks_read_ = 0;
};

}  // namespace tessera::ckpt::codec
