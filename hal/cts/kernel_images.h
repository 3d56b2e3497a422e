// Where the module tests find their kernel images: one file per format, each holding the same
// kernels (hal/cts/kernels/CMakeLists.txt). Folders searched, in order: --kernel-dir DIR,
// TESSERA_CTS_KERNEL_DIR, the build tree's folder (the build tree's binary only), and
// <prefix>/share/tessera/cts-kernels next to this binary. For each folder the formats a device
// takes are tried in enum order; the first image that exists is used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cts {

struct KernelImage {
  int32_t format = 0;  // tsr_module_format
  std::string path;
  std::string file;            // the file name alone: the name passed to module_load
  std::vector<uint8_t> bytes;  // PTX text ends with a NUL, as module_load requires
};

// "cts_kernels.host.so" for TSR_MODULE_HOST_ELF, ...; "" for a format without a CTS image.
const char* kernel_image_file(int32_t format);

// The folders searched, in order (no repeats). `kernel_dir` is --kernel-dir ("" when absent).
std::vector<std::string> kernel_image_dirs(const std::string& kernel_dir);

// The first image for a format in `module_formats` (bit 1u << format). False when there is none;
// *looked_for then lists every path tried (or says the device takes no format).
bool find_kernel_image(uint32_t module_formats, const std::string& kernel_dir, KernelImage* out,
                       std::string* looked_for);

}  // namespace tessera::cts
