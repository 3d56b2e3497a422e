#include "backend_choice.h"

namespace tessera::trainer {

Result<std::string> pick_backend(const hal::Platform& platform, std::string_view wanted) {
  if (wanted == "auto") {
    for (const char* accelerator : {"cuda", "hip", "level_zero"}) {
      if (!platform.devices(accelerator).empty()) return std::string(accelerator);
    }
    wanted = "host";
  }
  if (platform.devices(wanted).empty()) {
    return not_found("backend '" + std::string(wanted) +
                     "' lists no device (is it built, and is its driver present?)");
  }
  return std::string(wanted);
}

}  // namespace tessera::trainer
