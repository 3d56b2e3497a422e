"""Faults under the tessera backend: a killed rank and abort() make the others raise, naming the
rank and the operation, well before the bound (c10d_fault_rank.py). No timing is asserted: the
bound only turns a hang into a failure."""

from dist_util import describe, run_ranks


def test_a_killed_rank_makes_the_others_raise_not_hang():
    results = run_ranks("c10d_fault_rank.py", ["killed"], world=3, timeout_s=120)
    assert results[2][0] == -9, describe(results)  # the rank that killed itself
    assert all(rc == 0 for rc, _ in results[:2]), describe(results)
    assert all("raised after" in text for _, text in results[:2]), describe(results)
    print(describe(results))


def test_abort_fails_pending_operations_on_every_rank():
    results = run_ranks("c10d_fault_rank.py", ["abort"], world=2, timeout_s=120)
    assert all(rc == 0 for rc, _ in results), describe(results)
