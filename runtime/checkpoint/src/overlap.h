// Slice geometry shared by loading, offline resharding and in-memory resharding: intersections
// of slices and copies of the part two slices share, from stored chunks or from memory.
// Thread-safe (no shared state).
#pragma once

#include <cstddef>

#include "codec.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/checkpoint/state.h"

namespace tessera::ckpt {

// The part a and b share in *out; false when they do not overlap.
bool intersect(const Slice& a, const Slice& b, Slice* out);

// Copies the part `inter` of the saved shard `src` into `dst`, which holds slice `target`,
// decoding (and verifying) only the chunks of `src` that the part touches.
Status copy_overlap(codec::ChunkReader& reader, const TensorRecord& tensor, const ShardRecord& src,
                    const Slice& target, const Slice& inter, size_t esize, std::byte* dst);

// Copies the part `region` (inside both slices) from `src`, the row-major elements of
// `src_slice`, to `dst`, the row-major elements of `dst_slice`.
void copy_region(const std::byte* src, const Slice& src_slice, std::byte* dst,
                 const Slice& dst_slice, const Slice& region, size_t esize);

}  // namespace tessera::ckpt
