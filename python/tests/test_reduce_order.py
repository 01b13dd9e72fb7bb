"""Canonical reduction order from Python: ``psyne.init(reduce_order=...)`` and
``Group.with_reduce_order`` give the rank-order fold's bits on 3 and 4 ranks, over shared memory
and TCP, and in the torch backend while ``torch.use_deterministic_algorithms(True)`` is on; an
unknown order is refused before joining the job."""

import subprocess
import sys

import pytest

from conftest import check, launch


@pytest.mark.parametrize("n,transport,mode", [(3, "tcp", "init"), (4, "shm", "view")])
def test_canonical_order_matches_the_rank_order_fold_bit_for_bit(n, transport, mode):
    p = launch(n, "reduce_order.py", mode, env={"PSY_TRANSPORT": transport}, timeout=240)
    check(p, n, "canonical OK")


def test_an_unknown_order_is_a_config_error():
    code = "import psyne\ntry:\n    psyne.init(reduce_order='exact')\nexcept psyne.ConfigError as e:\n    print('refused:', e)\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "refused:" in p.stdout and "canonical" in p.stdout, p.stdout


@pytest.mark.parametrize("n,transport", [(3, "shm"), (4, "tcp")])
def test_torch_deterministic_mode_sums_in_rank_order(n, transport):
    p = launch(n, "torch_deterministic.py", env={"PSY_TRANSPORT": transport}, timeout=300)
    check(p, n, "deterministic OK")
