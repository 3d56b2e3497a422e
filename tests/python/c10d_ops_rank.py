"""One rank of test_c10d_ops.py: every operation of the tessera backend on every dtype, each
compared with gloo's result on the same ranks (a gloo group beside the tessera world group).

Inputs are small integers (sums <= 60, products <= 2**world), exact in every dtype, so every
result must equal gloo's bit for bit whatever order each backend adds in; AVG (which gloo lacks)
is checked against gloo's SUM / world. Then the refusals and Work.wait(timeout)/get_future()."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import tessera.torch  # noqa: F401  (registers the backend)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
REDUCE_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                 torch.int64, torch.uint8]
# Moved as bytes (the communicator has no such type), compared with the expected values.
BYTE_DTYPES = [torch.bool, torch.int8, torch.int16, torch.complex64]
# gloo 1.13 cannot reduce bfloat16: its reference runs in float32 (exact for these inputs).
GLOO_DTYPE = {torch.bfloat16: torch.float32}
DTYPE = None  # the dtype being checked
checks = 0


def same(name, got, want):
    global checks
    checks += 1
    assert got.dtype == want.dtype and torch.equal(got, want), (
        f"rank {RANK}: {name}: tessera {got} != gloo {want}")


def values(dtype, n, rank=RANK, prod=False):
    base = torch.arange(n, dtype=torch.int64)
    v = base % 2 + 1 if prod else base % 7 + rank + 1
    if dtype == torch.bool:
        return (v % 2 == 0)
    return v.to(dtype)


def both(fn, gloo_fn=None):
    """Runs fn on tessera's world group and (gloo_fn or fn) on the gloo group: gloo_fn composes
    what gloo 1.13 lacks (reduce_scatter, _reduce_scatter_base, _allgather_base) from its
    allreduce and allgather, or computes it from the inputs (alltoall). Returns both results."""
    gloo_dtype = GLOO_DTYPE.get(DTYPE, DTYPE)
    return fn(dist.group.WORLD, DTYPE), (gloo_fn or fn)(GLOO, gloo_dtype).to(DTYPE)


def check_reductions(dtype, n):
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
    for op in ops:
        def allreduce(g, dt, op=op):
            t = values(dt, n, prod=op == dist.ReduceOp.PRODUCT)
            dist.all_reduce(t, op=op, group=g)
            return t
        same(f"all_reduce {op} {dtype}", *both(allreduce))

    def coalesced(g, dt):
        ts = [values(dt, n), values(dt, 3 * n + 1)]
        dist.all_reduce_coalesced(ts, group=g)
        return torch.cat(ts)
    same(f"all_reduce_coalesced {dtype}", *both(coalesced))

    def reduce(g, dt):
        t = values(dt, n)
        dist.reduce(t, dst=WORLD - 1, op=dist.ReduceOp.MAX, group=g)
        return t if RANK == WORLD - 1 else torch.zeros(0, dtype=dt)
    same(f"reduce {dtype}", *both(reduce))

    def reduce_scatter(g, dt):
        out = torch.zeros(n, dtype=dt)
        dist.reduce_scatter(out, [values(dt, n, rank=RANK + r) for r in range(WORLD)], group=g)
        return out

    def gloo_reduce_scatter(g, dt):
        t = torch.cat([values(dt, n, rank=RANK + r) for r in range(WORLD)])
        dist.all_reduce(t, group=g)
        return t.view(WORLD, n)[RANK].clone()
    same(f"reduce_scatter {dtype}", *both(reduce_scatter, gloo_reduce_scatter))

    def reduce_scatter_base(g, dt):
        out = torch.zeros(n, dtype=dt)
        dist._reduce_scatter_base(out, values(dt, n * WORLD), group=g)
        return out

    def gloo_reduce_scatter_base(g, dt):
        t = values(dt, n * WORLD)
        dist.all_reduce(t, group=g)
        return t.view(WORLD, n)[RANK].clone()
    same(f"_reduce_scatter_base {dtype}", *both(reduce_scatter_base, gloo_reduce_scatter_base))

    if dtype.is_floating_point:
        t = values(dtype, n)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        want = values(GLOO_DTYPE.get(dtype, dtype), n)
        dist.all_reduce(want, group=GLOO)
        want = (want.double() / WORLD).to(dtype)
        assert torch.allclose(t.double(), want.double(), rtol=1e-2), f"AVG {dtype}: {t} vs {want}"


def check_movement(dtype, n, against_gloo=True):
    def broadcast(g, dt):
        t = values(dt, n)
        dist.broadcast(t, src=WORLD - 1, group=g)
        return t

    def all_gather(g, dt):
        outs = [torch.zeros(n, dtype=dt) for _ in range(WORLD)]
        dist.all_gather(outs, values(dt, n), group=g)
        return torch.cat(outs)

    def all_gather_base(g, dt):
        out = torch.zeros(n * WORLD, dtype=dt)
        dist._all_gather_base(out, values(dt, n), group=g)
        return out

    def gloo_all_gather_base(g, dt):
        outs = [torch.zeros(n, dtype=dt) for _ in range(WORLD)]
        dist.all_gather(outs, values(dt, n), group=g)
        return torch.cat(outs)

    def all_to_all_single(g, dt):
        out = torch.zeros(n * WORLD, dtype=dt)
        dist.all_to_all_single(out, values(dt, n * WORLD), group=g)
        return out

    # Uneven: rank r sends (p + 1) rows of 2 elements to rank p.
    def all_to_all_uneven(g, dt):
        ins = [p + 1 for p in range(WORLD)]
        outs = [RANK + 1] * WORLD
        out = torch.zeros(sum(outs), 2, dtype=dt)
        src = values(dt, 2 * sum(ins)).reshape(-1, 2)
        dist.all_to_all_single(out, src, outs, ins, group=g)
        return out

    def all_to_all(g, dt):
        outs = [torch.zeros(p + RANK + 1, dtype=dt) for p in range(WORLD)]
        ins = [values(dt, RANK + p + 1, rank=RANK * WORLD + p) for p in range(WORLD)]
        dist.all_to_all(outs, ins, group=g)
        return torch.cat(outs)

    # gloo has no list alltoall: what every rank p sent here is known from its inputs.
    def expected_all_to_all(g, dt):
        return torch.cat([values(dt, p + RANK + 1, rank=p * WORLD + RANK)
                          for p in range(WORLD)])

    # Rank 0 sends to every other rank, which sends back: tag ignored, order is the match.
    def send_recv(g, dt):
        got = []
        if RANK == 0:
            for p in range(1, WORLD):
                dist.send(values(dt, n), dst=p, group=g)
            for p in range(1, WORLD):
                t = torch.zeros(n, dtype=dt)
                dist.recv(t, src=p, group=g)
                got.append(t)
        else:
            t = torch.zeros(n, dtype=dt)
            dist.recv(t, src=0, group=g)
            dist.send(t + values(dt, n) if dt != torch.bool else ~t, dst=0, group=g)
            got.append(t)
        return torch.cat(got)

    cases = [broadcast, all_gather, all_gather_base, all_to_all_single, all_to_all_uneven,
             all_to_all, send_recv]
    composed = {all_gather_base: gloo_all_gather_base, all_to_all: expected_all_to_all}
    for case in cases:
        if against_gloo:
            same(f"{case.__name__} {dtype}", *both(case, composed.get(case)))
        else:
            got = case(dist.group.WORLD, dtype)
            if case is broadcast:
                same(f"{case.__name__} {dtype}", got, values(dtype, n, rank=WORLD - 1))
            elif case is all_gather or case is all_gather_base:
                want = torch.cat([values(dtype, n, rank=r) for r in range(WORLD)])
                same(f"{case.__name__} {dtype}", got, want)


def check_refusals():
    def refused(fn, *words):
        global checks
        try:
            fn()
        except RuntimeError as e:
            for w in words:
                assert w in str(e), f"'{w}' not in the error: {e}"
            checks += 1
            return
        raise AssertionError(f"rank {RANK}: no error for {words}")

    refused(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int8)), "allreduce", "Char")
    refused(lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool)), "allreduce", "Bool")
    refused(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND), "allreduce",
            "reduce op")
    refused(lambda: dist.all_reduce(torch.ones(4, 4).t()), "allreduce", "not contiguous")
    refused(lambda: dist.all_gather([torch.zeros(4)] * (WORLD - 1), torch.ones(4)), "allgather",
            f"one list of {WORLD} output tensors")
    refused(lambda: dist.all_gather([torch.zeros(3)] * WORLD, torch.ones(4)), "allgather",
            "an output tensor is Float[3]")
    refused(lambda: dist.all_to_all([torch.ones(1)], [torch.ones(1)]), "alltoall",
            f"takes {WORLD} input")
    refused(lambda: dist._reduce_scatter_base(torch.ones(3), torch.ones(4)),
            "_reduce_scatter_base", "group size")
    refused(lambda: dist.all_to_all_single(torch.ones(WORLD), torch.ones(WORLD), [1] * WORLD,
                                           [WORLD] * WORLD), "alltoall_base", "splits add up")


def check_async():
    global checks
    # wait(timeout) on an operation a peer joins late: a timeout first, then the result.
    t = torch.ones(8)
    if RANK == 1:
        time.sleep(1.0)
    work = dist.all_reduce(t, async_op=True)
    if RANK == 0:
        try:
            work.wait(timeout=timedelta(milliseconds=50))
            raise AssertionError("wait(50 ms) returned before rank 1 joined")
        except RuntimeError as e:
            assert "not done within 50 ms" in str(e) and "allreduce" in str(e), str(e)
    assert work.wait(timeout=timedelta(seconds=60))
    result = work.get_future().wait()
    assert torch.equal(result[0], torch.full((8,), float(WORLD))), result
    assert work.is_completed()
    checks += 1


def main():
    global GLOO
    dist.init_process_group("tessera", timeout=timedelta(seconds=60))
    assert dist.get_backend() == "tessera"
    GLOO = dist.new_group(backend="gloo")
    global DTYPE
    for DTYPE in REDUCE_DTYPES:
        dtype = DTYPE
        for n in (1, 37):
            check_reductions(dtype, n)
            check_movement(dtype, n)
    for DTYPE in BYTE_DTYPES:
        dtype = DTYPE
        check_movement(dtype, 5, against_gloo=False)
    check_refusals()
    check_async()
    dist.barrier()
    print(f"rank {RANK}: {checks} checks passed")
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
