"""One rank of test_c10d_faults.py.

  killed: the last rank SIGKILLs itself after the group is up; the others' next allreduce must
          raise RuntimeError naming that rank and the operation (not hang; the test bounds it).
  abort:  rank 0 calls abort() on the group while the others wait in an allreduce it never
          joins; they must raise, and so must rank 0's next operation."""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import tessera.torch  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def expect_error(fn, *words):
    start = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        assert not missing, f"rank {RANK}: {missing} not in the error: {text}"
        print(f"rank {RANK}: raised after {time.monotonic() - start:.2f} s: {text}")
        return
    raise AssertionError(f"rank {RANK}: no error")


def killed():
    dist.all_reduce(torch.ones(4))  # everyone is up
    if RANK == WORLD - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.2)
    expect_error(lambda: dist.all_reduce(torch.ones(1 << 16)), "allreduce",
                 f"rank {WORLD - 1}")


def abort():
    pg = dist.group.WORLD
    dist.barrier()
    if RANK == 0:
        time.sleep(0.3)
        pg.abort("test aborts rank 0")
        expect_error(lambda: dist.all_reduce(torch.ones(4)), "allreduce", "ABORTED")
    else:
        expect_error(lambda: dist.all_reduce(torch.ones(4)), "allreduce")


def main():
    # The communicator's timeout bounds every wait; a dead local peer is seen at once (pidfds).
    dist.init_process_group("tessera", timeout=timedelta(seconds=20))
    {"killed": killed, "abort": abort}[sys.argv[1]]()
    os._exit(0)  # the group is failed: skip destroy_process_group's collective teardown


if __name__ == "__main__":
    main()
