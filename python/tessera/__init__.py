"""Tessera from Python: the runtime's probe, planner and checkpointer, and (tessera.torch) a
PyTorch process-group backend and DDP communication hooks. See python/README.md.

    import tessera
    tessera.devices()                       # == `tessera devices --json`, as a dict
    tessera.probe()                         # == `tessera probe --json`
    tessera.plan(model="llama-7b", cluster="dgx-h100", devices=64,
                 global_batch=512, seq_len=4096)   # == `tessera plan --json ...`

Errors raise tessera.Error (a RuntimeError; `.code` names the status) or one of its subclasses
(InvalidArgumentError is also a ValueError, NotFoundError a LookupError), with the message the
CLI prints after "tessera <command>: ".
"""

import json as _json

from . import _tessera
from ._tessera import (  # noqa: F401  (re-exported)
    AbortedError,
    Communicator,
    DataLossError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)

__all__ = [
    "probe", "plan", "devices", "checkpoint", "Communicator", "Error", "InvalidArgumentError",
    "NotFoundError", "DataLossError", "FailedPreconditionError", "DeadlineExceededError",
    "UnavailableError", "AbortedError",
]


def probe(*, preset=None, hwloc_xml=None, synthetic=None, from_json=None, no_ucx=False,
          backends=None):
    """This host's topology, the document of `tessera probe --json` (same flags, by keyword).

    preset: a cluster preset's spec instead (`--preset`); hwloc_xml / synthetic / from_json: the
    alternative sources; no_ucx: do not probe UCX; backends: e.g. "host" (`--backends`).
    """
    return _json.loads(_tessera.probe_json(preset=preset, hwloc_xml=hwloc_xml,
                                           synthetic=synthetic, from_json=from_json,
                                           no_ucx=no_ucx, backends=backends))


def devices(*, backends=None):
    """Every backend with its state and reason, and every device: `tessera devices --json`."""
    return _json.loads(_tessera.devices_json(backends=backends))


def _flag(value):
    return "" if value is None else str(value)


def plan(*, model, cluster=None, devices=None, global_batch=None, seq_len=None, dtype="bf16",
         fix=None, top=5, phases=None, attention="flash", calibration=None):
    """The fastest parallel plans: the document of `tessera plan --json` with the same flags.

    model: a preset or a config.json / layer-list file; cluster: a preset or cluster JSON;
    devices: resize the cluster; fix: "tp=8,zero=1" or a dict {"tp": 8, "zero": 1};
    phases: a phases JSON file (then the phase report); calibration: a calibration file.
    """
    if isinstance(fix, dict):
        fix = ",".join(f"{k}={v}" for k, v in fix.items())
    return _json.loads(_tessera.plan_json(
        model=_flag(model), cluster=_flag(cluster), devices=_flag(devices),
        global_batch=_flag(global_batch), seq_len=_flag(seq_len), dtype=_flag(dtype),
        fix=_flag(fix), top=_flag(top), phases=_flag(phases), attention=_flag(attention),
        calibration=_flag(calibration)))


def __getattr__(name):
    # tessera.checkpoint imports lazily (it needs torch).
    if name == "checkpoint":
        from . import checkpoint
        return checkpoint
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")
