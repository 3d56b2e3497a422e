#include "codec.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace tessera::ckpt::codec {

uint64_t xxh3(const void* data, size_t bytes) {
  return XXH3_64bits(data, bytes);
}

Result<uint64_t> file_xxh3(const std::string& path) {
  TSR_ASSIGN_OR_RETURN(uint64_t size, fs::file_size(path));
  TSR_ASSIGN_OR_RETURN(fs::ReadFile file, fs::ReadFile::open(path));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::string block(std::min<uint64_t>(size, 4u << 20), '\0');
  for (uint64_t off = 0; off < size; off += block.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), size - off));
    TSR_RETURN_IF_ERROR(file.read_at(off, block.data(), n));
    XXH3_64bits_update(state.get(), block.data(), n);
  }
  return static_cast<uint64_t>(XXH3_64bits_digest(state.get()));
}

Compressor::Compressor() : cctx_(ZSTD_createCCtx()) {}
Compressor::~Compressor() {
  ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_));
}

Status Compressor::compress(const void* src, size_t bytes, int level, std::string* out) {
  out->resize(ZSTD_compressBound(bytes));
  size_t n = ZSTD_compressCCtx(static_cast<ZSTD_CCtx*>(cctx_), out->data(), out->size(), src, bytes,
                               level);
  if (ZSTD_isError(n)) return internal_error(std::string("zstd: ") + ZSTD_getErrorName(n));
  out->resize(n);
  return Status();
}

Result<std::string_view> Compressor::encode(const void* src, size_t bytes, int level,
                                            std::string* out, bool* compressed) {
  *compressed = false;
  const std::string_view as_is(static_cast<const char*>(src), bytes);
  if (skip_ > 0) {
    --skip_;
    return as_is;
  }
  TSR_RETURN_IF_ERROR(compress(src, bytes, level, out));
  if (out->size() + bytes / 32 >= bytes) {  // saved less than ~3%: not worth decoding
    if (++incompressible_run_ >= 2) skip_ = 14;
    return as_is;
  }
  incompressible_run_ = 0;
  *compressed = true;
  return std::string_view(*out);
}

Decompressor::Decompressor() : dctx_(ZSTD_createDCtx()) {}
Decompressor::~Decompressor() {
  ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_));
}

Status Decompressor::decompress(const void* src, size_t bytes, void* dst, size_t raw,
                                std::string_view what) {
  size_t n = ZSTD_decompressDCtx(static_cast<ZSTD_DCtx*>(dctx_), dst, raw, src, bytes);
  if (ZSTD_isError(n)) {
    return data_loss(std::string(what) + ": zstd: " + ZSTD_getErrorName(n));
  }
  if (n != raw) {
    return data_loss(std::string(what) + ": decompressed " + std::to_string(n) +
                     " bytes, manifest says " + std::to_string(raw));
  }
  return Status();
}

Status Decompressor::decode(const ChunkLocation& where, const void* src, size_t bytes, void* dst,
                            size_t raw, std::string_view what) {
  if (where.compressed) return decompress(src, bytes, dst, raw, what);
  if (bytes != raw) {
    return data_loss(std::string(what) + ": stored uncompressed as " + std::to_string(bytes) +
                     " bytes, manifest says " + std::to_string(raw));
  }
  std::memcpy(dst, src, raw);
  return Status();
}

void xor_into(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t a, b;
    std::memcpy(&a, d + i, 8);
    std::memcpy(&b, s + i, 8);
    a ^= b;
    std::memcpy(d + i, &a, 8);
  }
  for (; i < bytes; ++i) d[i] ^= s[i];
}

void RateLimiter::account(size_t bytes) {
  if (mbps_ <= 0) return;
  total_ += static_cast<double>(bytes);
  const double due_s = total_ / (mbps_ * 1e6);
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (due_s > elapsed_s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(due_s - elapsed_s));
  }
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::create(std::string path, std::string name) {
  std::unique_ptr<ShardWriter> w(new ShardWriter());
  w->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return fs::errno_status(errno, "create", path);
  w->path_ = std::move(path);
  w->name_ = std::move(name);
  auto* state = XXH3_createState();
  XXH3_64bits_reset(state);
  w->state_ = state;
  return w;
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

Result<ChunkLocation> ShardWriter::append(std::string_view stored) {
  if (fd_ < 0) return failed_precondition("write to closed shard '" + path_ + "'");
  size_t done = 0;
  while (done < stored.size()) {
    ssize_t n = ::write(fd_, stored.data() + done, stored.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fs::errno_status(errno, "write", path_);
    done += static_cast<size_t>(n);
  }
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), stored.data(), stored.size());
  ChunkLocation where{name_, size_, stored.size(), xxh3(stored.data(), stored.size())};
  size_ += stored.size();
  return where;
}

Result<FileRecord> ShardWriter::finish(bool sync) {
  if (sync && ::fsync(fd_) != 0) return fs::errno_status(errno, "fsync", path_);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return fs::errno_status(errno, "close", path_);
  return FileRecord{name_, size_, XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_))};
}

Result<const fs::ReadFile*> ChunkReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end()) {
    TSR_ASSIGN_OR_RETURN(fs::ReadFile f, fs::ReadFile::open(fs::join(root_, name)));
    it = files_.emplace(name, std::move(f)).first;
  }
  return &it->second;
}

Status ChunkReader::read_stored(const ChunkLocation& where, std::string* out,
                                std::string_view what) {
  TSR_ASSIGN_OR_RETURN(const fs::ReadFile* f, file(where.file));
  out->resize(where.stored);
  Status s = f->read_at(where.offset, out->data(), out->size());
  if (!s.ok()) return s.with_context(std::string(what) + " in '" + where.file + "'");
  bytes_read_ += where.stored;
  if (xxh3(out->data(), out->size()) != where.checksum) {
    return data_loss("'" + where.file + "' " + std::string(what) + " at offset " +
                     std::to_string(where.offset) + ": checksum mismatch (corrupt chunk)");
  }
  return Status();
}

Status ChunkReader::read(const ChunkRecord& chunk, void* dst, std::string_view what) {
  const std::string name = "'" + chunk.data.file + "' " + std::string(what);
  TSR_RETURN_IF_ERROR(read_stored(chunk.data, &stored_, what));
  TSR_RETURN_IF_ERROR(
      decompressor_.decode(chunk.data, stored_.data(), stored_.size(), dst, chunk.raw, name));
  if (chunk.enc == "xor") {
    if (!chunk.base) return data_loss(name + ": xor chunk without a base");
    TSR_RETURN_IF_ERROR(read_stored(*chunk.base, &base_stored_, std::string(what) + " (base)"));
    scratch_.resize(chunk.raw);
    TSR_RETURN_IF_ERROR(decompressor_.decode(*chunk.base, base_stored_.data(), base_stored_.size(),
                                             scratch_.data(), chunk.raw, name + " (base)"));
    xor_into(dst, scratch_.data(), chunk.raw);
  } else if (chunk.enc != "zstd" && chunk.enc != "ref") {
    return data_loss(name + ": unknown encoding '" + chunk.enc + "'");
  }
  if (xxh3(dst, chunk.raw) != chunk.hash) {
    return data_loss(name + ": decoded content does not match its hash");
  }
  ++chunks_read_;
  return Status();
}

}  // namespace tessera::ckpt::codec
