// Cutting bytes into chunks and appending them to a shard file: each chunk's raw size and content
// hash, its bytes zstd-compressed when that pays (else stored as they are), its location in the
// file. The one chunk loop of the save (commit.cc) and of offline resharding (reshard.cc).
// Not thread-safe; one per shard file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codec.h"
#include "tessera/checkpoint/manifest.h"

namespace tessera::ckpt {

class ChunkEncoder {
 public:
  // Runs after each append with the chunk's raw and stored sizes (accounting, rate limits,
  // progress, fault points); an error stops the encoding and is returned.
  using AfterStore = std::function<Status(uint64_t raw, uint64_t stored)>;

  ChunkEncoder(codec::ShardWriter& file, int zstd_level, AfterStore after_store = {})
      : file_(file), level_(zstd_level), after_store_(std::move(after_store)) {}

  // Encodes and appends one chunk's bytes; the location says whether zstd was used.
  // `data_xxh3`: xxh3-64 of `data` when the caller has it (a chunk stored as it is needs no
  // checksum pass of its own); nullopt for bytes that are not the content (an XOR delta).
  Result<ChunkLocation> store(const void* data, size_t bytes, std::optional<uint64_t> data_xxh3);

  // `bytes` cut into chunks of `chunk_bytes`, each stored as a "zstd" chunk, appended to *out.
  // No bytes still make one (empty) chunk, so an empty blob or slice has a record to read.
  Status store_chunks(const void* data, size_t bytes, size_t chunk_bytes,
                      std::vector<ChunkRecord>* out);

 private:
  codec::ShardWriter& file_;
  int level_;
  AfterStore after_store_;
  codec::Compressor compressor_;
  std::string scratch_;  // the compressed bytes of the chunk being stored
};

}  // namespace tessera::ckpt
