// The thread-local last error, status names, argument checks and the small stateless calls.
#include <cstdlib>
#include <string>

#include "internal.h"
#include "tessera/hal/dtype.h"

namespace tessera::capi {
namespace {

// One message per thread, so concurrent failures on different threads never mix.
thread_local std::string last_error;

}  // namespace

tessera_status finish_call(std::string_view function, const Status& status) {
  if (status.ok()) {
    last_error.clear();
    return TESSERA_OK;
  }
  last_error.assign(function);
  last_error += ": ";
  last_error += status.message();
  return to_c(status.code());
}

tessera_status to_c(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
    case StatusCode::kCancelled:
    case StatusCode::kUnknown:
    case StatusCode::kInvalidArgument:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kPermissionDenied:
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
    case StatusCode::kInternal:
    case StatusCode::kUnavailable:
    case StatusCode::kDataLoss:
    case StatusCode::kUnauthenticated:
    case StatusCode::kNoDriver:
    case StatusCode::kNoDevice:
    case StatusCode::kVersionMismatch:
    case StatusCode::kNotReady:
      return static_cast<tessera_status>(code);  // same values by construction
  }
  return TESSERA_UNKNOWN;
}

Status check_pointer(const void* pointer, std::string_view name) {
  if (pointer == nullptr) return invalid_argument(std::string(name) + " is NULL");
  return Status();
}

Status check_dtype(tessera_dtype dtype, std::string_view name) {
  const int value = static_cast<int>(dtype);
  if (value < TESSERA_F32 || value > TESSERA_U8) {
    return invalid_argument(std::string(name) + " " + std::to_string(value) +
                            " is not a tessera_dtype (TESSERA_F32..TESSERA_U8)");
  }
  return Status();
}

Status check_reduce_op(tessera_reduce_op op, std::string_view name) {
  const int value = static_cast<int>(op);
  if (value < TESSERA_SUM || value > TESSERA_AVG) {
    return invalid_argument(std::string(name) + " " + std::to_string(value) +
                            " is not a tessera_reduce_op (TESSERA_SUM..TESSERA_AVG)");
  }
  return Status();
}

Status check_struct_size(size_t struct_size, size_t min_size, std::string_view name) {
  if (struct_size < min_size) {
    return invalid_argument(std::string(name) + "->struct_size " + std::to_string(struct_size) +
                            " is smaller than the " + std::to_string(min_size) +
                            " bytes of its first version (set it to sizeof the struct)");
  }
  return Status();
}

hal::DType to_dtype(tessera_dtype dtype) {
  return static_cast<hal::DType>(dtype);  // the values match (see tessera.h)
}

hal::ReduceOp to_reduce_op(tessera_reduce_op op) {
  return static_cast<hal::ReduceOp>(op);
}

}  // namespace tessera::capi

using namespace tessera;

// The C enums mirror the C++ and ABI ones value for value; casts above rely on it.
static_assert(int(TESSERA_U8) == int(TSR_DTYPE_U8) && int(TESSERA_BF16) == int(TSR_DTYPE_BF16));
static_assert(int(TESSERA_AVG) == int(TSR_REDUCE_AVG) && int(TESSERA_MIN) == int(TSR_REDUCE_MIN));
static_assert(int(TESSERA_NOT_READY) == int(StatusCode::kNotReady) &&
              int(TESSERA_DATA_LOSS) == int(StatusCode::kDataLoss));

extern "C" {

const char* tessera_last_error(void) {
  return capi::last_error.c_str();
}

const char* tessera_status_name(tessera_status status) {
  // status_code_name returns views of string literals, so .data() is NUL-terminated and static.
  const int value = static_cast<int>(status);
  if (capi::to_c(static_cast<StatusCode>(value)) != status) return "UNKNOWN";
  return status_code_name(static_cast<StatusCode>(value)).data();
}

const char* tessera_version(void) {
  return TESSERA_VERSION;
}

size_t tessera_dtype_size(tessera_dtype dtype) {
  if (!capi::check_dtype(dtype).ok()) return 0;
  return hal::dtype_size(capi::to_dtype(dtype));
}

void tessera_free(void* memory) {
  std::free(memory);
}

}  // extern "C"
