"""The Python examples (examples/python/) under psyrun on 1-4 ranks: each checks its own result
and prints OK on every rank."""

import pathlib
import subprocess
import sys

import pytest

from conftest import PSYRUN, REPO

EXAMPLES = REPO / "examples" / "python"
NUMPY_ONES = ["cheatsheet.py", "mean.py", "softmax.py", "argmax.py", "stats.py", "barrier_timing.py"]


def run(n, name):
    cmd = [PSYRUN, "-n", str(n), sys.executable, str(EXAMPLES / name)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert p.stdout.count("OK") >= n, out[-4000:]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("name", NUMPY_ONES)
def test_example(name, n):
    run(n, name)


TORCH_ONES = ["ddp.py", "fsdp2.py", "hsdp.py"]


@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("name", TORCH_ONES)
def test_torch_example(name, n):
    pytest.importorskip("torch")
    run(n, name)


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(NUMPY_ONES + TORCH_ONES)
