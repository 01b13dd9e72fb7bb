"""The NumPy API under psyrun on 1-4 ranks: every collective x dtype x op (blocking and async)
against a NumPy oracle, argument errors, psyne's error kinds, and the GIL released while a
collective blocks."""

import subprocess
import sys

import numpy as np
import pytest

from conftest import check, launch

COLLECTIVES = ["all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "scatter", "gather", "all_to_all", "send_recv", "misc"]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("coll", COLLECTIVES)
def test_collective_matrix(n, coll):
    p = launch(n, "numpy_matrix.py", coll, timeout=240)
    check(p, n, f"{coll} OK")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_argument_errors(n):
    check(launch(n, "numpy_errors.py", "arguments"), n)


def test_mismatch_raises_mismatch_error_on_every_rank():
    # Two ranks: psyne guarantees both hear of the disagreement. (With three, a rank on the node
    # board against two in a ring can leave the two to time out: a core-library limit.)
    check(launch(2, "numpy_errors.py", "mismatch", env={"PSY_TIMEOUT": "20"}), 2)


def test_peer_lost():
    p = launch(3, "numpy_errors.py", "peer_lost")
    check(p, 2)
    assert "PeerLostError" in p.stdout


def test_timeout_raises_timeout_error():
    p = launch(2, "numpy_errors.py", "timeout", env={"PSY_TIMEOUT": "1"})
    check(p, 2)
    assert "TimeoutError after" in p.stdout


def test_a_forked_child_is_refused_every_call():
    # Issue 33, item 3: a child forked after init() joined the other rank's all-reduce.
    check(launch(2, "numpy_errors.py", "fork", env={"PSY_TIMEOUT": "20"}), 2)


def test_two_threads_calling_one_group_at_once_are_refused():
    # Issue 33, item 12: two threads' calls paired across ranks in whatever order they came.
    check(launch(2, "numpy_errors.py", "threads", env={"PSY_TIMEOUT": "20"}), 2)


def test_gil_is_released_during_a_blocking_collective():
    p = launch(2, "numpy_errors.py", "gil")
    check(p, 2)
    assert "counted" in p.stdout


def test_import_psyne_does_not_import_torch():
    code = "import sys, psyne; g = psyne.init(); assert g.size == 1; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_alone_world_of_one_in_process():
    import psyne

    g = psyne.alone()
    x = np.arange(6, dtype=np.float32)
    assert g.all_reduce(x) is x
    np.testing.assert_array_equal(g.all_gather(x), x[None, :])
    assert g.gather(x) is not None
    with pytest.raises(ValueError, match="contiguous"):
        g.all_reduce(np.arange(6.0)[::2])
    with pytest.raises(TypeError, match="not supported"):
        g.all_reduce(np.zeros(3, np.complex128))
    with pytest.raises(psyne.InvalidArgumentError):
        g.all_reduce(x, "bxor")
    # zero-copy: the result is the caller's memory
    y = np.zeros(4, np.int32)
    assert np.shares_memory(g.broadcast(y), y)


def test_dlpack_objects_are_used_in_place():
    torch = pytest.importorskip("torch")
    import psyne

    g = psyne.alone()
    t = torch.zeros(5)
    out = g.broadcast(t)  # a torch tensor through __dlpack__: a NumPy view of its memory
    out[:] = 7.0
    assert t.tolist() == [7.0] * 5
    with pytest.raises(ValueError, match="contiguous"):
        g.all_reduce(torch.zeros(4, 4).t())


def test_elastic_state_recovers_a_loop_after_a_rank_dies():
    p = launch(4, "elastic_state.py", flags=("--on-failure", "continue"))
    check(p, 3, "OK elastic")
    assert "go on without it (--on-failure continue)" in p.stderr, p.stderr


def test_restart_count_reads_psyrun_then_torchrun(monkeypatch):
    import psyne

    monkeypatch.delenv("PSY_RESTART_COUNT", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert psyne.elastic.restart_count() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert psyne.elastic.restart_count() == 2
    monkeypatch.setenv("PSY_RESTART_COUNT", "1")
    assert psyne.elastic.restart_count() == 1
