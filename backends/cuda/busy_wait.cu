// The busy-wait kernel behind stream_busy_wait: one thread spins on the SM's cycle counter
// (clock64) until the requested number of cycles has passed, so the stream is occupied for that
// long in order with its other work while the rest of the GPU stays free. Cycles come from the
// host (microseconds x the SM clock in kHz / 1000), as the counter has no wall-clock unit.
#include <cstdint>

#include "kernels.h"

namespace tessera::cuda::kernels {
namespace {

__global__ void busy_wait_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

rtError_t launch_busy_wait(uint64_t microseconds, int clock_khz, rtStream_t stream) {
  const long long cycles = static_cast<long long>(microseconds) * clock_khz / 1000;
  busy_wait_kernel<<<1, 1, 0, stream>>>(cycles);
  return rtGetLastError();
}

}  // namespace tessera::cuda::kernels
