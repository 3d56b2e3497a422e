"""Starting a small multi-process torch.distributed job from a test: `run_ranks` runs
`/usr/bin/python3 <script> <args>` as `world` ranks with torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free port), waits for all of them up
to a bound, kills what is left, and returns each rank's (exit code, output)."""

import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"  # Debian's interpreter, the one with python3-torch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script, args=(), world=2, timeout_s=120, env=None):
    port = free_port()
    procs = []
    for rank in range(world):
        rank_env = dict(os.environ)
        rank_env.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        rank_env.update(env or {})
        out = tempfile.TemporaryFile(mode="w+")
        cmd = [PYTHON, os.path.join(HERE, script), *map(str, args)]
        procs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=rank_env), out))
    deadline = time.monotonic() + timeout_s
    results = []
    for proc, out in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.seek(0)
        results.append((proc.returncode, out.read()))
        out.close()
    return results


def describe(results):
    return "\n".join(
        f"--- rank {r} (exit {rc}) ---\n{text}" for r, (rc, text) in enumerate(results)
    )


def assert_all_ok(results):
    assert all(rc == 0 for rc, _ in results), describe(results)
    # Each worker prints what it checked; shown with pytest -s / on failure.
    sys.stdout.write(describe(results))
