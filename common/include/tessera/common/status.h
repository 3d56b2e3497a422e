// Status and Result<T>: how every Tessera layer reports failure without exceptions.
//
// The codes mirror tsr_status in hal/include/tessera/hal/backend_abi.h value for value, so a status
// crosses the backend ABI without translation tables. A message names what failed and where
// (file, field, rank, operation); the CLI prints it as one line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tessera {

enum class StatusCode : int32_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
  kNoDriver = 100,
  kNoDevice = 101,
  kVersionMismatch = 102,
  kNotReady = 103,
};

// "INVALID_ARGUMENT", "NO_DRIVER", ...; "UNKNOWN(<n>)" is never returned: unknown codes map to
// "UNKNOWN".
std::string_view status_code_name(StatusCode code);

// A code and a message. Cheap to copy when OK (empty message). Thread-compatible.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NOT_FOUND: backend 'cuda': libtessera-backend-cuda.so not in search path"
  std::string to_string() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status with_context(std::string_view context) const;

  // Silences [[nodiscard]] where ignoring a failure is deliberate (best-effort cleanup).
  void ignore() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Builders: invalid_argument("field 'x' must be positive"), ...
Status invalid_argument(std::string message);
Status not_found(std::string message);
Status failed_precondition(std::string message);
Status resource_exhausted(std::string message);
Status unimplemented(std::string message);
Status internal_error(std::string message);
Status unavailable(std::string message);
Status data_loss(std::string message);
Status deadline_exceeded(std::string message);
Status out_of_range(std::string message);
Status already_exists(std::string message);

// A value or the Status explaining why there is none. Never holds an OK status without a value.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT: implicit by design, like StatusOr
  Result(Status status) : state_(std::move(status)) {  // NOLINT
    if (std::get<Status>(state_).ok()) {
      state_ = Status(StatusCode::kInternal, "Result constructed from an OK status without value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }

  // Precondition: ok().
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(state_) : std::move(fallback); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace tessera

#define TSR_STATUS_CONCAT_INNER_(a, b) a##b
#define TSR_STATUS_CONCAT_(a, b) TSR_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define TSR_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::tessera::Status tsr_status_tmp_ = (expr);        \
    if (!tsr_status_tmp_.ok()) return tsr_status_tmp_; \
  } while (0)

// `TSR_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its status.
#define TSR_ASSIGN_OR_RETURN(lhs, expr) \
  TSR_ASSIGN_OR_RETURN_IMPL_(TSR_STATUS_CONCAT_(tsr_result_, __LINE__), lhs, expr)
#define TSR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
