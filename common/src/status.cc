#include "tessera/common/status.h"

namespace tessera {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
    case StatusCode::kNoDriver: return "NO_DRIVER";
    case StatusCode::kNoDevice: return "NO_DEVICE";
    case StatusCode::kVersionMismatch: return "VERSION_MISMATCH";
    case StatusCode::kNotReady: return "NOT_READY";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string out(status_code_name(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
Status not_found(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
Status failed_precondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
Status resource_exhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
Status unimplemented(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
Status internal_error(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}
Status unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
Status data_loss(std::string m) {
  return {StatusCode::kDataLoss, std::move(m)};
}
Status deadline_exceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
Status out_of_range(std::string m) {
  return {StatusCode::kOutOfRange, std::move(m)};
}
Status already_exists(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}

}  // namespace tessera
