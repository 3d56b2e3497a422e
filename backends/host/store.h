// Writing kernel results to their destination. Kernels compute into a small block in L1 and copy
// it out with store_block(); for large outputs the copy uses non-temporal (streaming) stores,
// which skip the read-for-ownership of the destination line and keep the sources in cache. That
// saves a third of the memory traffic of a 2-source reduction: 2 reads + 1 write instead of 2
// reads + 1 read-for-ownership + 1 write.
#pragma once

#include <cstddef>

namespace tessera::host {

// Outputs at least this large are written with streaming stores (they would not stay in cache
// anyway); smaller ones with memcpy so the result is still cached for whoever reads it next.
inline constexpr size_t kStreamingStoreThreshold = size_t(4) << 20;

// Copies `bytes` from `src` to `dst` (no overlap), with streaming stores when `streaming`.
void store_block(void* dst, const void* src, size_t bytes, bool streaming);

// Orders earlier streaming stores before later ordinary stores (an sfence on x86); call once when
// a kernel that used streaming stores finishes.
void store_fence();

}  // namespace tessera::host
