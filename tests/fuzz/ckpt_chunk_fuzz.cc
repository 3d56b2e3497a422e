// Stored chunks of a shard file as runtime/checkpoint's ChunkReader decodes them: zstd frames,
// chunks stored as they are, "ref" and XOR-delta chunks with their base. The input is
//   byte 0     flags: bits 0-1 encoding (zstd, ref, xor, an unknown one), bit 2 the data is
//              compressed, bit 3 the base is compressed, bit 4/5 the data/base checksum is right
//   bytes 1-3  the raw size the manifest declares (little-endian, < 16 MiB)
//   bytes 4-5  how many of the remaining bytes are the data chunk; the rest is the base chunk
//   the rest   the shard file's content
// What a parsed manifest guarantees (names inside the root, sizes below kMaxChunkBytes) holds;
// the bytes on disk and their sizes are the fuzzer's.
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "codec.h"
#include "fuzz_target.h"
#include "tessera/checkpoint/manifest.h"

namespace {

namespace ckpt = tessera::ckpt;

struct Root {
  std::string path;
  Root() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/tsr-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path = pattern;
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

TESSERA_FUZZ_TARGET(ckpt_chunk) {
  if (size < 6) return 0;
  const uint8_t flags = data[0];
  const uint64_t raw = data[1] | (uint64_t(data[2]) << 8) | (uint64_t(data[3]) << 16);
  const size_t split = data[4] | (size_t(data[5]) << 8);
  const std::string_view file = tessera::fuzz::as_text(data + 6, size - 6);
  {
    std::ofstream out(root().path + "/s.shard", std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  static const char* const kEncodings[] = {"zstd", "ref", "xor", "delta"};
  ckpt::ChunkRecord chunk;
  chunk.enc = kEncodings[flags & 3];
  chunk.raw = raw;
  chunk.data = {"s.shard", 0, split, 0, (flags & 4) != 0};
  const std::string_view data_bytes = file.substr(0, std::min(split, file.size()));
  if (flags & 16) chunk.data.checksum = ckpt::codec::xxh3(data_bytes.data(), data_bytes.size());
  if (chunk.enc == "xor") {
    const size_t base_offset = std::min(split, file.size());
    const std::string_view base_bytes = file.substr(base_offset);
    chunk.base =
        ckpt::ChunkLocation{"s.shard", base_offset, base_bytes.size(), 0, (flags & 8) != 0};
    if (flags & 32) chunk.base->checksum = ckpt::codec::xxh3(base_bytes.data(), base_bytes.size());
  }
  ckpt::codec::ChunkReader reader(root().path);
  std::string out;
  if (reader.read(chunk, &out, "fuzz chunk").ok()) {
    FUZZ_CHECK(out.size() == raw, "a decoded chunk is not its raw size");
  }
  return 0;
}
