// The state registry: what a rank saves and loads. Named tensors (device memory or host memory,
// with their dtype, global shape and the slice this rank holds) and named blobs (bytes: RNG state,
// data-loader cursor, user metadata, ...).
//
// A tensor's bytes are the row-major elements of its local slice, contiguous at `data`. A tensor
// marked `replicated` is held identically by several ranks (data parallelism): only the lowest
// rank holding a given slice writes it. Registration is not thread-safe; register everything
// before the first save and do not change it while a save is in flight. The registry does not own
// the memory it points to; the memory must outlive the Checkpointer. To move to another layout in
// memory (Checkpointer::reshard_from_memory), clear() the registry and register the new slices.
//
// Device memory is never read by the CPU: a device tensor is copied into the Checkpointer's pinned
// buffers on a stream of its device, and written back with host->device copies. The registry of a
// Checkpointer created with a device asks that device's backend what each pointer is
// (pointer_attributes) and refuses, naming the tensor and the device, a device tensor that is not
// memory of that device (another device, another backend, host memory) and a host tensor that is
// device memory the CPU cannot read (a discrete device).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.h"
#include "tessera/hal/dtype.h"
#include "tessera/hal/memory.h"
#include "tessera/hal/platform.h"

namespace tessera::ckpt {

// The part [offset[d], offset[d] + len[d]) of every dimension d of a global tensor.
struct Slice {
  std::vector<int64_t> offset;
  std::vector<int64_t> len;
  int64_t elements() const;
  friend bool operator==(const Slice&, const Slice&) = default;
};

// The whole of a tensor of shape `shape`.
Slice full_slice(const std::vector<int64_t>& shape);
// The slice of `shape` that part `index` of `parts` holds when split evenly along `dim`
// (INVALID_ARGUMENT when the extent does not divide).
Result<Slice> split_slice(const std::vector<int64_t>& shape, const Slice& of, int dim, int parts,
                          int index);
// "[0:4, 8:16]"
std::string slice_text(const Slice& slice);

enum class Memory { kHost, kDevice };

// How a tensor is cut under a parallel layout (tp, pp, dp, ZeRO; layout.h): the rule offline
// resharding (`tessera ckpt reshard`) applies to give each rank of another layout its slice.
// Recorded in the manifest. A tensor without a placement is held whole by every rank.
struct Placement {
  int tp_dim = -1;      // split evenly along this dim over the tp ranks; -1: not split by tp
  int zero_dim = -1;    // then split along this dim over the dp ranks when the plan's zero stage
  int zero_stage = 1;   //   is >= zero_stage (1: optimizer state, 2: gradients, 3: parameters)
  int layer = -1;       // the block it belongs to: with pp > 1 only the stage holding that block
                        // has it (the plan's stage_layers); -1: every pipeline stage has it
  int expert_dim = -1;  // an expert tensor: its experts along this dim are split over the ep
                        // ranks (and its ZeRO shards over the expert-data-parallel group)
  friend bool operator==(const Placement&, const Placement&) = default;
};

struct TensorEntry {
  std::string name;
  hal::DType dtype = hal::DType::kF32;
  std::vector<int64_t> shape;  // global
  Slice slice;                 // this rank's part
  bool replicated = false;
  Memory memory = Memory::kHost;
  void* data = nullptr;  // host pointer, or device pointer of the Checkpointer's device
  std::optional<Placement> placement;  // set_placement; recorded in the manifest
  size_t bytes() const;                // of the local slice
};

// A blob is read with `get` at snapshot time (training thread) and written back with `set` on
// load. `replicated`: identical on every rank; only the lowest rank writes it.
struct BlobEntry {
  std::string name;
  std::function<std::string()> get;
  std::function<Status(std::string_view)> set;
  bool replicated = false;
};

class StateRegistry {
 public:
  // Host memory at `data` holding the slice; bytes = slice.elements() * dtype size.
  // INVALID_ARGUMENT when `data` is device memory the CPU cannot read (use add_device_tensor).
  Status add_host_tensor(std::string name, hal::DType dtype, std::vector<int64_t> shape,
                         Slice slice, void* data, bool replicated = false);
  // Device memory of the Checkpointer's device (CheckpointOptions::device): `buffer` of that
  // device, or `data` inside one of its allocations, holding the slice from `data` on.
  // INVALID_ARGUMENT naming the tensor and the device when the memory is not that device's (or runs
  // past the end of its allocation); FAILED_PRECONDITION when the Checkpointer has no device.
  Status add_device_tensor(std::string name, hal::DType dtype, std::vector<int64_t> shape,
                           Slice slice, const hal::DeviceBuffer& buffer, bool replicated = false);
  Status add_device_tensor(std::string name, hal::DType dtype, std::vector<int64_t> shape,
                           Slice slice, void* data, bool replicated = false);
  // Either: a device tensor when the device's backend says `data` is its device memory, else a
  // host tensor (the C API's tessera_checkpoint_add_tensor). Without a device, a host tensor.
  Status add_tensor(std::string name, hal::DType dtype, std::vector<int64_t> shape, Slice slice,
                    void* data, bool replicated = false);
  Status add_blob(BlobEntry blob);
  // A blob backed by a string the caller owns (read at snapshot, assigned on load).
  Status add_blob(std::string name, std::string* value, bool replicated = false);
  // Records how tensor `name` is cut under a parallel layout (used by offline resharding).
  // INVALID_ARGUMENT when a dim is outside the tensor's rank; NOT_FOUND for an unknown name.
  Status set_placement(std::string_view name, Placement placement);
  // Forgets every tensor and blob (to register another layout; see reshard_from_memory). Not while
  // a save is in flight.
  void clear() {
    tensors_.clear();
    blobs_.clear();
  }

  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const std::vector<BlobEntry>& blobs() const { return blobs_; }
  const TensorEntry* find_tensor(std::string_view name) const;
  // Sum of the local slices' bytes.
  size_t total_tensor_bytes() const;

 private:
  friend class Checkpointer;  // binds its device at creation
  Status check_new_name(std::string_view name) const;
  Status add_checked_device_tensor(std::string name, hal::DType dtype, std::vector<int64_t> shape,
                                   Slice slice, void* data, bool replicated);
  std::vector<TensorEntry> tensors_;
  std::vector<BlobEntry> blobs_;
  std::optional<hal::Device> device_;  // the Checkpointer's: what pointers are checked against
};

}  // namespace tessera::ckpt
