// The overlap engine's codec host steps (tessera/overlap/codec_host.h) on Python buffers (the
// NumPy views of CPU torch tensors), for the DDP communication hooks in
// python/tessera/torch/hooks.py. Each checks the buffers' element type, contiguity and size and
// runs without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "errors.h"
#include "tessera/overlap/codec_host.h"

namespace py = pybind11;

namespace tessera::python {
namespace {

// A C-contiguous buffer of `expected` elements of format `format` ("f": f32, "i": i32).
template <typename T>
T* elements(const py::buffer& buffer, const char* what, const char* format, size_t expected,
            bool writable) {
  py::buffer_info info = buffer.request(writable);
  const bool type_ok = info.itemsize == sizeof(T) &&
                       (info.format == format ||
                        (format[0] == 'i' && info.format == "l" && sizeof(long) == sizeof(T)));
  if (!type_ok) {
    raise(invalid_argument(std::string(what) + ": expected " +
                           (format[0] == 'f' ? "float32" : "int32") + " elements, got format '" +
                           info.format + "'"));
  }
  ssize_t stride = info.itemsize;
  for (ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[size_t(d)] > 1 && info.strides[size_t(d)] != stride) {
      raise(invalid_argument(std::string(what) + ": the buffer is not contiguous"));
    }
    stride *= info.shape[size_t(d)];
  }
  if (size_t(info.size) != expected) {
    raise(invalid_argument(std::string(what) + ": " + std::to_string(info.size) +
                           " elements, expected " + std::to_string(expected)));
  }
  return static_cast<T*>(info.ptr);
}

size_t size_of(const py::buffer& buffer) {
  return size_t(buffer.request().size);
}

void topk_encode(overlap::TopKSelector& selector, const py::buffer& acc, size_t k, bool zero_sent,
                 const py::buffer& pairs) {
  const size_t count = size_of(acc);
  if (k < 1 || k > count) {
    raise(invalid_argument("topk: k " + std::to_string(k) + " is not in 1.." +
                           std::to_string(count)));
  }
  float* a = elements<float>(acc, "topk acc", "f", count, true);
  int32_t* p = elements<int32_t>(pairs, "topk pairs", "i", 2 * k, true);
  py::gil_scoped_release released;
  selector.encode(a, count, k, zero_sent, p);
}

void topk_decode(const py::buffer& pairs, int world, size_t k, bool average,
                 const py::buffer& out) {
  if (world < 1) raise(invalid_argument("topk: world " + std::to_string(world) + " < 1"));
  const size_t count = size_of(out);
  const int32_t* p =
      elements<int32_t>(pairs, "topk gathered pairs", "i", 2 * k * size_t(world), false);
  float* o = elements<float>(out, "topk out", "f", count, true);
  bool in_range = true;
  {
    py::gil_scoped_release released;
    in_range = overlap::topk_decode(p, world, k, count, average, o);
  }
  if (!in_range) {
    raise(data_loss("topk: a gathered index is outside the bucket of " + std::to_string(count) +
                    " elements"));
  }
}

}  // namespace

void bind_codecs(py::module_& m) {
  py::module_ c = m.def_submodule("codecs", "The overlap engine's codec host steps");
  c.def("topk_k", &overlap::topk_k, py::arg("ratio"), py::arg("count"));
  py::class_<overlap::TopKSelector>(c, "TopKSelector").def(py::init<>());
  c.def("topk_encode", &topk_encode, py::arg("selector"), py::arg("acc"), py::arg("k"),
        py::arg("zero_sent"), py::arg("pairs"),
        "The k largest |acc| as k int32 indices then k f32 bit patterns into `pairs`; with "
        "zero_sent, the sent entries of acc become 0 (the error-feedback residual).");
  c.def("topk_decode", &topk_decode, py::arg("pairs"), py::arg("world"), py::arg("k"),
        py::arg("average"), py::arg("out"),
        "Sums every rank's pairs (in rank order) into the dense `out`.");
  c.def(
      "powersgd_shape",
      [](size_t count, int rank) {
        const overlap::PowerSgdShape s = overlap::powersgd_shape(count, rank);
        return py::make_tuple(s.rows, s.cols, s.rank);
      },
      py::arg("count"), py::arg("rank"), "(rows, cols, r) of the matrix view of a bucket.");
  c.def("powersgd_compresses", &overlap::powersgd_compresses, py::arg("count"), py::arg("rank"));
  c.def(
      "powersgd_initial_q",
      [](uint64_t seed, int bucket, const py::buffer& q) {
        float* out = elements<float>(q, "powersgd Q", "f", size_of(q), true);
        overlap::powersgd_initial_q(seed, bucket, size_of(q), out);
      },
      py::arg("seed"), py::arg("bucket"), py::arg("q"));
  c.def(
      "powersgd_orthonormalise",
      [](const py::buffer& p, size_t rows, size_t rank) {
        float* out = elements<float>(p, "powersgd P", "f", rows * rank, true);
        py::gil_scoped_release released;
        overlap::powersgd_orthonormalise(out, rows, rank);
      },
      py::arg("p"), py::arg("rows"), py::arg("rank"));
}

}  // namespace tessera::python
