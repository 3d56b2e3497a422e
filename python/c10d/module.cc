// tessera.torch._c10d: the Python face of the c10d backend (tessera/torch/__init__.py registers
// it with torch.distributed).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/python.h>

#include "process_group.h"
#include "stores.h"

namespace py = pybind11;
using tessera::torch_c10d::ProcessGroupBase;
using tessera::torch_c10d::ProcessGroupTessera;

PYBIND11_MODULE(_c10d, m) {
  m.doc() =
      "torch.distributed's tessera backend (a c10d process group over a Tessera communicator)";
  // The base class must be known to pybind11 before a subclass of it is declared.
  py::module::import("torch.distributed");

  py::class_<ProcessGroupTessera, ProcessGroupBase, c10::intrusive_ptr<ProcessGroupTessera>>(
      m, "ProcessGroupTessera",
      "The tessera process group. Made by torch.distributed.init_process_group('tessera') / "
      "new_group(backend='tessera') once tessera.torch is imported.")
      // The creator torch calls: (store, rank, world size, timeout). Creation waits for every rank,
      // so the GIL is released meanwhile.
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<ProcessGroupTessera>(store, rank, size, timeout);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("abort", &ProcessGroupTessera::abort, py::arg("reason") = "ProcessGroupTessera.abort()",
           "Fails every pending and later operation of the group, here and on every rank the "
           "communicator reaches.",
           py::call_guard<py::gil_scoped_release>())
      .def("flight_record", &ProcessGroupTessera::flight_record,
           "The group's last operations, one per line.");

  m.def("connect_launcher_store", &tessera::torch_c10d::connect_launcher_store, py::arg("host"),
        py::arg("port"), py::arg("timeout"),
        "A torch Store over the TCP store `tessera launch` hosts at MASTER_ADDR:MASTER_PORT.",
        py::call_guard<py::gil_scoped_release>());
}
