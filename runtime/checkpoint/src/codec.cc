#include "codec.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tessera::ckpt::codec {

uint64_t xxh3(const void* data, size_t bytes) {
  return XXH3_64bits(data, bytes);
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

namespace {
constexpr size_t kProbeSlices = 4;
constexpr size_t kProbeSlice = 16u << 10;
constexpr size_t kProbeFrom = 256u << 10;  // smaller chunks are tried whole

// zstd must save at least 1/32 for the stored bytes to be worth a decode.
bool saves_enough(size_t compressed, size_t raw) {
  return compressed + raw / 32 < raw;
}
}  // namespace

bool Compressor::worth_compressing(const void* src, size_t bytes, int level) {
  if (bytes < kProbeFrom) return true;
  const auto* p = static_cast<const char*>(src);
  probe_in_.resize(kProbeSlices * kProbeSlice);
  const size_t stride = bytes / kProbeSlices;
  for (size_t i = 0; i < kProbeSlices; ++i) {
    std::memcpy(probe_in_.data() + i * kProbeSlice, p + i * stride, kProbeSlice);
  }
  if (!compress(probe_in_.data(), probe_in_.size(), level, &probe_out_).ok()) return true;
  return saves_enough(probe_out_.size(), probe_in_.size());
}

Result<std::string_view> Compressor::encode(const void* src, size_t bytes, int level,
                                            std::string* out, bool* compressed) {
  *compressed = false;
  const std::string_view as_is(static_cast<const char*>(src), bytes);
  if (!worth_compressing(src, bytes, level)) return as_is;
  TSR_RETURN_IF_ERROR(compress(src, bytes, level, out));
  if (!saves_enough(out->size(), bytes)) return as_is;
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
  if (ZSTD_isError(n) && ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall) {
    return data_loss(std::string(what) + ": decompresses to more than the " + std::to_string(raw) +
                     " bytes the manifest records; refused");
  }
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

FileDigest::FileDigest() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

FileDigest::~FileDigest() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void FileDigest::add_chunk(uint64_t chunk_checksum) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(chunk_checksum >> (8 * i));
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), le, sizeof le);
}

uint64_t FileDigest::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

namespace {
constexpr size_t kDirectAlign = 4096;     // memory, offset and length unit of O_DIRECT writes
constexpr size_t kStageBytes = 4u << 20;  // the aligned gather buffer
bool direct_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kDirectAlign == 0;
}
}  // namespace

void ShardWriter::FreeStage::operator()(char* p) const {
  std::free(p);
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::create(std::string path, std::string name,
                                                         bool direct) {
  std::unique_ptr<ShardWriter> w(new ShardWriter());
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  w->direct_ = direct;
  w->fd_ = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0), 0644);
  if (w->fd_ < 0 && direct && errno == EINVAL) {  // the filesystem has no O_DIRECT
    w->direct_ = false;
    w->fd_ = ::open(path.c_str(), flags, 0644);
  }
  if (w->fd_ < 0) return fs::errno_status(errno, "create", path);
  w->path_ = std::move(path);
  w->name_ = std::move(name);
  return w;
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status ShardWriter::write_all(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t done = ::write(fd_, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0 && errno == EINVAL && direct_) {
      // Opened O_DIRECT but refused at write time (alignment rules of this filesystem): buffered
      // from here on. Nothing was written by the refused call.
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) {
        return fs::errno_status(errno, "fcntl", path_);
      }
      direct_ = false;
      continue;
    }
    if (done < 0) return fs::errno_status(errno, "write", path_);
    p += done;
    n -= static_cast<size_t>(done);
  }
  return Status();
}

Status ShardWriter::write_stored(std::string_view bytes) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    if (!direct_ && stage_len_ == 0) return write_all(p, n);
    if (stage_len_ == 0 && direct_aligned(p) && n >= kDirectAlign) {
      // The file position is aligned whenever the stage is empty: write from the caller's memory.
      const size_t m = n - n % kDirectAlign;
      TSR_RETURN_IF_ERROR(write_all(p, m));
      p += m;
      n -= m;
      continue;
    }
    if (!stage_) {
      stage_.reset(static_cast<char*>(std::aligned_alloc(kDirectAlign, kStageBytes)));
      if (!stage_) return resource_exhausted("shard '" + path_ + "': no memory for the stage");
    }
    const size_t m = std::min(n, kStageBytes - stage_len_);
    std::memcpy(stage_.get() + stage_len_, p, m);
    stage_len_ += m;
    p += m;
    n -= m;
    if (stage_len_ == kStageBytes || !direct_) {
      TSR_RETURN_IF_ERROR(write_all(stage_.get(), stage_len_));
      stage_len_ = 0;
    }
  }
  return Status();
}

Result<ChunkLocation> ShardWriter::append(std::string_view stored,
                                          std::optional<uint64_t> checksum) {
  if (fd_ < 0) return failed_precondition("write to closed shard '" + path_ + "'");
  TSR_RETURN_IF_ERROR(write_stored(stored));
  ChunkLocation where{name_, size_, stored.size(),
                      checksum ? *checksum : xxh3(stored.data(), stored.size())};
  digest_.add_chunk(where.checksum);
  size_ += stored.size();
  return where;
}

Result<ChunkLocation> ShardWriter::append_encoded(Compressor& compressor, int level,
                                                  const void* data, size_t bytes,
                                                  std::optional<uint64_t> data_xxh3,
                                                  std::string* scratch) {
  bool compressed = false;
  TSR_ASSIGN_OR_RETURN(std::string_view stored,
                       compressor.encode(data, bytes, level, scratch, &compressed));
  TSR_ASSIGN_OR_RETURN(ChunkLocation where, append(stored, compressed ? std::nullopt : data_xxh3));
  where.compressed = compressed;
  return where;
}

Result<FileRecord> ShardWriter::finish(bool sync) {
  if (fd_ < 0) return failed_precondition("finish of closed shard '" + path_ + "'");
  if (stage_len_ > 0) {
    // O_DIRECT writes whole blocks: the tail goes out padded with zeros, then the file is cut
    // back to the bytes appended.
    const size_t padded = (stage_len_ + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    std::memset(stage_.get() + stage_len_, 0, padded - stage_len_);
    TSR_RETURN_IF_ERROR(write_all(stage_.get(), padded));
    stage_len_ = 0;
    if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      return fs::errno_status(errno, "truncate", path_);
    }
  }
  if (sync && ::fsync(fd_) != 0) return fs::errno_status(errno, "fsync", path_);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return fs::errno_status(errno, "close", path_);
  return FileRecord{name_, size_, digest_.digest()};
}

Result<const fs::ReadFile*> ChunkReader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end()) {
    TSR_ASSIGN_OR_RETURN(fs::ReadFile f, fs::open_in_root(root_, name));
    it = files_.emplace(name, std::move(f)).first;
  }
  return &it->second;
}

Status ChunkReader::read_stored(const ChunkLocation& where, std::string* out,
                                std::string_view what) {
  TSR_ASSIGN_OR_RETURN(const fs::ReadFile* f, file(where.file));
  // The file's size on disk bounds the read: a manifest claiming more is refused before the
  // buffer is sized by it.
  if (where.offset > f->size() || where.stored > f->size() - where.offset) {
    return data_loss("'" + where.file + "' " + std::string(what) + ": bytes [" +
                     std::to_string(where.offset) + ", +" + std::to_string(where.stored) +
                     ") lie beyond the end of the file (" + std::to_string(f->size()) + " bytes)");
  }
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

namespace {

// A compressed chunk's stored bytes must be exactly one zstd frame that declares the manifest's
// raw size. Checked before any buffer is sized by `raw` or anything decoded: a frame declaring
// more (a "bomb"), less or nothing, or followed by more frames or bytes, is refused naming the
// file, the chunk and both sizes. Decoding is then bounded by `raw` as well (the destination's
// size; Decompressor::decompress), so a hostile checkpoint costs no more memory or work than the
// sizes its manifest declares, which parse_manifest ties to the tensors' slices.
Status check_frame(const ChunkLocation& where, const std::string& stored, uint64_t raw,
                   const std::string& name) {
  if (!where.compressed) return Status();  // stored == raw, checked by parse_manifest
  const unsigned long long declared = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return data_loss(name + ": not a zstd frame");
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) {
    return data_loss(name + ": its zstd frame does not declare its size (the manifest says " +
                     std::to_string(raw) + " bytes); refused");
  }
  if (declared != raw) {
    return data_loss(name + ": its zstd frame holds " + std::to_string(declared) +
                     " bytes, the manifest says " + std::to_string(raw));
  }
  const size_t frame = ZSTD_findFrameCompressedSize(stored.data(), stored.size());
  if (ZSTD_isError(frame)) return data_loss(name + ": zstd: " + ZSTD_getErrorName(frame));
  if (frame != stored.size()) {
    return data_loss(name + ": " + std::to_string(stored.size() - frame) +
                     " stored bytes follow its zstd frame of " + std::to_string(frame) +
                     " bytes; refused");
  }
  return Status();
}

}  // namespace

Status ChunkReader::fetch(const ChunkRecord& chunk, std::string_view what) {
  const std::string name = "'" + chunk.data.file + "' " + std::string(what);
  if (chunk.enc != "zstd" && chunk.enc != "ref" && chunk.enc != "xor") {
    return data_loss(name + ": unknown encoding '" + chunk.enc + "'");
  }
  if (chunk.enc == "xor" && !chunk.base) return data_loss(name + ": xor chunk without a base");
  TSR_RETURN_IF_ERROR(read_stored(chunk.data, &stored_, what));
  TSR_RETURN_IF_ERROR(check_frame(chunk.data, stored_, chunk.raw, name));
  if (chunk.enc == "xor") {
    TSR_RETURN_IF_ERROR(read_stored(*chunk.base, &base_stored_, std::string(what) + " (base)"));
    TSR_RETURN_IF_ERROR(check_frame(*chunk.base, base_stored_, chunk.raw, name + " (base)"));
  }
  return Status();
}

Status ChunkReader::decode_fetched(const ChunkRecord& chunk, void* dst, std::string_view what) {
  const std::string name = "'" + chunk.data.file + "' " + std::string(what);
  TSR_RETURN_IF_ERROR(
      decompressor_.decode(chunk.data, stored_.data(), stored_.size(), dst, chunk.raw, name));
  if (chunk.enc == "xor") {
    scratch_.resize(chunk.raw);
    TSR_RETURN_IF_ERROR(decompressor_.decode(*chunk.base, base_stored_.data(), base_stored_.size(),
                                             scratch_.data(), chunk.raw, name + " (base)"));
    xor_into(dst, scratch_.data(), chunk.raw);
  }
  if (xxh3(dst, chunk.raw) != chunk.hash) {
    return data_loss(name + ": decoded content does not match its hash");
  }
  ++chunks_read_;
  return Status();
}

Status ChunkReader::read(const ChunkRecord& chunk, void* dst, std::string_view what) {
  TSR_RETURN_IF_ERROR(fetch(chunk, what));
  return decode_fetched(chunk, dst, what);
}

Status ChunkReader::read(const ChunkRecord& chunk, std::string* out, std::string_view what) {
  TSR_RETURN_IF_ERROR(fetch(chunk, what));
  out->resize(chunk.raw);
  return decode_fetched(chunk, out->data(), what);
}

Status ChunkReader::read_blob(const BlobRecord& blob, std::string* out) {
  out->clear();
  std::string chunk;
  for (size_t i = 0; i < blob.chunks.size(); ++i) {
    TSR_RETURN_IF_ERROR(
        read(blob.chunks[i], &chunk, "blob '" + blob.name + "' chunk " + std::to_string(i)));
    out->append(chunk);
  }
  if (out->size() != blob.size) {
    return data_loss("blob '" + blob.name + "' of rank " + std::to_string(blob.rank) +
                     (blob.chunks.empty() ? "" : " in '" + blob.chunks[0].data.file + "'") +
                     ": chunks hold " + std::to_string(out->size()) + " bytes, manifest says " +
                     std::to_string(blob.size));
  }
  return Status();
}

}  // namespace tessera::ckpt::codec
