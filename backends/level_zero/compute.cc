// reduce_async and cast_async: argument checks as in backends/host, then a launch of the SPIR-V
// kernels (kernels/reduce.cl, kernels/cast.cl) on the stream. Pointers must be memory of this
// backend (device, pinned host or IPC): kernels cannot read pageable host memory.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kernels.h"

namespace tessera::ze {
namespace {

constexpr int32_t kMaxReduceSources = 64;

// Mirrors TsrSources in kernels/common.h: passed by value.
struct KernelSources {
  uint64_t address[kMaxReduceSources];
};
static_assert(sizeof(KernelSources) == 512, "must match TsrSources in kernels/common.h");

struct DtypeInfo {
  const char* name;  // kernel name suffix
  size_t size;       // bytes
};
constexpr DtypeInfo kDtypes[TSR_DTYPE_COUNT] = {{"f32", 4}, {"f16", 2}, {"bf16", 2}, {"f64", 8},
                                                {"i32", 4}, {"i64", 8}, {"u8", 1}};

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// `ptr`..`ptr + bytes` must lie in one allocation of this backend.
tsr_status check_memory(Backend& b, const char* operation, const char* what, const void* ptr,
                        size_t bytes) {
  std::optional<Allocation> a = find_allocation(b, ptr);
  if (!a) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s %p is not memory of the level_zero backend (kernels read only device, "
                "pinned host or IPC memory)",
                operation, what, ptr);
  }
  const auto offset = size_t(static_cast<const char*>(ptr) - static_cast<const char*>(a->base));
  if (bytes > a->size - offset) {
    return fail(TSR_INVALID_ARGUMENT,
                "%s: %s %p + %zu bytes runs past the end of its allocation (%zu bytes at %p)",
                operation, what, ptr, bytes, a->size, a->base);
  }
  return TSR_OK;
}

}  // namespace

namespace api {

tsr_status reduce_async(void* dst, const void* const* srcs, int32_t num_srcs, size_t count,
                        tsr_dtype dtype_in, tsr_reduce_op op_in, tsr_stream handle) {
  static constexpr const char* kOp = "reduce_async";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status st = require(kOp, &b); st != TSR_OK) return st;
    Stream* s = nullptr;
    if (tsr_status st = lookup_stream(*b, kOp, handle, &s); st != TSR_OK) return st;
    int32_t dtype, op;  // the caller's raw ints (backend_abi.h): validate before use
    std::memcpy(&dtype, &dtype_in, sizeof dtype);
    std::memcpy(&op, &op_in, sizeof op);
    if (dtype < 0 || dtype >= TSR_DTYPE_COUNT) {
      return fail(TSR_INVALID_ARGUMENT, "%s: dtype %d is not a tsr_dtype", kOp, dtype);
    }
    if (op < 0 || op >= TSR_REDUCE_OP_COUNT) {
      return fail(TSR_INVALID_ARGUMENT, "%s: op %d is not a tsr_reduce_op", kOp, op);
    }
    if (num_srcs < 1 || num_srcs > kMaxReduceSources) {
      return fail(TSR_INVALID_ARGUMENT, "%s: num_srcs is %d (must be in [1, %d])", kOp, num_srcs,
                  kMaxReduceSources);
    }
    if (count == 0) return TSR_OK;
    if (dst == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: dst is NULL", kOp);
    if (srcs == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: srcs is NULL", kOp);
    const DtypeInfo& info = kDtypes[dtype];
    if (count > SIZE_MAX / info.size) {
      return fail(TSR_INVALID_ARGUMENT, "%s: count %zu of %s overflows size_t", kOp, count,
                  info.name);
    }
    const size_t bytes = count * info.size;
    if (tsr_status st = check_memory(*b, kOp, "dst", dst, bytes); st != TSR_OK) return st;
    KernelSources sources{};  // copied into the launch: the caller's array may go away
    for (int32_t k = 0; k < num_srcs; ++k) {
      char name[24];
      std::snprintf(name, sizeof name, "srcs[%d]", k);
      if (srcs[k] == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: %s is NULL", kOp, name);
      if (tsr_status st = check_memory(*b, kOp, name, srcs[k], bytes); st != TSR_OK) return st;
      if (srcs[k] != dst && overlap(srcs[k], bytes, dst, bytes)) {
        return fail(TSR_INVALID_ARGUMENT,
                    "%s: %s overlaps dst without being equal to it (only exact in-place "
                    "reduction is allowed)",
                    kOp, name);
      }
      sources.address[k] = uint64_t(reinterpret_cast<uintptr_t>(srcs[k]));
    }
    const uint32_t n = uint32_t(num_srcs), op_arg = uint32_t(op);
    const uint64_t count_arg = count;
    char kernel[32];
    std::snprintf(kernel, sizeof kernel, "reduce_%s", info.name);
    return launch_kernel(*b, *s, kOp, "reduce", dtype == TSR_DTYPE_F64, kernel,
                         {{sizeof dst, &dst},
                          {sizeof sources, &sources},
                          {sizeof n, &n},
                          {sizeof op_arg, &op_arg},
                          {sizeof count_arg, &count_arg}},
                         count);
  });
}

tsr_status cast_async(void* dst, tsr_dtype dst_dtype_in, const void* src, tsr_dtype src_dtype_in,
                      size_t count, tsr_stream handle) {
  static constexpr const char* kOp = "cast_async";
  return guarded(kOp, [&] {
    Backend* b = nullptr;
    if (tsr_status st = require(kOp, &b); st != TSR_OK) return st;
    Stream* s = nullptr;
    if (tsr_status st = lookup_stream(*b, kOp, handle, &s); st != TSR_OK) return st;
    int32_t to, from;
    std::memcpy(&to, &dst_dtype_in, sizeof to);
    std::memcpy(&from, &src_dtype_in, sizeof from);
    if (to < 0 || to >= TSR_DTYPE_COUNT) {
      return fail(TSR_INVALID_ARGUMENT, "%s: dst_dtype %d is not a tsr_dtype", kOp, to);
    }
    if (from < 0 || from >= TSR_DTYPE_COUNT) {
      return fail(TSR_INVALID_ARGUMENT, "%s: src_dtype %d is not a tsr_dtype", kOp, from);
    }
    if (count == 0) return TSR_OK;
    if (dst == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: dst is NULL", kOp);
    if (src == nullptr) return fail(TSR_INVALID_ARGUMENT, "%s: src is NULL", kOp);
    const DtypeInfo &to_info = kDtypes[to], &from_info = kDtypes[from];
    if (count > SIZE_MAX / std::max(to_info.size, from_info.size)) {
      return fail(TSR_INVALID_ARGUMENT, "%s: count %zu overflows size_t", kOp, count);
    }
    const size_t dst_bytes = count * to_info.size, src_bytes = count * from_info.size;
    if (tsr_status st = check_memory(*b, kOp, "dst", dst, dst_bytes); st != TSR_OK) return st;
    if (tsr_status st = check_memory(*b, kOp, "src", src, src_bytes); st != TSR_OK) return st;
    // Appends the conversion (a copy for equal dtypes) of `from` into dst.
    auto convert = [&](const void* from_ptr) {
      if (to == from) {
        return submit(*s, kOp, "zeCommandListAppendMemoryCopy", [&] {
          return ze().zeCommandListAppendMemoryCopy(s->list, dst, from_ptr, dst_bytes, nullptr, 0,
                                                    nullptr);
        });
      }
      char kernel[32];
      std::snprintf(kernel, sizeof kernel, "cast_%s_%s", from_info.name, to_info.name);
      const uint64_t count_arg = count;
      return launch_kernel(
          *b, *s, kOp, "cast", to == TSR_DTYPE_F64 || from == TSR_DTYPE_F64, kernel,
          {{sizeof dst, &dst}, {sizeof from_ptr, &from_ptr}, {sizeof count_arg, &count_arg}},
          count);
    };
    if (dst == src && to == from) return TSR_OK;
    // In place with equal element sizes, each work item reads its element before writing it.
    if (!overlap(dst, dst_bytes, src, src_bytes) ||
        (dst == src && to_info.size == from_info.size)) {
      return convert(src);
    }
    // Other overlaps convert from a device copy of the source, freed once the stream is past it.
    const Device& d = b->devices[size_t(s->device)];
    ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* copy = nullptr;
    TSR_ZE_CHECK(kOp, zeMemAllocDevice, d.context, &desc, src_bytes, 256, d.handle, &copy);
    tsr_status st = submit(*s, kOp, "zeCommandListAppendMemoryCopy", [&] {
      return ze().zeCommandListAppendMemoryCopy(s->list, copy, src, src_bytes, nullptr, 0, nullptr);
    });
    if (st == TSR_OK) st = convert(copy);
    std::lock_guard lock(s->mutex);
    ze_context_handle_t context = d.context;
    s->deferred.emplace_back(s->submitted,
                             [context, copy] { (void)ze().zeMemFree(context, copy); });
    return st;
  });
}

}  // namespace api
}  // namespace tessera::ze
