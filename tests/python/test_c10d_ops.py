"""The tessera torch.distributed backend: every operation x dtype against gloo, the refusals,
Work.wait(timeout) and get_future(), on 3 CPU ranks (c10d_ops_rank.py)."""

from dist_util import assert_all_ok, run_ranks


def test_every_op_and_dtype_matches_gloo_on_three_ranks():
    assert_all_ok(run_ranks("c10d_ops_rank.py", world=3, timeout_s=180))
