"""FSDP2 and DeviceMesh over the psyne backend, under psyrun: ``fully_shard`` per layer and on
the root over a 1-D mesh, and HSDP over a 2-D (replicate x shard) mesh, on 2 and 4 ranks, each
step's loss and the final parameters equal to one process's (and the same run over Gloo as a
cross-check of the test itself). The worker first checks, element by element, the collectives
FSDP2 needs: group names, reduce_scatter_tensor with SUM/AVG/PREMUL_SUM, the coalesced forms,
uneven all_to_all_single."""

import pytest

from conftest import check, launch

pytest.importorskip("torch")


@pytest.mark.parametrize("n,mode", [(2, "fsdp"), (4, "fsdp"), (2, "hsdp"), (4, "hsdp")])
def test_fsdp2_trains_as_one_process(n, mode):
    check(launch(n, "torch_fsdp.py", mode, timeout=300), n, "fsdp OK")


def test_fsdp2_over_gloo_gives_the_same_losses():
    check(launch(2, "torch_fsdp.py", "fsdp", "gloo", timeout=300), 2, "fsdp OK")
