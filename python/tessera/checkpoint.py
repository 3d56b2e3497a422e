"""tessera.checkpoint: asynchronous, incremental, checksummed checkpoints of torch state dicts
through Tessera's checkpointer (runtime/checkpoint, docs/CHECKPOINT.md).

    import tessera.checkpoint as tc
    h = tc.save({"model": model.state_dict(), "optim": opt.state_dict()}, "ckpt", step)
    ...train on; the tensors may change as soon as save() returns...
    h.wait()                                   # committed (or raises why not)
    state = tc.load("ckpt")                    # the newest committed step, verified
    tc.load("ckpt", state_dict=template)       # into existing tensors (in place)

Like torch.distributed.checkpoint.async_save / load: save() blocks only for the snapshot of the
tensors into pinned host memory; compression (zstd), checksums (xxh3 per chunk and per file),
writing and the atomic commit run on the checkpointer's background thread. Every `full_every`-th
save is full, the others store only the chunks that changed (XOR deltas). A corrupt chunk, file
or manifest raises tessera.DataLossError naming it. Loading reshards: a `Shard` in the state dict
declares that a tensor is a slice of a global tensor, and load() fills any slice from whatever
slices were saved.

Multi-rank jobs pass comm=tessera.Communicator.from_env() (every rank calls every save/load in
the same order): the save commits atomically across ranks, tensors held by several ranks
(plain tensors in a data-parallel job: `replicated`) are written once, and peer_replica=True
keeps each rank's newest snapshot in a buddy's memory for restore(). Without a communicator the
process is a job of one rank.

Tensors are saved from and loaded into CPU memory; tensors on an accelerator are copied through
the host. Supported dtypes: float32, float16, bfloat16, float64, int32, int64, uint8, and bool and
int8 (stored as their bytes); any other raises InvalidArgumentError naming the key. Non-tensor
values (numbers, strings, None, lists, tuples, dicts with str/int/float/bool keys) are kept in a
JSON document inside the checkpoint (never pickled: loading a checkpoint runs no code).
"""

import json
import os
import threading

import torch

from . import _tessera
from ._tessera import DataLossError, InvalidArgumentError  # noqa: F401  (documented errors)

__all__ = ["Checkpointer", "Shard", "SaveHandle", "save", "load", "restore", "read_manifest"]

_SKELETON = "__tessera_python__/state"
_FORMAT = 1

# torch dtype -> (checkpointer dtype, dtype the bytes are registered as).
_DTYPES = {
    torch.float32: ("f32", torch.float32),
    torch.float16: ("f16", torch.float16),
    torch.bfloat16: ("bf16", torch.bfloat16),
    torch.float64: ("f64", torch.float64),
    torch.int32: ("i32", torch.int32),
    torch.int64: ("i64", torch.int64),
    torch.uint8: ("u8", torch.uint8),
    torch.bool: ("u8", torch.uint8),
    torch.int8: ("u8", torch.uint8),
}
_FROM_HAL = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
             "f64": torch.float64, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8}
_TORCH_NAMES = {dtype: str(dtype).replace("torch.", "") for dtype in _DTYPES}
_BY_TORCH_NAME = {name: dtype for dtype, name in _TORCH_NAMES.items()}


class Shard:
    """A tensor that is the slice [offset, offset + tensor.shape) of a global tensor of shape
    `global_shape`. Saved as that slice; loaded from whatever slices were saved (resharding).
    `replicated`: other ranks hold the same slice (only the lowest writes it)."""

    def __init__(self, tensor, global_shape, offset, replicated=False):
        if len(global_shape) != tensor.dim() or len(offset) != tensor.dim():
            raise InvalidArgumentError(
                f"Shard: tensor of {tensor.dim()} dims, global_shape {list(global_shape)}, "
                f"offset {list(offset)}: all three must have the same rank")
        self.tensor = tensor
        self.global_shape = [int(v) for v in global_shape]
        self.offset = [int(v) for v in offset]
        self.replicated = replicated

    def __repr__(self):
        return (f"Shard(shape={list(self.tensor.shape)}, global_shape={self.global_shape}, "
                f"offset={self.offset})")


# ---- the state dict as a JSON skeleton plus named tensors ---------------------------------------

def _key_node(key, where):
    if isinstance(key, bool):
        return ["b", key]
    if isinstance(key, int):
        return ["i", key]
    if isinstance(key, float):
        return ["f", key]
    if isinstance(key, str):
        return ["s", key]
    raise InvalidArgumentError(f"{where}: dict key {key!r} of type {type(key).__name__} "
                               "(supported: str, int, float, bool)")


def _key_value(node):
    return node[1]


class _Flattener:
    """Turns a nested state into a JSON-able skeleton, collecting its tensors by name."""

    def __init__(self):
        self.tensors = []  # (name, Shard-or-tensor, torch dtype name)
        self._names = set()

    def _name(self, path):
        name = "/".join(path) or "tensor"
        candidate, n = name, 1
        while candidate in self._names or candidate == _SKELETON:
            n += 1
            candidate = f"{name}#{n}"
        self._names.add(candidate)
        return candidate

    def node(self, value, path):
        where = "/".join(path) or "state"
        if isinstance(value, (torch.Tensor, Shard)):
            tensor = value.tensor if isinstance(value, Shard) else value
            if tensor.dtype not in _DTYPES:
                raise InvalidArgumentError(
                    f"{where}: dtype {tensor.dtype} is not supported by the checkpointer "
                    f"(supported: {', '.join(_TORCH_NAMES.values())})")
            name = self._name(path)
            self.tensors.append((name, value))
            return {"T": name, "dtype": _TORCH_NAMES[tensor.dtype]}
        if isinstance(value, dict):
            return {"D": [[_key_node(k, where), self.node(v, path + [str(k)])]
                          for k, v in value.items()]}
        if isinstance(value, list):
            return {"L": [self.node(v, path + [str(i)]) for i, v in enumerate(value)]}
        if isinstance(value, tuple):
            return {"U": [self.node(v, path + [str(i)]) for i, v in enumerate(value)]}
        if value is None or isinstance(value, (bool, int, float, str)):
            return {"V": value}
        raise InvalidArgumentError(f"{where}: value of type {type(value).__name__} cannot be "
                                   "checkpointed (tensors, numbers, strings, None, lists, tuples "
                                   "and dicts can)")


def _build(node, tensors, where="state"):
    """The state from a skeleton, with tensors[name] for each tensor."""
    if not isinstance(node, dict) or len(node) == 0:
        raise DataLossError(f"{where}: malformed state document")
    if "T" in node:
        name = node["T"]
        if name not in tensors:
            raise DataLossError(f"{where}: tensor '{name}' is not in the checkpoint")
        return tensors[name]
    if "D" in node:
        return {_key_value(k): _build(v, tensors, f"{where}/{_key_value(k)}") for k, v in node["D"]}
    if "L" in node:
        return [_build(v, tensors, f"{where}/{i}") for i, v in enumerate(node["L"])]
    if "U" in node:
        return tuple(_build(v, tensors, f"{where}/{i}") for i, v in enumerate(node["U"]))
    if "V" in node:
        return node["V"]
    raise DataLossError(f"{where}: malformed state document")


def _tensor_names(node, out):
    if isinstance(node, dict):
        if "T" in node:
            out[node["T"]] = node.get("dtype")
        for key in ("D", "L", "U"):
            for item in node.get(key, []):
                _tensor_names(item[1] if key == "D" else item, out)
    return out


# ---- registration -----------------------------------------------------------------------------

class _Registered:
    """One tensor as the checkpointer sees it: host memory, contiguous, a checkpointer dtype."""

    def __init__(self, name, value, replicated_default):
        shard = value if isinstance(value, Shard) else None
        tensor = shard.tensor if shard else value
        self.name = name
        self.original = tensor
        hal_dtype, view_dtype = _DTYPES[tensor.dtype]
        self.hal_dtype = hal_dtype
        host = tensor.detach()
        if host.device.type != "cpu":
            host = host.cpu()
        if not host.is_contiguous():
            host = host.contiguous()
        self.copied = host.data_ptr() != tensor.data_ptr() or host.device != tensor.device
        self.host = host.view(view_dtype) if view_dtype != tensor.dtype else host
        self.shape = shard.global_shape if shard else list(tensor.shape)
        self.offset = shard.offset if shard else None
        self.length = list(tensor.shape) if shard else None
        self.replicated = shard.replicated if shard else replicated_default

    def key(self):
        return (self.name, self.hal_dtype, tuple(self.shape), tuple(self.offset or ()),
                tuple(self.length or ()), self.host.data_ptr(), self.replicated)

    def copy_back(self):
        """After a load into a copy: the loaded values into the caller's tensor."""
        if self.copied:
            source = self.host.view(self.original.dtype) if self.host.dtype != self.original.dtype \
                else self.host
            with torch.no_grad():
                self.original.copy_(source.view(self.original.shape))


class SaveHandle:
    """An asynchronous save: wait() returns the checkpointer's result (bytes written, delta or
    full, times) once the step is committed, or raises why it was not."""

    def __init__(self, checkpointer, step, start):
        self._ck = checkpointer
        self.step = step
        self.start = start  # what save blocked for: blocking_s, snapshot_bytes, waited, skipped
        self._result = None
        self._error = None

    @property
    def skipped(self):
        return bool(self.start["skipped"])

    def done(self):
        """Whether the save has finished (committed or failed): wait() will not block."""
        return (self._result is not None or self._error is not None or
                not self._ck._ck.busy())

    def wait(self):
        if self._result is None and self._error is None:
            self._ck._wait_for(self)
        if self._error is not None:
            raise self._error
        return self._result


class Checkpointer:
    """One checkpoint directory. Keep one per directory for the job's life: incremental saves
    delta against this object's previous saves.

    comm: a tessera.Communicator for multi-rank jobs (None: one rank).
    full_every: 1 makes every save full; K: a full save, then K-1 deltas (default 4).
    keep_last: committed steps kept. chunk_bytes: the unit of checksum, delta and resharding.
    peer_replica: keep the newest snapshot in a buddy rank's memory (needs comm; restore()).
    replica_stride: buddy = (rank + stride) % size; 0 (default) picks the stride from the ranks'
    hosts so that every buddy is on another host when the group spans hosts.
    skip_when_busy: a save while the previous one persists is skipped (default: it waits).
    fsync=False / direct_io=False: for tests on throwaway directories.
    """

    def __init__(self, dir, *, comm=None, full_every=4, keep_last=3, chunk_bytes=4 << 20,
                 zstd_level=-1, max_write_mbps=0.0, skip_when_busy=False, peer_replica=False,
                 replica_stride=0, fsync=True, direct_io=True, metadata=None):
        if peer_replica and comm is None:
            raise InvalidArgumentError("peer_replica needs a communicator (comm=): replicas live "
                                       "in another rank's memory")
        options = _tessera.CheckpointOptions()
        options.full_every = full_every
        options.keep_last = keep_last
        options.chunk_bytes = chunk_bytes
        options.zstd_level = zstd_level
        options.max_write_mbps = max_write_mbps
        options.skip_when_busy = skip_when_busy
        options.peer_replica = peer_replica
        options.replica_stride = replica_stride
        options.fsync = fsync
        options.direct_io = direct_io
        options.metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
        self.dir = os.fspath(dir)
        self._skip_when_busy = skip_when_busy
        self._ck = _tessera.Checkpointer(self.dir, comm, options)
        self._registered = None  # the keys of what the registry holds
        self._held = []  # the registered tensors (kept alive while registered)
        self._saving = None
        self._lock = threading.Lock()

    @property
    def rank(self):
        return self._ck.rank

    @property
    def size(self):
        return self._ck.size

    def _register(self, entries, skeleton_text=None):
        keys = [e.key() for e in entries]
        if keys != self._registered:
            self._settle()
            self._ck.clear()
            self._registered = None
            self._held = []
            for e in entries:
                self._ck.add_tensor(e.name, e.hal_dtype, e.shape, e.offset, e.length,
                                    e.host.data_ptr(), e.replicated)
            self._ck.add_blob(_SKELETON, True)
            self._registered = keys
            self._held = entries
        if skeleton_text is not None:
            self._ck.set_blob(_SKELETON, skeleton_text.encode())

    def save(self, state_dict, step, async_=True):
        """Snapshots `state_dict` as step `step` and persists it in the background; returns a
        SaveHandle (async_=False: waits and returns the handle of the committed save)."""
        flat = _Flattener()
        skeleton = {"format": _FORMAT, "state": flat.node(state_dict, [])}
        replicated = self.size > 1
        entries = [_Registered(name, value, replicated) for name, value in flat.tensors]
        with self._lock:
            self._settle(block=not self._skip_when_busy)
            self._register(entries, json.dumps(skeleton))
            start = self._ck.save_async(int(step))
            handle = SaveHandle(self, int(step), start)
            if not start["skipped"]:
                self._saving = handle
        if not async_:
            handle.wait()
        return handle

    def _settle(self, block=True):
        """Gives the save in flight its outcome (the checkpointer keeps only the last one)."""
        handle = self._saving
        if handle is None or (not block and self._ck.busy()):
            return
        self._saving = None
        try:
            handle._result = self._ck.wait()
        except _tessera.Error as e:
            handle._error = e

    def _wait_for(self, handle):
        with self._lock:
            if self._saving is handle:
                self._settle()

    def wait(self):
        """Waits for the save in flight (if any); its result, or None when nothing was saved."""
        handle = self._saving
        return handle.wait() if handle is not None else None

    def load(self, state_dict=None, step=None, fallback=False):
        """Loads committed step `step` (default: the newest) and returns the state.

        With `state_dict`, its tensors (and Shards: resharded) are filled in place and the state
        returned has them at their places; without, new CPU tensors of the saved global shapes.
        fallback=True tries older committed steps when the chosen one is bad (reported in
        `last_load["refused"]`).
        """
        with self._lock:
            if state_dict is None:
                manifest = _tessera.read_manifest(self.dir, step)
                step = manifest["step"]
                entries = [_Registered(name, torch.empty(shape, dtype=_FROM_HAL[dtype]), False)
                           for name, dtype, shape in manifest["tensors"] if name != _SKELETON]
            else:
                flat = _Flattener()
                flat.node(state_dict, [])
                entries = [_Registered(name, value, self.size > 1) for name, value in flat.tensors]
            self._register(entries)
            self.last_load = self._ck.load(step, fallback)
            skeleton = self._skeleton()
        for e in entries:
            e.copy_back()
        return self._state(skeleton, entries, template=state_dict is not None)

    def restore(self, state_dict):
        """After a failure (peer_replica): every rank returns to the newest step whose snapshot
        survives in memory (its own, or its buddy's copy), else loads from storage. Collective."""
        flat = _Flattener()
        flat.node(state_dict, [])
        entries = [_Registered(name, value, self.size > 1) for name, value in flat.tensors]
        with self._lock:
            self._register(entries)
            self.last_restore = self._ck.restore()
            skeleton = self._skeleton()
        for e in entries:
            e.copy_back()
        return self._state(skeleton, entries, template=True)

    def _skeleton(self):
        text = self._ck.get_blob(_SKELETON)
        try:
            doc = json.loads(text.decode())
        except (UnicodeDecodeError, ValueError) as e:
            raise DataLossError(f"{self.dir}: the state document '{_SKELETON}' is not JSON: {e}")
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT or "state" not in doc:
            raise DataLossError(f"{self.dir}: the state document '{_SKELETON}' is not format "
                                f"{_FORMAT}")
        return doc["state"]

    def _state(self, skeleton, entries, template):
        dtypes = _tensor_names(skeleton, {})
        tensors = {}
        for e in entries:
            if template:
                tensors[e.name] = e.original
                continue
            want = _BY_TORCH_NAME.get(dtypes.get(e.name), e.host.dtype)
            tensors[e.name] = e.host.view(want) if want != e.host.dtype else e.host
        return _build(skeleton, tensors)

    def close(self):
        """Waits for the save in flight and releases the checkpointer."""
        if self._ck is not None:
            with self._lock:
                self._settle()
                self._ck.clear()
            self._ck = None


_cache = {}
_cache_lock = threading.Lock()


def _checkpointer(dir, comm, options):
    key = (os.path.realpath(os.fspath(dir)), id(comm))
    with _cache_lock:
        ck = _cache.get(key)
        if ck is None:
            ck = _cache[key] = Checkpointer(dir, comm=comm, **options)
        return ck


def save(state_dict, dir, step, async_=True, *, comm=None, **options):
    """Saves `state_dict` as step `step` under `dir` (asynchronously by default): see
    Checkpointer.save. The Checkpointer of `dir` is kept for the next saves (incremental); its
    options are those of the first call."""
    return _checkpointer(dir, comm, options).save(state_dict, step, async_=async_)


def load(dir, step=None, *, state_dict=None, comm=None, fallback=False):
    """Loads step `step` (default: the newest committed) of `dir`: see Checkpointer.load."""
    return _checkpointer(dir, comm, {}).load(state_dict=state_dict, step=step, fallback=fallback)


def restore(dir, state_dict, *, comm):
    """Checkpointer.restore on the Checkpointer save() uses for `dir` and `comm`."""
    return _checkpointer(dir, comm, {}).restore(state_dict)


def read_manifest(dir, step=None):
    """What committed step `step` (default: `latest`) holds: tensors (name, dtype, global
    shape), blobs, delta or full, bytes stored."""
    return _tessera.read_manifest(os.fspath(dir), step)
