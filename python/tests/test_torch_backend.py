"""The torch.distributed backend "psyne": the collective matrix through torch.distributed under
psyrun on 1-3 ranks, under torchrun (torch's own store), and DDP on 2-3 ranks: bitwise-identical
parameters on every rank, equal to Gloo's to float tolerance and to one process's."""

import os
import socket
import subprocess
import sys

import pytest

from conftest import WORKERS, check, launch

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_collective_matrix_through_torch_distributed(n):
    check(launch(n, "torch_matrix.py", timeout=300), n, "torch OK")


@pytest.mark.parametrize("n", [2, 3])
def test_ddp_matches_gloo_and_one_process(n):
    check(launch(n, "torch_ddp.py", timeout=300), n, "ddp OK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_under_torchrun():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSY_")}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(WORKERS / "torch_env.py"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    check(p, 2, "env OK")


def test_import_psyne_torch_registers_the_backend():
    code = (
        "import torch.distributed as dist, psyne.torch; "
        "assert 'psyne' in dist.Backend.backend_list; print('ok')"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr
