"""Shared by the tessera.torch suites: skip, with the reason printed (ctest runs pytest -rs),
when torch or the tessera.torch extension is absent."""

import sys

import pytest

sys.path.insert(0, __file__.rsplit("/", 1)[0])  # dist_util, the rank scripts


def pytest_collection_modifyitems(config, items):
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
    except ImportError as e:
        reason = f"torch is not installed ({e}); apt-get install python3-torch"
    else:
        reason = None if dist.is_available() else "torch.distributed is not available"
        if reason is None:
            try:
                import tessera.torch._c10d  # noqa: F401
            except ImportError as e:
                reason = (
                    f"tessera.torch is not built ({e}); needs libtorch-dev and "
                    "PYTHONPATH=<build>/python"
                )
    if reason:
        for item in items:
            if item.fspath.basename.startswith("test_c10d"):
                item.add_marker(pytest.mark.skip(reason=reason))
