"""Canonical reduction order from Python: ``psyne.init(reduce_order=...)`` and
``Group.with_reduce_order`` give the rank-order fold's bits on 3 and 4 ranks, over shared memory
and TCP; an unknown order is refused before joining the job."""

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
