#include "errors.h"

#include <map>
#include <string>

namespace py = pybind11;

namespace tessera::python {
namespace {

// Owned by the module (its attributes); these are borrowed pointers kept for raise().
PyObject* g_error = nullptr;
std::map<StatusCode, PyObject*> g_by_code;

PyObject* new_class(py::module_& module, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("tessera.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  module.attr(name) = py::reinterpret_borrow<py::object>(type);
  return type;
}

}  // namespace

void register_errors(py::module_& module) {
  g_error = new_class(module, "Error", PyExc_RuntimeError,
                      "A Tessera operation failed; .code is the status code's name.");
  auto with = [&](PyObject* other) {
    return py::make_tuple(py::reinterpret_borrow<py::object>(g_error),
                          py::reinterpret_borrow<py::object>(other));
  };
  auto only = [&] { return py::make_tuple(py::reinterpret_borrow<py::object>(g_error)); };
  g_by_code[StatusCode::kInvalidArgument] =
      new_class(module, "InvalidArgumentError", with(PyExc_ValueError).ptr(),
                "A bad argument, flag or input file (also a ValueError).");
  g_by_code[StatusCode::kNotFound] =
      new_class(module, "NotFoundError", with(PyExc_LookupError).ptr(),
                "A file, step, tensor or device that does not exist (also a LookupError).");
  g_by_code[StatusCode::kDataLoss] =
      new_class(module, "DataLossError", only().ptr(),
                "Stored data failed its checks: a checksum, size or decompression (a corrupt "
                "checkpoint).");
  g_by_code[StatusCode::kFailedPrecondition] = new_class(
      module, "FailedPreconditionError", only().ptr(), "The call is not valid in this state.");
  g_by_code[StatusCode::kDeadlineExceeded] =
      new_class(module, "DeadlineExceededError", only().ptr(), "A peer or an operation timed out.");
  g_by_code[StatusCode::kUnavailable] =
      new_class(module, "UnavailableError", only().ptr(), "A peer or a service is unreachable.");
  g_by_code[StatusCode::kAborted] =
      new_class(module, "AbortedError", only().ptr(), "The operation was aborted.");
}

void raise(const Status& status) {
  auto it = g_by_code.find(status.code());
  PyObject* type = it == g_by_code.end() ? g_error : it->second;
  py::object exc = py::reinterpret_borrow<py::object>(type)(status.message());
  exc.attr("code") = std::string(status_code_name(status.code()));
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

}  // namespace tessera::python
