"""tessera.torch: the ``tessera`` backend for torch.distributed.

Importing this module registers the backend, after which

    torch.distributed.init_process_group("tessera", ...)

creates a process group over a Tessera communicator, with the store, rank and world size that
torchrun, ``tessera launch``, ``init_method`` or an explicit ``store=`` provide (the communicator
bootstraps through that store: no second port or variable). CPU tensors; docs/PYTHON.md.

Under ``tessera launch`` MASTER_ADDR:MASTER_PORT is the launcher's own store, which speaks
Tessera's protocol rather than torch's TCPStore: the ``env://`` rendezvous is then pointed at it
(for every backend, gloo included), so scripts written for torchrun run unchanged.
"""

import importlib
import inspect
import os
from datetime import timedelta
from urllib.parse import parse_qsl, urlparse

import torch.distributed as _dist

# The extension is absent when the build found no libtorch: tessera.torch.hooks still works
# then, and init_process_group("tessera") says why there is no backend.
try:
    from tessera.torch._c10d import ProcessGroupTessera, connect_launcher_store
except ImportError as _e:
    ProcessGroupTessera = None
    _missing = _e

__all__ = ["ProcessGroupTessera", "BACKEND"]

BACKEND = "tessera"


def _create_process_group(store, rank, world_size, timeout):
    if ProcessGroupTessera is None:
        raise RuntimeError(
            f"the tessera backend is not built ({_missing}); build with libtorch-dev installed "
            "(scripts/setup.sh) and put <build>/python on PYTHONPATH"
        )
    return ProcessGroupTessera(store, rank, world_size, timeout)


def _register_backend():
    if BACKEND.upper() in _dist.Backend._plugins:
        return
    register = _dist.Backend.register_backend
    # torch >= 2.0 wraps a Backend per device type and asks which devices it serves.
    if "devices" in inspect.signature(register).parameters:
        register(BACKEND, _create_process_group, devices=["cpu"])
    else:
        register(BACKEND, _create_process_group)


def _launcher_env_rendezvous(url, timeout=timedelta(minutes=30), **kwargs):
    """env:// under ``tessera launch``: RANK/WORLD_SIZE from the environment (or the URL query,
    as torch's handler), the store is the launcher's at MASTER_ADDR:MASTER_PORT."""
    query = dict(parse_qsl(urlparse(url).query))
    rank = int(query.get("rank", os.environ["RANK"]))
    world_size = int(query.get("world_size", os.environ["WORLD_SIZE"]))
    store = connect_launcher_store(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), timeout
    )
    yield (store, rank, world_size)
    raise RuntimeError("tessera launch: env:// cannot re-rendezvous")


def _install_launcher_rendezvous():
    if os.environ.get("TESSERA_LAUNCHER") != "tessera" or ProcessGroupTessera is None:
        return
    # torch's register_rendezvous_handler refuses a scheme twice; the table is the one place
    # torch looks the handler up (rendezvous._rendezvous_handlers), so it is replaced there.
    # (torch.distributed.rendezvous the attribute is a function: the module is imported by name.)
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    rendezvous._rendezvous_handlers["env"] = _launcher_env_rendezvous


_register_backend()
_install_launcher_rendezvous()
