// Chunk encoding for the checkpointer: xxh3-64 checksums, zstd compression, the XOR delta, the
// writer that appends chunks to a shard file and the reader that verifies and decodes them.
// Objects here are not thread-safe; each thread uses its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "fs.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/common/status.h"

namespace tessera::ckpt::codec {

uint64_t xxh3(const void* data, size_t bytes);
// xxh3-64 of a whole file, read in 4 MiB blocks.
Result<uint64_t> file_xxh3(const std::string& path);

class Compressor {
 public:
  Compressor();
  ~Compressor();
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  // Replaces *out with zstd(src) at `level`.
  Status compress(const void* src, size_t bytes, int level, std::string* out);

  // What to store for one chunk: zstd(src) in *out, or src itself (the view points at src,
  // *compressed = false) when zstd saves less than 1/32 of it. After two such chunks in a row
  // the next 14 are stored without trying (dense fp32 state does not compress; trying costs a
  // pass over the data at ~3 GB/s per core), then it tries again. reset() starts a new tensor.
  Result<std::string_view> encode(const void* src, size_t bytes, int level, std::string* out,
                                  bool* compressed);
  void reset() { incompressible_run_ = 0, skip_ = 0; }

 private:
  void* cctx_;
  int incompressible_run_ = 0;  // consecutive chunks zstd could not shrink
  int skip_ = 0;                // chunks still to store without trying
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

// Appends stored chunks to a new shard file, keeping the whole-file xxh3.
class ShardWriter {
 public:
  // `path` absolute, `name` relative to the checkpoint root (for the manifest).
  static Result<std::unique_ptr<ShardWriter>> create(std::string path, std::string name);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  Result<ChunkLocation> append(std::string_view stored);
  // Flushes, fsyncs (when `sync`) and closes; the file's record.
  Result<FileRecord> finish(bool sync);
  const std::string& path() const { return path_; }

 private:
  ShardWriter() = default;
  int fd_ = -1;
  std::string path_, name_;
  uint64_t size_ = 0;
  void* state_ = nullptr;  // XXH3_state_t
};

// Reads chunks of a checkpoint root, verifying stored checksums and raw hashes.
class ChunkReader {
 public:
  explicit ChunkReader(std::string root) : root_(std::move(root)) {}
  // Decodes `chunk` into dst (chunk.raw bytes). `what` names it in errors: "tensor 'w' shard of
  // rank 2 chunk 5".
  Status read(const ChunkRecord& chunk, void* dst, std::string_view what);
  // The stored bytes of one location, checksum verified.
  Status read_stored(const ChunkLocation& where, std::string* out, std::string_view what);
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t chunks_read() const { return chunks_read_; }

 private:
  Result<const fs::ReadFile*> file(const std::string& name);
  std::string root_;
  std::map<std::string, fs::ReadFile> files_;
  Decompressor decompressor_;
  std::string stored_, base_stored_, scratch_;
  uint64_t bytes_read_ = 0, chunks_read_ = 0;
};

}  // namespace tessera::ckpt::codec
