#!/usr/bin/python3
"""torch.distributed.all_reduce of f32 tensors, the tessera backend against gloo, side by side in
one run: both groups live in the same ranks and take turns on every size, so both see the same
machine load. Prints, per size, the median time of the repetitions and the algorithm bandwidth
(bytes / time) of each, and their ratio.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_allreduce.py          # 2 ranks
    PYTHONPATH=build/python /usr/bin/python3 bench/torch_allreduce.py --ranks 4 --sizes 8,1M
    ... --json out.json                                                        # for machines

It starts its own ranks (torchrun-style variables on a free port); docs/PERFORMANCE.md has the
figures and the command they came from."""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def human(nbytes):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def reps_for(nbytes, budget_bytes):
    return max(5, min(50, budget_bytes // max(nbytes, 1)))


# Back-to-back calls per timed repetition (as nccl-tests' iterations): one call alone would mostly
# time how far apart the ranks left the barrier before it.
def inner_for(nbytes):
    return max(1, min(20, (4 << 20) // max(nbytes, 1)))


def rank_main(args):
    import torch
    import torch.distributed as dist

    import tessera.torch  # noqa: F401

    rank = int(os.environ["RANK"])
    # As `tessera launch --bind-to auto`: a core per rank when there are enough, for both backends.
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= int(os.environ["WORLD_SIZE"]):
        os.sched_setaffinity(0, {cores[rank]})
    dist.init_process_group("tessera")
    groups = {"tessera": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    results = []
    for nbytes in args.sizes:
        t = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        reps = reps_for(nbytes, args.budget)
        inner = inner_for(nbytes)
        times = {name: [] for name in groups}
        for name, group in groups.items():  # warm-up: connections, buffers, page faults
            for _ in range(3):
                dist.all_reduce(t, group=group)
        for _ in range(reps):
            for name, group in groups.items():  # alternate: the same load for both
                dist.barrier(group=groups["gloo"])
                start = time.perf_counter()
                for _ in range(inner):
                    dist.all_reduce(t, group=group)
                times[name].append((time.perf_counter() - start) / inner)
        row = {"bytes": t.numel() * 4, "reps": reps, "inner": inner}
        for name, samples in times.items():
            # Each rank's median, then the slowest rank's (the collective ends for all then).
            mine = torch.tensor([statistics.median(samples)], dtype=torch.float64)
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=groups["gloo"])
            row[f"{name}_s"] = float(mine)
        results.append(row)
    if rank == 0:
        print(json.dumps(results))
    dist.destroy_process_group()


def report(results, ranks):
    print(f"torch.distributed.all_reduce, f32, {ranks} ranks, median of repetitions "
          f"(torch {__import__('torch').__version__})")
    print(f"{'size':>9} {'reps':>8} {'gloo':>12} {'tessera':>12} {'gloo GB/s':>10} "
          f"{'tessera GB/s':>13} {'speed-up':>9}")
    for r in results:
        g, t = r["gloo_s"], r["tessera_s"]
        print(f"{human(r['bytes']):>9} {r['reps']:>4}x{r['inner']:<3} {g * 1e6:>9.1f} us {t * 1e6:>9.1f} us "
              f"{r['bytes'] / g / 1e9:>10.3f} {r['bytes'] / t / 1e9:>13.3f} {g / t:>8.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sizes", default="8,1M,64M", help="bytes per rank, e.g. 8,1M,64M")
    parser.add_argument("--budget", type=parse_size, default=parse_size("2G"),
                        help="bytes to reduce per size and backend (sets the repetitions)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.rank:
        return rank_main(args)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(args.ranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", "--sizes",
               ",".join(map(str, args.sizes)), "--budget", str(args.budget)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if rank == 0 else None,
                                      text=True))
    out, _ = procs[0].communicate()
    codes = [procs[0].returncode] + [p.wait() for p in procs[1:]]
    if any(codes):
        sys.exit(f"a rank failed (exit codes {codes})")
    results = json.loads(out.strip().splitlines()[-1])
    report(results, args.ranks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
