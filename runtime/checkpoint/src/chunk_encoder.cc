#include "chunk_encoder.h"

#include <algorithm>
#include <cstddef>

namespace tessera::ckpt {

Result<ChunkLocation> ChunkEncoder::store(const void* data, size_t bytes,
                                          std::optional<uint64_t> data_xxh3) {
  TSR_ASSIGN_OR_RETURN(ChunkLocation where, file_.append_encoded(compressor_, level_, data, bytes,
                                                                 data_xxh3, &scratch_));
  if (after_store_) TSR_RETURN_IF_ERROR(after_store_(bytes, where.stored));
  return where;
}

Status ChunkEncoder::store_chunks(const void* data, size_t bytes, size_t chunk_bytes,
                                  std::vector<ChunkRecord>* out) {
  if (chunk_bytes == 0) return invalid_argument("chunk encoder: chunk_bytes is 0");
  const auto* p = static_cast<const std::byte*>(data);
  size_t off = 0;
  do {
    const size_t len = std::min(chunk_bytes, bytes - off);
    ChunkRecord rec;
    rec.enc = "zstd";
    rec.raw = len;
    rec.hash = codec::xxh3(p + off, len);
    TSR_ASSIGN_OR_RETURN(rec.data, store(p + off, len, rec.hash));
    out->push_back(std::move(rec));
    off += len;
  } while (off < bytes);
  return Status();
}

}  // namespace tessera::ckpt
