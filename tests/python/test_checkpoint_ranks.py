"""tessera.checkpoint across 2 ranks through tessera.Communicator.from_env (torchrun-style
variables): a commit across ranks, shards of one tensor resharded into a whole on load, a
replicated tensor written once, restore() from the snapshots kept in memory."""
import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

WORKER = r"""
import json, sys, torch, tessera, tessera.checkpoint as tc
rank, out, root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
comm = tessera.Communicator.from_env(timeout_s=30)
ck = tc.Checkpointer(root, comm=comm, peer_replica=True, fsync=False, direct_io=False)
w = torch.arange(32.0).view(4, 8)[2 * rank:2 * rank + 2].clone()
b = torch.full([3], 7.0)
state = {"w": tc.Shard(w, [4, 8], [2 * rank, 0]), "b": b, "rank": rank}
saved = ck.save(state, 1).wait()
w.zero_(); b.zero_()
restored = ck.restore(state)
whole = tc.Checkpointer(root, comm=comm, fsync=False, direct_io=False).load()
json.dump({"size": ck.size, "written": saved["bytes_raw"],
           "restored": w.tolist() == torch.arange(32.0).view(4, 8)[2 * rank:2 * rank + 2].tolist()
                       and b.tolist() == [7.0] * 3,
           "restore_step": ck.last_restore["step"],
           "whole": whole["w"].tolist() == torch.arange(32.0).view(4, 8).tolist(),
           "rank_value": whole["rank"]}, open(out, "w"))
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_commit_reshard_and_restore(tmp_path):
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WORKER, str(rank), str(tmp_path / f"r{rank}.json"),
             str(tmp_path / "ckpt")], env=env))
    codes = [p.wait(timeout=120) for p in procs]
    assert codes == [0, 0]
    results = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    for r in results:
        assert r["size"] == 2 and r["restored"] and r["whole"] and r["restore_step"] == 1
        assert r["rank_value"] == 0  # the replicated state document is rank 0's
    # b (replicated) is written by rank 0 only: rank 1 writes its shard of w alone.
    assert results[1]["written"] < results[0]["written"]
