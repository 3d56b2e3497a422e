// Tessera's Status as Python exceptions: tessera.Error (a RuntimeError) carrying the code's name
// in `.code`, and one subclass per code a caller may want to catch (InvalidArgumentError is also
// a ValueError, NotFoundError a LookupError; DataLossError is a corrupt checkpoint).
#pragma once

#include <pybind11/pybind11.h>

#include "tessera/common/status.h"

namespace tessera::python {

// Creates the exception classes as attributes of `module` (once, at import).
void register_errors(pybind11::module_& module);

// Raises the exception for `status` (which must not be OK): throws pybind11::error_already_set.
[[noreturn]] void raise(const Status& status);

// The value of `result`, or raise(status).
template <typename T>
T value_or_raise(Result<T> result) {
  if (!result.ok()) raise(result.status());
  return std::move(result).value();
}
inline void check(const Status& status) {
  if (!status.ok()) raise(status);
}

}  // namespace tessera::python
