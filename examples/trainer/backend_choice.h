// Which HAL backend a trainer runs on: a name given on the command line, or "auto" (the first
// accelerator backend that lists a device, else the host backend), so that the same command
// trains on a GPU where there is one and on the host elsewhere (tessera-train --backend,
// `tessera demo --backend`).
#pragma once

#include <string>
#include <string_view>

#include "tessera/common/status.h"
#include "tessera/hal/platform.h"

namespace tessera::trainer {

// `wanted` itself, or for "auto" the first of cuda, hip and level_zero that lists a device on
// `platform`, else "host". NOT_FOUND naming the backend when it lists no device (not built, or no
// driver).
Result<std::string> pick_backend(const hal::Platform& platform, std::string_view wanted);

}  // namespace tessera::trainer
