#include "store.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define TESSERA_HOST_HAVE_STREAMING 1
#else
#define TESSERA_HOST_HAVE_STREAMING 0
#endif

namespace tessera::host {

void store_block(void* dst, const void* src, size_t bytes, bool streaming) {
#if TESSERA_HOST_HAVE_STREAMING
  if (streaming && bytes >= 64) {
    auto* out = static_cast<char*>(dst);
    auto* in = static_cast<const char*>(src);
    // Head up to 16-byte alignment of the destination (SSE2 streaming stores need it).
    size_t head = (16 - (reinterpret_cast<uintptr_t>(out) & 15)) & 15;
    std::memcpy(out, in, head);
    out += head;
    in += head;
    bytes -= head;
    size_t vectors = bytes / 16;
    for (size_t i = 0; i < vectors; ++i) {
      __m128i value = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in) + i);
      _mm_stream_si128(reinterpret_cast<__m128i*>(out) + i, value);
    }
    std::memcpy(out + vectors * 16, in + vectors * 16, bytes - vectors * 16);
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, bytes);
}

void store_fence() {
#if TESSERA_HOST_HAVE_STREAMING
  _mm_sfence();
#endif
}

}  // namespace tessera::host
