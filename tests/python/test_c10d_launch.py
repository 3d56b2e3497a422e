"""The README's DDP example (the python block after <!-- pytorch-ddp-example -->), run as written
under torchrun (`python3 -m torch.distributed.run --nproc_per_node 2`) and under
`tessera launch -n 2`, whose MASTER_PORT is its own store (tessera.torch points env:// at it)."""

import os
import re
import subprocess

import pytest

from dist_util import PYTHON, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TESSERA_BUILD_DIR", os.path.join(ROOT, "build"))


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    readme = open(os.path.join(ROOT, "README.md")).read()
    match = re.search(r"<!-- pytorch-ddp-example -->\n```python\n(.*?)```", readme, re.S)
    assert match, "README.md has no python block after <!-- pytorch-ddp-example -->"
    path = tmp_path_factory.mktemp("readme") / "ddp.py"
    path.write_text(match.group(1))
    return str(path)


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=180)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}"
    assert "final loss" in done.stdout, done.stdout
    print(done.stdout)


# --redirects 1 --tee 1: Debian's torch 1.13 under Python 3.11 cannot parse torchrun's default
# "0" for either (enum Flag iteration skips 0: 'NoneType' object has no attribute 'get').
def test_readme_ddp_example_runs_under_torchrun(example):
    run([PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--redirects", "1",
         "--tee", "1", "--master_port", str(free_port()), example])


def test_readme_ddp_example_runs_under_tessera_launch(example):
    tessera = os.path.join(BUILD, "bin", "tessera")
    if not os.path.exists(tessera):
        pytest.skip(f"{tessera} is not built (TESSERA_BUILD_TOOLS=OFF?)")
    run([tessera, "launch", "-n", "2", "--timeout-s", "170", "--", PYTHON, example])
