"""DDP over the tessera backend: 50 steps on 4 ranks match gloo within 1e-5*(1+|w|) and repeat
bit for bit (c10d_ddp_rank.py)."""

from dist_util import assert_all_ok, run_ranks


def test_ddp_on_four_ranks_matches_gloo_and_is_reproducible():
    assert_all_ok(run_ranks("c10d_ddp_rank.py", world=4, timeout_s=240))
