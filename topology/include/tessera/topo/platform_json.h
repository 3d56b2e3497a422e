// The JSON document of `tessera devices --json`: every backend with its state and reason, and
// every device of the enabled ones. Built here so that the CLI and the Python API
// (tessera.devices()) print the same document.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/hal/platform.h"

namespace tessera::topo {

// The names of the TSR_CAP_* bits set in `caps` ("unified-addressing", "gemm", ...), in bit order.
std::vector<std::string> capability_names(uint64_t caps);

// The document, indented by 2, without a trailing newline.
std::string platform_json(const hal::Platform& platform);

}  // namespace tessera::topo
