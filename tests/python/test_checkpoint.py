"""tessera.checkpoint: round trips of every dtype, incremental saves, corruption, asynchronous
saves, resharding on load (python/tessera/checkpoint.py)."""
import os

import pytest

torch = pytest.importorskip("torch")
import tessera  # noqa: E402
import tessera.checkpoint as tc  # noqa: E402

FAST = dict(fsync=False, direct_io=False)


def bitwise_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).view(torch.uint8) if a.dtype != torch.bool else a,
        b.reshape(-1).view(torch.uint8) if b.dtype != torch.bool else b)


def every_dtype_state():
    g = torch.Generator().manual_seed(7)
    f = torch.randn(3, 5, generator=g)
    special = torch.tensor([float("nan"), float("inf"), -0.0, 1e-40])
    return {
        "f32": f, "f16": f.half(), "bf16": f.bfloat16(), "f64": f.double(),
        "special": special, "i32": torch.arange(-5, 5, dtype=torch.int32),
        "i64": torch.tensor([2**62, -1]), "u8": torch.arange(250, 256, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]), "i8": torch.tensor([-128, 0, 127],
                                                                       dtype=torch.int8),
        "scalar": torch.tensor(3.5), "empty": torch.zeros(0, 4),
        "strided": torch.arange(12.0).view(3, 4).t(),
        "meta": {"epoch": 3, "lr": 0.1, "name": "run", "none": None, 5: [1, (2, "x")]},
    }


def test_round_trip_every_dtype(tmp_path):
    state = every_dtype_state()
    ck = tc.Checkpointer(tmp_path, **FAST)
    result = ck.save(state, step=1).wait()
    assert result["step"] == 1 and not result["delta"]
    loaded = tc.Checkpointer(tmp_path, **FAST).load()
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            assert bitwise_equal(loaded[key], value.contiguous()), key
    assert loaded["meta"] == state["meta"]
    assert isinstance(loaded["meta"][5][1], tuple)


def test_load_into_template_and_optimizer_state(tmp_path):
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    tc.save({"model": model.state_dict(), "optim": opt.state_dict()}, tmp_path, 5,
            async_=False, **FAST)
    model2 = torch.nn.Linear(4, 3)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.5)
    model2(torch.ones(2, 4)).sum().backward()
    opt2.step()
    template = {"model": model2.state_dict(), "optim": opt2.state_dict()}
    state = tc.Checkpointer(tmp_path, **FAST).load(state_dict=template)
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optim"])
    assert torch.equal(model2.weight, model.weight)
    assert opt2.state_dict()["param_groups"][0]["lr"] == 0.01
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0][
        "exp_avg"])
    assert template["model"]["weight"].data_ptr() == state["model"]["weight"].data_ptr()


def test_incremental_second_save_writes_less(tmp_path):
    w = torch.randn(256, 1024, generator=torch.Generator().manual_seed(1))  # 1 MiB
    ck = tc.Checkpointer(tmp_path, full_every=4, chunk_bytes=64 << 10, **FAST)
    first = ck.save({"w": w}, 1).wait()
    w[0, 0] += 1.0  # one chunk of 16 changes
    second = ck.save({"w": w}, 2).wait()
    assert second["delta"] and second["base_step"] == 1
    assert second["chunks_changed"] == 1
    assert second["bytes_written"] * 4 < first["bytes_written"]
    assert torch.equal(tc.Checkpointer(tmp_path, **FAST).load()["w"], w)


def test_corruption_is_a_named_error(tmp_path):
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(2))
    tc.Checkpointer(tmp_path, **FAST).save({"w": w}, 3).wait()
    shard = tmp_path / "step-3" / "rank-00000.shard"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard.write_bytes(bytes(data))
    with pytest.raises(tessera.DataLossError, match="rank-00000.shard"):
        tc.Checkpointer(tmp_path, **FAST).load(state_dict={"w": torch.empty(64, 64)})


def test_async_save_snapshots_and_overlaps(tmp_path):
    w = torch.randn(512, 1024, generator=torch.Generator().manual_seed(3))  # 2 MiB
    want = w.clone()
    # 2 MB at 10 MB/s: the save persists for ~0.2 s after save() returned.
    ck = tc.Checkpointer(tmp_path, max_write_mbps=10, zstd_level=1, **FAST)
    handle = ck.save({"w": w}, 1)
    assert not handle.done()  # still persisting: save() blocked only for the snapshot
    w.zero_()  # training goes on; the checkpoint keeps the snapshot
    result = handle.wait()
    assert result["persist_s"] > 0 and handle.done()
    assert torch.equal(tc.Checkpointer(tmp_path, **FAST).load()["w"], want)


def test_load_reshards_into_a_slice(tmp_path):
    full = torch.arange(48.0).view(6, 8)
    tc.Checkpointer(tmp_path, **FAST).save({"w": full}, 1).wait()
    part = torch.empty(2, 8)
    state = tc.Checkpointer(tmp_path, **FAST).load(
        state_dict={"w": tc.Shard(part, global_shape=[6, 8], offset=[2, 0])})
    assert torch.equal(part, full[2:4]) and state["w"] is part


def test_bad_inputs_are_refused(tmp_path):
    ck = tc.Checkpointer(tmp_path, **FAST)
    with pytest.raises(tessera.InvalidArgumentError, match="complex"):
        ck.save({"c": torch.zeros(2, dtype=torch.complex64)}, 1)
    with pytest.raises(tessera.InvalidArgumentError, match="object"):
        ck.save({"o": object()}, 1)
    with pytest.raises(tessera.InvalidArgumentError, match="peer_replica needs a communicator"):
        tc.Checkpointer(tmp_path, peer_replica=True)
    with pytest.raises(tessera.NotFoundError):
        tc.Checkpointer(tmp_path / "none", **FAST).load()
    with pytest.raises(tessera.InvalidArgumentError, match="same rank"):
        tc.Shard(torch.zeros(2), global_shape=[4, 4], offset=[0])
