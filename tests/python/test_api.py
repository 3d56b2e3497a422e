"""tessera.probe/plan/devices return the documents of the CLI's --json, and errors carry the CLI's
message (python/README.md)."""
import json
import os
import subprocess

import pytest

tessera = pytest.importorskip("tessera")

# The tessera command of the same build (ctest sets TESSERA_BUILD_DIR).
CLI = os.path.join(os.environ.get("TESSERA_BUILD_DIR", ""), "bin", "tessera")


def need_cli():
    if not CLI or not os.path.exists(CLI):
        pytest.skip(f"no tessera command at {CLI!r} (set TESSERA_BUILD_DIR)")


def cli_json(*args):
    need_cli()
    out = subprocess.run([CLI, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def cli_error(*args):
    need_cli()
    out = subprocess.run([CLI, *args], capture_output=True, text=True)
    assert out.returncode == 2
    return out.stderr.strip()


def _without_free_memory(doc):
    # The host backend reports the memory available now (cgroup or MemAvailable), which moves
    # between two calls; everything else must match exactly.
    for backend in doc["backends"]:
        for device in backend["devices"]:
            device.pop("total_memory_bytes", None)
    return doc


def test_devices_matches_cli():
    ours = tessera.devices(backends="host")
    cli = cli_json("devices", "--json", "--backends", "host")
    assert ours["backends"][0]["devices"][0]["total_memory_bytes"] > 0
    assert _without_free_memory(ours) == _without_free_memory(cli)


def test_probe_matches_cli():
    assert tessera.probe(synthetic="pack:1 numa:2 core:2 pu:1", no_ucx=True,
                         backends="host") == cli_json(
        "probe", "--json", "--synthetic", "pack:1 numa:2 core:2 pu:1", "--no-ucx",
        "--backends", "host")
    assert tessera.probe(preset="dgx-h100") == cli_json("probe", "--preset", "dgx-h100")


def test_plan_matches_cli():
    doc = tessera.plan(model="llama2-7b", cluster="dgx-h100", devices=16, global_batch=64,
                       seq_len=2048, fix={"tp": 2}, top=3)
    del doc["search"]["elapsed_ms"]  # the search's own run time
    want = cli_json("plan", "--json", "--model", "llama2-7b", "--cluster", "dgx-h100",
                    "--devices", "16", "--global-batch", "64", "--seq-len", "2048", "--fix",
                    "tp=2", "--top", "3")
    del want["search"]["elapsed_ms"]
    assert doc == want


def test_plan_errors_carry_the_cli_message():
    with pytest.raises(tessera.InvalidArgumentError) as e:
        tessera.plan(model="llama2-7b", cluster="dgx-h100", global_batch=0, seq_len=2048)
    assert isinstance(e.value, ValueError) and e.value.code == "INVALID_ARGUMENT"
    assert "tessera plan: " + str(e.value) == cli_error(
        "plan", "--model", "llama2-7b", "--cluster", "dgx-h100", "--global-batch", "0",
        "--seq-len", "2048")
    with pytest.raises(tessera.Error, match="--model is required"):
        tessera.plan(model=None)
    with pytest.raises(tessera.Error, match="no-such-model"):
        tessera.plan(model="no-such-model", cluster="dgx-h100", global_batch=8, seq_len=128)


def test_probe_errors():
    with pytest.raises(tessera.InvalidArgumentError, match="--synthetic: empty description"):
        tessera.probe(synthetic="")
    with pytest.raises(tessera.InvalidArgumentError, match="alternatives: give one"):
        tessera.probe(synthetic="pack:1 pu:1", from_json="x.json")
    with pytest.raises(tessera.Error, match="missing.json"):
        tessera.probe(from_json="/nonexistent/missing.json")
