// What the whole conformance run shares: the backend under test (opened and initialised once by
// main), its device count, the expectations file, the random seed. Set up before
// RUN_ALL_TESTS and read-only afterwards, except for the counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "expectations.h"
#include "tessera/common/status.h"
#include "tessera/hal/backend.h"

namespace tessera::cts {

struct Context {
  std::shared_ptr<hal::Backend> backend;  // opened through the loader; api() is normalised
  std::string backend_arg;                // --backend as given (name or path)
  std::string options;                    // --options, passed to init
  Status init_status;                     // the result of Backend::init
  int32_t device_count = 0;
  std::string no_device_reason;  // the backend's reason when device_count is 0
  Expectations expectations;
  uint64_t seed = 0;       // TESSERA_CTS_SEED or random; printed at start
  std::string self_exe;    // this program, re-executed as the IPC child
  std::string kernel_dir;  // --kernel-dir: searched first for the module tests' images

  std::atomic<int> expected_failures{0};
  std::atomic<int> unsupported{0};
};

// The single run context. Precondition for tests: main has filled it.
Context& context();

// The table of the backend under test, entries it lacks are NULL.
inline const tsr_backend_api_v1& api() {
  return context().backend->api();
}

}  // namespace tessera::cts
