#include "overlap.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace tessera::ckpt {

bool intersect(const Slice& a, const Slice& b, Slice* out) {
  out->offset.resize(a.offset.size());
  out->len.resize(a.offset.size());
  for (size_t d = 0; d < a.offset.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.len[d], b.offset[d] + b.len[d]);
    if (lo >= hi) return false;
    out->offset[d] = lo;
    out->len[d] = hi - lo;
  }
  return true;
}

static std::vector<int64_t> strides(const Slice& s) {
  std::vector<int64_t> out(s.len.size(), 1);
  for (int d = static_cast<int>(s.len.size()) - 2; d >= 0; --d) out[d] = out[d + 1] * s.len[d + 1];
  return out;
}

// Copies the part `inter` of the saved shard `src` into `dst`, which holds slice `target`. The
// overlap is walked as runs contiguous in both layouts, in increasing source order, so every
// needed chunk is decoded once and no other chunk is read.
Status copy_overlap(codec::ChunkReader& reader, const TensorRecord& tensor, const ShardRecord& src,
                    const Slice& target, const Slice& inter, size_t esize, std::byte* dst) {
  const int nd = static_cast<int>(inter.len.size());
  const uint64_t src_bytes = static_cast<uint64_t>(src.slice.elements()) * esize;
  const uint64_t cb = src.chunk_bytes;
  if (src.chunks.size() != (src_bytes + cb - 1) / cb) {
    return data_loss("tensor '" + tensor.name + "' shard of rank " + std::to_string(src.rank) +
                     ": " + std::to_string(src.chunks.size()) + " chunks for " +
                     std::to_string(src_bytes) + " bytes");
  }
  int k = nd - 1;
  while (k > 0 && inter.len[k] == src.slice.len[k] && inter.len[k] == target.len[k]) --k;
  int64_t run = 1;
  for (int d = std::max(k, 0); d < nd; ++d) run *= inter.len[d];
  const auto ss = strides(src.slice), ts = strides(target);
  std::vector<int64_t> idx(std::max(k, 0), 0);
  std::string chunk;
  int64_t cached = -1;
  for (;;) {
    int64_t so = 0, to = 0;
    for (int d = 0; d < nd; ++d) {
      const int64_t i = inter.offset[d] + (d < k ? idx[d] : 0);
      so += (i - src.slice.offset[d]) * ss[d];
      to += (i - target.offset[d]) * ts[d];
    }
    uint64_t s_byte = static_cast<uint64_t>(so) * esize;
    uint64_t t_byte = static_cast<uint64_t>(to) * esize;
    uint64_t left = static_cast<uint64_t>(run) * esize;
    while (left > 0) {
      const int64_t c = static_cast<int64_t>(s_byte / cb);
      if (c != cached) {
        const ChunkRecord& rec = src.chunks[c];
        const uint64_t expect = std::min<uint64_t>(cb, src_bytes - c * cb);
        if (rec.raw != expect) {
          return data_loss("tensor '" + tensor.name + "' shard of rank " +
                           std::to_string(src.rank) + " chunk " + std::to_string(c) + " in '" +
                           rec.data.file + "': raw size " + std::to_string(rec.raw) +
                           ", expected " + std::to_string(expect));
        }
        TSR_RETURN_IF_ERROR(reader.read(rec, &chunk,
                                        "tensor '" + tensor.name + "' shard of rank " +
                                            std::to_string(src.rank) + " chunk " +
                                            std::to_string(c)));
        cached = c;
      }
      const uint64_t in_chunk = s_byte - static_cast<uint64_t>(c) * cb;
      const uint64_t n = std::min<uint64_t>(left, chunk.size() - in_chunk);
      std::memcpy(dst + t_byte, chunk.data() + in_chunk, n);
      s_byte += n;
      t_byte += n;
      left -= n;
    }
    int d = k - 1;
    while (d >= 0 && ++idx[d] == inter.len[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  return Status();
}

void copy_region(const std::byte* src, const Slice& src_slice, std::byte* dst,
                 const Slice& dst_slice, const Slice& region, size_t esize) {
  const int nd = static_cast<int>(region.len.size());
  if (region.elements() == 0) return;
  // The innermost dims that are whole in both slices form one contiguous run.
  int k = nd - 1;
  while (k > 0 && region.len[k] == src_slice.len[k] && region.len[k] == dst_slice.len[k]) --k;
  int64_t run = 1;
  for (int d = std::max(k, 0); d < nd; ++d) run *= region.len[d];
  const auto ss = strides(src_slice), ds = strides(dst_slice);
  std::vector<int64_t> idx(std::max(k, 0), 0);
  for (;;) {
    int64_t so = 0, to = 0;
    for (int d = 0; d < nd; ++d) {
      const int64_t i = region.offset[d] + (d < k ? idx[d] : 0);
      so += (i - src_slice.offset[d]) * ss[d];
      to += (i - dst_slice.offset[d]) * ds[d];
    }
    std::memcpy(dst + static_cast<size_t>(to) * esize, src + static_cast<size_t>(so) * esize,
                static_cast<size_t>(run) * esize);
    int d = k - 1;
    while (d >= 0 && ++idx[d] == region.len[d]) idx[d--] = 0;
    if (d < 0) break;
  }
}

}  // namespace tessera::ckpt
