/* Host-format images that module_load must refuse, one per BAD_* (tests/hal/CMakeLists.txt builds
 * each as bad_host_module_<name>.so): the table checks of backends/host/module.cc. */
#include <stddef.h>
#include <stdint.h>

#include "tessera/hal/backend_abi.h"

__attribute__((unused)) static int noop(const tsr_host_kernel_call* call, const char** message) {
  (void)call;
  (void)message;
  return 0;
}

static const size_t kOneArg[] __attribute__((unused)) = {4};
static const size_t kZeroArg[] __attribute__((unused)) = {0};

#if defined(BAD_DUPLICATE_NAMES)
static const tsr_host_kernel_desc kKernels[] = {{"twice", noop, 1, kOneArg},
                                                {"twice", noop, 1, kOneArg}};
#elif defined(BAD_NULL_FN)
static const tsr_host_kernel_desc kKernels[] = {{"no_function", NULL, 1, kOneArg}};
#elif defined(BAD_ZERO_ARG_SIZE)
static const tsr_host_kernel_desc kKernels[] = {{"zero_sized", noop, 1, kZeroArg}};
#else
static const tsr_host_kernel_desc kKernels[] = {{"fine", noop, 1, kOneArg}};
#endif

static const tsr_host_module kModule = {sizeof(tsr_host_module),
#if defined(BAD_WRONG_MAJOR)
                                        TSR_BACKEND_ABI_MAJOR + 1,
#else
                                        TSR_BACKEND_ABI_MAJOR,
#endif
                                        sizeof kKernels / sizeof kKernels[0], kKernels};

#if !defined(BAD_NO_ENTRY)
__attribute__((visibility("default"))) const tsr_host_module* tessera_host_module_v1(void) {
  return &kModule;
}
#else
__attribute__((visibility("default"))) const tsr_host_module* not_the_entry_point(void) {
  return &kModule;
}
#endif
