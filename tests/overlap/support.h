// Helpers for the overlap tests: each rank is a forked process (tests/collectives/support/
// multiprocess.h) with its own platform, host device, communicator and compute stream.
//
// Every buffer the engine sees is device memory, and the tests never dereference it: data goes
// in and out with stream copies through host vectors (to_device / from_device), so the suites
// pass on discrete devices (TESSERA_HOST_DEVICES=1:discrete, the default ctest environment).
#pragma once

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/multiprocess.h"
#include "tessera/hal/hal.h"
#include "tessera/overlap/grad_sync.h"

namespace tessera::overlap::testing {

using coll::testing::RankResult;
using coll::testing::run_ranks;

// The end of a rank that succeeded: a barrier first, so that no rank tears its communicator down
// while a peer may still be draining its last queued collective (the communicator's destructor
// aborts when its proxy still looks busy, which would fail the slower peer).
#define CHILD_DONE(r)               \
  do {                              \
    CHILD_OK((r)->comm->barrier()); \
    return 0;                       \
  } while (0)

// Everything one rank needs. Members are destroyed in reverse order: streams before the platform.
struct Rank {
  std::shared_ptr<hal::Platform> platform;
  std::optional<hal::Device> device;
  std::shared_ptr<coll::Communicator> comm;
  hal::Stream compute;

  // nullptr (after printing why) when something is missing.
  static std::unique_ptr<Rank> make(int rank, int size, coll::CommOptions options = {}) {
    auto r = std::make_unique<Rank>();
    auto platform = hal::Platform::create();
    if (!platform.ok()) {
      std::fprintf(stderr, "rank %d: platform: %s\n", rank, platform.status().to_string().c_str());
      return nullptr;
    }
    r->platform = platform.value();
    auto devices = r->platform->devices("host");
    if (devices.empty()) {
      std::fprintf(stderr, "rank %d: no host device\n", rank);
      return nullptr;
    }
    r->device = devices[0];
    r->comm = coll::testing::child_communicator(rank, size, std::move(options), &*r->device);
    if (r->comm == nullptr) return nullptr;
    auto stream = r->device->create_stream();
    if (!stream.ok()) return nullptr;
    r->compute = std::move(stream.value());
    return r;
  }
};

// `count` elements of T in device memory of `device`.
template <typename T>
Result<hal::DeviceBuffer> device_array(const hal::Device& device, size_t count) {
  return device.allocate(count * sizeof(T));
}

// Blocking copies between host vectors and device memory on `stream` (after its earlier work).
template <typename T>
Status to_device(const hal::Stream& stream, void* dst, const std::vector<T>& src) {
  if (src.empty()) return Status();
  TSR_RETURN_IF_ERROR(stream.copy(dst, src.data(), src.size() * sizeof(T)));
  return stream.synchronize();
}
template <typename T>
Status from_device(const hal::Stream& stream, std::vector<T>& dst, const void* src, size_t count) {
  dst.resize(count);
  if (count == 0) return Status();
  TSR_RETURN_IF_ERROR(stream.copy(dst.data(), src, count * sizeof(T)));
  return stream.synchronize();
}

inline void expect_all_ok(const std::vector<RankResult>& results, int n) {
  ASSERT_EQ(results.size(), size_t(n));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " signal " << r.signal;
  }
}

// The seed of a randomised test: TESSERA_TEST_SEED, else a fixed default; printed by the test.
inline uint64_t test_seed() {
  const char* env = std::getenv("TESSERA_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20261130;
}

}  // namespace tessera::overlap::testing
