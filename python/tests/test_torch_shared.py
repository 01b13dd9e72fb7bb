"""Tensors in psyne's shared memory (``psyne.torch.empty_shared``) under psyrun on 2 and 3
ranks: all-reduced (blocking and async, SUM/AVG/MAX, float32/float64/bfloat16, below and above
the shared path's 16 KiB) through ``all_reduce_shared``, element by element against an oracle;
DDP with ``shared_allreduce_hook`` equal to one process; no segment left behind."""

import pytest

from conftest import check, launch

pytest.importorskip("torch")


@pytest.mark.parametrize("n", [2, 3])
def test_empty_shared_all_reduce_and_ddp_hook(n):
    check(launch(n, "torch_shared.py", timeout=300, env={"PSY_TIMEOUT": "60"}), n, "shared OK")
