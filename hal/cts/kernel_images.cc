#include "kernel_images.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tessera/common/env.h"
#include "tessera/hal/backend_abi.h"

namespace tessera::cts {
namespace {

std::filesystem::path self_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe.parent_path();
}

}  // namespace

const char* kernel_image_file(int32_t format) {
  switch (format) {
    case TSR_MODULE_HOST_ELF: return "cts_kernels.host.so";
    case TSR_MODULE_CUDA_CUBIN: return "cts_kernels.fatbin";
    case TSR_MODULE_CUDA_PTX: return "cts_kernels.ptx";
    case TSR_MODULE_HIP_CODE_OBJ: return "cts_kernels.hsaco";
    case TSR_MODULE_SPIRV: return "cts_kernels.spv";
    default: return "";
  }
}

std::vector<std::string> kernel_image_dirs(const std::string& kernel_dir) {
  std::vector<std::string> dirs;
  if (!kernel_dir.empty()) dirs.push_back(kernel_dir);
  if (auto env_dir = env::get("TESSERA_CTS_KERNEL_DIR")) dirs.push_back(*env_dir);
  const std::filesystem::path exe_dir = self_dir();
  // The build tree's images only for the build tree's binary, as with the expectations: an
  // installed copy must not test whatever that tree holds now.
  std::error_code ec;
  if (!exe_dir.empty() && std::filesystem::weakly_canonical(exe_dir, ec) ==
                              std::filesystem::weakly_canonical(TESSERA_CTS_BUILD_BIN_DIR, ec)) {
    dirs.push_back(TESSERA_CTS_BUILD_KERNEL_DIR);
  }
  if (!exe_dir.empty()) {
    dirs.push_back((exe_dir.parent_path() / "share/tessera/cts-kernels").string());
  }
  std::vector<std::string> unique;
  for (auto& dir : dirs) {
    bool seen = false;
    for (const auto& u : unique) seen = seen || u == dir;
    if (!seen) unique.push_back(dir);
  }
  return unique;
}

bool find_kernel_image(uint32_t module_formats, const std::string& kernel_dir, KernelImage* out,
                       std::string* looked_for) {
  looked_for->clear();
  for (const auto& dir : kernel_image_dirs(kernel_dir)) {
    for (int32_t format = 1; format < TSR_MODULE_FORMAT_COUNT; ++format) {
      const std::string file = kernel_image_file(format);
      if ((module_formats & (1u << format)) == 0 || file.empty()) continue;
      const std::string path = (std::filesystem::path(dir) / file).string();
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        *looked_for += (looked_for->empty() ? "" : ", ") + path;
        continue;
      }
      out->format = format;
      out->path = path;
      out->file = file;
      out->bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (format == TSR_MODULE_CUDA_PTX) out->bytes.push_back(0);
      return true;
    }
  }
  if (looked_for->empty())
    *looked_for = "nothing: the device takes no module format this CTS has an image for";
  return false;
}

}  // namespace tessera::cts
