// The checkpointer (runtime/checkpoint) for python/tessera/checkpoint.py: a Checkpointer over
// host memory the Python side owns (torch tensors, registered by address), blobs held here, the
// read-only manifest functions, and a Communicator from the launcher's environment for multi-rank
// checkpoints (commit across ranks, peer replicas, restore). Every blocking call runs without the
// GIL; errors are raised once it is held again.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "errors.h"
#include "tessera/checkpoint/checkpointer.h"
#include "tessera/checkpoint/comm_rank_group.h"
#include "tessera/checkpoint/manifest.h"
#include "tessera/coll/bootstrap.h"
#include "tessera/coll/communicator.h"

namespace py = pybind11;

namespace tessera::python {
namespace {

// Runs `work` without the GIL and raises its error with the GIL held.
template <typename F>
auto unlocked(F&& work) {
  auto result = [&] {
    py::gil_scoped_release released;
    return work();
  }();
  if constexpr (std::is_same_v<decltype(result), Status>) {
    check(result);
  } else {
    return value_or_raise(std::move(result));
  }
}

// The world communicator of this process's launcher (`tessera launch`, torchrun's variables,
// mpirun/PMIx): what a multi-rank checkpoint commits and replicates through.
class PyCommunicator {
 public:
  static std::shared_ptr<PyCommunicator> from_env(double timeout_s) {
    return unlocked([&]() -> Result<std::shared_ptr<PyCommunicator>> {
      coll::BootstrapOptions boot;
      coll::CommOptions options;
      if (timeout_s > 0) {
        boot.timeout = std::chrono::milliseconds(int64_t(timeout_s * 1000));
        options.timeout = boot.timeout;
      }
      TSR_ASSIGN_OR_RETURN(auto bootstrap, coll::Bootstrap::from_environment(boot));
      TSR_ASSIGN_OR_RETURN(auto comm, coll::Communicator::create(std::move(bootstrap), options));
      auto out = std::make_shared<PyCommunicator>();
      out->comm = std::move(comm);
      return out;
    });
  }
  std::shared_ptr<coll::Communicator> comm;
};

py::dict save_start_dict(const ckpt::SaveStart& s) {
  py::dict d;
  d["step"] = s.step;
  d["skipped"] = s.skipped;
  d["waited"] = s.waited;
  d["wait_s"] = s.wait_s;
  d["blocking_s"] = s.blocking_s;
  d["snapshot_bytes"] = s.snapshot_bytes;
  return d;
}

py::dict save_result_dict(const ckpt::SaveResult& r) {
  py::dict d;
  d["step"] = r.step;
  d["delta"] = r.delta;
  d["base_step"] = r.base_step;
  d["blocking_s"] = r.blocking_s;
  d["persist_s"] = r.persist_s;
  d["gc_s"] = r.gc_s;
  d["bytes_written"] = r.bytes_written;
  d["bytes_full"] = r.bytes_full;
  d["bytes_raw"] = r.bytes_raw;
  d["chunks"] = r.chunks;
  d["chunks_changed"] = r.chunks_changed;
  d["replica_s"] = r.replica_s;
  return d;
}

struct Options {
  size_t chunk_bytes = 4u << 20;
  int zstd_level = -1;
  double max_write_mbps = 0;
  bool skip_when_busy = false;
  int keep_last = 3;
  int full_every = 1;
  bool fsync = true;
  bool direct_io = true;
  bool peer_replica = false;
  int replica_stride = 0;  // 0: a buddy on another host when the group spans hosts
  std::string layout;
  std::map<std::string, std::string> metadata;
};

// A Checkpointer whose blobs are strings held here (set before a save, read after a load).
class PyCheckpointer {
 public:
  PyCheckpointer(const std::string& dir, std::shared_ptr<PyCommunicator> comm, const Options& o) {
    ckpt::CheckpointOptions options;
    options.dir = dir;
    options.chunk_bytes = o.chunk_bytes;
    options.zstd_level = o.zstd_level;
    options.max_write_mbps = o.max_write_mbps;
    options.busy_policy = o.skip_when_busy ? ckpt::BusyPolicy::kSkip : ckpt::BusyPolicy::kWait;
    options.keep_last = o.keep_last;
    options.full_every = o.full_every;
    options.fsync = o.fsync;
    options.direct_io = o.direct_io;
    options.peer_replica = o.peer_replica;
    options.replica_stride = o.replica_stride;
    options.layout = o.layout;
    options.metadata = o.metadata;
    std::shared_ptr<ckpt::RankGroup> group;
    if (comm) {
      group = std::make_shared<ckpt::CommRankGroup>(comm->comm);
      comm_ = std::move(comm);  // outlives the checkpointer (declared first)
    } else {
      group = std::make_shared<ckpt::SingleRankGroup>();
    }
    ck_ = unlocked([&] { return ckpt::Checkpointer::create(options, group); });
  }
  ~PyCheckpointer() {
    py::gil_scoped_release released;  // waits for the save in flight
    ck_.reset();
  }

  int rank() const { return ck_->group().rank(); }
  int size() const { return ck_->group().size(); }
  bool busy() const { return ck_->busy(); }

  // Forgets every tensor and blob; waits for a save in flight first (the registry must not change
  // under it).
  void clear() {
    if (ck_->busy()) unlocked([&] { return ck_->wait().status(); });
    ck_->registry().clear();
    blobs_.clear();
  }

  void add_tensor(std::string name, const std::string& dtype, std::vector<int64_t> shape,
                  std::optional<std::vector<int64_t>> offset,
                  std::optional<std::vector<int64_t>> length, uintptr_t data, bool replicated) {
    auto parsed = hal::parse_dtype(dtype);
    if (!parsed) raise(invalid_argument("tensor '" + name + "': unknown dtype '" + dtype + "'"));
    ckpt::Slice slice = ckpt::full_slice(shape);
    if (offset) slice.offset = *offset;
    if (length) slice.len = *length;
    check(ck_->registry().add_host_tensor(std::move(name), *parsed, std::move(shape),
                                          std::move(slice), reinterpret_cast<void*>(data),
                                          replicated));
  }

  void add_blob(const std::string& name, bool replicated) {
    auto value = std::make_unique<std::string>();
    check(ck_->registry().add_blob(name, value.get(), replicated));
    blobs_[name] = std::move(value);
  }
  void set_blob(const std::string& name, const py::bytes& value) {
    blob(name) = std::string(value);
  }
  py::bytes get_blob(const std::string& name) { return py::bytes(blob(name)); }

  py::dict save_async(int64_t step) {
    return save_start_dict(unlocked([&] { return ck_->save_async(step); }));
  }
  py::dict wait() {
    const ckpt::SaveResult r = unlocked([&] { return ck_->wait(); });
    if (!r.status.ok()) {
      raise(Status(r.status.code(),
                   "save of step " + std::to_string(r.step) + ": " + r.status.message()));
    }
    return save_result_dict(r);
  }
  py::dict load(std::optional<int64_t> step, bool fallback) {
    const ckpt::LoadResult r = unlocked([&] { return ck_->load({step, fallback}); });
    py::dict d;
    d["step"] = r.step;
    d["refused"] = r.refused;
    d["bytes_read"] = r.bytes_read;
    d["chunks_read"] = r.chunks_read;
    d["seconds"] = r.seconds;
    return d;
  }
  py::dict restore() {
    const ckpt::RestoreResult r = unlocked([&] { return ck_->restore(); });
    py::dict d;
    d["step"] = r.step;
    d["from_peer"] = r.from_peer;
    d["seconds"] = r.seconds;
    d["detail"] = r.detail;
    return d;
  }

 private:
  std::string& blob(const std::string& name) {
    auto it = blobs_.find(name);
    if (it == blobs_.end()) raise(not_found("blob '" + name + "' is not registered"));
    return *it->second;
  }
  std::shared_ptr<PyCommunicator> comm_;
  std::unique_ptr<ckpt::Checkpointer> ck_;
  std::map<std::string, std::unique_ptr<std::string>> blobs_;  // stable addresses
};

// What a committed step holds: its tensors (name, dtype, global shape) and blobs.
py::dict manifest_dict(const std::string& root, std::optional<int64_t> step) {
  const ckpt::Manifest m = unlocked([&]() -> Result<ckpt::Manifest> {
    int64_t s = 0;
    if (step) {
      s = *step;
    } else {
      TSR_ASSIGN_OR_RETURN(s, ckpt::read_latest(root));
    }
    return ckpt::read_manifest(root, s);
  });
  py::list tensors;
  for (const auto& t : m.tensors) tensors.append(py::make_tuple(t.name, t.dtype, t.shape));
  py::list blobs;
  for (const auto& b : m.blobs) blobs.append(py::make_tuple(b.name, b.size, b.replicated));
  py::dict d;
  d["step"] = m.step;
  d["delta"] = m.delta;
  d["base_step"] = m.base_step;
  d["world_size"] = m.world_size;
  d["layout"] = m.layout;
  d["metadata"] = m.metadata;
  d["tensors"] = tensors;
  d["blobs"] = blobs;
  d["bytes_stored"] = m.bytes_stored();
  return d;
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<PyCommunicator, std::shared_ptr<PyCommunicator>>(
      m, "Communicator", "The world communicator of this process's launcher.")
      .def_static("from_env", &PyCommunicator::from_env, py::arg("timeout_s") = 0.0,
                  "Bootstraps from the launcher's environment (tessera launch, torchrun's "
                  "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, mpirun); collective.")
      .def_property_readonly("rank", [](const PyCommunicator& c) { return c.comm->rank(); })
      .def_property_readonly("size", [](const PyCommunicator& c) { return c.comm->size(); })
      .def("barrier", [](PyCommunicator& c) { unlocked([&] { return c.comm->barrier(); }); });

  py::class_<Options>(m, "CheckpointOptions")
      .def(py::init<>())
      .def_readwrite("chunk_bytes", &Options::chunk_bytes)
      .def_readwrite("zstd_level", &Options::zstd_level)
      .def_readwrite("max_write_mbps", &Options::max_write_mbps)
      .def_readwrite("skip_when_busy", &Options::skip_when_busy)
      .def_readwrite("keep_last", &Options::keep_last)
      .def_readwrite("full_every", &Options::full_every)
      .def_readwrite("fsync", &Options::fsync)
      .def_readwrite("direct_io", &Options::direct_io)
      .def_readwrite("peer_replica", &Options::peer_replica)
      .def_readwrite("replica_stride", &Options::replica_stride)
      .def_readwrite("layout", &Options::layout)
      .def_readwrite("metadata", &Options::metadata);

  py::class_<PyCheckpointer>(m, "Checkpointer")
      .def(py::init<const std::string&, std::shared_ptr<PyCommunicator>, const Options&>(),
           py::arg("dir"), py::arg("comm"), py::arg("options"))
      .def_property_readonly("rank", &PyCheckpointer::rank)
      .def_property_readonly("size", &PyCheckpointer::size)
      .def("busy", &PyCheckpointer::busy)
      .def("clear", &PyCheckpointer::clear)
      .def("add_tensor", &PyCheckpointer::add_tensor, py::arg("name"), py::arg("dtype"),
           py::arg("shape"), py::arg("offset"), py::arg("length"), py::arg("data"),
           py::arg("replicated"))
      .def("add_blob", &PyCheckpointer::add_blob, py::arg("name"), py::arg("replicated"))
      .def("set_blob", &PyCheckpointer::set_blob)
      .def("get_blob", &PyCheckpointer::get_blob)
      .def("save_async", &PyCheckpointer::save_async, py::arg("step"))
      .def("wait", &PyCheckpointer::wait)
      .def("load", &PyCheckpointer::load, py::arg("step"), py::arg("fallback"))
      .def("restore", &PyCheckpointer::restore);

  m.def("read_manifest", &manifest_dict, py::arg("dir"), py::arg("step") = py::none(),
        "What committed step `step` (default: `latest`) of a checkpoint directory holds.");
}

}  // namespace tessera::python
